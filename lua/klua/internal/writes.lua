--- Read your own writes: the writes made through klua.api that an
-- informer has yet to observe, and the hold a controller puts on a
-- reconcile until its informers hold them.
--
-- A write's answer comes before the watch event that carries it (a loaded
-- kube-apiserver's watch cache lags its storage), so a reconcile started
-- at once reads the cache from before the write: an update sent with the
-- cached resourceVersion conflicts, a child just created is missing and
-- created again (controller-runtime #1464, #3320; client-go's controllers
-- keep "expectations" for this). klua sees every write and every read, so
-- it keeps, per informer, the last write of each object it has not yet
-- observed, and a controller's reconcile of a key waits (the key is put
-- aside, not a worker) until its informers hold the writes that concern
-- that key, or a bound passes.
--
-- Which writes concern key K of a controller: those of the object K in an
-- informer it watches, and those of the objects in an informer it owns
-- whose controller owner is K: the writes whose watch events enqueue K
-- again, so that the event that ends the wait also brings the key back.
--
-- An informer has observed a write when (KEP-5504: resourceVersions of
-- kube-apiserver's resources and CRDs are decimal integers, compared by
-- length and then digit by digit) its watch has reached the write's
-- resourceVersion, or the object it caches is at that resourceVersion or a
-- later one; for a resourceVersion that is not such an integer (an
-- aggregated API server's), when the object it caches has that very
-- resourceVersion. A deletion is observed when the object is no longer
-- cached (or another object, another uid, has its name).
local core = require('klua.core')
local util = require('klua.internal.objutil')

local M = {}

--- Seconds a reconcile waits at most for its own writes
-- (klua.controller's read_your_writes).
M.DEFAULT_TIMEOUT = 10

-- informer -> { spec = {resource=, namespace=, selector=, field_selector=},
--   keys = {[object key] = write}, n = #keys, sweep_at = n that sweeps,
--   owners = {[owner] = {[object key] = true}} }
-- A write: {rv=, gone=, uid=, at=, owner=}: rv the written resourceVersion
-- (gone: the object was deleted, uid the one deleted); at when the oldest
-- write not yet observed was made; owner "Kind ns/name" of its controller.
local tracked = {}

-- Writes observed are forgotten when something asks (a reconcile, lag());
-- an informer nothing asks about forgets them when its writes outnumber
-- twice those left at its last sweep, so that memory stays in proportion
-- to the writes not observed yet.
local SWEEP_MIN = 64

--- Starts keeping the writes informer inf is to observe. spec: resource
-- (as klua.resolve gives it), namespace (nil for all), selector (a parsed
-- label selector), field_selector (a string or nil).
function M.track(inf, spec)
  tracked[inf] = { spec = spec, keys = {}, n = 0, sweep_at = SWEEP_MIN, owners = {} }
end

--- How many writes are kept for informer inf: observed or not, until a
-- sweep forgets those observed.
function M.kept(inf)
  local t = tracked[inf]
  return t and t.n or 0
end

--- Forgets a stopped informer.
function M.untrack(inf) tracked[inf] = nil end

-- KEP-5504's form: decimal digits, no leading zero.
local function comparable(rv)
  return type(rv) == 'string' and rv:match('^[1-9]%d*$') ~= nil
end

--- Whether resourceVersion a is at least b: true or false when both are
-- comparable (KEP-5504: the longer is the greater, else digit by digit),
-- nil when either is not.
function M.at_least(a, b)
  if not comparable(a) or not comparable(b) then return nil end
  if #a ~= #b then return #a > #b end
  return a >= b
end

local function observed(inf, key, w)
  local cached = inf:get(key)
  if w.gone then return cached == nil or cached.metadata.uid ~= w.uid end
  -- A watch delivers events in resourceVersion order, and a LIST is a
  -- snapshot at its resourceVersion: past the write's, the cache holds it
  -- (or what came after it, a deletion included).
  if M.at_least(core.informer_fns.resource_version(inf), w.rv) then return true end
  if cached == nil then return false end
  local rv = cached.metadata.resourceVersion
  return rv == w.rv or M.at_least(rv, w.rv) == true
end

local function forget(t, key)
  local w = t.keys[key]
  if not w then return end
  t.keys[key] = nil
  t.n = t.n - 1
  local set = w.owner and t.owners[w.owner]
  if set then
    set[key] = nil
    if next(set) == nil then t.owners[w.owner] = nil end
  end
end

local function owner_of(obj)
  local md = obj and obj.metadata
  for _, ref in ipairs(md and md.ownerReferences or {}) do
    if ref.controller == true then return ref.kind .. ' ' .. util.key(md.namespace, ref.name) end
  end
end

local function put(inf, t, key, w)
  local old = t.keys[key]
  -- The lag counts from the oldest write not observed yet.
  if old and not observed(inf, key, old) then w.at = old.at end
  forget(t, key)
  t.keys[key] = w
  t.n = t.n + 1
  if w.owner then
    local set = t.owners[w.owner] or {}
    set[key] = true
    t.owners[w.owner] = set
  end
  if t.n >= t.sweep_at then
    for k, x in pairs(t.keys) do
      if observed(inf, k, x) then forget(t, k) end
    end
    t.sweep_at = math.max(SWEEP_MIN, 2 * t.n)
  end
end

local function same_resource(a, b)
  return a.group == b.group and a.resource == b.resource
end

--- Records a write the server made (not a dry run) to the object ns/name
-- of resource r: answer is the server's answer (the object as written, or
-- for a deletion the object or a Status); deleting says it was a DELETE.
function M.record(r, ns, name, answer, deleting)
  local md = type(answer) == 'table' and answer.kind == r.kind and answer.metadata or nil
  -- An object the DELETE answers with a deletionTimestamp still exists
  -- (finalizers, a pod's grace period): that is a write like any other.
  local gone = deleting and not (md and md.deletionTimestamp)
  if not gone and not (md and md.resourceVersion) then return end
  local key, now = util.key(ns, name), core.now()
  for inf, t in pairs(tracked) do
    local s = t.spec
    if same_resource(s.resource, r) and (s.namespace == nil or s.namespace == ns)
        and s.field_selector == nil then
      local cached = inf:get(key)
      if not gone and s.selector:matches(answer) then
        put(inf, t, key, { rv = md.resourceVersion, at = now, owner = owner_of(answer) })
      elseif cached then
        -- Deleted, or out of the informer's selection now: its watch
        -- delivers a DELETED event.
        put(inf, t, key, { gone = true, uid = cached.metadata.uid, at = now, owner = owner_of(md and answer or cached) })
      end
    end
  end
end

--- The object ns/name of resource r as an informer caches it, or nil
-- when none does (the diff of a --dry-run write starts from it).
function M.cached(r, ns, name)
  local key = util.key(ns, name)
  for inf, t in pairs(tracked) do
    local s = t.spec
    if same_resource(s.resource, r) and (s.namespace == nil or s.namespace == ns) then
      local obj = inf:get(key)
      if obj ~= nil then return obj end
    end
  end
end

--- Seconds since the oldest write through klua.api that informer inf is
-- to observe and has not (0 when it holds them all).
function M.lag(inf)
  local t = tracked[inf]
  if not t then return 0 end
  local oldest
  for key, w in pairs(t.keys) do
    if observed(inf, key, w) then forget(t, key)
    elseif not oldest or w.at < oldest then oldest = w.at end
  end
  return oldest and math.max(core.now() - oldest, 0) or 0
end

--- Makes controller c hold its reconciles until its informers have
-- observed their writes: watches and owns are its informers, kind the kind
-- its owned objects' controller owner has, timeout the bound in seconds (0
-- or false: no hold).
function M.attach(c, watches, owns, kind, timeout)
  if timeout == nil or timeout == true then timeout = M.DEFAULT_TIMEOUT end
  if timeout ~= false and (type(timeout) ~= 'number' or timeout < 0) then
    error('read_your_writes must be a number of seconds (the most a reconcile waits for its own writes), true or false', 3)
  end
  c.writes = { watches = watches, owns = owns, kind = kind, timeout = timeout or 0, held = {} }
  c.stale_read_waits, c.stale_read_timeouts = 0, 0
end

-- The earliest bound of the writes concerning key that inf has yet to
-- observe, or nil; and whether one is past its bound.
local function pending(h, inf, key, now, due, late)
  local t = tracked[inf]
  local w = t and t.keys[key]
  if not w then return due, late end
  if observed(inf, key, w) then
    forget(t, key)
    return due, late
  end
  local bound = w.at + h.timeout
  if bound <= now then return due, true end
  return math.min(due or bound, bound), late
end

--- Whether the reconcile of key must wait: true when one of c's informers
-- has yet to observe a write that concerns key; the key is then put aside
-- and added to c's queue again at the bound, unless an event (the one
-- carrying the write, say) adds it before. The caller marks it done.
function M.hold(c, key)
  local h = c.writes
  if not h or h.timeout <= 0 then return false end
  local now, due, late = core.now(), nil, false
  for _, inf in ipairs(h.watches) do due, late = pending(h, inf, key, now, due, late) end
  for _, inf in ipairs(h.owns) do
    local t = tracked[inf]
    local set = t and t.owners[h.kind .. ' ' .. key]
    for k in pairs(set or {}) do due, late = pending(h, inf, k, now, due, late) end
  end
  -- nil, the timer of the wait, or true once its bound has passed.
  local state = h.held[key]
  if due then
    if state == nil then c.stale_read_waits = c.stale_read_waits + 1 end
    if state == nil or state == true then
      h.held[key] = core.after(due - now, function()
        h.held[key] = true
        c.queue:add(key)
      end)
    end
    return true
  end
  h.held[key] = nil
  if state and state ~= true then state:cancel() end
  -- Only a wait that ended at the bound counts: a reconcile that comes
  -- after the bound anyway waited for nothing.
  if late and state ~= nil then
    c.stale_read_timeouts = c.stale_read_timeouts + 1
    core.log('warn', ('%s: reconciling %s after %g s without the cache holding its own writes'):format(
      c.name, key, h.timeout))
  end
  return false
end

return M
