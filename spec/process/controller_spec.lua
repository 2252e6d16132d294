-- klua.controller turns informer events into keys in a work queue with
-- client-go's semantics, and runs reconcile functions as coroutines whose
-- API calls never block the loop.
local testing = require('klua.testing')
local K = require('support.klua')
local I = require('support.informer')

-- Runs the script body against sb; fails unless it exits 0. Returns stdout and stderr.
local function run(sb, body, timeout)
  return K.run_script_ok(body, { kubeconfig = sb.kubeconfig, timeout = timeout or 30 })
end

describe('a controller', function()
  local sb = testing.with_sandbox { bookmark_interval = 1 }

  -- A sentinel key enqueued by the first reconcile comes after anything
  -- still queued, so the report waits for the queue, not for a clock.
  it('reconciles a key added twice before it is processed only once', function()
    I.configmap(sb, 'dedupe')
    local out = run(sb, [[
      local cms = klua.informer { resource = 'configmaps', namespace = 'default', label_selector = 'never=matches' }
      local seen = {}
      local c
      c = klua.controller { watches = { cms }, reconcile = function(key)
        if key == 'sentinel' then
          print(#seen, seen[1], c:stats().adds)
          return klua.stop()
        end
        seen[#seen + 1] = key
        c:enqueue('sentinel')
      end }
      c:enqueue('default/dedupe')
      c:enqueue('default/dedupe')
    ]])
    assert.equals('1\tdefault/dedupe\t2\n', out)
  end)

  it('never reconciles one key in two workers at once, and reconciles it again when it changed meanwhile', function()
    local out = run(sb, [[
      local cms = klua.informer { resource = 'configmaps', namespace = 'default', label_selector = 'never=matches' }
      local running, overlap, calls = 0, 0, 0
      local c
      c = klua.controller { watches = { cms }, workers = 4, reconcile = function(key)
        if key == 'sentinel' then
          print(calls, overlap)
          return klua.stop()
        end
        running = running + 1
        if running > 1 then overlap = overlap + 1 end
        calls = calls + 1
        if calls == 1 then c:enqueue(key); c:enqueue(key) end
        klua.sleep(0.2)
        running = running - 1
        if calls == 2 then c:enqueue('sentinel') end
      end }
      c:enqueue('default/busy')
    ]])
    assert.equals('2\t0\n', out)
  end)

  it('runs several reconciles at once while their API calls wait', function()
    for i = 1, 4 do I.configmap(sb, 'par-' .. i) end
    local out = run(sb, [[
      local cms = klua.informer { resource = 'configmaps', namespace = 'default', label_selector = 'never=matches' }
      local active, most, done = 0, 0, 0
      local c = klua.controller { watches = { cms }, workers = 4, reconcile = function(key)
        active = active + 1
        most = math.max(most, active)
        local obj = assert(klua.api.get('configmaps', key))
        klua.sleep(0.3)
        active = active - 1
        done = done + 1
        if done == 4 then print(most, obj.kind); klua.stop() end
      end }
      for i = 1, 4 do c:enqueue('default/par-' .. i) end
    ]])
    assert.equals('4\tConfigMap\n', out)
  end)

  it('requeues a key after the delay given by klua.requeue_after', function()
    local out = run(sb, [[
      local cms = klua.informer { resource = 'configmaps', namespace = 'default', label_selector = 'never=matches' }
      local times = {}
      local c = klua.controller { watches = { cms }, reconcile = function(key)
        times[#times + 1] = require('klua.core').now()
        if #times < 3 then return klua.requeue_after(0.2) end
        print(#times, (times[3] - times[1]) >= 0.4)
        klua.stop()
      end }
      c:enqueue('default/later')
    ]])
    assert.equals('3\ttrue\n', out)
  end)

  -- controller-runtime's reconcile.TerminalError: logged and counted, not requeued.
  it('does not retry a key whose reconcile returned klua.terminal_error, and reconciles it when added again', function()
    local out, err = run(sb, [[
      local cms = klua.informer { resource = 'configmaps', namespace = 'default', label_selector = 'never=matches' }
      local calls = 0
      local c
      c = klua.controller { name = 'strict', watches = { cms }, reconcile = function(key)
        calls = calls + 1
        if calls > 1 then
          print(calls, c:stats().terminal_errors)
          return klua.stop()
        end
        klua.after(0, function()
          local s = c:stats()
          print(calls, s.depth + s.waiting + s.processing, s.failures, s.terminal_errors)
          c:enqueue(key)
        end)
        return nil, klua.terminal_error('spec.size must be positive')
      end }
      c:enqueue('default/strict')
    ]])
    assert.equals('1\t0\t1\t1\n2\t1\n', out)
    assert.truthy(err:find('strict: reconcile default/strict failed with a terminal error, not retried: '
      .. 'spec.size must be positive', 1, true), err)
  end)

  it('retries a failing key with growing backoff and forgets its failures after a success', function()
    local out, err = run(sb, [[
      local cms = klua.informer { resource = 'configmaps', namespace = 'default', label_selector = 'never=matches' }
      local attempts = {}
      local c
      c = klua.controller { name = 'flaky', watches = { cms }, reconcile = function(key, ctx)
        attempts[#attempts + 1] = ctx.attempt
        if #attempts == 1 then error('first failure') end
        if #attempts == 2 then return nil, 'second failure' end
        if #attempts == 3 then return end
        local s = c:stats()
        print(table.concat(attempts, ','), s.failures, s.successes, s.retries >= 2)
        klua.stop()
      end }
      c:enqueue('default/flaky')
      klua.after(0.5, function() c:enqueue('default/flaky') end)
    ]])
    assert.equals('1,2,3,1\t2\t1\ttrue\n', out)
    assert.truthy(err:find('flaky: reconcile default/flaky failed (attempt 1): ', 1, true))
    assert.truthy(err:find('first failure', 1, true))
    assert.truthy(err:find('second failure', 1, true))
  end)

  it('maps an owned object to its controller owner through ownerReferences', function()
    local out = run(sb, [[
      local cms = klua.informer { resource = 'configmaps', namespace = 'default', label_selector = 'role=owner' }
      local owned = klua.informer { resource = 'configmaps', namespace = 'default', label_selector = 'role=owned' }
      local keys = {}
      klua.controller { watches = { cms }, owns = { owned }, reconcile = function(key) keys[#keys + 1] = key end }
      klua.on_synced(function()
        local owner = assert(klua.api.create('configmaps', { metadata = { name = 'boss', labels = { role = 'owner' } } }))
        klua.sleep(0.3)
        local child = { metadata = { name = 'worker', namespace = 'default', labels = { role = 'owned' } } }
        assert(klua.helpers.set_controller_reference(owner, child))
        assert(klua.api.create('configmaps', child))
        klua.sleep(0.3)
        print(table.concat(keys, ' '))
        klua.stop()
      end)
    ]])
    assert.equals('default/boss default/boss\n', out)
  end)

  it('made after its informers synced, reconciles every object they already hold', function()
    for _, name in ipairs({ 'late-1', 'late-2' }) do
      assert.equals(201, sb:json('POST', '/api/v1/namespaces/default/configmaps',
        { metadata = { name = name, labels = { role = 'late' } } }))
    end
    local out = run(sb, [[
      local cms = klua.informer { resource = 'configmaps', namespace = 'default', label_selector = 'role=late' }
      klua.on_synced(function()
        local keys = {}
        klua.controller { watches = { cms }, reconcile = function(key) keys[#keys + 1] = key end }
        klua.sleep(0.5)
        table.sort(keys)
        print(table.concat(keys, ' '))
        klua.stop()
      end)
    ]])
    assert.equals('default/late-1 default/late-2\n', out)
  end)

  it('counts queue depth, adds, retries and reconcile durations', function()
    local out = run(sb, [[
      local cms = klua.informer { resource = 'configmaps', namespace = 'default', label_selector = 'never=matches' }
      local c = klua.controller { watches = { cms }, reconcile = function() klua.sleep(0.05) end }
      c:enqueue('default/a'); c:enqueue('default/b')
      klua.after(0.5, function()
        local s = c:stats()
        print(s.depth, s.adds, s.reconciles, s.reconcile.count, s.reconcile.sum > 0.05)
        klua.stop()
      end)
    ]])
    assert.equals('0\t2\t2\t2\ttrue\n', out)
  end)
end)
