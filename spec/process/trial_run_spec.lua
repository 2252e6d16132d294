-- Trial runs (docs/deploy.md): `klua run --dry-run` sends every write with
-- dryRun=All, persists nothing and logs each write as a diff against the
-- cached object; `--once` reconciles every key of the initial sync once and
-- exits, 0 when every reconcile succeeded, 1 naming the keys that failed.
local testing = require('klua.testing')
local K = require('support.klua')
local sandbox = require('support.sandbox')

-- A controller of the ConfigMaps labelled role=parent in the namespace
-- given as argument: it sets data.mode = "managed", creates the child
-- <name>-child (role=child) and deletes <name>-old; it prints each
-- reconcile, and whether the child was cached.
local PARENTS = [[
  local ns = ...
  local parents = klua.informer { resource = 'configmaps', namespace = ns, label_selector = 'role=parent' }
  local children = klua.informer { resource = 'configmaps', namespace = ns, label_selector = 'role=child' }
  klua.controller { name = 'parents', watches = { parents }, owns = { children }, reconcile = function(key, ctx)
    local p = parents:get(key)
    if not p then return end
    print(('reconcile %s child-cached=%s'):format(key, tostring(children:get(key .. '-child') ~= nil)))
    if p.data and p.data.fail then return nil, 'told to fail' end
    if p.data and p.data.requeue then return klua.requeue_after(0) end
    local obj = klua.copy(p)
    obj.data = obj.data or {}
    obj.data.mode = 'managed'
    local _, err = klua.api.update(parents, obj)
    if err then return nil, err end
    local child = { apiVersion = 'v1', kind = 'ConfigMap',
      metadata = { name = p.metadata.name .. '-child', namespace = ns, labels = { role = 'child' } } }
    assert(klua.helpers.set_controller_reference(p, child))
    local _, cerr = klua.api.create('configmaps', child)
    if cerr and not klua.api.is_already_exists(cerr) then return nil, cerr end
    local _, derr = klua.api.delete('configmaps', key .. '-old')
    if derr and not klua.api.is_not_found(derr) then return nil, derr end
  end }
]]

