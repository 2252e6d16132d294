-- Never two holders of one Lease acting at once, through a pause of the whole
-- process (SIGSTOP for longer than the lease duration, as a frozen VM or a stalled
-- node): a replica acts as leader, or as a shard's holder, only while its own
-- monotonic clock says its Lease is valid (the renew deadline after its last
-- successful renewal was sent). After the pause it must send no write before
-- it knows the Lease lapsed, although its tasks, timers and the answers of its
-- requests all wake at once.
--
-- What the replicas wrote is judged from the server's objects, not from their
-- logs: every write creates a ConfigMap, and the sandbox's resourceVersions,
-- one counter for every change as etcd's revision, give the order in which the
-- server took them.
local testing = require('klua.testing')
local K = require('support.klua')

local ROUNDS = 10
local LEASE = { '--leader-elect-lease-duration', '2s', '--leader-elect-renew-deadline', '1.5s',
  '--leader-elect-retry-period', '300ms' }

-- The replicas' writes in ns, in the server's order: {writer=, rv=, data=}.
-- The spec that what holds in each of ROUNDS rounds, round(n) running the n-th.
local function in_every_round(what, round)
  it(what .. ', in ' .. ROUNDS .. ' rounds out of ' .. ROUNDS, function()
    for n = 1, ROUNDS do round(n) end
  end)
end

