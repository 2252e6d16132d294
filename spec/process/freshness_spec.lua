-- Caches known to be fresh (docs/reliability.md): klua_informer_staleness_seconds
-- gauges the time since each informer last heard from the server (a watch event,
-- a bookmark, a completed LIST), /readyz fails past --readyz-max-staleness, and
-- --verify-cache compares each cache with a consistent LIST, counts the objects
-- that differ in klua_informer_drift_objects_total and relists the informer.
local testing = require('klua.testing')
local K = require('support.klua')
local I = require('support.informer')

local CM = '/api/v1/namespaces/default/configmaps'
local INFORMER = 'resource="configmaps -n default"'

local curl = K.curl

-- The recorder (spec/scripts/recorder.lua) on default's ConfigMaps, with the probe
-- endpoint (which serves /metrics too) and the flags given.
local function recorder(sb, flags)
  local all = { '--health-probe-bind-address', '127.0.0.1:0' }
  for _, f in ipairs(flags) do all[#all + 1] = f end
  local p = I.start(sb, 'configmaps', { namespace = 'default', flags = all })
  p.port = tonumber(p:errors():match('%(port (%d+)%)'))
  assert.truthy(p.port, p:errors())
  function p.url(path) return ('http://127.0.0.1:%d%s'):format(p.port, path) end
  function p.sample(name)
    local _, text = curl(p.url('/metrics'))
    local series = name:find('{', 1, true) and name or (name .. '{' .. INFORMER .. '}')
    local escaped = series:gsub('%p', '%%%0')
    return tonumber((text or ''):match('\n' .. escaped .. ' ([^\n]+)'))
  end
  return p
end

describe('staleness', function()
  -- No bookmarks: a quiet watch brings nothing, as one on a server that sends none.
  local sb = testing.with_sandbox { each = true, bookmark_interval = 0 }

  it('is gauged per informer, and /readyz fails while it passes --readyz-max-staleness, until an event', function()
    I.configmap(sb, 'first')
    local p = recorder(sb, { '--readyz-max-staleness', '2s' })
    local why
    testing.eventually(function()
      local code, body = curl(p.url('/readyz'))
      why = body
      return code == 503
    end, 20 * K.slowdown, { what = '/readyz to fail once the watch was quiet for 2 s' })
    assert.matches('not ready: informer configmaps %-n default has heard nothing from the server for %d+ s '
      .. '%(%-%-readyz%-max%-staleness 2s%)', why)
    assert.truthy(p.sample('klua_informer_staleness_seconds') > 2)
    -- An event is news from the server: the cache is fresh again.
    I.configmap(sb, 'second')
    testing.eventually(function() return curl(p.url('/readyz')) == 200 end, 20 * K.slowdown,
      { what = '/readyz to pass again after an event' })
    assert.truthy(p.sample('klua_informer_staleness_seconds') < 2)
    p:cleanup()
  end)

  it('has no bound without --readyz-max-staleness', function()
    local p = recorder(sb, {})
    testing.eventually(function() return (p.sample('klua_informer_staleness_seconds') or 0) > 2 end,
      20 * K.slowdown, { what = 'the watch to be quiet for 2 s' })
    assert.equals(200, (curl(p.url('/readyz'))))
    p:cleanup()
  end)
end)

describe('staleness with bookmarks', function()
  -- kube-apiserver sends a bookmark about once a minute (cacher.go's
  -- defaultBookmarkFrequency); here every 0.3 s.
  local sb = testing.with_sandbox { each = true, bookmark_interval = 0.3 }

  it('is reset by each bookmark, so a quiet resource stays ready', function()
    local p = recorder(sb, { '--readyz-max-staleness', '2s' })
    local synced_at = os.time()
    -- Quiet for longer than the bound, events-wise: the watch is still current.
    testing.eventually(function() return os.time() - synced_at >= 5 end, 20 * K.slowdown,
      { what = 'the watch to be quiet for longer than the bound' })
    assert.equals(200, (curl(p.url('/readyz'))))
    assert.truthy(p.sample('klua_informer_staleness_seconds') < 2)
    assert.equals(0, p.sample('klua_informer_events_total{resource="configmaps -n default",type="ADDED"}') or 0)
    p:cleanup()
  end)
end)

describe('--verify-cache', function()
  -- Bookmarks every 0.3 s: a quiet watch soon passes a consistent LIST's resourceVersion.
  local sb = testing.with_sandbox { each = true, bookmark_interval = 0.3 }

  it('finds an event the server lost, counts it, relists, and the cache then matches the server', function()
    I.configmap(sb, 'before')
    local p = recorder(sb, { '--verify-cache', '1s', '-v', '2' })
    sb:fault { watch_skip = { count = 1, resource = 'configmaps', name = '^lost$' } }
    local lost_rv = I.configmap(sb, 'lost')
    I.configmap(sb, 'after')
    testing.eventually(function() return sb:stats().faults.watch_skip == 1 end, 10,
      { what = 'the sandbox to leave the event out' })
    testing.eventually(function()
      return p:errors():find('the cache differs from a consistent LIST at resourceVersion %d+ in 1 object '
        .. '%(default/lost: listed, not cached%); relisting')
    end, 30 * K.slowdown, { what = 'the check to find the lost object' })
    -- Through the reflector's own transition, named for the drift.
    assert.truthy(p:errors():find('WATCH -> WATCHLIST: cache drifted, WatchList on', 1, true),
      p:errors())
    I.converged(sb, p, CM)
    -- The relist hands the object to the handlers as the add they missed.
    assert.truthy(table.concat(I.calls(p), '\n'):find('add default/lost ' .. lost_rv .. ' false', 1, true),
      table.concat(I.calls(p), '\n'))
    assert.equals(1, p.sample('klua_informer_drift_objects_total'))
    -- Later checks find nothing more.
    local checks = p.sample('klua_informer_cache_verifications_total')
    testing.eventually(function() return p.sample('klua_informer_cache_verifications_total') >= checks + 2 end,
      30 * K.slowdown, { what = 'two more checks' })
    assert.equals(1, p.sample('klua_informer_drift_objects_total'))
    assert.equals(1, p.sample('klua_informer_relists_total'))
    p:cleanup()
  end)
end)

describe('--verify-cache on a busy resource', function()
  -- The watch cache trails storage by 0.3 s (a loaded kube-apiserver's), so every
  -- consistent LIST is ahead of the watch when it comes back, and objects change,
  -- appear and go during each check.
  local sb = testing.with_sandbox { each = true, bookmark_interval = 0.3, args = { '--watch-lag', '0.3' } }

  -- Creates, updates and deletes 20 ConfigMaps, one write every 20 ms.
  local WRITER = [[
local n = 0
klua.every(0.02, function()
  n = n + 1
  local key = 'default/busy-' .. (n % 20)
  local cm = klua.api.get('configmaps', key)
  if not cm then
    klua.api.create('configmaps', { metadata = { name = 'busy-' .. (n % 20), namespace = 'default' }, data = { n = tostring(n) } })
  elseif n % 3 == 0 then
    klua.api.delete('configmaps', key)
  else
    cm.data = { n = tostring(n) }
    klua.api.update('configmaps', cm)
  end
end)
]]

  it('counts no drift while the objects are written during every check', function()
    local writer = K.spawn { '--kubeconfig', sb.kubeconfig, 'run', K.script(WRITER) }
    testing.eventually(function() return (sb:stats().requests.delete or 0) >= 3 end, 20 * K.slowdown,
      { what = 'the writer to be busy' })
    local p = recorder(sb, { '--verify-cache', '200ms' })
    testing.eventually(function() return (p.sample('klua_informer_cache_verifications_total') or 0) >= 8 end,
      60 * K.slowdown, { what = 'eight checks' })
    assert.equals(0, p.sample('klua_informer_drift_objects_total'))
    assert.equals(0, p.sample('klua_informer_relists_total'))
    assert.is_nil(p:errors():find('differs', 1, true), p:errors())
    assert.truthy(p.sample('klua_informer_events_total{resource="configmaps -n default",type="DELETED"}') > 0)
    writer:stop()
    p:cleanup()
  end)
end)
