-- Sharded reconcile (klua run --shards N --leader-elect, lua/klua/shards.lua): replicas
-- split a controller's keys into N shards held as Leases; each reconciles only the keys
-- of the shards it holds, takes at most its fair share, hands shards over when a replica
-- joins, and takes a dead replica's shards once their Leases expire.
--
-- Each reconcile prints its key, shard and start and end on the machine's monotonic clock
-- (klua.core.now), so the spec can check that no key was ever reconciled by two replicas
-- at the same time.
local testing = require('klua.testing')
local K = require('support.klua')

local ROOT = os.getenv('KLUA_ROOT') or '.'
local NS, SHARDS, OBJECTS = 'sharded', 6, 3000
local LEASE = { '--leader-elect-lease-duration', '3s', '--leader-elect-renew-deadline', '2s',
  '--leader-elect-retry-period', '500ms' }

local fnv1a = K.fnv1a

local CONTROLLER = [[
io.stdout:setvbuf('line')
local core = require('klua.core')
local shards = require('klua.shards')
local cms = klua.informer { resource = 'configmaps', namespace = 'sharded' }
klua.controller { name = 'sharded', watches = { cms }, workers = 4, reconcile = function(key)
  local t0 = core.now()
  klua.sleep(0.002)
  local obj = cms:get(key)
  print(('reconcile %s %d %.6f %.6f %s %s'):format(key, obj and shards.shard_of(obj.metadata.uid, 6) or -1,
    t0, core.now(), obj and obj.data.updated or '-', obj and obj.metadata.uid or '-'))
end }
klua.every(0.2, function() print('holding ' .. table.concat(klua.shards(), ',')) end)
]]

