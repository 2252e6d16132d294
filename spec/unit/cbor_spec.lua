-- CBOR (RFC 8949) as kube-apiserver serves it with KEP-4222: each data item
-- becomes the JSON text klua's decoder, store and views read, so a CBOR
-- informer gets what a JSON one gets. What apimachinery's CBOR encoder writes
-- (runtime/serializer/cbor/internal/modes/encode.go) is read: strings as byte
-- strings, []byte as a byte string under tag 22 (its base64), the shortest
-- float, the self-described prefix 55799. What JSON cannot hold is refused
-- by name. A watch is a CBOR Sequence (RFC 8742): the framer finds where each
-- item ends, however the body is cut into reads.
local testing = require('klua_testing')

local function hex(s) return (s:gsub('%s', ''):gsub('..', function(h) return string.char(tonumber(h, 16)) end)) end
local function json(h) return testing.cbor_to_json(hex(h)) end
-- The CBOR in hex h has no JSON form, for a reason that matches pattern.
local function refused(h, pattern)
  local ok, err = json(h)
  assert.is_nil(ok, h)
  assert.matches(pattern, err, 1, false, h)
end

local cbor = require('support.cbor')
local encode = cbor.encode

describe('a CBOR item as JSON', function()
  it('writes unsigned integers of every width', function()
    assert.equal('0', json '00')
    assert.equal('23', json '17')
    assert.equal('24', json '18 18')
    assert.equal('256', json '19 0100')
    assert.equal('65536', json '1a 00010000')
    assert.equal('18446744073709551615', json '1b ffffffffffffffff')
  end)

  it('writes negative integers down to -2^63 and refuses those below, which no int64 holds', function()
    assert.equal('-1', json '20')
    assert.equal('-100', json '38 63')
    assert.equal('-9223372036854775808', json '3b 7fffffffffffffff')
    refused('3b 8000000000000000', 'CBOR integer below %-2%^63 has no JSON form klua reads at byte 0')
  end)

  it('reads a byte string as text, as the encoder writes every Go string, each invalid UTF-8 byte becoming U+FFFD', function()
    assert.equal('"abc"', json '43 616263')
    assert.equal('"a\u{FFFD}\u{FFFD}b"', json '44 61ff c062')
    assert.equal('"\u{E9}t\u{E9}"', json '45 c3a974c3a9')
  end)

  it('escapes what JSON strings must escape', function()
    assert.equal([["q\"b\\n\nt\tc\u0001"]], testing.cbor_to_json(encode 'q"b\\n\nt\tc\1'))
  end)

  it('reads a text string, which must be valid UTF-8 (RFC 8949 3.1)', function()
    assert.equal('"abc"', json '63 616263')
    refused('62 61ff', 'CBOR text string is not valid UTF%-8')
  end)

  it('writes arrays and maps, nested, with byte-string and text-string keys', function()
    assert.equal('[]', json '80')
    assert.equal('{}', json 'a0')
    assert.equal('{"a":[1,{"b":null}],"c":true}', json 'a2 4161 82 01 a1 6162 f6 4163 f5')
    assert.equal('{"metadata":{"labels":{"app":"web"},"name":"x"}}',
      testing.cbor_to_json(encode { metadata = { name = 'x', labels = { app = 'web' } } }))
  end)

  it('writes floats of every width as Go writes a float64: shortest digits, integral ones without a fraction', function()
    assert.equal('1', json 'f9 3c00')         -- half 1.0
    assert.equal('1.5', json 'f9 3e00')       -- half 1.5
    assert.equal('-0.5', json 'f9 b800')      -- half -0.5
    assert.equal(2 ^ -24, tonumber((json 'f9 0001'))) -- the smallest half subnormal
    assert.equal('100000', json 'fa 47c35000') -- single 100000.0
    assert.equal('0.1', json 'fb 3fb999999999999a')
    assert.equal('1e+21', json('fb ' .. ('%016x'):format(string.unpack('>i8', string.pack('>d', 1e21)))))
    assert.equal('1e-7', json('fb ' .. ('%016x'):format(string.unpack('>i8', string.pack('>d', 1e-7)))))
    assert.equal('0.000001', json('fb ' .. ('%016x'):format(string.unpack('>i8', string.pack('>d', 1e-6)))))
    assert.equal('123456789.123', json('fb ' .. ('%016x'):format(string.unpack('>i8', string.pack('>d', 123456789.123)))))
  end)

  it('refuses NaN and the infinities, as the encoder does', function()
    refused('f9 7e00', 'CBOR float NaN has no JSON form')
    refused('fa ff800000', 'CBOR float infinity has no JSON form')
  end)

  it('writes false, true and null, and refuses undefined and the other simple values', function()
    assert.equal('[false,true,null]', json '83 f4 f5 f6')
    refused('f7', 'CBOR undefined has no JSON form')
    refused('f0', 'CBOR simple value 16 has no JSON form')
    refused('f8 ff', 'CBOR simple value 255 has no JSON form')
  end)

  it('reads through the self-described CBOR tag 55799 that starts every item the encoder writes', function()
    assert.equal('{"kind":"Pod"}', json 'd9d9f7 a1 446b696e64 43506f64')
    assert.equal('[1]', json '81 d9d9f7 01')
  end)

  it('writes a byte string under tags 21, 22 and 23 in the encoding each expects (RFC 8949 3.4.5.2)', function()
    assert.equal('"aGk="', json 'd6 42 6869')          -- 22: base64, as a Go []byte in JSON
    assert.equal('"aGV5"', json 'd6 43 686579')
    assert.equal('"YQ=="', json 'd6 41 61')
    assert.equal('""', json 'd6 40')
    assert.equal('"-_8"', json 'd5 42 fbff')           -- 21: base64url, unpadded
    assert.equal('"fbff"', json 'd7 42 fbff')          -- 23: base16
  end)

  it('refuses other tags by number, and tags 21 to 23 on anything but a byte string', function()
    refused('c1 1a 5f5e1000', 'CBOR tag 1 has no JSON form at byte 0')
    refused('c0 63 616263', 'CBOR tag 0 has no JSON form')
    refused('d6 63 616263', 'CBOR tag 22 on something other than a byte string')
  end)

  -- apimachinery's encoder writes definite lengths only, but its decoder reads
  -- indefinite ones (modes/decode.go: IndefLength: IndefLengthAllowed), as RFC 8949
  -- 3.2.2 allows any encoder to write them.
  it('reads indefinite-length arrays, maps and strings (RFC 8949 3.2.2), nested and empty', function()
    assert.equal('[1,2]', json '9f 01 02 ff')
    assert.equal('[]', json '9f ff')
    assert.equal('{"a":1}', json 'bf 4161 01 ff')
    assert.equal('{}', json 'bf ff')
    assert.equal('"abc"', json '5f 4161 426263 ff')
    assert.equal('"abc"', json '7f 6161 626263 ff')
    assert.equal('""', json '5f ff')
    assert.equal('"YWJj"', json 'd6 5f 4161 426263 ff')
    assert.equal('{"ab":[[1],{"c":[]}]}', json 'bf 5f 4161 4162 ff 82 9f 01 ff bf 4163 9f ff ff ff')
  end)

  it('refuses a chunk of an indefinite-length string that is not a definite string of its type, and the reserved header values', function()
    for _, h in ipairs { '5f 6161 ff', '7f 4161 ff', '5f 5f ff ff', '5f 01 ff' } do
      refused(h, 'indefinite%-length string has a chunk that is not a definite string of its type')
    end
    refused('1c', 'reserved additional information')
    refused('1f', 'an indefinite length on an integer or a tag')
    refused('81 ff', 'a break %(0xff%) outside an indefinite%-length item at byte 1')
    refused('9f 01', 'ends early')
  end)

  it('refuses map keys that are not strings', function()
    refused('a1 01 02', 'CBOR map key is not a string at byte 1')
  end)

  it('refuses an item cut short, one followed by more bytes, and nesting deeper than 1024', function()
    for _, h in ipairs { '', '19 01', '43 6162', '82 01', 'a1 4161', 'd9d9f7' } do
      refused(h, 'ends early')
    end
    refused('01 02', 'CBOR item is followed by more bytes at byte 1')
    assert.equal(('['):rep(1024) .. (']'):rep(1024), testing.cbor_to_json(('\x81'):rep(1023) .. '\x80'))
    local ok, err = testing.cbor_to_json(('\x81'):rep(1024) .. '\x80')
    assert.is_nil(ok)
    assert.matches('CBOR item nests deeper than 1024', err)
  end)

  it('refuses an array whose count is past the end of the item without reading on', function()
    refused('9b ffffffffffffffff 01', 'ends early')
  end)
end)

