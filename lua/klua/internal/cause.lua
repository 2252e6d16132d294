--- What made a controller reconcile a key: the causes klua.controller
-- hands to reconcile as ctx.causes, and the paths an update changed.
--
-- A cause is a table {event =, informer =, object =, owner =, reason =,
-- changed =}; see the klua.controller module comment. An update's changed
-- paths are worked out when the reconcile first reads cause.changed, not
-- in the handler: most reconciles never ask, and a handler stays as cheap
-- as the enqueue it was.
local core = require('klua.core')
local util = require('klua.internal.objutil')

local M = {}

-- Causes kept per key: a burst of events is summed up by its last ones.
M.MAX = 16

-- Members an update rewrites without saying anything of the object:
-- every write bumps resourceVersion, server-side apply rewrites
-- managedFields. Dropped unless every path is asked for.
local NOISE = { ['metadata.resourceVersion'] = true, ['metadata.managedFields'] = true }

local function same(a, b)
  if a == b then return true end
  local ta, tb = core.type(a), core.type(b)
  if ta ~= tb or (ta ~= 'object' and ta ~= 'array') then return false end
  return core.json.encode(a) == core.json.encode(b)
end

-- Appends to out the dotted paths under prefix where old and new (JSON
-- objects) differ: an object member is followed down, anything else (an
-- array, a scalar, a member added or removed) is one path. Without all,
-- a status that changed is the one path "status".
local function walk(old, new, prefix, all, out)
  for _, k in ipairs(util.union_keys(old, new)) do
    local path = prefix and (prefix .. '.' .. k) or k
    local a, b = old[k], new[k]
    if (all or not NOISE[path]) and not same(a, b) then
      if core.type(a) == 'object' and core.type(b) == 'object' and (all or path ~= 'status') then
        walk(a, b, path, all, out)
      else
        out[#out + 1] = path
      end
    end
  end
  return out
end

--- The dotted paths where new differs from old, sorted ("spec.replicas",
-- "metadata.labels.app", "status"): objects followed down to the member
-- that changed, arrays whole. all: every path, status's and the noise's
-- too.
function M.changed_paths(old, new, all)
  return walk(old, new, nil, all, {})
end

--- A cause for an update from old to new: cause.changed, on first read,
-- is the paths (the views are let go then).
function M.update(fields, old, new, all)
  return setmetatable(fields, { __index = function(cause, k)
    if k ~= 'changed' then return nil end
    local paths = M.changed_paths(old, new, all)
    old, new = nil, nil
    rawset(cause, 'changed', paths)
    return paths
  end })
end

--- Records cause for key in causes (key -> list), keeping the last MAX.
function M.note(causes, key, cause)
  local list = causes[key]
  if not list then
    causes[key] = { cause }
    return
  end
  if #list == M.MAX then table.remove(list, 1) end
  list[#list + 1] = cause
end

--- Takes key's causes out of causes: the list, oldest first, or {}.
function M.take(causes, key)
  local list = causes[key] or {}
  causes[key] = nil
  return list
end

return M
