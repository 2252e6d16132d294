-- Out of memory on the host side aborts klua with one line naming the size,
-- as Redis does (docs/architecture.md, "Out of memory"): no stage carries on
-- with a result that looks right and is not — a LIST missing an item, a map
-- missing a key, an event without its identity. (The Lua state's own cap,
-- --memory-limit, is a different matter: see klua_module_spec.)
--
-- testing.fail_allocation_after(k) makes the k-th host allocation from then
-- on fail. Each run is a process of its own; for every k it either aborts
-- with the message or, once k is past the last allocation the work makes,
-- prints the complete result.
local K = require('support.klua')

-- Under make test-asan the spec module is instrumented: the interpreter that
-- loads it needs the sanitizer runtime preloaded, as busted's own does
-- (leak checks stay off for an interpreter that is not ours).
local PRELOAD = os.getenv('LD_PRELOAD')
local SANITIZED = PRELOAD and ('LD_PRELOAD=%s ASAN_OPTIONS=%s '):format(K.quote(PRELOAD),
  K.quote((os.getenv('KLUA_CHILD_ASAN_OPTIONS') or '') .. ':detect_leaks=0')) or ''

--- Runs code in a fresh lua5.4 with the k-th allocation failing; returns
-- stdout, stderr and the exit status.
local function run_failing(k, code)
  local dir = K.tmpdir()
  K.write_file(dir .. '/run.lua', ('local testing = require("klua_testing")\n' ..
    'testing.fail_allocation_after(%d)\n%s\n'):format(k, code))
  local status = K.run_command(('%slua5.4 %s/run.lua > %s/out 2> %s/err; echo $?'):format(
    SANITIZED, dir, dir, dir))
  local out, err = K.read_file(dir .. '/out'), K.read_file(dir .. '/err')
  os.execute('rm -rf ' .. K.quote(dir))
  return out, err, tonumber(status)
end

--- Fails each allocation code makes in turn; returns what code printed
-- once no allocation failed, and how many runs aborted before that.
local function sweep(code)
  for k = 0, 500 do
    local out, err, status = run_failing(k, code)
    if status == 0 then return out, k end
    assert.equals(134, status, ('k = %d: exit status %s; stderr: %s'):format(k, status, err)) -- SIGABRT
    assert.matches('out of memory allocating %d+ bytes; aborting\n', err)
    assert.equals('', out, 'k = ' .. k .. ' printed before aborting')
  end
  error('more than 500 allocations')
end

describe('a host allocation that fails', function()
  it('aborts the process with a message naming its size', function()
    local out, err, status = run_failing(0, 'print(testing.hmap():put("key", 1))')
    assert.equals(134, status)
    assert.equals('', out)
    assert.matches('error %[klua%] out of memory allocating %d+ bytes; aborting\n', err)
  end)

  it('never leaves a streamed LIST without one of its items', function()
    local body = '{"kind":"ConfigMapList","metadata":{"resourceVersion":"9"},"items":[' ..
      '{"metadata":{"name":"a","resourceVersion":"7"},"data":{"k":"' .. ('x'):rep(300) .. '"}},' ..
      '{"metadata":{"name":"b","resourceVersion":"8"}}]}'
    local out, aborted = sweep(([[
      local chunks = {}
      local body = %q
      for i = 1, #body, 64 do chunks[#chunks + 1] = body:sub(i, i + 63) end
      local list = assert(testing.decode_list_stream(chunks))
      for _, it in ipairs(list.items) do print(it.name, it.rv) end
      print(list.rv)
    ]]):format(body))
    assert.equals('a\t7\nb\t8\n9\n', out)
    assert.is_true(aborted >= 4)
  end)

  it('never leaves a key out of a map', function()
    local out, aborted = sweep([[
      local m = testing.hmap()
      for i = 1, 100 do m:put('key-' .. i, i) end
      local sum = 0
      for i = 1, 100 do sum = sum + m:get('key-' .. i) end
      print(m:len(), sum)
    ]])
    assert.equals('100\t5050\n', out)
    assert.is_true(aborted >= 100)
  end)

  it('never decodes a watch event without its identity', function()
    local out, aborted = sweep([[
      local ev = assert(testing.decode_event(
        '{"type":"MODIFIED","object":{"kind":"Pod","metadata":{"namespace":"ns","name":"p","resourceVersion":"12"}}}\n',
        'Pod'))
      print(ev.type, ev.ns, ev.name, ev.rv)
    ]])
    assert.equals('MODIFIED\tns\tp\t12\n', out)
    assert.is_true(aborted >= 2)
  end)
end)
