--- The graceful shutdown of `klua run`, with controller-runtime's manager
-- semantics. On the first SIGTERM or SIGINT:
--
-- 1. no timer or hook of the script starts any more, and every
--    controller's queue shuts down: no new keys are taken;
-- 2. the reconciles in flight run to their end (a reconcile running on
--    the CPU when the signal came included). The informers' handlers keep
--    running meanwhile, as controller-runtime stops its caches only after
--    its controllers: the events that carry the last reconciles' writes
--    still reach the caches;
-- 3. no handler starts any more, and the `klua.on_shutdown` hooks run, one after the other, in the order
--    they were added; a hook that fails is logged and the next one runs;
-- 4. the process's leader election releases its Lease (holderIdentity
--    empty, leaseDurationSeconds 1, as client-go's ReleaseOnCancel writes),
--    so another replica leads at its next try rather than after the lease
--    duration;
-- 5. klua exits 0, closing its watches.
--
-- Each step is a phase of the runtime (DRAINING, HOOKS, RELEASING, then
-- STOPPED: src/lua/runtime.h), entered through core.advance and klua.stop,
-- which the runtime's phase table refuses out of order. All of it must end
-- within --graceful-shutdown-timeout (30 s): past it, klua exits 1 at once
-- with a line naming what was still running (CUT_SHORT, enforced in the
-- count hook too, so that a reconcile spinning on the CPU cannot hold it).
-- controller-runtime's manager returns an error in that case, and its main
-- exits 1. A second signal exits 1 at once from the signal handler, with
-- one line (src/base/loop.h).
local core = require('klua.core')
local leader = require('klua.leader')
local shards = require('klua.shards')
local controller = require('klua.controller')

local M = {}

local hooks = {}
-- What the shutdown does now beyond waiting for reconciles (a hook, the
-- release), for the report when it times out.
local step

local function hook_name(i, fn)
  local info = debug.getinfo(fn, 'S')
  return ('on_shutdown hook %d (%s:%d)'):format(i, info.short_src, info.linedefined)
end

--- Adds fn to the hooks run on SIGTERM and SIGINT, after the reconciles in
-- flight have ended and before the Lease is released. fn may wait (API
-- calls, klua.sleep).
function M.on_shutdown(fn)
  if type(fn) ~= 'function' then error('klua.on_shutdown takes a function', 2) end
  hooks[#hooks + 1] = fn
end

-- The phases in which the script's own code starts.
local STARTS = { LOADING = true, RUNNING = true }

--- fn, except that it does nothing once the shutdown has begun: what the
-- script's timers and hooks are wrapped in. Anything but a function is
-- returned as it is, for the caller's own check to refuse.
function M.guard(fn)
  if type(fn) ~= 'function' then return fn end
  return function(...)
    if not STARTS[core.phase()] then return end
    return fn(...)
  end
end

local function in_flight()
  local out = {}
  for _, c in ipairs(controller.all) do
    for key in pairs(c.in_flight) do
      out[#out + 1] = ('reconcile of %s (controller %s)'):format(key, c.name)
    end
  end
  table.sort(out)
  return out
end

--- What the shutdown still waits for, as one line.
function M.describe()
  local list = in_flight()
  if step then list[#list + 1] = step end
  if #list == 0 then return 'nothing' end
  return table.concat(list, ', ')
end

-- The reconciles' ends are not events a task can wait on: polling every
-- 20 ms costs nothing while the process is going away anyway.
local POLL = 0.02

-- Whether the run has ended meanwhile: a reconcile or a hook called
-- klua.stop (STOPPED), whose status then stands and after which nothing
-- more of the shutdown runs.
local function ended() return core.phase() == 'STOPPED' end

local function run(signal)
  local opts = core.controller_options()
  local busy = in_flight()
  -- A script with nothing to wait for stops as quietly as it did before.
  if #busy > 0 or #hooks > 0 then
    core.log('info', ('shutting down on %s: waiting up to %gs for %d reconcile%s in flight and %d on_shutdown hook%s')
      :format(signal, opts.graceful_shutdown_timeout, #busy, #busy == 1 and '' or 's', #hooks, #hooks == 1 and '' or 's'))
  end
  for _, c in ipairs(controller.all) do c:shutdown() end
  while #in_flight() > 0 do core.sleep(POLL) end
  if ended() then return end
  -- HOOKS: from here on no informer's handler starts (lua_informer.c
  -- checks before each call).
  core.advance('drained')
  for i, fn in ipairs(hooks) do
    step = hook_name(i, fn)
    local ok, err = xpcall(fn, debug.traceback)
    if not ok then core.log('error', ('%s failed: %s'):format(step, tostring(err))) end
    if ended() then return end
  end
  core.advance('hooks ran')
  local election = leader.current()
  if election then
    step = 'release of lease ' .. election:_key()
    election:stop()
  end
  local group = shards.current()
  if group then
    step = 'release of the shards of ' .. group.name
    group:stop()
  end
  step = nil
  if not ended() then core.stop(0) end
end

--- Makes SIGTERM and SIGINT run the shutdown above (klua run calls it).
function M.install()
  core.graceful_shutdown(run, M.describe)
end

return M
