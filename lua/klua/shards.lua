--- Sharded reconcile: replicas share a controller's keys through Leases.
--
-- With `klua run --shards N` (and the `--leader-elect-*` lease settings),
-- the keys ("namespace/name") are split into N shards by a stable hash, and
-- each shard is a coordination.k8s.io/v1 Lease, `<id>-shard-0` ..
-- `<id>-shard-<N-1>`, taken and renewed with client-go's leaderelection
-- rules (klua.leader): a replica reconciles only the keys of the shards it
-- holds.
--
-- * The shard of a key is that of its object's uid, as kube-apiserver's
--   server-side sharding (KEP-5866) computes it: the 64-bit FNV-1a hash of
--   the uid's bytes, in N equal ranges of the hash space, shard i holding
--   [i * step, (i + 1) * step) with step = floor((2^64 - 1) / N) + 1 (the
--   last range ends at 2^64). It is the same in every replica and every
--   release, so a key moves only when its shard changes hands. A key whose
--   uid the controller never saw (an object neither cached nor ever told of
--   by an event) is placed by the hash of the key itself.
-- * Server-side sharding: against a server that honours shardSelector on
--   LIST and WATCH (KEP-5866, kube-apiserver 1.36 with the alpha gate
--   ShardedListAndWatch), seen by the shardInfo it echoes in a LIST's
--   metadata, each controller's primary informer (the first of `watches`)
--   lists and watches only the ranges of the shards this replica holds,
--   and relists when they change (docs/scale.md). Other informers, `owns`
--   among them, receive everything and are filtered here, as before.
-- * Membership: each replica also holds a Lease of its own,
--   `<id>-member-<8 hex digits of its identity's hash>`. Replicas count the
--   members whose Lease has changed within the lease duration by their own
--   clock (as client-go judges expiry), and take at most their fair share,
--   ceil(N / members). A replica over its share hands the extra shards
--   back; one under it takes free or expired ones. So after a rebalance
--   period no replica holds more than its share while another holds none.
-- * Labels: the group's Leases carry `klua.dev/shard-group` (M.group_label
--   of the id) and `klua.dev/shard-role` (`member` or `shard`), and the
--   members are listed with that label selector, so the list costs what
--   the group holds, not every Lease of a shared namespace. A replica's
--   first list is unfiltered: it labels the member Leases of the group
--   that a replica of an older klua made without labels (their holders
--   keep the labels: an update sends back the object it read), so they
--   still count until they age out.
-- * Handover: a shard a replica gives up is first drained: its keys are no
--   longer taken, the reconciles of its keys under way finish, and only then
--   is its Lease released (an empty holder, as client-go's
--   ReleaseOnCancel writes), so the next holder never overlaps with them.
--   The new holder enqueues every cached key of the shard.
-- * A shard is held only while its Lease is valid by this replica's
--   monotonic clock: until the renew deadline after its last successful
--   renewal was sent (klua.leader). It is lost at that moment, by a timer,
--   even while a renewal still waits: its keys are no longer taken, and
--   the writes of its reconciles still running are refused before they
--   leave (lua/klua/internal/fence.lua); a worker or a write that runs first after
--   a pause of the process checks the clock itself. See docs/scale.md.
local core = require('klua.core')
local api = require('klua.api')
local fence = require('klua.internal.fence')
local leader = require('klua.leader')

local M = {}

local LEASES = 'leases.coordination.k8s.io'
local GROUP_LABEL, ROLE_LABEL = 'klua.dev/shard-group', 'klua.dev/shard-role'
-- A label value's limit (apimachinery's validation.LabelValueMaxLength).
local LABEL_MAX = 63

--- FNV-1a, 32 bits, of s.
function M.hash(s)
  local h = 0x811c9dc5
  for i = 1, #s do
    h = ((h ~ s:byte(i)) * 0x01000193) & 0xffffffff
  end
  return h
end

--- FNV-1a, 64 bits, of s (a Lua integer: the bits of the unsigned value).
function M.hash64(s)
  local h = 0xcbf29ce484222325
  for i = 1, #s do
    h = (h ~ s:byte(i)) * 0x100000001b3
  end
  return h
end

