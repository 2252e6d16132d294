-- klua.json turns JSON text into plain Lua values and back, keeping what
-- Kubernetes cares about: integers stay integers, null survives as
-- klua.null, and arrays stay arrays even when empty.
local testing = require('klua_testing')
local reference = require('fixtures.json.reference')
local cjson = require('cjson')

local json, null = testing.json, testing.null

local assert_decoded_as = reference.assert_decoded_as

describe('klua.json.decode', function()
  for _, name in ipairs(reference.all) do
    it('decodes ' .. name .. ' with integers, nulls and marked arrays', function()
      local text = reference.fixture(name)
      assert_decoded_as(json.decode(text), reference.decode(text), name)
    end)
  end

  it('decodes scalars at the top level', function()
    assert.equals(42, json.decode('42'))
    assert.equals('integer', math.type(json.decode('42')))
    assert.equals('float', math.type(json.decode('42.0')))
    assert.equals('x', json.decode(' "x" '))
    assert.equals(false, json.decode('false'))
    assert.equals(null, json.decode('null'))
  end)

  it('reads numbers beyond 64-bit integers as floats, as Lua does', function()
    assert.equals(tonumber('123456789012345678901234567890'), json.decode('123456789012345678901234567890'))
    assert.equals('float', math.type(json.decode('-9223372036854775809')))
    assert.equals(math.mininteger, json.decode('-9223372036854775808'))
  end)

  it('gives nil and a message that says where the text goes wrong', function()
    local cases = {
      ['{"a":1,}'] = 'text is not valid JSON at byte 7: expected a string key',
      ['{"a" 1}'] = "text is not valid JSON at byte 5: expected ':' after an object key",
      ['[1 2]'] = "text is not valid JSON at byte 3: expected ',' or ']' after an array element",
      ['"abc'] = 'text is not valid JSON at byte 0: unterminated string',
      ['"\\x"'] = 'text is not valid JSON at byte 1: invalid escape in string',
      ['"\\ud800"'] = 'text is not valid JSON at byte 1: unpaired surrogate in \\u escape',
      ['"\\u12g4"'] = 'text is not valid JSON at byte 5: invalid hex digit in \\u escape',
      ['01'] = 'text is not valid JSON at byte 1: unexpected data after the JSON value',
      ['-'] = 'text is not valid JSON at byte 0: invalid number',
      ['1.e5'] = 'text is not valid JSON at byte 0: invalid number',
      ['1e400'] = 'text is not valid JSON at byte 0: number out of range',
      ['"\xc3\x28"'] = 'text is not valid JSON at byte 1: invalid UTF-8',
      ['"\xed\xa0\x80"'] = 'text is not valid JSON at byte 1: invalid UTF-8',
      ['nul'] = 'text is not valid JSON at byte 0: invalid literal',
      [''] = 'text is not valid JSON at byte 0: unexpected end of input',
      ['[' .. string.rep('[', 1024) .. string.rep(']', 1025)] = 'text is not valid JSON at byte 1024: nested too deeply',
    }
    for text, message in pairs(cases) do
      local v, err = json.decode(text)
      assert.is_nil(v, text)
      assert.equals(message, err, text)
    end
  end)

  it('accepts nesting up to 1024 levels', function()
    local deep = json.decode(string.rep('[', 1024) .. string.rep(']', 1024))
    local depth = 0
    while deep do
      depth = depth + 1
      deep = deep[1]
    end
    assert.equals(1024, depth)
  end)

  it('refuses a value that is not a string', function()
    assert.has_error(function() json.decode({}) end)
  end)
end)

