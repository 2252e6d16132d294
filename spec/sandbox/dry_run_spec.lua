-- dryRun=All in the sandbox as kube-apiserver 1.32 answers it: every write is
-- admitted, validated and answered as it would be, and nothing is stored, so
-- no watch event follows (staging/src/k8s.io/apiserver/pkg/registry/generic/
-- registry/dryrun.go, DryRunnableStorage; store.go Delete returns the dry run's
-- marked object for one kept by finalizers). "All" is the only value
-- (ValidateDryRun in apimachinery's meta/v1/validation), and a DELETE with a
-- body reads its DeleteOptions, dryRun included, from the body alone
-- (endpoints/handlers/delete.go).
local testing = require('klua.testing')
local sandbox = require('support.sandbox')

local CM = '/api/v1/namespaces/%s/configmaps'
local APPLY = { ['Content-Type'] = 'application/apply-patch+yaml' }
local MERGE = { ['Content-Type'] = 'application/merge-patch+json' }

describe('sandbox dryRun=All', function()
  local sb = testing.with_sandbox()
  local namespace = sandbox.namespaces(sb, 'dry')

  local function create(ns, name, meta) return sandbox.create_configmap(sb, ns, name, meta, { a = '1' }) end

  -- The events a watch of ns from its current state gets while fn runs, up to
  -- a real write made after fn (the marker), which every watcher sees last.
  local function events_during(ns, fn)
    local _, list = sb:json('GET', CM:format(ns))
    local w = sb:watch(CM:format(ns) .. '?watch=1&resourceVersion=' .. list.metadata.resourceVersion)
    fn()
    create(ns, 'marker')
    assert.truthy(w.wait_for(function(evs)
      for _, e in ipairs(evs) do
        if e.object and e.object.metadata.name == 'marker' then return true end
      end
    end, 10), w.text())
    w.stop()
    local seen = {}
    for _, e in ipairs(w.events()) do
      if e.object.metadata.name ~= 'marker' then seen[#seen + 1] = e.type .. ' ' .. e.object.metadata.name end
    end
    return seen
  end

  it('answers a create, an update, patches and an apply as written, and stores nothing', function()
    local ns = namespace()
    local cur = create(ns, 'kept')
    local seen = events_during(ns, function()
      local status, obj = sb:json('POST', CM:format(ns) .. '?dryRun=All',
        { metadata = { name = 'fresh' }, data = { b = '2' } })
      assert.equals(201, status)
      assert.equals('2', obj.data.b)
      assert.truthy(obj.metadata.uid)
      assert.is_nil(obj.metadata.resourceVersion)

      local changed = { metadata = { name = 'kept', resourceVersion = cur.metadata.resourceVersion },
        data = { a = 'updated' } }
      status, obj = sb:json('PUT', CM:format(ns) .. '/kept?dryRun=All', changed)
      assert.equals(200, status)
      assert.equals('updated', obj.data.a)
      assert.equals(cur.metadata.resourceVersion, obj.metadata.resourceVersion)

      status, obj = sb:json('PATCH', CM:format(ns) .. '/kept?dryRun=All', { data = { a = 'patched' } }, MERGE)
      assert.equals(200, status)
      assert.equals('patched', obj.data.a)

      status, obj = sb:json('PATCH', CM:format(ns) .. '/applied?dryRun=All&fieldManager=t',
        { apiVersion = 'v1', kind = 'ConfigMap', metadata = { name = 'applied' }, data = { c = '3' } }, APPLY)
      assert.equals(201, status)
      assert.equals('3', obj.data.c)
    end)
    assert.same({}, seen)
    assert.equals(404, (sb:json('GET', CM:format(ns) .. '/fresh')))
    assert.equals(404, (sb:json('GET', CM:format(ns) .. '/applied')))
    local _, kept = sb:json('GET', CM:format(ns) .. '/kept')
    assert.equals('1', kept.data.a)
    assert.equals(cur.metadata.resourceVersion, kept.metadata.resourceVersion)
  end)

  it('still validates: a conflict, a duplicate and an invalid object fail as without it', function()
    local ns = namespace()
    create(ns, 'kept')
    assert.equals(409, (sb:json('POST', CM:format(ns) .. '?dryRun=All', { metadata = { name = 'kept' } })))
    assert.equals(409, (sb:json('PUT', CM:format(ns) .. '/kept?dryRun=All',
      { metadata = { name = 'kept', resourceVersion = '1' } })))
    assert.equals(422, (sb:json('POST', CM:format(ns) .. '?dryRun=All', { metadata = { name = 'Not_Valid' } })))
  end)

  it('answers a delete as it would happen, the object kept by a finalizer marked, and deletes nothing', function()
    local ns = namespace()
    create(ns, 'plain')
    create(ns, 'guarded', { finalizers = { 'example.com/guard' } })
    local seen = events_during(ns, function()
      local status, body = sb:json('DELETE', CM:format(ns) .. '/plain',
        { kind = 'DeleteOptions', apiVersion = 'v1', dryRun = { 'All' } })
      assert.equals(200, status)
      assert.equals('Success', body.status)
      status, body = sb:json('DELETE', CM:format(ns) .. '/guarded?dryRun=All')
      assert.equals(200, status)
      assert.truthy(body.metadata.deletionTimestamp)
    end)
    assert.same({}, seen)
    assert.equals(200, (sb:json('GET', CM:format(ns) .. '/plain')))
    local _, guarded = sb:json('GET', CM:format(ns) .. '/guarded')
    assert.is_nil(guarded.metadata.deletionTimestamp)
  end)

  it('reads a DELETE\'s dryRun from its body when it has one, as the handler decodes DeleteOptions', function()
    local ns = namespace()
    create(ns, 'x')
    local status = sb:json('DELETE', CM:format(ns) .. '/x?dryRun=All', { kind = 'DeleteOptions', apiVersion = 'v1' })
    assert.equals(200, status)
    assert.equals(404, (sb:json('GET', CM:format(ns) .. '/x')))
  end)

  it('refuses any value but All with 422 on the options', function()
    local ns = namespace()
    create(ns, 'x')
    local status, body = sb:json('POST', CM:format(ns) .. '?dryRun=true', { metadata = { name = 'y' } })
    assert.equals(422, status)
    assert.equals('CreateOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: "true": supported values: "All"',
      body.message)
    status, body = sb:json('PATCH', CM:format(ns) .. '/x?dryRun=yes', { data = { a = '2' } }, MERGE)
    assert.equals(422, status)
    assert.matches('^PatchOptions', body.message)
    status, body = sb:json('DELETE', CM:format(ns) .. '/x', { kind = 'DeleteOptions', apiVersion = 'v1', dryRun = { 'Some' } })
    assert.equals(422, status)
    assert.matches('^DeleteOptions', body.message)
    assert.equals(404, (sb:json('GET', CM:format(ns) .. '/y')))
    assert.equals(200, (sb:json('GET', CM:format(ns) .. '/x')))
  end)
end)
