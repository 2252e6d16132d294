-- The objects a script holds (informers, queues, timers) are all one kind of thing, as
-- Lua's own files are: a userdata with methods and nothing else, so no name a script
-- picks collides with klua's own state, and a closed one says so from every method
-- (docs/architecture.md, "The Lua layer").
local testing = require('klua.testing')
local K = require('support.klua')

local sb = testing.with_sandbox()

local function run_ok_with(flags, text)
  return K.run_script_ok(text, { kubeconfig = sb.kubeconfig, flags = flags, timeout = 15 * K.slowdown })
end
local function run_ok(text) return run_ok_with({}, text) end

-- Makes one object of each kind, as `objects`; the script stops them after.
local MAKE = [=[
  local inf = klua.informer { resource = 'configmaps', namespace = 'default' }
  local objects = {
    informer = inf,
    queue = klua.queue(),
    timer = klua.after(30, print),
    controller = klua.controller { name = 'objects', watches = { inf }, reconcile = function() end },
    election = klua.leader_election { name = 'objects-spec', namespace = 'default' },
    metric = klua.metrics.counter { name = 'objects_total', help = 'Objects.' },
  }
  local function stop_all()
    objects.timer:cancel()
    objects.controller:shutdown()
    objects.election:stop()
    inf:stop()
  end
]=]
local KINDS = { 'informer', 'queue', 'timer', 'controller', 'election', 'metric' }

