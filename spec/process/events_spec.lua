-- klua.record_event stores what client-go's core/v1 recorder stores
-- (tools/record/events_cache.go and event.go, client-go 1.32; the recorder
-- of controller-runtime's GetEventRecorderFor): the same Event recorded
-- again is one object whose count grows; similar Events past the 10th in
-- 10 minutes become one "(combined from similar events)" Event; 25 Events
-- about an object in a burst, then 1 every 5 minutes. The specs read what
-- the sandbox stored with kubectl.
local cjson = require('cjson')
local testing = require('klua.testing')
local K = require('support.klua')

-- The Events stored about `name` in namespace ns, oldest first.
local function events_about(sb, ns, name)
  local list = cjson.decode(sb:kubectl('get events -n ' .. ns .. ' -o json'))
  local found = {}
  for _, ev in ipairs(list.items) do
    if ev.involvedObject.name == name then found[#found + 1] = ev end
  end
  table.sort(found, function(a, b) return a.message < b.message end)
  return found
end

-- The one Event stored about ns/cfg; fails unless there is exactly one, with `count`.
local function only_event(sb, ns, count)
  local stored = events_about(sb, ns, 'cfg')
  assert.equals(1, #stored)
  assert.equals(count, stored[1].count)
  return stored[1]
end

-- A script that records Events about the ConfigMap ns/cfg once the informer
-- has it: `body` runs in a task, with `cm` the ConfigMap and `record(opts)`
-- recording an Event about it from component "events-spec", and ends with
-- klua.stop(). Helpers' clock (klua.helpers.set_clock) stands still but
-- for advance(seconds).
local function recording(body)
  return [[
local ns = ...
local now = 1700000000
klua.helpers.set_clock(function() return now end)
local function advance(seconds) now = now + seconds end
local cms = klua.informer { resource = 'configmaps', namespace = ns }
local cm
local function record(opts)
  opts.kind, opts.api_version, opts.component = 'ConfigMap', 'v1', 'events-spec'
  return klua.record_event(cm, opts)
end
klua.on_synced(function()
  cm = cms:get(ns .. '/cfg')
]] .. body .. [[
end)
]]
end

describe('klua.record_event', function()
  local sb = testing.with_sandbox()

  local function namespace(name)
    sb:kubectl('create namespace ' .. name)
    sb:kubectl('create configmap cfg -n ' .. name .. ' --from-literal=k=v')
    return name
  end

  -- Runs the recording script of body against the ConfigMap cfg of ns; returns its output.
  local function run_recording(ns, body)
    return K.run_script_ok(recording(body), { kubeconfig = sb.kubeconfig, args = { ns } })
  end

  -- Runs the recording script of body against the ConfigMap cfg of ns: it must print
  -- printed and leave one Event about cfg, of count.
  local function records(ns, body, printed, count)
    assert.equals(printed, run_recording(ns, body))
    only_event(sb, ns, count)
  end

  it('stores one Event with count 5 for a controller that fails the same way 5 times', function()
    local ns = namespace('events-same')
    local out = K.run_script_ok([[
local ns = ...
local cms = klua.informer { resource = 'configmaps', namespace = ns }
local attempts = 0
klua.controller { name = 'events-spec', watches = { cms }, reconcile = function(key)
  attempts = attempts + 1
  local ev = assert(klua.record_event(cms:get(key), { type = 'Warning', reason = 'SyncFailed',
    message = 'cannot reach the backend', kind = 'ConfigMap', api_version = 'v1', component = 'events-spec' }))
  if attempts < 5 then return nil, 'backend down' end
  print(attempts, ev.count)
  klua.stop()
end }
]], { kubeconfig = sb.kubeconfig, args = { ns }, timeout = 30 })
    assert.equals('5\t5\n', out)
    local ev = only_event(sb, ns, 5)
    assert.are.same({ 5, 'Warning', 'SyncFailed', 'cannot reach the backend', 'events-spec', 'ConfigMap' },
      { ev.count, ev.type, ev.reason, ev.message, ev.source.component, ev.involvedObject.kind })
    assert.truthy(ev.firstTimestamp <= ev.lastTimestamp, ev.firstTimestamp .. ' ' .. ev.lastTimestamp)
  end)

  it('combines similar Events from the 10th distinct message in 10 minutes, and starts again after a gap', function()
    local ns = namespace('events-similar')
    run_recording(ns, [[
  for i = 1, 12 do assert(record { reason = 'Step', message = ('step %02d'):format(i) }) end
  advance(601)
  assert(record { reason = 'Step', message = 'step 13' })
  klua.stop()
]])
    local stored = events_about(sb, ns, 'cfg')
    local got = {}
    for i, ev in ipairs(stored) do got[i] = ('%d %s'):format(ev.count, ev.message) end
    assert.are.same({ '3 (combined from similar events): step 12', '1 step 01', '1 step 02', '1 step 03',
      '1 step 04', '1 step 05', '1 step 06', '1 step 07', '1 step 08', '1 step 09', '1 step 13' }, got)
  end)

  it('drops Events about an object past 25 in a burst, counts them still, and lets 1 through every 5 minutes', function()
    records(namespace('events-spam'), [[
  local results = {}
  for i = 1, 27 do
    local ev, err = record { reason = 'Retry', message = 'again' }
    results[i] = ev and tostring(ev.count) or err.reason
  end
  print(results[25], results[26], results[27])
  advance(300)
  print(assert(record { reason = 'Retry', message = 'again' }).count)
  print(select(2, record { reason = 'Other', message = 'same object, another reason' }).reason)
  klua.stop()
]], '25\tTooManyEvents\tTooManyEvents\n28\nTooManyEvents\n', 28)
  end)

  -- kube-apiserver deletes Events an hour after their last change (--event-ttl):
  -- client-go's recordEvent creates again what its PATCH finds gone.
  it('creates the Event again, with its count, when the server no longer has it', function()
    records(namespace('events-expired'), [[
  local first = assert(record { reason = 'Expired', message = 'once more' })
  assert(klua.api.delete('events', ns .. '/' .. first.metadata.name))
  local second = assert(record { reason = 'Expired', message = 'once more' })
  print(second.count, second.metadata.name ~= first.metadata.name)
  klua.stop()
]], '2\ttrue\n', 2)
  end)

  it('stores one Event with count 2 when two tasks record it at once', function()
    records(namespace('events-together'), [[
  local done = 0
  for _ = 1, 2 do
    klua.after(0, function()
      assert(record { reason = 'Raced', message = 'both at once' })
      done = done + 1
      if done == 2 then klua.stop() end
    end)
  end
]], '', 2)
  end)
end)
