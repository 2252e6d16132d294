-- The JSON Patch (RFC 6902) a mutating webhook's answer carries
-- (lua/klua/internal/jsonpatch.lua): applied to the object the API server
-- sent, it must give the object the handler returned. Each case is checked
-- by applying the patch with the RFC's own rules (an applier written here
-- from RFC 6902 section 4 and RFC 6901), and the paths' escaping exactly.
local testing = require('klua_testing')
package.loaded['klua.core'] = testing
local jsonpatch = require('klua.internal.jsonpatch')
local json = testing.json

local function decode(s) return assert(json.decode(s)) end

-- RFC 6901: a pointer's reference tokens, "~1" read as "/" and "~0" as "~".
local function tokens(pointer)
  local out = {}
  for t in pointer:gmatch('/([^/]*)') do out[#out + 1] = (t:gsub('~1', '/'):gsub('~0', '~')) end
  return out
end

-- RFC 6902 section 4: add, remove and replace on a decoded document.
local function apply(doc, ops)
  for _, op in ipairs(ops) do
    local toks = tokens(op.path)
    if #toks == 0 then
      assert(op.op == 'replace' or op.op == 'add', 'only add and replace apply to the whole document')
      doc = op.value
    else
      local parent = doc
      for i = 1, #toks - 1 do
        local k = toks[i]
        parent = parent[testing.type(parent) == 'array' and tonumber(k) + 1 or k]
        assert(parent ~= nil, 'the path ' .. op.path .. ' does not exist')
      end
      local last = toks[#toks]
      if testing.type(parent) == 'array' then
        local i = tonumber(last) + 1
        if op.op == 'add' then table.insert(parent, i, op.value)
        elseif op.op == 'remove' then table.remove(parent, i)
        else parent[i] = op.value end
      else
        if op.op == 'add' then parent[last] = op.value
        else
          assert(parent[last] ~= nil, op.op .. ' of a member that is not there: ' .. op.path)
          if op.op == 'replace' then parent[last] = op.value else parent[last] = nil end
        end
      end
    end
  end
  return doc
end

-- The patch from a to b (JSON texts), after a round trip through its JSON.
local function patch(a, b)
  return decode(json.encode(jsonpatch.diff(decode(a), decode(b))))
end

local function check(a, b)
  local ops = patch(a, b)
  local got = apply(decode(a), ops)
  assert.are.same(decode(b), got)
  assert.is_true(jsonpatch.equal(decode(b), got))
  return ops
end

describe('the JSON patch of a mutating webhook', function()
  it('is empty when nothing changed, whatever the order of the members', function()
    assert.are.same({}, patch('{"a":1,"b":{"c":[1,2]}}', '{"b":{"c":[1,2]},"a":1.0}'))
    assert.are.equal('[]', json.encode(jsonpatch.diff(decode('{}'), decode('{}'))))
  end)

  it('adds, removes and replaces members, and nested ones in place', function()
    local ops = check('{"metadata":{"name":"a","labels":{"x":"1","y":"2"}},"spec":{"n":1}}',
      '{"metadata":{"name":"a","labels":{"x":"1","z":"3"}},"spec":{"n":2},"status":{}}')
    assert.are.same({
      { op = 'remove', path = '/metadata/labels/y' },
      { op = 'add', path = '/metadata/labels/z', value = '3' },
      { op = 'replace', path = '/spec/n', value = 2 },
      { op = 'add', path = '/status', value = {} },
    }, ops)
  end)

  it('escapes "~" and "/" in member names as RFC 6901 says', function()
    local ops = check('{"metadata":{"annotations":{}}}',
      '{"metadata":{"annotations":{"example.com/a~b":"v"}}}')
    assert.are.equal('/metadata/annotations/example.com~1a~0b', ops[1].path)
  end)

  it('replaces an array that changed whole, so that indexes never shift under the patch', function()
    local ops = check('{"spec":{"containers":[{"name":"a"},{"name":"b"}]}}',
      '{"spec":{"containers":[{"name":"b"},{"name":"c","image":"x"}]}}')
    assert.are.same({ { op = 'replace', path = '/spec/containers',
      value = { { name = 'b' }, { name = 'c', image = 'x' } } } }, ops)
    check('{"a":[1,2,3]}', '{"a":[1,2]}')
    check('{"a":[]}', '{"a":{}}')
  end)

  it('keeps null as a value, and tells a type change from an equal value', function()
    local ops = check('{"a":{"b":1},"c":null}', '{"a":null,"c":"x"}')
    assert.are.equal(json.null, ops[1].value)
    check('{"a":"1"}', '{"a":1}')
    check('{"a":true}', '{"a":false}')
  end)

  it('is base64 as Go writes a []byte', function()
    assert.are.equal('', jsonpatch.base64(''))
    assert.are.equal('Zg==', jsonpatch.base64('f'))
    assert.are.equal('Zm8=', jsonpatch.base64('fo'))
    assert.are.equal('Zm9v', jsonpatch.base64('foo'))
    assert.are.equal('W3sib3AiOiJyZW1vdmUifV0+/w==', jsonpatch.base64('[{"op":"remove"}]>\255'))
  end)
end)
