-- Pruning (src/wire/prune.c): the C cache transform that drops named members, such as
-- metadata.managedFields, from an object's JSON before the cache keeps it, so a cached
-- object costs only the bytes its handlers read.
local cjson = require('cjson')
local T = require('klua_testing')

local POD = cjson.encode({
  kind = 'Pod', apiVersion = 'v1',
  metadata = { name = 'web', namespace = 'default', resourceVersion = '7', uid = 'u-1',
    labels = { app = 'web' },
    managedFields = { { manager = 'kubectl', operation = 'Apply', fieldsType = 'FieldsV1',
      fieldsV1 = { ['f:metadata'] = { ['f:labels'] = { ['f:app'] = {} } } } } } },
  spec = { containers = { { name = 'c', image = 'nginx' } } },
  status = { phase = 'Running', conditions = { { type = 'Ready', status = 'True' } } },
})

-- Each case is { path, object, what is left }: pruning path from the object leaves those bytes.
local function prunes_each(cases)
  for _, case in ipairs(cases) do
    assert.same({ case[3], true }, { T.prune(case[2], { case[1] }) }, case[1] .. ' of ' .. case[2])
  end
end

describe('pruning cached objects', function()
  it('drops metadata.managedFields and keeps every other member as it was', function()
    local out, changed = T.prune(POD, { 'metadata.managedFields' })
    assert.is_true(changed)
    local want = cjson.decode(POD)
    want.metadata.managedFields = nil
    assert.same(want, cjson.decode(out))
    assert.is_true(#out < #POD)
  end)

  it('drops several paths at once, at any depth through objects', function()
    local out = T.prune(POD, { 'metadata.managedFields', 'status.conditions', 'spec' })
    local got = cjson.decode(out)
    assert.is_nil(got.metadata.managedFields)
    assert.is_nil(got.status.conditions)
    assert.is_nil(got.spec)
    assert.equals('Running', got.status.phase)
    assert.same({ app = 'web' }, got.metadata.labels)
  end)

  for _, case in ipairs {
    { name = 'leaves an object without those members untouched',
      obj = '{"kind":"Pod","metadata":{"name":"a"},"status":{}}', paths = { 'metadata.managedFields', 'status.x.y' } },
    { name = 'does not reach into arrays or into a member that is not an object',
      obj = '{"items":[{"a":1}],"status":"Running"}', paths = { 'items.a', 'status.phase' } },
  } do
    it(case.name, function()
      assert.same({ case.obj, false }, { T.prune(case.obj, case.paths) })
    end)
  end

  it('removes the first, a middle and the last member alike, leaving valid JSON', function()
    local obj = '{ "a" : 1 , "b" : {"x":[1,{"y":"}"}],"z":"\\"q"} , "c" : null }'
    for _, case in ipairs({ { 'a', { b = { x = { 1, { y = '}' } }, z = '"q' }, c = cjson.null } },
      { 'b', { a = 1, c = cjson.null } }, { 'c', { a = 1, b = { x = { 1, { y = '}' } }, z = '"q' } } },
      { 'b.x', { a = 1, b = { z = '"q' }, c = cjson.null } } }) do
      local out, changed = T.prune(obj, { case[1] })
      assert.is_true(changed, case[1])
      assert.same(case[2], cjson.decode(out), case[1])
    end
  end)

  it('empties an object whose only member goes', function()
    assert.same({ '{"metadata":{}}', true },
      { T.prune('{"metadata":{"managedFields":[]}}', { 'metadata.managedFields' }) })
  end)

  it('cuts members out of the bytes as they are, every other byte kept', function()
    local cases = {
      -- path, object, what is left
      { 'a', '{"a":1,"b":2}', '{"b":2}' },
      { 'b', '{"a":1,"b":2}', '{"a":1}' },
      { 'a', '{"a":1}', '{}' },
      { 'b', '{"a":1, "b" : [2, {"c":"]"}] ,"c":3}', '{"a":1 ,"c":3}' },
      { 'm.x', '{"m":{"x":{"y":1},"n":"a"},"z":0}', '{"m":{"n":"a"},"z":0}' },
      { 'm.x', '{"m":{"n":"a","x":{"y":1}},"z":0}', '{"m":{"n":"a"},"z":0}' },
      { 'm.x', '{"m":{"x":"\\\"}"},"z":0}', '{"m":{},"z":0}' },
    }
    prunes_each(cases)
  end)

  it('drops neighbouring members, and every member of an object, leaving valid JSON', function()
    assert.same({ '{"c":3}', true }, { T.prune('{"a":1,"b":2,"c":3}', { 'a', 'b' }) })
    assert.same({ '{"a":1}', true }, { T.prune('{"a":1,"b":2,"c":3}', { 'b', 'c' }) })
    local out, changed = T.prune('{"a":1,"b":2,"c":3}', { 'a', 'b', 'c' })
    assert.is_true(changed)
    assert.same({}, cjson.decode(out))
  end)

  it('drops every copy of a repeated member, as a full rewrite did', function()
    assert.same({ '{"b":2}', true }, { T.prune('{"a":1,"b":2,"a":3}', { 'a' }) })
    assert.same({ '{"m":{"y":1},"m":{"y":2}}', true },
      { T.prune('{"m":{"x":0,"y":1},"m":{"y":2,"x":0}}', { 'm.x' }) })
  end)

  -- A member name is the string it spells: Go's encoder writes <, > and & as \u003c, \u003e
  -- and \u0026, and JSON lets any character be escaped; the name is what a path names.
  it('drops a member whose name is spelled with escapes, and reaches through one', function()
    local cases = {
      -- path, object, what is left
      { 'ab', '{"a\\u0062":1,"c":2}', '{"c":2}' },
      { 'a&b', '{"x":0,"a\\u0026b":1}', '{"x":0}' },
      { 'm.x/y', '{"\\u006d":{"x\\/y":1,"n":2}}', '{"\\u006d":{"n":2}}' },
      { 'é😀', '{"\\u00e9\\ud83d\\ude00":1,"k":"v"}', '{"k":"v"}' },
      { 'q"\\', '{"q\\"\\\\":1,"k":"v"}', '{"k":"v"}' },
    }
    prunes_each(cases)
    local obj = '{"a\\u0062c":1,"a\\\\":2,"\\u0061":3}'
    assert.same({ obj, false }, { T.prune(obj, { 'ab', 'a\\u0061' }) })
  end)

  it('finds nothing to drop under an absent parent or in an empty object', function()
    for _, obj in ipairs({ '{"n":{"x":1}}', '{"m":{}}', '{}', '{"m":null,"x":[{"m":{"x":1}}]}' }) do
      assert.same({ obj, false }, { T.prune(obj, { 'm.x' }) }, obj)
    end
  end)

  it('refuses a malformed object wherever the fault is, before or after a dropped member', function()
    for _, obj in ipairs({ '{"a":1,"b":', '{"b":[1,"a":1}', '{"a":1 "b":2}', '{"m":{"x":1,}}', '{"a":"x}' }) do
      local out, changed = T.prune(obj, { 'a', 'm.x' })
      assert.same({ obj, nil }, { out, changed }, obj)
    end
  end)

  it('does not reach into arrays or into a member that is not an object', function()
    local obj = '{"items":[{"a":1}],"status":"Running"}'
    assert.same({ obj, false }, { T.prune(obj, { 'items.a', 'status.phase' }) })
  end)

  it('leaves bytes that are not an object untouched and says so', function()
    assert.same({ '[1,2]', nil }, { T.prune('[1,2]', { 'a' }) })
    assert.same({ '{"a":', nil }, { T.prune('{"a":', { 'a' }) })
  end)

  it('refuses a path that would remove what the cache keys on, naming it', function()
    for _, path in ipairs({ 'metadata', 'metadata.name', 'metadata.namespace',
      'metadata.resourceVersion', 'metadata.uid', 'kind', 'apiVersion' }) do
      assert.has_error(function() T.prune(POD, { path }) end,
        'path "' .. path .. '" cannot be dropped: the cache keys on it')
    end
    assert.has_error(function() T.prune(POD, { 'metadata..x' }) end,
      'path "metadata..x" has an empty member name')
  end)
end)
