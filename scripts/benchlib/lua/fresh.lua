--- Scenario fresh-first: a controller with one worker and a reconcile that
-- takes SECONDS (klua.sleep) starts on every listed Pod, and the watch then
-- changes the Pod KEY, the last of the list: how long until that change is
-- reconciled?
--
--   klua run fresh.lua KEY SECONDS
--
-- Prints `bench done` with latency (from the update handler's call to the
-- start of the reconcile it caused), the reconciles before it, the keys
-- still queued when the change came, and when it came after the sync.
local core = require('klua.core')
local report = require('report')

local args = table.pack(...)
local key, work = args[1], tonumber(args[2]) or 0.001
local started = core.now()
local synced_at, changed_at, queued_then
local reconciled = 0

local pods = klua.informer { resource = 'pods' }
local ctl
ctl = klua.controller { name = 'fresh-first', watches = { pods }, reconcile = function(k, ctx)
  if k == key and changed_at and ctx.cause.event == 'update' then
    report.emit('done', { latency = core.now() - changed_at, before = reconciled, queued = queued_then,
                          after_sync = changed_at - (synced_at or changed_at), synced = (synced_at or 0) - started })
    klua.stop()
    return
  end
  reconciled = reconciled + 1
  klua.sleep(work)
end }
-- Registered after the controller's own handler: the key is queued when this runs.
pods:on('update', function(_, new)
  if new.metadata.namespace .. '/' .. new.metadata.name == key then
    changed_at = core.now()
    queued_then = ctl:stats().depth
  end
end)
klua.on_synced(function() synced_at = core.now() end)
