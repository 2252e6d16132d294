-- The store: one informer's cache from key ("ns/name" or "name") to object.
-- It keeps its entries in pages, reached from its table and its namespace
-- index by number (src/cache/store.c); these specs pin what a reader sees
-- through them: identities, bytes, changes, and entries reused after deletes.
local testing = require 'klua_testing'

local function pod(ns, name, rv, extra)
  local md = { '"name":"' .. name .. '"' }
  if ns then md[#md + 1] = '"namespace":"' .. ns .. '"' end
  if rv then md[#md + 1] = '"resourceVersion":"' .. rv .. '"' end
  return '{"kind":"Pod","apiVersion":"v1","metadata":{' .. table.concat(md, ',') .. '}' .. (extra or '') .. '}'
end

describe('the store', function()
  it('keeps a put object under its key', function()
    local s = testing.store()
    local json = pod('default', 'web-1', '17')
    assert.same({ false, nil }, { s:put(json) })
    local got = s:get('default/web-1')
    assert.same({ json = json, ns = 'default', name = 'web-1', rv = '17' }, got)
    assert.equals(1, s:len())
  end)

  it('keeps a long name whole', function()
    local s = testing.store()
    local name = string.rep('n', 253)
    s:put(pod('default', name, '17'))
    local got = s:get('default/' .. name)
    assert.same({ 'default', name, '17' }, { got.ns, got.name, got.rv })
  end)

  it('reads a name with a JSON escape as the decoder unescapes it', function()
    local s = testing.store()
    s:put(pod('default', 'a\\u002db', '5'))
    local got = s:get('default/a-b')
    assert.same({ 'a-b', '5' }, { got.name, got.rv })
    assert.equals(pod('default', 'a\\u002db', '5'), got.json)
  end)

  it('replaces an object by a longer, then a shorter one, handing back the one it held', function()
    local s = testing.store()
    local short, long = pod('ns', 'x', '1'), pod('ns', 'x', '22', ',"spec":{"nodeName":"' .. string.rep('a', 300) .. '"}')
    s:put(short)
    assert.same({ true, short }, { s:put(long) })
    assert.same({ json = long, ns = 'ns', name = 'x', rv = '22' }, s:get('ns/x'))
    local shorter = pod('ns', 'x', '333')
    assert.same({ true, long }, { s:put(shorter) })
    assert.same({ json = shorter, ns = 'ns', name = 'x', rv = '333' }, s:get('ns/x'))
  end)

  it('finds cluster-scoped objects by name and deletes them', function()
    local s = testing.store()
    s:put(pod(nil, 'node-1', '3'))
    assert.equals('', s:get('node-1').ns)
    assert.equals(pod(nil, 'node-1', '3'), s:delete('node-1'))
    assert.is_nil(s:get('node-1'))
    assert.is_nil(s:delete('node-1'))
    assert.equals(0, s:len())
  end)

  it('reports what a replace changed, by resourceVersion', function()
    local s = testing.store()
    assert.same({ 'add a/p1 1', 'add a/p2 1', 'add b/p3 1' },
      s:replace { pod('a', 'p1', '1'), pod('a', 'p2', '1'), pod('b', 'p3', '1') })
    assert.same({ 'add b/p4 7', 'delete a/p2 1', 'update a/p1 2' },
      s:replace { pod('a', 'p1', '2'), pod('b', 'p3', '1'), pod('b', 'p4', '7') })
    assert.equals('2', s:get('a/p1').rv)
    assert.same({ 'a/p1', 'b/p3', 'b/p4' }, s:keys())
  end)

  it('tells listed from unlisted objects across relists, with puts between them', function()
    local s = testing.store()
    local a, b, c = pod('n', 'a', '1'), pod('n', 'b', '1'), pod('n', 'c', '1')
    assert.same({ 'add n/a 1', 'add n/b 1' }, s:replace { a, b })
    for round = 1, 3 do
      s:put(c)
      assert.same({ 'delete n/b 1' }, s:replace { a, c }, 'round ' .. round)
      assert.same({ 'add n/b 1', 'delete n/c 1' }, s:replace { a, b }, 'round ' .. round)
      s:put(c)
      assert.same({ 'delete n/a 1', 'delete n/b 1' }, s:replace { c }, 'round ' .. round)
      assert.same({ 'n/c' }, s:keys('n'))
      assert.same({ 'add n/a 1', 'add n/b 1', 'delete n/c 1' }, s:replace { a, b }, 'round ' .. round)
    end
  end)

  it('lets the later of two items with one key win within a replace, reporting the first', function()
    local s = testing.store()
    assert.same({ 'add a/p 1' }, s:replace { pod('a', 'p', '1'), pod('a', 'p', '2') })
    assert.equals('2', s:get('a/p').rv)
  end)

  it('lists a namespace\'s objects only, through deletes and reused entries', function()
    local s = testing.store()
    for i = 1, 1200 do s:put(pod(i % 2 == 0 and 'even' or 'odd', 'p' .. i, tostring(i))) end
    for i = 1, 1200, 3 do assert.is_not_nil(s:delete((i % 2 == 0 and 'even' or 'odd') .. '/p' .. i)) end
    for i = 1201, 1400 do s:put(pod('even', 'p' .. i, tostring(i))) end
    local want = {}
    for i = 1, 1400 do
      if (i > 1200 or (i % 2 == 0 and (i - 1) % 3 ~= 0)) then want[#want + 1] = 'even/p' .. i end
    end
    table.sort(want)
    assert.same(want, s:keys('even'))
    assert.same({}, s:keys('none'))
    assert.equals(1400 - 400, s:len())
    for _, key in ipairs(want) do assert.equals(key:match('p(%d+)$'), s:get(key).rv) end
  end)

  it('starts afresh once emptied', function()
    local s = testing.store()
    for i = 1, 600 do s:put(pod('a', 'p' .. i, '1')) end
    assert.equals(600, #s:replace {})
    assert.same({}, s:keys())
    assert.equals(0, s:len())
    s:put(pod('a', 'again', '9'))
    assert.same({ 'a/again' }, s:keys('a'))
    assert.equals('9', s:get('a/again').rv)
  end)

  -- A model of the store kept in Lua, against which random puts, deletes
  -- and replaces (paged relists end in one) are checked: keys of equal
  -- 32-bit hashes, runs shifted back by deletes, the table's growth to 7/8
  -- and its shrinking, reused entries and the namespace index all meet.
  it('agrees with a model through random puts, deletes and replaces', function()
    math.randomseed(20261206)
    local s, model = testing.store(), {}
    local function key(ns, name) return ns .. '/' .. name end
    local function random_object()
      local ns = 'ns' .. math.random(1, 7)
      return ns, 'p' .. math.random(1, 2500), tostring(math.random(1, 3))
    end
    local function check(round)
      local all, by_ns = {}, {}
      for k, o in pairs(model) do
        all[#all + 1] = k
        by_ns[o.ns] = by_ns[o.ns] or {}
        table.insert(by_ns[o.ns], k)
      end
      table.sort(all)
      assert.same(all, s:keys(), 'round ' .. round)
      assert.equals(#all, s:len(), 'round ' .. round)
      for i = 1, 7 do
        local want = by_ns['ns' .. i] or {}
        table.sort(want)
        assert.same(want, s:keys('ns' .. i), 'round ' .. round)
      end
      for k, o in pairs(model) do assert.equals(o.rv, s:get(k).rv, k) end
    end
    for round = 1, 60 do
      local op = math.random(1, 10)
      if op <= 6 then
        for _ = 1, math.random(1, 400) do
          local ns, name, rv = random_object()
          local k = key(ns, name)
          local had, old = s:put(pod(ns, name, rv))
          assert.equals(model[k] ~= nil, had, k)
          if had then assert.equals(pod(ns, name, model[k].rv), old) end
          model[k] = { ns = ns, rv = rv }
        end
      elseif op <= 8 then
        for _ = 1, math.random(1, 600) do
          local ns, name = random_object()
          local k = key(ns, name)
          local gone = s:delete(k)
          if model[k] then assert.equals(pod(ns, name, model[k].rv), gone) else assert.is_nil(gone) end
          model[k] = nil
        end
      else
        local items, next_model, want = {}, {}, {}
        for _ = 1, math.random(0, 1500) do
          local ns, name, rv = random_object()
          items[#items + 1] = pod(ns, name, rv)
          next_model[key(ns, name)] = { ns = ns, rv = rv, first_rv = (next_model[key(ns, name)] or { rv = rv }).first_rv or rv }
        end
        for k, o in pairs(next_model) do
          local was = model[k]
          -- Within one list the later item wins, and the first is reported.
          if not was then want[#want + 1] = 'add ' .. k .. ' ' .. o.first_rv
          elseif was.rv ~= o.first_rv then want[#want + 1] = 'update ' .. k .. ' ' .. o.first_rv end
        end
        for k, o in pairs(model) do
          if not next_model[k] then want[#want + 1] = 'delete ' .. k .. ' ' .. o.rv end
        end
        table.sort(want)
        assert.same(want, s:replace(items), 'round ' .. round)
        model = {}
        for k, o in pairs(next_model) do model[k] = { ns = o.ns, rv = o.rv } end
      end
      check(round)
    end
  end)
end)
