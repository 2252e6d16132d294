-- Objects reach Lua as lazy read-only views over their JSON bytes. For
-- reading, a view is indistinguishable from the fully decoded object;
-- writing needs klua.copy(obj), which gives a plain mutable table. Views have
-- no methods: every member reads as itself, whatever its name, and what a
-- script does beyond reading is a function of the klua module (here the same
-- functions as testing.copy, testing.get and testing.type).
local testing = require('klua_testing')
local reference = require('fixtures.json.reference')
local cjson = require('cjson')

local json, null = testing.json, testing.null
local copy, get = testing.copy, testing.get

-- Every way a handler or a cache lookup gets a view of an object's JSON.
local makers = {
  ['a cached object (parsed on first access)'] = function(text) return testing.view(text) end,
  ['a watch event (reusing the event parse)'] = function(text)
    return assert(testing.event_view('{"type":"ADDED","object":' .. text .. '}'))
  end,
}

local function is_view(v) return type(v) == 'userdata' and v ~= null end

-- Asserts that the view v reads exactly as the reference value r, through
-- indexing, klua.get, pairs, ipairs, # and tostring.
local function assert_reads_as(v, r, path)
  if type(r) == 'table' and r.kind == 'object' then
    assert(is_view(v), path .. ': expected a view of an object')
    assert.equals(0, #v, path)
    local i = 0
    for k, x in pairs(v) do
      i = i + 1
      assert.equals(r.keys[i], k, path .. ': member order')
      assert_reads_as(x, r.values[k], path .. '.' .. k)
    end
    assert.equals(#r.keys, i, path .. ': member count')
    for k, x in pairs(v) do
      assert.equals(x, v[k], path .. '.' .. k .. ': index')
      assert.equals(x, get(v, k), path .. '.' .. k .. ': klua.get')
    end
    assert.same(r, reference.decode(tostring(v)), path .. ': tostring')
  elseif type(r) == 'table' and r.kind == 'array' then
    assert(is_view(v), path .. ': expected a view of an array')
    assert.equals(r.n, #v, path .. ': length')
    local n = 0
    for i, x in ipairs(v) do
      n = i
      assert_reads_as(x, r.items[i], path .. '[' .. i .. ']')
    end
    assert.equals(r.n, n, path .. ': ipairs')
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = k end
    assert.equals(r.n, #keys, path .. ': pairs')
    for i, x in pairs(v) do
      assert.equals(keys[i], i, path .. ': pairs order')
      assert.equals(x, v[i], path .. '[' .. i .. ']')
    end
    assert.is_nil(v[0], path)
    assert.is_nil(v[r.n + 1], path)
    assert.same(r, reference.decode(tostring(v)), path .. ': tostring')
  elseif r == reference.null then
    assert.equals(null, v, path)
  else
    assert.equals(type(r), type(v), path)
    assert.equals(math.type(r), math.type(v), path .. ': number subtype')
    assert.equals(r, v, path)
  end
end

local assert_decoded_as = reference.assert_decoded_as

-- Asserts that the view reads as lua-cjson decodes the same text: same
-- structure, strings and numeric values (lua-cjson makes every number a
-- float, so only values are compared).
local function assert_like_cjson(v, c, path)
  if type(c) == 'table' then
    assert(is_view(v), path)
    local n = 0
    for k, x in pairs(v) do
      n = n + 1
      assert_like_cjson(x, c[k], path .. '.' .. tostring(k))
    end
    local m = 0
    for _ in pairs(c) do m = m + 1 end
    assert.equals(m, n, path)
  elseif c == cjson.null then
    assert.equals(null, v, path)
  elseif type(c) == 'number' then
    assert.equals(c, v + 0.0, path) -- as a float, like lua-cjson's
  else
    assert.equals(c, v, path)
  end
end

for how, make in pairs(makers) do
  describe('a view of ' .. how, function()
    for _, name in ipairs(reference.objects) do
      it('reads ' .. name .. ' exactly as the decoded JSON, in order and with integer subtypes', function()
        local text = reference.fixture(name)
        assert_reads_as(make(text), reference.decode(text), name)
      end)

      it('reads ' .. name .. ' as lua-cjson decodes it', function()
        local text = reference.fixture(name)
        assert_like_cjson(make(text), cjson.decode(text), name)
      end)

      it('copies ' .. name .. ' into plain tables equal to the decoded JSON', function()
        local text = reference.fixture(name)
        assert_decoded_as(copy(make(text)), reference.decode(text), name)
      end)

      it('gives the exact bytes of ' .. name .. ' from tostring and klua.json.encode', function()
        local text = reference.fixture(name)
        local v = make(text)
        assert.equals(text, tostring(v))
        assert.equals(text, json.encode(v))
      end)
    end

    it('gives the exact bytes of a nested value, whitespace and escapes included', function()
      local text = reference.fixture('pod-indented.json')
      local v = make(text)
      local s = tostring(v.metadata.ownerReferences)
      assert.truthy(text:find(s, 1, true))
      assert.equals('[', s:sub(1, 1))
      assert.equals(']', s:sub(-1))
      local e = make(reference.fixture('escapes.json'))
      assert.truthy(tostring(e.metadata.annotations):find('"quote \\" backslash \\\\ slash \\/ done"', 1, true))
      assert.equals(
        '{"key with spaces":"v","dotted.key.name":"v2","\\"quoted\\" key":"v3","":"empty key","back\\\\slash":"\\\\"}',
        tostring(e.data))
    end)
  end)
end

describe('a view', function()
  local pod = reference.fixture('pod.json')

  it('reads nested fields like a table', function()
    local v = testing.view(pod)
    assert.equals('Pod', v.kind)
    assert.equals('default', v.metadata.namespace)
    assert.equals('ReplicaSet', v.metadata.ownerReferences[1].kind)
    assert.equals(8080, v.spec.containers[1].ports[1].containerPort)
    assert.equals('integer', math.type(v.spec.containers[1].ports[1].containerPort))
    assert.is_true(v.metadata.ownerReferences[1].controller)
    assert.equals(null, v.status.conditions[1].lastProbeTime)
  end)

  it('gives nil for missing keys and for keys of the wrong kind', function()
    local v = testing.view(pod)
    assert.is_nil(v.nope)
    assert.is_nil(v.metadata.labels.nope)
    assert.is_nil(v[1])
    assert.is_nil(v.spec.containers.name)
    assert.is_nil(v.spec.containers['1'])
    assert.is_nil(v.spec.containers[1.5])
    assert.is_nil(v[true])
  end)

  it('accepts a float key with an integer value on arrays, as tables do', function()
    local v = testing.view(pod)
    assert.equals(v.spec.containers[1].name, v.spec.containers[1.0].name)
  end)

  it('walks an array in any order of indices', function()
    local v = testing.view('[10,20,30,40,50]')
    assert.same({ 50, 10, 30, 20, 40, 40, 10 }, { v[5], v[1], v[3], v[2], v[4], v[4], v[1] })
  end)

  -- A walk of an array goes on from where the last walk of the same array in the same object
  -- stopped, through a new view of the array each time (obj.a[i] for i = 1, n), and starts over
  -- for another array or an element before it.
  it('walks arrays reached anew for each element, interleaved and in any order, element by element', function()
    local v = testing.view('{"a":[{"x":1},[2,22],{"x":3},4,5],"b":[6,[7,77],8],"c":{"d":[9,10]}}')
    local order = { { 'a', 1 }, { 'a', 3 }, { 'b', 2 }, { 'a', 4 }, { 'a', 2 }, { 'c', 2 }, { 'a', 5 },
      { 'b', 3 }, { 'b', 1 }, { 'a', 6 }, { 'a', 5 }, { 'c', 1 } }
    local got = {}
    for _, step in ipairs(order) do
      local k, i = step[1], step[2]
      local arr = k == 'c' and v.c.d or v[k]
      local e = arr[i]
      got[#got + 1] = type(e) == 'userdata' and testing.json.encode(e) or tostring(e)
      local again = k == 'c' and get(v, 'c', 'd', i) or get(v, k, i)
      assert.equals(e, again, k .. '[' .. i .. '] through klua.get')
    end
    assert.same({ '{"x":1}', '{"x":3}', '[7,77]', '4', '[2,22]', '10', '5', '8', '6', 'nil', '5', '9' }, got)
  end)

  it('reads a JSON null as klua.null, which is cjson.null, and keeps ipairs going past it', function()
    local v = testing.view('[null,1,null]')
    assert.equals(cjson.null, v[1])
    local seen = {}
    for i, x in ipairs(v) do seen[i] = x end
    assert.same({ null, 1, null }, seen)
  end)

  it('compares equal to another view of the same value', function()
    local v = testing.view(pod)
    assert.equals(v.metadata, v.metadata)
    assert.are_not.equal(v.metadata, v.spec)
    assert.are_not.equal(v.metadata, testing.view(pod).metadata)
  end)

  it('reads integers beyond 64 bits and numbers with a fraction or exponent as floats', function()
    local v = testing.view(reference.fixture('numbers.json'))
    assert.equals('integer', math.type(v.ints[11]))
    assert.equals(math.maxinteger, v.ints[11])
    assert.equals(math.mininteger, v.ints[12])
    assert.equals('float', math.type(v.beyond64[1]))
    assert.equals(2.0 ^ 63, v.beyond64[1])
    assert.equals(1.2345678901234568e29, v.beyond64[5])
    assert.equals('float', math.type(v.floats[3]))
    assert.equals(3.0, v.floats[3])
    assert.equals('float', math.type(v.floats[10]))
    assert.equals(100.0, v.floats[10])
    assert.equals(1e20, v.mixed.big)
  end)

  describe('members named like operations', function()
    local text = reference.fixture('method-names.json')

    it('read as the members, whatever their name', function()
      local v = testing.view(text)
      assert.equals('a field named copy', v.copy)
      assert.is_true(v.json.nested)
      assert.equals(3, #v.get)
      assert.equals(1, v.spec.copy)
      assert.equals(2, v.spec.json)
      assert.equals(3, v.spec.get)
    end)

    it('read nil when missing, not a function', function()
      local v = testing.view(pod)
      assert.is_nil(v.copy)
      assert.is_nil(v.json)
      assert.is_nil(v.get)
      assert.is_nil(v.metadata.labels.copy)
    end)

    it('let a label copy=yes be seen (a controller acting on it)', function()
      local v = testing.view('{"metadata":{"labels":{"copy":"yes","get":"no","json":"1"}}}')
      assert.equals('yes', v.metadata.labels.copy)
      assert.equals('no', v.metadata.labels.get)
      assert.equals('1', v.metadata.labels.json)
    end)

    it('leave fields that merely look special alone', function()
      local v = testing.view(text)
      assert.equals('not a metamethod', v.spec.__index)
      assert.equals('string key one', v.spec['1'])
      assert.is_nil(v.spec[1])
    end)

    it('make a call in the old method style fail as a call of the member, with Lua\'s own message', function()
      local v = testing.view(pod)
      local ok, err = pcall(function() return v:copy() end)
      assert.is_false(ok)
      assert.truthy(err:find("attempt to call a nil value (method 'copy')", 1, true), err)
      ok, err = pcall(function() return testing.view(text).spec:json() end)
      assert.is_false(ok)
      assert.truthy(err:find("attempt to call a number value (method 'json')", 1, true), err)
    end)
  end)

  describe('is read-only', function()
    local message = "klua: cannot set field 'name': objects from the cache are read-only; "
      .. 'use klua.edit(obj) or klua.copy(obj) to change it'

    it('refuses writes with a message that says what to do', function()
      local v = testing.view(pod)
      local ok, err = pcall(function() v.metadata.name = 'x' end)
      assert.is_false(ok)
      assert.truthy(err:find(message, 1, true), err)
      assert.equals('auth-b4ec5339db-0cc23', v.metadata.name)
    end)

    it('refuses new fields, array writes and rawset', function()
      local v = testing.view(pod)
      assert.has_error(function() v.newfield = 1 end)
      assert.has_error(function() v.spec.containers[1] = {} end)
      assert.has_error(function() v.spec.containers[2] = {} end)
      assert.has_error(function() rawset(v, 'kind', 'x') end)
      assert.has_error(function() table.insert(v.spec.containers, {}) end)
      assert.equals('Pod', v.kind)
    end)
  end)

  describe('klua.copy', function()
    it('gives a mutable table independent of the view and of other copies', function()
      local v = testing.view(pod)
      local a, b = copy(v), copy(v)
      a.metadata.name = 'changed'
      a.metadata.labels.extra = 'yes'
      table.insert(a.spec.containers, { name = 'sidecar' })
      assert.equals('auth-b4ec5339db-0cc23', b.metadata.name)
      assert.is_nil(b.metadata.labels.extra)
      assert.equals(1, #b.spec.containers)
      assert.equals('auth-b4ec5339db-0cc23', v.metadata.name)
      assert.equals(1, #v.spec.containers)
    end)

    it('copies a nested view on its own', function()
      local v = testing.view(pod)
      local c = copy(v.metadata.labels)
      assert.same({ app = 'auth', ['pod-template-hash'] = 'b4ec5339db' }, c)
      assert.is_nil(getmetatable(c))
    end)

    it('copies members named like operations as members', function()
      local c = copy(testing.view(reference.fixture('method-names.json')))
      assert.equals('a field named copy', c.copy)
      assert.same({ copy = 1, json = 2, get = 3, __index = 'not a metamethod', ['1'] = 'string key one' }, c.spec)
    end)

    it('marks arrays, including empty ones, so they encode as arrays', function()
      local c = copy(testing.view(reference.fixture('nulls-and-empties.json')))
      assert.equals(json.array_mt, getmetatable(c.metadata.finalizers))
      assert.equals(0, #c.metadata.finalizers)
      assert.equals('[]', json.encode(c.metadata.finalizers))
      assert.equals('{}', json.encode(c.metadata.labels))
      assert.equals(null, c.metadata.annotations)
    end)

    it('is what kl_view_copy pushes', function()
      local v = testing.view(pod)
      assert.same(copy(v), testing.view_copy(v))
      assert.has_error(function() testing.view_copy({}) end)
    end)

    it('deep-copies a plain table as it copies a view: the copy of a copy equals it and is independent', function()
      local v = testing.view(pod)
      local a = copy(v)
      local b = copy(a)
      assert.same(a, b)
      assert.are_not.equal(a.metadata, b.metadata)
      assert.equals(json.array_mt, getmetatable(b.spec.containers))
      b.metadata.labels.app = 'changed'
      assert.equals('auth', a.metadata.labels.app)
    end)

    it('decodes views held inside a table, keeps shared parts shared and copies cycles', function()
      local v = testing.view(pod)
      local shared = { n = 1 }
      local t = { labels = v.metadata.labels, a = shared, b = shared }
      t.self = t
      local c = copy(t)
      assert.equals('table', type(c.labels))
      assert.equals('auth', c.labels.app)
      assert.equals(c.a, c.b)
      assert.are_not.equal(shared, c.a)
      assert.equals(c, c.self)
    end)

    it('gives any other value back as it is', function()
      assert.equals('x', copy('x'))
      assert.equals(3, copy(3))
      assert.equals(null, copy(null))
      assert.is_nil(copy(nil))
      assert.is_false(copy(false))
      assert.equals(print, copy(print))
      assert.has_error(function() copy() end)
    end)

    -- The strings of a copy come from a cache of recent short strings (lua_json.c), one a
    -- slot, chosen by the length and the first and last 8 bytes: strings that share those
    -- take turns in one slot, and each must still come out as itself.
    describe('of strings', function()
      local function object_text(members)
        local parts = {}
        for i, m in ipairs(members) do parts[i] = cjson.encode(m[1]) .. ':' .. cjson.encode(m[2]) end
        return '{' .. table.concat(parts, ',') .. '}'
      end

      it('keeps strings apart that differ only between their first and last 8 bytes', function()
        local members, want = {}, {}
        for i = 0, 9 do
          local s = 'sameHead' .. string.char(65 + i) .. 'sameTail' -- 17 bytes, one slot
          members[#members + 1] = { s, s .. '=' }
          want[s] = s .. '='
        end
        for _ = 1, 3 do assert.same(want, copy(testing.view(object_text(members)))) end
      end)

      it('keeps the same name as a member of objects at every level, and as a value', function()
        local text = '{"name":"name","metadata":{"name":"a","labels":{"name":"b"},'
          .. '"ownerReferences":[{"name":"c","kind":"name"}]},"spec":{"containers":[{"name":"d"},{"name":"e"}]}}'
        local want = {
          name = 'name',
          metadata = { name = 'a', labels = { name = 'b' }, ownerReferences = { { name = 'c', kind = 'name' } } },
          spec = { containers = { { name = 'd' }, { name = 'e' } } },
        }
        for _, make in pairs(makers) do
          local c = copy(make(text))
          assert.same(want, c)
          c.metadata.name = 'changed'
          assert.equals('b', c.metadata.labels.name)
          assert.same(want, copy(make(text)))
        end
      end)

      it('gives every string its exact bytes around the 40 bytes Lua interns, and empty and NUL ones', function()
        local members, want = {}, {}
        for n = 0, 48 do
          local s = ('k'):rep(n)
          local v = ('v'):rep(n)
          members[#members + 1] = { s, v }
          want[s] = v
        end
        members[#members + 1] = { 'nul', 'a\0b' }
        want.nul = 'a\0b'
        for _ = 1, 2 do
          local c = copy(testing.view(object_text(members)))
          assert.same(want, c)
          assert.equals(3, #c.nul)
        end
      end)

      it('stays exact through more distinct strings than the cache holds', function()
        local members, want = {}, {}
        for i = 1, 5000 do
          members[i] = { 'key-' .. i, 'value-' .. (i * 7919 % 5000) }
          want['key-' .. i] = 'value-' .. (i * 7919 % 5000)
        end
        local text = object_text(members)
        for _ = 1, 2 do assert.same(want, copy(testing.view(text))) end
        assert.same(want, json.decode(text))
      end)

      it('stays exact after the cache was changed behind its back', function()
        local text = '{"kind":"Pod","metadata":{"name":"one","namespace":"default"}}'
        local want = { kind = 'Pod', metadata = { name = 'one', namespace = 'default' } }
        assert.same(want, copy(testing.view(text)))
        local cache = debug.getregistry()['klua.json.strings']
        assert.equals('userdata', type(cache))
        local anchors = debug.getuservalue(cache, 1)
        for i = 1, #anchors do anchors[i] = 'tampered' end
        assert.same(want, copy(testing.view(text)))
        debug.setuservalue(cache, {}, 1)
        assert.same(want, copy(testing.view(text)))
        assert.same(want, json.decode(text))
      end)
    end)

    it('refuses a table nested deeper than 1024 levels', function()
      local t = {}
      for _ = 1, 1100 do t = { t } end
      local ok, err = pcall(copy, t)
      assert.is_false(ok)
      assert.truthy(err:find('klua.copy: a table nested deeper than 1024 levels', 1, true), err)
    end)
  end)

  describe('klua.get', function()
    local v = testing.view(pod)

    it('reads a nested member of a view or a table alike', function()
      assert.equals('auth', get(v, 'metadata', 'labels', 'app'))
      assert.equals('auth', get(copy(v), 'metadata', 'labels', 'app'))
      assert.equals(v.spec.containers[1].name, get(v, 'spec', 'containers', 1, 'name'))
      assert.equals(v.spec.containers[1].name, get(copy(v), 'spec', 'containers', 1, 'name'))
    end)

    it('gives nil, never an error, as soon as a step is missing or has no members', function()
      assert.is_nil(get(v, 'metadata', 'nope', 'app'))
      assert.is_nil(get(v, 'metadata', 'name', 'len')) -- a string has no members (not string.len)
      assert.is_nil(get(testing.view('{"a":null}'), 'a', 'b'))
      assert.is_nil(get(nil, 'a'))
      assert.is_nil(get(42, 'a'))
      assert.is_nil(get(v, 'spec', 'containers', 9, 'name'))
      assert.is_nil(get(v, 'metadata', {}))
      assert.is_nil(get({}, nil))
    end)

    it('reads members named like operations', function()
      local w = testing.view(reference.fixture('method-names.json'))
      assert.equals('a field named copy', get(w, 'copy'))
      assert.equals(3, get(w, 'spec', 'get'))
    end)

    it('gives the value itself without keys', function()
      assert.equals(v, get(v))
      assert.equals(7, get(7))
    end)

    it('walks from a table into a view it holds, and gives an object or array reached as a view', function()
      assert.equals('auth', get({ pod = v }, 'pod', 'metadata', 'labels', 'app'))
      assert.equals(v.metadata.labels, get({ pod = v }, 'pod', 'metadata', 'labels'))
      assert.equals(v.spec.containers[1], get(v, 'spec', 'containers', 1))
      assert.equals(v.spec.containers, get(v, 'spec', 'containers'))
      assert.is_nil(get(v, 'spec', 'containers', 1.5))
      assert.is_nil(get(v, 'spec', 'containers', 'name'))
      assert.is_nil(get(v, 'metadata', 1))
    end)

    it('gives a view that keeps its object alive once the view it came from is gone', function()
      local container = get(testing.view(pod), 'spec', 'containers', 1)
      collectgarbage()
      collectgarbage()
      assert.equals(v.spec.containers[1].name, container.name)
      assert.equals(tostring(v.spec.containers[1]), tostring(container))
    end)
  end)

  describe('klua.type', function()
    local type_of = testing.type

    it('names the JSON type of a view and of the plain value alike', function()
      local text = '{"o":{},"a":[],"s":"x","n":1.5,"i":2,"t":true,"f":false,"z":null}'
      local v, t = testing.view(text), json.decode(text)
      for _, x in ipairs { v, t } do
        assert.equals('object', type_of(x))
        assert.equals('object', type_of(x.o))
        assert.equals('array', type_of(x.a))
        assert.equals('string', type_of(x.s))
        assert.equals('number', type_of(x.n))
        assert.equals('number', type_of(x.i))
        assert.equals('boolean', type_of(x.t))
        assert.equals('boolean', type_of(x.f))
        assert.equals('null', type_of(x.z))
        assert.equals('nil', type_of(x.missing))
      end
      assert.equals('array', type_of(testing.view('[1]')))
      assert.equals('string', type_of(testing.view('"top"')))
    end)

    it('names a table as klua.json.encode would write it, and Lua\'s type for the rest', function()
      assert.equals('array', type_of({ 1, 2 }))
      assert.equals('array', type_of(json.array()))
      assert.equals('object', type_of({}))
      assert.equals('object', type_of({ a = 1 }))
      assert.equals('table', type_of({ 1, a = 2 }))
      assert.equals('function', type_of(print))
      assert.has_error(function() type_of() end)
    end)

    it('is needed because type(view) is "userdata"', function()
      assert.equals('userdata', type(testing.view(pod)))
    end)
  end)

  describe('lifetime', function()
    it('keeps its object readable after every other holder is gone', function()
      local v = testing.view(pod) -- the helper has already dropped its own reference
      collectgarbage()
      collectgarbage()
      assert.equals('auth-b4ec5339db-0cc23', v.metadata.name)
      assert.equals(pod, tostring(v))
    end)

    it('keeps a nested view readable after its root is collected', function()
      local labels = testing.view(pod).metadata.labels
      collectgarbage()
      collectgarbage()
      assert.equals('auth', labels.app)
      assert.equals('{"app":"auth","pod-template-hash":"b4ec5339db"}', tostring(labels))
    end)

    it('shows a script the name of its metatable, not the table every view shares', function()
      for _, v in ipairs({ testing.view(pod), assert(testing.event_view('{"type":"ADDED","object":' .. pod .. '}')) }) do
        assert.equals('klua.view', getmetatable(v))
        assert.equals('klua.view', getmetatable(v.metadata))
        assert.equals('auth-b4ec5339db-0cc23', v.metadata.name)
      end
    end)

    it('holds one reference on the object bytes, released when the last view is collected', function()
      local v, probe = testing.view_probe(pod)
      local spec = v.spec
      assert.equals(1, probe())
      v = nil
      collectgarbage()
      collectgarbage()
      assert.equals(1, probe())
      assert.equals('Always', spec.restartPolicy)
      spec = nil
      collectgarbage()
      collectgarbage()
      assert.equals(0, probe())
    end)
  end)

  it('counts the bytes it keeps alive, so that garbage views of big objects are collected promptly', function()
    local big = '{"data":"' .. string.rep('x', 1024 * 1024) .. '"}'
    local v, probe = testing.view_probe(big)
    v = nil
    collectgarbage()
    collectgarbage()
    assert.equals(0, probe())
    for _ = 1, 100 do
      local w = probe:view()
      assert.equals('userdata', type(w))
    end
    assert.is_true(probe() < 50, probe())
  end)

  -- A root view has a finalizer (it drops its blob), so a dead one is kept for one
  -- more cycle, and with it whatever it holds in Lua memory: counted in the heap size
  -- that sets the next cycle's threshold (that size times the pause), a parsed form
  -- kept there would raise each threshold more than the last once the pause is over
  -- 200, and the heap would grow without bound on a stream of events read a field at
  -- a time (docs/benchmarks.md, "How the views' finalizers set the collector's pace").
  for what, make in pairs(makers) do
    it('keeps the heap bounded under a pause of 400, made as ' .. what, function()
      local text = pod:gsub('"metadata":{', '"metadata":{"annotations":{"note":"' .. ('n'):rep(4000) .. '"},', 1)
      collectgarbage()
      local live, most = collectgarbage('count'), 0
      local ok, err = pcall(function()
        collectgarbage('incremental', 400, 100)
        for _ = 1, 20000 do
          local v = make(text)
          assert(v.metadata.name)
          most = math.max(most, collectgarbage('count'))
        end
      end)
      collectgarbage('incremental', 200, 100)
      assert(ok, err)
      -- at most 4 times the heap after a collection, with a margin
      assert.is_true(most < 8 * live, ('%.0f KB at most, %.0f KB live'):format(most, live))
    end)
  end

  -- Lua calls the finalizers of one cycle's dead objects newest first, so a table with
  -- a __gc made before a view it holds is finalized after the view's root, which has
  -- let go of the object's bytes and parsed form by then.
  for what, make in pairs(makers) do
    it('raises, not crashes, when a __gc handler reads it after its object was collected, made as ' .. what,
      function()
        local reads
        local holder = setmetatable({}, { __gc = function(h)
          reads = {}
          for _, read in ipairs({ function() return h.root.metadata.name end,
            function() return h.child.name end, function() return tostring(h.root) end,
            function() return tostring(h.child) end, function() return testing.copy(h.child) end,
            function() return testing.view_json(h.root) end }) do
            local ok, err = pcall(read)
            reads[#reads + 1] = ok and 'read' or err:match('klua: .*')
          end
        end })
        holder.root = make(pod)
        holder.child = holder.root.metadata
        holder = nil
        collectgarbage()
        collectgarbage()
        assert.same(('klua: a view read after its object was collected (from a __gc handler?)'):rep(6, '\n'),
          table.concat(reads, '\n'))
      end)
  end

  it('exposes its bytes to C through kl_view_write, and nothing for other values', function()
    local v = testing.view(pod)
    assert.equals(pod, testing.view_json(v))
    assert.equals(tostring(v.status), testing.view_json(v.status))
    assert.is_nil(testing.view_json({}))
    assert.is_nil(testing.view_json('{}'))
  end)

  it('reports a stored object that is not valid JSON when it is first read', function()
    local v = testing.view('{"metadata":{"name":"x"},}')
    local ok, err = pcall(function() return v.metadata end)
    assert.is_false(ok)
    assert.truthy(err:find('a cached object is not valid JSON at byte 25', 1, true), err)
  end)
end)
