-- Server-side apply and metadata.managedFields in the sandbox, as kube-apiserver 1.32 shows
-- them to a client (scripts/sandbox/apply.py and managedfields.py name their sources):
-- who owns which field, conflicts and force, fields removed when their applier drops them,
-- lists merged by key, and kubectl's own `apply --server-side`.
local cjson = require('cjson')
local sandbox = require('support.sandbox')
local testing = require('klua.testing')
local fixtures = require('support.fixtures')

local APPLY = { ['Content-Type'] = 'application/apply-patch+yaml' }
local MERGE = { ['Content-Type'] = 'application/merge-patch+json' }
local TIME = '^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%dZ$'

describe('sandbox server-side apply', function()
  local sb = testing.with_sandbox()
  local namespace = sandbox.namespaces(sb, 'apply')

  local function cm_path(ns, name, query)
    return '/api/v1/namespaces/' .. ns .. '/configmaps/' .. name .. (query and ('?' .. query) or '')
  end

  -- The path of the Deployment web of namespace ns.
  local function web_path(ns) return '/apis/apps/v1/namespaces/' .. ns .. '/deployments/web' end

  -- The answer must be 409 with message, as the field manager words a conflict.
  local function conflict(message, status, body)
    assert.equals(409, status)
    assert.equals(message, body.message)
  end

  -- PATCH with an apply body (YAML text or a table sent as JSON); status and decoded answer.
  local function apply(path, body, query)
    return sb:json('PATCH', path .. (path:find('?', 1, true) and '&' or '?') .. query, body, APPLY)
  end

  -- The Deployment web (app=web) with containers, and replicas if given, as an apply body.
  local function deployment(containers, replicas)
    return { apiVersion = 'apps/v1', kind = 'Deployment', metadata = { name = 'web' },
      spec = { replicas = replicas, selector = { matchLabels = { app = 'web' } }, template = {
        metadata = { labels = { app = 'web' } }, spec = { containers = containers } } } }
  end

  local function configmap_yaml(name, data)
    local lines = { 'apiVersion: v1', 'kind: ConfigMap', 'metadata:', '  name: ' .. name, 'data:' }
    for _, kv in ipairs(data) do lines[#lines + 1] = '  ' .. kv[1] .. ': "' .. kv[2] .. '"' end
    return table.concat(lines, '\n') .. '\n'
  end

  -- The managedFields entry of manager (and operation), or nil.
  local function entry(obj, manager, operation)
    for _, e in ipairs(obj.metadata.managedFields or {}) do
      if e.manager == manager and (not operation or e.operation == operation) then return e end
    end
  end

  local function managers(obj)
    local out = {}
    for _, e in ipairs(obj.metadata.managedFields or {}) do
      out[#out + 1] = e.manager .. ' ' .. e.operation .. (e.subresource and (' ' .. e.subresource) or '')
    end
    return out
  end

  describe('PatchOptions and the body', function()
    it('an apply without fieldManager is 422 Invalid on PatchOptions', function()
      local ns = namespace()
      local status, body = apply(cm_path(ns, 'x'), configmap_yaml('x', { { 'a', '1' } }), 'force=false')
      sandbox.failed(status, body, 422, 'Invalid',
        'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
        .. 'is required for apply patch')
      assert.equals('fieldManager', body.details.causes[1].field)
    end)

    it('force on a patch that is not an apply is 422 Forbidden', function()
      local ns = namespace()
      assert.equals(201, (sb:json('POST', '/api/v1/namespaces/' .. ns .. '/configmaps', { metadata = { name = 'x' } })))
      local status, body = sb:json('PATCH', cm_path(ns, 'x', 'force=true'), { data = { a = '1' } }, MERGE)
      assert.equals(422, status)
      assert.equals('PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not be specified '
        .. 'for non-apply patch', body.message)
    end)

    it('the body must name the kind and version, and carry no managedFields (400)', function()
      local ns = namespace()
      local status, body = apply(cm_path(ns, 'x'), 'kind: ConfigMap\nmetadata:\n  name: x\n', 'fieldManager=m')
      assert.equals(400, status)
      assert.equals('invalid object type: /, Kind=ConfigMap', body.message)
      status, body = apply(cm_path(ns, 'x'), { apiVersion = 'v1', kind = 'ConfigMap',
        metadata = { name = 'x', managedFields = { { manager = 'm' } } } }, 'fieldManager=m')
      assert.equals(400, status)
      assert.equals('metadata.managedFields must be nil', body.message)
      status, body = apply(cm_path(ns, 'x'), 'apiVersion: v1\nkind: ConfigMap\nmetadata: [\n', 'fieldManager=m')
      assert.equals(400, status)
      assert.matches('^error decoding YAML: ', body.message)
    end)
  end)

  describe('managedFields on every write', function()
    it('an apply creates a missing object (201) with an Apply entry in the FieldsV1 format', function()
      local ns = namespace()
      local status, obj = apply(cm_path(ns, 'cfg'), 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n'
        .. '  name: cfg\n  labels:\n    app: web\ndata:\n  mode: fast   # a YAML comment\n', 'fieldManager=deployer')
      assert.equals(201, status)
      assert.equals('fast', obj.data.mode)
      local e = entry(obj, 'deployer')
      assert.equals('Apply', e.operation)
      assert.equals('v1', e.apiVersion)
      assert.equals('FieldsV1', e.fieldsType)
      assert.matches(TIME, e.time)
      -- Granular maps own their keys, never the map itself, in an applier's set.
      assert.same({ ['f:data'] = { ['f:mode'] = {} }, ['f:metadata'] = { ['f:labels'] = { ['f:app'] = {} } } },
        e.fieldsV1)
    end)

    it('create, update and patch record an Update entry for the fieldManager, else the '
      .. 'User-Agent up to its first /', function()
      local ns = namespace()
      local status, obj = sb:json('POST', '/api/v1/namespaces/' .. ns .. '/configmaps?fieldManager=maker',
        { metadata = { name = 'c' }, data = { a = '1' } })
      assert.equals(201, status)
      local e = entry(obj, 'maker', 'Update')
      assert.equals('v1', e.apiVersion)
      -- An Update owns what it added, the new map itself too ("." marks it).
      assert.same({ ['f:data'] = { ['.'] = {}, ['f:a'] = {} } }, e.fieldsV1)
      -- sb:json sends with curl, whose User-Agent is curl/VERSION.
      status, obj = sb:json('PATCH', cm_path(ns, 'c'), { data = { b = '2' } }, MERGE)
      assert.equals(200, status)
      assert.same({ ['f:data'] = { ['f:b'] = {} } }, entry(obj, 'curl', 'Update').fieldsV1)
      assert.same({ ['f:data'] = { ['.'] = {}, ['f:a'] = {} } }, entry(obj, 'maker').fieldsV1)
      -- A PUT that changes a's value takes it from maker, whose entry keeps only the map.
      obj.data.a = 'one'
      status, obj = sb:json('PUT', cm_path(ns, 'c', 'fieldManager=editor'), obj)
      assert.equals(200, status)
      assert.same({ ['f:data'] = { ['f:a'] = {} } }, entry(obj, 'editor').fieldsV1)
      assert.same({ ['f:data'] = {} }, entry(obj, 'maker').fieldsV1)
    end)

    it('a write that changes nothing stores nothing: times and resourceVersion stay', function()
      local ns = namespace()
      local _, obj = sb:json('POST', '/api/v1/namespaces/' .. ns .. '/configmaps', { metadata = { name = 'c' }, data = { a = '1' } })
      local rv, time = obj.metadata.resourceVersion, obj.metadata.managedFields[1].time
      local status, again = sb:json('PUT', cm_path(ns, 'c'), obj)
      assert.equals(200, status)
      assert.equals(rv, again.metadata.resourceVersion)
      assert.equals(time, again.metadata.managedFields[1].time)
      local yaml = configmap_yaml('d', { { 'a', '1' } })
      local _, applied = apply(cm_path(ns, 'd'), yaml, 'fieldManager=m')
      local _, reapplied = apply(cm_path(ns, 'd'), yaml, 'fieldManager=m')
      assert.equals(applied.metadata.resourceVersion, reapplied.metadata.resourceVersion)
    end)

    it('a status write is recorded with subresource status, and status is not owned by '
      .. 'writes to the main resource', function()
      local ns = namespace()
      local path = '/apis/apps/v1/namespaces/' .. ns .. '/deployments'
      local status, dep = sb:json('POST', path .. '?fieldManager=maker', {
        metadata = { name = 'web' }, status = { replicas = 5 },
        spec = { selector = { matchLabels = { app = 'web' } }, template = { metadata = { labels = { app = 'web' } },
          spec = { containers = { { name = 'web', image = 'nginx' } } } } } })
      assert.equals(201, status)
      local fields = entry(dep, 'maker').fieldsV1
      assert.is_nil(fields['f:status'])
      assert.same({}, fields['f:spec']['f:selector'], 'a LabelSelector is atomic')
      assert.same({ ['.'] = {}, ['f:image'] = {}, ['f:name'] = {}, ['f:imagePullPolicy'] = {},
        ['f:resources'] = {}, ['f:terminationMessagePath'] = {}, ['f:terminationMessagePolicy'] = {} },
        fields['f:spec']['f:template']['f:spec']['f:containers']['k:{"name":"web"}'])
      status, dep = sb:json('PATCH', path .. '/web/status?fieldManager=controller',
        { status = { replicas = 1 } }, MERGE)
      assert.equals(200, status)
      local e = entry(dep, 'controller')
      assert.equals('status', e.subresource)
      assert.same({ ['f:status'] = { ['f:replicas'] = {} } }, e.fieldsV1)
    end)

    it('an apply to status owns only status, as manager with subresource status', function()
      local ns = namespace()
      local path = web_path(ns)
      local dep = deployment({ { name = 'web', image = 'nginx' } }, 2)
      assert.equals(201, (apply(path, dep, 'fieldManager=app')))
      local status, obj = apply(path .. '/status', { apiVersion = 'apps/v1', kind = 'Deployment',
        metadata = { name = 'web' }, spec = { replicas = 9 }, status = { readyReplicas = 2 } }, 'fieldManager=ctl')
      assert.equals(200, status)
      assert.equals(2, obj.spec.replicas)
      assert.equals(2, obj.status.readyReplicas)
      local e = entry(obj, 'ctl')
      assert.equals('Apply', e.operation)
      assert.equals('status', e.subresource)
      assert.same({ ['f:status'] = { ['f:readyReplicas'] = {} } }, e.fieldsV1)
    end)

    it('past 10 Update managers the oldest are merged into ancient-changes', function()
      local ns = namespace()
      sb:json('POST', '/api/v1/namespaces/' .. ns .. '/configmaps?fieldManager=m01', { metadata = { name = 'c' }, data = { k01 = 'v' } })
      local obj
      for i = 2, 11 do
        local status
        status, obj = sb:json('PATCH', cm_path(ns, 'c', ('fieldManager=m%02d'):format(i)),
          { data = { [('k%02d'):format(i)] = 'v' } }, MERGE)
        assert.equals(200, status)
      end
      local names = managers(obj)
      table.sort(names)
      assert.same({ 'ancient-changes Update', 'm03 Update', 'm04 Update', 'm05 Update', 'm06 Update',
        'm07 Update', 'm08 Update', 'm09 Update', 'm10 Update', 'm11 Update' }, names)
      assert.same({ ['f:data'] = { ['.'] = {}, ['f:k01'] = {}, ['f:k02'] = {} } },
        entry(obj, 'ancient-changes').fieldsV1)
    end)

    it('managedFields [{}] in a non-apply write strips them; an empty list keeps them', function()
      local ns = namespace()
      sb:json('POST', '/api/v1/namespaces/' .. ns .. '/configmaps', { metadata = { name = 'c' }, data = { a = '1' } })
      local status, obj = sb:json('PATCH', cm_path(ns, 'c'), '{"metadata":{"managedFields":[]}}', MERGE)
      assert.equals(200, status)
      assert.same({ 'curl Update' }, managers(obj))
      status, obj = sb:json('PATCH', cm_path(ns, 'c'), '{"metadata":{"managedFields":[{}]}}', MERGE)
      assert.equals(200, status)
      assert.is_nil(obj.metadata.managedFields)
    end)
  end)

  describe('conflicts', function()
    it('changing a field another manager owns is 409 naming it; the same value is shared', function()
      local ns = namespace()
      sb:json('POST', '/api/v1/namespaces/' .. ns .. '/configmaps?fieldManager=creator',
        { metadata = { name = 'c' }, data = { a = '1', b = '2' } })
      local status, body = apply(cm_path(ns, 'c'), configmap_yaml('c', { { 'a', 'changed' } }), 'fieldManager=applier')
      conflict('Apply failed with 1 conflict: conflict with "creator" using v1: .data.a', status, body)
      assert.equals('Conflict', body.reason)
      assert.same({ { reason = 'FieldManagerConflict', message = 'conflict with "creator" using v1', field = '.data.a' } },
        body.details.causes)
      status, body = apply(cm_path(ns, 'c'), configmap_yaml('c', { { 'a', '1' } }), 'fieldManager=applier')
      assert.equals(200, status)
      assert.same({ ['f:data'] = { ['f:a'] = {} } }, entry(body, 'applier').fieldsV1)
      assert.same({ ['f:data'] = { ['.'] = {}, ['f:a'] = {}, ['f:b'] = {} } }, entry(body, 'creator').fieldsV1)
    end)

    it('several conflicts are listed by manager; force takes the fields from them', function()
      local ns = namespace()
      sb:json('POST', '/api/v1/namespaces/' .. ns .. '/configmaps?fieldManager=one',
        { metadata = { name = 'c' }, data = { a = '1', b = '1' } })
      assert.equals(200, (apply(cm_path(ns, 'c'), configmap_yaml('c', { { 'z', 'x' } }), 'fieldManager=two')))
      local yaml = configmap_yaml('c', { { 'a', '2' }, { 'b', '2' }, { 'z', 'new' } })
      local status, body = apply(cm_path(ns, 'c'), yaml, 'fieldManager=three')
      conflict('Apply failed with 3 conflicts: conflicts with "one" using v1:\n- .data.a\n- .data.b\n'
        .. 'conflicts with "two":\n- .data.z', status, body)
      status, body = apply(cm_path(ns, 'c'), yaml, 'fieldManager=three&force=true')
      assert.equals(200, status)
      assert.same({ a = '2', b = '2', z = 'new' }, body.data)
      assert.same({ ['f:data'] = {} }, entry(body, 'one').fieldsV1)
      assert.is_nil(entry(body, 'two'), 'a manager left with no fields is dropped')
    end)

    it('an object without managedFields is owned by before-first-apply', function()
      -- The sandbox's own default namespace was stored without managedFields.
      local status, body = sb:json('PATCH', '/api/v1/namespaces/kube-public?fieldManager=m',
        { apiVersion = 'v1', kind = 'Namespace', metadata = { name = 'kube-public',
          labels = { ['kubernetes.io/metadata.name'] = 'other' } } }, APPLY)
      conflict('Apply failed with 1 conflict: conflict with "before-first-apply" using v1: '
        .. '.metadata.labels.kubernetes.io/metadata.name', status, body)
    end)
  end)

  describe('fields an applier stops applying', function()
    it('are removed when nobody else owns them and kept when somebody does', function()
      local ns = namespace()
      apply(cm_path(ns, 'c'), configmap_yaml('c', { { 'a', '1' }, { 'b', '2' }, { 'c', '3' } }), 'fieldManager=m')
      apply(cm_path(ns, 'c'), configmap_yaml('c', { { 'c', '3' } }), 'fieldManager=other')
      sb:json('PATCH', cm_path(ns, 'c', 'fieldManager=editor'), { data = { b = 'edited' } }, MERGE)
      local status, obj = apply(cm_path(ns, 'c'), configmap_yaml('c', { { 'a', '1' } }), 'fieldManager=m&force=true')
      assert.equals(200, status)
      -- b went to editor when it changed it, c is co-owned by other: both stay.
      assert.same({ a = '1', b = 'edited', c = '3' }, obj.data)
      status, obj = apply(cm_path(ns, 'c'), 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n', 'fieldManager=m')
      assert.equals(200, status)
      assert.same({ b = 'edited', c = '3' }, obj.data)
    end)

    it('a dropped defaulted field comes back as its default', function()
      local ns = namespace()
      local path = web_path(ns)
      local dep = deployment({ { name = 'web', image = 'nginx' } }, 4)
      local status, obj = apply(path, dep, 'fieldManager=m')
      assert.equals(201, status)
      assert.equals(4, obj.spec.replicas)
      dep.spec.replicas = nil
      status, obj = apply(path, dep, 'fieldManager=m')
      assert.equals(200, status)
      assert.equals(1, obj.spec.replicas)
      assert.is_nil(entry(obj, 'm').fieldsV1['f:spec']['f:replicas'])
    end)
  end)

  describe('lists', function()
    local function names(obj)
      local out = {}
      for _, c in ipairs(obj.spec.template.spec.containers) do out[#out + 1] = c.name .. '=' .. c.image end
      return out
    end

    it('containers merge by name: each applier owns its own, and dropping one removes it', function()
      local ns = namespace()
      local path = web_path(ns)
      assert.equals(201, (apply(path, deployment({ { name = 'web', image = 'nginx' } }), 'fieldManager=app')))
      local status, obj = apply(path, deployment({ { name = 'proxy', image = 'envoy' } }), 'fieldManager=mesh')
      assert.equals(200, status)
      assert.same({ 'web=nginx', 'proxy=envoy' }, names(obj))
      local owned = entry(obj, 'mesh').fieldsV1['f:spec']['f:template']['f:spec']['f:containers']
      assert.same({ ['.'] = {}, ['f:image'] = {}, ['f:name'] = {} }, owned['k:{"name":"proxy"}'])
      status, obj = apply(path, deployment({ { name = 'web', image = 'nginx:2' } }), 'fieldManager=app')
      assert.equals(200, status)
      assert.same({ 'web=nginx:2', 'proxy=envoy' }, names(obj))
      -- The selector and template labels app applied are co-owned by mesh: they stay.
      status, obj = apply(path, deployment(nil), 'fieldManager=mesh')
      assert.equals(200, status)
      assert.same({ 'web=nginx:2' }, names(obj))
    end)

    it('other lists are atomic: owned and replaced whole, one path in a conflict', function()
      local ns = namespace()
      local path = web_path(ns)
      apply(path, deployment({ { name = 'web', image = 'nginx', args = { 'a', 'b' } } }), 'fieldManager=app')
      local status, body = apply(path, deployment({ { name = 'web', image = 'nginx', args = { 'c' } } }), 'fieldManager=ops')
      conflict('Apply failed with 1 conflict: conflict with "app": '
        .. '.spec.template.spec.containers[name="web"].args', status, body)
    end)
  end)

  describe('custom resources', function()
    local CRD = {
      apiVersion = 'apiextensions.k8s.io/v1', kind = 'CustomResourceDefinition',
      metadata = { name = 'routes.apply.example.com' },
      spec = { group = 'apply.example.com', scope = 'Namespaced',
        names = { plural = 'routes', singular = 'route', kind = 'Route' },
        versions = { { name = 'v1', served = true, storage = true, schema = { openAPIV3Schema = {
          type = 'object', properties = { spec = { type = 'object', properties = {
            backends = { type = 'array', ['x-kubernetes-list-type'] = 'map',
              ['x-kubernetes-list-map-keys'] = { 'name' },
              items = { type = 'object', properties = { name = { type = 'string' }, weight = { type = 'integer' } } } },
            hosts = { type = 'array', ['x-kubernetes-list-type'] = 'set', items = { type = 'string' } },
            rules = { type = 'array', items = { type = 'string' } } } } } } } } } } }

    local function route(backends, hosts, rules)
      return { apiVersion = 'apply.example.com/v1', kind = 'Route', metadata = { name = 'r' },
        spec = { backends = backends, hosts = hosts, rules = rules } }
    end

    it('follow their schema: list-type map merges by its keys, set by value, others atomic', function()
      local ns = namespace()
      assert.equals(201, (sb:json('POST', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions', CRD)))
      local path = '/apis/apply.example.com/v1/namespaces/' .. ns .. '/routes/r'
      -- A new CRD's resource is 404, then 429 while its watch cache fills (docs/sandbox.md).
      local first = testing.poll(function()
        local st = apply(path, route({ { name = 'a', weight = 1 } }, { 'x.example' }, { 'r1' }), 'fieldManager=one')
        return st ~= 404 and st ~= 429 and st
      end, 10)
      assert.equals(201, first)
      local status, obj = apply(path, route({ { name = 'b', weight = 2 } }, { 'y.example' }, nil), 'fieldManager=two')
      assert.equals(200, status)
      assert.same({ { name = 'a', weight = 1 }, { name = 'b', weight = 2 } }, obj.spec.backends)
      assert.same({ 'x.example', 'y.example' }, obj.spec.hosts)
      assert.same({ ['.'] = {}, ['f:name'] = {}, ['f:weight'] = {} },
        entry(obj, 'two').fieldsV1['f:spec']['f:backends']['k:{"name":"b"}'])
      assert.same({}, entry(obj, 'two').fieldsV1['f:spec']['f:hosts']['v:"y.example"'])
      status, obj = apply(path, route(nil, nil, { 'r2' }), 'fieldManager=two')
      conflict('Apply failed with 1 conflict: conflict with "one": .spec.rules', status, obj)
    end)
  end)

  describe('kubectl apply --server-side', function()
    local MANIFEST = fixtures.WEB_DEPLOYMENT

    it('applies as manager kubectl, fails on a field kubectl patch changed, and takes it with '
      .. '--force-conflicts', function()
      local ns = namespace()
      local flags = ' -n ' .. ns
      assert.matches('deployment.apps/web serverside%-applied', sb:kubectl('apply --server-side -f -' .. flags, MANIFEST))
      local dep = sb:kubectl_json('get deployment web --show-managed-fields' .. flags)
      assert.same({ 'kubectl Apply' }, managers(dep))
      sb:kubectl([[patch deployment web --type merge -p '{"spec":{"replicas":3}}']] .. flags)
      local _, ok, err = sb:try_kubectl('apply --server-side -f -' .. flags, MANIFEST)
      assert.is_false(ok)
      assert.matches('Apply failed with 1 conflict: conflict with "kubectl%-patch" using apps/v1: %.spec%.replicas', err)
      assert.matches('%-%-force%-conflicts', err)
      sb:kubectl('apply --server-side --force-conflicts -f -' .. flags, MANIFEST)
      dep = sb:kubectl_json('get deployment web --show-managed-fields' .. flags)
      assert.equals(2, dep.spec.replicas)
      assert.same({ 'kubectl Apply' }, managers(dep), 'kubectl-patch owned only replicas')
    end)

    it('takes over from client-side apply where the last-applied annotation still holds', function()
      local ns = namespace()
      local flags = ' -n ' .. ns
      sb:kubectl('apply -f -' .. flags, MANIFEST)
      local dep = sb:kubectl_json('get deployment web --show-managed-fields' .. flags)
      assert.same({ 'kubectl-client-side-apply Update' }, managers(dep))
      -- replicas 2 is what the annotation says and what the object has: kubectl may take it.
      sb:kubectl('apply --server-side -f -' .. flags, (MANIFEST:gsub('replicas: 2', 'replicas: 4')))
      dep = sb:kubectl_json('get deployment web' .. flags)
      assert.equals(4, dep.spec.replicas)
      local last = cjson.decode(dep.metadata.annotations['kubectl.kubernetes.io/last-applied-configuration'])
      assert.equals(4, last.spec.replicas, 'the annotation follows the applied configuration')
      -- Once the object differs from the annotation, the field is a conflict again.
      sb:kubectl([[patch deployment web --type merge -p '{"spec":{"replicas":6}}']] .. flags)
      local _, ok, err = sb:try_kubectl('apply --server-side -f -' .. flags, MANIFEST)
      assert.is_false(ok)
      assert.matches('conflict with "kubectl%-patch" using apps/v1: %.spec%.replicas', err)
    end)
  end)
end)
