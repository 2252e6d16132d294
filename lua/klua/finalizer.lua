--- Finalizers: the names in metadata.finalizers that hold an object's
-- deletion until the controller that added them has cleaned up.
-- Objects to change are mutable tables (klua.copy(obj)) or klua.edit(obj);
-- has_finalizer also reads views. A mistake in the call (a view to change,
-- a name that is not a string) raises, as klua.helpers' convention has it;
-- the object's data never makes these fail.
local M = {}

local array_mt = {}

--- Sets the metatable that marks the lists these functions create as JSON
-- arrays (the host's, so that a new list re-encodes as [] and not {}).
function M.set_array_mt(mt) array_mt = mt end

local util = require('klua.internal.objutil')
local field = util.field
local check_mutable = util.check_mutable

local function check_name(fn, name)
  if type(name) ~= 'string' or name == '' then
    error(fn .. ": the finalizer name must be a non-empty string such as 'example.com/cleanup'", 3)
  end
end

--- Whether obj's metadata.finalizers holds name. obj may be a view.
-- @param obj a view or a table
-- @param name the finalizer, such as "example.com/cleanup"
-- @return true or false
-- @usage
-- if klua.helpers.has_finalizer(obj, 'example.com/cleanup') then cleanup(obj) end
function M.has_finalizer(obj, name)
  check_name('has_finalizer', name)
  local list = field(field(obj, 'metadata'), 'finalizers')
  return util.find(list, function(v) return v == name end) ~= nil
end

--- Appends name to obj.metadata.finalizers unless it is there.
-- Returns true when obj changed.
-- @param obj a mutable table, or klua.edit(obj)
-- @param name the finalizer
-- @return true when obj changed
-- @raise when obj is not a mutable table or name not a string
-- @usage
-- local o = klua.copy(obj)
-- if klua.helpers.add_finalizer(o, 'example.com/cleanup') then klua.api.update('configmaps', o) end
function M.add_finalizer(obj, name)
  check_mutable('add_finalizer', obj)
  check_name('add_finalizer', name)
  if M.has_finalizer(obj, name) then return false end
  local md = util.subtable('add_finalizer', obj, 'metadata', 'obj.metadata')
  local list = util.subtable('add_finalizer', md, 'finalizers', 'obj.metadata.finalizers', array_mt)
  list[#list + 1] = name
  return true
end

--- Removes every occurrence of name from obj.metadata.finalizers.
-- Returns true when obj changed.
-- @param obj a mutable table, or klua.edit(obj)
-- @param name the finalizer
-- @return true when obj changed
-- @raise when obj is not a mutable table or name not a string
-- @usage
-- local o = klua.copy(obj)
-- if klua.helpers.remove_finalizer(o, 'example.com/cleanup') then klua.api.update('configmaps', o) end
function M.remove_finalizer(obj, name)
  check_mutable('remove_finalizer', obj)
  check_name('remove_finalizer', name)
  if not M.has_finalizer(obj, name) then return false end
  local md = util.subtable('remove_finalizer', obj, 'metadata', 'obj.metadata')
  local list = util.subtable('remove_finalizer', md, 'finalizers', 'obj.metadata.finalizers')
  local kept = 0
  local n = #list
  for i = 1, n do
    if list[i] ~= name then
      kept = kept + 1
      list[kept] = list[i]
    end
  end
  -- From the end: an array from klua.edit takes nil only there.
  for i = n, kept + 1, -1 do list[i] = nil end
  return kept < n
end

return M
