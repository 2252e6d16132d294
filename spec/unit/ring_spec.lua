-- The FIFO under the reflector's frames and an informer's notifications:
-- first in, first out across wrap-around and growth, and an array grown by
-- a burst (a large list's notifications) handed back once the burst is
-- consumed, while a small one stays for the next push.
local testing = require('klua_testing')

describe('ring', function()
  it('pops in push order across wrap-around and growth', function()
    local r = testing.ring()
    local expect, nextv = 1, 1
    for _ = 1, 50 do
      for _ = 1, 7 do r:push(nextv); nextv = nextv + 1 end
      for _ = 1, 5 do assert.equals(expect, r:pop()); expect = expect + 1 end
    end
    while r:len() > 0 do assert.equals(expect, r:pop()); expect = expect + 1 end
    assert.equals(nextv, expect)
    assert.is_nil(r:pop())
  end)

  it('hands back an array grown past 256 KiB when it empties', function()
    local r = testing.ring()
    for i = 1, 100000 do r:push(i) end -- 800 KB of integers
    assert.is_true(r:cap() >= 100000)
    for i = 1, 99999 do assert.equals(i, r:pop()) end
    assert.is_true(r:cap() >= 100000) -- not while an element is held
    assert.equals(100000, r:pop())
    assert.equals(0, r:cap())
    r:push(7) -- and starts again from a small one
    assert.equals(7, r:pop())
    assert.is_true(r:cap() > 0 and r:cap() < 1000)
  end)

  it('keeps a small array for the next push', function()
    local r = testing.ring()
    for i = 1, 1000 do r:push(i) end
    for _ = 1, 1000 do r:pop() end
    assert.equals(1024, r:cap())
  end)
end)
