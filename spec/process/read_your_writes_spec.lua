-- Read your own writes: a controller's reconcile of a key does not start
-- until its informers hold what klua.api last wrote to that key's object
-- and to the objects it controls, so that a controller written the obvious
-- way (read the cache, copy, update with the cached resourceVersion,
-- requeue at once) neither conflicts nor creates twice when the watch
-- trails the writes (the sandbox's --watch-lag, as a loaded
-- kube-apiserver's watch cache); past a bound it goes ahead, counted.
local testing = require('klua.testing')
local K = require('support.klua')

local function run(sb, body, args)
  return K.run_script_ok(body, { kubeconfig = sb.kubeconfig, args = args, timeout = 60 })
end

-- The obvious controller: each reconcile adds 1 to data.n of the
-- ConfigMap until it reaches 20, then prints what it saw. args: the
-- ConfigMap's name, then read_your_writes ("default", "false" or seconds).
-- With a bound shorter than the lag, it stops at the first reconcile that
-- went ahead at the bound.
local COUNTER = [[
  local name, bound = ...
  if bound == 'default' then bound = nil elseif bound == 'false' then bound = false else bound = tonumber(bound) end
  local cms = klua.informer { resource = 'configmaps', namespace = 'default', label_selector = 'app=' .. name }
  local conflicts, c = 0, nil
  local function report(n)
    local s = c:stats()
    print(('n=%d conflicts=%d waits=%s timeouts=%s lag=%s'):format(n, conflicts, tostring(s.stale_read_waits),
      tostring(s.stale_read_timeouts), cms.lag and (cms:lag() > 0 and 'behind' or '0') or 'none'))
    local _, _, metrics = require('klua.internal.endpoint').handle('/metrics')
    for line in metrics:gmatch('[^\n]+') do
      if line:find('stale_read') or line:find('write_lag') then print(line) end
    end
    klua.stop()
  end
  c = klua.controller { name = 'counter', watches = { cms }, read_your_writes = bound, reconcile = function(key)
    local cm = cms:get(key)
    if not cm then return end
    local n = tonumber(cm.data.n)
    if n >= 20 or (c:stats().stale_read_timeouts or 0) > 0 then return report(n) end
    local obj = klua.copy(cm)
    obj.data.n = tostring(n + 1)
    local _, err = klua.api.update(cms, obj)
    if klua.api.is_conflict(err) then conflicts = conflicts + 1 end
    if err then return nil, err end
    return klua.requeue_after(0)
  end }
]]

local function counter(sb, name)
  local status = sb:json('POST', '/api/v1/namespaces/default/configmaps',
    { metadata = { name = name, labels = { app = name } }, data = { n = '0' } })
  assert.equals(201, status)
end

describe('a controller with a watch that trails the writes by 0.3 s', function()
  local sb = testing.with_sandbox { args = { '--watch-lag', '0.3' } }

  it('makes 20 successive increments of the cached object without a conflict', function()
    counter(sb, 'obvious')
    local out = run(sb, COUNTER, { 'obvious', 'default' })
    local n, conflicts, waits, timeouts, lag = out:match('n=(%d+) conflicts=(%d+) waits=(%d+) timeouts=(%d+) lag=(%S+)')
    assert.equals('20', n, out)
    assert.equals('0', conflicts, out)
    assert.is_true(tonumber(waits) >= 1, out)
    assert.equals('0', timeouts, out)
    assert.equals('0', lag, out)
    assert.matches('klua_controller_stale_read_waits_total{controller="counter"} ' .. waits, out, 1, true)
    assert.matches('klua_controller_stale_read_timeouts_total{controller="counter"} 0', out, 1, true)
    assert.matches('klua_informer_write_lag_seconds{resource="configmaps -n default -l app=obvious"} 0', out, 1, true)
  end)

  it('conflicts without it (read_your_writes = false), as client-go and controller-runtime do', function()
    counter(sb, 'unguarded')
    local out = run(sb, COUNTER, { 'unguarded', 'false' })
    local n, conflicts = out:match('n=(%d+) conflicts=(%d+)')
    assert.equals('20', n, out)
    assert.is_true(tonumber(conflicts) > 0, out)
  end)

  it('refuses a read_your_writes that is not seconds, true or false, saying what it takes', function()
    local _, err, code = K.run_script([[
      klua.controller { watches = { klua.informer 'configmaps' }, read_your_writes = '10s', reconcile = print }
    ]], { kubeconfig = sb.kubeconfig })
    assert.is_not.equals(0, code)
    assert.matches('read_your_writes must be a number of seconds (the most a reconcile waits for its own writes), true or false',
      err, 1, true)
  end)

  -- The children's events enqueue the parent (owns): its next reconcile
  -- waits for the child it just created instead of creating another.
  it('creates a missing child once, though it reconciles again at once', function()
    local status = sb:json('POST', '/api/v1/namespaces/default/configmaps',
      { metadata = { name = 'parent', labels = { role = 'parent' } } })
    assert.equals(201, status)
    local out = run(sb, [[
      local parents = klua.informer { resource = 'configmaps', namespace = 'default', label_selector = 'role=parent' }
      local children = klua.informer { resource = 'configmaps', namespace = 'default', label_selector = 'role=child' }
      local reconciles, created = 0, 0
      klua.controller { watches = { parents }, owns = { children }, reconcile = function(key)
        local p = parents:get(key)
        if not p then return end
        reconciles = reconciles + 1
        if reconciles > 5 then
          print(('created=%d cached=%d'):format(created, #children:list()))
          return klua.stop()
        end
        for _, child in ipairs(children:list()) do
          local ref = klua.helpers.get_controller_of(child)
          if ref and ref.uid == p.metadata.uid then return klua.requeue_after(0) end
        end
        local child = { apiVersion = 'v1', kind = 'ConfigMap',
          metadata = { generateName = 'child-', namespace = 'default', labels = { role = 'child' } } }
        assert(klua.helpers.set_controller_reference(p, child))
        assert(klua.api.create('configmaps', child))
        created = created + 1
        return klua.requeue_after(0)
      end }
    ]])
    assert.equals('created=1 cached=1\n', out)
  end)
end)

describe('a controller whose watch trails its writes by longer than its bound', function()
  local sb = testing.with_sandbox { args = { '--watch-lag', '5' } }

  it('reconciles at the bound, counts it, and says how far behind the informer is', function()
    counter(sb, 'late')
    -- The informer's first LIST (resourceVersion "0") is served from the
    -- watch cache: wait until that holds the ConfigMap.
    testing.eventually(function()
      local _, list = sb:json('GET', '/api/v1/namespaces/default/configmaps?resourceVersion=0&labelSelector=app%3Dlate')
      return list and #list.items == 1
    end, 30, { what = 'the watch cache to hold the ConfigMap' })
    local out, err = run(sb, COUNTER, { 'late', '0.5' })
    local n, timeouts, lag = out:match('n=(%d+) conflicts=%d+ waits=%d+ timeouts=(%d+) lag=(%S+)')
    assert.equals('0', n, out)
    assert.equals('1', timeouts, out)
    assert.equals('behind', lag, out)
    assert.matches('klua_controller_stale_read_timeouts_total{controller="counter"} 1', out, 1, true)
    assert.matches('counter: reconciling default/late after 0.5 s without the cache holding its own writes', err, 1, true)
  end)
end)

describe('the writes kept for informers', function()
  local sb = testing.with_sandbox { args = { '--watch-lag', '0.3' } }

  it('are forgotten once observed, though no controller or metric asks', function()
    local out = run(sb, [[
      local writes = require('klua.internal.writes')
      local cms = klua.informer { resource = 'configmaps', namespace = 'default', label_selector = 'bulk=yes' }
      klua.on_synced(function()
        for round = 1, 3 do
          for i = 1, 100 do
            assert(klua.api.create('configmaps', { metadata = { name = ('bulk-%d-%d'):format(round, i),
              namespace = 'default', labels = { bulk = 'yes' } } }))
          end
          while #cms:list() < round * 100 do klua.sleep(0.05) end
        end
        print(writes.kept(cms) < 200, cms:lag(), writes.kept(cms))
        klua.stop()
      end)
    ]])
    assert.equals('true\t0\t0\n', out)
  end)
end)

describe('resourceVersions', function()
  it('compare as KEP-5504 says: as integers, by length and then digit by digit; others not at all', function()
    local out = K.run_script_ok([[
      local at_least = require('klua.internal.writes').at_least
      print(at_least('10', '9'), at_least('9', '10'), at_least('123', '123'), at_least('124', '123'),
        at_least('abc', '1'), at_least('012', '11'), at_least('', '1'))
    ]], { flags = { '--server', 'http://127.0.0.1:1' } })
    assert.equals('true\tfalse\ttrue\ttrue\tnil\tnil\tnil\n', out)
  end)
end)
