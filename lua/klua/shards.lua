--- Sharded reconcile: replicas share a controller's keys through Leases.
--
-- With `klua run --shards N` (and the `--leader-elect-*` lease settings),
-- the keys ("namespace/name") are split into N shards by a stable hash, and
-- each shard is a coordination.k8s.io/v1 Lease, `<id>-shard-0` ..
-- `<id>-shard-<N-1>`, taken and renewed with client-go's leaderelection
-- rules (klua.leader): a replica reconciles only the keys of the shards it
-- holds.
--
-- * The shard of a key is FNV-1a (32 bits) of the key's bytes, modulo N:
--   the same in every replica and every release, so a key moves only when
--   its shard changes hands.
-- * Membership: each replica also holds a Lease of its own,
--   `<id>-member-<8 hex digits of its identity's hash>`. Replicas count the
--   members whose Lease has changed within the lease duration by their own
--   clock (as client-go judges expiry), and take at most their fair share,
--   ceil(N / members). A replica over its share hands the extra shards
--   back; one under it takes free or expired ones. So after a rebalance
--   period no replica holds more than its share while another holds none.
-- * Handover: a shard a replica gives up is first drained: its keys are no
--   longer taken, the reconciles of its keys under way finish, and only then
--   is its Lease released (an empty holder, as client-go's
--   ReleaseOnCancel writes), so the next holder never overlaps with them.
--   The new holder enqueues every cached key of the shard.
-- * A shard whose renewal fails for the renew deadline is lost at once: its
--   keys are no longer taken. Reconciles already running cannot be
--   recalled; see docs/scale.md for what lease-based exclusion guarantees.
local core = require 'klua.core'
local api = require 'klua.api'
local leader = require 'klua.leader'

local M = {}

local LEASES = 'leases.coordination.k8s.io'

--- FNV-1a, 32 bits, of s.
function M.hash(s)
  local h = 0x811c9dc5
  for i = 1, #s do
    h = ((h ~ s:byte(i)) * 0x01000193) & 0xffffffff
  end
  return h
end

--- The shard (0 .. n-1) of a key.
function M.shard_of(key, n) return M.hash(key) % n end

local Group = {}
Group.__index = Group

local function check_count(n)
  if math.type(n) ~= 'integer' or n < 1 then
    error(('shards must be a whole number of at least 1, not %s'):format(tostring(n)), 3)
  end
end

