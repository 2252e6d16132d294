-- Discovery of a group whose CRDs are served at different versions (widgets at
-- v1 only, gadgets at v1 and v2), as kube-apiserver answers it: apiextensions-
-- apiserver's DiscoveryController.sync (customresource_discovery_controller.go)
-- lists every version any CRD of the group serves, sorted by
-- sortGroupDiscoveryByKubeAwareVersion, and prefers the first; kube-aggregator's
-- /apis orders the group's versions alike (its CRD APIServices share
-- VersionPriority 100: crdregistration_controller.go), and each
-- /apis/GROUP/VERSION lists only the resources served at that version.
local testing = require('klua.testing')
local fixtures = require('support.fixtures')

describe('sandbox discovery of a group whose CRDs serve different versions', function()
  local sb = testing.with_sandbox {}

  setup(function()
    assert(select(2, sb:try_kubectl('apply -f -', fixtures.WIDGETS_CRD)))
    assert(select(2, sb:try_kubectl('apply -f -', fixtures.GADGETS_V2_CRD)))
  end)

  local function names(list)
    local out = {}
    for _, r in ipairs(list.resources) do out[#out + 1] = r.name end
    table.sort(out)
    return out
  end

  it('prefers the highest version any of its CRDs serves, and lists each resource where it is served', function()
    local want = {
      name = 'example.com',
      versions = { { groupVersion = 'example.com/v2', version = 'v2' }, { groupVersion = 'example.com/v1', version = 'v1' } },
      preferredVersion = { groupVersion = 'example.com/v2', version = 'v2' },
    }
    local status, groups = sb:json('GET', '/apis')
    assert.equals(200, status)
    local found
    for _, g in ipairs(groups.groups) do if g.name == 'example.com' then found = g end end
    assert.same(want, found)
    local _, group = sb:json('GET', '/apis/example.com')
    assert.same({ want.versions, want.preferredVersion }, { group.versions, group.preferredVersion })
    local _, v1 = sb:json('GET', '/apis/example.com/v1')
    assert.same({ 'gadgets', 'gadgets/status', 'widgets', 'widgets/status' }, names(v1))
    local _, v2 = sb:json('GET', '/apis/example.com/v2')
    assert.same({ 'gadgets', 'gadgets/status' }, names(v2))
  end)

  -- kubectl's RESTMapper (client-go restmapper.NewDiscoveryRESTMapper) looks at every
  -- served version, the preferred one first.
  it('lets kubectl find widgets at v1 and gadgets at v2', function()
    assert(select(2, sb:try_kubectl('apply -f -', 'apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1}\n')))
    assert(select(2, sb:try_kubectl('apply -f -', 'apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g1}\n')))
    assert.equals('example.com/v1', sb:kubectl_json('get widgets w1').apiVersion)
    assert.equals('example.com/v1', sb:kubectl_json('get wd w1').apiVersion)
    assert.equals('example.com/v2', sb:kubectl_json('get gadgets.example.com g1').apiVersion)
  end)
end)
