-- The compression of cached objects left unwritten (--cache-compression,
-- --cache-compression-after; docs/architecture.md, "What a cached object
-- costs"): it runs on the loop's idle time, never while a notification waits
-- for the handlers, and no reader ever sees it: inf:get, inf:list (of a
-- namespace too) and the old object of an update read the JSON the LIST or
-- the watch brought, byte for byte. /metrics counts what it compressed.
local testing = require('klua.testing')
local K = require('support.klua')

-- 500 ConfigMaps of ~2.5 KB: more JSON than the 1 MiB below which a store
-- makes no dictionary (KL_STORE_COMPACTION).
local N = 500

-- Records each object's JSON as its add handler saw it, holding the first
-- handler call until the compaction is due and waits for the queue; once the
-- compaction has nothing left to do, reads the cache back against what it
-- recorded, and then does the same for the old object of each update.
local SCRIPT = [[
io.stdout:setvbuf('line')
local n = tonumber(klua.args[1])
local inf = klua.informer { resource = 'configmaps', namespace = 'default' }
local seen, first = {}, true
inf:on('add', function(cm)
  seen['default/' .. cm.metadata.name] = klua.json.encode(cm)
  if first and klua.args[2] ~= 'off' then
    first = false
    while inf:stats().compaction ~= 'waiting' do klua.sleep(0.05) end
    local s = inf:stats()
    print(('while queued: %d pending, %d compressed'):format(s.pending, s.compressed))
  end
end)
inf:on('update', function(old, cm)
  local key = 'default/' .. cm.metadata.name
  print(('update %s: old %s'):format(key, klua.json.encode(old) == seen[key] and 'as seen' or 'DIFFERS'))
  seen[key] = klua.json.encode(cm)
end)
klua.on_synced(function()
  if klua.args[2] == 'off' then
    local s = inf:stats()
    print(('off: compaction %s, %d compressed'):format(s.compaction, s.compressed))
    klua.stop()
    return
  end
  local poll
  poll = klua.every(0.05, function()
    local s = inf:stats()
    if s.compaction ~= 'idle' then return end
    poll:cancel()
    local same, listed = 0, 0
    for key, json in pairs(seen) do
      if klua.json.encode(inf:get(key)) == json then same = same + 1 end
    end
    for _, ns in ipairs({ false, 'default' }) do
      for _, cm in ipairs(ns and inf:list { namespace = ns } or inf:list()) do
        if klua.json.encode(cm) == seen['default/' .. cm.metadata.name] then listed = listed + 1 end
      end
    end
    print(('settled: %d compressed of %d, get %d same, list %d same, %d of JSON in %d'):format(
      s.compressed, s.cached, same, listed, s.compressed_json_bytes, s.compressed_bytes))
  end)
end)
]]

-- Once the whole cache is compressed, adds a late add handler (which first
-- gets every cached object) and takes the next resync (an update, old =
-- new, of every cached object): both queue every object at once, each
-- compressed until its turn (informer.c, queue_cache). Each object must
-- reach them as the JSON the first add handler saw.
local REPLAY_SCRIPT = [[
io.stdout:setvbuf('line')
local n = tonumber(klua.args[1])
local inf = klua.informer { resource = 'configmaps', namespace = 'default', resync = 0.5 }
local seen, settled = {}, false
local replayed, resynced, differs = 0, {}, 0
local nresynced = 0
local function check(key, json)
  if json ~= seen[key] then differs = differs + 1 end
end
local function done()
  if replayed == n and nresynced == n then
    print(('replayed %d, resynced %d, %d differ'):format(replayed, nresynced, differs))
    klua.stop()
  end
end
inf:on('add', function(cm) seen['default/' .. cm.metadata.name] = klua.json.encode(cm) end)
inf:on('update', function(old, cm)
  if not settled then return end
  local key = 'default/' .. cm.metadata.name
  check(key, klua.json.encode(old))
  check(key, klua.json.encode(cm))
  if not resynced[key] then resynced[key], nresynced = true, nresynced + 1 end
  done()
end)
klua.on_synced(function()
  local poll
  poll = klua.every(0.05, function()
    local s = inf:stats()
    if s.compaction ~= 'idle' or s.compressed < n then return end
    poll:cancel()
    settled = true
    inf:on('add', function(cm)
      check('default/' .. cm.metadata.name, klua.json.encode(cm))
      replayed = replayed + 1
      done()
    end)
  end)
end)
]]

-- The start of a script on the ConfigMaps of default: its informer, inf.
local INFORMER = [[
io.stdout:setvbuf('line')
local inf = klua.informer { resource = 'configmaps', namespace = 'default' }
]]

local function burst(sb, creates, updates, mark)
  return K.run_command(('python3 %s/spec/support/burst.py %s default cz %d %d 0 %s 2500')
    :format(os.getenv('KLUA_ROOT'), sb.url, creates, updates, mark or 'yes'))
end

local sample = K.sample

describe('--cache-compression', function()
  local sb = testing.with_sandbox()
  setup(function() assert.equals(tostring(N), burst(sb, N, 0)) end)

  it('compresses the cache once idle, reads it back byte for byte, and counts it in /metrics', function()
    local p = K.spawn({ '--kubeconfig', sb.kubeconfig, '--cache-compression-after=0.2s',
      '--metrics-bind-address', '127.0.0.1:0', 'run', K.script(SCRIPT), tostring(N) })
    assert.truthy(p:wait_for('settled: ', 60 * K.slowdown), p:errors())
    local out = p:output()
    -- The first handler call held every later notification: nothing compressed meanwhile.
    assert.equals(tostring(N - 1), out:match('while queued: (%d+) pending, 0 compressed'), out)
    local compressed, cached, same, listed, json, bytes =
      out:match('settled: (%d+) compressed of (%d+), get (%d+) same, list (%d+) same, (%d+) of JSON in (%d+)')
    assert.same({ N, N, N, 2 * N }, { tonumber(compressed), tonumber(cached), tonumber(same), tonumber(listed) }, out)
    assert.is_true(tonumber(bytes) * 4 < tonumber(json), out)

    local port = tonumber(p:errors():match('%(port (%d+)%)'))
    local code, text = K.curl(('http://127.0.0.1:%d/metrics'):format(port))
    assert.equals(200, code)
    assert.equals(N, sample(text, 'klua_informer_compressed_objects{resource="configmaps -n default"}'), text)
    assert.equals(tonumber(bytes), sample(text, 'klua_informer_compressed_bytes{resource="configmaps -n default"}'))
    assert.equals(tonumber(json), sample(text, 'klua_informer_compressed_json_bytes{resource="configmaps -n default"}'))
    assert.is_true(sample(text, 'klua_informer_compaction_seconds_total{resource="configmaps -n default"}') > 0)

    -- Updates of compressed objects hand their handlers the old object as it was.
    burst(sb, 0, 3, 'again')
    for i = 0, 2 do
      assert.truthy(p:wait_for('update default/cz%-' .. i .. ': old', 20 * K.slowdown), p:errors())
    end
    out = p:output()
    p:cleanup()
    assert.is_nil(out:find('DIFFERS', 1, true), out)
    local _, updates = out:gsub('update default/cz%-%d: old as seen', '')
    assert.equals(3, updates, out)
  end)

  it('hands a late add handler and a resync the compressed objects as their JSON', function()
    local out, err = K.run_script_ok(REPLAY_SCRIPT, { kubeconfig = sb.kubeconfig, timeout = 60 * K.slowdown,
      flags = { '--cache-compression-after=0.2s' }, args = { tostring(N) } })
    assert.equals(('replayed %d, resynced %d, 0 differ\n'):format(N, N), out, err)
  end)

  -- Under steady writes objects come due one after another; a pass for each
  -- would look at the whole cache every few milliseconds, with every event
  -- arriving meanwhile waiting behind it. A pass comes a fifth of
  -- --cache-compression-after after the one before at the soonest.
  it('makes a pass at most every fifth of --cache-compression-after while objects are written steadily', function()
    local out, err = K.run_script_ok(INFORMER .. [[
      klua.on_synced(function()
        local poll
        poll = klua.every(0.05, function()
          if inf:stats().compaction ~= 'idle' then return end
          poll:cancel()
          local keys = {}
          for _, cm in ipairs(inf:list()) do keys[#keys + 1] = 'default/' .. cm.metadata.name end
          local now = require('klua.core').now
          local before, start, written = inf:stats().compaction_passes, now(), 0
          -- 100 writes 20 ms apart, each of an object compressed by then: 100 objects
          -- that come due 20 ms apart, 0.5 s after their write.
          local writer
          writer = klua.every(0.02, function()
            written = written + 1
            assert(klua.api.patch('configmaps', keys[written], { metadata = { labels = { step = tostring(written) } } }))
            if written < 100 then return end
            writer:cancel()
            poll = klua.every(0.05, function()
              local s = inf:stats()
              if s.compaction ~= 'idle' then return end
              poll:cancel()
              local passes, seconds = s.compaction_passes - before, now() - start
              print(passes <= seconds / 0.1 + 2 or ('%d passes in %.2f s'):format(passes, seconds),
                s.compressed == #keys)
              klua.stop()
            end)
          end)
        end)
      end)
    ]], { kubeconfig = sb.kubeconfig, timeout = 120 * K.slowdown, flags = { '--cache-compression-after=0.5s' } })
    assert.equals('true\ttrue\n', out, err)
  end)

  -- Deferred work runs in rounds with no poll of the sockets between them
  -- (loop.c): slices deferred one after another would keep a frame that
  -- arrived meanwhile unread until the pass ended (at 1,000 changes a second,
  -- stalls of 7 to 15 ms; docs/benchmarks.md, "Latency"). A timer of 0 s
  -- runs each time the loop has polled: sampled from one, the compression
  -- moves by at most a slice, 256 KiB of JSON (KL_STORE_COMPACTION).
  it('lets the loop poll its sockets between two slices of a pass', function()
    local out, err = K.run_script_ok(INFORMER .. [[
      klua.on_synced(function()
        local last, max_step, points = 0, 0, 0
        local function sample()
          local s = inf:stats()
          max_step, last = math.max(max_step, s.compressed - last), s.compressed
          if s.compaction == 'idle' and s.compressed == s.cached then
            local bound = 256 * 1024 // (s.compressed_json_bytes // s.compressed) + 1
            print(('largest step %s; %d points of the pass seen'):format(
              max_step <= bound and 'within a slice' or max_step .. ' > ' .. bound, points))
            klua.stop()
            return
          end
          if s.compressed > 0 and s.compressed < s.cached then points = points + 1 end
          klua.after(0, sample)
        end
        sample()
      end)
    ]], { kubeconfig = sb.kubeconfig, timeout = 60 * K.slowdown, flags = { '--cache-compression-after=0.2s' } })
    local points = tonumber(out:match('(%d+) points'))
    assert.equals('within a slice', out:match('largest step ([^;]*)'), out .. err)
    -- 500 ConfigMaps of ~3 KB make six slices: the sampler saw the pass between each two.
    assert.is_true(points >= 4, out)
  end)

  it('=false keeps every cached object as JSON', function()
    local out, err = K.run_script_ok(SCRIPT, { kubeconfig = sb.kubeconfig, timeout = 60 * K.slowdown,
      flags = { '--cache-compression=false', '--cache-compression-after=0.1s' }, args = { tostring(N), 'off' } })
    assert.equals('off: compaction off, 0 compressed\n', out, err)
  end)
end)
