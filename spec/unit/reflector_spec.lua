-- The reflector keeps one resource's cache current as client-go's Reflector
-- does: LIST, then WATCH from the list's resourceVersion, with a backoff
-- between failed attempts. It is a state machine whose transitions are one
-- table in src/cache/reflector.c; these specs run it on a fake clock and
-- answer its requests themselves, so minutes of backoff take no time.
local testing = require('klua_testing')

local transitions = require('support.transitions')

local function list_body(rv, names)
  local items = {}
  for i, n in ipairs(names or {}) do
    items[i] = string.format('{"metadata":{"name":"%s","namespace":"default","resourceVersion":"%s"}}', n, rv)
  end
  return string.format('{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"%s"},"items":[%s]}',
    rv, table.concat(items, ','))
end

local function event(type, name, rv)
  return string.format('{"type":"%s","object":{"kind":"ConfigMap","apiVersion":"v1",'
    .. '"metadata":{"name":"%s","namespace":"default","resourceVersion":"%s"}}}\n', type, name, rv)
end

local function initial_events_end(rv)
  return string.format('{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":'
    .. '{"resourceVersion":"%s","annotations":{"k8s.io/initial-events-end":"true"}}}}\n', rv)
end

local function error_event(code, reason, message)
  return string.format('{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure",'
    .. '"message":"%s","reason":"%s","code":%d}}\n', message, reason, code)
end

local function status(code, reason, message)
  return { outcome = 'Status', status = code, body = string.format(
    '{"kind":"Status","apiVersion":"v1","status":"Failure","message":"%s","reason":"%s","code":%d}',
    message, reason, code) }
end

