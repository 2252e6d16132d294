--- Writes that only a Lease's holder may make: the process's leader
-- election (klua.leader) fences every write of the process, a held shard
-- (klua.shards) the writes of the reconciles of its keys. klua.api asks
-- here before a write leaves (M.send_by) and refuses it once the Lease it
-- depends on has lapsed by this process's monotonic clock; the C side
-- checks the same time again as the request is about to be sent.
--
-- A Lease is valid until the renew deadline after the successful renewal
-- was SENT: stricter than client-go, which counts from when the answer
-- came. Another candidate takes the Lease over only once the record has
-- not changed for the lease duration by its own clock, counted from when
-- it saw the change, which is after this process sent it; so while the
-- lease duration exceeds the renew deadline, the holder stops writing
-- before anyone else may start, however long a pause came in between.
--
-- Private to klua's own modules.
local M = {}

--- A key of klua.api write options: the Lease's own writes (take, renew,
-- release), which no Lease fences.
M.EXEMPT = setmetatable({}, { __name = 'klua.internal.fence.EXEMPT' })

-- The process's election: a function returning the monotonic time its
-- Lease is valid until (0 when not held) and the Lease's name.
local process
-- Task (coroutine) -> the same, for a reconcile of a sharded key.
local tasks = setmetatable({}, { __mode = 'k' })

--- Writes refused because their Lease had lapsed (klua_fenced_writes_total).
M.refused = 0

--- Fences every write of the process by fn (nil: none).
function M.fence_process(fn) process = fn end

--- Fences the writes of the calling task by fn until M.unbind().
function M.bind(fn) tasks[coroutine.running()] = fn end

function M.unbind() tasks[coroutine.running()] = nil end

--- The monotonic time from which a write of the calling task must not be
-- sent, and the Lease that says so; nil when no Lease fences it.
function M.send_by()
  local by, lease
  if process then by, lease = process() end
  local fn = tasks[coroutine.running()]
  if fn then
    local t, l = fn()
    if not by or t < by then by, lease = t, l end
  end
  return by, lease
end

--- Counts a refused write; returns the words of its error.
function M.refuse(method, path, lease)
  M.refused = M.refused + 1
  return ('%s %s not sent: this replica does not hold %s (not taken, or lapsed: no renewal within its '
    .. 'renew deadline); only its holder may make this write'):format(method, path, lease)
end

return M
