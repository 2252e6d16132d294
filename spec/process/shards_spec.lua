-- Sharded reconcile (klua run --shards N --leader-elect, lua/klua/shards.lua): replicas
-- split a controller's keys into N shards held as Leases; each reconciles only the keys
-- of the shards it holds, takes at most its fair share, hands shards over when a replica
-- joins, and takes a dead replica's shards once their Leases expire.
--
-- Each reconcile prints its key, shard and start and end on the machine's monotonic clock
-- (klua.core.now), so the spec can check that no key was ever reconciled by two replicas
-- at the same time.
local testing = require 'klua.testing'
local K = require 'support.klua'

local ROOT = os.getenv('KLUA_ROOT') or '.'
local NS, SHARDS, OBJECTS = 'sharded', 6, 3000
local LEASE = { '--leader-elect-lease-duration', '3s', '--leader-elect-renew-deadline', '2s',
  '--leader-elect-retry-period', '500ms' }

local CONTROLLER = [[
io.stdout:setvbuf('line')
local core = require 'klua.core'
local shards = require 'klua.shards'
local cms = klua.informer { resource = 'configmaps', namespace = 'sharded' }
klua.controller { name = 'sharded', watches = { cms }, workers = 4, reconcile = function(key)
  local t0 = core.now()
  klua.sleep(0.002)
  local obj = cms:get(key)
  print(('reconcile %s %d %.6f %.6f %s'):format(key, shards.shard_of(key, 6), t0, core.now(),
    obj and obj.data.updated or '-'))
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
      for key, shard, from, to, mark in p:output():gmatch('reconcile (%S+) (%d+) (%S+) (%S+) (%S+)\n') do
        out[#out + 1] = { replica = name, key = key, shard = tonumber(shard), from = tonumber(from),
          to = tonumber(to), mark = mark }
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

  it('reconciles every key across three replicas, each key by one replica at a time', function()
    for _, name in ipairs({ 'a', 'b', 'c' }) do start(name) end
    testing.eventually(function() return balanced({ 'a', 'b', 'c' }) end, 60 * K.slowdown,
      { what = 'three replicas holding two shards each' })
    touch('one')
    testing.eventually(function() return reconciled_with('one') == OBJECTS end, 60 * K.slowdown,
      { what = 'every key reconciled after the change' })
    assert.is_true(no_overlap())
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
    -- The shard of a key is FNV-1a (32 bits) of "namespace/name", modulo N, as documented.
    local function fnv1a(s)
      local h = 0x811c9dc5
      for i = 1, #s do h = ((h ~ s:byte(i)) * 0x01000193) & 0xffffffff end
      return h
    end
    for _, r in ipairs(reconciles()) do assert.equals(fnv1a(r.key) % SHARDS, r.shard, r.key) end
  end)

  it('moves a killed replica\'s shards to the others within a lease duration and reconciles their keys', function()
    replicas.c:signal('KILL')
    replicas.c:wait(10)
    testing.eventually(function() return balanced({ 'a', 'b' }) end, 30 * K.slowdown,
      { what = 'the two survivors holding every shard, three each' })
    touch('two')
    testing.eventually(function() return reconciled_with('two') == OBJECTS end, 60 * K.slowdown,
      { what = 'every key reconciled by the survivors' })
    assert.is_true(no_overlap())
  end)

  it('rebalances when a replica joins, leaving no key unowned', function()
    start('d')
    testing.eventually(function() return balanced({ 'a', 'b', 'd' }) end, 60 * K.slowdown,
      { what = 'three replicas holding two shards each after d joined' })
    touch('three')
    testing.eventually(function() return reconciled_with('three') == OBJECTS end, 60 * K.slowdown,
      { what = 'every key reconciled after the rebalance' })
    assert.is_true(no_overlap())
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
