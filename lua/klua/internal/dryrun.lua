--- `klua run --dry-run`: klua.api sends every write with dryRun=All, so
-- that the server admits, validates and answers it and persists nothing
-- (docs/sandbox.md: the sandbox as kube-apiserver), and this module logs
-- each answered write at info level as what it would change: the verb,
-- the resource, the key and the dotted paths that differ between the
-- object as cached and as the server answered, old → new.
--
-- The object as cached: an informer's copy of that resource and key, else
-- (nothing caches it) the server's, read with a GET; a create has none.
-- A dry run's answer is never observed by a watch, so klua.api does not
-- record it as a write its informers are to observe (internal/writes.lua):
-- a controller's next reconcile does not wait for it, and finds the child
-- it "created" missing again.
local core = require('klua.core')
local util = require('klua.internal.objutil')
local json = core.json

local M = {}

--- Whether --dry-run was given: read once, it never changes.
M.on = core.controller_options().dry_run == true

--- Changes listed in one line at most; the rest are counted.
M.MAX_CHANGES = 12
--- Characters of a value shown at most.
M.MAX_VALUE = 60

-- What says nothing of the change: the type (the log line names the
-- resource), what the server writes into a create's answer and every
-- write's bookkeeping.
local NOISE = { apiVersion = true, kind = true, ['metadata.resourceVersion'] = true, ['metadata.managedFields'] = true,
  ['metadata.uid'] = true, ['metadata.creationTimestamp'] = true, ['metadata.generation'] = true }

local function shown(v)
  if v == nil then return '(none)' end
  local text = json.encode(v)
  if #text > M.MAX_VALUE then text = text:sub(1, M.MAX_VALUE - 1) .. '…' end
  return text
end

-- Deep equality of JSON values, tables or views alike: encoding both
-- would not do, a decoded table's members come out in no set order.
local function same(a, b)
  if a == b then return true end
  local ta, tb = core.type(a), core.type(b)
  if ta ~= tb or (ta ~= 'object' and ta ~= 'array') then return false end
  local n = 0
  for k, v in pairs(a) do
    n = n + 1
    if not same(v, b[k]) then return false end
  end
  for _ in pairs(b) do n = n - 1 end
  return n == 0
end

local function length(list)
  local n = 0
  while list[n + 1] ~= nil do n = n + 1 end
  return n
end

local walk

-- Appends to out "path old → new" for each difference between a and b at
-- path: objects followed down to the member (a member a create adds too:
-- its leaves say more than one truncated object), arrays of one length
-- element by element ("status.conditions[0].status"), anything else one
-- change.
local function compare(a, b, path, out)
  if NOISE[path] or same(a, b) then return end
  local ta, tb = core.type(a), core.type(b)
  if (a == nil or ta == 'object') and tb == 'object' then
    walk(a or {}, b, path, out)
  elseif ta == 'array' and tb == 'array' and length(a) == length(b) then
    for i = 1, length(a) do compare(a[i], b[i], ('%s[%d]'):format(path, i - 1), out) end
  else
    out[#out + 1] = ('%s %s → %s'):format(path, shown(a), shown(b))
  end
end

-- compare for each member of the objects old and new, in key order.
function walk(old, new, prefix, out)
  for _, k in ipairs(util.union_keys(old, new)) do
    compare(old[k], new[k], prefix and (prefix .. '.' .. k) or k, out)
  end
  return out
end

--- The changes from old to new (objects, tables or views; old nil for a
-- create): a list of "dotted.path old → new", sorted: objects followed
-- down to the member, arrays of one length element by element
-- ("spec.containers[0].image"), other arrays whole, values as compact
-- JSON cut at MAX_VALUE characters.
function M.diff(old, new)
  return walk(old or {}, new or {}, nil, {})
end

local function resource_name(r)
  return (r.group and r.group ~= '') and (r.resource .. '.' .. r.group) or r.resource
end

--- Logs a dry-run write the server answered: verb ("create", "update",
-- "update status", "patch", "apply", "delete"), r the resolved resource,
-- old the object before (nil for a create), answer the server's.
function M.report(verb, r, ns, name, old, answer)
  local head = ('dry run: %s %s %s'):format(verb, resource_name(r), util.key(ns, name))
  if verb == 'delete' then
    -- The object comes back marked while finalizers or a grace period
    -- keep it; gone, it is a Status (or, for a pod, the object).
    local md = type(answer) == 'table' and answer.kind == r.kind and answer.metadata
    local finalizers = md and md.deletionTimestamp and md.finalizers
    local grace = md and md.deletionTimestamp and (md.deletionGracePeriodSeconds or 0) > 0
    core.log('info', head .. (finalizers and (': kept, marked for deletion, until its finalizers are removed: '
      .. shown(finalizers)) or grace and (': marked for deletion, gone after a grace period of %s s'):format(
      tostring(md.deletionGracePeriodSeconds)) or ': deleted'))
    return
  end
  local changes = M.diff(old, answer)
  if #changes == 0 then
    core.log('info', head .. ': no change')
    return
  end
  local more = #changes - M.MAX_CHANGES
  if more > 0 then
    for i = #changes, M.MAX_CHANGES + 1, -1 do changes[i] = nil end
    changes[#changes + 1] = ('and %d more'):format(more)
  end
  core.log('info', head .. ': ' .. table.concat(changes, '; '))
end

--- Logs a dry-run request of klua.api.request: its method and path.
function M.report_request(method, path)
  core.log('info', ('dry run: %s %s'):format(method, path))
end

return M