local function writes(sb, ns)
  local list = sb:kubectl_json('-n ' .. ns .. ' get configmaps -l role=record')
  local out = {}
  for _, cm in ipairs(list.items) do
    out[#out + 1] = { writer = cm.metadata.labels.writer, rv = tonumber(cm.metadata.resourceVersion), data = cm.data }
  end
  table.sort(out, function(a, b) return a.rv < b.rv end)
  return out
end

local function count(list, pred)
  local n = 0
  for _, w in ipairs(list) do if pred(w) then n = n + 1 end end
  return n
end

-- The server's resourceVersion now: that of a ConfigMap made for it.
local function mark(sb, ns, name)
  sb:kubectl('-n ' .. ns .. ' create configmap ' .. name)
  return tonumber(sb:get('-n ' .. ns .. ' configmap ' .. name).metadata.resourceVersion)
end

local function flags(sb, ns, more)
  local args = { '--kubeconfig', sb.kubeconfig, '--leader-elect', '--leader-election-id', 'paused',
    '--leader-election-namespace', ns }
  for _, a in ipairs(LEASE) do args[#args + 1] = a end
  for _, a in ipairs(more or {}) do args[#args + 1] = a end
  return args
end

-- Starts a replica of script in ns, as id (its arguments: id, ns); more: flags
-- besides the Lease's.
local function replica(sb, procs, script, ns, id, more)
  local args = flags(sb, ns, more)
  for _, a in ipairs({ 'run', script, id, ns }) do args[#args + 1] = a end
  local p = K.spawn(args, { name = 'replica ' .. id })
  p.id = id
  procs[#procs + 1] = p
  return p
end

-- Ends every replica, woken first: a stopped one would wait for SIGKILL.
local function stop_all(procs)
  for _, p in ipairs(procs) do
    p:signal('CONT')
    p:cleanup()
  end
  for i = #procs, 1, -1 do procs[i] = nil end
end

-- The leader writes as fast as its answers come back, with no check of its own:
-- what stops it after the pause is klua.
local LEADER = [[
local id, ns = klua.args[1], klua.args[2]
klua.on_leading(function()
  local seq = 0
  while true do
    seq = seq + 1
    klua.api.create('configmaps', { apiVersion = 'v1', kind = 'ConfigMap',
      metadata = { generateName = 'w-', namespace = ns, labels = { role = 'record', writer = id } },
      data = { seq = tostring(seq) } })
    klua.sleep(0.05)
  end
end)
]]

describe('a leader paused past its lease', function()
  local sb = testing.with_sandbox()
  local script, procs = nil, {}

  setup(function() script = K.script(LEADER) end)
  after_each(function() stop_all(procs) end)

  local function candidate(ns, id) return replica(sb, procs, script, ns, id) end

  -- One round: two replicas; the leader is stopped until the other has taken
  -- over and written, then woken. No write of the old leader may come after the
  -- first of the new one.
  local function round(n)
    local ns = 'pause-leader-' .. n
    sb:kubectl('create namespace ' .. ns)
    local a, b = candidate(ns, 'a' .. n), candidate(ns, 'b' .. n)
    local first = testing.eventually(function()
      local list = writes(sb, ns)
      return #list >= 5 and list[#list].writer
    end, 20 * K.slowdown, { what = 'five writes of a leader' })
    local old, new = a, b
    if first == b.id then old, new = b, a end
    old:signal('STOP')
    testing.eventually(function()
      return count(writes(sb, ns), function(w) return w.writer == new.id end) >= 5
    end, 20 * K.slowdown, { what = 'five writes of the replica that took over' })
    old:signal('CONT')
    -- It has lost the Lease: it says so and ends, as klua does for a lost Lease.
    assert.are.equal(1, old:wait(20 * K.slowdown), old:errors())
    assert.matches('leader election lost', old:errors())
    local list = writes(sb, ns)
    local took_over
    for i, w in ipairs(list) do
      if w.writer == new.id and not took_over then took_over = i end
      if took_over then
        assert.are.equal(new.id, w.writer, ('round %d: a write of %s after the first of %s (%d of %d)')
          :format(n, old.id, new.id, i, #list))
      end
    end
    assert.truthy(took_over)
    new:cleanup()
  end

  in_every_round('sends no write once another replica has taken over', round)

  it('answers klua.leader() false and refuses writes with NotLeader once the lease lapsed', function()
    local ns = 'pause-leader-api'
    sb:kubectl('create namespace ' .. ns)
    local probe = K.script([[
io.stdout:setvbuf('line')
local ns = klua.args[2]
klua.on_leading(function()
  print('leading')
  -- Known before the pause: the create below then waits for nothing before
  -- its check.
  assert(klua.resolve('configmaps'))
  -- Blocks the whole process for longer than the renew deadline, as a pause
  -- does: the timer that stops leading has not run when the next line does.
  os.execute('sleep 2')
  print('leader=' .. tostring(klua.leader()))
  local _, err = klua.api.create('configmaps', { apiVersion = 'v1', kind = 'ConfigMap',
    metadata = { name = 'late', namespace = ns } })
  print('reason=' .. tostring(err and err.reason))
  print('refused=' .. require('klua.internal.fence').refused)
  print('message=' .. tostring(err and err.message))
end)
]])
    local p = replica(sb, procs, probe, ns, 'only')
    assert.truthy(p:wait_for('message=', 20 * K.slowdown), p:output() .. p:errors())
    assert.matches('leader=false', p:output())
    assert.matches('reason=NotLeader', p:output())
    -- Counted, for klua_fenced_writes_total.
    assert.matches('refused=1\n', p:output())
    assert.matches(K.literally('message=POST /api/v1/namespaces/' .. ns .. '/configmaps not sent: this replica '
      .. 'does not hold the leader lease ' .. ns .. '/paused'), p:output())
    assert.is_nil(sb:get('-n ' .. ns .. ' configmap late'))
    assert.are.equal(1, p:wait(20 * K.slowdown), p:errors())
    assert.matches('leader election lost: no renewal within 1.5 s', p:errors())
  end)
end)

-- Each reconcile records its shard and the shard Lease's leaseTransitions as the
-- replica knows it (its epoch: every change of holder adds one). In the server's
-- order, a shard's epochs never go back, and each has one writer; a write of a
-- replica that kept reconciling a shard another had taken would break either.
local SHARDED = [[
local id, ns = klua.args[1], klua.args[2]
local shards = require('klua.shards')
local work = klua.informer { resource = 'configmaps', namespace = ns, label_selector = 'role=work' }
klua.controller { name = 'paused', watches = { work }, workers = 4, reconcile = function(key)
  local g = shards.current()
  local i = shards.shard_of(work:get(key).metadata.uid, g.n)
  local e = g.electors[i]
  local epoch = e and e.observed and e.observed.leaseTransitions or -1
  klua.api.create('configmaps', { apiVersion = 'v1', kind = 'ConfigMap',
    metadata = { generateName = 'r-', namespace = ns, labels = { role = 'record', writer = id } },
    data = { shard = tostring(i), epoch = tostring(epoch), key = key } })
  return klua.requeue_after(0.2)
end }
]]

describe('a sharded replica paused past its lease', function()
  local sb = testing.with_sandbox()
  local script, procs = nil, {}

  -- Four work objects in ns, two in each of the two shards (a key's shard is its
  -- object's uid's): objects are made until each shard has two, the others left
  -- unlabelled, out of the informer's selection.
  local function make_work(ns)
    local per, n = { [0] = 0, [1] = 0 }, 0
    for i = 1, 100 do
      local status, obj = sb:json('POST', '/api/v1/namespaces/' .. ns .. '/configmaps',
        { metadata = { name = 'k' .. i } })
      assert.equals(201, status)
      local s = K.uid_shard(obj.metadata.uid, 2)
      if per[s] < 2 then
        per[s], n = per[s] + 1, n + 1
        sb:kubectl('-n ' .. ns .. ' label configmap k' .. i .. ' role=work')
      end
      if n == 4 then return end
    end
  end

  setup(function() script = K.script(SHARDED) end)
  after_each(function() stop_all(procs) end)

  local function sharded(ns, id) return replica(sb, procs, script, ns, id, { '--shards', '2' }) end

  -- Per shard, in the server's order: epochs never go back, one writer each.
  local function one_holder_at_a_time(list, n)
    local last = {}
    for i, w in ipairs(list) do
      local shard, epoch = w.data.shard, tonumber(w.data.epoch)
      local l = last[shard]
      local where = ('round %d, shard %s, write %d of %d: %s epoch %d after %s epoch %d'):format(
        n, shard, i, #list, w.writer, epoch, l and l.writer or '-', l and l.epoch or -1)
      assert.truthy(epoch >= 0, where)
      if l then
        assert.truthy(epoch >= l.epoch, where)
        assert.truthy(epoch > l.epoch or w.writer == l.writer, where)
      end
      last[shard] = { writer = w.writer, epoch = epoch }
    end
  end

  local function round(n)
    local ns = 'pause-shards-' .. n
    sb:kubectl('create namespace ' .. ns)
    make_work(ns)
    local a, b = sharded(ns, 'a' .. n), sharded(ns, 'b' .. n)
    -- Both hold a shard: each has written since the other first did.
    testing.eventually(function()
      local list, seen = writes(sb, ns), {}
      for _, w in ipairs(list) do
        if w.writer ~= list[1].writer then seen.other = true
        elseif seen.other then seen.first_again = true end
      end
      return seen.first_again
    end, 30 * K.slowdown, { what = 'writes of both replicas' })
    a:signal('STOP')
    local paused = mark(sb, ns, 'paused')
    assert.truthy(count(writes(sb, ns), function(w) return w.writer == a.id and w.rv < paused end) > 0)
    -- b holds every shard now: it has written for each since the pause.
    testing.eventually(function()
      local shards = {}
      for _, w in ipairs(writes(sb, ns)) do
        if w.writer == b.id and w.rv > paused then shards[w.data.shard] = true end
      end
      return shards['0'] and shards['1']
    end, 20 * K.slowdown, { what = 'writes of the other replica for both shards' })
    a:signal('CONT')
    assert.truthy(a:wait_for('lost shard', 20 * K.slowdown, 'err'), a:errors())
    -- What a woken replica would write, it writes at once: more writes of b for
    -- both shards after the wake mean those had their turn.
    local woke = mark(sb, ns, 'woke')
    testing.eventually(function()
      local shards = {}
      for _, w in ipairs(writes(sb, ns)) do
        if w.rv > woke then shards[w.data.shard] = true end
      end
      return shards['0'] and shards['1']
    end, 20 * K.slowdown, { what = 'writes for both shards after the wake' })
    one_holder_at_a_time(writes(sb, ns), n)
    a:cleanup()
    b:cleanup()
  end

  in_every_round('reconciles no key of a shard another replica took over', round)
end)