describe('klua run --dry-run', function()
  local sb = testing.with_sandbox()
  local namespace = sandbox.namespaces(sb, 'trial')
  local track = K.per_spec()

  local function create(ns, name, labels, data)
    return sandbox.create_configmap(sb, ns, name, { labels = labels }, data)
  end

  it('writes nothing, logs each write as a diff, and reconciles as if nothing had been written', function()
    local ns = namespace()
    create(ns, 'web', { role = 'parent' }, { mode = 'manual' })
    create(ns, 'web-old', { role = 'old' })
    local p = track(K.spawn({ '--kubeconfig', sb.kubeconfig, '--dry-run', 'run', K.script(PARENTS), ns }))
    local L = K.literally
    p:wait_log(L(('dry run: update configmaps %s/web: data.mode "manual" → "managed"'):format(ns)), 20)
    p:wait_log(L(('dry run: create configmaps %s/web-child: metadata.labels.role (none) → "child"; metadata.name (none) → "web-child"; '):format(ns)), 20)
    p:wait_log(L(('dry run: delete configmaps %s/web-old: deleted'):format(ns)), 20)
    assert.matches(L('metadata.ownerReferences (none) → [{'), p:errors())
    -- The child's creation was not recorded as a write to observe: the
    -- next reconcile (a change to the parent brings it) starts at once and
    -- finds the child missing again.
    assert.equals(200, (sb:json('PATCH', sandbox.configmap_path(ns, 'web'), { data = { other = 'x' } },
      { ['Content-Type'] = 'application/merge-patch+json' })))
    local once = ('reconcile %s/web child-cached=false\n'):format(ns)
    assert.is_true(p:wait_for(L(once .. once), 20), p:output())
    testing.eventually(function()
      local creates = K.count(p:errors(), L(('dry run: create configmaps %s/web-child'):format(ns)))
      return creates == 2
    end, 20, { what = 'a second dry-run create of the child' })
    local _, cm = sb:json('GET', sandbox.configmap_path(ns, 'web'))
    assert.equals('manual', cm.data.mode)
    assert.equals(404, (sb:json('GET', sandbox.configmap_path(ns, 'web-child'))))
    assert.equals(200, (sb:json('GET', sandbox.configmap_path(ns, 'web-old'))))
    assert.is_nil(p:errors():find('without the cache holding its own writes', 1, true))
  end)

  it('sends a patch, an apply and plain requests with dryRun=All too, a DELETE\'s in its body', function()
    local ns = namespace()
    create(ns, 'x', { role = 'other' })
    assert.equals(201, (sb:json('POST', sandbox.configmap_path(ns), { metadata = { name = 'guarded',
      finalizers = { 'example.com/guard' } } })))
    local out, err = K.run_script_ok([[
      local ns = ...
      assert(klua.api.patch('configmaps', ns .. '/x', { data = { b = '2' } }))
      assert(klua.api.delete('configmaps', ns .. '/guarded'))
      assert(klua.api.apply({ apiVersion = 'v1', kind = 'ConfigMap', metadata = { name = 'y', namespace = ns },
        data = { c = '3' } }, { field_manager = 'trial' }))
      assert(klua.api.request('POST', '/api/v1/namespaces/' .. ns .. '/configmaps',
        { apiVersion = 'v1', kind = 'ConfigMap', metadata = { name = 'z' } }))
      assert(klua.api.request('DELETE', '/api/v1/namespaces/' .. ns .. '/configmaps/x',
        { kind = 'DeleteOptions', apiVersion = 'v1' }))
      print('done')
    ]], { kubeconfig = sb.kubeconfig, flags = { '--dry-run' }, args = { ns } })
    assert.equals('done\n', out)
    assert.matches(('dry run: patch configmaps %s/x: data.b %%(none%%) → "2"'):format(K.literally(ns)), err)
    assert.matches(('dry run: apply configmaps %s/y: data.c %%(none%%) → "3"'):format(K.literally(ns)), err)
    assert.matches(('dry run: delete configmaps %s/guarded: kept, marked for deletion, until its finalizers are removed: '
      .. '["example.com/guard"]'):format(ns), err, 1, true)
    assert.matches('dry run: POST /api/v1/namespaces/' .. K.literally(ns) .. '/configmaps', err)
    assert.matches('dry run: DELETE /api/v1/namespaces/' .. K.literally(ns) .. '/configmaps/x', err)
    local _, x = sb:json('GET', sandbox.configmap_path(ns, 'x'))
    assert.is_nil(x.data)
    assert.equals(404, (sb:json('GET', sandbox.configmap_path(ns, 'y'))))
    assert.equals(404, (sb:json('GET', sandbox.configmap_path(ns, 'z'))))
    local _, guarded = sb:json('GET', sandbox.configmap_path(ns, 'guarded'))
    assert.is_nil(guarded.metadata.deletionTimestamp)
  end)

  it('refuses leader election: a trial run must not take the Lease from the controller in production', function()
    local _, err, code = K.run_script('klua.stop()', { kubeconfig = sb.kubeconfig, flags = { '--dry-run', '--leader-elect' } })
    assert.equals(2, code)
    assert.matches('--dry-run runs without leader election', err, 1, true)
  end)
end)

