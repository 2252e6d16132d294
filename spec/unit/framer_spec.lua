-- The framer turns a watch body, read in chunks of any size, into its JSON
-- values, one frame each. client-go frames a watch body with a json.Decoder
-- (apimachinery's framer.NewJSONFramedReader), not by lines, so events one a
-- line, written back to back, or pretty-printed over many lines all arrive
-- the same. Frames over the size limit are refused without being buffered;
-- a line of junk between values becomes a frame of its own, which the
-- decoder refuses like any malformed event.
local testing = require('klua_testing')

local function frames(events)
  local out = {}
  for _, e in ipairs(events) do out[#out + 1] = e.frame or ('<oversize ' .. e.oversize .. '>') end
  return out
end

-- Every spec runs with the scanner klua picks for this CPU, and with each
-- scanner this CPU can run (the portable one runs everywhere).
local scanners = { false }
for _, name in ipairs { 'avx512', 'avx2', 'portable' } do
  if testing.framer(nil, name) then scanners[#scanners + 1] = name end
end

for _, scanner in ipairs(scanners) do
  local function framer(max) return testing.framer(max, scanner or nil) end

  -- The frames of body fed in the given pieces.
  local function feed(pieces, max)
    local f, got = framer(max), {}
    for _, piece in ipairs(pieces) do
      for _, frame in ipairs(frames(f:feed(piece))) do got[#got + 1] = frame end
    end
    return got, f
  end

  -- Checks that body gives want however it is cut: one byte a read, in two
  -- reads split at every position, and in reads of every size.
  local function same_at_every_split(body, want, max)
    local bytes = {}
    for i = 1, #body do bytes[i] = body:sub(i, i) end
    assert.same(want, (feed(bytes, max)), 'fed one byte at a time')
    for cut = 0, #body do
      assert.same(want, (feed({ body:sub(1, cut), body:sub(cut + 1) }, max)), 'split after byte ' .. cut)
    end
    for size = 2, #body do
      local pieces = {}
      for i = 1, #body, size do pieces[#pieces + 1] = body:sub(i, i + size - 1) end
      assert.same(want, (feed(pieces, max)), 'fed in reads of ' .. size .. ' bytes')
    end
  end

  describe(scanner and 'framer (' .. scanner .. ' scanner)' or 'framer', function()
    it('emits every event of a newline-delimited stream that arrives in one read', function()
      local f = framer()
      assert.same({ '{"a":1}', '{"b":2}', '{"c":3}' }, frames(f:feed('{"a":1}\n{"b":2}\n{"c":3}\n')))
      assert.equals(0, f:pending())
    end)

    it('splits values written back to back with nothing between them', function()
      local f = framer()
      assert.same({ '{"a":1}', '{"b":{"c":[2]}}', '[3,4]' }, frames(f:feed('{"a":1}{"b":{"c":[2]}}[3,4]')))
      assert.equals(0, f:pending())
    end)

    it('frames a pretty-printed event spread over many lines as one frame', function()
      local event = table.concat({
        '{',
        '  "type": "ADDED",',
        '  "object": {',
        '    "metadata": {',
        '      "name": "p",',
        '      "labels": { "app": "web" }',
        '    },',
        '    "spec": [',
        '      1,',
        '      2',
        '    ]',
        '  }',
        '}' }, '\n')
      local f = framer()
      assert.same({ event, event, '{"type":"DELETED"}' }, frames(f:feed(event .. '\n' .. event .. '{"type":"DELETED"}')))
    end)

    it('skips whitespace between values: spaces, tabs, blank lines and CRLF line ends', function()
      local f = framer()
      assert.same({ '{"a":1}', '{"b":2}', '{"c":3}' },
        frames(f:feed('\r\n  \t\n{"a":1}\r\n\r\n {"b":2}\t{"c":3}  \r\n')))
      assert.equals(0, f:pending())
    end)

    it('holds an unfinished value until its closing bracket arrives, across lines', function()
      local f = framer()
      assert.same({}, f:feed('  {"partial":\n'))
      assert.equals(12, f:pending())
      assert.same({}, f:feed('{"inner":true}'))
      assert.same({ '{"partial":\n{"inner":true}}' }, frames(f:feed('}')))
      assert.equals(0, f:pending())
    end)

    it('does not count brackets, quotes or newlines that sit inside strings', function()
      local values = {
        [[{"braces":"}{][","after":1}]],
        [[{"quote":"say \"}\" twice"}]],
        [[{"backslash":"C:\\"}]],
        [[{"backslashes":"\\\\\"}{\\"}]],
        [[{"escaped newline":"line\nnext\r\n","tab":"\t"}]],
        [[{"unicode":"\u007d\u0022 é — 😀"}]],
      }
      local f = framer()
      assert.same(values, frames(f:feed(table.concat(values))))
      assert.same(values, frames(framer():feed(table.concat(values, '\n'))))
    end)

    it('gives the same frames however the stream is cut into reads', function()
      -- Cuts fall inside strings, inside escapes, between a backslash and the
      -- quote it escapes, inside UTF-8 sequences and inside CRLF.
      local values = {
        [[{"type":"ADDED","object":{"s":"}\"{\\","u":"é😀"}}]],
        '[\n  {"a": "\\\\"},\n  []\n]',
        [[{"b":"\\\"\\"}]],
      }
      local body = values[1] .. values[2] .. '\r\n' .. values[3] .. ' \t'
      same_at_every_split(body, values)
    end)

    it('gives the same frames at every cut of a long value, across 64-byte blocks', function()
      local long = '{"data":"' .. string.rep('ab\\"{}[]\\\\', 20) .. '","n":[' .. string.rep('[', 40) ..
          string.rep(']', 40) .. ']}'
      same_at_every_split(long .. long, { long, long })
    end)

    -- The scanner passes over an empty '{}' or '[]' inside a value when it
    -- looks for the bracket that closes it; a value that is itself empty is
    -- closed by such a pair, whether it starts a read or follows another.
    it('frames empty objects and arrays, as values and inside values, at every cut', function()
      local fields = '{"f:metadata":{"f:labels":{".":{},"f:app":{}}},"f:spec":{"f:containers":{"k:{\\"name\\":\\"a\\"}":{}}}}'
      local dense = '{"fieldsV1":' .. string.rep('[{},[],', 12) .. string.rep('{}]', 12) .. ',"after":' .. fields .. '}'
      local values = { '{}', '[]', '{"a":{},"b":[],"c":[{}]}', dense, '[{}]', '{}' }
      same_at_every_split(table.concat(values, '\n', 1, 3) .. values[4] .. values[5] .. ' ' .. values[6], values)
      assert.same({ '{}' }, (feed({ '{}' })))
      assert.same({ '[]', '{}' }, (feed({ '[]{}' })))
    end)

    it('refuses an oversize value, skips to its end unbuffered, and frames the next one', function()
      local f = framer(16)
      assert.same({ '{"small":1}' }, frames(f:feed('{"small":1}\n{"big":"' .. string.rep('x', 3))))
      assert.same({ '<oversize 16>' }, frames(f:feed(string.rep('x', 100))))
      assert.equals(0, f:pending())
      -- The skip follows the value's strings and depth, not the lines: the
      -- brackets and the newline inside its string do not end it.
      assert.same({}, f:feed(string.rep('x', 1000) .. '}]\n{ still inside'))
      assert.equals(0, f:pending())
      assert.same({ '{"next":2}' }, frames(f:feed('","deeper":{"a":[]}}{"next":2}')))
    end)

    it('refuses an oversize value that arrives in a single read, and goes on on the same line', function()
      local f = framer(8)
      assert.same({ '<oversize 8>', '{"ok":1}' }, frames(f:feed('{"y":"' .. string.rep('y', 50) .. '"}{"ok":1}')))
    end)

    it('accepts a value of exactly the limit', function()
      local f = framer(8)
      assert.same({}, f:feed('{"a":'))
      assert.same({ '{"a":12}' }, frames(f:feed('12}')))
      assert.same({ '<oversize 8>' }, frames(f:feed('{"a":123}')))
    end)

    it('hands a junk line between values on as a frame, for the decoder to refuse', function()
      local f = framer()
      assert.same({ '{"a":1}', '<html><body>502 Bad Gateway</body></html>', '42 "not an object"', '{"b":2}' },
        frames(f:feed('{"a":1}<html><body>502 Bad Gateway</body></html>\r\n42 "not an object"\n{"b":2}')))
    end)

    it('refuses a junk line over the limit and skips to its end', function()
      local f = framer(8)
      assert.same({ '<oversize 8>', '{"b":2}' }, frames(f:feed(string.rep('z', 50) .. '{"x":"}"}\n{"b":2}')))
    end)

    it('starts over between values after a reset', function()
      local f = framer()
      assert.same({}, f:feed('{"cut":"inside a string {'))
      f:reset()
      assert.equals(0, f:pending())
      assert.same({ '{"a":1}' }, frames(f:feed('{"a":1}')))
    end)
  end)
end
