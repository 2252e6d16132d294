--- `klua.controller`: the controller pattern with client-go's work-queue
-- semantics.
--
--   local c = klua.controller {
--     name = 'podsets',
--     watches = { podsets },         -- changes to these enqueue the object's own key
--     owns = { pods },               -- changes to these enqueue their controller owner's key
--     workers = 2,
--     reconcile = function(key, ctx) ... end,
--   }
--
-- Handlers only enqueue keys ("namespace/name"); once every informer has
-- synced, `workers` coroutines take keys from the queue and call
-- `reconcile(key, ctx)`. A key added twice before it is processed is
-- processed once; a key is never reconciled by two workers at once (added
-- again meanwhile, it is processed once more afterwards). reconcile's
-- outcome decides what happens next:
--   returns nothing (or true)           success: the key's failures are forgotten
--   returns klua.requeue_after(sec)     processed again after `sec` seconds
--   returns klua.requeue()              processed again after its backoff
--   returns nil/false, err              logged; retried with per-key exponential
--                                       backoff (5 ms doubling to 1000 s) under an
--                                       overall limit of 10/s with bursts of 100
--   returns nil, klua.terminal_error(e) logged; not retried until the key is added
--   raises                              a panic in controller-runtime's terms:
--                                       logged, counted, and retried as an error
--
-- Read your own writes: a reconcile of a key does not start until the
-- controller's informers hold what klua.api last wrote to the object of
-- that key (in `watches`) and to the objects it controls (in `owns`), from
-- any handler, timer or reconcile; the key waits aside (no worker is held)
-- and comes back with the watch event that carries the write, or after
-- `read_your_writes` seconds (default 10; false turns the wait off),
-- counted in stale_read_timeouts (lua/klua/internal/writes.lua).
-- `-v 3` logs each enqueue (key, the informer and event that caused it,
-- queued or deduplicated) and each reconcile's start and end (result,
-- duration, when it runs again).
--
-- The controller_runtime_* metrics count these outcomes as
-- controller-runtime's reconcileHandler does (pkg/internal/controller/
-- controller.go, v0.20): result "success", "requeue_after", "requeue" or
-- "error"; a raise as a panic and an error; a terminal error as one and an
-- error.
local core = require 'klua.core'
local leader = require 'klua.leader'
local shards = require 'klua.shards'
local endpoint = require 'klua.internal.endpoint'
local object = require 'klua.internal.object'
local util = require 'klua.internal.objutil'
local writes = require 'klua.internal.writes'

local M = {}

-- -v 3 narrates every enqueue and reconcile. The level is set before any
-- script runs and never changes: read once, the per-event check is a test
-- of a local.
local NARRATE = core.verbosity() >= 3

local function narrate(fmt, ...) core.log('info', fmt:format(...)) end

local function narrate_add(c, key, cause, queued)
  narrate('%s: enqueue %s (%s): %s', c.name, key, cause, not queued and 'deduplicated, already queued'
    or c.in_flight[key] and 'queued, to run again once its reconcile in flight ends' or 'queued')
end

-- How a reconcile ended (the controller_runtime_reconcile_total result, or
-- "panic" or "terminal error"), and after how many seconds it runs again.
local function narrate_end(c, key, took, result, again)
  local when = result == 'terminal error' and 'not retried'
    or result == 'requeue_after' and ('again in %g s'):format(again)
    or again and ('again after a backoff of %.3f s'):format(again)
  narrate('%s: reconcile %s ended in %.1f ms: %s%s', c.name, key, took * 1000, result, when and ', ' .. when or '')
end

--- Every controller made, in order: the graceful shutdown stops their
-- queues and waits for their reconciles (lua/klua/internal/shutdown.lua).
M.all = {}

local REQUEUE = {}
local TERMINAL = { __tostring = function(t) return tostring(t.err) end }

