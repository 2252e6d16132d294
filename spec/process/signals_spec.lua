-- What a script cannot do to klua's own hold on the process: escape the
-- count hook that stops it on SIGINT/SIGTERM, or crash it with the value it
-- raises. The first signal stops script code wherever Lua can be
-- interrupted; a second one ends klua at once, whatever runs (a __gc
-- handler, a long C call): under klua run's graceful stop with status 1, as
-- controller-runtime's second signal (src/base/loop.h). An
-- error value whose __tostring fails, returns no string or never returns is
-- logged as lua.c's placeholder, and klua goes on.
local K = require('support.klua')

-- No API server is needed: the scripts only run timers.
local function spawn(text, flags) return K.spawn(K.offline_args(text, flags)) end

describe('klua on a signal while script code escapes the count hook', function()
  local function started(p, what)
    assert.truthy(p:wait_for(what, 10 * K.slowdown, 'err'), p:errors())
  end

  -- Once p has logged what, SIGTERM, then second once the first has
  -- reached the handler; returns the status klua ended with.
  local function second_signal(p, what, second)
    started(p, what)
    p:signal('TERM')
    assert.truthy(K.signal_delivered(p), p:errors())
    p:signal(second)
    local code = p:wait(10 * K.slowdown)
    p:cleanup()
    return code
  end

  -- Once the script has logged what, SIGTERM and then the second signal end it with status 1.
  for _, case in ipairs {
    -- Lua runs a finalizer with hooks off: only the second signal can end it.
    { name = 'ends at once on a second SIGTERM while a __gc handler runs without end', what = 'finalizing',
      second = 'TERM', script = [[
      klua.after(0, function()
        setmetatable({}, { __gc = function() io.stderr:write('finalizing\n') while true do end end })
        collectgarbage()
      end)
    ]] },
    -- Nor can the hook run inside a C function: string.find backtracking.
    { name = 'ends at once on a SIGINT after a SIGTERM while a long C call runs', what = 'finding', second = 'INT',
      script = [[
      klua.after(0, function()
        io.stderr:write('finding\n')
        string.find(string.rep('a', 40), string.rep('a*', 40) .. 'b')
      end)
    ]] },
  } do
    it(case.name, function()
      assert.equals(1, second_signal(spawn(case.script), case.what, case.second))
    end)
  end

  -- Once p has logged what, SIGTERM: klua must end with status 0; returns what it logged.
  local function stopped(p, what)
    started(p, what)
    local code = p:stop('TERM')
    local err = p:errors()
    p:cleanup()
    assert.equals(0, code, err)
    return err
  end

  it('stops on SIGTERM a handler that tried to remove the hook with debug.sethook() and loops', function()
    local p = spawn([[
      klua.after(0, function()
        local ok, err = pcall(debug.sethook)
        io.stderr:write('sethook: ', tostring(ok), ' ', err, '\n')
        while true do end
      end)
    ]], { '--instruction-budget', '0' })
    local err = stopped(p, 'sethook: ')
    assert.truthy(err:find("sethook: false debug.sethook is not available in klua: klua's own hook enforces "
      .. '--instruction-budget and stops scripts on SIGINT/SIGTERM', 1, true), err)
    assert.truthy(err:find('klua.after callback interrupted: klua is stopping on SIGTERM', 1, true), err)
  end)

  -- The stop's error leaves hooks off on the coroutine it ends; coroutine.wrap
  -- then closes it, which ran its __close handler unchecked.
  it('stops on SIGTERM, under --instruction-budget 0, a coroutine whose __close handler loops', function()
    local p = spawn([[
      klua.after(0, function()
        coroutine.wrap(function()
          local guard <close> = setmetatable({}, { __close = function() while true do end end })
          io.stderr:write('spinning\n')
          while true do end
        end)()
      end)
    ]], { '--instruction-budget', '0' })
    local err = stopped(p, 'spinning')
    assert.truthy(err:find('klua.after callback interrupted: klua is stopping on SIGTERM', 1, true), err)
  end)
end)

describe('an error value that cannot be turned into text', function()
  -- __tostring that fails, that returns a table, that never returns.
  local VALUES = {
    failing = "setmetatable({}, { __tostring = function() error('x') end })",
    ['returning a table'] = 'setmetatable({}, { __tostring = function() return {} end })',
    looping = 'setmetatable({}, { __tostring = function() while true do end end })',
  }

  for what, value in pairs(VALUES) do
    it(('is logged as a placeholder when raised from the main chunk, its __tostring %s'):format(what), function()
      local _, err, code = K.run(K.offline_args('error(' .. value .. ')', { '--instruction-budget', '0' }))
      assert.equals(1, code, err)
      assert.truthy(err:find("the script's main chunk failed: (error object is a table value)", 1, true), err)
    end)
  end

  it('is logged as a placeholder when raised from handlers, and klua goes on', function()
    local lines = {}
    for _, value in pairs(VALUES) do lines[#lines + 1] = 'klua.after(0, function() error(' .. value .. ') end)' end
    lines[#lines + 1] = "klua.after(0.2, function() print('still running') klua.stop(3) end)"
    local out, err, code = K.run(K.offline_args(table.concat(lines, '\n'), { '--instruction-budget', '0' }))
    assert.equals(3, code, err)
    assert.equals('still running\n', out)
    assert.equals(3, K.count(err, 'klua.after callback failed: %(error object is a table value%)'), err)
  end)

  it('still reads a __tostring that returns a string', function()
    local _, err, code = K.run(K.offline_args("error(setmetatable({}, { __tostring = function() return 'readable' end }))"))
    assert.equals(1, code, err)
    assert.truthy(err:find("the script's main chunk failed: readable", 1, true), err)
  end)
end)
