-- klua.informer{server_print = true} lists and watches the server's Table form
-- with whole objects, as kubectl get asks for it (Accept: ...;as=Table;g=meta.k8s.io;v=v1,
-- includeObject=Object; kube-apiserver sends each watch event's object as a Table of one
-- row): handlers and the cache get the plain objects, and inf:cells(obj) the cells of the
-- row each came in, from the list and from the watch alike (nil for an object of a plain
-- informer). `klua watch` prints with it.
local testing = require('klua.testing')
local K = require('support.klua')

local SCRIPT = [[
local cms = klua.informer { resource = 'configmaps', namespace = 'default', server_print = true }
local plain = klua.informer { resource = 'configmaps', namespace = 'default' }
local function show(how, obj)
  local cells = cms:cells(obj)
  print(how, obj.kind, obj.metadata.name, tostring(obj.data and obj.data.a),
    cells and (cells[1] .. ' ' .. tostring(cells[2])) or 'none')
end
cms:on('add', function(obj) show('add', obj) end)
cms:on('update', function(_, obj) show('update', obj) end)
cms:on('delete', function(obj) show('delete', obj) end)
klua.on_synced(function()
  show('get', cms:get('default/old'))
  print('plain', tostring(cms:cells(plain:get('default/old'))))
end)
]]

describe('informers with server_print', function()
  local sb = testing.with_sandbox()
  local p

  teardown(function() if p then p:cleanup() end end)

  it('cache the whole objects and keep the cells of the rows they came in', function()
    sb:kubectl('create configmap old --from-literal=a=1')
    p = K.spawn({ '--kubeconfig', sb.kubeconfig, 'run', K.script(SCRIPT) })
    assert.truthy(p:wait_for('plain\t', 15 * K.slowdown), p:errors())
    sb:kubectl('create configmap new --from-literal=a=2')
    sb:kubectl('patch configmap new --type=merge -p \'{"data":{"b":"3"}}\'')
    sb:kubectl('delete configmap new')
    assert.truthy(p:wait_for('delete\t', 15 * K.slowdown), p:errors())
    local rows = {}
    for line in p:output():gmatch('[^\n]+') do rows[#rows + 1] = (line:gsub('\t', ' ')) end
    -- The sandbox's configmaps Table: NAME, DATA, AGE, as kube-apiserver's printers.
    assert.same({ 'add ConfigMap old 1 old 1', 'get ConfigMap old 1 old 1', 'plain nil',
      'add ConfigMap new 2 new 1', 'update ConfigMap new 2 new 2', 'delete ConfigMap new 2 new 2' }, rows)
  end)

  it('refuses metadata_only or a transform beside it, and inf:cells on what is not an object', function()
    for _, extra in ipairs { 'metadata_only = true', "transform = klua.drop_fields('data')" } do
      K.informer_refused(sb, 'server_print = true, ' .. extra, 'server_print takes neither metadata_only nor transform')
    end
    K.run_script_refused("klua.informer { resource = 'configmaps', server_print = true }:cells({})",
      { kubeconfig = sb.kubeconfig }, 'inf:cells takes an object this informer handed out')
  end)
end)
