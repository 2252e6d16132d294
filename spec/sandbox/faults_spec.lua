-- The sandbox API server injects the faults klua's reliability specs need, switched at
-- start by flags or at run time through POST /sandbox/v1/faults, and counts what it did
-- in GET /sandbox/v1/stats.
local cjson = require('cjson')
local testing = require('klua.testing')
local sandbox = require('support.sandbox')

local CM = '/api/v1/namespaces/default/configmaps'

local function names(events)
  local out = {}
  for _, e in ipairs(events) do
    out[#out + 1] = e.type .. ' ' .. (e.object and e.object.metadata.name or '?')
  end
  return out
end

describe('sandbox faults', function()
  local sb = testing.with_sandbox()
  local count = 0

  before_each(function() sb:reset_faults() end)

  local function create(n)
    for _ = 1, n or 1 do
      count = count + 1
      local status = sb:json('POST', CM, { metadata = { name = 'obj-' .. count } })
      assert.equals(201, status)
    end
  end

  local function rv() return sb:stats().resourceVersion end

  local function live_watch(query)
    return sb:watch(CM .. '?watch=1&resourceVersion=' .. rv() .. (query or ''))
  end

  it('drops every watch after N events', function()
    sb:fault{ watch_drop_after = 2 }
    local w = live_watch()
    create(3)
    assert.equals(18, w.finished(5), 'curl reports the chunked body cut short')
    assert.equals(2, #w.events())
    assert.is_true(sb:stats().faults.watch_drop >= 1)
  end)

  it('drops a watch in the middle of a frame', function()
    sb:fault{ watch_drop_after = 1, watch_drop_mid_frame = true }
    local w = live_watch()
    create(2)
    assert.equals(18, w.finished(5))
    local text = w.text()
    local first, rest = text:match('^([^\n]*\n)(.*)$')
    assert.equals('ADDED', cjson.decode(first).type)
    assert.is_true(#rest > 0, 'half of the second frame arrived')
    assert.is_nil(rest:find('\n'), 'and it never ends')
    assert.is_false((pcall(cjson.decode, rest)))
  end)

  -- A fault no client can see: the watch goes on, one event short (the drift --verify-cache
  -- finds, spec/process/verify_cache_spec.lua).
  it('leaves out the next K events of matching objects, and the watch goes on', function()
    sb:fault{ watch_skip = { count = 1, resource = 'configmaps', name = '^skip-' } }
    local w = live_watch()
    for _, name in ipairs { 'kept-1', 'skip-1', 'skip-2' } do
      assert.equals(201, (sb:json('POST', CM, { metadata = { name = name } })))
    end
    w.wait_for(function(events) return #events >= 2 end)
    assert.same({ 'ADDED kept-1', 'ADDED skip-2' }, names(w.events()))
    assert.equals(1, sb:stats().faults.watch_skip)
    local _, body = sb:request('GET', '/sandbox/v1/faults')
    assert.is_nil(cjson.decode(body).faults.watch_skip, 'the count is used up')
  end)

  it('drops watches at random with probability p per event', function()
    sb:fault{ watch_drop_probability = 1, seed = 7 }
    local w = live_watch()
    create(1)
    assert.equals(18, w.finished(5))
    assert.same({}, w.events())
  end)

  it('injects an ERROR 410 Expired event into every open watch, which then ends', function()
    local a, b = live_watch(), live_watch('&labelSelector=x')
    local answer = sb:fault{ expire_watches = true }
    assert.equals(2, answer.injected.expire_watches)
    for _, w in ipairs({ a, b }) do
      assert.equals(0, w.finished(5), 'the stream ends cleanly after the ERROR')
      local e = w.events()[1]
      assert.equals('ERROR', e.type)
      assert.equals(410, e.object.code)
      assert.equals('Expired', e.object.reason)
      assert.matches('^too old resource version: %d+ %(%d+%)$', e.object.message)
    end
  end)

  it('compacts history now: older versions expire for watch, Exact list and continue', function()
    create(2)
    local old = rv()
    local _, page = sb:json('GET', CM .. '?limit=1')
    create(1)
    sb:fault{ compact = true }
    local status, body = sb:request('GET', CM .. '?watch=1&resourceVersion=' .. old)
    assert.equals(200, status)
    assert.equals(410, cjson.decode(body).object.code)
    status = sb:json('GET', CM .. '?resourceVersionMatch=Exact&resourceVersion=' .. old)
    assert.equals(410, status)
    status = sb:json('GET', CM .. '?limit=1&continue=' .. page.metadata.continue)
    assert.equals(410, status)
    assert.equals(200, (sb:json('GET', CM .. '?resourceVersionMatch=Exact&resourceVersion=' .. rv())))
  end)

  it('answers the next N successful LISTs with the first half of their body, JSON or CBOR', function()
    create(2)
    local _, whole = sb:request('GET', CM)
    local _, whole_cbor = sb:request('GET', CM, nil, { Accept = 'application/cbor' })
    sb:fault{ list_cut = 2 }
    assert.equals(404, (sb:request('GET', CM .. '/missing')), 'a get is not cut, nor counted')
    local status, body = sb:request('GET', CM)
    assert.equals(200, status)
    assert.equals(whole:sub(1, #whole // 2), body)
    local cbor_status, cbor_body, headers = sb:request('GET', CM, nil, { Accept = 'application/cbor' })
    assert.equals(200, cbor_status)
    assert.equals('application/cbor', headers['content-type'])
    assert.equals(whole_cbor:sub(1, #whole_cbor // 2), cbor_body)
    assert.equals(whole, select(2, sb:request('GET', CM)), 'the third LIST is whole')
    assert.equals(2, sb:stats().faults.list_cut)
  end)

  it('answers the next K matching requests with 429 and Retry-After', function()
    sb:fault{ fail = { count = 2, code = 429, retry_after = 3, verbs = { 'list' } } }
    assert.equals(404, (sb:request('GET', CM .. '/missing')), 'a get is not a list')
    for _ = 1, 2 do
      local status, body, headers = sb:request('GET', CM)
      assert.equals(429, status)
      assert.equals('3', headers['retry-after'])
      local s = cjson.decode(body)
      assert.equals('TooManyRequests', s.reason)
      assert.equals(3, s.details.retryAfterSeconds)
    end
    assert.equals(200, (sb:request('GET', CM)))
    assert.equals(2, sb:stats().faults.fail_429)
  end)

  it('answers with 500 or 503 for requests matching a path', function()
    sb:fault{ fail = { count = 1, code = 503, path = 'secrets' } }
    assert.equals(200, (sb:request('GET', CM)))
    local status, body = sb:json('GET', '/api/v1/namespaces/default/secrets')
    sandbox.failed(status, body, 503, 'ServiceUnavailable')
    sb:fault{ fail = { count = 1, code = 500, verbs = { 'watch' } } }
    status, body = sb:json('GET', CM .. '?watch=1')
    sandbox.failed(status, body, 500, 'InternalError')
  end)

  it('delays responses', function()
    sb:fault{ delay = 2 }
    local status = sb:request('GET', CM, nil, nil, { max_time = 0.5 })
    assert.equals(0, status, 'a client that waits less gets no answer')
    sb:reset_faults()
    assert.equals(200, (sb:request('GET', CM, nil, nil, { max_time = 0.5 })))
    assert.is_true(sb:stats().faults.delay >= 1)
  end)

  it('stalls watches after some events until the client hangs up', function()
    sb:fault{ watch_stall_after = 1 }
    -- Counted from none: the watches earlier specs stopped close once the server notices.
    local function none_open() return sb:stats().open_watches == 0 end
    testing.eventually(none_open, 5)
    local w = live_watch()
    create(2)
    assert.truthy(w.wait_for(function(ev) return #ev >= 1 end))
    testing.eventually(function() return (sb:stats().faults.watch_stall or 0) >= 1 end, 5)
    create(1)
    require('system').sleep(0.5)
    assert.equals(1, #w.events(), 'nothing more arrives')
    assert.is_nil(w.finished(0.1), 'and the stream does not end')
    w.stop()
    testing.eventually(none_open, 5,
      { what = 'the server noticing the client left' })
  end)

  it('emits a malformed line into open watches, then keeps streaming', function()
    local w = live_watch()
    sb:fault{ malformed_line = true }
    create(1)
    assert.truthy(w.wait_for(function(ev) return #ev >= 2 end))
    local events = w.events()
    assert.truthy(events[1].raw, 'the first line is not JSON')
    assert.equals('ADDED', events[2].type)
    w.stop()
  end)

  it('emits an event of an unknown type into open watches', function()
    local w = live_watch()
    sb:fault{ unknown_event = 'SURPRISE' }
    assert.truthy(w.wait_for(function(ev) return #ev >= 1 end))
    w.stop()
    assert.equals('SURPRISE', w.events()[1].type)
    assert.equals('ConfigMap', w.events()[1].object.kind)
  end)

  it('emits an oversized object (17 MiB by default) into open watches', function()
    local w = live_watch()
    sb:fault{ oversized_event = true }
    testing.eventually(function() return #w.text() >= 17 * 1024 * 1024 end, 10)
    w.stop()
    local line = w.text():match('^[^\n]*\n')
    assert.truthy(line, 'the whole frame arrived')
    assert.equals(17 * 1024 * 1024, #line)
    assert.equals('ADDED', cjson.decode(line).type)
  end)

  it('restarts: drops every connection, listens again on the same port, keeps all state', function()
    create(1)
    local name = 'obj-' .. count
    local w = live_watch()
    local port = sb.port
    sb:restart()
    assert.equals(18, w.finished(5), 'the open watch was cut')
    assert.equals(port, sb.port)
    assert.equals(1, sb:stats().restarts)
    assert.equals(200, (sb:request('GET', CM .. '/' .. name)))
  end)

  it('can stay down for a while during a restart', function()
    local before = sb:stats().restarts
    sb:fault{ restart = { down_seconds = 1 } }
    testing.eventually(function()
      return sb:request('GET', '/version', nil, nil, { max_time = 1 }) == 0
    end, 5, { what = 'connections refused while down' })
    testing.eventually(function()
      local status, body = sb:json('GET', '/sandbox/v1/stats')
      return status == 200 and body.restarts > before
    end, 10)
  end)

  it('forbids chosen resources with 403', function()
    sb:fault{ forbid = { 'secrets', 'configmaps:delete' } }
    local status, body = sb:json('GET', '/api/v1/namespaces/default/secrets')
    sandbox.failed(status, body, 403, 'Forbidden',
      'secrets is forbidden: User "sandbox-admin" cannot list resource "secrets" in '
      .. 'API group "" in the namespace "default"')
    assert.equals(200, (sb:request('GET', CM)))
    assert.equals(403, (sb:request('DELETE', CM .. '/anything')))
  end)

  it('clears every fault on reset', function()
    sb:fault{ fail = { count = 5, code = 500 }, delay = 0.1 }
    sb:reset_faults()
    assert.equals(200, (sb:request('GET', CM)))
    local _, body = sb:json('GET', '/sandbox/v1/faults')
    assert.same({}, body.faults)
  end)

  it('refuses unknown fault settings with 400, naming the known ones', function()
    local status, body = sb:request('POST', '/sandbox/v1/faults', { explode = true })
    assert.equals(400, status)
    assert.matches('unknown fault keys: explode', body)
    assert.matches('watch_drop_after', body)
  end)

  it('counts requests by verb and by resource', function()
    local before = sb:stats()
    sb:request('GET', CM)
    sb:request('GET', CM .. '/nothing')
    create(1)
    local after = sb:stats()
    assert.equals((before.requests.list or 0) + 1, after.requests.list)
    assert.equals((before.requests.get or 0) + 1, after.requests.get)
    assert.equals(before.resources.configmaps.create + 1, after.resources.configmaps.create)
  end)

  describe('set by flags at start', function()
    local flagged = testing.with_sandbox { args = { '--watch-drop-after', '1', '--forbid', 'leases',
      '--fail-next', '1', '--fail-code', '503', '--fail-verbs', 'create' } }

    it('applies the same faults as the control endpoint', function()
      assert.equals(503, (flagged:request('POST', CM, { metadata = { name = 'a' } })))
      assert.equals(403, (flagged:request('GET', '/apis/coordination.k8s.io/v1/leases')))
      local w = flagged:watch(CM .. '?watch=1&resourceVersion=0')
      flagged:json('POST', CM, { metadata = { name = 'b' } })
      flagged:json('POST', CM, { metadata = { name = 'c' } })
      assert.equals(18, w.finished(5))
      assert.same({ 'ADDED b' }, names(w.events()))
    end)
  end)
end)
