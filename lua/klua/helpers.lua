--- klua.helpers: what every controller otherwise writes by hand, in one
-- module: owner references, finalizers, conditions, events and update
-- predicates. Each concept also stands alone as klua.owner, klua.finalizer,
-- klua.condition, klua.event and klua.predicate.
--
-- Functions that change an object take a mutable table (obj:copy()); those
-- that only read also accept read-only views.
local owner = require 'klua.owner'
local finalizer = require 'klua.finalizer'
local condition = require 'klua.condition'
local event = require 'klua.event'
local predicate = require 'klua.predicate'

local M = {}

for _, mod in ipairs { owner, finalizer, condition, event, predicate } do
  for name, fn in pairs(mod) do
    if name ~= 'set_array_mt' and name ~= 'set_clock' then M[name] = fn end
  end
end

local LIST_MAKERS = { owner, finalizer, condition }
local CLOCK_USERS = { condition, event }

local array_mt

--- The metatable that marks the lists the helpers create as JSON arrays.
function M.array_mt() return array_mt end

--- Sets that metatable; the host calls this once with its own, so that a
-- list the helpers create re-encodes as [] rather than {}.
function M.set_array_mt(mt)
  if type(mt) ~= 'table' then error('set_array_mt: mt must be a table', 2) end
  array_mt = mt
  for _, mod in ipairs(LIST_MAKERS) do mod.set_array_mt(mt) end
end

--- Sets the clock that dates condition transitions and events: a function
-- returning seconds since the Unix epoch (os.time by default).
function M.set_clock(fn)
  if type(fn) ~= 'function' then error('set_clock: fn must be a function returning epoch seconds', 2) end
  for _, mod in ipairs(CLOCK_USERS) do mod.set_clock(fn) end
end

M.set_array_mt({})

return M
