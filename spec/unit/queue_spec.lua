-- The work queue hands a controller's keys to its reconcilers with
-- client-go's guarantees: a key is queued once however often it is added,
-- it is never processed twice at once, and failures are retried with a
-- per-key exponential backoff under an overall rate limit. Time is an
-- argument on every call, so these specs drive a fake clock.
local testing = require('klua_testing')

-- Gets every key that is ready at `now`, marking each done right away.
local function drain(q, now)
  local got = {}
  while true do
    local key = q:get(now)
    if not key then return got end
    got[#got + 1] = key
    q:done(key, now)
  end
end

-- Rate-limits `key` once at `now`, lets it fall due, processes it, and
-- returns the delay it was given.
local function retry_delay(q, key, now)
  q:add_rate_limited(key, now)
  local due = q:next_ready()
  assert.equals(key, (q:get(due)))
  q:done(key, due)
  return due - now, due
end

describe('work queue', function()
  describe('adding and getting', function()
    it('hands keys out in the order they were added', function()
      local q = testing.queue()
      for _, k in ipairs { 'ns/c', 'ns/a', 'ns/b' } do q:add(k, 0) end
      assert.same({ 'ns/c', 'ns/a', 'ns/b' }, drain(q, 0))
    end)

    it('queues a key once however often it is added before processing', function()
      local q = testing.queue()
      q:add('ns/a', 0)
      q:add('ns/b', 0)
      q:add('ns/a', 1)
      q:add('ns/a', 2)
      assert.equals(2, q:len())
      assert.same({ 'ns/a', 'ns/b' }, drain(q, 3))
    end)

    it('returns nil, not shut down, when nothing is ready', function()
      local q = testing.queue()
      local key, shut_down = q:get(0)
      assert.is_nil(key)
      assert.is_false(shut_down)
    end)

    it('never hands out a key that is being processed', function()
      local q = testing.queue()
      q:add('ns/a', 0)
      assert.equals('ns/a', (q:get(0)))
      q:add('ns/a', 1)
      assert.equals(0, q:len())
      assert.is_nil((q:get(1)))
    end)

    it('processes a key added during its processing once more after done', function()
      local q = testing.queue()
      q:add('ns/a', 0)
      assert.equals('ns/a', (q:get(0)))
      q:add('ns/a', 1)
      q:add('ns/a', 2)
      q:done('ns/a', 3)
      assert.equals(1, q:len())
      assert.same({ 'ns/a' }, drain(q, 4))
    end)

    it('puts a key re-added during its processing behind the keys already queued', function()
      local q = testing.queue()
      q:add('ns/a', 0)
      q:add('ns/b', 0)
      assert.equals('ns/a', (q:get(0)))
      q:add('ns/a', 1)
      q:add('ns/c', 1)
      q:done('ns/a', 2)
      assert.same({ 'ns/b', 'ns/c', 'ns/a' }, drain(q, 2))
    end)

    it('forgets a processed key that was not re-added', function()
      local q = testing.queue()
      q:add('ns/a', 0)
      q:get(0)
      q:done('ns/a', 1)
      assert.equals(0, q:len())
      assert.is_nil((q:get(1)))
    end)

    it('ignores done for a key that is not being processed', function()
      local q = testing.queue()
      q:add('ns/a', 0)
      q:done('ns/a', 0)
      q:done('ns/never-added', 0)
      assert.equals(1, q:len())
      assert.same({ 'ns/a' }, drain(q, 0))
    end)

    it('processes different keys concurrently', function()
      local q = testing.queue()
      q:add('ns/a', 0)
      q:add('ns/b', 0)
      assert.equals('ns/a', (q:get(0)))
      assert.equals('ns/b', (q:get(0)))
      assert.equals(2, q:stats(0).processing)
    end)
  end)

  -- controller-runtime's priority queue: the keys an initial list or a
  -- resync brings go in at LOW, so that a change made meanwhile does not
  -- wait behind all of them.
  describe('priorities', function()
    local LOW = -100

    it('hands out every key of a higher priority before any of a lower one', function()
      local q = testing.queue()
      for i = 1, 5 do q:add('ns/listed-' .. i, 0, LOW) end
      q:add('ns/changed', 1)
      q:add('ns/requeued', 2, 0)
      assert.same({ 'ns/changed', 'ns/requeued', 'ns/listed-1', 'ns/listed-2', 'ns/listed-3', 'ns/listed-4',
        'ns/listed-5' }, drain(q, 3))
    end)

    it('hands out the keys of one priority in the order they were queued', function()
      local q = testing.queue()
      for _, k in ipairs { 'ns/c', 'ns/a', 'ns/b' } do q:add(k, 0, LOW) end
      for _, k in ipairs { 'ns/z', 'ns/x', 'ns/y' } do q:add(k, 0, 5) end
      assert.same({ 'ns/z', 'ns/x', 'ns/y', 'ns/c', 'ns/a', 'ns/b' }, drain(q, 0))
    end)

    it('keeps the higher priority when a queued key is added again', function()
      local q = testing.queue()
      q:add('ns/a', 0, LOW)
      q:add('ns/b', 0, LOW)
      q:add('ns/b', 1)
      q:add('ns/b', 2, LOW)
      assert.equals(2, q:len())
      local key, _, prio = q:get(3)
      assert.same({ 'ns/b', 0 }, { key, prio })
      q:done('ns/b', 3)
      key, _, prio = q:get(3)
      assert.same({ 'ns/a', LOW }, { key, prio })
    end)

    it('puts a raised key among the keys of its new priority by when it was queued', function()
      local q = testing.queue()
      q:add('ns/listed', 0, LOW)
      q:add('ns/changed', 1)
      q:add('ns/listed', 2)
      assert.same({ 'ns/listed', 'ns/changed' }, drain(q, 2))
    end)

    it('queues a key added during its processing at the highest priority it was added at', function()
      local q = testing.queue()
      q:add('ns/a', 0, LOW)
      q:add('ns/b', 0, LOW)
      assert.equals('ns/a', (q:get(0)))
      q:add('ns/a', 1, LOW)
      q:add('ns/a', 1)
      q:done('ns/a', 2)
      local key, _, prio = q:get(2)
      assert.same({ 'ns/a', 0 }, { key, prio })
    end)

    it('adds a delayed key at the highest priority it was delayed at', function()
      local q = testing.queue { qps = math.huge }
      q:add('ns/listed', 0, LOW)
      q:add_after('ns/late', 1, 0, LOW)
      q:add_after('ns/late', 2, 0)
      q:add_rate_limited('ns/retried', 0, LOW)
      local key, _, prio = q:get(1)
      assert.same({ 'ns/late', 0 }, { key, prio })
      assert.same({ 'ns/listed', 'ns/retried' }, drain(q, 1))
    end)

    it('adds at priority 0 when none is given', function()
      local q = testing.queue()
      q:add('ns/a', 0)
      local _, _, prio = q:get(0)
      assert.equals(0, prio)
    end)
  end)

  describe('delayed adds', function()
    it('adds each key when its delay has passed, earliest first', function()
      local q = testing.queue()
      q:add_after('ns/x', 3, 0)
      q:add_after('ns/y', 1, 0)
      q:add_after('ns/z', 2, 0)
      assert.equals(1, q:next_ready())
      assert.is_nil((q:get(0.5)))
      assert.equals(0, q:len())
      assert.same({ 'ns/y' }, drain(q, 1))
      assert.equals(2, q:next_ready())
      assert.same({ 'ns/z', 'ns/x' }, drain(q, 5))
      assert.is_nil(q:next_ready())
    end)

    it('keeps the earlier ready time when a key is delayed twice', function()
      local q = testing.queue()
      q:add_after('ns/a', 5, 0)
      q:add_after('ns/a', 2, 0)
      assert.equals(2, q:next_ready())
      q:add_after('ns/a', 10, 0)
      assert.equals(2, q:next_ready())
      assert.same({ 'ns/a' }, drain(q, 2))
      assert.is_nil(q:next_ready())
      assert.same({}, drain(q, 100))
    end)

    it('adds at once when the delay is zero or negative', function()
      local q = testing.queue()
      q:add_after('ns/a', 0, 7)
      q:add_after('ns/b', -1, 7)
      assert.is_nil(q:next_ready())
      assert.same({ 'ns/a', 'ns/b' }, drain(q, 7))
    end)

    it('orders keys due at the same time by when they were delayed', function()
      local q = testing.queue()
      q:add_after('ns/b', 2, 0)
      q:add_after('ns/a', 1, 1)
      q:add_after('ns/c', 2, 0)
      assert.same({ 'ns/b', 'ns/a', 'ns/c' }, drain(q, 2))
    end)

    it('moves due keys into the queue on advance, reporting how many', function()
      local q = testing.queue()
      q:add_after('ns/a', 1, 0)
      q:add_after('ns/b', 2, 0)
      assert.equals(0, q:advance(0.9))
      assert.equals(1, q:advance(1.5))
      assert.equals(1, q:len())
      assert.equals(1, q:advance(2))
      assert.equals(2, q:len())
    end)

    it('does not queue a due key twice when it is already queued', function()
      local q = testing.queue()
      q:add('ns/a', 0)
      q:add_after('ns/a', 1, 0)
      assert.same({ 'ns/a' }, drain(q, 2))
    end)

    it('queues a key that falls due during its processing again after done', function()
      local q = testing.queue()
      q:add('ns/a', 0)
      assert.equals('ns/a', (q:get(0)))
      q:add_after('ns/a', 1, 0)
      assert.is_nil((q:get(2)))
      q:done('ns/a', 3)
      assert.same({ 'ns/a' }, drain(q, 3))
    end)
  end)

  describe('rate-limited adds', function()
    it('backs a failing key off exponentially from 5 ms, capped at 1000 s', function()
      local q, now = testing.queue(), 0
      local delays = {}
      for i = 1, 20 do
        delays[i], now = retry_delay(q, 'ns/a', now)
      end
      for i = 1, 18 do assert.near(0.005 * 2 ^ (i - 1), delays[i], 1e-9) end
      assert.near(655.36, delays[18], 1e-9)
      assert.equals(1000, delays[19])
      assert.equals(1000, delays[20])
      assert.equals(20, q:num_requeues('ns/a'))
    end)

    it('starts a key over from the base delay after forget', function()
      local q, now = testing.queue(), 0
      local d
      for _ = 1, 4 do d, now = retry_delay(q, 'ns/a', now) end
      assert.near(0.04, d, 1e-9)
      q:forget('ns/a')
      assert.equals(0, q:num_requeues('ns/a'))
      assert.near(0.005, (retry_delay(q, 'ns/a', now)), 1e-9)
    end)

    it('backs each key off on its own', function()
      local q, now = testing.queue(), 0
      for _ = 1, 3 do _, now = retry_delay(q, 'ns/a', now) end
      assert.near(0.005, (retry_delay(q, 'ns/b', now)), 1e-9)
      assert.equals(3, q:num_requeues('ns/a'))
      assert.equals(1, q:num_requeues('ns/b'))
      assert.equals(0, q:num_requeues('ns/never'))
    end)

    it('lets a burst of 100 retries through, then one every 1/qps seconds', function()
      local q = testing.queue()
      for i = 1, 103 do q:add_rate_limited('ns/k' .. i, 0) end
      assert.near(0.005, q:next_ready(), 1e-9)
      assert.equals(100, q:advance(0.005))
      assert.equals(0, q:advance(0.099))
      for n = 1, 3 do
        assert.near(0.1 * n, q:next_ready(), 1e-9)
        assert.equals(1, q:advance(0.1 * n + 1e-9))
      end
      assert.equals(103, #drain(q, 1))
    end)

    it('refills the bucket at qps', function()
      local q = testing.queue()
      for i = 1, 100 do q:add_rate_limited('ns/a' .. i, 0) end
      drain(q, 1)
      for i = 1, 11 do q:add_rate_limited('ns/b' .. i, 1) end
      assert.equals(10, q:advance(1.005))
      assert.near(1.1, q:next_ready(), 1e-9)
    end)

    it('never holds more than the burst, however long it was idle', function()
      local q = testing.queue()
      q:add_rate_limited('ns/first', 0)
      for i = 1, 101 do q:add_rate_limited('ns/k' .. i, 3600) end
      assert.equals(101, q:advance(3600.005))
      assert.near(3600.1, q:next_ready(), 1e-9)
    end)

    it('waits for the larger of the key backoff and the bucket delay', function()
      local q = testing.queue { qps = 1, burst = 1 }
      q:add_rate_limited('ns/a', 0)
      q:add_rate_limited('ns/b', 0)
      assert.near(0.005, q:next_ready(), 1e-9)
      assert.equals(1, q:advance(0.005))
      assert.equals(1, q:next_ready())
    end)

    it('takes its delays and rates from the options', function()
      local q, now = testing.queue { base_delay = 1, max_delay = 4 }, 0
      local delays = {}
      for i = 1, 5 do delays[i], now = retry_delay(q, 'ns/a', now) end
      assert.same({ 1, 2, 4, 4, 4 }, delays)
    end)

    it('runs without the bucket when qps is infinite', function()
      local q = testing.queue { qps = math.huge }
      for i = 1, 1000 do q:add_rate_limited('ns/k' .. i, 0) end
      assert.equals(1000, q:advance(0.005))
    end)

    it('counts a requeue even while the key already waits', function()
      local q = testing.queue()
      q:add_rate_limited('ns/a', 0)
      q:add_rate_limited('ns/a', 0)
      assert.equals(2, q:num_requeues('ns/a'))
      assert.near(0.005, q:next_ready(), 1e-9)
      assert.same({ 'ns/a' }, drain(q, 1))
    end)
  end)

  describe('shutdown', function()
    it('ignores new adds and drops the delayed ones', function()
      local q = testing.queue()
      q:add('ns/a', 0)
      q:add_after('ns/b', 1, 0)
      q:add_rate_limited('ns/c', 0)
      q:shutdown()
      assert.is_true(q:shutting_down())
      assert.is_nil(q:next_ready())
      q:add('ns/d', 0)
      q:add_after('ns/e', 0, 0)
      q:add_rate_limited('ns/f', 0)
      assert.equals(0, q:num_requeues('ns/f'))
      assert.same({ 'ns/a' }, drain(q, 10))
    end)

    it('hands out what is queued, then reports the shutdown', function()
      local q = testing.queue()
      q:add('ns/a', 0)
      q:add('ns/b', 0)
      assert.is_false(q:shutting_down())
      q:shutdown()
      local key, shut_down = q:get(1)
      assert.equals('ns/a', key)
      assert.is_false(shut_down)
      q:done('ns/a', 1)
      key, shut_down = q:get(1)
      assert.equals('ns/b', key)
      assert.is_false(shut_down)
      q:done('ns/b', 1)
      key, shut_down = q:get(1)
      assert.is_nil(key)
      assert.is_true(shut_down)
    end)

    it('waits for keys in progress, which may be queued once more', function()
      local q = testing.queue()
      q:add('ns/a', 0)
      q:get(0)
      q:add('ns/a', 0)
      q:shutdown()
      local key, shut_down = q:get(1)
      assert.is_nil(key)
      assert.is_false(shut_down)
      q:done('ns/a', 1)
      assert.equals('ns/a', (q:get(1)))
      q:done('ns/a', 2)
      key, shut_down = q:get(2)
      assert.is_nil(key)
      assert.is_true(shut_down)
    end)
  end)

  describe('stats', function()
    it('counts adds, retries and the keys in each state', function()
      local q = testing.queue()
      q:add('ns/a', 0)
      q:add('ns/a', 0)
      q:add('ns/b', 0)
      q:add_after('ns/c', 5, 0)
      q:add_rate_limited('ns/d', 0)
      assert.equals('ns/a', (q:get(0)))
      local s = q:stats(0)
      assert.equals(1, s.depth)
      assert.equals(1, s.processing)
      assert.equals(2, s.waiting)
      assert.equals(1, s.failing)
      assert.equals(2, s.adds)
      assert.equals(2, s.retries)
      q:forget('ns/d')
      assert.equals(0, q:stats(0).failing)
    end)

    it('measures the wait from add, or from falling due, to get', function()
      local q = testing.queue()
      q:add('ns/a', 1)
      q:add_after('ns/b', 1, 0)
      assert.equals('ns/a', (q:get(1.5)))
      assert.equals('ns/b', (q:get(4)))
      local wait = q:stats(4).wait
      assert.equals(2, wait.count)
      assert.near(3.5, wait.sum, 1e-9)
      assert.equals(3, wait.max)
      assert.same({ 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0 }, wait.buckets)
    end)

    it('measures the work from get to done', function()
      local q = testing.queue()
      q:add('ns/a', 0)
      q:get(1)
      q:done('ns/a', 3)
      local work = q:stats(3).work
      assert.equals(1, work.count)
      assert.equals(2, work.sum)
    end)

    it('reports how long the keys in progress have run', function()
      local q = testing.queue()
      q:add('ns/a', 0)
      q:add('ns/b', 0)
      q:get(1)
      q:get(3)
      local s = q:stats(5)
      assert.equals(6, s.unfinished)
      assert.equals(4, s.longest)
      q:done('ns/a', 5)
      s = q:stats(6)
      assert.equals(3, s.unfinished)
      assert.equals(3, s.longest)
    end)

    it('reports how long the longest-queued key has waited, a key re-added while processing included', function()
      local q = testing.queue()
      assert.equals(0, q:stats(0).oldest)
      q:add('ns/a', 0)
      q:get(1)
      q:add('ns/a', 2) -- re-added while processing: queued again at done()
      q:add('ns/b', 3)
      q:done('ns/a', 4) -- now behind ns/b, but queued since 2
      assert.equals(8, q:stats(10).oldest)
      assert.equals('ns/b', q:get(10))
      assert.equals(8, q:stats(10).oldest)
      assert.equals('ns/a', q:get(10))
      assert.equals(0, q:stats(10).oldest)
    end)

    -- controller-runtime's workqueue histograms: ExponentialBuckets(10e-9, 10, 12)
    -- (pkg/internal/metrics/workqueue.go, v0.20), bounds multiplied out as Go does.
    it('counts waits in the buckets of controller-runtime\'s workqueue histograms', function()
      local q = testing.queue()
      for i, wait in ipairs { 0.5e-8, 2e-6, 0.5, 20, 5000 } do
        local key = 'ns/' .. i
        q:add(key, 0)
        q:get(wait)
        q:done(key, wait)
      end
      local w = q:stats(0).wait
      assert.equals(5, w.count)
      assert.equals(5000, w.max)
      assert.same({ 1, 0, 0, 1, 0, 0, 0, 0, 1, 0, 1, 0, 1 }, w.buckets)
      assert.same({ 1e-08, 1e-07, 1e-06, 9.999999999999999e-06, 9.999999999999999e-05, 0.001, 0.01, 0.1, 1, 10,
        100, 1000, math.huge }, testing.queue_bucket_bounds())
    end)
  end)

  it('hands out each of 20,000 keys exactly once through delays and retries', function()
    local q, seen, now = testing.queue { qps = math.huge }, {}, 0
    for i = 1, 20000 do
      local key = 'ns/obj-' .. i
      if i % 3 == 0 then q:add_after(key, i % 7, now)
      elseif i % 3 == 1 then q:add(key, now); q:add(key, now)
      else q:add_rate_limited(key, now) end
    end
    while q:next_ready() or q:len() > 0 do
      now = now + 1
      for _, key in ipairs(drain(q, now)) do
        assert.is_nil(seen[key])
        seen[key] = true
        q:forget(key)
      end
    end
    local n = 0
    for _ in pairs(seen) do n = n + 1 end
    assert.equals(20000, n)
    local s = q:stats(now)
    assert.same({ 0, 0, 0, 0 }, { s.depth, s.processing, s.waiting, s.failing })
  end)
end)
