-- The runtime's lifecycle is one state machine (src/lua/runtime.c): its
-- phases, from NEW to CLOSED, change along one declared table and no other.
-- These specs check that the table the code declares is the one that
-- runtime.h and docs/architecture.md print, and that it is whole.
local testing = require('klua_testing')
local transitions = require('support.transitions')

local PHASES = { 'NEW', 'LOADING', 'RUNNING', 'DRAINING', 'HOOKS', 'RELEASING', 'STOPPED', 'CUT_SHORT', 'CLOSED' }

describe("the runtime's phase table", function()
  local rows = testing.runtime_transitions()
  local known = {}
  for _, p in ipairs(PHASES) do known[p] = true end

  for _, case in ipairs(transitions.printed_as_declared(rows, { header = 'src/lua/runtime.h', begin = 'PHASES',
    finish = 'END PHASES', doc = 'runtime phases', when = 'event', width = 37 })) do
    it(case.name, case.check)
  end

  it('leads from and to known phases, one row for each phase and event', function()
    local seen = {}
    for _, t in ipairs(rows) do
      assert.truthy(known[t.from], t.from)
      assert.truthy(known[t.to], t.to)
      local key = t.from .. ' / ' .. t.event
      assert.is_nil(seen[key], 'two rows for ' .. key)
      seen[key] = true
    end
  end)

  it('reaches every phase from NEW, and CLOSED from every phase a run ends in', function()
    local reach = { NEW = true }
    repeat
      local grew = false
      for _, t in ipairs(rows) do
        if reach[t.from] and not reach[t.to] then
          reach[t.to], grew = true, true
        end
      end
    until not grew
    for _, p in ipairs(PHASES) do assert.truthy(reach[p], p .. ' is never reached') end
    local closes = {}
    for _, t in ipairs(rows) do
      if t.to == 'CLOSED' then closes[t.from] = true end
    end
    for _, p in ipairs({ 'NEW', 'STOPPED', 'CUT_SHORT' }) do assert.truthy(closes[p], p .. ' never closes') end
  end)
end)
