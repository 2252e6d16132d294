-- Cache transforms: klua.informer{transform = klua.drop_fields(...)} drops members from
-- every object, in C, before it is cached or handed to a handler (src/wire/prune.c), as
-- client-go's SetTransform is used to drop metadata.managedFields: the cache keeps fewer
-- bytes, and views, get, list and handlers all see the same, smaller object.
local sandbox = require 'support.sandbox'
local testing = require 'klua.testing'
local K = require 'support.klua'

local SCRIPT = [[
local cms = klua.informer { resource = 'configmaps', namespace = 'default',
  transform = klua.drop_fields('data.big', 'metadata.annotations') }
local function show(how, obj)
  print(how, obj.metadata.name, tostring(obj.data and obj.data.big), tostring(obj.data and obj.data.small),
    tostring(obj.metadata.annotations), #tostring(obj))
end
cms:on('add', function(obj) show('add', obj) end)
cms:on('update', function(_, obj) show('update', obj) end)
cms:on('delete', function(obj) show('delete', obj) end)
klua.on_synced(function()
  show('get', cms:get('default/old'))
  show('list', cms:list()[1])
end)
]]

describe('informer transforms', function()
  local sb, p

  setup(function() sb = sandbox.start{} end)
  teardown(function()
    if p then p:cleanup() end
    sb:stop()
  end)

  it('drop the named members from listed, watched and deleted objects alike', function()
    local big = ('x'):rep(5000)
    sb:kubectl('create configmap old --from-literal=big=' .. big .. ' --from-literal=small=s')
    sb:kubectl('annotate configmap old note=' .. ('n'):rep(200))
    p = K.spawn({ '--kubeconfig', sb.kubeconfig, 'run', K.script(SCRIPT) })
    assert.truthy(p:wait_for('list\told', 15 * K.slowdown), p:errors())
    sb:kubectl('create configmap new --from-literal=big=' .. big .. ' --from-literal=small=t')
    sb:kubectl('label configmap new seen=yes')
    sb:kubectl('delete configmap new')
    assert.truthy(p:wait_for('delete\tnew', 15 * K.slowdown), p:errors())
    local lines = {}
    for line in p:output():gmatch('[^\n]+') do
      local how, name, b, small, ann, size = line:match('^(%S+)\t(%S+)\t(%S+)\t(%S+)\t(%S+)\t(%d+)$')
      assert.truthy(how, line)
      lines[#lines + 1] = how .. ' ' .. name .. ' ' .. b .. ' ' .. small .. ' ' .. ann
      assert.is_true(tonumber(size) < 1000, 'the object kept is small: ' .. line)
    end
    assert.same({ 'add old nil s nil', 'get old nil s nil', 'list old nil s nil',
      'add new nil t nil', 'update new nil t nil', 'delete new nil t nil' }, lines)
  end)

  it('refuse a path the cache keys on, and a transform that is not drop_fields', function()
    for _, case in ipairs({
      { "klua.drop_fields('metadata.name')", 'path "metadata.name" cannot be dropped: the cache keys on it' },
      { 'function(obj) return obj end', 'transform takes klua.drop_fields(path, ...)' },
      { 'klua.drop_fields(7)', 'drop_fields: path 1 must be a string' },
    }) do
      local _, err, code = K.run({ '--kubeconfig', sb.kubeconfig, 'run',
        K.script("klua.informer { resource = 'configmaps', transform = " .. case[1] .. ' }') })
      assert.equals(1, code, err)
      assert.matches(case[2], err, 1, true)
    end
  end)
end)
