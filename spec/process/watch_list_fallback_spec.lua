-- An informer in WatchList mode (--watch-list: sendInitialEvents=true instead of a LIST)
-- falls back to a LIST when the server refuses the watch-list, as client-go's
-- ListAndWatch does; the reflector's table of transitions (spec/unit/reflector_spec.lua)
-- names the step.
local testing = require 'klua.testing'
local I = require 'support.informer'

-- The same fallback against the sandbox, refusing sendInitialEvents as
-- kube-apiserver does with its WatchList feature gate off.
describe('an informer in WatchList mode against a server without WatchList', function()
  local sb = testing.with_sandbox { each = true }
  local p

  it('lists instead and syncs, then watches from the list', function()
    I.configmap(sb, 'wl-off-1')
    I.configmap(sb, 'wl-off-2')
    sb:fault { watch_list_disabled = true }
    p = I.start(sb, 'configmaps', { flags = { '--watch-list', '-v', '2' } })
    assert.truthy(p:output():find('synced 2', 1, true), p:output())
    assert.truthy(p:errors():find('WatchList request refused (422 Invalid', 1, true), p:errors())
    assert.truthy(p:errors():find('LIST from resourceVersion "0"', 1, true), p:errors())
    -- -v 2 narrates each transition as the table names it.
    assert.truthy(p:errors():find('WATCHLIST -> LIST: HTTP error (not 410, 429), ERROR', 1, true), p:errors())
    assert.truthy(p:errors():find('LIST -> WATCH: ok (the last page)', 1, true), p:errors())
    assert.equals(1, sb:stats().requests.list)
    I.configmap(sb, 'wl-off-3')
    local cache, server = I.converge(sb, p, '/api/v1/namespaces/default/configmaps')
    assert.equals(server, cache)
  end)
end)

describe('an informer in WatchList mode whose initial state does not come in time', function()
  local sb = testing.with_sandbox { each = true }

  it('says the deadline as it was given, a fraction of a second included', function()
    I.configmap(sb, 'wl-slow')
    -- The first initial event never comes: the stream stays silent.
    sb:fault { watch_stall_after = 0 }
    local p = I.start(sb, 'configmaps', { flags = { '--watch-list', '--watch-list-deadline', '0.1' }, no_wait = true })
    assert.truthy(p:wait_for('no initial%-events%-end bookmark within 0%.1 s; falling back to LIST for good', 20, 'err'),
      p:errors())
  end)
end)