-- a // b with both read as unsigned 64 bits, b not 0.
local function udiv(a, b)
  if b < 0 then return math.ult(a, b) and 0 or 1 end -- b >= 2^63
  if a >= 0 then return a // b end
  local q = ((a >> 1) // b) << 1
  if not math.ult(a - q * b, b) then q = q + 1 end
  return q
end

-- The width of each of n ranges; nil for n == 1 (2^64, the whole space).
local function step(n)
  if n == 1 then return nil end
  return udiv(-1, n) + 1
end

--- The shard (0 .. n-1) of an object's uid (or, lacking one, of its key):
-- the range of n that M.hash64(uid) falls in, as the server's shardRange.
function M.shard_of(uid, n)
  local w = step(n)
  return w and udiv(M.hash64(uid), w) or 0
end

-- The hexadecimal bounds of shard i of n, as shardRange writes them.
local function bounds(first, last, n)
  local w = step(n)
  local from = w and ('0x%016x'):format(first * w) or '0x0000000000000000'
  local to = last == n - 1 and '0x10000000000000000' or ('0x%016x'):format((last + 1) * w)
  return from, to
end

--- The shardSelector (KEP-5866) that selects the objects of shards, a
-- list of shard numbers of n in order: one shardRange per run of adjacent
-- shards, joined by "||"; nil for none.
function M.selector(shards, n)
  local terms, i = {}, 1
  while shards[i] do
    local first, last = shards[i], shards[i]
    while shards[i + 1] == last + 1 do i, last = i + 1, last + 1 end
    terms[#terms + 1] = ("shardRange(object.metadata.uid, '%s', '%s')"):format(bounds(first, last, n))
    i = i + 1
  end
  return #terms > 0 and table.concat(terms, ' || ') or nil
end

--- Whether the server honours selector on the LIST and WATCH of informer
-- inf: a LIST of one item with it echoes it in metadata.shardInfo
-- (KEP-5866; a server without the feature ignores the parameter). Returns
-- true or false, or nil and the error when the LIST failed.
function M.server_honours(inf, selector)
  local spec = core.state(inf).spec
  local list, err = api.list(inf, { namespace = spec.namespace, label_selector = spec.label_selector,
    field_selector = spec.field_selector, limit = 1, one_page = true, shard_selector = selector })
  if not list then return nil, err end
  local info = type(list.metadata) == 'table' and list.metadata.shardInfo
  return type(info) == 'table' and info.selector == selector
end

-- Whether s is a valid label value: at most 63 characters of [A-Za-z0-9-_.],
-- beginning and ending with a letter or digit.
local function label_value(s)
  return #s <= LABEL_MAX and s:find('^[%w][%w%-_%.]*$') ~= nil and s:find('[%w]$') ~= nil
end

--- The klua.dev/shard-group label value of a group id: the id itself when
-- it is a valid label value, else its first characters (those a label
-- value may hold) followed by "-" and the 8 hex digits of M.hash(id).
function M.group_label(id)
  if label_value(id) then return id end
  local head = id:gsub('[^%w%-_%.]', '-'):sub(1, LABEL_MAX - 9):gsub('^[^%w]+', ''):gsub('[^%w]+$', '')
  local tail = ('%08x'):format(M.hash(id))
  return head == '' and tail or head .. '-' .. tail
end

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
-- (called when a shard starts being held, to enqueue its keys), on_round()
-- (called after each round, to make the informers select what is held).
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
    on_round = opts.on_round,
    electors = {},   -- shard -> the elector that takes and renews its Lease
    held = {},       -- shard -> true while held (its elector says until when)
    draining = {},   -- shard -> true while its reconciles finish before release
    inflight = {},   -- shard -> reconciles under way
    seen = {},       -- member Lease name -> { raw = its spec as JSON, at = when it changed }
    unlabelled_scan = true, -- until a list without the selector has labelled the older members
    stopped = false,
  }, Group)
  local group = M.group_label(g.name)
  g.labels = {
    member = { [GROUP_LABEL] = group, [ROLE_LABEL] = 'member' },
    shard = { [GROUP_LABEL] = group, [ROLE_LABEL] = 'shard' },
  }
  g.selector = ('%s=%s,%s=member'):format(GROUP_LABEL, group, ROLE_LABEL)
  g.member = g:elector(('%s-member-%08x'):format(g.name, M.hash(g.identity)), g.labels.member)
  return g
end

-- An elector of one of the group's Leases; it writes labels on the Lease
-- whenever it creates or updates it.
function Group:elector(lease_name, labels)
  local e = leader.new {
    name = lease_name, namespace = self.namespace, identity = self.identity,
    lease_duration = self.lease_duration, renew_deadline = self.renew_deadline,
    retry_period = self.retry_period,
  }
  e.labels = labels
  return e
end

function Group:shard_elector(i)
  local e = self.electors[i]
  if not e then
    e = self:elector(('%s-shard-%d'):format(self.name, i), self.labels.shard)
    self.electors[i] = e
  end
  return e
end

-- Whether shard i is held with a Lease valid now by this replica's clock.
function Group:holds(i)
  return self.held[i] ~= nil and self.electors[i]:_valid()
end

--- Whether this replica takes the key of the object with this uid now
-- (M.shard_of): its shard is held (its Lease valid) and not draining.
function Group:owns(uid)
  local i = M.shard_of(uid, self.n)
  return self:holds(i) and not self.draining[i]
end

--- The shardSelector of the shards held (draining ones included: their
-- reconciles still read the cache), or nil when none is.
function Group:shard_selector() return M.selector(self:shards(), self.n) end

