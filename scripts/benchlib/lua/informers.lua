--- Scenarios many-informers and slow-handler (g and h): several Pod informers
-- in one process, one namespace each, every one with the update handler of
-- handler-3-fields (a).
--
--   klua run informers.lua COUNT FIRST LAST [SLOW_SECONDS [HOLD]]
--
-- One informer for each namespace team-FIRST ... team-LAST (two digits), one
-- watch stream each. The run ends once every counted informer has handled
-- COUNT updates (or its first watch stream has ended and everything it
-- delivered has been handled). With SLOW_SECONDS > 0, the informer of
-- team-FIRST is the slow one: its handler also calls klua.sleep(SLOW_SECONDS),
-- it is not counted, and the run goes on HOLD seconds after the others are
-- done, to show that klua's memory stays flat while the slow stream waits.
--
-- Prints `bench tick` every TICK seconds (VmRSS, the slow informer's
-- progress, and progress<i>: each informer's updates seen, LISTs, watches
-- and pending notifications), `bench counted` when the counted informers are done, and
-- `bench done` with, for the informer of namespace i, seen<i>, stamped<i>,
-- first<i> and last<i>: klua.core's monotonic clock at its first update and
-- at its stamped-th, the last of its first COUNT that was stamped.
local core = require('klua.core')
local report = require('report')

local STAMP_EVERY = 256
local TICK = 0.1

local count, from, to, slow, hold = ...
count, from, to, slow, hold = tonumber(count), tonumber(from), tonumber(to), tonumber(slow or 0), tonumber(hold or 0)
assert(count and count >= 2 and from and to and 0 <= from and from <= to and to < 50 and slow and hold,
  'usage: klua run informers.lua COUNT FIRST LAST [SLOW_SECONDS [HOLD]] (COUNT >= 2, 0 <= FIRST <= LAST < 50)')

local started, cpu_started = core.now(), os.clock()
local informers, seen, stamped, first, last = {}, {}, {}, {}, {}
local peak_rss, counted_at = 0, nil

local function rss()
  local kb = report.memory().VmRSS or 0
  if kb > peak_rss then peak_rss = kb end
  return kb
end

local function slow_one(i) return slow > 0 and i == from end

local function namespace(i) return ('team-%02d'):format(i) end

local function handler(i)
  seen[i], stamped[i], first[i], last[i] = 0, 0, 0, 0
  local ns = namespace(i)
  return function(_, new)
    local md = new.metadata
    -- The three fields of handler-3-fields; the namespace shows each stream is the informer's own.
    if md.name == nil or new.status.phase == nil or md.namespace ~= ns then
      error(('informer of %s got %s/%s'):format(ns, tostring(md.namespace), tostring(md.name)))
    end
    if slow_one(i) then klua.sleep(slow) end
    local k = seen[i] + 1
    seen[i] = k
    if k == 1 then
      first[i] = core.now()
    elseif k <= count and (k == count or k % STAMP_EVERY == 0) then
      stamped[i], last[i] = k, core.now()
    end
  end
end

for i = from, to do
  informers[i] = klua.informer { resource = 'pods', namespace = namespace(i) }
  informers[i]:on('update', handler(i))
end

--- Whether informer i has all it will get: COUNT updates, or everything its
-- first (ended) watch stream delivered.
local function done(i)
  local st = informers[i]:stats()
  return seen[i] >= count or (st.watches >= 2 and st.pending == 0)
end

local function finish(reason)
  local fields = {
    reason = reason, cpu_total = os.clock() - cpu_started, rss_kb = rss(), peak_rss_kb = peak_rss,
    hwm_kb = report.memory().VmHWM or 0, counted_at = counted_at or 0,
  }
  for i = from, to do
    fields['seen' .. i], fields['stamped' .. i], fields['first' .. i], fields['last' .. i] =
      seen[i], stamped[i], first[i], last[i]
    fields['pending' .. i] = informers[i]:stats().pending
  end
  report.emit('done', fields)
  klua.stop()
end

klua.on_synced(function()
  report.emit('synced', { at = core.now() - started, rss_kb = rss() })
end)

klua.every(TICK, function()
  local fields = { at = core.now() - started, rss_kb = rss() }
  if slow > 0 then fields.slow_seen, fields.slow_pending = seen[from], informers[from]:stats().pending end
  -- Each informer's progress, for the report of a run that does not end.
  for i = from, to do
    local st = informers[i]:stats()
    fields['progress' .. i] = ('%d/%d/%d/%d'):format(seen[i], st.lists, st.watches, st.pending)
  end
  report.emit('tick', fields)
end)

klua.every(0.05, function()
  if counted_at then return end
  for i = from, to do
    if not slow_one(i) and not done(i) then return end
  end
  counted_at = core.now() - started
  report.emit('counted', { at = counted_at, rss_kb = rss() })
  if hold > 0 and slow > 0 then
    klua.after(hold, function() finish('held') end)
  else
    finish('count')
  end
end)
