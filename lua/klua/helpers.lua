--- klua.helpers: what every controller otherwise writes by hand, in one
-- module: owner references, declarative children, finalizers, conditions,
-- events and update predicates. Each concept lives in its own module
-- (lua/klua/owner.lua, children.lua, finalizer.lua, condition.lua,
-- event.lua, predicate.lua, loaded as require('klua.owner') and so on);
-- klua.helpers gathers their functions.
--
-- Functions that change an object take a mutable table (klua.copy(obj)) or
-- a view that takes writes (klua.edit(obj)); those that only read also
-- accept read-only views.
--
-- Errors: a mistake in the call raises an error that names the fix (a view
-- where a mutable table is needed, an option of the wrong type or missing,
-- such as a condition without reason): it fails the same way every time and
-- is fixed in the script. A problem with an object's data, which the script
-- cannot rule out (an object without metadata.name or kind, an owner without
-- uid, another controller already) returns nil and an error {reason,
-- message} (tostring(err) is the message), so that a reconcile can report it
-- and go on. Readers and predicates never fail on data: a missing part reads
-- as absent.
local owner = require('klua.owner')
local children = require('klua.children')
local finalizer = require('klua.finalizer')
local condition = require('klua.condition')
local event = require('klua.event')
local predicate = require('klua.predicate')
local correlator = require('klua.internal.correlator')
local util = require('klua.internal.objutil')

local M = {}

for _, mod in ipairs { owner, children, finalizer, condition, event, predicate } do
  for name, fn in pairs(mod) do
    if name ~= 'set_array_mt' and name ~= 'set_clock' then M[name] = fn end
  end
end

local LIST_MAKERS = { owner, finalizer, condition }
local CLOCK_USERS = { condition, event, correlator }

local array_mt

--- The metatable that marks the lists the helpers create as JSON arrays.
-- @return the metatable
-- @usage
-- local list = setmetatable({}, klua.helpers.array_mt())
function M.array_mt() return array_mt end

--- Sets that metatable; the host calls this once with its own, so that a
-- list the helpers create re-encodes as [] rather than {}.
-- @param mt the metatable
-- @raise when mt is not a table
-- @usage
-- klua.helpers.set_array_mt(klua.json.array_mt)
function M.set_array_mt(mt)
  if type(mt) ~= 'table' then error('set_array_mt: mt must be a table', 2) end
  array_mt = mt
  for _, mod in ipairs(LIST_MAKERS) do mod.set_array_mt(mt) end
end

--- Sets the clock that dates condition transitions and events, and times
-- klua.record_event's aggregation window and spam filter: a function
-- returning seconds since the Unix epoch (os.time by default).
-- @param fn a function returning epoch seconds
-- @raise when fn is not a function
-- @usage
-- klua.helpers.set_clock(function() return 1700000000 end) -- a fixed time, in a spec
function M.set_clock(fn)
  if type(fn) ~= 'function' then error('set_clock: fn must be a function returning epoch seconds', 2) end
  for _, mod in ipairs(CLOCK_USERS) do mod.set_clock(fn) end
end

--- Sets what tells a value that takes writes from one that does not,
-- besides a table: the host calls this once with its own, so that the
-- helpers that change an object take a view from klua.edit.
-- @param fn a function(v) returning whether v takes writes
-- @raise when fn is not a function
-- @usage
-- klua.helpers.set_writable(function(v) return type(v) == 'table' end)
function M.set_writable(fn)
  if type(fn) ~= 'function' then error('set_writable: fn must be a function(v) returning a boolean', 2) end
  util.set_writable(fn)
end

M.set_array_mt({})

return M
