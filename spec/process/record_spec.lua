-- `klua record` writes what klua's informers see (docs/record.md): a header,
-- the initial list, then every change with its arrival time, a relist's as
-- the informer delivers them; Secrets' values redacted unless asked.
-- `klua replay` serves the recording again from the sandbox, so that
-- `klua watch` prints on the replay what it printed on the recorded run, and
-- the same file gives the same events, resourceVersions included.
local cjson = require('cjson')
local K = require('support.klua')
local testing = require('klua.testing')

-- The lines of an NDJSON file, decoded.
local function entries(path)
  local out = {}
  for line in (K.read_file(path) or ''):gmatch('[^\n]+') do out[#out + 1] = cjson.decode(line) end
  return out
end

-- "TYPE name" of each entry after the header, and of the initial ones "LISTED name".
local function story(recording)
  local out = {}
  for i = 2, #recording do
    local e = recording[i]
    out[#out + 1] = (e.initial and 'LISTED' or e.type) .. ' ' .. e.object.metadata.name
      .. (e.finalStateUnknown and ' (relist)' or '')
  end
  return out
end

local function has(p, text)
  return p:output():find(text, 1, true) ~= nil
end

describe('klua record and klua replay', function()
  local watcher = K.watcher()
  local dir, recording, files = nil, nil, 0
  local function sb_dir_file(name)
    files = files + 1
    return ('%s/%d.%s'):format(dir, files, name)
  end
  -- What klua watch printed on the recorded run, by format.
  local recorded = {}
  local FORMATS = {
    name = { '--output-watch-events', '-o', 'name' },
    line = { '-o', 'line' },
    rv = { '-e', 'return event .. " " .. obj.metadata.name .. " " .. obj.metadata.resourceVersion' },
  }

  local function watch_all(kubeconfig, ns)
    local procs = {}
    for format, flags in pairs(FORMATS) do
      local args = { 'configmaps', '-n', ns }
      for _, f in ipairs(flags) do args[#args + 1] = f end
      procs[format] = watcher.watch(args, kubeconfig)
    end
    return procs
  end

  -- The recorded run: creates, an update and a delete while klua record and
  -- klua watch watch, then an expired watch whose relist fails until more
  -- changes are made, which only the relist brings.
  setup(function()
    dir = K.tmpdir()
    recording = dir .. '/incident.ndjson'
    local sb = testing.sandbox()
    local ns = 'incident'
    sb:kubectl('create namespace ' .. ns)
    sb:kubectl('create configmap alpha -n ' .. ns .. ' --from-literal=v=1')
    sb:kubectl('create configmap beta -n ' .. ns .. ' --from-literal=v=1')
    local rec = K.spawn({ '--kubeconfig', sb.kubeconfig, 'record', 'configmaps', '-n', ns, '--output', recording })
    rec:wait_for('2 objects listed', 20, 'err')
    local procs = watch_all(sb.kubeconfig, ns)
    for _, p in pairs(procs) do
      testing.eventually(function() return has(p, 'beta') end, 20, { what = 'klua watch to list beta' })
    end
    sb:kubectl('create configmap gamma -n ' .. ns)
    sb:kubectl('label configmap alpha -n ' .. ns .. ' tier=web')
    sb:kubectl('delete configmap beta -n ' .. ns)
    -- Every client has these changes before its watch expires: the sandbox
    -- sends the 410 ahead of the events a watch has not taken yet.
    local function count(text, what) return select(2, text:gsub(K.literally(what), '')) end
    testing.eventually(function()
      return has(procs.line, 'DELETED   incident/beta') and has(procs.rv, 'DELETED beta')
        and count(procs.name:output(), 'configmap/beta') == 2
        and count(K.read_file(recording) or '', '"name":"beta"') == 2
    end, 20, { what = 'klua record and klua watch to see beta deleted' })
    -- Every LIST and watch fails from now on (a relist is a LIST, or a watch-list by
    -- default), so that the expired watches' relists find the changes below only once
    -- the fault is lifted.
    sb:fault({ fail = { count = 100000, code = 500, verbs = { 'list', 'watch' } } })
    sb:fault({ expire_watches = true })
    sb:kubectl('create configmap delta -n ' .. ns)
    sb:kubectl('label configmap gamma -n ' .. ns .. ' tier=cache')
    sb:kubectl('delete configmap alpha -n ' .. ns)
    sb:reset_faults()
    testing.eventually(function() return (K.read_file(recording) or ''):find('"finalStateUnknown":true', 1, true) end,
      30, { what = 'the recording to hold the relist' })
    for _, p in pairs(procs) do
      testing.eventually(function() return has(p, 'delta') end, 30, { what = 'klua watch to relist' })
    end
    sb:kubectl('create configmap epsilon -n ' .. ns)
    testing.eventually(function() return (K.read_file(recording) or ''):find('epsilon', 1, true) end, 20,
      { what = 'the recording to hold epsilon' })
    for format, p in pairs(procs) do
      testing.eventually(function() return has(p, 'epsilon') end, 20, { what = 'klua watch to see epsilon' })
      recorded[format] = p:output()
    end
    rec:stop()
    watcher.cleanup()
    sb:stop()
  end)

  it('writes the header, the initial list, each change and the relist\'s changes, with their times', function()
    local r = entries(recording)
    assert.same({ 'KluaRecording', 1, 'redacted' }, { r[1].kind, r[1].version, r[1].secretData })
    assert.same({ group = '', version = 'v1', resource = 'configmaps', kind = 'ConfigMap', namespace = 'incident',
      labelSelector = cjson.null }, r[1].resources[1])
    assert.same({ 'LISTED alpha', 'LISTED beta', 'ADDED gamma', 'MODIFIED alpha', 'DELETED beta',
      -- what the relist delivers: the adds and updates in the list's order, then the delete it missed
      'ADDED delta', 'MODIFIED gamma', 'DELETED alpha (relist)', 'ADDED epsilon' }, story(r))
    for i = 3, #r do assert.is_true(r[i].t >= r[i - 1].t, 'times in order') end
    assert.equals('1', r[2].object.data.v)
  end)

  -- What klua watch, with the flags of format, prints on a replay of the
  -- recording once it has printed epsilon, the last change. One client per
  -- replay: the first watch starts the replay's clock, and a client that
  -- lists later lists a later state.
  local function replayed(format, speed)
    local kubeconfig = sb_dir_file('replay.kubeconfig')
    local server = K.spawn({ 'replay', recording, '--speed', tostring(speed), '--kubeconfig-out', kubeconfig })
    server:wait_for('listening on', 20)
    local args = { 'configmaps', '-n', 'incident' }
    for _, f in ipairs(FORMATS[format]) do args[#args + 1] = f end
    local p = watcher.watch(args, kubeconfig)
    testing.eventually(function() return has(p, 'epsilon') end, 30, { what = 'the replay to reach epsilon' })
    local out = p:output()
    watcher.cleanup()
    server:stop()
    return out
  end

  it('replays it so that klua watch --output-watch-events -o name prints what it printed on the recorded run', function()
    assert.equals(recorded.name, replayed('name', 4))
  end)

  it('replays the event types as they were recorded (klua watch -o line)', function()
    assert.equals(recorded.line, replayed('line', 4))
  end)

  it('replays the same events with the same resourceVersions every time', function()
    local first, second = replayed('rv', 8), replayed('rv', 8)
    assert.equals(first, second)
    assert.truthy(first:find('DELETED alpha %d+\n'))
  end)
end)

describe('klua record of Secrets', function()
  local sb = testing.with_sandbox()

  local function record(extra)
    local file = sb:tmpfile('secrets.ndjson')
    local args = { '--kubeconfig', sb.kubeconfig, 'record', 'secrets', '--output', file }
    for _, a in ipairs(extra or {}) do args[#args + 1] = a end
    local rec = K.spawn(args)
    rec:wait_for('objects listed', 20, 'err')
    rec:stop()
    return entries(file)[2].object
  end

  setup(function()
    sb:kubectl('apply -f -', [[
apiVersion: v1
kind: Secret
metadata: {name: db, namespace: default}
stringData: {password: hunter2}
]])
  end)

  it('redacts the values of data and the manifest kubectl apply keeps, and keeps the keys', function()
    local secret = record()
    assert.same({ password = 'PHJlZGFjdGVkPg==' }, secret.data)
    assert.equals('<redacted>', secret.metadata.annotations['kubectl.kubernetes.io/last-applied-configuration'])
  end)

  it('keeps them with --include-secret-data', function()
    local secret = record({ '--include-secret-data' })
    assert.same({ password = 'aHVudGVyMg==' }, secret.data)
    assert.truthy(secret.metadata.annotations['kubectl.kubernetes.io/last-applied-configuration']:find('hunter2'))
  end)
end)

describe('klua record and klua replay refuse', function()
  it('a record without --output or with a flag it does not know, with a usage error', function()
    local _, err, code = K.run({ '--server', 'http://127.0.0.1:1', 'record', 'configmaps' })
    assert.equals(2, code)
    assert.truthy(err:find('--output FILE is needed', 1, true))
    _, err, code = K.run({ '--server', 'http://127.0.0.1:1', 'record', 'configmaps', '-o', 'x', '--bogus' })
    assert.equals(2, code)
    assert.truthy(err:find('unknown flag: --bogus', 1, true))
    _, err, code = K.run({ '--server', 'http://127.0.0.1:1', 'record', 'configmaps', '-o', 'x', '-n', 'a', '-A' })
    assert.equals(2, code)
    assert.truthy(err:find('-n and -A cannot be combined', 1, true))
  end)

  it('a replay of a file that is not a recording, naming the line', function()
    local file = K.tmpdir() .. '/not.ndjson'
    K.write_file(file, '{"kind":"ConfigMap"}\n')
    local _, err, code = K.run({ 'replay', file, '--kubeconfig-out', file .. '.kc' })
    assert.equals(2, code)
    assert.truthy(err:find('not.ndjson:1: the first line is not a {"kind":"KluaRecording"} header', 1, true))
  end)

  it('a replay without --kubeconfig-out, or with a speed of 0', function()
    local _, err, code = K.run({ 'replay', 'x.ndjson' })
    assert.equals(2, code)
    assert.truthy(err:find('--kubeconfig-out KC is needed', 1, true))
    _, err, code = K.run({ 'replay', 'x.ndjson', '--kubeconfig-out', 'kc', '--speed', '0' })
    assert.equals(2, code)
    assert.truthy(err:find('--speed 0: a factor above 0', 1, true))
  end)
end)
