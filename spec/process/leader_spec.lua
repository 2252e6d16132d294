-- Leader election on a Lease, as client-go's leaderelection: one candidate
-- leads and reconciles while the others keep warm caches; a dead leader's
-- Lease is taken once it has not changed for its duration; a leader that
-- stops releases the Lease; a leader that can no longer renew stops
-- leading and exits 1; the race between candidates is not an error.
local K = require('support.klua')
local sandbox = require('support.sandbox')
local testing = require('klua.testing')

local CANDIDATE = [[
io.stdout:setvbuf('line')
local id, ns, lease_duration, mode = klua.args[1], klua.args[2], tonumber(klua.args[3]), klua.args[4]
local cms = klua.informer { resource = 'configmaps', namespace = ns }
local election = klua.leader_election {
  name = 'spec-lease', namespace = ns, identity = id,
  lease_duration = lease_duration, renew_deadline = 2, retry_period = 0.5,
}
klua.on_synced(function() print('synced ' .. id .. ' leader=' .. tostring(klua.leader())) end)
klua.on_leading(function()
  print('leading ' .. id .. ' leader=' .. tostring(klua.leader()))
  if mode == 'release' then
    klua.sleep(0.5)
    election:stop()
    print('released ' .. id .. ' leader=' .. tostring(klua.leader()))
  end
end)
klua.controller {
  watches = { cms },
  reconcile = function(key) print('reconcile ' .. key .. ' by ' .. id) end,
}
]]

-- A Lua pattern that matches s literally (namespaces have dashes).
local literally = K.literally

