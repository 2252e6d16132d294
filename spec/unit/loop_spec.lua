-- The event loop's deferred work: how stages hand work to each other on
-- the next iteration. Deferring returns an id, as a timer does, so that
-- whoever deferred work pointing at itself can cancel it when it is freed.
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

  it('stops between two pieces of work once one stops the loop', function()
    local loop = testing.loop()
    loop:defer('stop')
    loop:defer('after the stop')
    assert.same({ 'stop' }, loop:run())
  end)
end)
