-- klua.record_event: writes Events as client-go's core/v1 recorder does
-- (tools/record/event.go, recordToSink and recordEvent, client-go 1.32):
-- each goes through the process's correlator (lua/klua/correlator.lua),
-- then is created, or, seen before, PATCHed (a strategic merge patch of
-- count, lastTimestamp and message); a PATCH that finds the Event gone
-- creates it again. Unlike client-go's, which queues the Event and writes
-- it from a goroutine of its own, the call waits for the write and returns
-- what the server stored, or the error.
local core = require('klua.core')
local api = require('klua.api')
local event = require('klua.event')
local correlator = require('klua.internal.correlator')
local util = require('klua.internal.objutil')

local M = {}

local events = correlator.new()

-- Spam key -> {waiting =, queue =}: the Events about one object are
-- correlated and written one at a time, in the order recorded, as
-- client-go's one goroutine writes them; else two tasks recording the
-- same Event at once would both create it. A queue made only when a task
-- waits hands the turn over (its waiters are woken oldest first).
local locks = {}

local function acquire(key)
  local lock = locks[key]
  if not lock then
    locks[key] = { waiting = 0, turns = 0 }
    return
  end
  lock.queue = lock.queue or core.queue()
  lock.waiting = lock.waiting + 1
  lock.queue:done(lock.queue:get())
end

local function release(key)
  local lock = locks[key]
  if lock.waiting == 0 then
    locks[key] = nil
    return
  end
  lock.waiting = lock.waiting - 1
  lock.turns = lock.turns + 1
  lock.queue:add(tostring(lock.turns))
end

local function write(r)
  local ev = r.event
  if r.name and ev.count > 1 then
    local patch = { count = ev.count, lastTimestamp = ev.lastTimestamp }
    if ev.message ~= '' then patch.message = ev.message end
    local stored, err = api.patch('events', ev.metadata.namespace .. '/' .. r.name, patch, { type = 'strategic' })
    if stored or not api.is_not_found(err) then return stored, err end
  end
  return api.create('events', ev)
end

local function correlate_and_write(ev)
  local r = events:correlate(ev)
  if not r then
    local o = ev.involvedObject
    return nil, util.refusal('TooManyEvents', 'record_event: dropped: %s has recorded %d events about %s %s '
      .. 'lately; client-go\'s spam filter lets 1 more through every %g s', ev.source.component,
      correlator.SPAM_BURST, o.kind, o.namespace and (o.namespace .. '/' .. o.name) or o.name, 1 / correlator.SPAM_QPS)
  end
  local stored, err = write(r)
  if stored then events:update(r.key, stored) end
  return stored, err
end

--- Records an Event about obj; see klua.record_event.
function M.record(obj, opts)
  local ev, err = event.event_for(obj, opts)
  if not ev then return nil, err end
  local key = correlator.spam_key(ev)
  acquire(key)
  local ok, stored, werr = pcall(correlate_and_write, ev)
  release(key)
  if not ok then error(stored, 0) end
  return stored, werr
end

return M
