-- klua.controller's queue and reconciles beyond client-go's: fresh changes
-- go ahead of the initial list, a reconcile learns what caused it, bursts
-- are debounced, and reconcile_timeout ends a reconcile stuck on the API.
local testing = require('klua.testing')
local K = require('support.klua')

local function run(sb, body)
  return K.run_script_ok(body, { kubeconfig = sb.kubeconfig, timeout = 60 })
end

-- Creates configmaps PREFIX-000 ... PREFIX-(n-1) in default, labelled set=PREFIX.
local function configmaps(sb, prefix, n)
  for i = 0, n - 1 do
    local status, body = sb:request('POST', '/api/v1/namespaces/default/configmaps', { apiVersion = 'v1',
      kind = 'ConfigMap', metadata = { name = ('%s-%03d'):format(prefix, i), labels = { set = prefix } },
      data = { x = '0' } })
    assert(status == 201, body)
  end
end

describe('a controller', function()
  local sb = testing.with_sandbox()

  -- The first reconcile changes the last listed object and waits until
  -- the watch has brought the change (the script's own handler runs after
  -- the controller's); the next key the one worker takes is that object's,
  -- not the second of the list.
  it('reconciles a change made after the sync before the keys of the initial list', function()
    configmaps(sb, 'fresh', 30)
    local out = run(sb, [[
      local cms = klua.informer { resource = 'configmaps', namespace = 'default', label_selector = 'set=fresh' }
      local order, seen_change = {}, false
      klua.controller { watches = { cms }, reconcile = function(key, ctx)
        order[#order + 1] = key
        if #order == 1 then
          assert(ctx.cause.event == 'add' and ctx.cause.initial and ctx.priority == -100)
          assert(klua.api.patch('configmaps', 'default/fresh-029', { data = { x = '1' } }))
          while not seen_change do klua.sleep(0.01) end
        elseif key == 'default/fresh-029' then
          local events = {}
          for _, c in ipairs(ctx.causes) do events[#events + 1] = c.event end
          print(#order, ctx.priority, table.concat(events, ','), table.concat(ctx.cause.changed, ','),
            ctx.cause.informer, ctx.cause.object)
          klua.stop()
        end
      end }
      cms:on('update', function(_, new)
        if new.metadata.name == 'fresh-029' then seen_change = true end
      end)
    ]])
    assert.equals('2\t0\tadd,update\tdata.x\tconfigmaps -n default -l set=fresh\tdefault/fresh-029\n', out)
  end)

  it('reports a changed status as "status", without resourceVersion and managedFields, by default', function()
    local out = run(sb, [[
      local api = klua.api
      local pods = klua.informer { resource = 'pods', namespace = 'default', label_selector = 'set=why-status' }
      klua.controller { watches = { pods }, reconcile = function(key, ctx)
        local c = ctx.cause
        if c.event == 'add' then
          local pod = klua.copy(assert(api.get('pods', key)))
          pod.status = { phase = 'Running', conditions = { { type = 'Ready', status = 'True' } } }
          assert(api.update_status('pods', pod))
        elseif c.event == 'update' and c.changed[1] == 'status' then
          print(table.concat(c.changed, ','))
          assert(api.patch('pods', key, { metadata = { labels = { tier = 'web' } } }))
        elseif c.event == 'update' then
          print(table.concat(c.changed, ','))
          klua.stop()
        end
      end }
      klua.on_synced(function()
        assert(api.create('pods', { metadata = { name = 'why-status', namespace = 'default',
          labels = { set = 'why-status' } }, spec = { containers = { { name = 'app', image = 'app:1' } } } }))
      end)
    ]])
    assert.equals('status\nmetadata.labels.tier\n', out)
  end)

  it('says which owned object caused a reconcile, and every changed path when asked', function()
    local out = run(sb, [[
      local api = klua.api
      local owners = klua.informer { resource = 'configmaps', namespace = 'default', label_selector = 'role=owner' }
      local children = klua.informer { resource = 'secrets', namespace = 'default', label_selector = 'role=child' }
      local step = 0
      klua.controller { watches = { owners }, owns = { children }, changed_paths = 'all',
        reconcile = function(key, ctx)
          step = step + 1
          local c = ctx.cause
          if step == 1 then
            local owner = assert(api.get('configmaps', key))
            assert(api.create('secrets', { metadata = { name = 'why-child', namespace = 'default',
              labels = { role = 'child' }, ownerReferences = { { apiVersion = 'v1', kind = 'ConfigMap',
              name = owner.metadata.name, uid = owner.metadata.uid, controller = true } } } }))
          elseif c.event == 'add' and c.owner then
            assert(api.patch('secrets', 'default/why-child', { stringData = { k = 'v' } }))
          elseif c.event == 'update' and c.owner then
            print(key, c.informer, c.object, table.concat(c.changed, ','))
            klua.stop()
          end
        end }
      klua.on_synced(function()
        assert(api.create('configmaps', { metadata = { name = 'why-owner', namespace = 'default',
          labels = { role = 'owner' } } }))
      end)
    ]])
    assert.equals('default/why-owner\tsecrets -n default -l role=child\tdefault/why-child\t'
      .. 'data,metadata.managedFields,metadata.resourceVersion\n', out)
  end)

  -- The object is created and updated 9 times in a row; with a debounce of
  -- 3 s, far longer than a write takes, the 10 events are one reconcile.
  it('coalesces a burst of events on one key into one reconcile under debounce', function()
    local out = run(sb, [[
      local api = klua.api
      local cms = klua.informer { resource = 'configmaps', namespace = 'default', label_selector = 'set=burst' }
      local reconciles, events = 0, 0
      klua.controller { watches = { cms }, debounce = 3, reconcile = function(key, ctx)
        reconciles = reconciles + 1
        print(key, reconciles, events, #ctx.causes, ctx.causes[1].event, ctx.cause.event)
        klua.stop()
      end }
      cms:on('add', function() events = events + 1 end)
      cms:on('update', function() events = events + 1 end)
      klua.on_synced(function()
        assert(api.create('configmaps', { metadata = { name = 'burst', namespace = 'default',
          labels = { set = 'burst' } }, data = { n = '0' } }))
        for i = 1, 9 do assert(api.patch('configmaps', 'default/burst', { data = { n = tostring(i) } })) end
      end)
    ]])
    assert.equals('default/burst\t1\t10\t10\tadd\tupdate\n', out)
  end)

  -- Every request waits 30 s in the sandbox from the first reconcile on:
  -- each attempt's GET is cancelled after reconcile_timeout, counted, and
  -- the key retried after its backoff.
  it('ends a reconcile stuck on a slow API call after reconcile_timeout, counts it and retries the key', function()
    local ok, out = pcall(run, sb, [[
      local core = require('klua.core')
      local cms = klua.informer { resource = 'configmaps', namespace = 'default', label_selector = 'never=matches' }
      local c
      c = klua.controller { name = 'slow', watches = { cms }, reconcile_timeout = 0.5, reconcile = function(key, ctx)
        if ctx.attempt == 1 then
          assert(core.request('POST', '/sandbox/v1/faults', '{"delay": 30}', 'application/json') == 200)
        end
        local started = core.now()
        local obj, err = klua.api.get('configmaps', key)
        print(ctx.attempt, ctx.cause.event, ctx.cause.reason, obj, err.reason, core.now() - started < 20)
        if ctx.attempt == 2 then
          klua.after(0, function()
            local text = klua.metrics.expose()
            print(text:match('controller_runtime_reconcile_timeouts_total{controller="slow"} (%d+)'),
              c:stats().timeouts, c:stats().failures)
            klua.stop()
          end)
        end
        return obj
      end }
      c:enqueue('default/anything')
    ]])
    sb:reset_faults()
    assert(ok, out)
    assert.equals('1\tenqueue\tnil\tnil\tDeadlineExceeded\ttrue\n'
      .. '2\trequeue\ttimeout\tnil\tDeadlineExceeded\ttrue\n'
      .. '2\t2\t2\n', out)
  end)
end)
