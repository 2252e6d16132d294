--- Leader election on a coordination.k8s.io/v1 Lease, with the semantics of
-- client-go's tools/leaderelection:
--
-- * A candidate tries to take the Lease every retry period (jittered by up
--   to 1.2 periods, as wait.JitterUntil does) until it holds it.
-- * Another holder's Lease counts as expired once it has not changed for
--   its leaseDurationSeconds by the candidate's own clock: the time the
--   candidate last saw the record change, not the renewTime written in
--   it, so clocks need not agree between replicas.
-- * The leader renews every retry period. It leads only while its Lease is
--   valid by its own monotonic clock: until the renew deadline after its
--   last successful renewal was sent (client-go counts from the answer;
--   this is stricter). A timer stops leading at that moment, even while a
--   renewal still waits for its answer, and klua.leader() and every write
--   (lua/klua/internal/fence.lua) check the clock themselves, so that after a pause
--   of the whole process (SIGSTOP, a frozen VM) nothing acts as leader
--   before that timer has had its turn.
-- * A conflict (409) on create or update is the normal race between
--   candidates, not an error.
-- * Releasing (on a clean stop) writes an empty holder with a one-second
--   duration, so another candidate takes over at its next try.
--
-- Scripts use it through `klua.leader_election`, `klua.leader()` and
-- `klua.on_leading(fn)`; `klua run --leader-elect` starts one election for
-- the script.
local core = require('klua.core')
local api = require('klua.api')
local fence = require('klua.internal.fence')
local object = require('klua.internal.object')
local util = require('klua.internal.objutil')

local M = {}

local LEASES = 'leases.coordination.k8s.io'
-- client-go's JitterFactor for the acquire loop.
local JITTER = 1.2

local Elector = {}
Elector.__index = Elector

-- The process's election: at most one, started by --leader-elect or by
-- the script; hooks wait for it to lead.
local election

-- The Lease's own writes, which no Lease fences.
local LEASE_WRITE = { [fence.EXEMPT] = true }

-- metav1.MicroTime: every renewal's record differs from the one before,
-- so that other candidates see each one as a change and count the lease
-- duration from it (with whole seconds, two renewals within a second
-- would look like one, and the second would go unseen).
local function micro_time(t)
  local whole = math.floor(t)
  return os.date('!%Y-%m-%dT%H:%M:%S', whole) .. ('.%06dZ'):format(math.floor((t - whole) * 1e6))
end

--- The identity client-go's examples use: the host name (a Pod's name in a
-- cluster) and a random suffix, so two processes on one host differ.
function M.default_identity()
  local f = io.open('/proc/sys/kernel/hostname', 'r')
  local host = f and f:read('l') or os.getenv('HOSTNAME') or 'klua'
  if f then f:close() end
  -- The kernel's randomness, not math.random: replicas started in the same
  -- second may seed Lua's generator alike, and two candidates with one
  -- identity would both believe they lead.
  local r = io.open('/dev/urandom', 'rb')
  local bytes = r and r:read(4)
  if r then r:close() end
  if not bytes or #bytes < 4 then
    bytes = string.pack('<I4', math.random(0, 0xffffffff) ~ (os.time() & 0xffffffff))
  end
  return host .. '_' .. string.format('%08x', string.unpack('<I4', bytes))
end

local function positive(opts, field, default)
  local v = opts[field]
  if v == nil then return default end
  if type(v) ~= 'number' or v <= 0 then
    error(('leader election: %s must be a positive number of seconds'):format(field), 3)
  end
  return v
end

--- Checks the settings as client-go's NewLeaderElector does; returns an
-- elector that has not started.
function M.new(opts)
  if type(opts) ~= 'table' then error('leader election takes a table such as {name = "my-controller"}', 2) end
  if type(opts.name) ~= 'string' or opts.name == '' then
    error('leader election needs name = "<lease name>"', 2)
  end
  local e = setmetatable({
    name = opts.name,
    namespace = opts.namespace or core.namespace(),
    identity = opts.identity or M.default_identity(),
    lease_duration = positive(opts, 'lease_duration', core.lease_defaults.lease_duration),
    renew_deadline = positive(opts, 'renew_deadline', core.lease_defaults.renew_deadline),
    retry_period = positive(opts, 'retry_period', core.lease_defaults.retry_period),
    release_on_stop = opts.release_on_stop ~= false,
    on_started = opts.on_started_leading,
    on_stopped = opts.on_stopped_leading,
    on_new_leader = opts.on_new_leader,
    -- labels: set by klua.shards on its electors (M.add_labels); none here.
    leading = false,
    stopped = false,
    -- The monotonic time the Lease is valid until: the renew deadline
    -- after the last successful take or renewal was sent.
    valid_until = -math.huge,
  }, Elector)
  if e.lease_duration <= e.renew_deadline then
    error(('leader election: lease_duration (%g s) must be greater than renew_deadline (%g s)')
      :format(e.lease_duration, e.renew_deadline), 2)
  end
  if e.renew_deadline <= JITTER * e.retry_period then
    error(('leader election: renew_deadline (%g s) must be greater than %g × retry_period (%g s)')
      :format(e.renew_deadline, JITTER, e.retry_period), 2)
  end
  return e
