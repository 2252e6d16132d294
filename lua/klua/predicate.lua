--- Predicates over an update(old, new) pair, to skip updates a controller
-- does not care about, after controller-runtime's predicates. They only
-- read: old and new may be read-only views or tables.
local M = {}

local util = require('klua.internal.objutil')
local indexable = util.indexable
local field = util.field

local EMPTY = {}

local deep_equal

-- Whether a and b hold the same entries, apart from the keys in skip.
local function same_entries(a, b, skip)
  for k, v in pairs(a) do
    if not skip[k] and not deep_equal(v, b[k]) then return false end
  end
  for k in pairs(b) do
    if not skip[k] and a[k] == nil then return false end
  end
  return true
end

--- Whether a and b are equal values, comparing tables and views entry by
-- entry (arrays and objects alike; metatables are not compared).
-- @function klua.helpers.deep_equal(a, b)
-- @param a a value, table or view
-- @param b another
-- @return true or false
-- @usage
-- if klua.helpers.deep_equal(old.spec, new.spec) then return end
function deep_equal(a, b)
  if rawequal(a, b) then return true end
  if indexable(a) and indexable(b) then return same_entries(a, b, EMPTY) end
  return a == b
end
M.deep_equal = deep_equal

--- Whether metadata.generation differs: the spec changed.
-- @param old the object before the update
-- @param new the object after it
-- @return true or false
-- @usage
-- podsets:on('update', function(old, new)
--   if klua.helpers.generation_changed(old, new) then q:add(key_of(new)) end
-- end)
function M.generation_changed(old, new)
  return field(field(old, 'metadata'), 'generation') ~= field(field(new, 'metadata'), 'generation')
end

-- A missing map and an empty one mean the same to the API.
local function map_at(obj, key)
  local v = field(field(obj, 'metadata'), key)
  return indexable(v) and v or EMPTY
end

--- Whether metadata.labels differ (absent labels equal empty labels).
-- @param old the object before the update
-- @param new the object after it
-- @return true or false
-- @usage
-- if klua.helpers.labels_changed(old, new) then relabel(new) end
function M.labels_changed(old, new)
  return not deep_equal(map_at(old, 'labels'), map_at(new, 'labels'))
end

--- Whether metadata.annotations differ (absent equals empty).
-- @param old the object before the update
-- @param new the object after it
-- @return true or false
-- @usage
-- if klua.helpers.annotations_changed(old, new) then reconfigure(new) end
function M.annotations_changed(old, new)
  return not deep_equal(map_at(old, 'annotations'), map_at(new, 'annotations'))
end

local TOP_SKIP = { status = true, metadata = true }
local METADATA_SKIP = { resourceVersion = true, managedFields = true }

--- Whether the update changed nothing but status, metadata.resourceVersion
-- and metadata.managedFields (also true when nothing changed at all), so
-- that a controller reconciling spec and metadata can skip it.
-- @param old the object before the update
-- @param new the object after it
-- @return true or false
-- @usage
-- if klua.helpers.only_status_or_rv_changed(old, new) then return end
function M.only_status_or_rv_changed(old, new)
  if not indexable(old) or not indexable(new) then return false end
  if not same_entries(old, new, TOP_SKIP) then return false end
  local old_md, new_md = field(old, 'metadata'), field(new, 'metadata')
  return same_entries(indexable(old_md) and old_md or EMPTY, indexable(new_md) and new_md or EMPTY,
    METADATA_SKIP)
end

return M