describe('klua.json.encode', function()
  it('prints integers without a fraction and integer-valued floats as integers', function()
    assert.equals('[1,-7,0,9223372036854775807,-9223372036854775808]',
      json.encode(json.array { 1, -7, 0, math.maxinteger, math.mininteger }))
    assert.equals('[3,-2,0,1048576]', json.encode { 3.0, -2.0, 0.0, 2.0 ^ 20 })
  end)

  -- Go's encoding/json (floatEncoder), as the API server writes a float64:
  -- the shortest digits, plain from 1e-6 to below 1e21, else an exponent
  -- without a leading zero; at a power of two the shortest digits may lie
  -- above the nearest ones (2^89, 2^-1017).
  it('prints other floats with the fewest digits that read back exactly, as Go writes them', function()
    assert.equals('[0.1,0.75,3.141592653589793,1e+300,-2.5e-7,100000000000000000000]',
      json.encode { 0.1, 0.75, math.pi, 1e300, -2.5e-7, 1e20 })
    assert.equals('[0.000001,0.000015,1e-7,123456789.123,12345678901234567000,1e+21,-0]',
      json.encode { 1e-6, 1.5e-5, 1e-7, 123456789.123, 12345678901234567000.0, 1e21, -0.0 })
    assert.equals('[6.189700196426902e+26,7.120236347223045e-307,5e-324,1.7976931348623157e+308]',
      json.encode { 2.0 ^ 89, 2.0 ^ -1017, 2.0 ^ -1074, 1.7976931348623157e308 })
    for _, x in ipairs { 0.1 + 0.2, 1 / 3, 2 ^ -1074, 1.7976931348623157e308, 123456.789 } do
      assert.equals(x, json.decode(json.encode { x })[1])
    end
  end)

  it('refuses NaN and infinities, naming the path', function()
    assert.has_error(function() json.encode { spec = { ratio = 0 / 0 } } end,
      'klua.json.encode: cannot encode NaN at spec.ratio')
    assert.has_error(function() json.encode { math.huge } end, 'klua.json.encode: cannot encode an infinite number at [1]')
  end)

  it('escapes quotes, backslashes and control characters and passes UTF-8 through', function()
    assert.equals('"a\\"b\\\\c\\nd\\te\\r\\b\\f\\u0000\\u001f\\u0001/\127"', json.encode('a"b\\c\nd\te\r\b\f\0\31\1/\127'))
    assert.equals('"Grüße 日本 🚀"', json.encode('Grüße 日本 🚀'))
  end)

  it('escapes wherever in a string the byte is, after plain ASCII or first', function()
    for _, case in ipairs({ { 'abc\n', '"abc\\n"' }, { '\tabc', '"\\tabc"' }, { 'ab"c', '"ab\\"c"' },
      { 'abcé\\', '"abcé\\\\"' }, { ('x'):rep(100) .. '\1', '"' .. ('x'):rep(100) .. '\\u0001"' } }) do
      assert.equals(case[2], json.encode(case[1]))
    end
  end)

  -- The encoder looks at eight bytes at a time for one that needs a look: every ASCII byte, the
  -- lead of each UTF-8 length and a byte that leads nothing, at each offset of a word and in the
  -- short tail after the last whole one, against an escaper written out a byte at a time.
  it('writes every byte as JSON wherever it falls in a string', function()
    local named = { ['"'] = '\\"', ['\\'] = '\\\\', ['\b'] = '\\b', ['\f'] = '\\f', ['\n'] = '\\n',
      ['\r'] = '\\r', ['\t'] = '\\t' }
    local function escaped(c)
      if named[c] then return named[c] end
      if c:byte() < 0x20 then return ('\\u%04x'):format(c:byte()) end
      return c
    end
    local specials = { 'é', '日', '🚀' }
    for b = 0, 127 do specials[#specials + 1] = string.char(b) end
    for _, c in ipairs(specials) do
      for len = 1, 19 do
        for at = 1, len do
          local s = ('a'):rep(at - 1) .. c .. ('b'):rep(len - at)
          local want = '"' .. ('a'):rep(at - 1) .. escaped(c) .. ('b'):rep(len - at) .. '"'
          assert.equals(want, json.encode(s), ('byte %q at %d of %d'):format(c, at, len))
        end
      end
    end
    -- Escapes six times as long as their byte, in a text larger than the encoder's buffer.
    local long, want = {}, {}
    for i = 1, 30000 do
      local c = string.char(i % 3 == 0 and 1 or 97 + i % 26)
      long[i], want[i] = c, escaped(c)
    end
    assert.equals('"' .. table.concat(want) .. '"', json.encode(table.concat(long)))
    for at = 1, 17 do
      local s = ('a'):rep(at - 1) .. '\xff' .. ('b'):rep(17 - at)
      assert.has_error(function() json.encode(s) end,
        ('klua.json.encode: cannot encode a string: it is not valid UTF-8 (at byte %d)'):format(at - 1))
    end
  end)

  -- The encoder keeps its buffer for the next call (up to 64 KiB): no text may leak into the next.
  it('encodes each value alone, whatever it encoded before', function()
    local big = ('b'):rep(100 * 1024)
    for _, v in ipairs({ { s = big }, { s = 'x' }, { s = ('m'):rep(3000) }, { s = 'y' }, 7, { s = big } }) do
      assert.same(v, json.decode(json.encode(v)))
    end
    assert.equals('{"s":"y"}', json.encode { s = 'y' })
  end)

  -- A finalizer may run at any allocation of an encode (the buffer's growth), and may encode
  -- too: the buffer kept between calls must not be the one an encode under way writes into.
  it('encodes whole while a finalizer that encodes runs in the middle', function()
    local ran, during, encoding = 0, 0, false
    local mt = { __gc = function()
      ran = ran + 1
      if encoding then during = during + 1 end
      json.encode { inner = 'y' }
    end }
    local obj = { head = ('h'):rep(300) }
    json.encode { s = ('z'):rep(70 * 1024) } -- no buffer kept
    json.encode { s = 'small' }              -- a 256-byte one kept, which obj outgrows
    collectgarbage('collect')
    collectgarbage('incremental', 100, 100, 1)
    for _ = 1, 2000 do setmetatable({}, mt) end
    -- Into the phase that calls finalizers, with most of them still to run.
    while ran == 0 do collectgarbage('step', 0) end
    encoding = true
    local text = json.encode(obj)
    encoding = false
    collectgarbage('incremental', 200, 100, 13) -- Lua's defaults
    collectgarbage('collect')
    assert.is_true(during > 0, 'no finalizer ran while encoding')
    assert.equals('{"head":"' .. obj.head .. '"}', text)
  end)

  -- Objects are encoded in one pass; a table whose keys are mixed is still the error, before
  -- anything wrong inside it, whichever order its members come in.
  it('names a table with mixed keys before anything wrong in its members', function()
    local why = ': its keys must be all strings (an object) or exactly 1..n (an array)'
    for _, v in ipairs({
      { spec = { a = { f = print }, b = { ['\xff'] = 1 }, [5] = 1, c = 0 / 0 } },
      { spec = { z = { deeper = { [2] = 1, x = 1 } }, [1] = true } },
    }) do
      assert.has_error(function() json.encode(v) end, 'klua.json.encode: cannot encode a table at spec' .. why)
    end
    assert.has_error(function() json.encode { a = { b = { [3] = 1, c = print } } } end,
      'klua.json.encode: cannot encode a table at a.b' .. why)
    assert.equals('{"a":{"b":[1,2]}}', json.encode { a = { b = { 1, 2 } } })
  end)

  it('refuses a string that is not valid UTF-8, naming the path', function()
    assert.has_error(function() json.encode { metadata = { name = 'ab\xffc' } } end,
      'klua.json.encode: cannot encode a string at metadata.name: it is not valid UTF-8 (at byte 2)')
    assert.has_error(function() json.encode { ['\xc0\x80'] = 1 } end)
    assert.has_error(function() json.encode('\xed\xa0\x80') end)
  end)

  it('encodes klua.null, which is cjson.null, as null', function()
    assert.equals('[null,null]', json.encode { null, cjson.null })
    assert.equals('null', json.encode(nil))
  end)

  it('encodes a table marked as an array as an array, even when empty', function()
    assert.equals('[]', json.encode(json.array()))
    assert.equals('[]', json.encode(setmetatable({}, json.array_mt)))
    assert.equals('{"finalizers":[]}', json.encode { finalizers = json.array {} })
    assert.equals('[1,2]', json.encode(json.array { 1, 2 }))
  end)

  -- A marked array is encoded in one pass too, its members as they come: keys that come out of
  -- order (set into the hash part) are still written 1..n, and a marked table whose keys are not
  -- 1..n is still the error before anything wrong in the members already written.
  it('encodes a marked array in index order however its keys were set, or names it first', function()
    local t = json.array()
    for i = 6, 1, -1 do t[i] = i * 10 end
    assert.equals('[10,20,30,40,50,60]', json.encode(t))
    local holed = json.array { 0 / 0, 'b' }
    holed[4] = 'd'
    local named = json.array { 'a', print }
    named.x = 1
    local why = ': it is marked as an array but its keys are not exactly 1..n'
    assert.has_error(function() json.encode { items = holed } end, 'klua.json.encode: cannot encode a table at items' .. why)
    assert.has_error(function() json.encode { items = named } end, 'klua.json.encode: cannot encode a table at items' .. why)
    assert.has_error(function() json.encode { items = json.array { 'a', 0 / 0 } } end,
      'klua.json.encode: cannot encode NaN at items[2]')
    assert.has_error(function() json.encode(json.array { { f = print } }) end,
      'klua.json.encode: cannot encode a function at [1].f')
  end)

  it('encodes an empty unmarked table as an object and a sequence as an array', function()
    assert.equals('{}', json.encode {})
    assert.equals('["a","b","c"]', json.encode { 'a', 'b', 'c' })
    assert.equals('{"k":"v"}', json.encode { k = 'v' })
  end)

  it('refuses tables that are neither arrays nor objects, naming the path', function()
    local message = 'klua.json.encode: cannot encode a table at spec.containers: '
      .. 'its keys must be all strings (an object) or exactly 1..n (an array)'
    assert.has_error(function() json.encode { spec = { containers = { 1, 2, x = 3 } } } end, message)
    assert.has_error(function() json.encode { [1] = 'a', [3] = 'c' } end)
    assert.has_error(function() json.encode { [1.5] = 'a' } end)
    assert.has_error(function() json.encode { [true] = 'a' } end)
    assert.has_error(function() json.encode(json.array { 1, x = 2 }) end,
      'klua.json.encode: cannot encode a table: it is marked as an array but its keys are not exactly 1..n')
  end)

  it('refuses functions, threads, userdata and cycles, naming the path', function()
    assert.has_error(function() json.encode { spec = { template = print } } end,
      'klua.json.encode: cannot encode a function at spec.template')
    assert.has_error(function() json.encode { items = { 'x', coroutine.create(print) } } end,
      'klua.json.encode: cannot encode a thread at items[2]')
    assert.has_error(function() json.encode(io.stdout) end,
      'klua.json.encode: cannot encode a userdata (only views from the cache are allowed)')
    local t = { spec = {} }
    t.spec.self = t
    assert.has_error(function() json.encode(t) end, 'klua.json.encode: cannot encode a table at spec.self: it contains itself')
  end)

  it('encodes nesting up to 1024 levels, as decode accepts, and refuses deeper', function()
    local text = string.rep('[', 1024) .. string.rep(']', 1024)
    assert.equals(text, json.encode(json.decode(text)))
    local deeper = json.array { json.decode(text) }
    local ok, err = pcall(json.encode, deeper)
    assert.is_false(ok)
    assert.truthy(err:find('nested deeper than 1024 levels', 1, true), err)
  end)

  it('encodes the same table twice side by side, which is not a cycle', function()
    local shared = { a = 1 }
    assert.equals('[{"a":1},{"a":1}]', json.encode { shared, shared })
  end)

  it('writes a view as its exact bytes, at the top level or inside a table', function()
    local text = reference.fixture('numbers.json')
    local v = testing.view(text)
    assert.equals(text, json.encode(v))
    assert.equals('{"floats":' .. tostring(v.floats) .. '}', json.encode { floats = v.floats })
    assert.truthy(json.encode { v.floats }:find('1.0e0,0.1', 1, true))
  end)

  it('refuses a value argument that is missing', function()
    assert.has_error(function() json.encode() end)
  end)
end)

describe('a round trip through a copy', function()
  for _, name in ipairs(reference.all) do
    it('re-encodes ' .. name .. ' to JSON that decodes equal to the original', function()
      local text = reference.fixture(name)
      local again = json.encode(testing.copy(testing.view(text)))
      assert_decoded_as(json.decode(again), reference.decode(text), name, true)
    end)
  end

  it('keeps empty arrays, empty objects, nulls and integers when one field changes', function()
    local text = reference.fixture('nulls-and-empties.json')
    local c = testing.copy(testing.view(text))
    c.metadata.labels.changed = 'yes'
    local out = json.encode(c)
    local want = reference.decode(text)
    want.values.metadata.values.labels = { kind = 'object', keys = { 'changed' }, values = { changed = 'yes' } }
    assert_decoded_as(json.decode(out), want, 'nulls-and-empties.json', true)
    assert.truthy(out:find('"finalizers":[]', 1, true))
    assert.truthy(out:find('"nested":[[],[[]],{},[{}],[null],[null,null]]', 1, true))
  end)

  -- kube-apiserver holds a number as an int64 or a float64 (sigs.k8s.io/json)
  -- and writes the float64 with encoding/json: whatever it sends, integers
  -- beyond int64 and decimals included, reads back to a Lua number that
  -- encodes to the same text.
  it('gives back every number as the API server wrote it, through a view, a copy and decode', function()
    for _, text in ipairs { '12345678901234567000', '18446744073709552000', '123456789.123', '0.1',
      '9223372036854775807', '-9223372036854775808', '-9223372036854776000', '100000000000000000000',
      '1e+21', '1.2345678901234568e+29', '1e-7', '0.000015', '6.189700196426902e+26' } do
      local obj = '{"spec":{"n":' .. text .. ',"list":[' .. text .. ']}}'
      local view = testing.view(obj)
      assert.equals(obj, json.encode(view), text)
      local c = testing.copy(view)
      assert.equals(text, json.encode(c.spec.n), text)
      assert.equals(text, json.encode(view.spec.list[1]), text)
      assert.equals(text, json.encode(json.decode(text)), text)
    end
  end)

  it('keeps every integer of a Deployment an integer after an edit', function()
    local c = testing.copy(testing.view(reference.fixture('deployment.json')))
    c.spec.replicas = c.spec.replicas + 1
    local out = json.decode(json.encode(c))
    assert.equals(4, out.spec.replicas)
    assert.equals('integer', math.type(out.spec.replicas))
    assert.equals('integer', math.type(out.spec.template.spec.containers[1].ports[1].containerPort))
    assert.equals(null, out.spec.template.metadata.creationTimestamp)
    assert.equals(json.array_mt, getmetatable(out.spec.template.spec.tolerations))
  end)
end)

describe('the klua.json table', function()
  it('holds encode, decode, array, null and array_mt', function()
    assert.equals('function', type(json.encode))
    assert.equals('function', type(json.decode))
    assert.equals('function', type(json.array))
    assert.equals(cjson.null, json.null)
    assert.equals('table', type(json.array_mt))
  end)

  it('array() marks a given table and returns it', function()
    local t = { 1 }
    assert.equals(t, json.array(t))
    assert.equals(json.array_mt, getmetatable(t))
    assert.has_error(function() json.array('x') end)
  end)
end)