end

function Elector:_key() return util.key(self.namespace, self.name) end

--- Sets labels (name -> value; nil for none) on lease, keeping the other
-- labels it has: an elector with labels writes them when it creates the
-- Lease and on every update, and leaves the rest of the metadata as it
-- read it (as client-go's LeaseLock, which replaces only the spec).
-- Returns whether any label changed.
function M.add_labels(lease, labels)
  if not labels then return false end
  local meta = lease.metadata
  local have = meta.labels
  if type(have) ~= 'table' then
    have = {}
    meta.labels = have
  end
  local changed = false
  for k, v in pairs(labels) do
    if have[k] ~= v then have[k], changed = v, true end
  end
  return changed
end

-- Remembers the record last read or written, and when it changed: the
-- clock that judges expiry. Announces a new holder once.
function Elector:_observe(spec, raw)
  if raw ~= self.observed_raw then
    self.observed, self.observed_raw, self.observed_time = spec, raw, core.now()
    local holder = spec.holderIdentity or ''
    if holder ~= '' and holder ~= self.reported_leader then
      self.reported_leader = holder
      if holder ~= self.identity then core.log('info', ('lease %s: new leader elected: %s'):format(self:_key(), holder)) end
      if self.on_new_leader then self.on_new_leader(holder) end
    end
  end
end

function Elector:_holds()
  return self.observed ~= nil and self.observed.holderIdentity == self.identity
end

local function record(e, now)
  return {
    holderIdentity = e.identity,
    leaseDurationSeconds = math.ceil(e.lease_duration),
    acquireTime = micro_time(now),
    renewTime = micro_time(now),
  }
end

-- Stops leading (on_lapsed) when the Lease lapses, unless renewed first.
function Elector:_arm_lapse()
  if self.lapse_timer then self.lapse_timer:cancel() end
  self.lapse_timer = core.after(math.max(0, self.valid_until - core.now()), function()
    self.lapse_timer = nil
    if self:_valid() then return self:_arm_lapse() end
    ;(self.on_lapsed or Elector._lapsed)(self)
  end)
end

-- A take or renewal sent at `sent` succeeded: the Lease is valid until
-- the renew deadline after it, and lapses then unless renewed again.
function Elector:_renewed(sent)
  local until_ = sent + self.renew_deadline
  if until_ <= self.valid_until then return end
  self.valid_until = until_
  self:_arm_lapse()
end

-- Whether the Lease is valid now by this process's clock.
function Elector:_valid() return core.now() < self.valid_until end

function Elector:_forget_lease()
  self.valid_until = -math.huge
  if self.lapse_timer then self.lapse_timer:cancel() end
  self.lapse_timer = nil
end

-- The answer to a write of the Lease (verb "create" or "update") sent at
-- `sent`: true when it was stored. An error `lost_race` recognizes is another
-- candidate's write coming first, not worth a log line.
function Elector:_wrote(verb, lost_race, sent, lease, err)
  if not lease then
    if not lost_race(err) then
      core.log('error', ('lease %s: cannot %s it: %s'):format(self:_key(), verb, tostring(err)))
    end
    return false
  end
  self:_observe(lease.spec, core.json.encode(lease.spec))
  self:_renewed(sent)
  return true
end

-- client-go's tryAcquireOrRenew: true when this candidate holds the Lease
-- after the call. renewing: a renewal of a Lease it leads on.
function Elector:_try_acquire_or_renew(renewing)
  local rec = record(self, core.wall_time())
  local lease, err = api.get(LEASES, self:_key())
  -- Stopped while the read was under way: write nothing, or a released
  -- Lease would be taken again; lapsed meanwhile, the renewal would take
  -- back a Lease this process has stopped leading on.
  if self.stopped or (renewing and not self.leading) then return false end
  if not lease then
    if not api.is_not_found(err) then
      core.log('error', ('lease %s: cannot read it: %s'):format(self:_key(), tostring(err)))
      return false
    end
    rec.leaseTransitions = 0
    local sent = core.now()
    return self:_wrote('create', api.is_already_exists, sent, api.create(LEASES, {
      apiVersion = 'coordination.k8s.io/v1', kind = 'Lease',
      metadata = { name = self.name, namespace = self.namespace, labels = self.labels }, spec = rec,
    }, LEASE_WRITE))
  end
  local old = lease.spec or {}
  self:_observe(old, core.json.encode(old))
  local holder = old.holderIdentity or ''
  if holder ~= '' and not self:_holds()
      and self.observed_time + (old.leaseDurationSeconds or 0) > core.now() then
    return false
  end
  if self:_holds() then
    rec.acquireTime = old.acquireTime or rec.acquireTime
    rec.leaseTransitions = old.leaseTransitions or 0
  else
    rec.leaseTransitions = (old.leaseTransitions or 0) + 1
  end
  lease.spec = rec
  M.add_labels(lease, self.labels)
  local sent = core.now()
  return self:_wrote('update', api.is_conflict, sent, api.update(LEASES, lease, LEASE_WRITE))
end

local function jittered(period) return period + math.random() * JITTER * period end

-- Renews every retry period, and again every retry period after one that
-- failed, while it leads: the lapse timer (_renewed) ends that, as
-- client-go's renew loop polls within its deadline.
function Elector:_renew_loop()
  while self.leading and not self.stopped do
    core.sleep(self.retry_period)
    while self.leading and not self.stopped and not self:_try_acquire_or_renew(true) do
      core.sleep(self.retry_period)
    end
  end
end

function Elector:_lapsed() self:_stop_leading(('no renewal within %g s'):format(self.renew_deadline)) end

function Elector:_stop_leading(why)
  if not self.leading then return end
  self.leading = false
  self:_forget_lease()
  core.log('warn', ('lease %s: leader election lost: %s'):format(self:_key(), why))
  if self.on_stopped then self.on_stopped() end
end

--- Runs the election in its own task: acquire, lead, renew, until the
-- Lease is lost or `stop` is called.
-- @return the election
-- @usage
-- local e = klua.leader_election { name = 'my-controller' } -- which calls e:start()
function Elector:start()
  core.after(0, function()
    if self == election then M.check() end
    core.log('info', ('lease %s: attempting to acquire the leader lease as %s'):format(self:_key(), self.identity))
    -- Taken by a request answered only after the renew deadline: not
    -- valid, so tried again (a renewal, if nobody took it meanwhile).
    while not self.stopped and not (self:_try_acquire_or_renew() and self:_valid()) do
      core.sleep(jittered(self.retry_period))
    end
    if self.stopped then return end
    self.leading = true
    core.log('info', ('lease %s: successfully acquired the lease as %s'):format(self:_key(), self.identity))
    if self.on_started then core.after(0, self.on_started) end
    self:_renew_loop()
  end)
  return self
end

--- Whether this process holds the Lease now: it leads, and by its own
-- clock the Lease has not lapsed (a renewal succeeded within the renew
-- deadline), even in the moment after a pause before klua has noticed.
-- @return true or false
-- @usage
-- if e:is_leader() then reconcile_all() end
function Elector:is_leader() return self.leading and self:_valid() end

--- Stops taking part; a leader releases the Lease (unless release_on_stop
-- is false) so that another candidate takes over at its next try.
-- @usage
-- e:stop()
function Elector:stop()
  if self.stopped then return end
  self.stopped = true
  local was_leading = self.leading
  self.leading = false
  self:_forget_lease()
  if not (was_leading and self.release_on_stop and self:_holds()) then return end
  -- A renewal under way when the election stopped may write between this
  -- read and the release: its conflict is retried from a fresh read.
  for _ = 1, 3 do
    local lease = api.get(LEASES, self:_key())
    if not lease or not lease.spec or lease.spec.holderIdentity ~= self.identity then return end
    local now = os.time()
    lease.spec = {
      holderIdentity = '', leaseDurationSeconds = 1,
      acquireTime = micro_time(now), renewTime = micro_time(now),
      leaseTransitions = lease.spec.leaseTransitions or 0,
    }
    local _, err = api.update(LEASES, lease, LEASE_WRITE)
    if not err then
      core.log('info', ('lease %s: released'):format(self:_key()))
      return
    end
    if not api.is_conflict(err) then
      core.log('warn', ('lease %s: could not release it: %s'):format(self:_key(), tostring(err)))
      return
    end
  end
  core.log('warn', ('lease %s: could not release it: it kept changing'):format(self:_key()))
end

-- Why the Lease cannot live where the election puts it, or nil: its
-- namespace does not exist (a create is refused with 404 for the
-- namespace, as kube-apiserver's NamespaceLifecycle admission answers;
-- a GET of an object in a missing namespace is a plain 404), or RBAC
-- forbids Leases there. Any other error is left to the election's
-- retries.
function Elector:_misplaced()
  local _, err = api.get(LEASES, self:_key())
  if err and api.is_not_found(err) then
    _, err = api.create(LEASES, {
      apiVersion = 'coordination.k8s.io/v1', kind = 'Lease',
      metadata = { name = self.name, namespace = self.namespace }, spec = {},
    }, { dry_run = true, [fence.EXEMPT] = true })
    if err and api.is_not_found(err) and (err.details or {}).kind == 'namespaces' then
      return ('namespace "%s" does not exist: create it (kubectl create namespace %s) or name another'):format(
        self.namespace, self.namespace)
    end
  end
  if err and api.is_forbidden(err) then
    return ('Leases in namespace "%s" are forbidden (%s): grant get, create and update on '
      .. 'leases.coordination.k8s.io there (deploy/rbac.yaml) or name another'):format(
      self.namespace, err.message or tostring(err))
  end
end

local leading_hooks = {}
-- Its Lease's namespace: nil before M.check, 'checking', then 'ok'.
local check_state
-- The Lease M.check looks at without an election (M.guard).
local guarded

--- Ends klua with status 2, before any watch starts, when the process's
-- election cannot keep its Lease where it is to live (see misplaced).
-- Runs once, from the first informer made or the election's start,
-- whichever comes first; it waits for the server.
function M.check()
  local e = election or guarded
  if not e or check_state == 'ok' then return end
  -- A second caller waits for the first one's answer: the informer it
  -- makes must not list before it.
  while check_state == 'checking' do core.sleep(0.01) end
  if check_state == 'ok' then return end
  check_state = 'checking'
  local why = e:_misplaced()
  if not why then
    check_state = 'ok'
    return
  end
  core.log('error', ('%s: %s'):format(e.namespace_source, why))
  core.stop(2)
  -- Nothing of this task may go on: the loop stops once it waits.
  core.sleep(math.huge)
end

-- What klua.leader_election returns: a klua.election object in front of
-- the elector; its start, like the elector's, returns it.
local methods, handle = object.class('election', Elector, { 'is_leader', 'stop' },
  function(e) return ('election(%s, %s)'):format(e:_key(), e.leading and 'leading' or 'not leading') end)
function methods.start(obj)
  if not core.is(obj, 'election') then error('call it as election:start(), with a colon', 2) end
  core.state(obj):start()
  return obj
end

--- Makes M.check look at e's Lease (the shards' membership Lease, under
-- --shards) when the process runs no election of its own.
function M.guard(e, source)
  e.namespace_source = source
  guarded = e
