-- klua.helpers.apply_children: each desired child applied (server-side
-- apply) with the owner as its controller and the owner-uid label; the
-- owner's children no longer desired deleted, found in an informer's cache
-- or listed from the API by the label.
local testing = require('klua.testing')
local K = require('support.klua')
local sandbox = require('support.sandbox')

-- Defines, in a script, owner (the ConfigMap "app" of namespace ns as the
-- API has it) and desired(n): the children app-0 .. app-(n-1).
local PRELUDE = [[
  local ns = ...
  local owner = assert(klua.api.get('configmaps', ns .. '/app'))
  local function desired(n)
    local out = {}
    for i = 0, n - 1 do
      out[#out + 1] = { apiVersion = 'v1', kind = 'ConfigMap', metadata = { name = 'app-' .. i },
        data = { index = tostring(i) } }
    end
    return out
  end
  local function names(list)
    local out = {}
    for _, o in ipairs(list) do out[#out + 1] = o.metadata.name end
    table.sort(out)
    return table.concat(out, ',')
  end
]]

describe('klua.helpers.apply_children', function()
  local sb = testing.with_sandbox()
  local namespace = sandbox.namespaces(sb, 'children')

  local function owner(ns)
    local status, obj = sb:json('POST', sandbox.configmap_path(ns), { metadata = { name = 'app' } })
    assert.equals(201, status)
    return obj
  end

  it('applies each child with the owner as controller and the label, and prunes those no longer desired', function()
    local ns = namespace()
    local app = owner(ns)
    local out = K.run_script_ok(PRELUDE .. [[
      local s = assert(klua.helpers.apply_children(owner, desired(3), { field_manager = 'app-ctl',
        resources = { 'configmaps' } }))
      print('applied ' .. names(s.applied) .. ' deleted ' .. names(s.deleted))
      s = assert(klua.helpers.apply_children(owner, desired(1), { field_manager = 'app-ctl',
        resources = { 'configmaps' } }))
      print('applied ' .. names(s.applied) .. ' deleted ' .. names(s.deleted))
    ]], { kubeconfig = sb.kubeconfig, args = { ns } })
    assert.equals('applied app-0,app-1,app-2 deleted \napplied app-0 deleted app-1,app-2\n', out)
    local _, child = sb:json('GET', sandbox.configmap_path(ns, 'app-0'))
    assert.equals('0', child.data.index)
    assert.equals(app.metadata.uid, child.metadata.labels['klua.dev/owner-uid'])
    local ref = child.metadata.ownerReferences[1]
    assert.same({ apiVersion = 'v1', kind = 'ConfigMap', name = 'app', uid = app.metadata.uid, controller = true,
      blockOwnerDeletion = true }, ref)
    local managers = {}
    for _, e in ipairs(child.metadata.managedFields) do managers[#managers + 1] = e.manager .. ' ' .. e.operation end
    assert.same({ 'app-ctl Apply' }, managers)
    assert.equals(404, (sb:json('GET', sandbox.configmap_path(ns, 'app-1'))))
    assert.equals(404, (sb:json('GET', sandbox.configmap_path(ns, 'app-2'))))
  end)

  it('prunes from an informer\'s cache, leaving what the owner does not control, under its own label', function()
    local ns = namespace()
    local app = owner(ns)
    -- Labelled as the owner's child, but controlled by nobody: not its own.
    assert.equals(201, (sb:json('POST', sandbox.configmap_path(ns), { metadata = { name = 'stranger',
      labels = { ['example.com/owner'] = app.metadata.uid } } })))
    local out = K.run_script_ok(PRELUDE .. [[
      local cms = klua.informer { resource = 'configmaps', namespace = ns }
      klua.on_synced(function()
        local opts = { field_manager = 'app-ctl', informer = cms, label = 'example.com/owner' }
        assert(klua.helpers.apply_children(owner, desired(2), opts))
        while not cms:get(ns .. '/app-1') do klua.sleep(0.05) end
        local s = assert(klua.helpers.apply_children(owner, desired(0), opts))
        print('deleted ' .. names(s.deleted))
        klua.stop()
      end)
    ]], { kubeconfig = sb.kubeconfig, args = { ns } })
    assert.equals('deleted app-0,app-1\n', out)
    assert.equals(200, (sb:json('GET', sandbox.configmap_path(ns, 'stranger'))))
    assert.equals(404, (sb:json('GET', sandbox.configmap_path(ns, 'app-0'))))
  end)

  it('refuses a child it could never prune, and another controller\'s child, before any write', function()
    local ns = namespace()
    owner(ns)
    local _, boss = sb:json('POST', sandbox.configmap_path(ns), { metadata = { name = 'boss' } })
    assert.equals(201, (sb:json('POST', sandbox.configmap_path(ns), { metadata = { name = 'taken', ownerReferences = { {
      apiVersion = 'v1', kind = 'ConfigMap', name = 'boss', uid = boss.metadata.uid, controller = true } } } })))
    local out = K.run_script_ok(PRELUDE .. [[
      local secret = { apiVersion = 'v1', kind = 'Secret', metadata = { name = 'app-secret' } }
      local s, err = klua.helpers.apply_children(owner, { desired(1)[1], secret },
        { field_manager = 'app-ctl', resources = { 'configmaps' } })
      print(tostring(s) .. ' ' .. err.reason .. ': ' .. err.message)
      local taken = klua.copy(assert(klua.api.get('configmaps', ns .. '/taken')))
      taken.metadata.resourceVersion, taken.metadata.managedFields = nil, nil
      s, err = klua.helpers.apply_children(owner, { taken }, { field_manager = 'app-ctl', resources = { 'configmaps' } })
      print(tostring(s) .. ' ' .. err.reason)
    ]], { kubeconfig = sb.kubeconfig, args = { ns } })
    assert.equals('nil NotPruned: apply_children: desired[2] is a Secret, which neither opts.informer nor '
      .. 'opts.resources covers: once no longer desired it would never be deleted; add secrets\nnil AlreadyOwned\n', out)
    assert.equals(404, (sb:json('GET', sandbox.configmap_path(ns, 'app-0'))))
  end)

  it('raises on a call without field_manager or without where to prune, saying what it needs', function()
    K.run_script_refused([[klua.helpers.apply_children({ metadata = { uid = 'u' } }, {}, { resources = { 'configmaps' } })]],
      { kubeconfig = sb.kubeconfig }, 'apply_children needs opts.field_manager: the name that owns the applied fields')
    K.run_script_refused([[klua.helpers.apply_children({ metadata = { uid = 'u' } }, {}, { field_manager = 'x' })]],
      { kubeconfig = sb.kubeconfig }, 'apply_children needs opts.informer (the informers that cache the children) or opts.resources')
    local err = K.run_script_refused([[
      klua.helpers.apply_children({ metadata = { uid = 'u' } }, { { apiVersion = 'v1', kind = 'ConfigMap',
        metadata = { generateName = 'x-' } } }, { field_manager = 'x', resources = { 'configmaps' } })
    ]], { kubeconfig = sb.kubeconfig }, 'apply_children: desired[1] must be a table with apiVersion, kind and '
      .. 'metadata.name (server-side apply addresses objects by name)')
    assert.matches('script.lua:1: apply_children: desired[1]', err, 1, true)
  end)

  it('under --dry-run, applies and prunes nothing, logging what it would do', function()
    local ns = namespace()
    owner(ns)
    K.run_script_ok(PRELUDE .. [[
      assert(klua.helpers.apply_children(owner, desired(2), { field_manager = 'app-ctl', resources = { 'configmaps' } }))
    ]], { kubeconfig = sb.kubeconfig, args = { ns } })
    local _, err = K.run_script_ok(PRELUDE .. [[
      local s = assert(klua.helpers.apply_children(owner, desired(1), { field_manager = 'app-ctl', resources = { 'configmaps' } }))
      print(#s.deleted)
    ]], { kubeconfig = sb.kubeconfig, flags = { '--dry-run' }, args = { ns } })
    assert.matches('dry run: apply configmaps ' .. K.literally(ns) .. '/app%-0: no change', err)
    assert.matches('dry run: delete configmaps ' .. K.literally(ns) .. '/app%-1: deleted', err)
    assert.equals(200, (sb:json('GET', sandbox.configmap_path(ns, 'app-1'))))
  end)
end)
