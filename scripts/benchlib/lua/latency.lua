--- Scenario latency: a controller with one worker on every listed Pod while
-- the server changes COUNT of them at a fixed rate, each change stamped with
-- the time the server wrote it (bench-server --watch-rate): how long from
-- that write to the reconcile that sees it?
--
--   klua run latency.lua COUNT
--
-- The reconcile reads its Pod from the informer's cache, as a controller
-- does, and records klua.core's clock (CLOCK_BOOTTIME) minus the Pod's
-- klua.bench/sent-boottime annotation; Pods of the initial list carry none.
-- Once the change numbered COUNT - 1 (klua.bench/seq) has been reconciled it
-- prints `bench done` with every latency, in seconds, comma-separated.
local core = require('klua.core')
local report = require('report')

local count = tonumber((...))
assert(count and count >= 1, 'usage: klua run latency.lua COUNT (COUNT >= 1)')

local started = core.now()
-- Numbers, formatted once at the end: a table of 10,000 strings written at
-- every change is marked again, string by string, in each collection's
-- atomic step, and made pauses of 1 to 2 ms that were the script's
-- bookkeeping, not the controller's (docs/benchmarks.md, "Latency").
local latencies = {}
local initial = 0
local pods = klua.informer { resource = 'pods' }

local function formatted(seconds)
  local out = {}
  for i, s in ipairs(seconds) do out[i] = ('%.6f'):format(s) end
  return table.concat(out, ',')
end

klua.controller { name = 'latency', watches = { pods }, reconcile = function(key)
  local pod = pods:get(key)
  local annotations = pod and pod.metadata.annotations
  local sent = annotations and annotations['klua.bench/sent-boottime']
  if not sent then
    initial = initial + 1
    return
  end
  latencies[#latencies + 1] = core.now() - tonumber(sent)
  if tonumber(annotations['klua.bench/seq']) == count - 1 then
    report.emit('done', { reconciled = #latencies, initial = initial, latencies = formatted(latencies),
                          hwm_kb = report.memory().VmHWM or 0 })
    klua.stop()
  end
end }

klua.on_synced(function()
  report.emit('synced', { at = core.now() - started, cached = pods:stats().cached })
end)