--- The shards held (draining ones included), in order.
function Group:shards()
  local out = {}
  for i = 0, self.n - 1 do
    if self.held[i] then out[#out + 1] = i end
  end
  return out
end

--- Counts a reconcile of the key of uid as under way (until
-- finished(uid)), in the calling task: its writes are fenced by the shard's
-- Lease until then (draining, the shard is still held and its reconciles
-- may finish).
function Group:started(uid)
  local i = M.shard_of(uid, self.n)
  self.inflight[i] = (self.inflight[i] or 0) + 1
  local lease = ('the shard lease %s/%s-shard-%d'):format(self.namespace, self.name, i)
  fence.bind(function()
    return self.held[i] and self.electors[i].valid_until or -math.huge, lease
  end)
end

function Group:finished(uid)
  local i = M.shard_of(uid, self.n)
  self.inflight[i] = (self.inflight[i] or 1) - 1
  fence.unbind()
end

-- Whether name is a member Lease's name of this group: the id, "-member-"
-- and 8 hex digits, so that the Leases of a group named "<id>-member-x"
-- are not taken for this one's.
function Group:member_name(name)
  local prefix = self.name .. '-member-'
  return #name == #prefix + 8 and name:sub(1, #prefix) == prefix and name:find('^%x+$', #prefix + 1) ~= nil
end

-- Labels the member Leases of the group that lack the labels (made by an
-- older klua) so that the selector finds them from now on. The update
-- changes no spec, so it renews nothing; a conflict with the holder's
-- renewal is tried again at the next round. Returns whether every one is
-- labelled.
function Group:label_members(items)
  local done = true
  for _, lease in ipairs(items) do
    if self:member_name(lease.metadata.name) and leader.add_labels(lease, self.labels.member) then
      -- A list's items need not say what they are (kube-apiserver's do not).
      lease.apiVersion, lease.kind = 'coordination.k8s.io/v1', 'Lease'
      local _, err = api.update(LEASES, lease, { [fence.EXEMPT] = true })
      if err then
        done = false
        if not api.is_conflict(err) and not api.is_not_found(err) then
          core.log('warn', ('shards %s: cannot label the member lease %s: %s')
            :format(self.name, lease.metadata.name, tostring(err)))
        end
      end
    end
  end
  return done
end

-- The members alive by this replica's clock: a member Lease with a holder
-- whose record changed within the lease duration.
function Group:members()
  local unlabelled = self.unlabelled_scan
  local list, err = api.list(LEASES, { namespace = self.namespace,
    label_selector = not unlabelled and self.selector or nil })
  if not list then
    if api.is_forbidden(err) then
      core.log('warn', ('shards %s: listing the member Leases in namespace "%s" is forbidden (%s): grant list '
        .. 'on leases.coordination.k8s.io there, besides get, create and update: --shards counts the replicas '
        .. 'by their Leases'):format(self.name, self.namespace, err.message or tostring(err)))
    else
      core.log('warn', ('shards %s: cannot list the member leases: %s'):format(self.name, tostring(err)))
    end
    return nil
  end
  local now, alive = core.now(), 0
  local present = {}
  for _, lease in ipairs(list.items) do
    local name = lease.metadata.name
    if self:member_name(name) then
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
  if unlabelled and self:label_members(list.items) then self.unlabelled_scan = false end
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
  self.held[i] = true
  local e = self.electors[i]
  e.leading = true
  e.on_lapsed = function()
    if self.electors[i] == e then self:lose(i, ('no renewal within %g s'):format(self.renew_deadline)) end
  end
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
  local e = self.electors[i]
  self.held[i], self.draining[i], self.electors[i] = nil, nil, nil
  e.leading = false
  e:_forget_lease()
  core.log('warn', ('shards %s: lost shard %d: %s'):format(self.name, i, why))
end

-- A renewal that fails is tried again next round; the Lease's lapse timer
-- (Group:acquired) gives the shard up if none succeeds in time.
function Group:renew_held()
  for i in pairs(self.held) do
    local e = self.electors[i]
    if e then e:_try_acquire_or_renew(true) end
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
    if not self.held[i] then
      local e = self:shard_elector(i)
      -- Taken by a request answered after the renew deadline: not valid,
      -- taken again (renewed) at a later round.
      if e:_try_acquire_or_renew() and e:_valid() then
        if self.stopped then return end
        self:acquired(i)
      end
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
  if self.on_round then self.on_round() end
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
local acquired_fns, round_fns = {}, {}

--- Starts the process's shard group (klua run --shards N --leader-elect).
function M.start(opts)
  if current then error('the shards are already running', 2) end
  opts.on_acquired = function(i)
    for _, fn in ipairs(acquired_fns) do fn(i) end
  end
  opts.on_round = function()
    -- A hook that fails must not end the rounds that keep the Leases.
    for _, fn in ipairs(round_fns) do
      local ok, err = pcall(fn)
      if not ok then core.log('error', ('shards %s: %s'):format(current.name, tostring(err))) end
    end
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

--- Calls fn() after each round of the process's shard group: a controller
-- makes its primary informer select the shards held (server-side sharding).
function M.on_round(fn) round_fns[#round_fns + 1] = fn end

return M
