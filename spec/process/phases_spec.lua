-- The runtime's lifecycle is one state machine (src/lua/runtime.h): -v 2
-- narrates each change of phase, a step the table does not declare is
-- refused, and klua.stop decides the exit status in whatever phase it is
-- called, a graceful stop's on_shutdown hooks included.
local K = require('support.klua')

-- No API server is needed: the scripts only run timers.
local run = K.offline_args

describe("klua's lifecycle", function()
  it('narrates each change of phase at -v 2', function()
    local _, err, code = K.run(run('klua.after(0, function() end)', { '-v', '2' }))
    assert.equals(0, code, err)
    for _, line in ipairs({ 'NEW -> LOADING: kl_rt_run', 'LOADING -> RUNNING: the main chunk ended',
      'RUNNING -> STOPPED: nothing left to run' }) do
      assert.truthy(err:find(line, 1, true), err)
    end
  end)

  it("refuses a step of the graceful shutdown that the phase table does not declare", function()
    local _, err, code = K.run(run("require('klua.core').advance('drained')"))
    assert.equals(1, code, err)
    assert.truthy(err:find('the runtime does not go on "the reconciles in flight ended" from LOADING', 1, true), err)
  end)

  it('exits with the status an on_shutdown hook gives klua.stop, and runs nothing after it', function()
    local p = K.spawn(run([[
      klua.every(0.05, function() end)
      klua.on_shutdown(function() klua.stop(3) end)
      klua.on_shutdown(function() klua.log.info('second hook') end)
      klua.after(0, function() klua.log.info('running') end)
    ]]))
    assert.truthy(p:wait_for('running', 10 * K.slowdown, 'err'), p:errors())
    p:signal('TERM')
    local code = p:wait(10 * K.slowdown)
    local err = p:errors()
    p:cleanup()
    assert.equals(3, code, err)
    assert.falsy(err:find('second hook', 1, true), err)
    assert.falsy(err:find('failed', 1, true), err)
  end)
end)
