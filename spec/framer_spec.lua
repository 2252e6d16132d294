-- The framer turns a watch body, read in chunks of any size, into whole
-- newline-delimited frames, and refuses frames over its size limit without
-- buffering them.
local testing = require 'klua_testing'

local function frames(events)
  local out = {}
  for _, e in ipairs(events) do out[#out + 1] = e.frame or ('<oversize ' .. e.oversize .. '>') end
  return out
end

describe('framer', function()
  it('emits every frame when many arrive in one read', function()
    local f = testing.framer()
    assert.same({ '{"a":1}', '{"b":2}', '{"c":3}' }, frames(f:feed('{"a":1}\n{"b":2}\n{"c":3}\n')))
    assert.equals(0, f:pending())
  end)

  it('joins a frame split across any number of reads', function()
    local body = '{"type":"ADDED","object":{"metadata":{"name":"p"}}}\n'
    for chunk = 1, #body do
      local f, got = testing.framer(), {}
      for i = 1, #body, chunk do
        for _, e in ipairs(f:feed(body:sub(i, i + chunk - 1))) do got[#got + 1] = e.frame end
      end
      assert.same({ body:sub(1, -2) }, got)
    end
  end)

  it('holds an unfinished frame until its newline arrives', function()
    local f = testing.framer()
    assert.same({}, f:feed('{"partial":'))
    assert.equals(11, f:pending())
    assert.same({ '{"partial":true}' }, frames(f:feed('true}\n')))
  end)

  it('skips blank lines and strips a carriage return', function()
    local f = testing.framer()
    assert.same({ '{"a":1}', '{"b":2}' }, frames(f:feed('\n  \n{"a":1}\r\n\r\n{"b":2}\n')))
  end)

  it('refuses an oversize frame, skips its bytes unbuffered, and goes on', function()
    local f = testing.framer(16)
    local got = frames(f:feed('{"small":1}\n' .. string.rep('x', 10)))
    assert.same({ '{"small":1}' }, got)
    got = frames(f:feed(string.rep('x', 100)))
    assert.same({ '<oversize 16>' }, got)
    assert.equals(0, f:pending())
    got = frames(f:feed(string.rep('x', 1000) .. '\n{"next":2}\n'))
    assert.same({ '{"next":2}' }, got)
  end)

  it('refuses an oversize frame that arrives in a single read', function()
    local f = testing.framer(8)
    assert.same({ '<oversize 8>', '{"ok":1}' }, frames(f:feed(string.rep('y', 50) .. '\n{"ok":1}\n')))
  end)

  it('accepts a frame of exactly the limit', function()
    local f = testing.framer(8)
    assert.same({}, f:feed('1234'))
    assert.same({ '12345678' }, frames(f:feed('5678\n')))
  end)
end)
