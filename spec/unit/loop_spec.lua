-- The event loop's deferred work: how stages hand work to each other
-- without re-entering one another. Work deferred by deferred work runs in
-- the next round of the same iteration, up to 32 rounds, so that a frame
-- decoded in one round reaches its handler in the next while its tape is
-- still in the core's cache. Deferring returns an id, as a timer does, so
-- that whoever deferred work pointing at itself can cancel it when it is
-- freed.
local testing = require('klua_testing')

describe('deferred work', function()
  -- What a new loop runs once defer(loop) has deferred work, then 'stop'.
  local function ran(defer)
    local loop = testing.loop()
    defer(loop)
    loop:defer('stop')
    return loop:run()
  end

  it('runs in the order it was deferred', function()
    assert.same({ 'a', 'b', 'stop' }, ran(function(loop)
      loop:defer('a')
      loop:defer('b')
    end))
  end)

  it('does not run once cancelled', function()
    assert.same({ 'a', 'stop' }, ran(function(loop)
      loop:defer('a')
      loop:cancel(loop:defer('b'))
    end))
  end)

  it('does not run when work before it in the same iteration cancels it', function()
    assert.same({ 'a', 'stop' }, ran(function(loop)
      local a = loop:defer('a')
      loop:cancel_when_run(a, loop:defer('b'))
    end))
  end)

  it('ignores the cancel of work that already ran, and of id 0', function()
    assert.same({ 'a', 'b', 'stop' }, ran(function(loop)
      local a = loop:defer('a')
      loop:cancel_when_run(loop:defer('b'), a)
      loop:cancel(0)
    end))
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

-- The loop's timers: a heap on (due time, id) whose entries know their
-- place, so that cancelling one of n pending timers costs O(log n). A
-- script may hold hundreds of thousands (klua.after), and shutdown
-- cancels every one of them.
describe('timers', function()
  local N = 200000

  -- The numbers 1..n that are not multiples of late_every nor in cancelled, in order.
  local function due_at_once(n, late_every, cancelled)
    local due = {}
    for i = 1, n do
      if i % late_every ~= 0 and not cancelled[i] then due[#due + 1] = i end
    end
    return due
  end

  -- The first index where the logs differ, or nil when they are the same.
  local function first_difference(got, want)
    for i = 1, math.max(#got, #want) do
      if got[i] ~= want[i] then return i end
    end
  end

  it('cancel one of 200,000 pending timers with O(log n) comparisons', function()
    local loop = testing.loop()
    local ids = loop:timers(N, 3)
    local before = loop:timer_compares()
    loop:cancel(ids[N // 2])
    local cost = loop:timer_compares() - before
    -- A removal sifts up or down once: at most two comparisons a level of the heap.
    local levels = math.ceil(math.log(N + 2, 2))
    assert.is_true(cost <= 2 * levels + 1, ('cancelling one of %d timers took %d comparisons'):format(N, cost))
  end)

  it('runs the timers left after cancels in the middle of 200,000 in their order', function()
    local loop = testing.loop()
    local ids = loop:timers(N, 3)
    local cancelled = {}
    for _, i in ipairs { N // 2, N // 2 + 1, N // 3, 1, N - 1, N } do cancelled[i] = true end
    for i = 7, N, 997 do cancelled[i] = true end
    for i in pairs(cancelled) do loop:cancel(ids[i]) end
    loop:cancel(ids[N // 2]) -- a second time: ignored
    loop:cancel(ids[N] + 1000) -- no such timer: ignored
    local want = due_at_once(N, 3, cancelled)
    want[#want + 1] = 'stop'
    local got = loop:run()
    local at = first_difference(got, want)
    assert.is_nil(at, at and ('entry %d: ran %s, expected %s'):format(at, tostring(got[at]), tostring(want[at])))
  end)
end)