describe('the framer, on a CBOR Sequence', function()
  local function cbor_framer(max) return testing.framer(max, nil, true) end

  local function events_of(pieces, max)
    local f, got = cbor_framer(max), {}
    for _, piece in ipairs(pieces) do
      for _, e in ipairs(f:feed(piece)) do
        got[#got + 1] = e.frame or (e.oversize and ('<oversize ' .. e.oversize .. '>')) or ('<malformed ' .. e.malformed .. '>')
      end
    end
    return got, f
  end

  local added = '\xd9\xd9\xf7' .. encode { type = 'ADDED', object = { kind = 'Pod', metadata = { name = 'a', uid = 'u1' } } }
  local bookmark = '\xd9\xd9\xf7' .. encode { type = 'BOOKMARK', object = { kind = 'Pod', metadata = { resourceVersion = '7' } } }
  local want = {
    '{"object":{"kind":"Pod","metadata":{"name":"a","uid":"u1"}},"type":"ADDED"}',
    '{"object":{"kind":"Pod","metadata":{"resourceVersion":"7"}},"type":"BOOKMARK"}',
  }

  it('hands on each item of the sequence as its JSON text, however the body is cut into reads', function()
    local body = added .. bookmark
    assert.same(want, (events_of { body }))
    for i = 1, #body - 1 do
      assert.same(want, (events_of { body:sub(1, i), body:sub(i + 1) }), 'split at ' .. i)
    end
    local bytes = {}
    for i = 1, #body do bytes[i] = body:sub(i, i) end
    assert.same(want, (events_of(bytes)), 'one byte a read')
  end)

  it('finds where an item of indefinite lengths ends, however the body is cut into reads', function()
    local open = hex 'd9d9f7 bf 44747970 65 45414444 4544 46 6f626a656374 bf 5f 4161 4162 ff 9f 01 82 9f ff 02 ff ff ff'
    local body = open .. added
    local first = '{"type":"ADDED","object":{"ab":[1,[[],2]]}}'
    for i = 1, #body - 1 do
      assert.same({ first, want[1] }, (events_of { body:sub(1, i), body:sub(i + 1) }), 'split at ' .. i)
    end
  end)

  it('holds an unfinished item until its last byte comes', function()
    local f = cbor_framer()
    assert.same({}, f:feed(added:sub(1, 10)))
    assert.equal(10, f:pending())
    assert.equal(1, #f:feed(added:sub(11)))
    assert.equal(0, f:pending())
  end)

  it('reports an item it cannot read and frames nothing more, since nothing marks where the next would start', function()
    local got = events_of { added .. '\xd9\xd9\xf7\xc1\x01' .. added }
    assert.same({ want[1], '<malformed CBOR tag 1 has no JSON form at byte 3>' }, got)
    got = events_of { added, '\x1c', added }
    assert.same({ want[1], '<malformed a reserved additional information value (28-30)>' }, got)
  end)

  it('refuses an item past the frame limit without buffering it, and frames the next', function()
    local big = encode { type = 'ADDED', object = { data = ('x'):rep(300) } }
    local got, f = events_of({ big:sub(1, 100), big:sub(101), added }, 200)
    assert.same({ '<oversize 200>', want[1] }, got)
    assert.equal(0, f:pending())
  end)
end)

describe('a Status in CBOR', function()
  -- responsewriters writes an error in the type the request negotiated: a CBOR
  -- request's 410 or 403 body is self-described CBOR.
  it('is read as the Status it is, recognised by the self-described prefix', function()
    local body = '\xd9\xd9\xf7' .. string.char(0xa4) .. '\x44kind\x46Status' .. '\x44code\x19\x01\x9a'
      .. '\x46reason\x47Expired' .. '\x47message\x43old'
    local s = testing.decode_status(body)
    assert.same({ code = 410, reason = 'Expired', message = 'old' }, s)
    assert.is_nil(testing.decode_status('\xd9\xd9\xf7\xa1\x44kind\x43Pod'))
    assert.is_nil(testing.decode_status('\xd9\xd9\xf7\xff'))
  end)
end)

describe('a CBOR LIST, decoded as it arrives', function()
  local chunks = require('support.klua').chunks
  local SD = '\xd9\xd9\xf7'

  -- A map whose members are written in the order given ({name, value}, ...).
  local function map(members)
    local parts = { cbor.head(5, #members) }
    for _, m in ipairs(members) do parts[#parts + 1] = encode(m[1]) .. m[2] end
    return table.concat(parts)
  end
  local function array(elems) return cbor.head(4, #elems) .. table.concat(elems) end

  local function pod(name, rv)
    return encode { metadata = { name = name, namespace = 'ns', resourceVersion = rv, labels = { app = 'web' } },
      spec = { nodeName = 'n1', containers = { { name = 'c', image = 'img:1' } } }, status = { phase = 'Running' } }
  end
  local PODS = { pod('a', '7'), pod('b', '8'), SD .. pod('c', '9') }
  local META = encode { resourceVersion = '42', ['continue'] = 'tok', remainingItemCount = 3 }
  -- as apimachinery writes a PodList: self-described, kind, apiVersion, metadata, items
  local BODY = SD .. map { { 'kind', encode 'PodList' }, { 'apiVersion', encode 'v1' }, { 'metadata', META },
    { 'items', array(PODS) } }

  local function stream(pieces, max) return testing.decode_list_stream(pieces, max, false, true) end
  -- what the JSON reader gives for the body's JSON text
  local function as_json(body) return assert(testing.decode_list(assert(testing.cbor_to_json(body)))) end

  it('gives what the JSON reader gives for its JSON text, split at every byte and in reads of every size', function()
    local want = as_json(BODY)
    assert.equal(3, #want.items)
    assert.equal('{"kind":"Pod","apiVersion":"v1","metadata":{"labels":{"app":"web"},"name":"a","namespace":"ns",'
      .. '"resourceVersion":"7"},"spec":{"containers":[{"image":"img:1","name":"c"}],"nodeName":"n1"},'
      .. '"status":{"phase":"Running"}}', want.items[1].json)
    assert.equal('42', want.rv)
    assert.equal('tok', want.continue)
    assert.equal(3, want.remaining)
    assert.same(want, assert(stream { BODY }))
    for i = 1, #BODY - 1 do
      assert.same(want, assert(stream { BODY:sub(1, i), BODY:sub(i + 1) }), 'split at ' .. i)
    end
    for size = 1, 64 do assert.same(want, assert(stream(chunks(BODY, size))), 'reads of ' .. size) end
  end)

  -- issue 26: the body was held whole and transcoded at its end, so a sync's peak
  -- memory was the body, its JSON text and the cache at once.
  it('decodes each item as its last byte arrives, holding no more than an item and the envelope', function()
    local pods = {}
    for i = 1, 1000 do pods[i] = pod('p' .. i, tostring(i)) end
    local body = SD .. map { { 'kind', encode 'PodList' }, { 'apiVersion', encode 'v1' }, { 'metadata', META },
      { 'items', array(pods) } }
    local pieces = chunks(body, 1000)
    local got = assert(testing.decode_list_stream(pieces, nil, false, true, true))
    assert.equal(1000, #got.items)
    local fed, ends, k = 0, #body - #table.concat(pods), 0
    for i, piece in ipairs(pieces) do
      fed = fed + #piece
      while k < #pods and ends + #pods[k + 1] <= fed do
        k = k + 1
        ends = ends + #pods[k]
      end
      assert.equal(k, got.decoded_after[i], 'after ' .. fed .. ' bytes')
    end
    assert.is_true(got.held < #body / 4, got.held .. ' bytes held of ' .. #body)
  end)

  it('reads indefinite-length maps, arrays and strings as their definite forms', function()
    local body = SD .. '\xbf' .. encode 'kind' .. encode 'PodList' .. '\x7f\x62me\x66tadata\xff' .. META
      .. encode 'items' .. SD .. '\x9f' .. table.concat(PODS) .. '\xff' .. encode 'apiVersion' .. encode 'v1' .. '\xff'
    local want = as_json(BODY)
    for i = 1, #body - 1 do
      assert.same(want, assert(stream { body:sub(1, i), body:sub(i + 1) }), 'split at ' .. i)
    end
  end)

  it('types the items from a kind, apiVersion and metadata that come after them', function()
    local body = map { { 'items', array { pod('z', '3') } }, { 'apiVersion', encode 'v1' }, { 'kind', encode 'PodList' },
      { 'metadata', encode { resourceVersion = '9' } } }
    for size = 1, 32 do
      local got = assert(stream(chunks(body, size)))
      assert.equal('9', got.rv)
      assert.matches('^{"kind":"Pod","apiVersion":"v1","metadata":', got.items[1].json)
    end
  end)

  it('reads the items member as Go\'s decoder does: the last of duplicates; empty, null or missing items', function()
    local rv = { 'metadata', encode { resourceVersion = '1' } }
    for _, body in ipairs {
      map { rv, { 'items', array { pod('a', '1') } }, { 'items', array { pod('b', '2') } } },
      map { rv, { 'items', '\xf6' }, { 'items', array { pod('b', '2') } } },
      map { rv, { 'items', array {} } },
      map { rv, { 'items', '\x9f\xff' } },
      map { rv, { 'items', '\xf6' } },
      map { rv },
    } do
      local want = as_json(body)
      for i = 1, #body - 1 do
        assert.same(want, assert(stream { body:sub(1, i), body:sub(i + 1) }), 'split at ' .. i)
      end
    end
  end)

  it('reads a Status answered with 200 as the JSON reader does', function()
    local body = SD .. encode { kind = 'Status', code = 500, reason = 'InternalError', message = 'boom' }
    local _, werr = testing.decode_list(testing.cbor_to_json(body))
    local _, err = stream { body }
    assert.equal(werr, err)
  end)

  it('says what is missing from a body that ends early, wherever it ends', function()
    local want = {
      [0] = 'LIST response ended early: it has no CBOR map',
      [2] = 'LIST response ended early: in the header of its CBOR map',
      [5] = 'LIST response ended early: in the name of a member of its map',
      [9] = 'LIST response ended early: in the value of its member "kind"',
    }
    want[#SD + 1 + #encode 'kind' + #encode 'PodList' + #encode 'apiVersion' + #encode 'v1'] =
      'LIST response ended early: 2 more members of its map to come'
    local cut_items = #BODY - #PODS[3] - #PODS[2] - #PODS[1]
    want[cut_items] = 'LIST response ended early: after item 0, 3 more of its items to come'
    want[cut_items + 5] = 'LIST response ended early: in item 1 of its items'
    want[#BODY - 1] = 'LIST response ended early: in item 3 of its items'
    for n = 0, #BODY - 1 do
      local got, err = stream { BODY:sub(1, n) }
      assert.is_nil(got, n)
      assert.matches('^LIST response ended early: ', err, 1, false, n)
      if want[n] then assert.equal(want[n], err, n) end
    end
    local _, err = stream { SD .. '\xbf' .. encode 'items' .. '\x9f' .. PODS[1] }
    assert.equal('LIST response ended early: after item 1, before the break that ends its items', err)
    _, err = stream { SD .. '\xbf' .. encode 'items' .. '\x80' }
    assert.equal('LIST response ended early: before the break that ends its map', err)
    _, err = stream { BODY:sub(1, #BODY - #PODS[3] - #PODS[2] - #PODS[1] - 1) }
    assert.equal('LIST response ended early: in the header of its items', err)
  end)

  it('refuses what is not a CBOR map, bytes after it, an item it cannot read, an item past its limit', function()
    local _, err = stream { SD .. array {} }
    assert.equal('LIST response is CBOR but not a map (its first byte is 0x80)', err)
    _, err = stream { map {} .. '\x00' }
    assert.equal('LIST response has bytes after its CBOR map', err)
    _, err = stream { map { { 'items', array { pod('a', '1'), '\xc1\x01' } } } }
    assert.equal('LIST item 2 is not CBOR klua reads: CBOR tag 1 has no JSON form at byte 0', err)
    _, err = stream { map { { 'items', array { pod('a', '1'), '\x1c' } } } }
    assert.equal('LIST response is not CBOR klua reads: a reserved additional information value (28-30)', err)
    _, err = stream { map { { 'metadata', '\xf7' } } }
    assert.equal('LIST response\'s member "metadata" is not CBOR klua reads: CBOR undefined has no JSON form at byte 0', err)
    _, err = stream { cbor.head(5, 1) .. '\x01' .. encode 'x' }
    assert.equal('LIST response has a member whose name is not a string', err)
    local big = pod(('x'):rep(300), '1')
    for size = 1, 3 do
      _, err = stream(chunks(map { { 'items', array { pod('a', '1'), big } } }, size * 50), 256)
      assert.equal('LIST item 2 is larger than 256 bytes', err)
    end
  end)
end)
