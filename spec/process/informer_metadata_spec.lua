-- Metadata-only informers: klua.informer{metadata_only = true} lists and watches
-- PartialObjectMetadata (Accept: ...;as=PartialObjectMetadataList for the LIST,
-- as=PartialObjectMetadata for the WATCH), as client-go's metadata informers do, so the
-- cache keeps each object's metadata (names, labels, annotations, owners) and nothing else.
local testing = require('klua.testing')
local K = require('support.klua')

local SCRIPT = [[
local cms = klua.informer { resource = 'configmaps', namespace = 'default', metadata_only = true }
local function show(how, obj)
  print(how, obj.kind, obj.apiVersion, obj.metadata.name, tostring(obj.metadata.labels and obj.metadata.labels.tier),
    tostring(obj.data), #tostring(obj))
end
cms:on('add', function(obj) show('add', obj) end)
cms:on('update', function(_, obj) show('update', obj) end)
cms:on('delete', function(obj) show('delete', obj) end)
klua.on_synced(function() show('get', cms:get('default/old')) end)
]]

describe('metadata-only informers', function()
  local sb = testing.with_sandbox()
  local p

  teardown(function() if p then p:cleanup() end end)

  it('cache and hand over PartialObjectMetadata from the list and from the watch', function()
    local big = ('x'):rep(5000)
    sb:kubectl('create configmap old --from-literal=big=' .. big)
    sb:kubectl('label configmap old tier=front')
    p = K.spawn({ '--kubeconfig', sb.kubeconfig, 'run', K.script(SCRIPT) })
    assert.truthy(p:wait_for('get\t', 15 * K.slowdown), p:errors())
    sb:kubectl('create configmap new --from-literal=big=' .. big)
    sb:kubectl('label configmap new tier=back')
    sb:kubectl('delete configmap new')
    assert.truthy(p:wait_for('delete\t', 15 * K.slowdown), p:errors())
    local rows = {}
    for line in p:output():gmatch('[^\n]+') do
      local how, kind, av, name, tier, data, size = line:match('^(%S+)\t(%S+)\t(%S+)\t(%S+)\t(%S+)\t(%S+)\t(%d+)$')
      assert.truthy(how, line)
      assert.same({ 'PartialObjectMetadata', 'meta.k8s.io/v1', 'nil' }, { kind, av, data }, line)
      assert.is_true(tonumber(size) < 1000, 'only the metadata is kept: ' .. line)
      rows[#rows + 1] = how .. ' ' .. name .. ' ' .. tier
    end
    assert.same({ 'add old front', 'get old front', 'add new nil', 'update new back', 'delete new back' }, rows)
  end)

  it('refuses a metadata_only that is not true or false', function()
    K.informer_refused(sb, "metadata_only = 'yes'", 'informer option metadata_only must be true or false, not a string')
  end)
end)
