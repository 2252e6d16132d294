-- The object a transform is given takes writes, as the object a client-go
-- TransformFunc is given does: `obj.metadata.managedFields = nil; return obj`.
-- Writes are recorded beside the object's bytes, not applied to them: reads,
-- pairs, #, klua.get and klua.copy see them, and the JSON klua caches is the
-- bytes with each edited object or array written member by member, every
-- member not written to copied byte for byte (src/lua/view.c, "edits").
local testing = require('klua_testing')
local cjson = require('cjson')

local copy, get, null = testing.copy, testing.get, testing.null

-- Members whose bytes a decode and an encode would not give back as they are:
-- a float's trailing zero, an escaped slash, a space after a colon.
local POD = '{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web-1","namespace":"default",'
  .. '"labels":{"app":"web","tier":"front"},"managedFields":[{"manager":"kubectl","fieldsV1":{"f:metadata":{}}}],'
  .. '"uid":"u-1","resourceVersion":"7"},"spec":{"ratio":1.50,"path":"a\\/b","containers":'
  .. '[{"name":"a","image":"nginx"},{"name":"b","image":"redis"},{"name":"c","image":"envoy"}]},'
  .. '"status":{"phase": "Running"}}'

local function edit() return testing.editable_view(POD) end

-- What klua caches of v: kl_view_write's text.
local function written(v) return testing.view_json(v) end

local function names(arr)
  local out = {}
  for i, c in ipairs(arr) do out[i] = c.name end
  return table.concat(out, ',')
end