-- kube-apiserver's answer to sendInitialEvents when its WatchList feature is
-- off (apiserver's validateWatchOptions, turned into a 422 Invalid).
local WATCH_LIST_OFF = status(422, 'Invalid', 'ListOptions.meta.k8s.io \\"\\" is invalid: sendInitialEvents: '
  .. 'Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled')

-- The open request, checked to be the kind expected (a pattern on its path).
local function expect_request(r, pattern)
  local id, path, timeout_ms = r:request()
  assert.truthy(id, 'no open request')
  assert.truthy(path:find(pattern), path)
  return id, path, timeout_ms
end

-- Starts a reflector and completes its first LIST at rv 10.
-- A reflector, started with opts.
local function started(opts)
  local r = testing.reflector(opts or {})
  r:start()
  return r
end

local function listed(opts)
  local r = started(opts)
  r:finish(expect_request(r, 'resourceVersion=0'), { body = list_body('10', { 'a' }) })
  assert.equals('WATCH', r:state())
  return r
end

describe('the reflector', function()
  local r
  after_each(function()
    if r then r:free() end
    r = nil
  end)

  describe('transition table', function()
    local rows = testing.reflector_transitions()

    for _, case in ipairs(transitions.printed_as_declared(rows, { header = 'src/cache/reflector.h',
      begin = 'TRANSITIONS', finish = 'END TRANSITIONS', doc = 'reflector transitions', when = 'when', width = 48 })) do
      it(case.name, case.check)
    end

    it('leads from and to known states only', function()
      local known = { IDLE = true, LIST = true, WATCHLIST = true, WATCH = true, BACKOFF = true }
      for _, t in ipairs(rows) do
        assert.truthy(known[t.from], t.from)
        assert.truthy(known[t.to], t.to)
      end
    end)
  end)

  describe('backoff', function()
    -- The wait after a LIST that fails (503) `seconds` after it was sent.
    local function backoff_after_slow_failure(seconds)
      local id = r:request()
      r:advance(seconds)
      r:finish(id, status(503, 'ServiceUnavailable', 'x'))
      return r:next_timer()
    end

    -- client-go's reflector: wait.NewExponentialBackoffManager(800ms, 30s, 2min, 2.0, 1.0).
    it('waits 0.8, 1.6, 3.2 s ... doubling to 30 s, each jittered into [d, 2d)', function()
      r = started()
      local d = 0.8
      for _ = 1, 9 do
        r:finish(expect_request(r, 'resourceVersion=0'), status(500, 'InternalError', 'boom'))
        assert.equals('BACKOFF', r:state())
        local wait = r:next_timer()
        assert.truthy(wait >= d - 1e-9 and wait < 2 * d, ('%g not in [%g, %g)'):format(wait, d, 2 * d))
        r:advance(wait)
        assert.equals('LIST', r:state())
        d = math.min(d * 2, 30)
      end
      assert.equals(30, d)
      assert.equals(9, r:stats().backoffs)
    end)

    it('starts again from 0.8 s after two minutes without a failure', function()
      r = started()
      for _ = 1, 3 do
        r:finish(expect_request(r, 'resourceVersion=0'), status(503, 'ServiceUnavailable', 'x'))
        r:advance(r:next_timer())
      end
      -- Three failures: the next would wait [6.4, 12.8) s; a LIST answered 121 s later
      -- fails after more than two minutes without one.
      local wait = backoff_after_slow_failure(121)
      assert.truthy(wait >= 0.8 and wait < 1.6, wait)
    end)

    it('keeps doubling when the failures come less than two minutes apart', function()
      r = started()
      r:finish(r:request(), status(503, 'ServiceUnavailable', 'x'))
      r:advance(r:next_timer())
      local wait = backoff_after_slow_failure(100)
      assert.truthy(wait >= 1.6 and wait < 3.2, wait)
    end)

    it('honours Retry-After up to 30 s', function()
      r = started()
      local answer = status(429, 'TooManyRequests', 'slow down')
      answer.retry_after = 7
      r:finish(r:request(), answer)
      assert.equals(7, r:next_timer())
      r:advance(7)
      answer.retry_after = 3600
      r:finish(expect_request(r, 'resourceVersion=0'), answer)
      assert.equals(30, r:next_timer())
    end)
  end)

  describe('watch deadline', function()
    it('asks the server for timeoutSeconds in [min, max) and gives up 5 s after it', function()
      r = listed { watch_timeout_min = 300, watch_timeout_max = 600 }
      local _, path, timeout_ms = expect_request(r, 'watch=true')
      assert.truthy(path:find('resourceVersion=10', 1, true), path)
      local t = tonumber(path:match('timeoutSeconds=(%d+)'))
      assert.truthy(t >= 300 and t < 600, t)
      assert.equals((t + 5) * 1000, timeout_ms)
    end)

    it('watches again at once when the deadline passes after the 200', function()
      r = listed { idle_timeout = 1000 }
      local id = r:request()
      r:feed(id, event('ADDED', 'b', '11'))
      r:advance(400)
      r:finish(id, { outcome = 'Timeout', status = 200 })
      assert.equals('WATCH', r:state())
      assert.equals(0, r:stats().backoffs)
      expect_request(r, 'resourceVersion=11')
      assert.same({ 'replace 1 at 10', 'ADDED default/b 11' }, r:take())
    end)

    it('restarts a watch silent past the idle limit, and only then', function()
      r = listed { idle_timeout = 150 }
      local id = r:request()
      r:advance(100)
      r:feed(id, event('MODIFIED', 'a', '12'))
      r:advance(149)
      assert.falsy(r:aborted(id))
      r:advance(2)
      assert.truthy(r:aborted(id))
      assert.equals('WATCH', r:state())
      expect_request(r, 'resourceVersion=12')
      assert.equals(1, r:stats().idle_restarts)
    end)
  end)

  -- The live page (docs/ui.md) shows the last transitions with their causes and when.
  it('keeps its last 16 transitions, oldest first, with their causes and times', function()
    r = listed()
    for i = 1, 10 do
      r:advance(1)
      local rv = tostring(10 + 2 * i)
      r:feed(r:request(), event('MODIFIED', 'a', rv) .. error_event(410, 'Expired', 'too old'))
      r:finish(expect_request(r, 'resourceVersion=' .. rv), { body = list_body(tostring(11 + 2 * i), { 'a' }) })
      r:take()
    end
    local h = r:history()
    assert.equals(16, #h)
    -- 22 transitions made: the first 6 are gone, the 7th (a WATCH -> LIST) is the oldest kept.
    for i, t in ipairs(h) do
      local leaving = i % 2 == 1
      assert.equals(leaving and 'WATCH' or 'LIST', t.from)
      assert.equals(leaving and 'LIST' or 'WATCH', t.to)
      assert.equals(leaving and '410 (HTTP or ERROR) after events' or 'ok (the last page)', t.cause)
    end
    assert.equals(0, h[16].age)
    assert.equals(7, h[1].age)
    assert.is_true(r:stats().bytes > 0)
    assert.equals(20, r:stats().frames)
  end)

  -- How stale the cache may be (klua_informer_staleness_seconds, --readyz-max-staleness):
  -- the time since the last sign that it is current, on the reflector's own clock.
  describe('staleness', function()
    local function bookmark(rv)
      return string.format('{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1",'
        .. '"metadata":{"resourceVersion":"%s"}}}\n', rv)
    end

    it('counts from the start until the first LIST completes', function()
      r = started()
      r:advance(7)
      assert.equals(7, r:staleness())
      r:finish(expect_request(r, 'resourceVersion=0'), { body = list_body('10', { 'a' }) })
      assert.equals(0, r:staleness())
    end)

    it('is reset by each watch event and each bookmark, and grows while the watch is silent', function()
      r = listed { idle_timeout = 1000 }
      local id = r:request()
      r:advance(40)
      assert.equals(40, r:staleness())
      r:feed(id, event('MODIFIED', 'a', '11'))
      assert.equals(0, r:staleness())
      r:advance(61)
      assert.equals(61, r:staleness())
      r:feed(id, bookmark('15'))
      assert.equals(0, r:staleness())
      assert.equals('15', r:rv())
    end)
  end)

  -- --verify-cache found the cache differing from a consistent LIST: the reflector lists
  -- the latest state again through its own transition, named for the drift.
  describe('a relist for drift', function()
    it('goes from WATCH to LIST("") through the drift transition', function()
      r = listed()
      local watch = r:request()
      r:feed(watch, event('MODIFIED', 'a', '12'))
      assert.is_true(r:relist('2 objects differ from the server'))
      assert.truthy(r:aborted(watch))
      assert.equals('LIST', r:state())
      -- The latest state, as the consistent LIST that found the drift: resourceVersion "".
      expect_request(r, '[?&]resourceVersion=$')
      local h = r:history()
      assert.equals('cache drifted from the server (--verify-cache)', h[#h].cause)
      assert.equals(1, r:stats().relists)
      r:finish(r:request(), { body = list_body('20', { 'a', 'b' }) })
      assert.equals('WATCH', r:state())
      expect_request(r, 'resourceVersion=20')
    end)

    it('streams the latest state instead with WatchList on', function()
      r = started({ watch_list = 'auto' })
      local id = expect_request(r, 'sendInitialEvents=true')
      r:feed(id, event('ADDED', 'a', '5') .. initial_events_end('9'))
      assert.is_true(r:relist('1 object differs from the server'))
      assert.truthy(r:aborted(id))
      assert.equals('WATCHLIST', r:state())
      local _, path = expect_request(r, 'sendInitialEvents=true')
      assert.truthy(path:find('[?&]resourceVersion=&') or path:find('[?&]resourceVersion=$'), path)
      local h = r:history()
      assert.equals('cache drifted, WatchList on', h[#h].cause)
      assert.equals(1, r:stats().relists)
    end)

    it('does nothing outside WATCH', function()
      r = started()
      assert.is_false(r:relist('drift'))
      assert.equals('LIST', r:state())
      assert.equals(1, #r:history())
    end)
  end)

  -- Under --shards against a server that shards (KEP-5866) the held shards' ranges are the
  -- reflector's shardSelector; when they change it lists the new selection's latest state
  -- through its own transition, as a drift relist, and its requests carry it from then on.
  describe('a new shard selector', function()
    local SEL = "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"
    local ENCODED = SEL:gsub('[^%w%-%._~]', function(c) return ('%%%02X'):format(c:byte()) end)

    it('goes from WATCH to LIST("") with the selector through the reshard transition', function()
      r = listed()
      local watch = r:request()
      assert.is_true(r:reshard(SEL))
      assert.truthy(r:aborted(watch))
      assert.equals('LIST', r:state())
      local _, path = expect_request(r, '[?&]resourceVersion=&')
      assert.truthy(path:find('shardSelector=' .. ENCODED, 1, true), path)
      local h = r:history()
      assert.equals('shard selector changed (--shards)', h[#h].cause)
      r:finish(r:request(), { body = list_body('20', { 'a' }) })
      assert.equals('WATCH', r:state())
      local _, wpath = expect_request(r, 'resourceVersion=20')
      assert.truthy(wpath:find('shardSelector=' .. ENCODED, 1, true), wpath)
      -- The same selector again changes nothing.
      local before = #r:history()
      assert.is_true(r:reshard(SEL))
      assert.equals('WATCH', r:state())
      assert.equals(before, #r:history())
    end)

    it('streams the new selection with WatchList on', function()
      r = started({ watch_list = 'auto' })
      local id = expect_request(r, 'sendInitialEvents=true')
      r:feed(id, event('ADDED', 'a', '5') .. initial_events_end('9'))
      assert.is_true(r:reshard(SEL))
      assert.equals('WATCHLIST', r:state())
      local _, path = expect_request(r, 'sendInitialEvents=true')
      assert.truthy(path:find('shardSelector=' .. ENCODED, 1, true), path)
      assert.equals('shard selector changed, WatchList on', r:history()[#r:history()].cause)
    end)

    it('waits outside WATCH, so that no list under way completes with the old selection', function()
      r = started()
      assert.is_false(r:reshard(SEL))
      local _, path = expect_request(r, 'resourceVersion=0')
      assert.falsy(path:find('shardSelector', 1, true), path)
    end)
  end)

  -- A relist answered 200 with something other than the list asked for would, read as an
  -- empty list, replace the cache with nothing and delete every object. client-go refuses
  -- such a body: a Status is the request's error (rest.Result.Into), and a body its
  -- decoder cannot read or convert is an error too.
  describe('a relist answered 200 with a body that is not the list', function()
    -- Lists at rv 10, then a watch that expires after an event: the relist from 11.
    local function relisting()
      r = listed()
      r:feed(r:request(), event('MODIFIED', 'a', '11') .. error_event(410, 'Expired', 'too old'))
      assert.same({ 'replace 1 at 10', 'MODIFIED default/a 11' }, r:take())
      return expect_request(r, 'resourceVersion=11')
    end

    -- The relist is refused: no replace, the LIST asked again from 11 after a backoff,
    -- counted as an error; then a proper answer is taken.
    local function refused(answer)
      relisting()
      local errors = r:stats().errors
      r:finish(r:request(), answer)
      assert.equals('BACKOFF', r:state())
      assert.same({}, r:take())
      assert.equals(errors + 1, r:stats().errors)
      r:advance(r:next_timer())
      r:finish(expect_request(r, 'resourceVersion=11'), { body = list_body('12', { 'a', 'b' }) })
      assert.same({ 'replace 2 at 12' }, r:take())
      assert.equals('WATCH', r:state())
    end

    local function status_body(code, reason)
      return string.format('{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"%s","code":%d}',
        reason, code)
    end

    it('acts on a Status 410 as on an HTTP 410: lists again at once from ""', function()
      relisting()
      local errors = r:stats().errors
      r:finish(r:request(), { body = status_body(410, 'Expired') })
      assert.same({}, r:take())
      assert.equals('LIST', r:state())
      assert.equals(errors + 1, r:stats().errors)
      r:finish(expect_request(r, 'resourceVersion=$'), { body = list_body('15', { 'a' }) })
      assert.same({ 'replace 1 at 15' }, r:take())
    end)

    it('backs off on a Status of any other code, keeping the cache', function()
      refused({ body = status_body(500, 'InternalError') })
    end)

    for what, body in pairs({
      ['{}'] = '{}',
      ['a list of another kind'] = '{"kind":"SecretList","apiVersion":"v1","metadata":{"resourceVersion":"12"},"items":[]}',
      ['a list without items'] = '{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"12"}}',
      ['a list without metadata.resourceVersion'] = '{"kind":"ConfigMapList","apiVersion":"v1","metadata":{},"items":[]}',
    }) do
      it('refuses ' .. what .. ' and keeps the cache', function()
        refused({ body = body })
      end)
    end

    it('refuses a body that is not JSON by its Content-Type, without reading it', function()
      refused({ body = list_body('12', {}), content_type = 'application/vnd.kubernetes.protobuf' })
    end)

    it('reads application/json with parameters, in any case, as JSON', function()
      relisting()
      r:finish(r:request(), { body = list_body('12', { 'a' }), content_type = 'Application/JSON; charset=utf-8' })
      assert.same({ 'replace 1 at 12' }, r:take())
    end)
  end)

  it('refuses a watch whose Content-Type is not JSON, as a malformed stream', function()
    r = listed()
    local id = r:request()
    r:feed(id, event('MODIFIED', 'a', '11'), 'application/yaml')
    assert.same({ 'replace 1 at 10' }, r:take())
    assert.equals(1, r:stats().malformed)
    assert.equals('BACKOFF', r:state())
    r:advance(r:next_timer())
    expect_request(r, 'resourceVersion=10')
    assert.equals('LIST', r:state())
  end)

  -- A restarted kube-apiserver has a new, empty watch cache while etcd keeps the old
  -- revisions until its next compaction: a watch from before the restart gets 410, and a
  -- LIST with a limit at that resourceVersion (cacher.go's shouldDelegateList sends it to
  -- etcd) is the exact old snapshot, whose watch gets 410 again. Whatever path lists at
  -- the rv, a LIST that returns the rv whose watch just got 410 before any event is
  -- followed by a LIST of the latest state ("") rather than by a watch from it.
  describe('a LIST that returns the rv whose watch just got 410 at once', function()
    local EXPIRED = error_event(410, 'Expired', 'too old resource version: 11 (15)')

    -- Lists at rv 10 (with opts), watches, sees one event (rv 11), and has the watch cut,
    -- as a restart cuts it; the watch from 11 is then answered with 410 at once.
    local function restarted(opts)
      r = started(opts)
      if opts.watch_list then r:finish(expect_request(r, 'sendInitialEvents=true'), WATCH_LIST_OFF) end
      r:finish(expect_request(r, 'resourceVersion=0'), { body = list_body('10', { 'a' }) })
      local id = expect_request(r, 'watch=true.*resourceVersion=10')
      r:feed(id, event('MODIFIED', 'a', '11'))
      r:finish(id, { outcome = 'TransportError' })
      r:feed(expect_request(r, 'watch=true.*resourceVersion=11'), EXPIRED)
      assert.equals('BACKOFF', r:state())
      r:advance(r:next_timer())
      assert.same({ 'replace 1 at 10', 'MODIFIED default/a 11' }, r:take())
    end

    -- The LIST at 11 answers the old snapshot, at 11: the next request lists from "".
    local function lists_latest_after(pattern)
      r:finish(expect_request(r, pattern), { body = list_body('11', { 'a' }) })
      assert.equals('LIST', r:state())
      r:finish(expect_request(r, 'resourceVersion=$'), { body = list_body('15', { 'a', 'b' }) })
      assert.same({ 'replace 2 at 15' }, r:take())
      expect_request(r, 'watch=true.*resourceVersion=15')
    end

    it('lists from "" after a paged relist (--page-size)', function()
      restarted { page_size = 2 }
      lists_latest_after('^/api/v1/configmaps%?limit=2&resourceVersion=11$')
    end)

    it('lists from "" after an unpaged relist', function()
      restarted {}
      lists_latest_after('^/api/v1/configmaps%?resourceVersion=11$')
    end)

    it('lists from "" after the LIST a refused watch-list falls back to (--watch-list --page-size)', function()
      restarted { watch_list = true, page_size = 2 }
      r:finish(expect_request(r, 'sendInitialEvents=true'), WATCH_LIST_OFF)
      lists_latest_after('^/api/v1/configmaps%?limit=2&resourceVersion=11$')
    end)

    -- Without the rule the cycle would be: LIST(10) -> 10, WATCH(10) -> 410, watch-list
    -- refused, LIST(10) -> 10 again, and so on while etcd keeps revision 10.
    it('breaks the cycle of a watch from the rv the first LIST returned, through a refused watch-list', function()
      r = started({ watch_list = true, page_size = 2 })
      r:finish(expect_request(r, 'sendInitialEvents=true'), WATCH_LIST_OFF)
      r:finish(expect_request(r, 'limit=2&resourceVersion=0'), { body = list_body('10', { 'a' }) })
      r:feed(expect_request(r, 'watch=true.*resourceVersion=10'), EXPIRED)
      r:advance(r:next_timer())
      r:finish(expect_request(r, 'sendInitialEvents=true'), WATCH_LIST_OFF)
      r:finish(expect_request(r, 'limit=2&resourceVersion=10$'), { body = list_body('10', { 'a' }) })
      assert.equals('LIST', r:state())
      expect_request(r, 'resourceVersion=$')
    end)

    it('watches from a LIST that returns a newer rv', function()
      restarted { page_size = 2 }
      r:finish(expect_request(r, 'limit=2&resourceVersion=11$'), { body = list_body('12', { 'a' }) })
      assert.equals('WATCH', r:state())
      expect_request(r, 'watch=true.*resourceVersion=12')
    end)
  end)

  -- client-go's SetWatchErrorHandler is told of each failed ListAndWatch; klua's sink is
  -- told of each failure it retries, and whether a watch was ever accepted, so that klua
  -- watch can treat a first watch refused as the usage error a first LIST refused is.
  describe('a watch the server refuses', function()
    local FORBIDDEN = status(403, 'Forbidden', 'configmaps is forbidden: cannot watch')

    it('is told to the sink and kept as the refusal until a watch is accepted', function()
      r = listed()
      r:finish(expect_request(r, 'watch=true'), FORBIDDEN)
      assert.equals('watch 403 persistent: configmaps is forbidden: cannot watch', r:failure())
      assert.equals('403 Forbidden: configmaps is forbidden: cannot watch', r:refusal())
      assert.equals('BACKOFF', r:state())
      r:advance(r:next_timer())
      r:feed(expect_request(r, 'watch=true.*resourceVersion=10'), event('MODIFIED', 'a', '11'))
      assert.is_nil(r:refusal())
      r:finish(r:request(), FORBIDDEN)
      assert.equals('watch 403 persistent watched: configmaps is forbidden: cannot watch', r:failure())
    end)

    it('is no refusal when it is an outage', function()
      r = listed()
      r:finish(expect_request(r, 'watch=true'), status(503, 'ServiceUnavailable', 'busy'))
      assert.equals('watch 503: busy', r:failure())
      assert.is_nil(r:refusal())
    end)
  end)

  describe('in WatchList mode', function()
    it('streams the initial state and goes on watching on the same stream', function()
      r = started({ watch_list = true })
      assert.equals('WATCHLIST', r:state())
      local id = expect_request(r, 'sendInitialEvents=true')
      r:feed(id, event('ADDED', 'a', '5') .. event('ADDED', 'b', '7'))
      assert.same({}, r:take())
      assert.equals('', r:rv())
      r:feed(id, initial_events_end('9'))
      assert.equals('WATCH', r:state())
      assert.equals(id, (r:request()))
      r:feed(id, event('MODIFIED', 'a', '10'))
      assert.same({ 'replace 2 at 9', 'MODIFIED default/a 10' }, r:take())
    end)

    -- --watch-list-deadline measures progress: at KEP-3157's 5,000 nodes the bookmark
    -- comes 30-60 s after the request, and a stream that delivers is let run.
    it('lets a stream that delivers run past the deadline to its bookmark', function()
      r = started({ watch_list = 'auto', watch_list_deadline = 10 })
      local id = r:request()
      r:feed(id, event('ADDED', 'a', '5'))
      r:advance(60)
      assert.equals('WATCHLIST', r:state())
      assert.falsy(r:aborted(id))
      r:feed(id, event('ADDED', 'b', '6') .. initial_events_end('9'))
      assert.equals('WATCH', r:state())
      assert.same({ 'replace 2 at 9' }, r:take())
    end)

    it('lists instead when no initial event comes within the deadline, and tries the watch-list again at the next relist', function()
      r = started({ watch_list = 'auto', watch_list_deadline = 10 })
      local id = r:request()
      r:advance(9.9)
      assert.equals('WATCHLIST', r:state())
      r:advance(0.2)
      assert.truthy(r:aborted(id))
      assert.equals('LIST', r:state())
      r:finish(expect_request(r, 'resourceVersion=0'), { body = list_body('20', { 'a' }) })
      assert.same({ 'replace 1 at 20' }, r:take())
      id = expect_request(r, 'watch=true.*resourceVersion=20')
      r:feed(id, event('ADDED', 'c', '21') .. error_event(410, 'Expired', 'too old'))
      assert.equals('WATCHLIST', r:state())
      expect_request(r, 'sendInitialEvents=true')
    end)

    -- A server that ignores sendInitialEvents and resourceVersionMatch serves a plain
    -- watch from "": every object as ADDED, and never the initial-events-end bookmark.
    -- The stream's own timeout ends it; what it streamed is dropped, not delivered.
    for _, case in ipairs {
      { mode = 'auto', next = 'LIST', what = 'by default, lists from then on' },
      { mode = true, next = 'WATCHLIST', what = 'with --watch-list=true, tries the watch-list again at the next relist' },
    } do
      it('lists after a stream that ends without the initial-events-end bookmark; ' .. case.what, function()
        r = started({ watch_list = case.mode })
        local id = r:request()
        r:feed(id, event('ADDED', 'a', '5') .. event('ADDED', 'b', '7'))
        r:advance(100)
        r:finish(id, { outcome = 'OK', status = 200 })
        assert.equals('LIST', r:state())
        r:finish(expect_request(r, 'resourceVersion=0'), { body = list_body('20', { 'a' }) })
        assert.same({ 'replace 1 at 20' }, r:take())
        r:feed(expect_request(r, 'watch=true.*resourceVersion=20'), event('ADDED', 'c', '21')
          .. error_event(410, 'Expired', 'too old'))
        assert.equals(case.next, r:state())
      end)
    end

    -- client-go's watchList asks for a state not older than the one it holds
    -- (rewatchResourceVersion), which the watch cache serves without a consistent read;
    -- an expired or too large resourceVersion makes it ask for the latest state ("").
    it('asks a watch-list for a state not older than the cache\'s, and for the latest after a 410', function()
      r = started({ watch_list = 'auto' })
      local _, first = expect_request(r, 'sendInitialEvents=true')
      assert.truthy(first:find('[?&]resourceVersion=&') or first:find('[?&]resourceVersion=$'), first)
      r:feed(r:request(), event('ADDED', 'a', '5') .. initial_events_end('9'))
      r:feed(r:request(), 'not json\n')
      r:advance(r:next_timer())
      local _, again = expect_request(r, 'sendInitialEvents=true')
      assert.truthy(again:find('[?&]resourceVersion=9'), again)
      r:feed(r:request(), event('ADDED', 'a', '5') .. error_event(410, 'Expired', 'too old'))
      local _, latest = expect_request(r, 'sendInitialEvents=true')
      assert.truthy(latest:find('[?&]resourceVersion=&') or latest:find('[?&]resourceVersion=$'), latest)
    end)

    it('asks a watch-list for the latest state after its resourceVersion was too large', function()
      r = started({ watch_list = 'auto' })
      r:feed(r:request(), event('ADDED', 'a', '5') .. initial_events_end('9'))
      r:feed(r:request(), 'not json\n')
      r:advance(r:next_timer())
      r:finish(expect_request(r, 'resourceVersion=9'), status(504, 'Timeout', 'Too large resource version: 9, current: 3'))
      assert.equals('BACKOFF', r:state())
      r:advance(r:next_timer())
      local _, path = expect_request(r, 'sendInitialEvents=true')
      assert.truthy(path:find('[?&]resourceVersion=&') or path:find('[?&]resourceVersion=$'), path)
    end)

    -- kube-apiserver 1.33 has the WatchList feature off by default (1.32 and 1.34 on)
    -- and answers 422; so does a server older than sendInitialEvents, which forbids
    -- resourceVersionMatch on a watch. By default klua stops asking such a server.
    it('by default, lists from then on when the server answers the watch-list 422', function()
      r = started({ watch_list = 'auto' })
      r:finish(expect_request(r, 'sendInitialEvents=true'), WATCH_LIST_OFF)
      assert.equals('LIST', r:state())
      r:finish(expect_request(r, 'resourceVersion=0'), { body = list_body('30', { 'a' }) })
      r:feed(expect_request(r, 'watch=true.*resourceVersion=30'), event('ADDED', 'c', '31')
        .. error_event(410, 'Expired', 'too old'))
      assert.equals('LIST', r:state())
      expect_request(r, '^/api/v1/configmaps%?resourceVersion=31$')
    end)

    it('by default, tries the watch-list again after a refusal that is not 400 or 422', function()
      r = started({ watch_list = 'auto' })
      r:finish(r:request(), status(500, 'InternalError', 'boom'))
      assert.equals('LIST', r:state())
      r:finish(expect_request(r, 'resourceVersion=0'), { body = list_body('30', { 'a' }) })
      r:feed(expect_request(r, 'watch=true.*resourceVersion=30'), event('ADDED', 'c', '31')
        .. error_event(410, 'Expired', 'too old'))
      assert.equals('WATCHLIST', r:state())
    end)

    -- client-go's ListAndWatch: an error from watchList that is not retriable (only a
    -- refused connection and 429 are, and an expired resourceVersion) makes that
    -- ListAndWatch list instead; the next one tries the watch-list again.
    it('lists at once when the server refuses the watch-list, and tries it again at the next relist', function()
      r = started({ watch_list = true })
      r:finish(expect_request(r, 'sendInitialEvents=true'), WATCH_LIST_OFF)
      assert.equals('LIST', r:state())
      assert.equals(0, r:stats().backoffs)
      r:finish(expect_request(r, '^/api/v1/configmaps%?limit=500&resourceVersion=0$'),
        { body = list_body('30', { 'a', 'b' }) })
      assert.same({ 'replace 2 at 30' }, r:take())
      local id = expect_request(r, 'watch=true.*resourceVersion=30')
      r:feed(id, event('ADDED', 'c', '31') .. error_event(410, 'Expired', 'too old'))
      assert.equals('WATCHLIST', r:state())
      expect_request(r, 'sendInitialEvents=true')
    end)

    -- kube-apiserver 1.32 and 1.33 refuse the Table form to a watch-list
    -- (watchListEndpointRestrictions); kubectl get -w lists and watches.
    it('lists and watches the Table form instead', function()
      r = started({ watch_list = true, table = true })
      assert.equals('LIST', r:state())
      local _, path = expect_request(r, 'includeObject=Object')
      assert.falsy(path:find('sendInitialEvents', 1, true), path)
    end)

    it('lists at once after a 5xx or an ERROR event on the watch-list', function()
      r = started({ watch_list = true })
      r:finish(r:request(), status(500, 'InternalError', 'boom'))
      assert.equals('LIST', r:state())
      r:free()
      r = started({ watch_list = true })
      r:feed(r:request(), error_event(500, 'InternalError', 'etcd is sad'))
      assert.equals('LIST', r:state())
    end)

    it('retries the watch-list after a backoff when the server does not answer or asks to wait', function()
      r = started({ watch_list = true })
      r:finish(r:request(), { outcome = 'TransportError' })
      assert.equals('BACKOFF', r:state())
      r:advance(r:next_timer())
      assert.equals('WATCHLIST', r:state())
      local answer = status(429, 'TooManyRequests', 'slow down')
      answer.retry_after = 2
      r:finish(expect_request(r, 'sendInitialEvents=true'), answer)
      assert.equals('BACKOFF', r:state())
      assert.equals(2, r:next_timer())
      r:advance(2)
      assert.equals('WATCHLIST', r:state())
    end)
  end)
end)

-- --serialization cbor (docs/architecture.md, "CBOR"): the response's Content-Type says
-- how to read it. A LIST in application/cbor and a watch in application/cbor-seq (KEP-4222)
-- give what their JSON gives; client-go's watch refuses application/cbor, one item only.
describe('the reflector asking for CBOR', function()
  local cbor = require('support.cbor')

  local function object(name, rv)
    return { kind = 'ConfigMap', apiVersion = 'v1', metadata = { name = name, namespace = 'default', resourceVersion = rv } }
  end
  local function cbor_event(type, name, rv) return cbor.item { type = type, object = object(name, rv) } end

  local function cbor_listed()
    local r = started({ cbor = true })
    local body = cbor.item { kind = 'ConfigMapList', apiVersion = 'v1', metadata = { resourceVersion = '10' },
      items = { object('a', '10') } }
    r:finish(expect_request(r, 'resourceVersion=0'), { body = body, content_type = 'application/cbor' })
    assert.same({ 'replace 1 at 10' }, r:take())
    assert.equals('WATCH', r:state())
    return r
  end

  it('reads a LIST in application/cbor and a watch in application/cbor-seq, events and a 410 alike', function()
    local r = cbor_listed()
    local id = r:request()
    local body = cbor_event('ADDED', 'b', '11') .. cbor_event('MODIFIED', 'a', '12')
      .. cbor.item { type = 'ERROR', object = { kind = 'Status', apiVersion = 'v1', status = 'Failure',
        reason = 'Expired', message = 'too old', code = 410 } }
    r:feed(id, body:sub(1, 7), 'application/cbor-seq')
    r:feed(id, body:sub(8))
    assert.same({ 'ADDED default/b 11', 'MODIFIED default/a 12' }, r:take())
    assert.equals(0, r:stats().malformed)
    expect_request(r, 'resourceVersion=12')
  end)

  it('reads JSON from a server that answers it instead', function()
    local r = started({ cbor = true })
    r:finish(expect_request(r, 'resourceVersion=0'), { body = list_body('10', { 'a' }), content_type = 'application/json' })
    r:feed(r:request(), event('MODIFIED', 'a', '11'), 'application/json')
    assert.same({ 'replace 1 at 10', 'MODIFIED default/a 11' }, r:take())
  end)

  it('refuses a watch in application/cbor, as client-go does, as a malformed stream', function()
    local r = cbor_listed()
    r:feed(r:request(), cbor_event('MODIFIED', 'a', '11'), 'application/cbor')
    assert.same({}, r:take())
    assert.equals(1, r:stats().malformed)
    assert.equals('BACKOFF', r:state())
  end)

  it('ends a watch at an item it cannot read, delivering those before it, and relists', function()
    local r = cbor_listed()
    r:feed(r:request(), cbor_event('MODIFIED', 'a', '11') .. '\xd9\xd9\xf7\xc1\x01' .. cbor_event('MODIFIED', 'a', '12'),
      'application/cbor-seq')
    assert.same({ 'MODIFIED default/a 11' }, r:take())
    assert.equals(1, r:stats().malformed)
    assert.equals('BACKOFF', r:state())
    r:advance(r:next_timer())
    expect_request(r, 'resourceVersion=11')
  end)

  it('refuses a LIST in application/cbor it cannot read, keeping the cache', function()
    local r = started({ cbor = true })
    r:finish(expect_request(r, 'resourceVersion=0'), { body = '\xd9\xd9\xf7\xa1\x45items\x81\xc1\x01', content_type = 'application/cbor' })
    assert.same({}, r:take())
    assert.equals(1, r:stats().errors)
    assert.equals('BACKOFF', r:state())
  end)
end)
