--- Caches checked against the server (`klua run --verify-cache DUR`):
-- every DUR, each informer's cache is compared with a consistent LIST,
-- by uid and resourceVersion, and an informer whose cache drifted (a watch
-- event lost on its way, by a bug no client can see) relists.
--
-- The LIST asks for no resourceVersion, in pages (klua.api.list): a
-- consistent read, the state at the list's resourceVersion L. kube-apiserver
-- 1.32 serves a LIST with a limit and resourceVersion unset from etcd
-- (cacher.go's shouldDelegateList: hasLimit), a quorum read, later pages at
-- the first one's revision; from 1.33 the watch cache may serve it once it
-- has caught up with etcd (ConsistentListFromCache with ListFromCacheSnapshot).
-- The sandbox models 1.32: storage's current state (docs/sandbox.md).
--
-- The cache goes on changing meanwhile, so the comparison counts only what
-- the two can disagree on. First the task waits (on the loop, a poll that
-- sleeps) until the informer's watch has reached L, at most CATCH_UP
-- seconds: a quiet resource gets there by a bookmark, which kube-apiserver
-- sends about once a minute (cacher.go: defaultBookmarkFrequency). Then,
-- with W the resourceVersion the cache is at (KEP-5504: decimal integers,
-- compared as numbers; lua/klua/internal/writes.lua):
--
-- * W >= L: the cache must hold every listed object at its listed
--   resourceVersion, or at one newer than L (changed since); an object it
--   lacks is asked for again (GET), and counts only when the server still
--   has it with the same uid at the listed resourceVersion: unchanged since
--   before L, so a deletion the cache saw cannot explain it. A cached object
--   the list lacks counts unless its resourceVersion is newer than L.
-- * W < L (no bookmark in time): only listed objects unchanged since W or
--   earlier count (their listed resourceVersion <= W): the cache must hold
--   them as listed. A deletion missed is found by a later check.
--
-- A write during the check thus never counts: a busy resource gives no
-- false drift.
local core = require('klua.core')
local util = require('klua.internal.objutil')
local writes = require('klua.internal.writes')
local shutdown = require('klua.internal.shutdown')

local M = {}

--- Seconds a check waits for the watch to reach the LIST's resourceVersion.
M.CATCH_UP = 90
--- Objects a check asks for again, at most, before it counts them.
M.MAX_GETS = 100
-- How often the wait looks at the watch's resourceVersion.
local POLL = 0.1

local C = core.informer_fns
local period -- --verify-cache, in seconds; nil: off

-- informer -> its timer
local timers = {}

local function alive(inf) return (pcall(C.check, inf)) end

local function newer(rv, l) return writes.at_least(rv, l) == true and rv ~= l end

local function rv_of(obj) return obj.metadata.resourceVersion end
local function uid_of(obj) return obj.metadata.uid end

-- The watch has reached L, or the bound passed (false), or the informer stopped (nil).
local function catch_up(inf, l)
  local deadline = core.now() + M.CATCH_UP
  while true do
    if not alive(inf) then return nil end
    if writes.at_least(C.resource_version(inf), l) then return true end
    if core.now() >= deadline then return false end
    core.sleep(POLL)
  end
end

-- What differs, as {key, why}, and the listed objects the cache lacks (to ask for
-- again), comparing the cache at W with the list at L. Does not yield.
local function compare(inf, listed, l)
  local w = C.resource_version(inf)
  local passed = writes.at_least(w, l) == true
  local drift, missing = {}, {}
  local keys = {}
  for _, item in ipairs(listed) do
    local md = item.metadata
    local key = util.key(md.namespace, md.name)
    keys[key] = true
    local cached = inf:get(key)
    local same = cached ~= nil and uid_of(cached) == md.uid and rv_of(cached) == md.resourceVersion
    if passed then
      if cached == nil then
        missing[#missing + 1] = { key = key, item = item }
      elseif not same and not newer(rv_of(cached), l) then
        drift[#drift + 1] = { key = key, why = ('cached at resourceVersion %s, listed at %s'):format(
          rv_of(cached), md.resourceVersion) }
      end
    elseif not same and writes.at_least(w, md.resourceVersion) then
      drift[#drift + 1] = { key = key, why = cached and ('cached at resourceVersion %s, listed at %s'):format(
        rv_of(cached), md.resourceVersion) or 'listed, not cached' }
    end
  end
  if passed then
    for _, cached in ipairs(inf:list()) do
      local md = cached.metadata
      local key = util.key(md.namespace, md.name)
      if not keys[key] and not newer(md.resourceVersion, l) then
        drift[#drift + 1] = { key = key, why = ('cached at resourceVersion %s, not listed'):format(md.resourceVersion) }
      end
    end
  end
  return drift, missing
end

-- The listed objects the cache lacks that the server still has as listed.
local function recheck(inf, api, missing, drift)
  for i, m in ipairs(missing) do
    if i > M.MAX_GETS then
      core.log('debug', ('%s: %d objects not cached left unchecked'):format(inf:name(), #missing - M.MAX_GETS))
      return
    end
    local obj = api.get(inf, m.key)
    if not alive(inf) then return end
    local md = m.item.metadata
    if obj and uid_of(obj) == md.uid and rv_of(obj) == md.resourceVersion and inf:get(m.key) == nil then
      drift[#drift + 1] = { key = m.key, why = 'listed, not cached' }
    end
  end
end

local function describe(drift, l)
  local shown = {}
  for i = 1, math.min(#drift, 3) do shown[i] = drift[i].key .. ': ' .. drift[i].why end
  return ('the cache differs from a consistent LIST at resourceVersion %s in %d object%s (%s%s)'):format(
    l, #drift, #drift == 1 and '' or 's', table.concat(shown, '; '), #drift > 3 and '; ...' or '')
end

--- Checks informer inf's cache once; returns the number of objects that
-- differ, or nil and why no check was made.
function M.check(inf)
  local api = require('klua.api')
  if not inf:synced() then return nil, 'not synced yet' end
  local s = core.state(inf)
  local spec = s.spec
  -- Under server-side sharding (klua.shards) the selection moves with the
  -- shards held, through a relist: a check is made only within one selection.
  local shard_sel = C.shard_selector(inf)
  local function resharded()
    local now = C.shard_selector(inf)
    return now ~= shard_sel or (now ~= '' and inf:stats().state ~= 'WATCH')
  end
  if shard_sel ~= '' and resharded() then return nil, 'relisting a new shard selection' end
  local list, err = api.list(inf, { namespace = spec.namespace, label_selector = spec.label_selector,
    field_selector = spec.field_selector, shard_selector = shard_sel ~= '' and shard_sel or nil })
  if not alive(inf) then return nil, 'stopped' end
  if not list then return nil, 'LIST failed: ' .. tostring(err and err.message or err) end
  local l = list.metadata and list.metadata.resourceVersion
  if writes.at_least(l, l) == nil then
    return nil, ('the list\'s resourceVersion "%s" is not a number to compare'):format(tostring(l))
  end
  if catch_up(inf, l) == nil then return nil, 'stopped' end
  if resharded() then return nil, 'the shard selection changed during the check' end
  local drift, missing = compare(inf, list.items, l)
  recheck(inf, api, missing, drift)
  if not alive(inf) then return nil, 'stopped' end
  if resharded() then return nil, 'the shard selection changed during the check' end
  s.verifications = (s.verifications or 0) + 1
  if #drift == 0 then return 0 end
  s.drift_objects = (s.drift_objects or 0) + #drift
  local why = describe(drift, l)
  if not C.relist(inf, why) then
    core.log('warn', ('%s: %s; not relisting now (the informer is in %s): the next check looks again'):format(
      inf:name(), why, inf:stats().state))
  end
  return #drift
end

local function run(inf)
  local s = core.state(inf)
  if s.verifying or not alive(inf) then return end
  s.verifying = true
  -- Cleared however the task ends (a stop included), so that checks go on.
  local _ <close> = setmetatable({}, { __close = function() s.verifying = false end })
  local ok, n, why = pcall(M.check, inf)
  if not ok then
    core.log('error', ('%s: cache check failed: %s'):format(tostring(inf), tostring(n)))
  elseif not n and why ~= 'stopped' and why ~= 'not synced yet' then
    core.log('warn', ('%s: cache check skipped: %s'):format(inf:name(), why))
  end
end

--- Turns the checks on, every `seconds` (--verify-cache).
function M.enable(seconds) period = seconds end

--- Starts checking informer inf, when the checks are on.
function M.track(inf)
  if period then timers[inf] = core.every(period, shutdown.guard(function() run(inf) end)) end
end

--- Stops checking a stopped informer.
function M.untrack(inf)
  local t = timers[inf]
  timers[inf] = nil
  if t then t:cancel() end
end

return M