describe('the object a transform is given', function()
  it('writes its own bytes when nothing was written to it', function()
    assert.equals(POD, written(edit()))
    assert.equals(POD, tostring(edit()))
  end)

  it('drops a member set to nil, and copies every member not written byte for byte', function()
    local v = edit()
    v.metadata.managedFields = nil
    assert.is_nil(v.metadata.managedFields)
    assert.equals(POD:gsub('"managedFields":%b[],', ''), written(v))
    assert.equals(written(v), tostring(v))
    assert.equals(written(v), testing.json.encode(v))
  end)

  it('reads what was set, adds new members after the old ones, and keeps klua.null as null', function()
    local v = edit()
    v.metadata.labels.app = 'api'
    v.metadata.labels.extra = 'yes'
    v.spec.nodeName = null
    v.status = { phase = 'Pending' }
    assert.equals('api', v.metadata.labels.app)
    assert.equals('yes', v.metadata.labels.extra)
    assert.equals(null, v.spec.nodeName)
    assert.equals('Pending', v.status.phase)
    local text = written(v)
    assert.truthy(text:find('"labels":{"app":"api","tier":"front","extra":"yes"}', 1, true), text)
    assert.truthy(text:find('"ratio":1.50,"path":"a\\/b"', 1, true), text)
    assert.truthy(text:find(',"nodeName":null}', 1, true), text)
    assert.truthy(text:find('"status":{"phase":"Pending"}}$'), text)
    assert.same(cjson.decode(text), cjson.decode(testing.json.encode(copy(v))))
  end)

  it('walks members in order as written with pairs, the removed ones left out and the added ones last', function()
    local v = edit()
    v.metadata.labels = nil
    v.metadata.name = 'web-2'
    v.metadata.added = 'x'
    local keys = {}
    for k, x in pairs(v.metadata) do keys[#keys + 1] = k .. '=' .. (type(x) == 'string' and x or testing.type(x)) end
    assert.equals('name=web-2,namespace=default,managedFields=array,uid=u-1,resourceVersion=7,added=x',
      table.concat(keys, ','))
  end)

  it('takes table.insert, table.remove and appends on its arrays, as a sequence would', function()
    local v = edit()
    local cs = v.spec.containers
    table.insert(cs, { name = 'd', image = 'busybox' })
    assert.equals(4, #cs)
    table.remove(cs, 1)
    assert.equals(3, #cs)
    table.insert(cs, 1, { name = 'z' })
    cs[#cs + 1] = { name = 'e' }
    assert.equals('z,b,c,d,e', names(cs))
    local seen = {}
    for i, c in pairs(cs) do seen[#seen + 1] = i .. c.name end
    assert.equals('1z,2b,3c,4d,5e', table.concat(seen, ','))
    assert.equals('z,b,c,d,e', names(cjson.decode(written(v)).spec.containers))
    assert.truthy(written(v):find('{"name":"b","image":"redis"}', 1, true))
  end)

  it('empties an array from its end, and refuses a hole or a write past its end', function()
    local v = edit()
    local cs = v.spec.containers
    for _ = 1, 3 do table.remove(cs) end
    assert.equals(0, #cs)
    assert.truthy(written(v):find('"containers":[]', 1, true))
    local w = edit()
    local ok, err = pcall(function() w.spec.containers[1] = nil end)
    assert.is_false(ok)
    assert.truthy(err:find('klua: cannot set element 1 of 3 to nil: it would leave a hole; table.remove(arr, 1) closes it',
      1, true), err)
    ok, err = pcall(function() w.spec.containers[5] = {} end)
    assert.truthy(err:find('klua: cannot set element 5 of an array of 3: only 1 to 4 (#arr + 1)', 1, true), err)
    ok, err = pcall(function() w.metadata[1] = 'x' end)
    assert.truthy(err:find('klua: cannot set a number key of an object: its members are named by strings', 1, true), err)
    assert.equals(POD, written(w))
  end)

  it('shares the edits of a value among its views, as references to one table share it', function()
    local v = edit()
    local first = v.spec.containers[1]
    first.image = 'nginx:2'
    assert.equals('nginx:2', v.spec.containers[1].image)
    v.spec.template = v.spec.containers[1]
    first.name = 'renamed'
    assert.equals('renamed', v.spec.template.name)
    local decoded = cjson.decode(written(v))
    assert.equals('renamed', decoded.spec.template.name)
    assert.equals('nginx:2', decoded.spec.containers[1].image)
  end)

  it('is read as edited by klua.get and klua.copy', function()
    local v = edit()
    v.metadata.labels.app = 'api'
    v.metadata.managedFields = nil
    assert.equals('api', get(v, 'metadata', 'labels', 'app'))
    assert.is_nil(get(v, 'metadata', 'managedFields'))
    local c = copy(v)
    assert.equals('api', c.metadata.labels.app)
    assert.is_nil(c.metadata.managedFields)
    assert.equals('redis', c.spec.containers[2].image)
    assert.equals('api', copy({ v })[1].metadata.labels.app)
  end)

  it('refuses writes once its transform returned, and still reads as it was left', function()
    local v = edit()
    v.metadata.name = 'web-2'
    local spec = v.spec
    testing.seal(v)
    local ok, err = pcall(function() spec.x = 1 end)
    assert.is_false(ok)
    assert.truthy(err:find("klua: cannot set x: the transform that was given this object has ended; "
      .. 'use klua.edit(obj) or klua.copy(obj) to change it', 1, true), err)
    assert.equals('web-2', v.metadata.name)
  end)

  it('says which of the members the cache keys on a write went to', function()
    local v = edit()
    assert.is_false(testing.edits_touch(v, 'metadata', 'name'))
    v.metadata.labels.app = 'api'
    assert.is_false(testing.edits_touch(v, 'metadata', 'name'))
    assert.is_false(testing.edits_touch(v, nil, 'kind'))
    v.metadata.name = 'web-1'
    assert.is_true(testing.edits_touch(v, 'metadata', 'name'))
    local w = edit()
    w.metadata = copy(w.metadata)
    assert.is_true(testing.edits_touch(w, 'metadata', 'uid'))
    w.kind = nil
    assert.is_true(testing.edits_touch(w, nil, 'kind'))
  end)

  it('fails to encode an object set inside itself, naming the place', function()
    local v = edit()
    v.spec.self = v.spec
    local ok, err = pcall(testing.json.encode, v)
    assert.is_false(ok)
    assert.truthy(err:find('nested deeper than 1024 levels (does it contain itself?)', 1, true), err)
  end)

  it('fails to encode a value that is not JSON, naming its place from the object', function()
    for _, case in ipairs({
      { function(v) v.metadata.labels.f = print end, 'at metadata.labels.f' },
      { function(v) v.spec.containers[2].image = print end, 'at spec.containers[2].image' },
      { function(v) v.spec.containers[4] = { env = { print } } end, 'at spec.containers[4].env[1]' },
      { function(v) v.spec.added = { x = { 0 / 0 } } end, 'cannot encode NaN at spec.added.x[1]' },
    }) do
      local v = edit()
      case[1](v)
      for _, encode in ipairs({ testing.json.encode, tostring, copy }) do
        local ok, err = pcall(encode, v)
        assert.is_false(ok)
        assert.truthy(err:find(case[2], 1, true), err)
      end
    end
  end)
end)

-- Each edit made to the view and to a plain table decoded from the same text
-- must read, walk, count and encode alike: the text is pretty-printed, has keys
-- that need escaping, numbers in exponent form, empty containers and arrays of
-- containers, all copied by their spans where not written to.
describe('the object a transform is given, edited as a table would be', function()
  local TEXT = '{ "a" : 1 , "b" : [ 1 , 2 , 3 ] , "c" : { "d" : "x" , "e" : [ ] , "f" : { } } ,\n'
    .. ' "q\\"k" : "v\\\\" , "\\u00e9" : 1e3 , "n" : -0.5E-2 , "arr" : [ {"x":1}, {"x":2}, [3, [4]] ] }'

  -- A value as text, members sorted, read through pairs, # and ipairs alike.
  local function dump(x)
    if type(x) ~= 'table' and testing.type(x) ~= 'object' and testing.type(x) ~= 'array' then
      return x == null and 'null' or type(x) .. ':' .. tostring(x)
    end
    local keys, out, n = {}, {}, 0
    for k in pairs(x) do keys[#keys + 1] = k end
    table.sort(keys, function(a, b)
      if type(a) == type(b) then return a < b end
      return type(a) == 'number'
    end)
    for _, k in ipairs(keys) do out[#out + 1] = tostring(k) .. '=' .. dump(x[k]) end
    for _ in ipairs(x) do n = n + 1 end
    return '{' .. table.concat(out, ',') .. ' #' .. #x .. ' ipairs ' .. n .. '}'
  end

  local KEYS = { 'a', 'b', 'c', 'q"k', 'é', 'n', 'arr' }
  for _, case in ipairs({
    { 'sets a member', function(o) o.a = 2 end },
    { 'removes every member and adds one', function(o) for _, k in ipairs(KEYS) do o[k] = nil end; o.z = 1 end },
    { 'sets members whose names are escaped', function(o) o['q"k'] = 'w\\"'; o['é'] = 'ü' end },
    { 'adds a member whose name needs escaping', function(o) o['a"\\\n\1é'] = '"\\' end },
    { 'fills an empty object and an empty array', function(o) o.c.f.x = 1; o.c.e[1] = 1; o.c.e[2] = {} end },
    { 'inserts at the front and in the middle', function(o) table.insert(o.b, 1, 'f'); table.insert(o.b, 3, 'm') end },
    { 'removes from the middle, then appends', function(o) table.remove(o.b, 2); o.b[#o.b + 1] = 9 end },
    { 'empties an array from its front, then grows it past its length',
      function(o) for _ = 1, 3 do table.remove(o.b, 1) end; for i = 1, 5 do o.b[#o.b + 1] = i end end },
    { 'shrinks, grows and shrinks an array', function(o)
      table.remove(o.b); table.remove(o.b); o.b[2] = 'x'; o.b[3] = 'y'; o.b[4] = 'z'
      table.remove(o.b, 1); table.remove(o.b)
    end },
    { 'sets the last element to nil again and again', function(o)
      o.b[3] = nil; o.b[3] = nil; o.b[2] = nil; o.b[#o.b + 1] = 7
    end },
    { 'edits objects and arrays inside an array', function(o)
      o.arr[2].x = 'two'; o.arr[2].y = 3; o.arr[3][2][1] = 'four'; table.insert(o.arr[3][2], 5)
    end },
    { 'edits an element that a remove moved', function(o) table.remove(o.arr, 1); o.arr[1].x = 'moved' end },
    { 'edits an element, then removes it', function(o) o.arr[1].x = 'gone'; table.remove(o.arr, 1) end },
    { 'swaps two elements and edits one', function(o) o.arr[1], o.arr[2] = o.arr[2], o.arr[1]; o.arr[1].x = 's' end },
    { 'edits a member it removed', function(o) local c = o.c; c.d = 'y'; o.c = nil end },
    { 'edits a member it replaced', function(o) local c = o.c; o.c = { z = 1 }; c.d = 'y' end },
    { 'moves a member and edits it', function(o) local c = o.c; o.c = nil; o.moved = c; c.d = 'm' end },
    { 'sets a member twice by two names', function(o) o.c2 = o.c; o.c2.d = 'shared' end },
    { 'removes a member and adds it back', function(o) o.a = nil; o.a = 5; o.zz = 1; o.zz = nil end },
    { 'sets null, big integers and huge floats', function(o)
      o.a = null; o.b[1] = math.mininteger; o.b[2] = math.maxinteger; o.n = 1e300
    end },
    { 'makes thousands of writes', function(o)
      for i = 1, 2000 do o.b[#o.b + 1] = i end
      for _ = 1, 1500 do table.remove(o.b, 1) end
    end },
  }) do
    it(case[1], function()
      local v, t = testing.editable_view(TEXT), copy(testing.view(TEXT))
      case[2](v)
      case[2](t)
      local want = dump(t)
      assert.equals(want, dump(v))
      assert.equals(want, dump(copy(v)))
      assert.equals(want, dump(copy({ v })[1]))
      local text = written(v)
      assert.equals(want, dump(testing.view(text)))
      assert.same(cjson.decode(testing.json.encode(t)), cjson.decode(text))
      assert.equals(text, tostring(v))
      assert.equals(text, testing.json.encode(v))
    end)
  end
end)

-- klua.edit(obj) gives any view's object that takes writes, for a reconcile to change and send;
-- the view it came from stays as it was.
describe('klua.edit', function()
  local edit_of, writable = testing.edit, testing.writable

  local makers = {
    ['an object not parsed yet'] = function() return testing.view(POD) end,
    ['an object parsed already'] = function()
      local v = testing.view(POD)
      assert.equals('web-1', v.metadata.name)
      return v
    end,
    ['a watch event\'s object'] = function()
      return assert(testing.event_view('{"type":"MODIFIED","object":' .. POD .. '}'))
    end,
  }
  for what, make in pairs(makers) do
    it('gives a view of ' .. what .. ' that takes writes, leaving the view as it was', function()
      local v = make()
      local e = edit_of(v)
      e.metadata.labels.app = 'api'
      table.remove(e.spec.containers, 1)
      assert.equals('api', e.metadata.labels.app)
      assert.equals('web', v.metadata.labels.app)
      assert.equals(POD, tostring(v))
      local sent = cjson.decode(testing.json.encode(e))
      assert.equals('api', sent.metadata.labels.app)
      assert.equals('b,c', names(sent.spec.containers))
      local other = edit_of(v)
      assert.equals('web', other.metadata.labels.app)
    end)
  end

  it('gives a view of a member\'s value, and of an object with writes as they were made', function()
    local member = edit_of(testing.view(POD).spec.containers[2])
    member.image = 'redis:7'
    assert.equals('{"name":"b","image":"redis:7"}', testing.json.encode(member))
    local t = edit_of(testing.view(POD))
    t.metadata.name = 'web-2'
    local again = edit_of(t)
    again.kind = 'Thing'
    assert.equals('web-2', again.metadata.name)
    assert.equals('Pod', t.kind)
  end)

  it('gives a view of a transform\'s object after the transform ended, with its writes, itself left sealed', function()
    local given = testing.editable_view(POD)
    given.metadata.name = 'web-2'
    table.insert(given.spec.containers, { name = 'd' })
    testing.seal(given)
    local e = edit_of(given)
    e.kind = 'Thing'
    local sent = cjson.decode(testing.json.encode(e))
    assert.same({ 'Thing', 'web-2', 'a,b,c,d' }, { sent.kind, sent.metadata.name, names(sent.spec.containers) })
    assert.equals('Pod', given.kind)
    assert.has_error(function() given.kind = 'Thing' end)
    local containers = edit_of(given.spec.containers)
    containers[5] = { name = 'e' }
    assert.equals('a,b,c,d,e', names(containers))
  end)

  it('refuses a view whose object was collected, as every read of it does', function()
    local results
    do
      -- Made first, so finalized last: the views' objects are collected by then.
      local holder = setmetatable({}, { __gc = function(h)
        results = { select(2, pcall(edit_of, h.v)), select(2, pcall(edit_of, h.spec)), select(2, pcall(edit_of, h.e)) }
      end })
      holder.v = testing.view(POD)
      holder.spec = holder.v.spec
      holder.e = edit_of(holder.v)
      holder.e.kind = 'Thing'
    end
    collectgarbage()
    collectgarbage()
    local collected = 'klua: a view read after its object was collected (from a __gc handler?)'
    assert.same({ collected, collected, collected }, results)
  end)

  it('gives a table back as it is, and refuses anything else', function()
    local t = { a = 1 }
    assert.equals(t, edit_of(t))
    local ok, err = pcall(edit_of, 'text')
    assert.is_false(ok)
    assert.truthy(err:find('view or table expected, got string', 1, true), err)
  end)

  it('says which values take writes: tables, and views from klua.edit or a transform that runs', function()
    local v = testing.view(POD)
    assert.is_true(writable({}))
    assert.is_false(writable(v))
    assert.is_false(writable(v.metadata))
    assert.is_true(writable(edit_of(v)))
    assert.is_true(writable(edit_of(v).metadata))
    local given = testing.editable_view(POD)
    assert.is_true(writable(given.spec))
    testing.seal(given)
    assert.is_false(writable(given.spec))
    assert.is_false(writable('x'))
  end)
end)