-- controller-runtime's controller_runtime_reconcile_time_seconds buckets
-- (pkg/internal/controller/metrics/metrics.go, v0.20), in seconds.
M.RECONCILE_TIME_BUCKETS = { 0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6,
  0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40,
  50, 60 }

--- A reconcile result: process the key again after `seconds`.
function M.requeue_after(seconds)
  assert(type(seconds) == 'number' and seconds >= 0, 'requeue_after needs a number of seconds')
  return setmetatable({ after = seconds }, REQUEUE)
end

--- A reconcile result: process the key again after its rate-limited backoff.
function M.requeue()
  return setmetatable({}, REQUEUE)
end

--- A reconcile error that retrying will not fix, as controller-runtime's
-- reconcile.TerminalError: returned as `return nil, klua.terminal_error(err)`.
function M.terminal_error(err)
  return setmetatable({ err = err }, TERMINAL)
end

local function key_of(obj)
  local md = obj.metadata
  return util.key(md.namespace, md.name)
end

--- The key of obj's controller owner when that owner is of `kind`.
local function owner_key(obj, kind)
  local refs = obj.metadata.ownerReferences
  if not refs then return nil end
  for _, ref in ipairs(refs) do
    if ref.controller == true and (kind == nil or ref.kind == kind) then
      return util.key(obj.metadata.namespace, ref.name)
    end
  end
  return nil
end

local Controller = {}
Controller.__index = Controller

--- Enqueues a key by hand.
-- @param key "namespace/name", or "name"
-- @usage
-- ctl:enqueue('default/web')
function Controller:enqueue(key)
  local queued = self.queue:add(key)
  if NARRATE then narrate_add(self, key, 'ctl:enqueue', queued) end
end

-- A duration histogram {count, sum, max, counts} over RECONCILE_TIME_BUCKETS.
local function histogram()
  local counts = {}
  for i = 1, #M.RECONCILE_TIME_BUCKETS do counts[i] = 0 end
  return { count = 0, sum = 0, max = 0, counts = counts }
end

local function observe(d, seconds)
  d.count, d.sum = d.count + 1, d.sum + seconds
  if seconds > d.max then d.max = seconds end
  for i, le in ipairs(M.RECONCILE_TIME_BUCKETS) do
    if seconds <= le then
      d.counts[i] = d.counts[i] + 1
      return
    end
  end
end

-- d as the queue reports its durations: cumulative {le, count} pairs.
local function cumulative(d)
  local buckets, below = {}, 0
  for i, le in ipairs(M.RECONCILE_TIME_BUCKETS) do
    below = below + d.counts[i]
    buckets[i] = { le, below }
  end
  return { count = d.count, sum = d.sum, max = d.max, buckets = buckets }
end

--- Counters: depth, adds, retries, oldest (seconds the key queued
-- longest has waited), reconciles, successes, failures (every
-- reconcile that failed, terminal_errors and panics included),
-- terminal_errors, panics (reconciles that raised), requeues
-- (klua.requeue), requeues_after (klua.requeue_after), active (reconciles
-- running now), stale_read_waits (reconciles held until the cache held
-- the controller's own writes), stale_read_timeouts (of those, the ones
-- that went ahead at the read_your_writes bound), and wait/work/reconcile
-- durations {count, sum, max, buckets}.
-- @return a table of the counters
-- @usage
-- klua.log.info('%d reconciles', ctl:stats().reconciles)
function Controller:stats()
  local s = self.queue:stats()
  for _, k in ipairs { 'reconciles', 'successes', 'failures', 'terminal_errors', 'panics', 'requeues',
    'requeues_after', 'active' } do
    s[k] = self[k]
  end
  s.reconcile = cumulative(self.reconcile_time)
  s.stale_read_waits, s.stale_read_timeouts = self.stale_read_waits, self.stale_read_timeouts
  return s
end

--- Stops taking keys: workers finish what they hold and end. SIGTERM does
-- this for every controller (klua.on_shutdown).
-- @usage
-- klua.after(60, function() ctl:shutdown() end)
function Controller:shutdown() self.queue:shutdown() end

