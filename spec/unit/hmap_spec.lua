-- The string hash map under the work queue and the object cache: key
-- strings to values (integers here), with the map owning its key copies.
-- It must stay exact through growth, shrinking and heavy delete churn.
local testing = require('klua_testing')

local function count(t)
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n
end

-- A new map holding entries (key = value).
local function holding(entries)
  local m = testing.hmap()
  for k, v in pairs(entries) do m:put(k, v) end
  return m
end

describe('hmap', function()
  it('stores, finds and overwrites values by key', function()
    local m = testing.hmap()
    assert.equals('added', m:put('ns/a', 1))
    assert.equals('added', m:put('ns/b', 2))
    assert.equals('replaced', m:put('ns/a', 3))
    assert.equals(3, m:get('ns/a'))
    assert.equals(2, m:get('ns/b'))
    assert.is_nil(m:get('ns/c'))
    assert.equals(2, m:len())
  end)

  it('tells a stored zero from an absent key', function()
    local m = holding { zero = 0 }
    assert.equals(0, m:get('zero'))
    assert.equals(0, m:del('zero'))
    assert.is_nil(m:get('zero'))
  end)

  it('deletes keys, returning their value once', function()
    local m = holding { ['ns/a'] = 1, ['ns/b'] = 2 }
    assert.equals(1, m:del('ns/a'))
    assert.is_nil(m:del('ns/a'))
    assert.is_nil(m:get('ns/a'))
    assert.equals(2, m:get('ns/b'))
    assert.equals(1, m:len())
  end)

  it('keeps its own copy of each key', function()
    local m = testing.hmap()
    local key = table.concat { 'ns', '/', 'built' }
    m:put(key, 7)
    key = nil
    collectgarbage()
    assert.equals(7, m:get('ns/built'))
  end)

  it('tells apart keys that share prefixes or differ in one byte of any length', function()
    local m = testing.hmap()
    local base = string.rep('k', 70)
    for len = 0, 70 do m:put(base:sub(1, len), len) end
    for len = 1, 70 do m:put(base:sub(1, len - 1) .. 'x', 100 + len) end
    assert.equals(141, m:len())
    for len = 0, 70 do assert.equals(len, m:get(base:sub(1, len))) end
    for len = 1, 70 do assert.equals(100 + len, m:get(base:sub(1, len - 1) .. 'x')) end
  end)

  it('iterates over every entry exactly once', function()
    local m, want = testing.hmap(), {}
    for i = 1, 1000 do
      want['key-' .. i] = i
      m:put('key-' .. i, i)
    end
    assert.same(want, m:items())
    assert.same({}, testing.hmap():items())
  end)

  it('holds 200,000 keys and finds every one', function()
    local m = testing.hmap()
    for i = 1, 200000 do m:put('namespace-' .. (i % 97) .. '/object-' .. i, i) end
    assert.equals(200000, m:len())
    for i = 1, 200000 do
      if m:get('namespace-' .. (i % 97) .. '/object-' .. i) ~= i then
        error('lost key ' .. i)
      end
    end
    assert.is_nil(m:get('namespace-0/object-0'))
    assert.equals(200000, count(m:items()))
  end)

  it('stays exact when deletes interleave with inserts while it grows', function()
    local m, want = testing.hmap(), {}
    for i = 1, 100000 do
      local key = 'obj-' .. i
      m:put(key, i)
      want[key] = i
      if i % 3 == 0 then
        local gone = 'obj-' .. (i // 2)
        if want[gone] then
          assert.equals(want[gone], m:del(gone))
          want[gone] = nil
        end
      end
    end
    assert.equals(count(want), m:len())
    assert.same(want, m:items())
  end)

  it('shrinks as keys go and still finds the rest', function()
    local m = testing.hmap()
    for i = 1, 50000 do m:put('obj-' .. i, i) end
    for i = 1, 50000 do
      if i % 1000 ~= 0 then assert.equals(i, m:del('obj-' .. i)) end
    end
    assert.equals(50, m:len())
    for i = 1000, 50000, 1000 do assert.equals(i, m:get('obj-' .. i)) end
    assert.equals(50, count(m:items()))
    for i = 1000, 50000, 1000 do m:del('obj-' .. i) end
    assert.equals(0, m:len())
    assert.same({}, m:items())
  end)
end)
