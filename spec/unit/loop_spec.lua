-- The event loop's deferred work: how stages hand work to each other
-- without re-entering one another. Work deferred by deferred work runs in
-- the next round of the same iteration, up to 32 rounds, so that a frame
-- decoded in one round reaches its handler in the next while its tape is
-- still in the core's cache. Deferring returns an id, as a timer does, so
-- that whoever deferred work pointing at itself can cancel it when it is
-- freed.
local testing = require 'klua_testing'

describe('deferred work', function()
  it('runs in the order it was deferred', function()
    local loop = testing.loop()
    loop:defer('a')
    loop:defer('b')
    loop:defer('stop')
    assert.same({ 'a', 'b', 'stop' }, loop:run())
  end)

  it('does not run once cancelled', function()
    local loop = testing.loop()
    loop:defer('a')
    loop:cancel(loop:defer('b'))
    loop:defer('stop')
    assert.same({ 'a', 'stop' }, loop:run())
  end)

  it('does not run when work before it in the same iteration cancels it', function()
    local loop = testing.loop()
    local a = loop:defer('a')
    loop:cancel_when_run(a, loop:defer('b'))
    loop:defer('stop')
    assert.same({ 'a', 'stop' }, loop:run())
  end)

  it('ignores the cancel of work that already ran, and of id 0', function()
    local loop = testing.loop()
    local a = loop:defer('a')
    loop:cancel_when_run(loop:defer('b'), a)
    loop:cancel(0)
    loop:defer('stop')
    assert.same({ 'a', 'b', 'stop' }, loop:run())
  end)

  it('runs work deferred by deferred work in the same iteration, for 32 rounds', function()
    local loop = testing.loop()
    -- "arm" sets a timer due at once: it fires when the next iteration runs its timers.
    loop:defer('arm')
    loop:relay('r', 40, 'stop')
    local expected = { 'arm' }
    for i = 1, 32 do expected[#expected + 1] = 'r' .. i end
    expected[#expected + 1] = 'timer'
    for i = 33, 40 do expected[#expected + 1] = 'r' .. i end
    expected[#expected + 1] = 'stop'
    assert.same(expected, loop:run())
  end)

  it('stops between two pieces of work once one stops the loop', function()
    local loop = testing.loop()
    loop:defer('stop')
    loop:defer('after the stop')
    assert.same({ 'stop' }, loop:run())
  end)
end)
