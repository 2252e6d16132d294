--- Scenarios initial-sync, memory-per-pod (e, f) and cache-less: the initial sync of every Pod, then the memory it holds.
--
--   klua run sync.lua HOLD [MODE]
--
-- MODE is full (the default: whole Pods), transform (metadata.managedFields
-- dropped by klua.drop_fields), function (the same members dropped by a Lua
-- function transform from the Pod it is given), function-copy (dropped from
-- a klua.copy of it, returned) or metadata (a metadata-only informer).
-- Prints `bench synced` when the informer has synced, then, after a full
-- garbage collection and a short pause, `bench uncompressed` (the memory
-- before any cached object is compressed), then, once the compaction of
-- the cache has nothing left to do (inf:stats().compaction is "idle", or
-- "off" with --cache-compression=false) and after another collection,
-- `bench settled`, and keeps running for HOLD seconds so that scripts/bench
-- can read /proc/PID/status.
local core = require('klua.core')
local report = require('report')

local args = table.pack(...)
local hold = tonumber(args[1]) or 30
local mode = args[2] or 'full'
local started = core.now()
local added = 0
local transforms = {
  transform = klua.drop_fields('metadata.managedFields'),
  ['function'] = function(pod)
    pod.metadata.managedFields = nil
    return pod
  end,
  ['function-copy'] = function(pod)
    local p = klua.copy(pod)
    p.metadata.managedFields = nil
    return p
  end,
}
local inf = klua.informer { resource = 'pods', metadata_only = mode == 'metadata' or nil,
  transform = transforms[mode] }
inf:on('add', function() added = added + 1 end)

klua.on_synced(function()
  local stats = inf:stats()
  -- lists and events say how the state came: LIST requests, or a watch-list's initial events.
  report.emit('synced', { at = core.now() - started, added = added, cached = stats.cached,
                          lists = stats.lists, events = stats.events, hwm_kb = report.memory().VmHWM or 0 })
  collectgarbage()
  klua.after(0.5, function()
    local before = inf:stats()
    report.emit('uncompressed', { rss_kb = report.memory().VmRSS or 0, compressed = before.compressed })
    local poll
    poll = klua.every(0.1, function()
      local s = inf:stats()
      if s.compaction ~= 'idle' and s.compaction ~= 'off' then return end
      poll:cancel()
      collectgarbage()
      local settled = report.memory()
      report.emit('settled', { rss_kb = settled.VmRSS or 0, hwm_kb = settled.VmHWM or 0,
                               compressed = s.compressed, compressed_bytes = s.compressed_bytes,
                               compressed_json_bytes = s.compressed_json_bytes,
                               compaction_seconds = s.compaction_seconds,
                               settled_at = core.now() - started })
      klua.after(hold, function() klua.stop() end)
    end)
  end)
end)
