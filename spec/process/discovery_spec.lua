-- klua finds every resource the server serves, as kubectl does, also one served
-- only at a version its group does not prefer: example.com's widgets are served
-- at v1 only and its gadgets at v1 and v2, so the group prefers v2, which lacks
-- widgets (as gateway.networking.k8s.io's preferred v1 lacks TCPRoute, served
-- at v1alpha2). kubectl's RESTMapper (client-go restmapper.NewDiscoveryRESTMapper)
-- looks at each group's preferred version, then at its others; klua.resolve,
-- klua.informer, klua watch and the shell completion do too. The sandbox's
-- discovery of such a group is checked in spec/sandbox/discovery_spec.lua.
local testing = require('klua.testing')
local K = require('support.klua')
local KW = require('support.kubectl_watch')
local fixtures = require('support.fixtures')

describe('a resource served only at a version its group does not prefer', function()
  local sb = testing.with_sandbox {}
  local ns = 'discovery'

  setup(function()
    sb:kubectl('create namespace ' .. ns)
    sb:apply(fixtures.WIDGETS_CRD)
    sb:apply(fixtures.GADGETS_V2_CRD)
    sb:kubectl('apply -n ' .. ns .. ' -f -', 'apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1}\n')
    sb:kubectl('apply -n ' .. ns .. ' -f -', 'apiVersion: example.com/v2\nkind: Gadget\nmetadata: {name: g1}\n'
      .. 'spec: {size: 3}\n')
  end)

  it('is resolved by plural, plural.group, singular, short name and kind; the preferred version first', function()
    local out = K.run_script_ok([[
      for _, name in ipairs({ 'widgets', 'widgets.example.com', 'widget', 'wd', 'Widget', 'widgets.v1.example.com',
          'gadgets', 'gd', 'Gadget', 'gadgets.example.com', 'gadgets.v1.example.com' }) do
        local r, err = klua.resolve(name)
        print(name, r and r.api_version, r and r.resource or err)
      end
    ]], { kubeconfig = sb.kubeconfig })
    assert.equals(table.concat({
      'widgets\texample.com/v1\twidgets',
      'widgets.example.com\texample.com/v1\twidgets',
      'widget\texample.com/v1\twidgets',
      'wd\texample.com/v1\twidgets',
      'Widget\texample.com/v1\twidgets',
      'widgets.v1.example.com\texample.com/v1\twidgets',
      'gadgets\texample.com/v2\tgadgets',
      'gd\texample.com/v2\tgadgets',
      'Gadget\texample.com/v2\tgadgets',
      'gadgets.example.com\texample.com/v2\tgadgets',
      'gadgets.v1.example.com\texample.com/v1\tgadgets',
    }, '\n') .. '\n', out)
  end)

  it('is cached by an informer', function()
    local out = K.run_script_ok([[
      local inf = klua.informer { resource = 'widgets', namespace = ...}
      klua.on_synced(function()
        for _, w in ipairs(inf:list()) do print(w.apiVersion, w.metadata.name) end
        klua.stop()
      end)
    ]], { kubeconfig = sb.kubeconfig, args = { ns } })
    assert.equals('example.com/v1\tw1\n', out)
  end)

  it('is watched by klua watch as kubectl get -w prints it, named as kubectl names it', function()
    local cmp = KW.new(sb, ns)
    local function same(what, first)
      cmp:same(what .. ' -n ' .. ns, { first = first, change = false,
        done = function(t) return t:find(first, 1, true) end })
    end
    for _, name in ipairs({ 'widgets', 'widgets.example.com', 'wd', 'Widget' }) do same(name, 'w1') end
    same('gadgets', 'g1')
  end)

  it('is offered by the shell completion', function()
    local out = K.run({ '__complete', '--kubeconfig', sb.kubeconfig, 'watch', 'w' })
    assert.truthy(out:find('\nwidgets.example.com\n', 1, true) or out:find('^widgets.example.com\n'), out)
    out = K.run({ '__complete', '--kubeconfig', sb.kubeconfig, 'watch', 'g' })
    assert.equals(1, select(2, out:gsub('gadgets.example.com\n', '')), out)
  end)
end)