describe('klua run --once', function()
  local sb = testing.with_sandbox()
  local namespace = sandbox.namespaces(sb, 'once')

  local function create(ns, name, labels, data)
    sandbox.create_configmap(sb, ns, name, { labels = labels }, data)
  end

  it('reconciles every key of the initial sync once, a requeue ignored, and exits 0', function()
    local ns = namespace()
    create(ns, 'a', { role = 'parent' })
    create(ns, 'b', { role = 'parent' }, { requeue = 'yes' })
    local out, err = K.run_script_ok(PARENTS, { kubeconfig = sb.kubeconfig, flags = { '--once' }, args = { ns } })
    local lines = K.lines(out)
    table.sort(lines)
    assert.same({ ('reconcile %s/a child-cached=false'):format(ns), ('reconcile %s/b child-cached=false'):format(ns) },
      lines)
    assert.matches('--once: reconciled 2 keys of 1 controller, every one successfully', err, 1, true)
    local _, a = sb:json('GET', sandbox.configmap_path(ns, 'a'))
    assert.equals('managed', a.data.mode)
  end)

  it('counts a failed reconcile once, without retrying it, and exits 1 naming its key', function()
    local ns = namespace()
    create(ns, 'good', { role = 'parent' })
    create(ns, 'bad', { role = 'parent' }, { fail = 'yes' })
    local out, err, code = K.run_script(PARENTS, { kubeconfig = sb.kubeconfig, flags = { '--once' }, args = { ns } })
    assert.equals(1, code, err)
    local bad = K.count(out, 'reconcile ' .. K.literally(ns) .. '/bad')
    assert.equals(1, bad)
    assert.matches(('--once: 1 of 2 reconciles failed: parents %s/bad'):format(ns), err, 1, true)
  end)

  it('leaves alone a key first queued after the initial sync', function()
    local ns = namespace()
    create(ns, 'a', { role = 'parent' })
    create(ns, 'b', { role = 'parent' })
    -- a's reconcile makes a new parent; b's waits until the cache holds it,
    -- so that its event has queued its key before the run can end.
    local out = K.run_script_ok([[
      local ns = ...
      local parents = klua.informer { resource = 'configmaps', namespace = ns, label_selector = 'role=parent' }
      klua.controller { name = 'parents', watches = { parents }, reconcile = function(key)
        print('reconcile ' .. key)
        if key == ns .. '/a' then
          assert(klua.api.create('configmaps', { metadata = { name = 'late', namespace = ns, labels = { role = 'parent' } } }))
        else
          while not parents:get(ns .. '/late') do klua.sleep(0.05) end
        end
      end }
    ]], { kubeconfig = sb.kubeconfig, flags = { '--once' }, args = { ns } })
    assert.equals(('reconcile %s/a\nreconcile %s/b\n'):format(ns, ns), out)
  end)

  it('with --leader-elect, reconciles once it leads', function()
    local ns = namespace()
    create(ns, 'a', { role = 'parent' })
    local out, err = K.run_script_ok(PARENTS, { kubeconfig = sb.kubeconfig, args = { ns },
      flags = { '--once', '--leader-elect', '--leader-election-namespace', ns } })
    assert.equals(('reconcile %s/a child-cached=false\n'):format(ns), out)
    assert.matches('--once: reconciled 1 key of 1 controller, every one successfully', err, 1, true)
    local status, lease = sb:json('GET', '/apis/coordination.k8s.io/v1/namespaces/' .. ns .. '/leases/script')
    assert.equals(200, status)
    assert.truthy(lease.spec.leaseDurationSeconds)
  end)

  it('exits 0 at once when the script made no controller', function()
    local _, err = K.run_script_ok('klua.informer "configmaps"', { kubeconfig = sb.kubeconfig, flags = { '--once' } })
    assert.matches('--once: the script made no controller: nothing to reconcile', err, 1, true)
  end)

  it('with --dry-run, tries every key against the cluster and changes nothing', function()
    local ns = namespace()
    create(ns, 'a', { role = 'parent' }, { mode = 'manual' })
    local out, err = K.run_script_ok(PARENTS, { kubeconfig = sb.kubeconfig, flags = { '--dry-run', '--once' },
      args = { ns } })
    assert.equals(('reconcile %s/a child-cached=false\n'):format(ns), out)
    assert.matches('dry run: update configmaps ' .. K.literally(ns) .. '/a: data.mode "manual" → "managed"', err)
    local _, a = sb:json('GET', sandbox.configmap_path(ns, 'a'))
    assert.equals('manual', a.data.mode)
  end)

  it('refuses --shards, which reconciles only part of the keys', function()
    local _, err, code = K.run_script('klua.stop()', { kubeconfig = sb.kubeconfig,
      flags = { '--once', '--leader-elect', '--shards', '2' } })
    assert.equals(2, code)
    assert.matches('--once reconciles every key once, --shards only those', err, 1, true)
  end)
end)
