-- Server-side sharded LIST and WATCH (KEP-5866, kube-apiserver 1.36, alpha gate
-- ShardedListAndWatch): shardSelector is shardRange(object.metadata.uid, '0xSTART',
-- '0xEND') terms joined by "||", each selecting the objects whose field's 64-bit FNV-1a
-- hash is in [START, END); a LIST that applied one echoes it in metadata.shardInfo. A
-- server without the gate ignores the parameter, as any unknown query parameter.
-- docs/sandbox.md says what the sandbox assumes where the KEP is silent.
local testing = require('klua.testing')
local K = require('support.klua')

local CM = '/api/v1/namespaces/default/configmaps'
local HALF = '0x8000000000000000'
local LOW = ("shardRange(object.metadata.uid, '0x0', '%s')"):format(HALF)
local HIGH = ("shardRange(object.metadata.uid, '%s', '0x10000000000000000')"):format(HALF)

local function q(selector) return (selector:gsub('[^%w%-%._~]', function(c) return ('%%%02X'):format(c:byte()) end)) end

-- Whether uid's hash is in the lower half of the space (below 2^63: not negative as a Lua integer).
local function low(uid) return K.fnv1a64(uid) >= 0 end

local function uids(list)
  local out = {}
  for _, item in ipairs(list.items) do out[#out + 1] = item.metadata.uid end
  return out
end

local function create(sb, n)
  for i = 1, n do
    assert.equals(201, (sb:json('POST', CM, { metadata = { name = ('cm-%02d'):format(i) } })))
  end
end

describe('the sandbox with --feature-gates ShardedListAndWatch=true', function()
  local sb = testing.with_sandbox { args = { '--feature-gates', 'ShardedListAndWatch=true' } }
  local N = 24

  setup(function() create(sb, N) end)

  it('lists only the objects whose uid hashes into the range, and echoes the selector', function()
    local _, all = sb:json('GET', CM)
    assert.equals(N, #all.items)
    assert.is_nil(all.metadata.shardInfo)
    local status, lower = sb:json('GET', CM .. '?shardSelector=' .. q(LOW))
    assert.equals(200, status)
    local _, upper = sb:json('GET', CM .. '?shardSelector=' .. q(HIGH))
    assert.same({ selector = LOW }, lower.metadata.shardInfo)
    assert.same({ selector = HIGH }, upper.metadata.shardInfo)
    for _, uid in ipairs(uids(lower)) do assert.is_true(low(uid), uid) end
    for _, uid in ipairs(uids(upper)) do assert.is_false(low(uid), uid) end
    assert.equals(N, #lower.items + #upper.items)
    assert.is_true(#lower.items > 0 and #upper.items > 0)
    -- "||" joins ranges: both halves are everything.
    local _, both = sb:json('GET', CM .. '?shardSelector=' .. q(LOW .. ' || ' .. HIGH))
    assert.equals(N, #both.items)
    -- A page of a sharded list counts no remaining items, as with a label selector.
    local _, page = sb:json('GET', CM .. '?limit=1&shardSelector=' .. q(LOW))
    assert.truthy(page.metadata.continue)
    assert.is_nil(page.metadata.remainingItemCount)
  end)

  it('watches only the events of objects in the range, initial events too', function()
    local w = sb:watch(CM .. '?watch=1&allowWatchBookmarks=true&sendInitialEvents=true'
      .. '&resourceVersionMatch=NotOlderThan&resourceVersion=&shardSelector=' .. q(LOW))
    local function bookmarked(events)
      for _, ev in ipairs(events) do
        if ev.type == 'BOOKMARK' then return true end
      end
    end
    assert.truthy(w.wait_for(bookmarked))
    local initial = #w.events() - 1
    local _, lower = sb:json('GET', CM .. '?shardSelector=' .. q(LOW))
    assert.equals(#lower.items, initial)
    local created, wanted = {}, 0
    for i = 1, 12 do
      local _, obj = sb:json('POST', CM, { metadata = { name = ('new-%02d'):format(i) } })
      created[#created + 1] = obj
      if low(obj.metadata.uid) then wanted = wanted + 1 end
    end
    -- The last object in the range arrives; none outside it came before.
    local last
    for _, obj in ipairs(created) do if low(obj.metadata.uid) then last = obj.metadata.name end end
    assert.truthy(w.wait_for(function(events)
      return events[#events].object and events[#events].object.metadata.name == last
    end))
    w.stop()
    local added = 0
    for _, ev in ipairs(w.events()) do
      if ev.type == 'ADDED' then
        assert.is_true(low(ev.object.metadata.uid), ev.object.metadata.name)
        added = added + 1
      end
    end
    assert.equals(initial + wanted, added)
  end)

  it('refuses a selector it cannot read with 400, naming the selector', function()
    for _, bad in ipairs({ 'shardRange(object.metadata.name, \'0x0\', \'0x1\')',
      'shardRange(object.metadata.uid, \'0x10\', \'0x1\')', 'uid in (a)' }) do
      local status, body = sb:json('GET', CM .. '?shardSelector=' .. q(bad))
      assert.equals(400, status, bad)
      assert.truthy(body.message:find(bad, 1, true), body.message)
    end
  end)
end)

describe('the sandbox without the ShardedListAndWatch gate', function()
  local sb = testing.with_sandbox()

  it('ignores shardSelector, as kube-apiserver an unknown query parameter', function()
    create(sb, 6)
    local status, list = sb:json('GET', CM .. '?shardSelector=' .. q(LOW))
    assert.equals(200, status)
    assert.equals(6, #list.items)
    assert.is_nil(list.metadata.shardInfo)
  end)
end)

describe('FNV-1a 64 of the specs', function()
  it('gives the published test vectors', function()
    -- From the FNV reference test suite (draft-eastlake-fnv): "" and "a".
    assert.equals('cbf29ce484222325', ('%016x'):format(K.fnv1a64('')))
    assert.equals('af63dc4c8601ec8c', ('%016x'):format(K.fnv1a64('a')))
  end)
end)
