-- The store: one informer's cache from key ("ns/name" or "name") to object.
-- It keeps its entries in pages, reached from its table and its namespace
-- index by number (src/cache/store.c); these specs pin what a reader sees
-- through them: identities, bytes, changes, and entries reused after deletes.
-- Entries left unwritten are compressed by kl_store_compact, on a clock the
-- specs set (docs/architecture.md, "What a cached object costs"): whatever
-- reads them must get the JSON back, byte for byte.
local testing = require('klua_testing')

local function pod(ns, name, rv, extra)
  local md = { '"name":"' .. name .. '"' }
  if ns then md[#md + 1] = '"namespace":"' .. ns .. '"' end
  if rv then md[#md + 1] = '"resourceVersion":"' .. rv .. '"' end
  return '{"kind":"Pod","apiVersion":"v1","metadata":{' .. table.concat(md, ',') .. '}' .. (extra or '') .. '}'
end

-- A Pod with a spec and status of some size, as alike as real ones are.
local function big_pod(ns, name, rv, n)
  local containers = {}
  for c = 1, 3 do
    containers[c] = ('{"name":"c%d","image":"registry.example/team/app-%d:v1.%d","resources":{"limits":{"cpu":"500m",'
      .. '"memory":"256Mi"}},"env":[{"name":"POD_NAME","value":"%s"},{"name":"SLOT","value":"%d"}]}')
      :format(c, n % 7, n % 3, name, n)
  end
  return pod(ns, name, rv, (',"spec":{"nodeName":"node-%d","containers":[%s]},"status":{"phase":"Running",'
    .. '"podIP":"10.1.%d.%d","startTime":"2026-12-06T04:%02d:00Z"}'):format(n % 40, table.concat(containers, ','),
      n % 250, n % 200, n % 60))
end

-- Runs a whole pass of compaction with c; returns the slices it took and
-- when the next pass is due.
local function compact_all(s, c)
  local slices = 0
  while true do
    slices = slices + 1
    local more, due = s:compact(c)
    if not more then return slices, due end
  end
end

local SMALL = { after = 5, min_bytes = 0 }

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
  -- and its shrinking, reused entries and the namespace index all meet,
  -- and so do passes of compaction cut short at random.
  it('agrees with a model through random puts, deletes, replaces and compactions', function()
    math.randomseed(20261206)
    local s, model, now = testing.store(), {}, 0
    local function obj(ns, name, rv) return big_pod(ns, name, rv, tonumber(name:sub(2))) end
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
      for k, o in pairs(model) do assert.equals(obj(o.ns, k:match('/(.*)$'), o.rv), s:get(k).json, k) end
    end
    for round = 1, 60 do
      local op = math.random(1, 12)
      if op > 10 then
        now = now + math.random(0, 8)
        s:set_time(now)
        local c = { after = 5, min_bytes = 0, slice_entries = math.random(1, 3000), block_bytes = math.random(64, 8192) }
        for _ = 1, math.random(1, 4) do
          if not s:compact(c) then break end
        end
      elseif op <= 6 then
        for _ = 1, math.random(1, 400) do
          local ns, name, rv = random_object()
          local k = key(ns, name)
          local had, old = s:put(obj(ns, name, rv))
          assert.equals(model[k] ~= nil, had, k)
          if had then assert.equals(obj(ns, name, model[k].rv), old) end
          model[k] = { ns = ns, rv = rv }
        end
      elseif op <= 8 then
        for _ = 1, math.random(1, 600) do
          local ns, name = random_object()
          local k = key(ns, name)
          local gone = s:delete(k)
          if model[k] then assert.equals(obj(ns, name, model[k].rv), gone) else assert.is_nil(gone) end
          model[k] = nil
        end
      else
        local items, next_model, want = {}, {}, {}
        for _ = 1, math.random(0, 1500) do
          local ns, name, rv = random_object()
          items[#items + 1] = obj(ns, name, rv)
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

  describe('compressing what stays unwritten', function()
    local function fill(s, n)
      local want, by_ns = {}, { a = {}, b = {} }
      for i = 1, n do
        local ns = i % 2 == 0 and 'a' or 'b'
        local json = big_pod(ns, 'p' .. i, tostring(i), i)
        s:put(json)
        want[ns .. '/p' .. i] = json
        table.insert(by_ns[ns], json)
      end
      table.sort(by_ns.a)
      table.sort(by_ns.b)
      return want, by_ns
    end
    local function sorted_values(t)
      local out = {}
      for _, v in pairs(t) do out[#out + 1] = v end
      table.sort(out)
      return out
    end

    it('reads compressed objects back byte for byte through get, iteration and a namespace\'s', function()
      local s = testing.store()
      local want, by_ns = fill(s, 40)
      s:set_time(10)
      compact_all(s, SMALL)
      local z = s:compression()
      assert.equals(40, z.objects)
      assert.is_true(z.dict_bytes > 0)
      assert.is_true(z.bytes * 3 < z.json_bytes, 'compressed ' .. z.json_bytes .. ' to ' .. z.bytes)
      for key, json in pairs(want) do
        local got = s:get(key)
        assert.equals(json, got.json, key)
        assert.same({ key:match('^(%a)/'), key:match('/(.*)$'), key:match('(%d+)$') }, { got.ns, got.name, got.rv })
      end
      assert.same(sorted_values(want), s:objects())
      assert.same(by_ns.a, s:objects('a'))
      assert.same(by_ns.b, s:objects('b'))
      assert.equals(40, s:compression().objects, 'reads leave the stored form as it was')
    end)

    -- A resync or a late handler's replay queues every object at once
    -- (informer.c): decompressed then, the queue would hold the whole
    -- cache's JSON again.
    it('hands an iteration for a queue the compressed objects as their frames, unpacked byte for byte', function()
      local s = testing.store()
      local want = fill(s, 40)
      for key, o in pairs(s:packed()) do
        assert.same({ packed = false, held = #want[key], json = want[key] }, o, key)
      end
      s:set_time(10)
      compact_all(s, SMALL)
      s:put(big_pod('a', 'p2', '99', 2))
      want['a/p2'] = big_pod('a', 'p2', '99', 2)
      local held, json, n = 0, 0, 0
      for key, o in pairs(s:packed()) do
        n = n + 1
        assert.equals(want[key], o.json, key)
        assert.equals(key ~= 'a/p2', o.packed, key)
        if o.packed then held, json = held + o.held, json + #o.json end
      end
      assert.equals(40, n)
      assert.is_true(held * 3 < json, 'queued ' .. held .. ' bytes for ' .. json .. ' of JSON')
    end)

    it('leaves objects written less than `after` ago as they are, and says when the first comes due', function()
      local s = testing.store()
      s:put(big_pod('a', 'old', '1', 1))
      s:set_time(3)
      s:put(big_pod('a', 'new', '2', 2))
      s:set_time(6)
      local _, due = compact_all(s, SMALL)
      assert.equals(1, s:compression().objects)
      assert.equals(8, due)
      s:set_time(8)
      _, due = compact_all(s, SMALL)
      assert.equals(2, s:compression().objects)
      assert.is_nil(due)
      assert.equals(big_pod('a', 'new', '2', 2), s:get('a/new').json)
    end)

    it('hands the old object of a put and of a delete over as JSON', function()
      local s = testing.store()
      local want = fill(s, 10)
      s:set_time(10)
      compact_all(s, SMALL)
      local had, old = s:put(big_pod('a', 'p2', '99', 2))
      assert.same({ true, want['a/p2'] }, { had, old })
      assert.equals(want['b/p3'], s:delete('b/p3'))
      assert.equals(8, s:compression().objects)
    end)

    it('keeps an object written again as its new JSON, compressing it only `after` later', function()
      local s = testing.store()
      fill(s, 10)
      s:set_time(10)
      compact_all(s, SMALL)
      local again = big_pod('a', 'p4', '50', 4)
      s:put(again)
      local z = s:compression()
      assert.equals(9, z.objects)
      local _, due = compact_all(s, SMALL)
      assert.equals(9, s:compression().objects)
      assert.equals(15, due)
      s:set_time(15)
      compact_all(s, SMALL)
      assert.equals(10, s:compression().objects)
      assert.equals(again, s:get('a/p4').json)
    end)

    it('says a pass that began before a write is not the last one', function()
      local s = testing.store()
      fill(s, 20)
      s:set_time(10)
      assert.is_true((s:compact { after = 5, min_bytes = 0, slice_entries = 4 }))
      s:put(big_pod('a', 'p2', '7', 2)) -- behind the pass's cursor
      local _, due = compact_all(s, { after = 5, min_bytes = 0, slice_entries = 4 })
      assert.equals(15, due)
      assert.equals(19, s:compression().objects)
    end)

    it('compares a relist\'s resourceVersions without reporting unchanged compressed objects', function()
      local s = testing.store()
      local items = {}
      for i = 1, 12 do items[i] = big_pod('a', 'p' .. i, '1', i) end
      s:replace(items)
      s:set_time(10)
      compact_all(s, SMALL)
      assert.equals(12, s:compression().objects)
      local changes, olds = s:replace(items)
      assert.same({}, changes)
      assert.same({}, olds)
      assert.equals(12, s:compression().objects, 'unchanged objects stay compressed')
      local relist = {}
      for i = 2, 12 do relist[#relist + 1] = i == 5 and big_pod('a', 'p5', '2', 5) or items[i] end
      relist[#relist + 1] = big_pod('a', 'p5', '3', 55) -- the later item of one key wins
      changes, olds = s:replace(relist)
      assert.same({ 'delete a/p1 1', 'update a/p5 2' }, changes)
      assert.same({ ['a/p1'] = items[1], ['a/p5'] = items[5] }, olds)
      assert.equals(big_pod('a', 'p5', '3', 55), s:get('a/p5').json)
      assert.equals(10, s:compression().objects)
    end)

    it('bounds a slice by the JSON it compresses and by the entries it looks at', function()
      local s = testing.store()
      fill(s, 60)
      local size = #big_pod('a', 'p1', '1', 1)
      s:set_time(10)
      assert.is_true((s:compact { after = 5, min_bytes = 0, slice_bytes = 3 * size }))
      local first = s:compression().objects
      assert.is_true(first >= 3 and first <= 4, first .. ' compressed by the first slice')
      local slices = compact_all(s, { after = 5, min_bytes = 0, slice_bytes = 3 * size })
      assert.is_true(slices >= 57 / 4, slices .. ' slices')
      assert.equals(60, s:compression().objects)

      local t = testing.store()
      fill(t, 60)
      t:set_time(10)
      assert.is_true((t:compact { after = 5, min_bytes = 0, slice_entries = 7 }))
      assert.equals(7, t:compression().objects)
      -- 53 entries left, 7 a slice: the eighth ends the pass
      assert.equals(8, (compact_all(t, { after = 5, min_bytes = 0, slice_entries = 7 })))
    end)

    it('moves the compressed objects of blocks mostly dead to the current one, freeing those blocks', function()
      local s = testing.store()
      local want = fill(s, 200)
      local c = { after = 5, min_bytes = 0, block_bytes = 2048 }
      s:set_time(10)
      compact_all(s, c)
      local laid = s:compression().block_bytes
      assert.is_true(laid >= 8 * 2048, laid .. ' bytes of blocks')
      -- Nine objects in ten written again: each block keeps a tenth of its frames.
      for i = 1, 200 do
        if i % 10 ~= 0 then s:put(big_pod(i % 2 == 0 and 'a' or 'b', 'p' .. i, 'x' .. i, i)) end
      end
      compact_all(s, c) -- at 10, before any of them comes due
      local z = s:compression()
      assert.equals(20, z.objects)
      assert.is_true(z.block_bytes * 3 < laid, laid .. ' bytes of blocks, then ' .. z.block_bytes)
      for i = 10, 200, 10 do
        local key = (i % 2 == 0 and 'a' or 'b') .. '/p' .. i
        local got = s:get(key)
        assert.same({ want[key], 'p' .. i, tostring(i) }, { got.json, got.name, got.rv }, key)
      end
    end)

    it('lays a compressed object larger than a block in one of its own, the current block laid on', function()
      local s = testing.store()
      local want = {}
      math.randomseed(7)
      local alphabet = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/'
      for i = 1, 40 do
        local json
        if i % 4 == 0 then -- base64-like data: compresses to ~0.75, a frame past the block
          local chars = {}
          for c = 1, 12000 do
            local k = math.random(1, 64)
            chars[c] = alphabet:sub(k, k)
          end
          json = '{"kind":"Secret","apiVersion":"v1","metadata":{"name":"s' .. i .. '","namespace":"a",'
            .. '"resourceVersion":"1"},"data":{"blob":"' .. table.concat(chars) .. '"}}'
        else
          json = big_pod('a', 'p' .. i, '1', i)
        end
        s:put(json)
        want['a/' .. (i % 4 == 0 and 's' or 'p') .. i] = json
      end
      s:set_time(10)
      compact_all(s, { after = 5, min_bytes = 0, block_bytes = 8192 })
      local z = s:compression()
      assert.equals(40, z.objects)
      -- Each frame's header and identity (under 64 B) beside its zstd frame,
      -- and the current block's room: no block left mostly empty.
      assert.is_true(z.block_bytes < z.bytes + 40 * 64 + 2 * 8192,
        z.block_bytes .. ' bytes of blocks for ' .. z.bytes .. ' compressed')
      for key, json in pairs(want) do assert.equals(json, s:get(key).json, key) end
    end)

    it('makes no dictionary while the store holds less JSON than min_bytes', function()
      local s = testing.store()
      fill(s, 10)
      s:set_time(10)
      local more, due = s:compact { after = 5, min_bytes = 1024 * 1024 }
      assert.same({ false, nil }, { more, due })
      assert.same({ objects = 0, bytes = 0, json_bytes = 0, dict_bytes = 0, block_bytes = 0 }, s:compression())
    end)

    -- Objects larger than the dictionary are sampled once, from the first
    -- entry on: a deleted first entry must not leave the store without one.
    it('makes its dictionary of objects larger than it when the first entry was deleted', function()
      local s = testing.store()
      local want = {}
      for i = 1, 20 do
        local lines = {}
        for l = 1, 1500 do lines[l] = ('"line-%d":"value %d of configmap %d, the same shape as the rest"'):format(l, l % 17, i) end
        local json = '{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"c' .. i .. '","namespace":"a",'
          .. '"resourceVersion":"1"},"data":{' .. table.concat(lines, ',') .. '}}'
        s:put(json)
        want['a/c' .. i] = json
      end
      s:delete('a/c1')
      want['a/c1'] = nil
      s:set_time(10)
      compact_all(s, { after = 5 })
      local z = s:compression()
      assert.equals(19, z.objects)
      assert.equals(64 * 1024, z.dict_bytes)
      for key, json in pairs(want) do assert.equals(json, s:get(key).json, key) end
    end)

    it('leaves an object that would shrink by less than an eighth as JSON, and does not try it again', function()
      local s = testing.store()
      fill(s, 10)
      local tiny = '{"metadata":{"name":"x"}}' -- a zstd frame's header is most of what it would become
      s:put(tiny)
      s:set_time(10)
      local _, due = compact_all(s, SMALL)
      assert.is_nil(due)
      assert.equals(10, s:compression().objects)
      assert.equals(tiny, s:get('x').json)
    end)

    it('ends a pass whose store emptied under it, and frees every compressed object', function()
      local s = testing.store()
      local want = fill(s, 30)
      s:set_time(10)
      assert.is_true((s:compact { after = 5, min_bytes = 0, slice_entries = 10 }))
      assert.equals(30, #s:replace {})
      assert.same({ false, nil }, { s:compact(SMALL) })
      assert.same({ objects = 0, bytes = 0, json_bytes = 0, block_bytes = 0 },
        (function(z) return { objects = z.objects, bytes = z.bytes, json_bytes = z.json_bytes,
          block_bytes = z.block_bytes } end)(s:compression()))
      s:put(want['a/p2'])
      s:set_time(20)
      compact_all(s, SMALL)
      assert.equals(1, s:compression().objects, 'the dictionary outlives the objects it came from')
      assert.equals(want['a/p2'], s:get('a/p2').json)
    end)
  end)
end)