--- Creates the shard group of a controller id; does not start it.
-- opts: name (the id), shards (N), namespace, identity, lease_duration,
-- renew_deadline, retry_period (as leader election's), on_acquired(shard)
-- (called when a shard starts being held, to enqueue its keys).
function M.new(opts)
  if type(opts) ~= 'table' then error('shards take a table such as {name = "my-controller", shards = 4}', 2) end
  check_count(opts.shards)
  -- The settings checks are leader election's own, made once here.
  local probe = leader.new {
    name = opts.name, namespace = opts.namespace, identity = opts.identity,
    lease_duration = opts.lease_duration, renew_deadline = opts.renew_deadline,
    retry_period = opts.retry_period,
  }
  local g = setmetatable({
    name = probe.name, namespace = probe.namespace, identity = probe.identity,
    n = opts.shards, lease_duration = probe.lease_duration,
    renew_deadline = probe.renew_deadline, retry_period = probe.retry_period,
    on_acquired = opts.on_acquired,
    electors = {},   -- shard -> the elector that takes and renews its Lease
    held = {},       -- shard -> { renewed = time of the last renewal }
    draining = {},   -- shard -> true while its reconciles finish before release
    inflight = {},   -- shard -> reconciles under way
    seen = {},       -- member Lease name -> { raw = its spec as JSON, at = when it changed }
    stopped = false,
  }, Group)
  g.member = g:elector(('%s-member-%08x'):format(g.name, M.hash(g.identity)))
  return g
end

function Group:elector(lease_name)
  return leader.new {
    name = lease_name, namespace = self.namespace, identity = self.identity,
    lease_duration = self.lease_duration, renew_deadline = self.renew_deadline,
    retry_period = self.retry_period,
  }
end

function Group:shard_elector(i)
  local e = self.electors[i]
  if not e then
    e = self:elector(('%s-shard-%d'):format(self.name, i))
    self.electors[i] = e
  end
  return e
end

--- Whether this replica takes key now: its shard is held and not draining.
function Group:owns(key)
  local i = M.shard_of(key, self.n)
  return self.held[i] ~= nil and not self.draining[i]
end

--- The shards held (draining ones included), in order.
function Group:shards()
  local out = {}
  for i = 0, self.n - 1 do
    if self.held[i] then out[#out + 1] = i end
  end
  return out
end

--- Counts a reconcile of key as under way (until finished(key)).
function Group:started(key)
  local i = M.shard_of(key, self.n)
  self.inflight[i] = (self.inflight[i] or 0) + 1
end

function Group:finished(key)
  local i = M.shard_of(key, self.n)
  self.inflight[i] = (self.inflight[i] or 1) - 1
end

-- The members alive by this replica's clock: a member Lease with a holder
-- whose record changed within the lease duration.
function Group:members()
  local list, err = api.list(LEASES, { namespace = self.namespace })
  if not list then
    core.log('warn', ('shards %s: cannot list the member leases: %s'):format(self.name, tostring(err)))
    return nil
  end
  local prefix, now, alive = self.name .. '-member-', core.now(), 0
  local present = {}
  for _, lease in ipairs(list.items) do
    local name = lease.metadata.name
    if name:sub(1, #prefix) == prefix then
      present[name] = true
      local raw = core.json.encode(lease.spec or {})
      local s = self.seen[name]
      if not s or s.raw ~= raw then
        s = { raw = raw, at = now }
        self.seen[name] = s
      end
      local holder = lease.spec and lease.spec.holderIdentity or ''
      if holder ~= '' and (holder == self.identity or now - s.at < self.lease_duration) then
        alive = alive + 1
      end
    end
  end
  for name in pairs(self.seen) do
    if not present[name] then self.seen[name] = nil end
  end
  return math.max(alive, 1)
end

function Group:count_taking()
  local n = 0
  for i in pairs(self.held) do
    if not self.draining[i] then n = n + 1 end
  end
  return n
end

function Group:acquired(i)
  self.held[i] = { renewed = core.now() }
  local e = self.electors[i]
  e.leading = true
  core.log('info', ('shards %s: holding shard %d'):format(self.name, i))
  if self.on_acquired then core.after(0, function() self.on_acquired(i) end) end
end

-- Gives a held shard up: its Lease is released and a fresh elector will
-- compete for it later.
function Group:release(i)
  local e = self.electors[i]
  self.held[i], self.draining[i], self.electors[i] = nil, nil, nil
  e:stop()
  core.log('info', ('shards %s: released shard %d'):format(self.name, i))
end

function Group:lose(i, why)
  self.held[i], self.draining[i], self.electors[i] = nil, nil, nil
  core.log('warn', ('shards %s: lost shard %d: %s'):format(self.name, i, why))
end

function Group:renew_held()
  local now = core.now()
  for i, h in pairs(self.held) do
    if self:shard_elector(i):_try_acquire_or_renew() then
      h.renewed = core.now()
    elseif now - h.renewed > self.renew_deadline then
      self:lose(i, ('no renewal within %g s'):format(self.renew_deadline))
    end
  end
end

function Group:finish_draining()
  for i in pairs(self.draining) do
    if (self.inflight[i] or 0) == 0 then self:release(i) end
  end
end

-- Over the fair share: the highest-numbered shards are handed back first.
function Group:shed(fair)
  for i = self.n - 1, 0, -1 do
    if self:count_taking() <= fair then return end
    if self.held[i] and not self.draining[i] then
      self.draining[i] = true
      core.log('info', ('shards %s: handing shard %d over (%d held, fair share %d)')
        :format(self.name, i, self:count_taking() + 1, fair))
    end
  end
end

-- Under the fair share: free or expired shards are tried from a place of
-- this replica's own, so that replicas starting together contend less.
function Group:take(fair)
  local start = M.hash(self.identity) % self.n
  for k = 0, self.n - 1 do
    if self:count_taking() >= fair then return end
    local i = (start + k) % self.n
    if not self.held[i] and self:shard_elector(i):_try_acquire_or_renew() then
      if self.stopped then return end
      self:acquired(i)
    end
  end
end

--- One round: membership, renewals, handovers, and taking a fair share.
function Group:step()
  self.member:_try_acquire_or_renew()
  local members = self:members()
  if self.stopped then return end
  self:renew_held()
  self:finish_draining()
  if not members then return end
  local fair = (self.n + members - 1) // members
  self:shed(fair)
  self:take(fair)
end

--- Runs the group in its own task until stop().
function Group:start()
  core.after(0, function()
    leader.check()
    core.log('info', ('shards %s: %d shards, competing as %s'):format(self.name, self.n, self.identity))
    while not self.stopped do
      self:step()
      core.sleep(self.retry_period * (1 + math.random() * 0.2))
    end
  end)
  return self
end

--- Stops competing and releases every shard and the membership Lease.
function Group:stop()
  if self.stopped then return end
  self.stopped = true
  for i in pairs(self.held) do self:release(i) end
  self.member.leading = true
  self.member:stop()
end

-- The process's shard group (klua run --shards), and what wants to hear of
-- each shard it starts to hold.
local current
local acquired_fns = {}

--- Starts the process's shard group (klua run --shards N --leader-elect).
function M.start(opts)
  if current then error('the shards are already running', 2) end
  opts.on_acquired = function(i)
    for _, fn in ipairs(acquired_fns) do fn(i) end
  end
  current = M.new(opts)
  -- A membership Lease that cannot live where it is to ends klua first, as
  -- --leader-elect's Lease does (leader.check).
  leader.guard(current.member, '--leader-election-namespace')
  return current:start()
end

--- The process's shard group, or nil without --shards.
function M.current() return current end

--- Calls fn(shard) whenever this process starts to hold a shard: a
-- controller enqueues the cached keys of that shard.
function M.on_acquired(fn) acquired_fns[#acquired_fns + 1] = fn end

return M