describe('sharded reconcile', function()
  local sb = testing.with_sandbox()
  local script, replicas = nil, {}

  setup(function()
    script = K.script(CONTROLLER)
    sb:kubectl('create namespace ' .. NS)
    assert.equals(tostring(OBJECTS), K.run_command(('python3 %s/spec/support/burst.py %s %s cm %d 0 0')
      :format(ROOT, sb.url, NS, OBJECTS)))
  end)

  teardown(function()
    for _, p in pairs(replicas) do p:cleanup() end
  end)

  local function start(name)
    local args = { '--kubeconfig', sb.kubeconfig, '--leader-elect', '--leader-election-id', 'sharded',
      '--leader-election-namespace', NS, '--shards', tostring(SHARDS), '--metrics-bind-address', '127.0.0.1:0' }
    for _, a in ipairs(LEASE) do args[#args + 1] = a end
    args[#args + 1] = 'run'
    args[#args + 1] = script
    replicas[name] = K.spawn(args, { name = 'replica ' .. name })
  end

  -- Every reconcile so far: {replica, key, shard, from, to, mark}.
  local function reconciles()
    local out = {}
    for name, p in pairs(replicas) do
      for key, shard, from, to, mark, uid in p:output():gmatch('reconcile (%S+) (%-?%d+) (%S+) (%S+) (%S+) (%S+)\n') do
        out[#out + 1] = { replica = name, key = key, shard = tonumber(shard), from = tonumber(from),
          to = tonumber(to), mark = mark, uid = uid }
      end
    end
    return out
  end

  -- The keys reconciled after their object showed mark.
  local function reconciled_with(mark)
    local seen = {}
    for _, r in ipairs(reconciles()) do
      if r.mark == mark then seen[r.key] = true end
    end
    local n = 0
    for _ in pairs(seen) do n = n + 1 end
    return n
  end

  -- The shards each running replica last said it holds.
  local function holdings(names)
    local out = {}
    for _, name in ipairs(names) do
      local last = replicas[name]:output():match('.*holding ([%d,]*)\n')
      if not last then return nil end
      local held = {}
      for i in last:gmatch('%d+') do held[#held + 1] = tonumber(i) end
      out[name] = held
    end
    return out
  end

  -- Whether names hold every shard once between them, none more than its fair share.
  local function balanced(names)
    local h = holdings(names)
    if not h then return false end
    local fair, owner = math.ceil(SHARDS / #names), {}
    for name, held in pairs(h) do
      if #held > fair then return false end
      for _, i in ipairs(held) do
        if owner[i] then return false end
        owner[i] = name
      end
    end
    for i = 0, SHARDS - 1 do
      if not owner[i] then return false end
    end
    return true
  end

  local function no_overlap()
    local by_key = {}
    for _, r in ipairs(reconciles()) do
      local list = by_key[r.key] or {}
      by_key[r.key] = list
      for _, o in ipairs(list) do
        if o.replica ~= r.replica and r.from < o.to and o.from < r.to then
          return false, ('%s reconciled by %s and %s at once'):format(r.key, o.replica, r.replica)
        end
      end
      list[#list + 1] = r
    end
    return true
  end

  local function touch(mark)
    K.run_command(('python3 %s/spec/support/burst.py %s %s cm 0 %d 0 %s'):format(ROOT, sb.url, NS, OBJECTS, mark))
  end

  -- Waits (timeout seconds at most) until the replicas names hold the shards as
  -- balanced() has it, saying balancing if not; then changes every object with mark
  -- and waits until each was reconciled with it, saying reconciling if not, no key
  -- by two replicas at once.
  local function balance_then_reconcile(names, timeout, balancing, mark, reconciling)
    testing.eventually(function() return balanced(names) end, timeout * K.slowdown, { what = balancing })
    touch(mark)
    testing.eventually(function() return reconciled_with(mark) == OBJECTS end, 60 * K.slowdown,
      { what = reconciling })
    assert.is_true(no_overlap())
  end

  it('reconciles every key across three replicas, each key by one replica at a time', function()
    for _, name in ipairs({ 'a', 'b', 'c' }) do start(name) end
    balance_then_reconcile({ 'a', 'b', 'c' }, 60, 'three replicas holding two shards each',
      'one', 'every key reconciled after the change')
    -- With the shards settled each key has one owner, and each replica owns a share.
    local owner, per_replica = {}, {}
    for _, r in ipairs(reconciles()) do
      if r.mark == 'one' then
        assert.equals(owner[r.key] or r.replica, r.replica, r.key .. ' reconciled by two replicas')
        owner[r.key] = r.replica
        per_replica[r.replica] = (per_replica[r.replica] or 0) + 1
      end
    end
    for _, name in ipairs({ 'a', 'b', 'c' }) do
      assert.is_true((per_replica[name] or 0) > 0, name .. ' reconciled none of the keys')
      local port = replicas[name]:errors():match('%(port (%d+)%)')
      local metrics = K.run_command('curl -s http://127.0.0.1:' .. port .. '/metrics')
      assert.matches('\nklua_shards_held{name="sharded"} 2\n', metrics, 1, true)
    end
    -- The shard of a key is the range of N that the 64-bit FNV-1a hash of its object's
    -- uid falls in, as the server's shardRange (KEP-5866), as documented.
    for _, r in ipairs(reconciles()) do assert.equals(K.uid_shard(r.uid, SHARDS), r.shard, r.key) end
  end)

  it('moves a killed replica\'s shards to the others within a lease duration and reconciles their keys', function()
    replicas.c:signal('KILL')
    replicas.c:wait(10)
    balance_then_reconcile({ 'a', 'b' }, 30, 'the two survivors holding every shard, three each',
      'two', 'every key reconciled by the survivors')
  end)

  it('rebalances when a replica joins, leaving no key unowned', function()
    start('d')
    balance_then_reconcile({ 'a', 'b', 'd' }, 60, 'three replicas holding two shards each after d joined',
      'three', 'every key reconciled after the rebalance')
    local d_keys = 0
    for _, r in ipairs(reconciles()) do
      if r.replica == 'd' and r.mark == 'three' then d_keys = d_keys + 1 end
    end
    assert.is_true(d_keys > 0, 'the new replica reconciles its share')
  end)

  it('refuses --shards 0, a fraction, and --shards without --leader-elect', function()
    for _, case in ipairs({
      { { '--leader-elect', '--shards', '0' }, '--shards needs a number of at least 1, not "0"' },
      { { '--leader-elect', '--shards', '1.5' }, '--shards needs a whole number of shards, not "1.5"' },
      { { '--shards', '3' }, '--shards needs --leader-elect' },
      { { '--leader-elect', '--shards', '3', '--leader-election-namespace', 'nowhere' },
        '--leader-election-namespace: namespace "nowhere" does not exist' },
    }) do
      local args = { '--kubeconfig', sb.kubeconfig }
      for _, a in ipairs(case[1]) do args[#args + 1] = a end
      args[#args + 1] = 'run'
      args[#args + 1] = script
      local _, err, code = K.run(args)
      assert.equals(2, code, err)
      assert.matches(case[2], err, 1, true)
    end
  end)
end)

-- Membership is counted from a LIST of the group's member Leases. The namespace they live
-- in is often shared (kube-system holds every node's and controller's Leases), so the
-- Leases carry the labels klua.dev/shard-group=<id> and klua.dev/shard-role=member|shard
-- and the LIST names them in a labelSelector (an equality-based selector, which
-- kube-apiserver filters before answering): its cost follows the group, not the cluster.
describe('sharded reconcile membership', function()
  local system = require('system')
  -- -v: the server logs every request with its query, so the spec can read what the
  -- replicas ask for.
  local sb = testing.with_sandbox { each = true, args = { '-v' } }
  local MEMBERS_NS = 'members'
  local LEASES = '/apis/coordination.k8s.io/v1/namespaces/' .. MEMBERS_NS .. '/leases'
  local SELECTOR = 'klua.dev/shard-group=sharded,klua.dev/shard-role=member'
  local HOLDING = [[
io.stdout:setvbuf('line')
klua.every(0.2, function() print('holding ' .. table.concat(klua.shards(), ',')) end)
]]

  local function start(id)
    local args = { '--kubeconfig', sb.kubeconfig, '--leader-elect', '--leader-election-id', id or 'sharded',
      '--leader-election-namespace', MEMBERS_NS, '--shards', tostring(SHARDS) }
    for _, a in ipairs(LEASE) do args[#args + 1] = a end
    args[#args + 1] = 'run'
    args[#args + 1] = K.script(HOLDING)
    return K.spawn(args, { name = 'replica' })
  end

  -- How many shards the replica last said it holds.
  local function held(p)
    local last = p:output():match('.*holding ([%d,]*)\n')
    if not last then return nil end
    local n = 0
    for _ in last:gmatch('%d+') do n = n + 1 end
    return n
  end

  local function lease(name)
    local status, obj = sb:json('GET', LEASES .. '/' .. name)
    assert.equals(200, status, name)
    return obj
  end

  local function create_lease(name, holder, labels)
    local now = os.date('!%Y-%m-%dT%H:%M:%S.000000Z')
    local status, obj = sb:json('POST', LEASES, {
      apiVersion = 'coordination.k8s.io/v1', kind = 'Lease',
      metadata = { name = name, labels = labels },
      spec = { holderIdentity = holder, leaseDurationSeconds = 3, acquireTime = now, renewTime = now,
        leaseTransitions = 0 },
    })
    assert.equals(201, status, name)
    return obj
  end

  -- A holder that renews its Lease as klua's elector and client-go's LeaseLock do: it
  -- reads the Lease and writes it back with a new renewTime (at most every half second,
  -- a replica's retry period), so whatever metadata the Lease has is kept.
  local function holder_of(name)
    local last, n = 0, 0
    return function()
      if system.gettime() - last < 0.5 then return end
      local obj = lease(name)
      n = n + 1
      obj.spec.renewTime = os.date('!%Y-%m-%dT%H:%M:%S') .. ('.%06dZ'):format(n % 1000000)
      if sb:json('PUT', LEASES .. '/' .. name, obj) == 200 then last = system.gettime() end
    end
  end

  -- The label selector of each LIST of the Leases the server has answered so far ('' for
  -- a LIST without one), in order.
  local function lease_lists()
    local out = {}
    for query in sb:log():gmatch('GET ' .. LEASES:gsub('%p', '%%%0') .. '%?(%S*) %->') do
      local selector = ('&' .. query):match('&labelSelector=([^&]*)') or ''
      out[#out + 1] = (selector:gsub('%%(%x%x)', function(h) return string.char(tonumber(h, 16)) end))
    end
    return out
  end

  before_each(function() sb:kubectl('create namespace ' .. MEMBERS_NS) end)

  it('counts only its own group\'s members', function()
    -- A node's Lease, and a member Lease of another group whose id, "sharded-member-other",
    -- begins as this group's member Leases do; both are renewed.
    create_lease('node-a', 'node-a')
    local other = 'sharded-member-other-member-0a1b2c3d'
    create_lease(other, 'other-replica',
      { ['klua.dev/shard-group'] = 'sharded-member-other', ['klua.dev/shard-role'] = 'member' })
    local renew_node, renew_other = holder_of('node-a'), holder_of(other)
    local p = start()
    -- Alone in its group, the replica holds every shard, and goes on holding them.
    testing.eventually(function()
      renew_node()
      renew_other()
      return held(p) == SHARDS and #lease_lists() >= 4
    end, 30 * K.slowdown, { what = 'one replica holding all six shards after four membership lists' })
    local before = #lease_lists()
    testing.eventually(function()
      renew_node()
      renew_other()
      return #lease_lists() >= before + 3
    end, 30 * K.slowdown, { what = 'three more membership lists' })
    assert.equals(SHARDS, held(p))
  end)

  it('names the verb to grant when listing the member Leases is forbidden', function()
    -- Leader election needs get, create and update on Leases; a sharded replica also lists them.
    sb:fault { forbid = { 'leases.coordination.k8s.io:list' } }
    local p = start()
    p:wait_log('member Leases in namespace "members" is forbidden', 30 * K.slowdown)
    assert.matches('shards sharded: listing the member Leases in namespace "members" is forbidden %(.-%): grant '
      .. 'list on leases%.coordination%.k8s%.io there, besides get, create and update', p:errors())
  end)

  it('lists the member Leases by their labels, and labels its own Leases', function()
    local p = start()
    testing.eventually(function() return held(p) == SHARDS and #lease_lists() >= 4 end,
      30 * K.slowdown, { what = 'one replica holding all six shards after four membership lists' })
    -- Its first list is unfiltered (it looks for members an older klua left unlabelled,
    -- below); every later one names the group's member labels.
    local lists = lease_lists()
    for i = 2, #lists do assert.equals(SELECTOR, lists[i], 'membership list ' .. i) end
    -- The replica's own Leases carry the labels: its member Lease and each shard's.
    local status, list = sb:json('GET', LEASES .. '?labelSelector=klua.dev%2Fshard-group%3Dsharded')
    assert.equals(200, status)
    local roles = {}
    for _, item in ipairs(list.items) do roles[item.metadata.name] = item.metadata.labels['klua.dev/shard-role'] end
    local members = 0
    for name, role in pairs(roles) do
      if name:match('^sharded%-member%-%x+$') then
        assert.equals('member', role, name)
        members = members + 1
      end
    end
    assert.equals(1, members)
    for i = 0, SHARDS - 1 do assert.equals('shard', roles['sharded-shard-' .. i], 'shard ' .. i) end
  end)

  it('counts a member Lease an older klua made without labels until it ages out', function()
    -- What a replica of an older klua holds: a member Lease with no labels, renewed in
    -- place. The new replica labels it once; the old replica's renewals keep the labels
    -- (an update writes back the object it read), so the labelled list finds it.
    local old = 'sharded-member-0badc0de'
    create_lease(old, 'old-replica')
    local renew_old = holder_of(old)
    local p = start()
    testing.eventually(function()
      renew_old()
      return held(p) == SHARDS // 2 and (lease(old).metadata.labels or {})['klua.dev/shard-role'] == 'member'
    end, 30 * K.slowdown, { what = 'the older replica\'s member Lease labelled and counted: three shards held' })
    assert.equals('sharded', lease(old).metadata.labels['klua.dev/shard-group'])
    -- Several labelled lists later the older replica still counts.
    local before = #lease_lists()
    testing.eventually(function()
      renew_old()
      return #lease_lists() >= before + 3
    end, 30 * K.slowdown, { what = 'three more membership lists' })
    local lists = lease_lists()
    for i = before + 1, #lists do assert.equals(SELECTOR, lists[i], 'membership list ' .. i) end
    assert.equals(SHARDS // 2, held(p))
    assert.equals('member', lease(old).metadata.labels['klua.dev/shard-role'])
    -- Once it is no longer renewed it ages out, and the replica takes every shard.
    testing.eventually(function() return held(p) == SHARDS end, 30 * K.slowdown,
      { what = 'one replica holding all six shards after the older one stopped' })
  end)

  it('names a group whose id is no label value by the id\'s head and its hash', function()
    -- A label value has at most 63 characters of [A-Za-z0-9-_.], beginning and ending
    -- with a letter or digit; an id that is one is its own label.
    local long = 'a-controller-whose-name-is-longer-than-any-label-value-may-be.example'
    local cases = {
      { 'sharded', 'sharded' },
      { long, long:sub(1, 54) .. ('-%08x'):format(fnv1a(long)) },
      { 'team/My Controller', ('team-My-Controller-%08x'):format(fnv1a('team/My Controller')) },
      { '--', ('%08x'):format(fnv1a('--')) },
    }
    local script = {}
    for _, case in ipairs(cases) do
      script[#script + 1] = ('print(require("klua.shards").group_label(%q))'):format(case[1])
    end
    local out = K.run_script_ok(table.concat(script, '\n'), { kubeconfig = sb.kubeconfig })
    local labels = {}
    for i, line in ipairs(K.lines(out)) do
      assert.equals(cases[i][2], line, cases[i][1])
      labels['v' .. i] = line
    end
    -- The server takes each as a label value.
    local status, obj = sb:json('POST', '/api/v1/namespaces/' .. MEMBERS_NS .. '/configmaps',
      { apiVersion = 'v1', kind = 'ConfigMap', metadata = { name = 'label-values', labels = labels } })
    assert.equals(201, status, obj and obj.message)
    -- A replica of the long id labels its Leases so and finds itself by them.
    local p = start(long)
    testing.eventually(function() return held(p) == SHARDS and #lease_lists() >= 3 end,
      30 * K.slowdown, { what = 'one replica holding all six shards after three membership lists' })
    local lists = lease_lists()
    assert.equals(('klua.dev/shard-group=%s,klua.dev/shard-role=member'):format(cases[2][2]), lists[#lists])
    assert.equals(cases[2][2], lease(long .. '-shard-0').metadata.labels['klua.dev/shard-group'])
  end)
end)

-- Server-side sharding (KEP-5866): against a server that echoes shardSelector in a LIST's
-- metadata.shardInfo, each replica's primary informer lists and watches only the hash
-- ranges of the shards it holds, merged where adjacent, and relists when they change; a
-- server that ignores the parameter gets the full lists, filtered by each replica.
describe('sharded reconcile with server-side sharding', function()
  local N, COUNT = 4, 120
  local STATE = [[
io.stdout:setvbuf('line')
local core = require('klua.core')
local cms = klua.informer { resource = 'configmaps', namespace = 'sharded' }
klua.controller { name = 'sharded', watches = { cms }, reconcile = function(key)
  local obj = cms:get(key)
  if obj and obj.data and obj.data.updated then print(('reconcile %s %s'):format(key, obj.data.updated)) end
end }
klua.every(0.2, function()
  print(('state %s|%d|%s'):format(table.concat(klua.shards(), ','), #cms:list(),
    core.informer_fns.shard_selector(cms)))
end)
]]

  -- --verify-cache: each check lists what the informer selects, its shards' ranges only.
  local function start(sb, replicas, name, flags)
    local args = { '--kubeconfig', sb.kubeconfig, '--leader-elect', '--leader-election-id', 'sharded',
      '--leader-election-namespace', NS, '--shards', tostring(N), '--verify-cache', '1s' }
    for _, a in ipairs(LEASE) do args[#args + 1] = a end
    for _, a in ipairs(flags or {}) do args[#args + 1] = a end
    args[#args + 1] = 'run'
    args[#args + 1] = K.script(STATE)
    replicas[name] = K.spawn(args, { name = 'replica ' .. name })
  end

  -- What a replica last said: the shards it holds, its cache size, its informer's selector.
  local function state(p)
    local held, cached, sel = p:output():match('.*state ([%d,]*)|(%d+)|([^\n]*)\n')
    if not held then return nil end
    local shards = {}
    for i in held:gmatch('%d+') do shards[#shards + 1] = tonumber(i) end
    return { shards = shards, cached = tonumber(cached), selector = sel }
  end

  -- The selector of shards (in order) as the spec reads KEP-5866: a range per run of
  -- adjacent shards, [i * w, (j + 1) * w), the last ending at 2^64.
  local function selector_of(shards)
    local w, terms, i = K.shard_width(N), {}, 1
    while shards[i] do
      local first, last = shards[i], shards[i]
      while shards[i + 1] == last + 1 do i, last = i + 1, last + 1 end
      local to = last == N - 1 and '0x10000000000000000' or ('0x%016x'):format((last + 1) * w)
      terms[#terms + 1] = ("shardRange(object.metadata.uid, '0x%016x', '%s')"):format(first * w, to)
      i = i + 1
    end
    return table.concat(terms, ' || ')
  end

  local function objects_in(sb, shards)
    local _, list = sb:json('GET', '/api/v1/namespaces/' .. NS .. '/configmaps')
    local want, n = {}, 0
    for _, i in ipairs(shards) do want[i] = true end
    for _, item in ipairs(list.items) do
      if want[K.uid_shard(item.metadata.uid, N)] then n = n + 1 end
    end
    return n
  end

  local function setup_objects(sb)
    sb:kubectl('create namespace ' .. NS)
    assert.equals(tostring(COUNT), K.run_command(('python3 %s/spec/support/burst.py %s %s cm %d 0 0')
      :format(ROOT, sb.url, NS, COUNT)))
  end

  describe('against a server with ShardedListAndWatch', function()
    local sb = testing.with_sandbox { args = { '--feature-gates', 'ShardedListAndWatch=true' } }
    local replicas = {}
    setup(function() setup_objects(sb) end)
    teardown(function() for _, p in pairs(replicas) do p:cleanup() end end)

    -- Whether every replica caches exactly the objects of the shards it holds, under the
    -- selector of those shards, and the replicas hold every shard once between them.
    local function settled(names)
      local owner = {}
      for _, name in ipairs(names) do
        local s = state(replicas[name])
        if not s or #s.shards == 0 or #s.shards > math.ceil(N / #names) then return false end
        if s.selector ~= selector_of(s.shards) or s.cached ~= objects_in(sb, s.shards) then return false end
        for _, i in ipairs(s.shards) do
          if owner[i] then return false end
          owner[i] = name
        end
      end
      for i = 0, N - 1 do if not owner[i] then return false end end
      return true
    end

    it('lists only the held shards\' ranges, relisting them when a replica joins', function()
      start(sb, replicas, 'a')
      testing.eventually(function() return settled({ 'a' }) end, 30 * K.slowdown,
        { what = 'one replica holding every shard, listing the whole space as one range' })
      assert.equals(COUNT, state(replicas.a).cached)
      assert.equals("shardRange(object.metadata.uid, '0x0000000000000000', '0x10000000000000000')",
        state(replicas.a).selector)
      assert.truthy(replicas.a:errors():find('the server shards lists and watches', 1, true))
      start(sb, replicas, 'b')
      testing.eventually(function() return settled({ 'a', 'b' }) end, 60 * K.slowdown,
        { what = 'two replicas each caching only the objects of the two shards it holds' })
      assert.is_true(state(replicas.a).cached < COUNT and state(replicas.b).cached < COUNT)
      -- Each key is still reconciled, by the replica that holds its shard.
      K.run_command(('python3 %s/spec/support/burst.py %s %s cm 0 %d 0 two'):format(ROOT, sb.url, NS, COUNT))
      local function reconciled()
        local seen, n = {}, 0
        for _, name in ipairs({ 'a', 'b' }) do
          for key in replicas[name]:output():gmatch('reconcile (%S+) two\n') do
            if not seen[key] then seen[key], n = true, n + 1 end
          end
        end
        return n
      end
      testing.eventually(function() return reconciled() == COUNT end, 60 * K.slowdown,
        { what = 'every key reconciled after the change' })
      -- Checked against a LIST of the same ranges, a sharded cache never drifts.
      for _, name in ipairs({ 'a', 'b' }) do
        assert.falsy(replicas[name]:errors():find('the cache differs', 1, true), replicas[name]:errors())
      end
    end)

    it('lists everything and filters by shard under --server-side-sharding=false', function()
      -- Alone, once the earlier replicas' Leases expire, it holds shards to filter by.
      for name, p in pairs(replicas) do
        p:cleanup()
        replicas[name] = nil
      end
      start(sb, replicas, 'off', { '--server-side-sharding=false' })
      testing.eventually(function()
        local s = state(replicas.off)
        return s and #s.shards > 0 and s.cached == COUNT
      end, 60 * K.slowdown, { what = 'the replica holding shards with every object cached' })
      assert.equals('', state(replicas.off).selector)
      assert.falsy(replicas.off:errors():find('shardSelector', 1, true), replicas.off:errors())
      assert.falsy(replicas.off:errors():find('the server shards lists', 1, true), replicas.off:errors())
    end)
  end)

  -- Owned objects come unfiltered (their shard is their owner's), and each queues its
  -- owner only on the replica that holds the shard of the owner's uid, which it reads
  -- from its controller ownerReference even when the owner is not cached here.
  describe('with owned objects', function()
    local sb = testing.with_sandbox { args = { '--feature-gates', 'ShardedListAndWatch=true' } }
    local replicas = {}
    local OWNERS = 40
    local OWNED = [[
io.stdout:setvbuf('line')
local core = require('klua.core')
local owners = klua.informer { resource = 'configmaps', namespace = 'sharded', label_selector = 'role=owner' }
local owned = klua.informer { resource = 'configmaps', namespace = 'sharded', label_selector = 'role=owned' }
klua.controller { name = 'sharded', watches = { owners }, owns = { owned }, reconcile = function(key)
  print('reconcile ' .. key)
end }
klua.every(0.2, function()
  print(('state %s|%d|%s'):format(table.concat(klua.shards(), ','), #owners:list(),
    core.informer_fns.shard_selector(owners)))
end)
]]
    local uid_of = {}

    setup(function()
      sb:kubectl('create namespace ' .. NS)
      local path = '/api/v1/namespaces/' .. NS .. '/configmaps'
      for i = 1, OWNERS do
        local status, owner = sb:json('POST', path, { metadata = { name = 'o' .. i, labels = { role = 'owner' } } })
        assert.equals(201, status)
        uid_of[NS .. '/o' .. i] = owner.metadata.uid
        assert.equals(201, (sb:json('POST', path, { metadata = { name = 'o' .. i .. '-child', labels = { role = 'owned' },
          ownerReferences = { { apiVersion = 'v1', kind = 'ConfigMap', name = 'o' .. i, uid = owner.metadata.uid,
            controller = true } } } })))
      end
    end)
    teardown(function() for _, p in pairs(replicas) do p:cleanup() end end)

    it('reconciles an owner only on the replica holding its uid\'s shard', function()
      for _, name in ipairs({ 'a', 'b' }) do
        local args = { '--kubeconfig', sb.kubeconfig, '--leader-elect', '--leader-election-id', 'owned',
          '--leader-election-namespace', NS, '--shards', tostring(N) }
        for _, a in ipairs(LEASE) do args[#args + 1] = a end
        args[#args + 1] = 'run'
        args[#args + 1] = K.script(OWNED)
        replicas[name] = K.spawn(args, { name = 'replica ' .. name })
      end
      testing.eventually(function()
        local a, b = state(replicas.a), state(replicas.b)
        return a and b and #a.shards == 2 and #b.shards == 2 and a.selector == selector_of(a.shards)
          and b.selector == selector_of(b.shards) and a.cached + b.cached == OWNERS
      end, 60 * K.slowdown, { what = 'two replicas each caching the owners of its two shards' })
      local from = { a = #replicas.a:output(), b = #replicas.b:output() }
      local path = '/api/v1/namespaces/' .. NS .. '/configmaps/'
      for i = 1, OWNERS do
        assert.equals(200, (sb:json('PATCH', path .. 'o' .. i .. '-child', { data = { touched = 'yes' } },
          { ['Content-Type'] = 'application/merge-patch+json' })))
      end
      local function seen()
        local keys = {}
        for _, name in ipairs({ 'a', 'b' }) do
          for key in replicas[name]:output():sub(from[name] + 1):gmatch('reconcile (%S+)\n') do
            keys[#keys + 1] = { replica = name, key = key }
          end
        end
        return keys
      end
      testing.eventually(function()
        local distinct = {}
        for _, r in ipairs(seen()) do distinct[r.key] = true end
        local n = 0
        for _ in pairs(distinct) do n = n + 1 end
        return n == OWNERS
      end, 30 * K.slowdown, { what = 'every owner reconciled after its owned object changed' })
      for _, r in ipairs(seen()) do
        local held = {}
        for _, i in ipairs(state(replicas[r.replica]).shards) do held[i] = true end
        assert.truthy(held[K.uid_shard(uid_of[r.key], N)], r.key .. ' reconciled by ' .. r.replica)
      end
    end)
  end)

  describe('against a server without it', function()
    local sb = testing.with_sandbox()
    local replicas = {}
    setup(function() setup_objects(sb) end)
    teardown(function() for _, p in pairs(replicas) do p:cleanup() end end)

    it('places a uid in the shard whose range holds its hash, for any count of shards', function()
      -- klua.shards against the spec's own reading of the ranges (K.uid_shard), for
      -- counts whose range width is above 2^63 (2), a power of two and not (3, 7).
      local uids, script = {}, { 'local s = require("klua.shards")' }
      for i = 1, 200 do uids[i] = ('%08x-0000-4000-8000-%012x'):format(i * 7919, i) end
      for _, n in ipairs({ 1, 2, 3, 4, 7 }) do
        for _, uid in ipairs(uids) do
          script[#script + 1] = ('print(%d, %q, s.shard_of(%q, %d))'):format(n, uid, uid, n)
        end
      end
      script[#script + 1] = 'print(s.selector({ 0, 1, 3 }, 4))'
      script[#script + 1] = 'print(s.selector({ 1 }, 2))'
      local out = K.run_script_ok(table.concat(script, '\n'), { kubeconfig = sb.kubeconfig })
      local lines, seen = K.lines(out), {}
      for _, line in ipairs(lines) do
        local n, uid, shard = line:match('^(%d+)\t(%S+)\t(%d+)$')
        if n then
          assert.equals(K.uid_shard(uid, tonumber(n)), tonumber(shard), line)
          seen[n .. '/' .. shard] = true
        end
      end
      for _, n in ipairs({ 1, 2, 3, 4, 7 }) do
        for i = 0, n - 1 do assert.truthy(seen[n .. '/' .. i], ('no uid in shard %d of %d'):format(i, n)) end
      end
      assert.equals(selector_of({ 0, 1, 3 }), lines[#lines - 1])
      assert.equals("shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')",
        lines[#lines])
    end)

    it('lists everything and filters by shard, as before', function()
      start(sb, replicas, 'a')
      start(sb, replicas, 'b')
      testing.eventually(function()
        local a, b = state(replicas.a), state(replicas.b)
        return a and b and #a.shards == 2 and #b.shards == 2
      end, 60 * K.slowdown, { what = 'two replicas holding two shards each' })
      for _, name in ipairs({ 'a', 'b' }) do
        local s = state(replicas[name])
        assert.equals(COUNT, s.cached)
        assert.equals('', s.selector)
        assert.truthy(replicas[name]:errors():find('the server ignores shardSelector', 1, true))
      end
    end)
  end)
end)
