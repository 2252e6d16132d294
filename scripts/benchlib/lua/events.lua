--- Scenarios handler-3-fields, handler-copy, handler-edit and controller-enqueue: one
-- update handler on every event of a watch stream.
--
--   klua run events.lua MODE COUNT
--
-- MODE read:    the handler reads metadata.name, metadata.namespace and status.phase of `new`;
-- MODE copy:    the handler calls klua.copy(new);
-- MODE write-edit, write-copy: the handler sets a label on klua.edit(new), or on klua.copy(new),
--                and encodes the object, as a reconcile's update does;
-- MODE enqueue: the handler adds "namespace/name" to a controller's work queue.
--
-- The run ends after COUNT updates, or once the first watch stream has ended and everything it
-- delivered has been handled (then fewer than COUNT updates arrived). Prints `bench synced` and
-- `bench done` lines: times from klua.core's monotonic clock, CPU from os.clock(), both taken at
-- the first update, every STAMP_EVERY-th and the last, so that reading the clocks costs the
-- handlers next to nothing.
local core = require('klua.core')
local report = require('report')

local STAMP_EVERY = 256

local mode, count = ...
count = tonumber(count)
assert(count and count >= 2, 'usage: klua run events.lua read|copy|write-edit|write-copy|enqueue COUNT (COUNT >= 2)')

--- The work queue of the "controller" handlers: klua.queue, what
-- klua.controller uses. It dedupes keys, so it ends up holding one key per Pod.
local function new_queue()
  local q = klua.queue()
  return {
    add = function(key) q:add(key) end,
    len = function() return q:len() end,
  }
end

local queue = new_queue()

--- A reconcile's write of its object: a label set on what make(new) gives, the object encoded.
local function write_through(make, new)
  local p = make(new)
  p.metadata.labels.seen = 'yes'
  return klua.json.encode(p)
end
local handlers = {
  read = function(new)
    local md = new.metadata
    return md.name, md.namespace, new.status.phase
  end,
  copy = function(new) return klua.copy(new) end,
  ['write-edit'] = function(new) return write_through(klua.edit, new) end,
  ['write-copy'] = function(new) return write_through(klua.copy, new) end,
  enqueue = function(new)
    local md = new.metadata
    queue.add(md.namespace .. '/' .. md.name)
  end,
}
local handle = handlers[mode]
assert(handle, ('unknown mode %q: use read, copy, write-edit, write-copy or enqueue'):format(tostring(mode)))

local started, cpu_started = core.now(), os.clock()
-- stamped: how many updates had been handled when last and cpu_last were taken.
local seen, stamped, first, cpu_first, last, cpu_last = 0, 0, 0, 0, 0, 0
local inf = klua.informer { resource = 'pods' }

local function finish(reason)
  report.emit('done', {
    reason = reason, seen = seen, stamped = stamped, first = first, last = last, cpu_first = cpu_first,
    cpu_last = cpu_last, cpu_total = os.clock() - cpu_started, watches = inf:stats().watches,
    queued = queue.len(), hwm_kb = report.memory().VmHWM or 0,
  })
  klua.stop()
end

inf:on('update', function(_, new)
  handle(new)
  seen = seen + 1
  if seen == 1 then
    first, cpu_first = core.now(), os.clock()
  elseif seen == count or seen % STAMP_EVERY == 0 then
    stamped, last, cpu_last = seen, core.now(), os.clock()
    if seen == count then finish('count') end
  end
end)

klua.on_synced(function()
  report.emit('synced', { at = core.now() - started, cached = inf:stats().cached, updates = seen })
end)

-- A second watch means the first stream ended; once nothing it delivered is
-- left to handle, no more of its events can come.
klua.every(0.05, function()
  local st = inf:stats()
  if seen < count and st.watches >= 2 and st.pending == 0 then finish('stream-ended') end
end)
