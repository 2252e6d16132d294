-- klua against servers that misbehave on purpose (scripts/hostile-server):
-- whatever bytes arrive, klua says what is wrong, keeps its memory bounded
-- and does not crash; once the server behaves again, its cache holds the
-- server's known state, with no event lost and none delivered out of order.
--
-- The hostile server's history (see its --help): obj-0..obj-4 listed at
-- resourceVersion 5, then four events released by the first WATCH. Its bad
-- responses come first, good ones after.
local K = require('support.klua')
local I = require('support.informer')
local hostile = require('support.hostile')
local testing = require('klua.testing')

local MiB = 1024 * 1024
-- Memory bounds allow for the sanitizers' overhead under make test-asan.
local BOUND = K.slowdown

--- Starts spec/scripts/recorder.lua on configmaps against server s.
local function recorder(s, flags, opts)
  opts = opts or {}
  local args = { '--kubeconfig', opts.kubeconfig or s:kubeconfig(), '--watch-idle-timeout', '2' }
  for _, f in ipairs(flags or {}) do args[#args + 1] = f end
  local dump = s.dir .. '/cache'
  for _, a in ipairs({ 'run', I.RECORDER, 'configmaps', dump, '' }) do args[#args + 1] = a end
  local p = K.spawn(args)
  p.dump = dump
  return p
end

--- Waits until p's cache equals the server's final state; returns both.
local function converge(s, p)
  local want, cache = s:state(), nil
  testing.poll(function()
    if p:exit_code() then return true end
    cache = I.cache(p)
    return cache == want
  end, 20, 0.1)
  return cache, want
end

--- The peak resident memory of a running process, in bytes.
local function peak_rss(pid)
  local status = K.read_file('/proc/' .. pid .. '/status')
  local kib = status:match('VmHWM:%s*(%d+) kB')
  return kib and tonumber(kib) * 1024
end

local function log_of(p) return p:errors() end

--- Waits until klua's log holds text (plain text, or a Lua pattern when pattern is true).
local function logged(p, text, pattern)
  return testing.poll(function() return p:errors():find(text, 1, not pattern) ~= nil end, 10, 0.1)
end

describe('klua against a hostile server', function()
  local s, p, others, dirs

  before_each(function() others, dirs = {}, {} end)

  after_each(function()
    if p then p:cleanup() end
    if s then s:stop() end
    for _, x in ipairs(others) do x:stop() end
    for _, d in ipairs(dirs) do os.execute('rm -rf ' .. K.quote(d)) end
    p, s = nil, nil
  end)

  -- A directory removed after the spec, for certificates made before a server starts.
  local function scratch()
    dirs[#dirs + 1] = K.tmpdir()
    return dirs[#dirs]
  end

  -- A script file in the server's directory.
  local function script(text)
    local path = s.dir .. '/script.lua'
    K.write_file(path, text)
    return path
  end

  -- The common ending: alive, converged, nothing stale, the bad responses served.
  local function behaves_again(bad)
    testing.poll(function() return s:stats().bad_served >= bad or p:exit_code() end, 10, 0.1)
    local cache, want = converge(s, p)
    assert.is_nil(p:exit_code(), 'klua exited: ' .. log_of(p))
    assert.equals(want, cache, log_of(p))
    assert.equals(0, I.stale(p))
    assert.equals(bad, s:stats().bad_served)
  end

  -- Starts the hostile server in mode, misbehaving bad times (default once), and the
  -- recorder against it with flags; then waits until klua is back in step with it.
  local function survives(mode, bad, flags)
    local args = { '--mode', mode }
    if bad then args[3], args[4] = '--bad', tostring(bad) end
    s = hostile.start(args)
    p = recorder(s, flags)
    behaves_again(bad or 1)
  end

  it('re-watches from the last event after a watch body ends in the middle of a chunk', function()
    survives('truncated-chunk', 2, { '-v', '2' })
    assert.truthy(logged(p, 'watch failed: transfer closed with outstanding read data remaining'), log_of(p))
    assert.truthy(logged(p, 'WATCH from resourceVersion 6'), log_of(p))
  end)

  it('refuses a 100 MiB line past 16 MiB without buffering it, then relists', function()
    survives('huge-line')
    assert.truthy(logged(p, 'watch event larger than 16777216 bytes refused; relisting'), log_of(p))
    local peak = peak_rss(p.pid)
    assert.is_true(peak < 48 * MiB * BOUND, ('peak RSS %.1f MiB'):format(peak / MiB))
  end)

  it('refuses a watch event nested 10,000 arrays deep, then relists', function()
    survives('deep-watch')
    assert.truthy(logged(p, 'watch event is not valid JSON at byte %d+: nested too deeply; relisting', true), log_of(p))
  end)

  it('refuses a LIST with an item nested 10,000 arrays deep, says so, and lists again', function()
    survives('deep-list')
    assert.truthy(logged(p, 'LIST[^\n]*nested too deeply', true), log_of(p))
  end)

  it('refuses watch events with invalid UTF-8 in their strings and never hands them to a handler', function()
    survives('bad-utf8', 2)
    assert.truthy(logged(p, 'watch event is not valid JSON at byte %d+: invalid UTF%-8; relisting', true), log_of(p))
    assert.is_nil(p:output():find('bad-', 1, true))
  end)

  it('refuses a raw NUL byte inside a string, and passes an escaped one (\\u0000) through intact', function()
    survives('nul-byte')
    assert.truthy(logged(p, 'watch event is not valid JSON at byte %d+: control character in string', true), log_of(p))
    assert.is_nil(p:output():find('nul-byte', 1, true))
    local nul = script([[
      local inf = klua.informer { resource = 'configmaps' }
      klua.every(0.05, function()
        local o = inf:get('default/late-0')
        if o and o.metadata.resourceVersion == '9' then
          print(#o.data.nul, o.data.nul == 'a\0b')
          klua.stop()
        end
      end)
    ]])
    local out, err, code = K.run({ '--kubeconfig', s.dir .. '/kubeconfig', 'run', nul })
    assert.equals(0, code, err)
    assert.equals('3\ttrue\n', out)
  end)

  it('refuses events of an unknown type, without a type, or with an object that is not one', function()
    survives('unknown-type', 3)
    assert.truthy(logged(p, 'watch event has unknown type "BOGUS"; relisting'), log_of(p))
    assert.truthy(logged(p, 'watch event has no type; relisting'), log_of(p))
    assert.truthy(logged(p, 'watch event has no object; relisting'), log_of(p))
  end)

  it('waits a backoff, doubling each time, before relisting after a stream it cannot read', function()
    survives('unknown-type', 3, { '-v', '2' })
    assert.truthy(logged(p, 'waiting %d+%.%d s before LIST: the watch stream could not be read', true), log_of(p))
    -- Each bad WATCH is followed by a LIST no sooner than the backoff:
    -- at least 0.8 s, then 1.6 s, then 3.2 s (client-go's 800 ms doubling).
    local function gaps()
      local found, watched_at = {}, nil
      for _, r in ipairs(s:stats().requests) do
        -- The watch-list request the server refuses at once (422) is no watch to relist after.
        if r.path:find('/configmaps', 1, true) and not r.path:find('sendInitialEvents', 1, true) then
          if r.path:find('watch=true', 1, true) then
            watched_at = r.time
          elseif watched_at then
            found[#found + 1] = r.time - watched_at
            watched_at = nil
          end
        end
      end
      return found
    end
    local relists = testing.poll(function() local g = gaps(); return #g == 3 and g end, 15 * K.slowdown, 0.1)
    assert.truthy(relists, log_of(p))
    for i, least in ipairs({ 0.8, 1.6, 3.2 }) do
      assert.is_true(relists[i] >= least, ('relist %d came %.2f s after its watch'):format(i, relists[i]))
    end
  end)

  it('backs off and lists again after a 500 whose body is an HTML page', function()
    survives('html-500', 2)
    assert.truthy(logged(p, 'LIST failed: HTTP 500'), log_of(p))
  end)

  it('logs a Status message with control characters escaped, on one line', function()
    survives('control-status', 2)
    local escaped = [[\x1b[2J\x1b[31mgone\x1b[0m\r\n2026-01-01T00:00:00.000Z info  [klua] all is well]]
    assert.truthy(logged(p, escaped), log_of(p))
    for line in p:errors():gmatch('[^\n]+') do
      assert.falsy(line:find('\27', 1, true), line)
      assert.falsy(line:find('^2026%-01%-01'), line)
    end
  end)

  it('backs off and watches again after a 401 with a text/plain body', function()
    survives('text-401', 2)
    assert.truthy(logged(p, 'watch failed: HTTP 401'), log_of(p))
  end)

  it('restarts a watch whose 200 never sends a byte once --watch-idle-timeout passes', function()
    survives('silent-watch', 2)
    assert.truthy(logged(p, 'watch silent for 2 s; restarting it'), log_of(p))
    assert.is_true(I.stats(p).idle >= 2)
  end)

  it('abandons a LIST whose 200 never sends a byte once --request-timeout passes, and lists again', function()
    survives('silent-list', nil, { '--request-timeout', '3' })
    assert.truthy(logged(p, 'LIST failed: Operation timed out after %d+ milliseconds', true), log_of(p))
  end)

  -- klua.api reads a request that got no complete answer as what it is, never
  -- as a response with a bad body ("InvalidResponse"): err.code is 0 and
  -- err.reason names the outcome, and the next call, answered, succeeds.
  -- Returns what the first call said and klua's peak resident memory in bytes.
  local function api_list_twice(mode, flags)
    s = hostile.start { '--mode', mode }
    local path = script [[
      for _ = 1, 2 do
        local list, err = klua.api.list('configmaps', { namespace = 'default' })
        if list then print('listed ' .. #list.items)
        else print(('%d %s: %s'):format(err.code, err.reason, err.message)) end
      end
      local status = assert(io.open('/proc/self/status')):read('a')
      print('peak ' .. status:match('VmHWM:%s*(%d+) kB'))
      klua.stop(0)
    ]]
    local args = { '--kubeconfig', s:kubeconfig() }
    for _, f in ipairs(flags or {}) do args[#args + 1] = f end
    args[#args + 1] = 'run'
    args[#args + 1] = path
    local out, err, code = K.run(args)
    assert.equals(0, code, err)
    local first, second, peak = out:match('^([^\n]*)\n([^\n]*)\npeak (%d+)\n$')
    assert.equals('listed 5', second, out .. err)
    return first, tonumber(peak) * 1024
  end

  it('tells a klua.api call that timed out after the headers came: reason Timeout', function()
    local first = api_list_twice('silent-list', { '--request-timeout', '2' })
    assert.truthy(first:match('^0 Timeout: Operation timed out after %d+ milliseconds'), first)
  end)

  it('tells a klua.api call whose body was cut off after the headers: reason TransportError', function()
    local first = api_list_twice('cut-list')
    assert.truthy(first:match('^0 TransportError: transfer closed with %d+ bytes remaining'), first)
  end)

  it('tells a klua.api call whose body is over the limit: reason TooLarge, without reading it', function()
    local first = api_list_twice('huge-list')
    assert.equals('0 TooLarge: the response body is over the limit of 64 MiB: ask for less at a time '
      .. "(api.list's limit option), or raise --memory-limit, which bounds one response too", first)
  end)

  -- The limit counts the body as it inflates: a 4 MB gzip body that would
  -- inflate to 4 GiB is given up at the limit, with klua's memory bounded.
  it('gives up on a klua.api body that inflates past the limit: reason TooLarge, memory bounded', function()
    local first, peak = api_list_twice('gzip-bomb')
    assert.equals('0 TooLarge: the response body is over the limit of 64 MiB: ask for less at a time '
      .. "(api.list's limit option), or raise --memory-limit, which bounds one response too", first)
    assert.is_true(peak < 200 * MiB * BOUND, ('peak RSS %.1f MiB'):format(peak / MiB))
  end)

  it('bounds a klua.api body by --memory-limit when one is set, and names it', function()
    local first = api_list_twice('gzip-bomb', { '--memory-limit', '100' })
    assert.matches('^0 TooLarge: the response body is over the limit of 100 MiB: .* raise %-%-memory%-limit', first)
  end)

  it('tells a klua.api call answered 200 in another type than JSON: reason InvalidResponse, naming it', function()
    local first = api_list_twice('html-200')
    assert.equals('200 InvalidResponse: the server answered text/html; charset=utf-8, not JSON', first)
  end)

  -- kube-apiserver names the type of every body it writes; klua does not guess (client-go
  -- would read such a body as the JSON it asked for).
  it('tells a klua.api call answered 200 without a Content-Type: reason InvalidResponse, naming the header', function()
    local first = api_list_twice('untyped-200')
    assert.equals("200 InvalidResponse: the server answered without a Content-Type, so klua cannot tell JSON "
      .. "from anything else: kube-apiserver names every body's type, so a proxy between klua and it likely "
      .. 'dropped the header', first)
  end)

  it('gives up on a watch that drips one byte a second past the timeout it asked for, and watches again', function()
    survives('drip', nil, { '--watch-timeout', '2:3' })
    local peak = peak_rss(p.pid)
    assert.is_true(peak < 48 * MiB * BOUND, ('peak RSS %.1f MiB'):format(peak / MiB))
  end)

  -- client-go frames a watch body with a json.Decoder, so kube-apiserver's one event a line
  -- is not something a client may rely on: events back to back, indented over many lines or
  -- with CRLF and spaces between them are the same stream.
  it('reads watch events written back to back or indented over many lines, without relisting', function()
    survives('unframed', nil, { '-v', '2' })
    assert.truthy(logged(p, 'BOOKMARK at resourceVersion 9'), log_of(p))
    local lists, watches, watch_lists = 0, 0, 0
    for _, r in ipairs(s:stats().requests) do
      if r.path:find('sendInitialEvents', 1, true) then
        watch_lists = watch_lists + 1
      elseif r.path:find('/configmaps', 1, true) then
        if r.path:find('watch=true', 1, true) then watches = watches + 1 else lists = lists + 1 end
      end
    end
    -- The server answers the watch-list 422, as kube-apiserver 1.33: klua lists from then on.
    assert.equals(1, watch_lists, log_of(p))
    assert.equals(1, lists, log_of(p))
    assert.equals(1, watches, log_of(p))
    assert.is_nil(log_of(p):find('relisting', 1, true), log_of(p))
    assert.equals(0, I.stats(p).malformed)
  end)

  it('refuses a line of text between watch events as a malformed event, then relists', function()
    survives('junk-between')
    assert.truthy(logged(p, 'watch event is not valid JSON at byte 0: [^\n]*; relisting', true), log_of(p))
    assert.equals(1, I.stats(p).malformed)
  end)

  it('refuses a watch answered as protobuf, naming its content type, then relists', function()
    survives('protobuf-watch')
    assert.truthy(logged(p, 'the watch response is application/vnd.kubernetes.protobuf;stream=watch, not JSON; '
      .. 'relisting'), log_of(p))
  end)

  it('refuses a watch answered without a Content-Type, saying so, then relists', function()
    survives('untyped-watch')
    assert.truthy(logged(p, "the watch response has no Content-Type, so klua cannot tell JSON from anything else: kube-apiserver names every body's type, so a proxy between klua and it likely dropped the header; relisting"), log_of(p))
  end)

  -- A relist answered 200 with a body that is not the list asked for: read as an empty
  -- list, it would delete every cached object. client-go refuses such a body (a Status is
  -- the request's error, a body it cannot decode is one too); so does klua, keeping its
  -- cache. In these modes the first LIST is good and the first WATCH ends with a 410 after
  -- its events, so the bad body answers a relist, with a cache to lose.
  describe('a relist answered 200 with a body that is not the list', function()
    -- The handlers never saw a delete of unknown final state, that only a relist makes;
    -- the watch's own DELETED of obj-1 is the one delete.
    local function no_relist_deletes()
      local deletes = {}
      for _, c in ipairs(I.calls(p)) do
        if c:match('^delete ') then deletes[#deletes + 1] = c end
      end
      assert.same({ 'delete default/obj-1 7 false' }, deletes)
    end

    local function keeps_the_cache(mode, problem)
      s = hostile.start { '--mode', mode }
      p = recorder(s)
      behaves_again(1)
      assert.truthy(logged(p, 'LIST failed: ' .. problem .. '; the cache is kept'), log_of(p))
      no_relist_deletes()
      assert.is_true(I.stats(p).errors >= 1, log_of(p))
    end

    it('acts on a Status 410 as on an HTTP 410: keeps the cache and lists again from ""', function()
      keeps_the_cache('status-410-list',
        'the server answered 200 with a Status, not a list: 410 Expired: too old resource version: 9 (12)')
      local lists = {}
      for _, r in ipairs(s:stats().requests) do
        if r.path:find('/configmaps', 1, true) and not r.path:find('watch=true', 1, true) then
          lists[#lists + 1] = r.path:match('resourceVersion=([^&]*)')
        end
      end
      assert.same({ '0', '9', '' }, lists)
    end)

    for _, case in ipairs({
      { 'status-500-list', 'the server answered 200 with a Status, not a list: 500 InternalError: '
        .. 'etcdserver: request timed out' },
      { 'empty-object-list', 'the response has no items' },
      { 'wrong-kind-list', 'the response is a SecretList, not a ConfigMapList' },
      { 'no-items-list', 'the response has no items' },
      { 'no-rv-list', 'the response has no metadata.resourceVersion' },
      { 'protobuf-list', 'the response is application/vnd.kubernetes.protobuf, not JSON' },
      { 'yaml-list', 'the response is application/yaml, not JSON' },
      { 'html-list', 'the response is text/html; charset=utf-8, not JSON' },
      { 'untyped-list', "the response has no Content-Type, so klua cannot tell JSON from anything else: kube-apiserver names every body's type, so a proxy between klua and it likely dropped the header" },
    }) do
      it(('refuses %s, keeping the cache, and lists again after a backoff'):format(case[1]), function()
        keeps_the_cache(case[1], case[2])
      end)
    end
  end)

  it('refuses a TLS certificate made for another host name, with a clear TLS error', function()
    local certs = scratch()
    s = hostile.start { '--tls', '--tls-name', 'wrong.example', '--cert-dir', certs }
    local kc = s:kubeconfig({ ca = certs .. '/ca.crt', token = 'hostile-spec-token' })
    local _, err, code = K.run({ '--kubeconfig', kc, 'run', I.RECORDER, 'configmaps' })
    assert.equals(1, code)
    assert.truthy(err:find("no alternative certificate subject name matches target host name '127.0.0.1'", 1, true), err)
    assert.same({}, s:stats().requests)
    assert.is_nil(err:find('hostile-spec-token', 1, true))
  end)

  it('does not follow a redirect to another host, so its credentials never reach it', function()
    local elsewhere = hostile.start { '--host', '127.0.0.2' }
    others[1] = elsewhere
    local certs = scratch()
    s = hostile.start { '--mode', 'redirect', '--bad', '2', '--redirect-to', elsewhere.url,
      '--tls', '--tls-name', '127.0.0.1', '--cert-dir', certs }
    local kc = s:kubeconfig({ ca = certs .. '/ca.crt', token = 'hostile-spec-token' })
    p = recorder(s, nil, { kubeconfig = kc })
    behaves_again(2)
    assert.truthy(logged(p, 'LIST failed: HTTP 302'), log_of(p))
    assert.same({}, elsewhere:stats().requests)
    for _, r in ipairs(s:stats().requests) do assert.equals('Bearer hostile-spec-token', r.authorization) end
  end)

  it('lists 100,000 objects from one unpaged response and syncs, with memory bounded (under 300 MiB)', function()
    s = hostile.start { '--items', '100000' }
    local sync = script([[
      local inf = klua.informer { resource = 'configmaps' }
      klua.on_synced(function() print('synced', #inf:list()); io.stdout:flush() end)
      klua.every(0.1, function()
        local late = inf:get('default/late-0')
        if late and late.metadata.resourceVersion == '100004' then print('cached', #inf:list()); io.stdout:flush() end
      end)
    ]])
    p = K.spawn({ '--kubeconfig', s:kubeconfig(), 'run', sync })
    assert.truthy(p:wait_for('cached', 60), p:errors())
    local peak = peak_rss(p.pid)
    assert.truthy(p:output():find('synced\t100000\n', 1, true))
    assert.truthy(p:output():find('cached\t100000\n', 1, true))
    assert.is_true(peak < 300 * MiB * BOUND, ('peak RSS %.1f MiB'):format(peak / MiB))
  end)
end)