-- What klua.controller returns: a klua.controller object in front of c.
local _, handle = object.class('controller', Controller, { 'enqueue', 'stats', 'shutdown' },
  function(c) return ('controller(%s)'):format(c.name) end)

-- How many of its last failures a controller keeps for the live page
-- (klua.internal.ui): a failure is rare next to the events, so this costs
-- nothing on the way of a successful reconcile.
local LAST_ERRORS = 8

-- Returns the result and the backoff, for -v 3.
local function failed(c, key, why)
  c.failures = c.failures + 1
  if #c.last_errors == LAST_ERRORS then table.remove(c.last_errors, 1) end
  c.last_errors[#c.last_errors + 1] = { key = key, error = tostring(why), at = core.now() }
  if getmetatable(why) == TERMINAL then
    c.terminal_errors = c.terminal_errors + 1
    core.log('error', ('%s: reconcile %s failed with a terminal error, not retried: %s'):format(
      c.name, key, tostring(why)))
    return 'terminal error'
  end
  core.log('error', ('%s: reconcile %s failed (attempt %d): %s'):format(
    c.name, key, c.queue:num_requeues(key) + 1, tostring(why)))
  return 'error', c.queue:add_rate_limited(key)
end

-- Under --shards a key is taken only while its shard is held (and not
-- handed over): another replica reconciles the rest.
local function takes(key)
  local g = shards.current()
  return not g or g:owns(key)
end

-- cause: the informer and event that added key ("pods update"), for -v 3.
local function add(c, key, cause)
  if not takes(key) then return end
  local queued = c.queue:add(key)
  if NARRATE then narrate_add(c, key, cause, queued) end
end

local function process(c, key)
  local g = shards.current()
  -- By the clock, not only by what the election's timers last decided: a
  -- worker that runs first after a pause of the process must not start
  -- a reconcile on a Lease that lapsed meanwhile.
  if (g and not g:owns(key)) or not leader.leading() then
    c.queue:forget(key)
    c.queue:done(key)
    return
  end
  -- Not before the cache holds this controller's own writes for the key:
  -- the key comes back with the event that carries them, or at the bound.
  if writes.hold(c, key) then
    c.queue:done(key)
    return
  end
  -- A graceful shutdown lets this call finish, even one running when the
  -- signal comes, and its book-keeping too: a signal stops a task at any
  -- instruction, and one that stopped this between the reconcile and the
  -- lines below would leave the key in flight for the shutdown to wait on.
  core.reconciling(true)
  if g then g:started(key) end
  local started = core.now()
  local ctx = { controller = c, attempt = c.queue:num_requeues(key) + 1 }
  c.active = c.active + 1
  c.in_flight[key] = true
  if NARRATE then narrate('%s: reconcile %s started (attempt %d)', c.name, key, ctx.attempt) end
  local ok, res, err = xpcall(c.reconcile, debug.traceback, key, ctx)
  c.in_flight[key] = nil
  c.active = c.active - 1
  local took = core.now() - started
  observe(c.reconcile_time, took)
  c.reconciles = c.reconciles + 1
  local result, again = 'success', nil
  if not ok then
    c.panics = c.panics + 1
    result, again = failed(c, key, res)
    if result == 'error' then result = 'panic' end
  elseif getmetatable(res) == REQUEUE then
    if res.after then
      c.requeues_after = c.requeues_after + 1
      c.queue:forget(key)
      c.queue:add_after(key, res.after)
      result, again = 'requeue_after', res.after
    else
      c.requeues = c.requeues + 1
      result, again = 'requeue', c.queue:add_rate_limited(key)
    end
  elseif res == nil and err ~= nil or res == false then
    result, again = failed(c, key, err or 'reconcile returned false')
  else
    c.successes = c.successes + 1
    c.queue:forget(key)
  end
  if NARRATE then narrate_end(c, key, took, result, again) end
  c.queue:done(key)
  if g then g:finished(key) end
  core.reconciling(false)
end

local function worker(c)
  while true do
    local key = c.queue:get()
    if key == nil then return end
    process(c, key)
  end
end

local function check_informers(list, what)
  for i, inf in ipairs(list or {}) do
    if not core.is(inf, 'informer') then
      error(('%s[%d] must be an informer made by klua.informer'):format(what, i), 3)
    end
  end
  return list or {}
end

--- Creates and starts a controller; see the module comment.
function M.new(opts)
  if type(opts) ~= 'table' then error('klua.controller takes a table', 2) end
  if type(opts.reconcile) ~= 'function' then error('klua.controller needs reconcile = function(key, ctx)', 2) end
  local watches = check_informers(opts.watches, 'watches')
  local owns = check_informers(opts.owns, 'owns')
  if #watches == 0 then error('klua.controller needs at least one informer in watches', 2) end
  local c = setmetatable({
    name = opts.name or 'controller',
    reconcile = opts.reconcile,
    queue = core.queue(opts.rate_limit),
    reconciles = 0, successes = 0, failures = 0, terminal_errors = 0, panics = 0, requeues = 0,
    requeues_after = 0, reconcile_time = histogram(),
    workers = opts.workers or 1, active = 0, in_flight = {}, last_errors = {},
  }, Controller)
  writes.attach(c, watches, owns, watches[1]:resource().kind, opts.read_your_writes)
  M.all[#M.all + 1] = c
  endpoint.track_controller(c)
  -- The causes are made here, once: -v 3 names them in each enqueue.
  local function causes(inf, what)
    local name = core.state(inf).name
    return { add = name .. ' add' .. what, update = name .. ' update' .. what, delete = name .. ' delete' .. what }
  end
  local function enqueuer(cause) return function(obj) add(c, key_of(obj), cause) end end
  for _, inf in ipairs(watches) do
    local by = causes(inf, '')
    local enqueue_updated = enqueuer(by.update)
    inf:on('add', enqueuer(by.add))
    inf:on('update', function(_, new) enqueue_updated(new) end)
    inf:on('delete', enqueuer(by.delete))
  end
  local kind = watches[1]:resource().kind
  local function owner_enqueuer(cause)
    return function(obj)
      local k = owner_key(obj, kind)
      if k then add(c, k, cause) end
    end
  end
  for _, inf in ipairs(owns) do
    local by = causes(inf, ' of an owned object')
    local enqueue_owner = owner_enqueuer(by.update)
    inf:on('add', owner_enqueuer(by.add))
    inf:on('update', function(old, new)
      enqueue_owner(new)
      local before = owner_key(old, kind)
      if before and before ~= owner_key(new, kind) then add(c, before, by.update) end
    end)
    inf:on('delete', owner_enqueuer(by.delete))
  end
  -- A shard this replica starts to hold brings the keys of its cached
  -- objects, which the replica that held it before may not have finished.
  shards.on_acquired(function(i)
    local g = shards.current()
    local cause = 'shard ' .. i .. ' acquired'
    for _, inf in ipairs(watches) do
      for _, obj in ipairs(inf:list()) do
        local key = key_of(obj)
        if shards.shard_of(key, g.n) == i then add(c, key, cause) end
      end
    end
  end)
  -- Workers start once every informer has handed over its first list, as
  -- client-go's controllers wait for their caches to sync: a reconcile
  -- reading a half-filled cache would take objects not listed yet for
  -- objects that do not exist, and create or delete them again.
  -- With leader election they also wait to lead: informers sync on
  -- every replica, so a new leader starts with a warm cache.
  core.on_synced(function()
    leader.on_leading(function()
      for _ = 1, opts.workers or 1 do
        core.after(0, function() worker(c) end)
      end
    end)
  end)
  return handle(c)
end

return M