end

local function run_hooks()
  local hooks = leading_hooks
  leading_hooks = {}
  for _, fn in ipairs(hooks) do core.after(0, fn) end
end

--- Starts the process's leader election (see klua.leader_election).
function M.elect(opts)
  if election then error('leader election is already running for lease ' .. election:_key(), 2) end
  local stopped = opts.on_stopped_leading
  local e = M.new(opts)
  e.on_started = function()
    if opts.on_started_leading then opts.on_started_leading() end
    run_hooks()
  end
  -- As client-go's users do by default: a replica that lost the Lease
  -- exits, so that its Deployment restarts it as a fresh candidate rather
  -- than leave it running work another replica now owns.
  e.on_stopped = function()
    if stopped then stopped() end
    core.log('error', 'stopping: the leader lease was lost')
    core.stop(1)
  end
  e.namespace_source = opts.namespace_source or 'leader election namespace'
  election = e
  -- Under an election every write is the leader's: a replica that does
  -- not lead, or no longer does by its clock, sends none.
  local lease = 'the leader lease ' .. e:_key()
  fence.fence_process(function() return e.leading and e.valid_until or -math.huge, lease end)
  e:start()
  return handle(e)
end

--- Whether this process leads: always true without an election.
function M.leading() return election == nil or election:is_leader() end

--- Runs fn (as its own task) once this process leads: at once without an
-- election. The check waits for the loop's next turn, so an election the
-- script starts later in its main chunk still counts.
function M.on_leading(fn)
  if type(fn) ~= 'function' then error('klua.on_leading takes a function', 2) end
  core.after(0, function()
    if M.leading() then core.after(0, fn) else leading_hooks[#leading_hooks + 1] = fn end
  end)
end

--- The process's election, or nil.
function M.current() return election end

return M
