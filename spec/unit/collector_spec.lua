-- The Lua collector's mode is one state machine (src/lua/collector.c): its
-- modes change along one declared table and no other. These specs check that
-- the table the code declares is the one that collector.h and
-- docs/architecture.md print, and that it is whole; what each mode does is
-- spec/process/klua_module_spec.lua's "the Lua collector".
local testing = require('klua_testing')
local transitions = require('support.transitions')

local MODES = { 'generational', 'incremental', 'script' }

describe("the Lua collector's mode table", function()
  local rows = testing.collector_transitions()

  for _, case in ipairs(transitions.printed_as_declared(rows, { header = 'src/lua/collector.h', begin = 'MODES',
    finish = 'END MODES', doc = 'collector modes', when = 'event', width = 25, states = 12 })) do
    it(case.name, case.check)
  end

  it('leads from and to known modes, one row for each mode and event', function()
    transitions.assert_known(rows, MODES, 'event')
  end)

  it("reaches every mode from generational, and the script's from every mode", function()
    transitions.assert_reached(rows, MODES, 'generational', 'script', MODES)
  end)
end)
