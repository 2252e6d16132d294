-- Every fault the sandbox can inject, met by a running informer: each one
-- is survived, counted, and followed by a cache equal to the server's state,
-- with no event lost and none delivered out of order.
local K = require('support.klua')
local I = require('support.informer')
local testing = require('klua.testing')
local fixtures = require('support.fixtures')

local CM = '/api/v1/namespaces/default/configmaps'
local ROOT = os.getenv('KLUA_ROOT')

local function changes(sb, prefix, n)
  K.run_command(('python3 %s/spec/support/burst.py %s default %s %d %d %d'):format(ROOT, sb.url, prefix, n, n // 2, n // 4))
end

-- The 410s (watch ERROR events) an informer met.
local function stale_cycles(p)
  local n = 0
  for _ in p:errors():gmatch('watch ERROR 410') do n = n + 1 end
  return n
end

-- The LIST and WATCH paths (--watch-list=false, or a server without WatchList) where a
-- spec names them; the WatchList paths have their own describe below.
describe('an informer under faults', function()
  -- A server per spec: it and the recorder p a spec starts are stopped after it.
  local sb = testing.with_sandbox { each = true, bookmark_interval = 0.5, history = 200 }
  local p

  local function settle() return I.settle(sb, p, CM) end

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
    p = I.start(sb, 'configmaps', { flags = { '--watch-list=false', '-v', '2' } })
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
    p = I.start(sb, 'configmaps', { flags = { '--watch-list=false', '-v', '2' } })
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
    p = I.start(sb, 'configmaps', { flags = { '--watch-list=false', '-v', '2' } })
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

  -- A bad watch frame (the fault, made after the changes before, if any): the
  -- informer counts it in its stat counted, says says, relists and loses nothing.
  for _, case in ipairs {
    { name = 'relists after a malformed line, losing nothing', before = 'pre', fault = { malformed_line = true },
      changes = 'post', counted = 'malformed', says = 'not valid JSON' },
    { name = 'relists after an event of an unknown type', fault = { unknown_event = 'SURPRISE' },
      changes = 'odd', counted = 'malformed', says = 'SURPRISE' },
    { name = 'refuses an oversized event without buffering it, then relists',
      fault = { oversized_event = 17 * 1024 * 1024 }, changes = 'big', counted = 'oversize',
      says = 'larger than 16777216 bytes refused' },
  } do
    it(case.name, function()
      p = I.start(sb, 'configmaps')
      if case.before then changes(sb, case.before, 5) end
      sb:fault(case.fault)
      changes(sb, case.changes, 5)
      local s = settle()
      assert.is_true(s[case.counted] >= 1)
      assert.truthy(p:errors():find(case.says, 1, true))
    end)
  end

  -- An outage is told at the default verbosity, once when it starts and once
  -- when it ends, however many retries it took; never a line per retry.
  it('says once that the watch is failing and once that it recovered, with how long and how many retries', function()
    p = I.start(sb, 'configmaps')
    sb:restart(5)
    assert.truthy(p:wait_for('recovered after', 40 * K.slowdown, 'err'), p:errors())
    local log = p:errors()
    assert.equals(1, K.count(log, ' warn  %[[^]]*%] [^\n]*failed: '), log)
    local secs, retries = log:match(' info  %[[^]]*%] watch recovered after ([%d.]+) s and (%d+) retries')
    assert.truthy(secs, log)
    assert.is_true(tonumber(secs) >= 4, log)
    assert.is_true(tonumber(retries) >= 2, log)
    changes(sb, 'after-outage', 5)
    settle()
  end)

  -- A LIST the server refuses for good (here a field kube-apiserver does not
  -- know) is retried, since in klua run it may be fixed from outside (a
  -- permission granted, a CRD created), and each attempt is an error line,
  -- one backoff step after the last.
  it('retries a LIST refused with 400 with backoff, logging each attempt at error level', function()
    local script = K.script [[klua.informer { resource = 'pods', field_selector = 'status.phse=Failed' }]]
    p = K.spawn({ '--kubeconfig', sb.kubeconfig, 'run', script })
    local line = ' error %[[^]]*%] LIST failed: 400 BadRequest: field label not supported: status.phse'
    local function attempts()
      local times = {}
      for h, m, sec in p:errors():gmatch('T(%d+):(%d+):([%d.]+)Z' .. line) do
        times[#times + 1] = tonumber(h) * 3600 + tonumber(m) * 60 + tonumber(sec)
      end
      return times
    end
    assert.truthy(testing.poll(function() return #attempts() >= 4 end, 30 * K.slowdown), p:errors())
    assert.is_nil(p:exit_code())
    local t = attempts()
    for i = 2, #t do
      -- The wait before attempt i is uniform in [d, 2d), d = 0.8 s doubling.
      assert.is_true(t[i] - t[i - 1] >= 0.8 * 2 ^ (i - 2) - 0.01, p:errors())
    end
    assert.falsy(p:errors():find(' warn ', 1, true), p:errors())
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
    p = I.start(sb, 'configmaps', { flags = { '--watch-list=false', '--page-size', '2', '-v', '2' } })
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

  -- The pages read before the token expired are dropped with it: an object
  -- deleted since is not brought back, and the store's relist then deletes it.
  it('deletes an object of a page read before its continue token expired, once it is gone', function()
    for i = 1, 12 do I.configmap(sb, 'page-' .. i) end
    p = I.start(sb, 'configmaps', { flags = { '--watch-list=false', '--page-size', '2', '-v', '2' } })
    local listed_rv = p:output():match('add default/page%-1 (%d+)')
    sb:fault { delay = 0.3 }
    sb:fault { expire_watches = true }
    assert.truthy(p:wait_for('LIST page 1', 10, 'err'))
    -- page-1 and page-10 came on the first page.
    assert.equals(200, (sb:json('DELETE', CM .. '/page-1')))
    sb:fault { compact = true }
    assert.truthy(p:wait_for('continue token expired', 10, 'err'))
    assert.truthy(p:wait_for('delete default/page%-1 ' .. listed_rv .. ' true', 10))
    settle()
  end)
end)

-- A restarted kube-apiserver has a new, empty watch cache while etcd still holds the
-- old revisions until its next compaction: a watch from before the restart gets 410,
-- a LIST at that resourceVersion with a limit is etcd's exact snapshot there (old), and
-- one without a limit is the watch cache's state, not older than it (current).
-- The server sends no periodic BOOKMARK here: one sent after the writes below and
-- before the restart would carry the informer to the new watch cache's start, so that
-- no 410 came and nothing was relisted.
describe('an informer across a restart of kube-apiserver', function()
  local sb = testing.with_sandbox { each = true, bookmark_interval = 0, history = 200 }
  local p

  local function settle() return I.settle(sb, p, CM) end

  -- Writes to other resources move the revision on, so the informer's resourceVersion
  -- is older than where the new watch cache starts, as on a busy cluster.
  local function restart_after_other_writes()
    for i = 1, 3 do
      assert.equals(201, (sb:json('POST', '/api/v1/namespaces/default/secrets', { metadata = { name = 'other-' .. i } })))
    end
    sb:restart()
  end

  it('relists unpaged after a restart, as client-go, and sees what was created since', function()
    changes(sb, 'before', 6)
    p = I.start(sb, 'configmaps', { flags = { '--watch-list=false', '-v', '2' } })
    restart_after_other_writes()
    I.configmap(sb, 'after-restart')
    settle()
    assert.truthy(p:errors():find('LIST from resourceVersion "%d+", unpaged'), p:errors())
    assert.equals(1, stale_cycles(p), p:errors())
  end)

  -- An explicit page size pages every relist (client-go's WatchListPageSize), so the
  -- relist after the restart is etcd's old snapshot, at the very resourceVersion whose
  -- watch got 410: the informer lists the latest state next, and the restart costs one
  -- 410, not a second one from a watch at the old snapshot's resourceVersion.
  it('lists the latest state after a paged relist turns out stale, with one 410', function()
    changes(sb, 'before', 6)
    p = I.start(sb, 'configmaps', { flags = { '--watch-list=false', '--page-size', '2', '-v', '2' } })
    restart_after_other_writes()
    I.configmap(sb, 'after-restart')
    settle()
    assert.truthy(p:errors():find('LIST -> LIST: ok, at the rv whose watch got 410 at once', 1, true), p:errors())
    assert.truthy(p:errors():find('LIST from resourceVersion ""', 1, true), p:errors())
    assert.equals(1, stale_cycles(p), p:errors())
  end)

  -- The same restart, the new server without WatchList: the watch-list is refused (422)
  -- and the LIST it falls back to, at the old resourceVersion with a limit, is the old
  -- snapshot again. Repeating WATCH, watch-list, LIST would never end while etcd keeps
  -- that revision.
  it('lists the latest state after a restart that turned WatchList off (--watch-list --page-size)', function()
    changes(sb, 'before', 6)
    p = I.start(sb, 'configmaps', { flags = { '--watch-list', '--page-size', '2', '-v', '2' } })
    sb:fault { watch_list_disabled = true }
    restart_after_other_writes()
    I.configmap(sb, 'after-restart')
    I.converged(sb, p, CM)
    assert.truthy(p:errors():find('WatchList request refused (422 Invalid', 1, true), p:errors())
    assert.truthy(p:errors():find('LIST -> LIST: ok, at the rv whose watch got 410 at once', 1, true), p:errors())
    assert.equals(1, stale_cycles(p), p:errors())
  end)
end)

-- kube-apiserver, when a CRD is deleted and created again: 404 while it is gone, then 429
-- "storage is (re)initializing" (Retry-After: 1) while the new watch cache fills, then a
-- watch cache whose history starts at its creation.
describe('an informer on a custom resource whose CRD is deleted and created again', function()
  local CRDS = fixtures.CRDS
  local WIDGETS = '/apis/example.com/v1/namespaces/default/widgets'
  local CRD = fixtures.WIDGETS_CRD

  local sb = testing.with_sandbox { each = true, args = { '--watch-cache-fill', '2' } }

  local function serve_widgets()
    assert.equals(201, (sb:json('POST', CRDS, CRD)))
    assert.truthy(testing.poll(function() return sb:request('GET', WIDGETS) == 200 end, 10))
  end

  local function widget(name)
    assert.equals(201, (sb:json('POST', WIDGETS, { apiVersion = 'example.com/v1', kind = 'Widget',
      metadata = { name = name } })))
  end

  it('forgets, as client-go, the objects of a resource that is gone when it lists', function()
    serve_widgets()
    widget('w1')
    local p = I.start(sb, 'widgets', { flags = { '-v', '2' } })
    -- The watch is cut before the deletes reach it: only the LIST's 404 tells.
    sb:fault { watch_drop_after = 0 }
    assert.equals(200, (sb:request('DELETE', CRDS .. '/widgets.example.com')))
    assert.truthy(p:wait_for('LIST failed: 404', 15, 'err'), p:errors())
    assert.truthy(testing.poll(function() return I.cache(p) == '\n' end, 10), I.cache(p))
    assert.same({ 'add default/w1 ' .. I.calls(p)[1]:match('w1 (%d+)') .. ' true',
      'delete default/w1 ' .. I.calls(p)[1]:match('w1 (%d+)') .. ' true' }, I.calls(p))
  end)

  it('keeps retrying while the resource is gone and then caches the new objects', function()
    serve_widgets()
    widget('old-1')
    widget('old-2')
    local p = I.start(sb, 'widgets', { flags = { '--watch-list=false', '-v', '2' } })
    assert.equals(200, (sb:request('DELETE', CRDS .. '/widgets.example.com')))
    assert.truthy(testing.poll(function() return I.cache(p) == '\n' end, 10), I.cache(p))
    assert.truthy(p:wait_for('404', 10, 'err'), p:errors())
    assert.equals(201, (sb:json('POST', CRDS, CRD)))
    widget('new-1')
    assert.truthy(testing.poll(function() return sb:request('GET', WIDGETS) == 200 end, 10))
    widget('new-2')
    local _, server = I.converged(sb, p, WIDGETS)
    assert.equals('default/new-1', server:match('^(%S+)'))
    assert.equals(0, I.stale(p))
    -- As client-go, a watch refused with 404 is followed by a LIST after a backoff; the
    -- LIST that finds the resource again asks for the latest state, not for a
    -- resourceVersion of the resource that was deleted.
    assert.truthy(p:errors():find('waiting [%d.]+ s before LIST: the resource is not served'), p:errors())
    assert.truthy(p:errors():find('LIST from resourceVersion ""', 1, true), p:errors())
  end)
end)

describe('an informer in WatchList mode', function()
  local sb = testing.with_sandbox { each = true, bookmark_interval = 0.5 }

  it('streams the initial state by default and syncs at the initial-events-end bookmark', function()
    for i = 1, 5 do I.configmap(sb, 'wl-' .. i) end
    local p = I.start(sb, 'configmaps', { flags = { '-v', '2' } })
    assert.truthy(p:output():find('synced 5', 1, true))
    assert.truthy(p:errors():find('initial events end', 1, true))
    assert.is_nil(p:errors():find('LIST from', 1, true))
    assert.equals(0, sb:stats().requests.list or 0)
    changes(sb, 'later', 5)
    I.converged(sb, p, CM)
  end)

  -- client-go keeps the resourceVersions of a watch-list's initial events apart from the
  -- reflector's own and, when the watch-list fails, lists from the latter, dropping what
  -- was streamed. An initial event's resourceVersion is that object's last change: a
  -- LIST from it (paged, so etcd's exact snapshot) would be an old state of the cluster.
  it('falls back to a LIST of the latest state, not of the last streamed object\'s resourceVersion', function()
    I.configmap(sb, 'a-oldest')
    for i = 1, 5 do I.configmap(sb, 'b-' .. i) end
    sb:fault { watch_stall_after = 1 }
    -- The stream stalls after one initial event: not for the deadline, which only a
    -- stream without events misses, but for klua's end of the watch (timeoutSeconds and
    -- 5 s), which ends it without the initial-events-end bookmark.
    local p = I.start(sb, 'configmaps', { flags = { '--watch-list', '--watch-list-deadline', '1',
      '--watch-timeout', '1:2', '--page-size', '500', '-v', '2' }, no_wait = true })
    assert.truthy(p:wait_for('synced', 20 * K.slowdown), p:errors())
    assert.truthy(p:errors():find('WATCHLIST -> LIST: clean end without the bookmark', 1, true), p:errors())
    assert.truthy(p:output():find('synced 6', 1, true), p:output() .. p:errors())
    assert.truthy(p:errors():find('LIST from resourceVersion "0"', 1, true), p:errors())
  end)

  it('falls back to LIST when no initial event comes within --watch-list-deadline', function()
    I.configmap(sb, 'fallback')
    sb:fault { watch_stall_after = 0 }
    local p = I.start(sb, 'configmaps', { flags = { '--watch-list-deadline', '1', '-v', '2' }, no_wait = true })
    assert.truthy(p:wait_for('no initial event within 1 s of the watch%-list request; listing instead', 10, 'err'))
    sb:reset_faults()
    assert.truthy(p:wait_for('synced 1', 10))
  end)
end)