describe('leader election', function()
  local sb = testing.with_sandbox()
  local track = K.per_spec()
  local script

  setup(function() script = K.script(CANDIDATE) end)

  -- A fresh namespace with one ConfigMap for the controllers to reconcile.
  local namespace = sandbox.namespaces(sb, 'leader', 'work')

  local function candidate(id, ns, lease_duration, mode)
    local p = K.spawn({ '--kubeconfig', sb.kubeconfig, 'run', script, id, ns,
      tostring(lease_duration or 3), mode or '' })
    p.id = id
    track(p)
    return p
  end

  local function lease(ns) return sandbox.lease(sb, ns, 'spec-lease') end

  local function holder(ns)
    local spec = lease(ns)
    return spec and spec.holderIdentity ~= '' and spec.holderIdentity or nil
  end

  local function by_id(list, id)
    for _, p in ipairs(list) do if p.id == id then return p end end
  end

  -- Starts three candidates and waits until one leads and the other two
  -- have synced and seen it; returns the leader and the others.
  local function three(ns, lease_duration)
    local list = { candidate('a', ns, lease_duration), candidate('b', ns, lease_duration),
      candidate('c', ns, lease_duration) }
    local id = testing.eventually(function() return holder(ns) end, 20 * K.slowdown,
      { what = 'somebody took the Lease' })
    local leader = by_id(list, id)
    assert.truthy(leader:wait_for(literally('reconcile ' .. ns .. '/work by ' .. id), 20 * K.slowdown))
    local others = {}
    for _, p in ipairs(list) do
      if p ~= leader then
        others[#others + 1] = p
        assert.truthy(p:wait_for('synced ' .. p.id .. ' leader=false', 20 * K.slowdown), p:errors())
        assert.truthy(p:wait_for('new leader elected: ' .. id, 20 * K.slowdown, 'err'), p:errors())
      end
    end
    return leader, others
  end

  it('lets exactly one candidate lead and reconcile; the others sync and wait, without errors', function()
    local ns = namespace()
    local leader, others = three(ns)
    assert.matches('leading ' .. leader.id .. ' leader=true', leader:output())
    for _, p in ipairs(others) do
      assert.is_nil(p:output():find('leading', 1, true))
      assert.is_nil(p:output():find('reconcile', 1, true))
    end
    for _, p in ipairs({ leader, others[1], others[2] }) do
      assert.is_nil(p:errors():find(' error ', 1, true), p:errors())
    end
    assert.are.equal(0, lease(ns).leaseTransitions)
  end)

  it('moves to another candidate once a killed leader has not renewed for the lease duration', function()
    local ns = namespace()
    local leader, others = three(ns)
    leader:stop('KILL')
    local id = testing.eventually(function()
      local h = holder(ns)
      return h ~= leader.id and h or nil
    end, 20 * K.slowdown, { what = 'the Lease moved from the killed leader' })
    local next = by_id(others, id)
    assert.truthy(next:wait_for(literally('reconcile ' .. ns .. '/work by ' .. id), 20 * K.slowdown))
    assert.are.equal(1, lease(ns).leaseTransitions)
  end)

  it('is handed over when the leader stops its election: it releases the Lease', function()
    local ns = namespace()
    -- A lease of 60 s: a takeover within the wait below comes from the
    -- release, not from the Lease expiring.
    local first = candidate('first', ns, 60, 'release')
    assert.truthy(first:wait_for('released first leader=false', 20 * K.slowdown), first:errors())
    local second = candidate('second', ns, 60)
    assert.truthy(second:wait_for('leading second', 15 * K.slowdown), second:errors())
    assert.are.equal('second', holder(ns))
    assert.is_nil(first:exit_code())
    assert.matches(literally('lease ' .. ns .. '/spec-lease: released'), first:errors())
  end)

  it('ends a leader that cannot renew with status 1', function()
    local ns = namespace()
    local p = K.leading(candidate('only', ns), 'only')
    -- Another holder, freshly written: the leader's renewals fail until its
    -- renew deadline passes.
    sb:kubectl('-n ' .. ns .. [[ patch lease spec-lease --type merge -p '{"spec":{"holderIdentity":"intruder"}}']])
    assert.are.equal(1, p:wait(20 * K.slowdown))
    assert.matches('leader election lost', p:errors())
  end)

  it('stops a leader at its renew deadline while its renewal hangs, as client-go cancels it', function()
    local ns = namespace()
    local p = K.leading(candidate('only', ns), 'only')
    -- Every request now waits two minutes before the server answers: the
    -- renewal under way cannot end before then, the renew deadline (2 s)
    -- comes long before, and the leader stops leading and exits 1 then.
    sb:fault { delay = 120 }
    local code = p:wait(20 * K.slowdown)
    sb:reset_faults()
    assert.are.equal(1, code, p:errors())
    assert.matches('leader election lost: no renewal within 2 s', p:errors())
  end)

  it('refuses settings client-go refuses, saying which', function()
    local bad = K.script([[klua.leader_election { name = 'x', lease_duration = 5, renew_deadline = 5 }]])
    local _, err, code = K.run({ '--kubeconfig', sb.kubeconfig, 'run', bad })
    assert.are_not.equal(0, code)
    assert.matches('lease_duration %(5 s%) must be greater than renew_deadline %(5 s%)', err)
    local nameless = K.script([[klua.leader_election { }]])
    _, err = K.run({ '--kubeconfig', sb.kubeconfig, 'run', nameless })
    assert.matches('leader election needs name = "<lease name>"', err)
    os.execute('rm -rf ' .. K.quote(bad:match('^(.*)/[^/]+$')) .. ' ' .. K.quote(nameless:match('^(.*)/[^/]+$')))
  end)
end)

-- klua.every(seconds, fn, {leader_only = true}): work only one replica may
-- do, as controller-runtime's leader-election runnables. Each tick logs, so
-- that its order against the election's own lines is in one log.
local TICKER = [[
local id = klua.args[1]
klua.leader_election {
  name = 'spec-ticker', namespace = klua.args[2], identity = id,
  lease_duration = 3, renew_deadline = 2, retry_period = 0.5,
}
klua.every(0.1, function() klua.log.info('tick of ' .. id .. ' leader=' .. tostring(klua.leader())) end,
  { leader_only = true })
]]

describe('leader-only timers', function()
  local sb = testing.with_sandbox()
  local track = K.per_spec()
  local script

  setup(function()
    script = K.script(TICKER)
    sb:kubectl('create namespace ticker')
  end)

  local function ticker(id)
    local p = K.spawn({ '--kubeconfig', sb.kubeconfig, 'run', script, id, 'ticker' })
    track(p)
    return p
  end

  it('tick only on the leader, and stop as soon as it loses the Lease', function()
    local a = ticker('a')
    assert.truthy(a:wait_for('tick of a leader=true', 20 * K.slowdown, 'err'), a:errors())
    local b = ticker('b')
    assert.truthy(b:wait_for('new leader elected: a', 20 * K.slowdown, 'err'), b:errors())
    -- a ticks on meanwhile; b, which has seen a lead, does not tick.
    local function ticks(p) return select(2, p:errors():gsub('tick of', '')) end
    local before = ticks(a)
    testing.eventually(function() return ticks(a) >= before + 3 end, 10 * K.slowdown,
      { what = 'three more ticks of the leader' })
    assert.is_nil(b:errors():find('tick of', 1, true), b:errors())
    -- Another holder, freshly written: a's renewals fail, it stops leading and exits 1.
    sb:kubectl([[-n ticker patch lease spec-ticker --type merge -p '{"spec":{"holderIdentity":"intruder"}}']])
    assert.are.equal(1, a:wait(20 * K.slowdown))
    local log = a:errors()
    local lost = log:find('leader election lost', 1, true)
    assert.truthy(lost, log)
    assert.is_nil(log:find('tick of', lost, true), log)
    -- b takes the Lease once the intruder's has expired, and ticks then.
    assert.truthy(b:wait_for('tick of b leader=true', 20 * K.slowdown, 'err'), b:errors())
    assert.is_nil(b:errors():find('leader=false', 1, true), b:errors())
  end)
end)

-- --leader-elect with a Lease that cannot be kept: klua says which flag and
-- what to do, and exits 2 before any informer lists or watches. A GET in a
-- namespace that does not exist is a plain 404 in kube-apiserver; a create
-- there is refused by NamespaceLifecycle with 404 for the namespace itself
-- (details.kind "namespaces"), which klua asks for with a dry run.
describe('--leader-elect with a Lease it cannot keep', function()
  local sb = testing.with_sandbox()
  local script

  setup(function()
    script = K.script([[
      klua.informer { resource = 'configmaps' }:on('add', function() print('handler ran') end)
    ]])
  end)

  local function lines(text)
    local n = 0
    for _ in text:gmatch('[^\n]+') do n = n + 1 end
    return n
  end

  -- Runs the script with --leader-election-namespace ns: klua must exit 2 with the
  -- one line message (a pattern), having printed nothing and written no ConfigMap.
  local function refused(ns, message)
    local before = sb:stats().resources.configmaps
    local out, err, code = K.run({ '--kubeconfig', sb.kubeconfig, '--leader-elect',
      '--leader-election-namespace', ns, 'run', script })
    local after = sb:stats().resources.configmaps
    assert.are.equal(2, code, err)
    assert.matches(message, err)
    assert.are.equal(1, lines(err), err)
    assert.are.equal('', out)
    assert.are.same(before, after)
  end

  it('exits 2 naming the flag when the namespace does not exist', function()
    refused('no-such-namespace', '%-%-leader%-election%-namespace: namespace "no%-such%-namespace" does not exist: '
      .. 'create it %(kubectl create namespace no%-such%-namespace%) or name another')
    assert.is_nil(sb:get('namespace no-such-namespace'))
  end)

  it('exits 2 naming the flag and the RBAC to grant when Leases are forbidden', function()
    sb:kubectl('create namespace locked')
    sb:fault { forbid = { 'leases.coordination.k8s.io' } }
    finally(function() sb:reset_faults() end)
    refused('locked', '%-%-leader%-election%-namespace: Leases in namespace "locked" are forbidden %(.-%): grant get, '
      .. 'create and update on leases%.coordination%.k8s%.io there')
  end)
end)

-- Never two leaders, through faults during renewal. Each candidate, while
-- it leads, appends its identity to one ConfigMap every 0.2 s with an
-- update conditioned on the resourceVersion it read (a conflict writes
-- nothing): the ConfigMap's log is the server's own order of the leaders'
-- writes. Two replicas leading at once would interleave their identities
-- in it; one leader after another leaves each identity in one run.
local LEDGER = [[
local id, ns = klua.args[1], klua.args[2]
klua.leader_election {
  name = 'spec-ledger', namespace = ns, identity = id,
  lease_duration = 3, renew_deadline = 2, retry_period = 0.5,
}
klua.every(0.2, function()
  local cm = klua.api.get('configmaps', ns .. '/ledger')
  if not cm or not klua.leader() then return end
  cm = klua.copy(cm)
  cm.data.log = cm.data.log .. id .. ','
  klua.api.update('configmaps', cm)
end, { leader_only = true })
]]

describe('leader election through faults during renewal', function()
  local sb = testing.with_sandbox()
  local track = K.per_spec()
  local script

  local new_namespace = sandbox.namespaces(sb, 'ledger')

  setup(function() script = K.script(LEDGER) end)

  local function entries(ns)
    local cm = sb:get('-n ' .. ns .. ' configmap ledger')
    local list = {}
    for id in ((cm and cm.data.log) or ''):gmatch('([^,]+),') do list[#list + 1] = id end
    return list
  end

  -- Starts three candidates on a fresh ledger and waits for a few writes.
  local function start()
    local ns = new_namespace()
    sb:apply(([[{"apiVersion": "v1", "kind": "ConfigMap",
      "metadata": {"name": "ledger", "namespace": "%s"}, "data": {"log": ""}}]]):format(ns))
    for _, id in ipairs({ 'a', 'b', 'c' }) do
      track(K.spawn({ '--kubeconfig', sb.kubeconfig, 'run', script, id, ns }))
    end
    testing.eventually(function() return #entries(ns) >= 5 end, 20 * K.slowdown, { what = 'five writes of a leader' })
    return ns
  end

  -- Waits for ten more writes after the fault (somebody leads again; with
  -- handover, ten by another than the leader before it), then checks that
  -- each identity's writes form one run.
  local function one_leader_at_a_time(ns, before, handover)
    local first = entries(ns)[1]
    testing.eventually(function()
      local list, others = entries(ns), 0
      for i = before + 1, #list do
        if list[i] ~= first then others = others + 1 end
      end
      return (handover and others or #list - before) >= 10
    end, 30 * K.slowdown, { what = 'ten writes of a leader after the fault' })
    local list, done, runs = entries(ns), {}, {}
    for i, id in ipairs(list) do
      if id ~= list[i - 1] then
        assert.is_nil(done[id], 'two leaders wrote in turn: ' .. table.concat(list, ','))
        if list[i - 1] then done[list[i - 1]] = true end
        runs[#runs + 1] = id
      end
    end
    return runs
  end

  it('keeps one leader at a time across an API server restart', function()
    local ns = start()
    local before = #entries(ns)
    sb:restart(1)
    one_leader_at_a_time(ns, before)
  end)

  it('keeps one leader at a time through a burst of 503s on renewal', function()
    local ns = start()
    local before = #entries(ns)
    -- Renewals (PUTs of the Lease) fail for longer than the renew deadline
    -- while reads go on: the leader must give up leading (and exit 1)
    -- before the others, seeing the Lease unchanged for its duration, take
    -- it over.
    sb:fault { fail = { count = 10, code = 503, verbs = { 'update' }, path = 'leases' } }
    local runs = one_leader_at_a_time(ns, before, true)
    assert.truthy(#runs >= 2, table.concat(runs, ','))
  end)
end)