describe('what klua hands a script: informers, queues, timers, controllers, elections, metrics', function()
  it('are userdata whose fields hold nothing of klua: nothing to read, iterate or set', function()
    local out = run_ok(MAKE .. [=[
      for _, what in ipairs({ 'informer', 'queue', 'timer', 'controller', 'election', 'metric' }) do
        local o = objects[what]
        print(what, type(o), o._c, o._name, o._indexes, o.id, o.queue, o.leading, o.samples)
        print(what, select(2, pcall(function() for k in pairs(o) do print(k) end end)))
        print(what, select(2, pcall(function() o.mine = 1 end)))
      end
      stop_all()
    ]=])
    local want = {}
    for _, what in ipairs(KINDS) do
      want[#want + 1] = what .. '\tuserdata' .. ('\tnil'):rep(7)
      want[#want + 1] = what .. "\tbad argument #1 to 'for iterator' (table expected, got klua." .. what .. ')'
      want[#want + 1] = what .. "\tattempt to index a klua." .. what .. " value (upvalue 'o')"
    end
    assert.equals(table.concat(want, '\n') .. '\n', K.unplaced(out))
  end)

  it('name themselves and their state in tostring', function()
    local out = run_ok(MAKE .. [=[
      local q = objects.queue
      q:add('default/a')
      q:add('default/b')
      local every = klua.every(0.5, print)
      local leading = klua.every(5, print, { leader_only = true })
      print(objects.informer, q, objects.timer, every, leading)
      print(objects.controller, objects.election, objects.metric)
      every:cancel()
      leading:cancel()
      stop_all()
      print(objects.informer, objects.timer, every, leading)
    ]=])
    assert.equals('informer(configmaps -n default)\tqueue(2 ready)\ttimer(after 30 s)\ttimer(every 0.5 s)'
      .. '\ttimer(every 5 s, held)\n'
      .. 'controller(objects)\telection(default/objects-spec, not leading)\tcounter(objects_total)\n'
      .. 'informer(configmaps -n default, stopped)\ttimer(after 30 s, done)\ttimer(every 0.5 s, done)'
      .. '\ttimer(every 5 s, done)\n', out)
  end)

  it('say how to call a method that was called with a dot', function()
    local out = run_ok(MAKE .. [=[
      for _, call in ipairs({ { 'controller', 'enqueue' }, { 'election', 'is_leader' }, { 'election', 'start' },
        { 'metric', 'inc' } }) do
        print(select(2, pcall(objects[call[1]][call[2]], 'default/x')))
      end
      stop_all()
    ]=])
    assert.equals('call it as controller:enqueue(...), with a colon\n'
      .. 'call it as election:is_leader(...), with a colon\n'
      .. 'call it as election:start(), with a colon\n'
      .. 'call it as metric:inc(...), with a colon\n', (out:gsub('[^\n]-:%d+: ', '')))
  end)
end)

describe('a stopped informer', function()
  it('raises "this informer is stopped" from every method but stop, which does nothing again', function()
    local out = run_ok([=[
      local cms = klua.informer { resource = 'configmaps', namespace = 'default' }
      local name = cms:name()
      cms:stop()
      for _, call in ipairs({
        { 'on', 'add', print }, { 'get', 'default/x' }, { 'list' }, { 'list', { namespace = 'default' } },
        { 'by_index', 'by_node', 'n' }, { 'index_keys', 'by_node', 'n' }, { 'synced' }, { 'stats' },
        { 'name' }, { 'resource' },
      }) do
        print(call[1], select(2, pcall(cms[call[1]], cms, table.unpack(call, 2))))
      end
      print('stop', pcall(cms.stop, cms), name)
    ]=])
    local want = {}
    for _, m in ipairs({ 'on', 'get', 'list', 'list', 'by_index', 'index_keys', 'synced', 'stats', 'name',
      'resource' }) do
      want[#want + 1] = m .. '\tthis informer is stopped (inf:stop() was called)'
    end
    want[#want + 1] = 'stop\ttrue\tconfigmaps -n default'
    assert.equals(table.concat(want, '\n') .. '\n', K.unplaced(out))
  end)
end)

describe('objects that klua closed as it exits', function()
  it('raise "this <object> is closed: klua is shutting down" from every method, to a __gc handler', function()
    local out = run_ok([=[
      local inf = klua.informer { resource = 'configmaps', namespace = 'default' }
      local q = klua.queue()
      local t = klua.every(30, print)
      local calls = {
        { inf, 'on', 'add', print }, { inf, 'get', 'default/x' }, { inf, 'list' }, { inf, 'by_index', 'i', 'v' },
        { inf, 'index_keys', 'i', 'v' }, { inf, 'synced' }, { inf, 'stats' }, { inf, 'name' },
        { inf, 'resource' }, { inf, 'lag' }, { inf, 'stop' },
        { q, 'add', 'k' }, { q, 'add_after', 'k', 1 }, { q, 'add_rate_limited', 'k' }, { q, 'forget', 'k' },
        { q, 'num_requeues', 'k' }, { q, 'get' }, { q, 'done', 'k' }, { q, 'len' },
        { q, 'shutdown' }, { q, 'stats' },
        { t, 'cancel' },
      }
      keep = setmetatable({}, { __gc = function()
        for _, c in ipairs(calls) do
          print(c[2], select(2, pcall(c[1][c[2]], c[1], table.unpack(c, 3))))
        end
        print(inf, q, t)
      end })
      klua.on_synced(function() klua.stop() end)
    ]=])
    local want = {}
    for _, m in ipairs({ 'on', 'get', 'list', 'by_index', 'index_keys', 'synced', 'stats', 'name', 'resource',
      'lag', 'stop' }) do
      want[#want + 1] = m .. '\tthis informer is closed: klua is shutting down'
    end
    for _, m in ipairs({ 'add', 'add_after', 'add_rate_limited', 'forget', 'num_requeues', 'get', 'done',
      'len', 'shutdown', 'stats' }) do
      want[#want + 1] = m .. '\tthis queue is closed: klua is shutting down'
    end
    want[#want + 1] = 'cancel\tthis timer is closed: klua is shutting down'
    want[#want + 1] = 'informer(configmaps -n default, closed)\tqueue(closed)\ttimer(every 30 s, closed)'
    assert.equals(table.concat(want, '\n') .. '\n', K.unplaced(out))
  end)
end)

describe('an argument that must be an informer', function()
  it('is checked for being one, not for looking like one', function()
    local _, err, code = K.run_script([=[
      klua.controller { watches = { { _c = {}, resource = { kind = 'ConfigMap' } } }, reconcile = print }
    ]=], { kubeconfig = sb.kubeconfig })
    assert.equals(1, code, err)
    assert.matches('watches[1] must be an informer made by klua.informer', err, 1, true)
  end)

  it('gives klua.api its resource', function()
    local out = run_ok([=[
      local cms = klua.informer { resource = 'configmaps', namespace = 'default' }
      local got = klua.api.list(cms, { namespace = 'kube-system' })
      print(got.kind, cms:resource().kind, cms:resource().namespaced)
      cms:stop()
    ]=])
    assert.equals('ConfigMapList\tConfigMap\ttrue\n', out)
  end)
end)

describe('a constructor that raises', function()
  -- The Lua state is filled to its --memory-limit first, so that each call fails at its
  -- first allocation of Lua memory, after the checks of its arguments. What it would
  -- leave behind is C memory, which no figure a script can read shows reliably (it lands
  -- in pages already resident): under make test-asan, LeakSanitizer fails the exit status
  -- for a single byte of it.
  it('leaves nothing behind: timers, informers and queues that failed for lack of memory leak nothing', function()
    local out, err = run_ok_with({ '--memory-limit', '16' }, [=[
      local core = require('klua.core')
      local N, fn = 1000, function() end
      local informer_opts, queue_opts = { path = '/api/v1/namespaces/default/configmaps' }, {}
      local calls = { -- each with its arguments made already: the call is the first to allocate
        after = function() return core.after(1, fn) end,
        informer = function() return core.informer(informer_opts) end,
        queue = function() return core.queue(queue_opts) end,
      }
      local kinds, failed = { 'after', 'informer', 'queue' }, { 0, 0, 0 } -- nothing to allocate once full
      -- The fill below stops at the first string and table that do not fit, so what
      -- is left may still hold a constructor's first allocation. A call that succeeds
      -- in it is kept in a slot made beforehand (as garbage, the next emergency
      -- collection would give its memory back), and the calls go on until N failed.
      local kept, spare = {}, 64
      for i = 1, spare do kept[i] = false end
      local hog, size = nil, 1 << 16
      local function grow() hog = { hog, ('x'):rep(size) .. size } end
      while size > 0 do
        if not pcall(grow) then size = size // 2 end
      end
      for i, what in ipairs(kinds) do
        while failed[i] < N and spare > 0 do
          local ok, e = pcall(calls[what])
          if ok then
            kept[spare], spare = e, spare - 1
          elseif e == 'not enough memory' then
            failed[i] = failed[i] + 1
          else
            failed[i] = N + 1 -- another error: the count shows it
          end
        end
      end
      hog, kept = nil, nil
      collectgarbage()
      for i, what in ipairs(kinds) do print(what, failed[i]) end
      core.stop()
    ]=])
    assert.equals('after\t1000\ninformer\t1000\nqueue\t1000\n', out, err)
  end)
end)
