--- Conditions: status.conditions entries in the shape of metav1.Condition
-- {type, status, observedGeneration, lastTransitionTime, reason, message},
-- updated the way apimachinery's meta.SetStatusCondition does.
-- Objects to change are mutable tables (klua.copy(obj)) or klua.edit(obj);
-- the getters also read views. A mistake in the call (a view to change, a condition without
-- type, status or reason) raises, as klua.helpers' convention has it; the
-- object's data never makes these fail.
local M = {}

local array_mt = {}
local clock = os.time

--- Sets the metatable that marks the lists these functions create as JSON
-- arrays (the host's, so that a new list re-encodes as [] and not {}).
function M.set_array_mt(mt) array_mt = mt end

--- Sets the clock that dates transitions: a function returning seconds
-- since the Unix epoch (os.time by default).
function M.set_clock(fn) clock = fn end

local util = require('klua.internal.objutil')
local field = util.field
local non_empty = util.non_empty

local STATUSES = { True = true, False = true, Unknown = true }

local function rfc3339(seconds)
  return os.date('!%Y-%m-%dT%H:%M:%SZ', math.floor(seconds))
end

-- The condition of the given type and its index, or nil.
local function find(obj, type_)
  local list = field(field(obj, 'status'), 'conditions')
  return util.find(list, function(c) return field(c, 'type') == type_ end)
end

--- The condition of the given type in obj.status.conditions, or nil.
-- obj may be a view.
-- @param obj a view or a table
-- @param type_ the condition's type, such as "Ready"
-- @return the condition, or nil
-- @usage
-- local ready = klua.helpers.get_condition(node, 'Ready')
function M.get_condition(obj, type_)
  return (find(obj, type_))
end

--- Whether obj has a condition of the given type with status "True".
-- obj may be a view.
-- @param obj a view or a table
-- @param type_ the condition's type
-- @return true or false
-- @usage
-- if klua.helpers.is_condition_true(pod, 'Ready') then ready = ready + 1 end
function M.is_condition_true(obj, type_)
  return field(M.get_condition(obj, type_), 'status') == 'True'
end

local function check_condition(c)
  if type(c) ~= 'table' then
    error("set_condition: pass the condition as a table {type =, status =, reason =, message =}", 3)
  end
  if not non_empty(c.type) then
    error("set_condition: type must be a non-empty string such as 'Ready'", 3)
  end
  if not STATUSES[c.status] then
    error(("set_condition: status must be 'True', 'False' or 'Unknown' (got %s %s)")
      :format(type(c.status), tostring(c.status)), 3)
  end
  util.check_reason_and_message('set_condition', c, 'Reconciled')
end

local function conditions_of(obj)
  local status = util.subtable('set_condition', obj, 'status', 'obj.status')
  return util.subtable('set_condition', status, 'conditions', 'obj.status.conditions', array_mt)
end

local function update(existing, want)
  local changed = false
  if existing.status ~= want.status then
    existing.status = want.status
    existing.lastTransitionTime = want.lastTransitionTime
    changed = true
  end
  for _, key in ipairs { 'reason', 'message', 'observedGeneration' } do
    if existing[key] ~= want[key] then
      existing[key] = want[key]
      changed = true
    end
  end
  return changed
end

--- Sets the condition c = {type, status, reason, message,
-- observed_generation, last_transition_time} in obj.status.conditions.
-- status is 'True', 'False' or 'Unknown'; reason is required; message
-- defaults to ''. observedGeneration defaults to obj.metadata.generation.
-- lastTransitionTime is set to now (or c.last_transition_time) when the
-- condition is new or its status changes, and is kept otherwise.
-- obj must be a mutable table or klua.edit(obj). Returns true when obj changed.
-- @param obj a mutable table, or klua.edit(obj)
-- @param c the condition, as above
-- @return true when obj changed
-- @raise when obj is not a mutable table, or c lacks type, a valid status or reason
-- @usage
-- local ps = klua.copy(podset)
-- if klua.helpers.set_condition(ps, { type = 'Ready', status = 'True', reason = 'AllPodsReady' }) then
--   klua.api.update_status('podsets', ps)
-- end
function M.set_condition(obj, c)
  util.check_mutable('set_condition', obj)
  check_condition(c)
  local generation = c.observed_generation
  if generation == nil then generation = field(obj.metadata, 'generation') end
  local want = {
    type = c.type, status = c.status, reason = c.reason, message = c.message or '',
    observedGeneration = math.type(generation) and generation or nil,
    lastTransitionTime = c.last_transition_time or rfc3339(clock()),
  }
  local list = conditions_of(obj)
  local existing = find(obj, c.type)
  if existing then return update(existing, want) end
  list[#list + 1] = want
  return true
end

--- Removes the condition of the given type from obj.status.conditions.
-- obj must be a mutable table or klua.edit(obj). Returns true when obj changed.
-- @param obj a mutable table, or klua.edit(obj)
-- @param type_ the condition's type
-- @return true when obj changed
-- @raise when obj is not a mutable table
-- @usage
-- klua.helpers.remove_condition(ps, 'Degraded')
function M.remove_condition(obj, type_)
  util.check_mutable('remove_condition', obj)
  local _, i = find(obj, type_)
  if not i then return false end
  local status = util.subtable('remove_condition', obj, 'status', 'obj.status')
  table.remove(util.subtable('remove_condition', status, 'conditions', 'obj.status.conditions'), i)
  return true
end

return M
