-- The runtime's lifecycle is one state machine (src/lua/runtime.c): its
-- phases, from NEW to CLOSED, change along one declared table and no other.
-- These specs check that the table the code declares is the one that
-- runtime.h and docs/architecture.md print, and that it is whole.
local testing = require('klua_testing')
local transitions = require('support.transitions')

local PHASES = { 'NEW', 'LOADING', 'RUNNING', 'DRAINING', 'HOOKS', 'RELEASING', 'STOPPED', 'CUT_SHORT', 'CLOSED' }

describe("the runtime's phase table", function()
  local rows = testing.runtime_transitions()

  for _, case in ipairs(transitions.printed_as_declared(rows, { header = 'src/lua/runtime.h', begin = 'PHASES',
    finish = 'END PHASES', doc = 'runtime phases', when = 'event', width = 37 })) do
    it(case.name, case.check)
  end

  it('leads from and to known phases, one row for each phase and event', function()
    transitions.assert_known(rows, PHASES, 'event')
  end)

  it('reaches every phase from NEW, and CLOSED from every phase a run ends in', function()
    transitions.assert_reached(rows, PHASES, 'NEW', 'CLOSED', { 'NEW', 'STOPPED', 'CUT_SHORT' })
  end)
end)
