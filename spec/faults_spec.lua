-- Every fault the sandbox can inject, met by a running informer: each one
-- is survived, counted, and followed by a cache equal to the server's state,
-- with no event lost and none delivered out of order.
local sandbox = require 'support.sandbox'
local K = require 'support.klua'
local I = require 'support.informer'
local testing = require 'klua.testing'

local CM = '/api/v1/namespaces/default/configmaps'
local ROOT = os.getenv('KLUA_ROOT')

local function changes(sb, prefix, n)
  K.run_command(('python3 %s/spec/support/burst.py %s default %s %d %d %d'):format(ROOT, sb.url, prefix, n, n // 2, n // 4))
end

describe('an informer under faults', function()
  local sb, p
  before_each(function() sb = sandbox.start { bookmark_interval = 0.5, history = 200 } end)
  after_each(function()
    if p then p:cleanup() end
    p = nil
    sb:stop()
  end)

  local function settle()
    sb:reset_faults()
    local cache, server = I.converge(sb, p, CM)
    assert.equals(server, cache)
    assert.equals(0, I.stale(p))
    return I.stats(p)
  end

  it('re-watches without a loss when connections drop, even in the middle of a frame', function()
    p = I.start(sb, 'configmaps')
    sb:fault { watch_drop_after = 3, watch_drop_mid_frame = true }
    changes(sb, 'drop', 40)
    local s = settle()
    assert.is_true(s.rewatches >= 1, require("pl.pretty").write(s))
    assert.truthy(sb:stats().faults.watch_drop > 0)
  end)

  it('re-watches without a loss when connections drop at random', function()
    p = I.start(sb, 'configmaps')
    sb:fault { watch_drop_probability = 0.2, watch_drop_mid_frame = true, seed = 7 }
    changes(sb, 'random', 60)
    settle()
  end)

  it('relists at once when an ERROR event says the resourceVersion expired', function()
    p = I.start(sb, 'configmaps', { flags = { '-v', '2' } })
    changes(sb, 'before', 10)
    sb:fault { expire_watches = true }
    changes(sb, 'after', 10)
    local s = settle()
    assert.is_true(s.relists >= 1)
    -- The watch had delivered events: its successor LIST does not wait.
    assert.falsy(p:errors():find('before LIST', 1, true), p:errors())
  end)

  it('waits a backoff before relisting when a watch is refused with 410 before delivering anything', function()
    p = I.start(sb, 'configmaps', { flags = { '-v', '2' } })
    sb:fault { fail = { count = 2, code = 410, verbs = { 'watch' } } }
    sb:fault { expire_watches = true }
    testing.eventually(function() return sb:stats().faults.fail_410 == 2 end, 15 * K.slowdown)
    local waited = 'waiting [%d.]+ s before LIST: the resourceVersion expired before the watch delivered anything'
    assert.truthy(p:wait_for(waited .. '.*' .. waited, 15 * K.slowdown, 'err'), p:errors())
    changes(sb, 'expired', 5)
    local s = settle()
    assert.is_true(s.relists >= 2)
  end)

  it('relists from the latest state when the history was compacted past its resourceVersion', function()
    p = I.start(sb, 'configmaps', { flags = { '-v', '2' } })
    sb:fault { watch_drop_after = 0 }
    changes(sb, 'gap', 20)
    sb:fault { compact = true }
    sb:reset_faults()
    local s = settle()
    assert.is_true(s.relists >= 1)
    assert.truthy(p:errors():find('is unavailable', 1, true) or p:errors():find('relisting', 1, true))
  end)

  it('backs off and retries when watches fail with 500 and 503', function()
    p = I.start(sb, 'configmaps', { flags = { '-v', '2' } })
    sb:fault { fail = { count = 2, code = 503, verbs = { 'watch' } } }
    sb:fault { expire_watches = true }
    changes(sb, 'busy', 10)
    assert.truthy(p:wait_for('watch failed: 503.*waiting [%d.]+ s before WATCH.*watch failed: 503', 15, 'err'))
    sb:fault { fail = { count = 1, code = 500, verbs = { 'watch' } } }
    sb:fault { expire_watches = true }
    assert.truthy(p:wait_for('watch failed: 500', 15, 'err'))
    settle()
    assert.equals(2, sb:stats().faults.fail_503)
    assert.equals(1, sb:stats().faults.fail_500)
  end)

  it('waits as long as Retry-After says on 429', function()
    p = I.start(sb, 'configmaps', { flags = { '-v', '2' } })
    sb:fault { fail = { count = 1, code = 429, retry_after = 2, verbs = { 'list' } } }
    sb:fault { expire_watches = true }
    assert.truthy(p:wait_for('waiting 2.0 s before LIST', 10, 'err'))
    changes(sb, 'throttled', 5)
    settle()
  end)

  it('keeps up with a server that delays every response', function()
    p = I.start(sb, 'configmaps')
    sb:fault { delay = 0.3 }
    sb:fault { expire_watches = true }
    changes(sb, 'slow', 5)
    settle()
  end)

  it('restarts a watch that went silent past the idle limit', function()
    p = I.start(sb, 'configmaps', { flags = { '--watch-idle-timeout', '1', '-v', '2' } })
    sb:fault { watch_stall_after = 0 }
    sb:fault { expire_watches = true }
    assert.truthy(p:wait_for('silent for', 10, 'err'))
    changes(sb, 'stalled', 5)
    sb:reset_faults()
    local s = settle()
    assert.is_true(s.idle >= 1)
  end)

  it('relists after a malformed line, losing nothing', function()
    p = I.start(sb, 'configmaps')
    changes(sb, 'pre', 5)
    sb:fault { malformed_line = true }
    changes(sb, 'post', 5)
    local s = settle()
    assert.is_true(s.malformed >= 1)
    assert.truthy(p:errors():find('not valid JSON', 1, true))
  end)

  it('relists after an event of an unknown type', function()
    p = I.start(sb, 'configmaps')
    sb:fault { unknown_event = 'SURPRISE' }
    changes(sb, 'odd', 5)
    local s = settle()
    assert.is_true(s.malformed >= 1)
    assert.truthy(p:errors():find('SURPRISE', 1, true))
  end)

  it('refuses an oversized event without buffering it, then relists', function()
    p = I.start(sb, 'configmaps')
    sb:fault { oversized_event = 17 * 1024 * 1024 }
    changes(sb, 'big', 5)
    local s = settle()
    assert.is_true(s.oversize >= 1)
    assert.truthy(p:errors():find('larger than 16777216 bytes refused', 1, true))
  end)

  it('reconnects after the server restarts', function()
    p = I.start(sb, 'configmaps')
    sb:restart(1)
    changes(sb, 'restarted', 10)
    settle()
  end)

  it('lists again in one piece when its continue token expires between pages', function()
    for i = 1, 12 do I.configmap(sb, 'page-' .. i) end
    -- The first LIST, at resourceVersion 0, is served whole; a relist pages.
    p = I.start(sb, 'configmaps', { flags = { '--page-size', '2', '-v', '2' } })
    sb:fault { delay = 0.3 }
    sb:fault { expire_watches = true }
    assert.truthy(p:wait_for('LIST page 1', 10, 'err'))
    -- History moves past the token's revision, then is compacted away.
    I.configmap(sb, 'newer')
    sb:fault { compact = true }
    assert.truthy(p:wait_for('continue token expired', 10, 'err'))
    assert.truthy(p:wait_for('LIST from resourceVersion "%d+", unpaged', 10, 'err'))
    settle()
  end)
end)

describe('an informer in WatchList mode', function()
  local sb, p
  before_each(function() sb = sandbox.start { bookmark_interval = 0.5 } end)
  after_each(function()
    if p then p:cleanup() end
    p = nil
    sb:stop()
  end)

  it('streams the initial state and syncs at the initial-events-end bookmark', function()
    for i = 1, 5 do I.configmap(sb, 'wl-' .. i) end
    p = I.start(sb, 'configmaps', { flags = { '--watch-list', '-v', '2' } })
    assert.truthy(p:output():find('synced 5', 1, true))
    assert.truthy(p:errors():find('initial events end', 1, true))
    assert.is_nil(p:errors():find('LIST from', 1, true))
    assert.equals(0, sb:stats().requests.list or 0)
    changes(sb, 'later', 5)
    local cache, server = I.converge(sb, p, CM)
    assert.equals(server, cache)
  end)

  it('falls back to LIST when the initial-events-end bookmark does not come in time', function()
    I.configmap(sb, 'fallback')
    sb:fault { watch_stall_after = 0 }
    p = I.start(sb, 'configmaps', { flags = { '--watch-list', '--watch-list-deadline', '1', '-v', '2' }, no_wait = true })
    assert.truthy(p:wait_for('falling back to LIST', 10, 'err'))
    sb:reset_faults()
    assert.truthy(p:wait_for('synced 1', 10))
  end)
end)
