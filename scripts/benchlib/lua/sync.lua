--- Scenarios initial-sync and memory-per-pod (e, f): the initial sync of every Pod, then the memory it holds.
--
--   klua run sync.lua HOLD
--
-- Prints `bench synced` when the informer has synced, then, after a full
-- garbage collection and a short pause, `bench settled`, and keeps running
-- for HOLD seconds so that scripts/bench can read /proc/PID/status.
local core = require('klua.core')
local report = require('report')

local hold = tonumber((...)) or 30
local started = core.now()
local added = 0
local inf = klua.informer { resource = 'pods' }
inf:on('add', function() added = added + 1 end)

klua.on_synced(function()
  report.emit('synced', { at = core.now() - started, added = added, cached = inf:stats().cached,
                          hwm_kb = report.memory().VmHWM or 0 })
  collectgarbage()
  klua.after(0.5, function()
    local settled = report.memory()
    report.emit('settled', { rss_kb = settled.VmRSS or 0, hwm_kb = settled.VmHWM or 0 })
    klua.after(hold, function() klua.stop() end)
  end)
end)
