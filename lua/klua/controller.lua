--- `klua.controller`: the controller pattern with client-go's work-queue
-- semantics.
--
--   local c = klua.controller {
--     name = 'podsets',
--     watches = { podsets },         -- changes to these enqueue the object's own key
--     owns = { pods },               -- changes to these enqueue their controller owner's key
--     workers = 2,
--     reconcile = function(key, ctx) ... end,
--     reconcile_timeout = 30,        -- optional: seconds a reconcile may take
--     debounce = 0.5,                -- optional: seconds of quiet before a changed key is queued
--     changed_paths = 'all',         -- optional: report every changed path (see ctx.causes)
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
-- Fresh changes first: the queue has controller-runtime's priorities
-- (pkg/controller/priorityqueue, v0.20). The adds of an initial list (and
-- of a handler's replay of the cache), of a resync (an update whose
-- resourceVersion did not change: handler.LowPriorityWhenUnchanged's rule)
-- and of a shard taken over go in at low priority; a live watch's events,
-- klua.requeue, requeue_after, retries and ctl:enqueue at normal priority;
-- a key queued twice keeps the higher. So a change made while the keys of
-- 20,000 cached objects wait for their first reconcile is reconciled next.
-- A relist needs no rule: it delivers only the objects that changed while
-- the watch was down (src/cache/store.c), which are changes.
--
-- Why was I called: ctx.causes lists what queued the key since its last
-- reconcile began, oldest first (the last 16), and ctx.cause is the last
-- of them. A cause is {event =, informer =, object =, owner =, reason =,
-- changed =}:
--   event     "add", "update", "delete", "resync" (a resync's update),
--             "requeue" (reason "requeue", "requeue_after", "error" or
--             "timeout"), "enqueue" (ctl:enqueue) or "shard" (under
--             --shards, a shard this replica took over)
--   informer  the name of the informer whose event it was
--   object    the key of that object: for an owned object, the child's
--   owner     true when the object is an owned one mapped to its owner
--   initial   true for an add of the initial list
--   changed   for an update, the dotted paths that changed, sorted:
--             objects followed down to the member, arrays whole
--             ("spec.replicas", "metadata.labels.app", "spec.containers");
--             metadata.resourceVersion and metadata.managedFields left
--             out and a changed status reported as "status", unless
--             changed_paths = 'all'
-- ctx.priority is the priority the key was queued at (0, or -100 low).
--
-- debounce = S waits until a key's informer events have been quiet for S
-- seconds before queuing it, so that a burst of updates is one reconcile
-- (kube-rs's Config::debounce). The initial list, resyncs and requeues are
-- not delayed.
--
-- reconcile_timeout = S bounds a reconcile's wall time (off by default,
-- as in controller-runtime, whose ReconciliationTimeout this is): once S
-- seconds have passed, the API call or klua.sleep it waits in ends at once
-- (a request is cancelled and returns nil and an error of reason
-- "DeadlineExceeded"), and so does every later one. Whatever it then
-- returns, the reconcile counts as a timeout
-- (controller_runtime_reconcile_timeouts_total, a name of klua's:
-- controller-runtime counts none) and an error, and the key is retried
-- after its backoff. The instruction budget (--instruction-budget) bounds
-- its CPU meanwhile.
--
-- `klua run --once` (a trial run, docs/deploy.md): each controller
-- reconciles every key queued before its informers synced (the keys of
-- the initial list, and of ctl:enqueue before then) once, and nothing
-- else: a key queued later is dropped, and no result queues a key again
-- (klua.requeue and requeue_after count as successes, a failure as a
-- failure: no retry). Once every controller has reconciled its keys, klua
-- exits: 0 when every reconcile succeeded, else 1 after an error line
-- naming the keys that failed. With --leader-elect the keys are
-- reconciled once this replica leads.
--
-- The controller_runtime_* metrics count these outcomes as
-- controller-runtime's reconcileHandler does (pkg/internal/controller/
-- controller.go, v0.20): result "success", "requeue_after", "requeue" or
-- "error"; a raise as a panic and an error; a terminal error as one and an
-- error.
local core = require('klua.core')
local C = core.informer_fns
local leader = require('klua.leader')
local shards = require('klua.shards')
local endpoint = require('klua.internal.endpoint')
local object = require('klua.internal.object')
local util = require('klua.internal.objutil')
local writes = require('klua.internal.writes')
local cause = require('klua.internal.cause')

local M = {}

-- -v 3 narrates every enqueue and reconcile. The level is set before any
-- script runs and never changes: read once, the per-event check is a test
-- of a local.
local NARRATE = core.verbosity() >= 3

-- --once (see the module comment): read once, it never changes.
local ONCE = core.controller_options().once == true

-- --server-side-sharding=false: every replica lists everything, whatever the server.
local SERVER_SHARDING = core.controller_options().server_sharding ~= false

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
-- controller-runtime's priorities: handler.LowPriority, and the default.
local LOW, NORMAL = -100, 0
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

--- The key of obj's controller owner when that owner is of `kind`, and
-- the owner's uid.
local function owner_key(obj, kind)
  local refs = obj.metadata.ownerReferences
  if not refs then return nil end
  for _, ref in ipairs(refs) do
    if ref.controller == true and (kind == nil or ref.kind == kind) then
      return util.key(obj.metadata.namespace, ref.name), ref.uid
    end
  end
  return nil
end

local Controller = {}
Controller.__index = Controller

--- Enqueues a key by hand, at normal priority (its cause: event "enqueue").
-- @param key "namespace/name", or "name"
-- @usage
-- ctl:enqueue('default/web')
function Controller:enqueue(key)
  if self.once then self.once:note(key) end
  cause.note(self.causes, key, { event = 'enqueue', object = key })
  local queued = self.queue:add(key, NORMAL)
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
-- reconcile that failed, terminal_errors, panics and timeouts included),
-- terminal_errors, panics (reconciles that raised), timeouts (reconciles
-- ended by reconcile_timeout), requeues
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
  for _, k in ipairs { 'reconciles', 'successes', 'failures', 'terminal_errors', 'panics', 'timeouts', 'requeues',
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
function Controller:shutdown()
  self.queue:shutdown()
  -- A key still waiting out its debounce would be refused by now.
  for key, timer in pairs(self.debouncing) do
    timer:cancel()
    self.debouncing[key] = nil
  end
end

-- What klua.controller returns: a klua.controller object in front of c.
local _, handle = object.class('controller', Controller, { 'enqueue', 'stats', 'shutdown' },
  function(c) return ('controller(%s)'):format(c.name) end)

-- How many of its last failures a controller keeps for the live page
-- (klua.internal.ui): a failure is rare next to the events, so this costs
-- nothing on the way of a successful reconcile.
local LAST_ERRORS = 8

-- Queues key again later, at normal priority, for the reason given;
-- returns after how many seconds, for -v 3.
local function requeue(c, key, reason, after)
  if c.once then return nil end
  cause.note(c.causes, key, { event = 'requeue', reason = reason, object = key })
  if after then
    c.queue:add_after(key, after, NORMAL)
    return after
  end
  return c.queue:add_rate_limited(key, NORMAL)
end

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
  return 'error', requeue(c, key, 'error')
end

-- Returns the result and the backoff, for -v 3.
local function timed_out(c, key)
  c.failures = c.failures + 1
  c.timeouts = c.timeouts + 1
  core.log('error', ('%s: reconcile %s ran past reconcile_timeout (%g s) and was ended (attempt %d)'):format(
    c.name, key, c.reconcile_timeout, c.queue:num_requeues(key) + 1))
  return 'timeout', requeue(c, key, 'timeout')
end

-- What places key in a shard (klua.shards.shard_of): the uid of its
-- object, as cached by the primary informer or as the last event about it
-- told (a deleted object's, or an owner's from its owned objects'
-- ownerReferences), else the key itself.
local function shard_id(c, key)
  local obj = c.primary:get(key)
  local uid = obj and obj.metadata.uid
  if type(uid) == 'string' and uid ~= '' then return uid end
  return c.uids[key] or key
end

-- Under --shards a key is taken only while its shard is held (and not
-- handed over): another replica reconciles the rest.
local function takes(c, key)
  local g = shards.current()
  return not g or g:owns(shard_id(c, key))
end

-- What -v 3 says of a cause: the informer and event ("pods update").
local function told(why)
  if why.event == 'shard' then return 'shard ' .. why.shard .. ' acquired' end
  return ('%s %s%s'):format(why.informer, why.event, why.owner and ' of an owned object' or '')
end

local function queue_now(c, key, prio, why)
  if c.once then c.once:note(key) end
  local queued = c.queue:add(key, prio)
  if NARRATE then narrate_add(c, key, told(why), queued) end
end

-- Queues key for cause `why` at prio; a live event waits out the debounce.
local function add(c, key, prio, why)
  if not takes(c, key) then
    -- Another replica's key: its uid is kept only while it is queued here.
    if not c.causes[key] and not c.in_flight[key] then c.uids[key] = nil end
    return
  end
  cause.note(c.causes, key, why)
  if not c.debounce or prio < NORMAL then return queue_now(c, key, prio, why) end
  local pending = c.debouncing[key]
  if pending then pending:cancel() end
  c.debouncing[key] = core.after(c.debounce, function()
    c.debouncing[key] = nil
    if takes(c, key) then queue_now(c, key, prio, why) end
  end)
end

-- Calls reconcile under reconcile_timeout; returns whether the timeout
-- ended it, then xpcall's results.
local function call_reconcile(c, key, ctx)
  if not c.reconcile_timeout then return false, xpcall(c.reconcile, debug.traceback, key, ctx) end
  core.set_deadline(c.reconcile_timeout, ('the reconcile of %s ran past reconcile_timeout (%g s)'):format(
    key, c.reconcile_timeout))
  local ok, res, err = xpcall(c.reconcile, debug.traceback, key, ctx)
  return core.clear_deadline(), ok, res, err
end

local function process(c, key, prio)
  local g = shards.current()
  local id = g and shard_id(c, key)
  -- By the clock, not only by what the election's timers last decided: a
  -- worker that runs first after a pause of the process must not start
  -- a reconcile on a Lease that lapsed meanwhile.
  if (g and not g:owns(id)) or not leader.leading() then
    cause.take(c.causes, key)
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
  if c.once and not c.once.pending[key] then
    cause.take(c.causes, key)
    c.queue:forget(key)
    c.queue:done(key)
    return
  end
  -- A graceful shutdown lets this call finish, even one running when the
  -- signal comes, and its book-keeping too: a signal stops a task at any
  -- instruction, and one that stopped this between the reconcile and the
  -- lines below would leave the key in flight for the shutdown to wait on.
  core.reconciling(true)
  if g then g:started(id) end
  local started = core.now()
  local causes = cause.take(c.causes, key)
  local ctx = { controller = c, attempt = c.queue:num_requeues(key) + 1, causes = causes,
    cause = causes[#causes], priority = prio }
  c.active = c.active + 1
  c.in_flight[key] = true
  if NARRATE then narrate('%s: reconcile %s started (attempt %d)', c.name, key, ctx.attempt) end
  local expired, ok, res, err = call_reconcile(c, key, ctx)
  c.in_flight[key] = nil
  c.active = c.active - 1
  local took = core.now() - started
  observe(c.reconcile_time, took)
  c.reconciles = c.reconciles + 1
  local result, again = 'success', nil
  if expired then
    result, again = timed_out(c, key)
  elseif not ok then
    c.panics = c.panics + 1
    result, again = failed(c, key, res)
    if result == 'error' then result = 'panic' end
  elseif getmetatable(res) == REQUEUE then
    if res.after then
      c.requeues_after = c.requeues_after + 1
      c.queue:forget(key)
      result, again = 'requeue_after', requeue(c, key, 'requeue_after', res.after)
    else
      c.requeues = c.requeues + 1
      result, again = 'requeue', requeue(c, key, 'requeue')
    end
  elseif res == nil and err ~= nil or res == false then
    result, again = failed(c, key, err or 'reconcile returned false')
  else
    c.successes = c.successes + 1
    c.queue:forget(key)
    c.uids[key] = nil
  end
  if NARRATE then narrate_end(c, key, took, result, again) end
  c.queue:done(key)
  if g then g:finished(id) end
  core.reconciling(false)
  if c.once then c.once:finished(key, result) end
end

local function worker(c)
  while true do
    local key, prio = c.queue:get()
    if key == nil then return end
    process(c, key, prio)
  end
end

-- --once's book of a controller: the keys queued before its informers
-- synced (pending until reconciled), and those whose reconcile failed.
local Once = {}
Once.__index = Once

local function new_once()
  return setmetatable({ pending = {}, left = 0, reconciled = 0, failed = {}, synced = false }, Once)
end

function Once:note(key)
  if self.synced or self.pending[key] then return end
  self.pending[key] = true
  self.left = self.left + 1
end

local OK = { success = true, requeue = true, requeue_after = true }

-- Ends the run once every controller has reconciled its keys once.
local function once_check()
  local keys, failed = 0, {}
  for _, c in ipairs(M.all) do
    if not c.once.synced or c.once.left > 0 then return end
    keys = keys + c.once.reconciled
    for _, key in ipairs(c.once.failed) do failed[#failed + 1] = c.name .. ' ' .. key end
  end
  if #failed > 0 then
    core.log('error', ('--once: %d of %d reconciles failed: %s'):format(#failed, keys, table.concat(failed, ', ')))
    return core.stop(1)
  end
  local function count(n, what) return ('%d %s%s'):format(n, what, n == 1 and '' or 's') end
  core.log('info', ('--once: reconciled %s of %s, every one successfully'):format(count(keys, 'key'),
    count(#M.all, 'controller')))
  core.stop(0)
end

function Once:finished(key, result)
  self.pending[key] = nil
  self.left = self.left - 1
  self.reconciled = self.reconciled + 1
  if not OK[result] then self.failed[#self.failed + 1] = key end
  if self.left == 0 then once_check() end
end

function Once:sync()
  self.synced = true
  core.after(0, once_check)
end

-- A script with no controller has nothing to reconcile: --once ends it
-- once its informers have synced.
if ONCE then
  core.on_synced(function()
    if #M.all == 0 then
      core.log('warn', '--once: the script made no controller: nothing to reconcile')
      core.stop(0)
    end
  end)
end

local function check_informers(list, what)
  for i, inf in ipairs(list or {}) do
    if not core.is(inf, 'informer') then
      error(('%s[%d] must be an informer made by klua.informer'):format(what, i), 3)
    end
  end
  return list or {}
end

-- A positive number of seconds at opts[name], or nil; raises otherwise.
local function check_seconds(opts, name)
  local v = opts[name]
  if v ~= nil and (type(v) ~= 'number' or not (v > 0)) then
    error(('klua.controller: %s must be a positive number of seconds (or absent: off)'):format(name), 3)
  end
  return v
end

-- Under --shards, against a server that shards lists and watches
-- (KEP-5866), makes the primary informer select only the shards held,
-- relisting when they change. Its other informers, whose objects' shard is
-- another object's (an owner's, a key's), keep receiving everything. With
-- no shard held the selection is left as it is, for the next holding.
local function select_shards(c)
  local g = shards.current()
  local sel = g and g:shard_selector()
  if not sel or c.server_shards == false then return end
  if c.server_shards == nil then
    local honours, err = shards.server_honours(c.primary, sel)
    if honours == nil then
      core.log('warn', ('%s: cannot tell whether the server shards lists (%s); asking again next round')
        :format(c.name, tostring(err and err.message or err)))
      return
    end
    c.server_shards = honours
    core.log('info', ('%s: %s'):format(c.name, honours
      and 'the server shards lists and watches (shardSelector, KEP-5866): the primary informer selects the held shards'
      or 'the server ignores shardSelector (KEP-5866): every replica lists everything and filters by shard'))
    if not honours then return end
  end
  if C.shard_selector(c.primary) ~= sel then C.reshard(c.primary, sel) end
end

-- Registers on inf the handlers that turn its events into causes: map(obj)
-- says which key an object queues (nil: none) and whether it is an owner
-- mapping. The initial list and resyncs go in at low priority.
local function handle_events(c, inf, map, owned)
  local name = inf:name()
  local function queue(obj, prio, fields)
    local k, uid = map(obj)
    if not k then return end
    -- What places the key when the primary informer does not hold its
    -- object (add forgets it for another replica's key, a successful
    -- reconcile for this one's).
    if uid and shards.current() then c.uids[k] = uid end
    fields.informer, fields.object, fields.owner = name, key_of(obj), owned or nil
    add(c, k, prio, fields)
  end
  inf:on('add', function(obj, in_initial_list)
    queue(obj, in_initial_list and LOW or NORMAL, { event = 'add', initial = in_initial_list or nil })
  end)
  inf:on('update', function(old, new)
    if old.metadata.resourceVersion == new.metadata.resourceVersion then
      queue(new, LOW, { event = 'resync' })
    else
      queue(new, NORMAL, cause.update({ event = 'update' }, old, new, c.all_paths))
    end
    -- An owned object that changed owners queues the owner it left too.
    local before = owned and map(old)
    if before and before ~= map(new) then
      add(c, before, NORMAL, { event = 'update', informer = name, object = key_of(old), owner = true })
    end
  end)
  inf:on('delete', function(obj) queue(obj, NORMAL, { event = 'delete' }) end)
end

--- Creates and starts a controller; see the module comment.
function M.new(opts)
  if type(opts) ~= 'table' then error('klua.controller takes a table', 2) end
  if type(opts.reconcile) ~= 'function' then error('klua.controller needs reconcile = function(key, ctx)', 2) end
  local watches = check_informers(opts.watches, 'watches')
  local owns = check_informers(opts.owns, 'owns')
  if #watches == 0 then error('klua.controller needs at least one informer in watches', 2) end
  if opts.changed_paths ~= nil and opts.changed_paths ~= 'all' then
    error("klua.controller: changed_paths is 'all' (every changed path) or absent", 2)
  end
  local c = setmetatable({
    name = opts.name or 'controller',
    reconcile = opts.reconcile,
    reconcile_timeout = check_seconds(opts, 'reconcile_timeout'),
    debounce = check_seconds(opts, 'debounce'),
    all_paths = opts.changed_paths == 'all',
    queue = core.queue(opts.rate_limit),
    reconciles = 0, successes = 0, failures = 0, terminal_errors = 0, panics = 0, timeouts = 0, requeues = 0,
    requeues_after = 0, reconcile_time = histogram(),
    workers = opts.workers or 1, active = 0, in_flight = {}, last_errors = {},
    causes = {},     -- key -> what queued it since its reconcile last began
    debouncing = {}, -- key -> the timer that queues it once its events are quiet
    once = ONCE and new_once() or nil,
    primary = watches[1],
    uids = {},       -- key -> its object's uid as an event last told (under --shards)
    -- Whether the server shards the primary's lists: nil until known; false from
    -- the start under --server-side-sharding=false.
    server_shards = nil,
  }, Controller)
  if not SERVER_SHARDING then c.server_shards = false end
  writes.attach(c, watches, owns, watches[1]:resource().kind, opts.read_your_writes)
  M.all[#M.all + 1] = c
  endpoint.track_controller(c)
  handle_events(c, watches[1], function(obj) return key_of(obj), obj.metadata.uid end)
  for i = 2, #watches do handle_events(c, watches[i], key_of) end
  local kind = watches[1]:resource().kind
  for _, inf in ipairs(owns) do
    handle_events(c, inf, function(obj) return owner_key(obj, kind) end, true)
  end
  -- A shard this replica starts to hold brings the keys of its cached
  -- objects, which the replica that held it before may not have finished.
  shards.on_acquired(function(i)
    local g = shards.current()
    for _, inf in ipairs(watches) do
      for _, obj in ipairs(inf:list()) do
        local key = key_of(obj)
        if shards.shard_of(shard_id(c, key), g.n) == i then
          add(c, key, LOW, { event = 'shard', shard = i, object = key })
        end
      end
    end
  end)
  shards.on_round(function() select_shards(c) end)
  -- Workers start once every informer has handed over its first list, as
  -- client-go's controllers wait for their caches to sync: a reconcile
  -- reading a half-filled cache would take objects not listed yet for
  -- objects that do not exist, and create or delete them again.
  -- With leader election they also wait to lead: informers sync on
  -- every replica, so a new leader starts with a warm cache.
  core.on_synced(function()
    if c.once then c.once:sync() end
    leader.on_leading(function()
      for _ = 1, opts.workers or 1 do
        core.after(0, function() worker(c) end)
      end
    end)
  end)
  return handle(c)
end

return M
