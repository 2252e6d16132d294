-- klua.testing (docs/testing.md) from a user's side: a controller and its
-- spec in a directory outside the klua tree, run with `klua test`. A spec
-- that holds passes, also across an expired watch, a restart of the server
-- and a burst of 500s; one that does not fails with eventually()'s account
-- of what it last saw and the controller's log; and whatever the outcome,
-- the harness stops what it started and removes its directories.
local K = require('support.klua')
local testing = require('klua.testing')

-- The user's controller: labels every ConfigMap demo.klua.dev/seen=true.
local LABELLER = [[
local cms = klua.informer { resource = 'configmaps' }

klua.controller {
  name = 'labeller',
  watches = { cms },
  reconcile = function(key)
    local cm = cms:get(key)
    if not cm or (cm.metadata.labels or {})['demo.klua.dev/seen'] == 'true' then return end
    local _, err = klua.api.patch('configmaps', key,
      { metadata = { labels = { ['demo.klua.dev/seen'] = 'true' } } })
    if err then return nil, err end
    klua.log.info('labelled %s', key)
  end,
}

klua.on_synced(function() klua.log.info('synced %d ConfigMaps', #cms:list()) end)
]]

-- The user's spec. $LEFTOVERS names a file where it notes the pids and
-- directories the harness made, for the outer spec to check afterwards.
local USER_SPEC = [==[
local testing = require('klua.testing')

local function seen(cluster, name)
  local cm = cluster:get('configmap ' .. name)
  return cm ~= nil and (cm.metadata.labels or {})['demo.klua.dev/seen'] == 'true'
end

local function note(line)
  local f = assert(io.open(os.getenv('LEFTOVERS'), 'a'))
  f:write(line, '\n')
  f:close()
end

describe('labeller.lua', function()
  local cluster, controller
  setup(function()
    cluster = testing.sandbox()
    controller = cluster:run('labeller.lua')
    controller:wait_log('synced')
    note('pid ' .. cluster.pid)
    note('pid ' .. controller.pid)
    note('dir ' .. cluster.dir)
    note('dir ' .. controller.dir)
    note('bin ' .. testing.bin)
    note('root ' .. testing.root)
  end)

  it('labels a new ConfigMap', function()
    cluster:kubectl('create configmap settings --from-literal=color=blue')
    testing.eventually(function() return seen(cluster, 'settings') end, 20)
  end)

  it('converges across an expired watch, a restart and a burst of 500s', function()
    cluster:fault { expire_watches = true }
    cluster:kubectl('create configmap after-410')
    testing.eventually(function() return seen(cluster, 'after-410') end, 30)

    cluster:restart()
    cluster:kubectl('create configmap after-restart')
    testing.eventually(function() return seen(cluster, 'after-restart') end, 30)

    -- The controller's next five patches fail; it retries.
    cluster:fault { fail = { count = 5, code = 500, verbs = { 'patch' } } }
    cluster:apply [[
apiVersion: v1
kind: ConfigMap
metadata: {name: after-500s}
]]
    testing.eventually(function() return seen(cluster, 'after-500s') end, 30)
    assert.equals(5, cluster:stats().faults.fail_500)
  end)
]==]

-- A spec that cannot hold: the controller never sets the label to "blue".
local FAILING = [[
  it('expects a label the controller does not set', function()
    cluster:kubectl('create configmap wrong')
    testing.eventually(function()
      local cm = cluster:get('configmap wrong')
      assert.equals('blue', cm and (cm.metadata.labels or {})['demo.klua.dev/seen'])
      return true
    end, 3)
  end)
]]

-- A spec that fails on a plain assert, not in eventually().
local FAILING_ASSERT = [[
  it('asserts the label at once', function()
    cluster:kubectl('create configmap at-once')
    controller:wait_log('labelled default/at%-once', 20)
    assert.equals('blue', cluster:get('configmap at-once').metadata.labels['demo.klua.dev/seen'])
  end)
]]

-- Runs after the block above has ended: what it started is gone.
local CLEANED_UP = [[
end)

describe('after labeller.lua', function()
  it('finds what the harness started stopped and removed', function()
    for line in io.lines(os.getenv('LEFTOVERS')) do
      local kind, what = line:match('^(%a+) (.*)$')
      if kind == 'pid' then
        -- Gone, or exited and waiting to be reaped by its new parent.
        local f = io.open('/proc/' .. what .. '/stat')
        local stat = f and f:read('a') or ''
        if f then f:close() end
        assert.is_falsy(stat:match('^%d+ %b() [^ZX]'), 'process ' .. what .. ' runs')
      elseif kind == 'dir' then
        assert.is_nil(io.open(what .. '/.'), 'directory ' .. what)
      end
    end
  end)
end)
]]

-- Makes the user's project: labeller.lua and spec/labeller_spec.lua.
local function project(spec_body)
  local dir = testing.tmpdir()
  K.write_file(dir .. '/labeller.lua', LABELLER)
  os.execute('mkdir ' .. K.quote(dir .. '/spec'))
  K.write_file(dir .. '/spec/labeller_spec.lua', spec_body)
  return dir
end

-- Runs `klua test ARGS` in dir as a user would, without the variables klua's
-- own spec run sets: the harness finds the sandbox and klua from where it is.
-- Returns the output and the exit status.
local function klua_test(dir, args)
  local out = K.run_command(('cd %s && env -u KLUA_ROOT -u KLUA_BIN -u LUA_PATH -u LUA_CPATH LEFTOVERS=%s '
    .. 'timeout 180 %s test %s 2>&1; echo "status $?"'):format(K.quote(dir), K.quote(dir .. '/leftovers'),
      K.quote(K.bin), args or ''))
  local status = tonumber(out:match('status (%d+)$'))
  return out, status
end

local function leftovers(dir)
  local notes = {}
  for line in io.lines(dir .. '/leftovers') do
    local kind, what = line:match('^(%a+) (.*)$')
    notes[kind] = what
  end
  return notes
end

describe('klua test', function()
  -- Runs klua test in dir with args: it must pass, busted's count line reading counted.
  local function passes(dir, args, counted)
    local out, status = klua_test(dir, args)
    assert.equals(0, status, out)
    assert.matches(counted, out)
  end

  it('runs a user\'s passing specs against a sandbox with the harness, faults included', function()
    local dir = project(USER_SPEC .. CLEANED_UP)
    passes(dir, nil, '3 successes / 0 failures / 0 errors')
    -- Found from the binary's place in the tree, not from the environment.
    local notes = leftovers(dir)
    local tree = K.run_command('cd ' .. K.quote(testing.root) .. ' && pwd -P')
    assert.equals(K.run_command('realpath ' .. K.quote(K.bin)), notes.bin)
    assert.equals(tree, K.run_command('cd ' .. K.quote(notes.root) .. ' && pwd -P'))
  end)

  -- Runs the user's specs with one failing spec added; asserts that that one
  -- alone failed and returns what klua test printed.
  local function one_fails(failing)
    local out, status = klua_test(project(USER_SPEC .. failing .. CLEANED_UP))
    assert.equals(1, status, out)
    assert.matches('3 successes / 1 failure / 0 errors', out)
    return out
  end

  it('fails a user\'s failing spec with what eventually last saw and the controller\'s log, and still cleans up', function()
    local out = one_fails(FAILING)
    assert.matches('eventually: the condition did not hold within 3 s %(%d+ tries%); last raised: '
      .. '[^\n]*labeller_spec.lua:%d+: Expected objects to be equal.', out)
    assert.matches("Expected:\n%(string%) 'blue'", out)
    assert.matches('%-%-%- log of klua run labeller.lua %(running%):\n', out)
    assert.matches('%[labeller.lua%] labelled default/wrong', out)
  end)

  it('shows the controller\'s log on stderr when a spec fails otherwise than in eventually', function()
    local out = one_fails(FAILING_ASSERT)
    assert.matches('klua.testing: "asserts the label at once" did not pass; the klua processes it ran:\n'
      .. '%-%-%- log of klua run labeller.lua %(running%):\n', out)
    assert.matches('%[labeller.lua%] labelled default/at%-once', out)
    -- A failure in eventually() shows the log in its message, not twice.
    out = klua_test(project(USER_SPEC .. FAILING .. CLEANED_UP))
    assert.is_nil(out:find('klua.testing: "', 1, true), out)
  end)

  it('passes every argument after test to busted, flags included', function()
    passes(project(USER_SPEC .. FAILING .. CLEANED_UP), "--filter='labels a new ConfigMap' spec/labeller_spec.lua",
      '1 success / 0 failures / 0 errors')
  end)
end)

describe('testing.eventually', function()
  it('returns what fn returned once it is truthy', function()
    local n = 0
    local a, b = testing.eventually(function()
      n = n + 1
      return n >= 3 and n, 'third'
    end, 5)
    assert.same({ 3, 'third' }, { a, b })
  end)

  it('fails with what fn last returned, naming the condition', function()
    local ok, err = pcall(testing.eventually, function() return false, { phase = 'Pending' } end, 0.2,
      { what = 'the pod running' })
    assert.is_false(ok)
    assert.matches('^[^\n]*eventually: the pod running did not hold within 0.2 s %(%d+ tries%); '
      .. 'last returned: false, { phase = "Pending" }', tostring(err))
  end)

  it('returns nil and the account with fail = false', function()
    local v, account = testing.eventually(function() error('not yet') end, 0.1, { fail = false })
    assert.is_nil(v)
    assert.matches('last raised: [^\n]*not yet', account)
  end)
end)

describe('testing.with_sandbox', function()
  -- Whether a process runs, as the harness tells it for its servers.
  local function running(pid) return testing.Sandbox.alive({ pid = pid }) end
  -- A script that runs until it is stopped.
  local WATCHER = 'klua.informer("configmaps")\n'

  describe('with each = true', function()
    local cluster = testing.with_sandbox { each = true }
    local first = {}

    it('gives a spec a server of its own', function()
      first.server = cluster.pid
      first.controller = cluster:run(K.script(WATCHER)).pid
      cluster:kubectl('create configmap made-by-the-first-spec')
      assert.is_true(running(first.server))
      assert.is_true(running(first.controller))
    end)

    it('gives the next one a fresh, empty server, the last one stopped with what its spec started', function()
      assert.are_not.equal(first.server, cluster.pid)
      assert.is_nil(cluster:get('configmap made-by-the-first-spec'))
      assert.is_false(running(first.server))
      assert.is_false(running(first.controller))
    end)
  end)

  local shared
  describe('without each', function()
    local cluster = testing.with_sandbox()

    it('starts one server for the block', function()
      shared = cluster.pid
      cluster:kubectl('create configmap made-by-the-first-spec')
      assert.is_true(running(shared))
    end)

    it('which every spec of the block shares', function()
      assert.equals(shared, cluster.pid)
      assert.truthy(cluster:get('configmap made-by-the-first-spec'))
    end)
  end)

  it('stops the block\'s server when the block ends', function()
    assert.truthy(shared)
    assert.is_false(running(shared))
  end)
end)

-- cluster:replay: a recording of `klua record` (docs/record.md) served to the
-- controller under test, which sees the initial state listed and then each
-- recorded change, in the file's order.
describe('Sandbox:replay', function()
  local cluster = testing.with_sandbox { each = true }
  local INCIDENT = 'spec/fixtures/recordings/incident.ndjson'
  -- The user's controller: says what it sees of ConfigMaps.
  local NARRATOR = [[
local cms = klua.informer { resource = 'configmaps', namespace = 'default' }
cms:on('add', function(cm, initial) klua.log.info('add %s%s', cm.metadata.name, initial and ' (listed)' or '') end)
cms:on('update', function(_, cm) klua.log.info('update %s replicas=%s', cm.metadata.name, cm.data.replicas) end)
cms:on('delete', function(cm) klua.log.info('delete %s', cm.metadata.name) end)
klua.on_synced(function() klua.log.info('synced') end)
]]

  it('holds the recorded state, then replays its changes once the controller watches', function()
    local progress = cluster:replay(INCIDENT, { speed = 4 })
    assert.same({ 'waiting', 2, 3, 0 }, { progress.state, progress.initial, progress.events, progress.applied })
    assert.equals('2', cluster:get('configmap web-settings').data.replicas)
    local controller = cluster:run(K.script(NARRATOR))
    testing.eventually(function() return cluster:replay_progress().state == 'done' end, 30,
      { what = 'the replay to end' })
    local seen = testing.eventually(function()
      local log = controller:log()
      return log:find('add cache-settings', 1, true) and log
    end, 20, { what = 'the controller to see the last recorded change' })
    local order = {}
    for what in seen:gmatch('info  %[[^%]]+%] ([^\n]+)') do
      if what ~= 'synced' then order[#order + 1] = what end
    end
    assert.same({ 'add db-settings (listed)', 'add web-settings (listed)', 'update web-settings replicas=20',
      'delete db-settings', 'add cache-settings' }, order)
    assert.is_nil(cluster:get('configmap db-settings'))
  end)

  it('starts at once when a recorded resource is watched already', function()
    local controller = cluster:run(K.script(NARRATOR))
    controller:wait_log('synced', 20)
    cluster:replay(INCIDENT, { speed = 4 })
    testing.eventually(function() return cluster:replay_progress().state == 'done' end, 30,
      { what = 'the replay to end without another watch' })
    controller:wait_log('add cache%-settings', 20)
  end)

  it('starts at once with start = "now", and refuses a second recording', function()
    cluster:replay(INCIDENT, { speed = 10, start = 'now' })
    testing.eventually(function() return cluster:replay_progress().state == 'done' end, 30,
      { what = 'the replay to end' })
    assert.equals('20', cluster:get('configmap web-settings').data.replicas)
    assert.has_error(function() cluster:replay(INCIDENT) end)
  end)
end)
