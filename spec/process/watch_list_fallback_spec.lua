-- An informer in WatchList mode (sendInitialEvents=true instead of a LIST; the default)
-- falls back to a LIST when the server refuses the watch-list, as client-go's
-- ListAndWatch does; the reflector's table of transitions (spec/unit/reflector_spec.lua)
-- names the step. By default klua stops asking a server that answers 400 or 422;
-- --watch-list=true asks again at every relist, as client-go.
local testing = require('klua.testing')
local I = require('support.informer')
local K = require('support.klua')

local CM = '/api/v1/namespaces/default/configmaps'

-- Fails unless p has logged text.
local function logged(p, text) assert.truthy(p:errors():find(text, 1, true), p:errors()) end

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
    logged(p, 'WatchList request refused (422 Invalid')
    logged(p, 'LIST from resourceVersion "0"')
    -- -v 2 narrates each transition as the table names it.
    logged(p, 'WATCHLIST -> LIST: HTTP error (not 410, 429), ERROR')
    logged(p, 'LIST -> WATCH: ok (the last page)')
    assert.equals(1, sb:stats().requests.list)
    I.configmap(sb, 'wl-off-3')
    I.converged(sb, p, CM)
  end)
end)

-- kube-apiserver 1.33 has WatchList off by default (1.32 and 1.34 on): the 422 it answers
-- says that it does not serve it, and by default a relist is a LIST from then on.
describe('an informer by default against a server without WatchList', function()
  local sb = testing.with_sandbox { each = true }

  it('lists instead, says so once, and lists at the next relist without asking again', function()
    I.configmap(sb, 'auto-1')
    sb:fault { watch_list_disabled = true }
    local p = I.start(sb, 'configmaps', { flags = { '-v', '2' } })
    assert.truthy(p:output():find('synced 1', 1, true), p:output())
    logged(p, 'WATCHLIST -> LIST: 400 / 422, by default')
    logged(p, 'the server does not serve WatchList (422 Invalid: ')
    logged(p, 'listing from now on (--watch-list=true tries it at every relist)')
    local function count(text) return K.count(p:errors(), K.literally(text)) end
    sb:fault { expire_watches = true }
    I.configmap(sb, 'auto-2')
    assert.truthy(testing.poll(function() return count('LIST from resourceVersion') >= 2 end, 15), p:errors())
    I.converged(sb, p, CM)
    assert.equals(1, count('WATCH with initial events'), p:errors())
  end)
end)

describe('an informer in WatchList mode whose initial state does not come in time', function()
  local sb = testing.with_sandbox { each = true }

  it('says the deadline as it was given, a fraction of a second included', function()
    I.configmap(sb, 'wl-slow')
    -- The first initial event never comes: the stream stays silent.
    sb:fault { watch_stall_after = 0 }
    local p = I.start(sb, 'configmaps', { flags = { '--watch-list', '--watch-list-deadline', '0.1' }, no_wait = true })
    assert.truthy(p:wait_for('no initial event within 0%.1 s of the watch%-list request; listing instead', 20, 'err'),
      p:errors())
  end)
end)
