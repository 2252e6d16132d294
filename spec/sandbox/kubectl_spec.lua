-- The sandbox API server is faithful enough that kubectl, a real client-go client, works
-- against it unchanged: discovery, CRUD, apply, patches, watches, selectors, paging,
-- finalizers, subresources and custom resources.
local testing = require('klua.testing')
local fixtures = require('support.fixtures')
local K = require('support.klua')

local lines = K.lines

local function yaml_configmap(name, ns, data)
  local body = ('apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  namespace: %s\ndata:\n')
    :format(name, ns)
  for k, v in pairs(data) do body = body .. ('  %s: "%s"\n'):format(k, v) end
  return body
end

local DEPLOYMENT = fixtures.WEB_DEPLOYMENT

local CRD = fixtures.WIDGETS_CRD

describe('sandbox API server used by kubectl', function()
  local sb = testing.with_sandbox()

  -- kubectl ARGS, which must succeed.
  local function kubectl_ok(args, stdin) return sb:kubectl(args, stdin) end

  it('serves discovery that kubectl builds its resource list from', function()
    local out = kubectl_ok('api-resources --no-headers')
    assert.matches('deployments%s+deploy%s+apps/v1%s+true%s+Deployment', out)
    assert.matches('namespaces%s+ns%s+v1%s+false%s+Namespace', out)
    assert.matches('leases%s+coordination.k8s.io/v1%s+true%s+Lease', out)
    assert.matches('customresourcedefinitions%s+crd,crds%s+apiextensions.k8s.io/v1%s+false', out)
  end)

  it('starts with the default, kube-system and kube-public namespaces', function()
    assert.same({ 'namespace/default', 'namespace/kube-public', 'namespace/kube-system' },
      lines(kubectl_ok('get namespaces -o name')))
  end)

  it('creates from stdin with create -f and reads the object back', function()
    kubectl_ok('create -f -', yaml_configmap('settings', 'default', { color = 'blue' }))
    local cm = sb:kubectl_json('get configmap settings')
    assert.equals('blue', cm.data.color)
    -- The ConfigMap strategy sets no generation; only kinds with a spec (Deployments,
    -- ReplicaSets, CRDs, custom resources) get one.
    assert.is_nil(cm.metadata.generation)
    assert.truthy(cm.metadata.uid)
    assert.matches('^%d+$', cm.metadata.resourceVersion)
    assert.matches('^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%dZ$', cm.metadata.creationTimestamp)
  end)

  it('refuses a second object of the same name with AlreadyExists', function()
    kubectl_ok('create -f -', yaml_configmap('twice', 'default', {}))
    local _, ok, err = sb:try_kubectl('create -f -', yaml_configmap('twice', 'default', {}))
    assert.is_false(ok)
    assert.matches('AlreadyExists', err)
    assert.matches('configmaps "twice" already exists', err, 1, true)
  end)

  it('refuses to create into a missing namespace with NotFound', function()
    local _, ok, err = sb:try_kubectl('create -f -', yaml_configmap('lost', 'nowhere', {}))
    assert.is_false(ok)
    assert.matches('namespaces "nowhere" not found', err, 1, true)
  end)

  it('accepts the protobuf bodies of kubectl create and kubectl run', function()
    kubectl_ok('create configmap literal --from-literal=a=1 --from-literal=empty=')
    kubectl_ok('create deployment idle --image=nginx --replicas=0 --port=8080')
    kubectl_ok('run shell --image=busybox --env=MODE=test --labels=role=shell -- sleep 60')
    assert.same({ a = '1', empty = '' }, sb:kubectl_json('get configmap literal').data)
    local deploy = sb:kubectl_json('get deployment idle')
    assert.equals(0, deploy.spec.replicas)
    assert.equals(8080, deploy.spec.template.spec.containers[1].ports[1].containerPort)
    local pod = sb:kubectl_json('get pod shell')
    assert.equals('shell', pod.metadata.labels.role)
    assert.same({ { name = 'MODE', value = 'test' } }, pod.spec.containers[1].env)
    assert.equals('Pending', pod.status.phase)
  end)

  it('applies a manifest: creates, leaves it unchanged, then patches what changed', function()
    assert.matches('deployment.apps/web created', kubectl_ok('apply -f -', DEPLOYMENT))
    local first = sb:kubectl_json('get deployment web')
    assert.matches('deployment.apps/web unchanged', kubectl_ok('apply -f -', DEPLOYMENT))
    assert.equals(first.metadata.resourceVersion,
      sb:kubectl_json('get deployment web').metadata.resourceVersion)
    local changed = DEPLOYMENT:gsub('nginx:1.25', 'nginx:1.26')
    assert.matches('deployment.apps/web configured', kubectl_ok('apply -f -', changed))
    local after = sb:kubectl_json('get deployment web')
    assert.equals('nginx:1.26', after.spec.template.spec.containers[1].image)
    assert.equals(80, after.spec.template.spec.containers[1].ports[1].containerPort)
    assert.equals(first.metadata.generation + 1, after.metadata.generation)
    assert.truthy(after.metadata.annotations['kubectl.kubernetes.io/last-applied-configuration'])
  end)

  it('labels and annotates objects', function()
    kubectl_ok('create -f -', yaml_configmap('tagged', 'default', {}))
    kubectl_ok('label configmap tagged tier=backend')
    kubectl_ok('annotate configmap tagged note=hello')
    local cm = sb:kubectl_json('get configmap tagged')
    assert.equals('backend', cm.metadata.labels.tier)
    assert.equals('hello', cm.metadata.annotations.note)
    kubectl_ok('label configmap tagged tier-')
    assert.is_nil((sb:kubectl_json('get configmap tagged').metadata.labels or {}).tier)
  end)

  it('scales a deployment through its scale subresource', function()
    kubectl_ok('apply -f -', DEPLOYMENT:gsub('name: web', 'name: scaled', 1))
    local before = sb:kubectl_json('get deployment scaled')
    assert.matches('scaled', kubectl_ok('scale deployment scaled --replicas=5'))
    local after = sb:kubectl_json('get deployment scaled')
    assert.equals(5, after.spec.replicas)
    assert.equals(before.metadata.generation + 1, after.metadata.generation)
    local status, scale = sb:json('GET', '/apis/apps/v1/namespaces/default/deployments/scaled/scale')
    assert.equals(200, status)
    assert.equals('Scale', scale.kind)
    assert.equals('autoscaling/v1', scale.apiVersion)
    assert.equals(5, scale.spec.replicas)
    assert.equals('app=web', scale.status.selector)
  end)

  it('patches with strategic merge (the default), merge and JSON patches', function()
    kubectl_ok('apply -f -', DEPLOYMENT:gsub('name: web', 'name: patched', 1))
    kubectl_ok([[patch deployment patched -p ]]
      .. [['{"spec":{"template":{"spec":{"containers":[{"name":"nginx","image":"nginx:2"}]}}}}']])
    local c = sb:kubectl_json('get deployment patched').spec.template.spec.containers
    assert.equals(1, #c)
    assert.equals('nginx:2', c[1].image)
    assert.equals(80, c[1].ports[1].containerPort, 'strategic merge keeps the merged list item')
    kubectl_ok([[patch deployment patched --type merge -p '{"metadata":{"labels":{"patched":"yes"}}}']])
    kubectl_ok([[patch deployment patched --type json ]]
      .. [[-p '[{"op":"replace","path":"/spec/replicas","value":3}]']])
    local d = sb:kubectl_json('get deployment patched')
    assert.equals('yes', d.metadata.labels.patched)
    assert.equals('web', d.metadata.labels.app)
    assert.equals(3, d.spec.replicas)
    local _, ok, err = sb:try_kubectl([[patch deployment patched --type json ]]
      .. [[-p '[{"op":"test","path":"/spec/replicas","value":9}]']])
    assert.is_false(ok)
    assert.matches('testing value /spec/replicas failed', err, 1, true)
  end)

  it('streams every change to kubectl get -w', function()
    kubectl_ok('create namespace watched')
    local out = sb:tmpfile('get-w')
    local before = sb:stats().watches.configmaps or 0
    os.execute('timeout 8 ' .. sb:kubectl_command('get configmaps -n watched -w -o name')
      .. ' > ' .. out .. ' 2>&1 &')
    testing.eventually(function()
      return (sb:stats().watches.configmaps or 0) > before
    end, 5, { what = 'kubectl get -w watching' })
    kubectl_ok('create -f -', yaml_configmap('one', 'watched', {}))
    kubectl_ok('create -f -', yaml_configmap('two', 'watched', {}))
    kubectl_ok('delete configmap one -n watched')
    local seen = testing.eventually(function()
      local f = io.open(out)
      local text = f and f:read('a') or ''
      if f then f:close() end
      return #lines(text) >= 3 and lines(text)
    end, 5)
    assert.same({ 'configmap/one', 'configmap/two', 'configmap/one' }, seen)
  end)

  it('keeps an object with a finalizer until a patch removes the finalizer', function()
    kubectl_ok('create -f -', [[
apiVersion: v1
kind: ConfigMap
metadata: {name: guarded, finalizers: [example.com/hold]}
]])
    kubectl_ok('delete configmap guarded --wait=false')
    local cm = sb:kubectl_json('get configmap guarded')
    assert.truthy(cm.metadata.deletionTimestamp)
    assert.equals(0, cm.metadata.deletionGracePeriodSeconds)
    kubectl_ok([[patch configmap guarded --type merge -p '{"metadata":{"finalizers":null}}']])
    local _, ok, err = sb:try_kubectl('get configmap guarded')
    assert.is_false(ok)
    assert.matches('NotFound', err)
  end)

  it('selects by label with every selector operator', function()
    kubectl_ok('create namespace labels')
    kubectl_ok('create -f -', [[
apiVersion: v1
kind: ConfigMap
metadata: {name: a, namespace: labels, labels: {env: prod, tier: web}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: b, namespace: labels, labels: {env: dev, tier: db}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: c, namespace: labels, labels: {env: prod}}
]])
    local function names(selector)
      return lines(kubectl_ok("get configmaps -n labels -o name -l '" .. selector .. "'"))
    end
    assert.same({ 'configmap/a', 'configmap/c' }, names('env=prod'))
    assert.same({ 'configmap/a', 'configmap/c' }, names('env==prod'))
    assert.same({ 'configmap/b' }, names('env!=prod'))
    assert.same({ 'configmap/a', 'configmap/b' }, names('tier in (web,db)'))
    assert.same({ 'configmap/b', 'configmap/c' }, names('tier notin (web)'))
    assert.same({ 'configmap/a', 'configmap/b' }, names('tier'))
    assert.same({ 'configmap/c' }, names('!tier'))
    assert.same({ 'configmap/a' }, names('env=prod,tier'))
  end)

  it('selects pods by field with --field-selector', function()
    kubectl_ok('create namespace fields')
    kubectl_ok('run idle --image=busybox -n fields')
    kubectl_ok('run busy --image=busybox -n fields')
    local status = sb:json('PATCH', '/api/v1/namespaces/fields/pods/busy/status',
      { status = { phase = 'Running' } }, { ['Content-Type'] = 'application/merge-patch+json' })
    assert.equals(200, status)
    local function names(selector)
      return lines(kubectl_ok('get pods -n fields -o name --field-selector ' .. selector))
    end
    assert.same({ 'pod/busy' }, names('status.phase=Running'))
    assert.same({ 'pod/idle' }, names('status.phase!=Running'))
    assert.same({ 'pod/idle' }, names('metadata.name==idle'))
    assert.same({ 'pod/busy', 'pod/idle' }, names('metadata.namespace=fields'))
    local _, ok, err = sb:try_kubectl('get pods -n fields --field-selector spec.bogus=1')
    assert.is_false(ok)
    assert.matches('field label not supported: spec.bogus', err, 1, true)
  end)

  it('pages a list for --chunk-size with limit and continue', function()
    kubectl_ok('create namespace paged')
    local docs = {}
    for i = 1, 7 do docs[i] = yaml_configmap('page-' .. i, 'paged', {}) end
    kubectl_ok('create -f -', table.concat(docs, '---\n'))
    local before = sb:stats().resources.configmaps.list or 0
    local got = lines(kubectl_ok('get configmaps -n paged -o name --chunk-size=3'))
    assert.equals(7, #got)
    assert.equals('configmap/page-1', got[1])
    assert.equals(3, sb:stats().resources.configmaps.list - before, 'pages of 3, 3 and 1')
  end)

  it('serves custom resources of a CRD by plural and short name, until it is deleted', function()
    kubectl_ok('apply -f -', CRD)
    assert.matches('widgets%s+wd%s+example.com/v1%s+true%s+Widget',
      kubectl_ok('api-resources --api-group=example.com --no-headers'))
    kubectl_ok('apply -f -',
      'apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1}\nspec: {size: 3}\n')
    assert.same({ 'widget.example.com/w1' }, lines(kubectl_ok('get wd -o name')))
    kubectl_ok([[patch widget w1 --type merge -p '{"spec":{"size":4}}']])
    local w = sb:kubectl_json('get widgets w1')
    assert.equals(4, w.spec.size)
    assert.equals(2, w.metadata.generation)
    kubectl_ok('delete wd w1')
    assert.same({}, lines(kubectl_ok('get widgets -o name')))
    kubectl_ok('apply -f -', 'apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w2}\n')
    -- kubectl retries the 429 of a watch cache still filling; curl does not: wait it out.
    assert.truthy(testing.poll(function()
      return sb:request('GET', '/apis/example.com/v1/namespaces/default/widgets') == 200
    end, 10))
    local w = sb:watch('/apis/example.com/v1/namespaces/default/widgets?watch=1&resourceVersion='
      .. sb:stats().resourceVersion)
    kubectl_ok('delete crd widgets.example.com')
    assert.equals(0, w.finished(5), 'watches on the resource end')
    assert.equals('DELETED', w.events()[1].type)
    assert.equals('w2', w.events()[1].object.metadata.name)
    local status = sb:request('GET', '/apis/example.com/v1/namespaces/default/widgets')
    assert.equals(404, status)
  end)

  it('changes a custom resource status only through the status subresource', function()
    kubectl_ok('apply -f -', fixtures.GADGETS_CRD)
    kubectl_ok('apply -f -', 'apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g1}\n'
      .. 'spec: {enabled: true}\nstatus: {ready: true}\n')
    local path = '/apis/example.com/v1/namespaces/default/gadgets/g1'
    local _, g = sb:json('GET', path)
    assert.is_nil(g.status, 'status is dropped on create when status is a subresource')
    g.status = { ready = true }
    local status, updated = sb:json('PUT', path, g)
    assert.equals(200, status)
    assert.is_nil(updated.status, 'the main resource ignores status changes')
    status, updated = sb:json('PUT', path .. '/status', updated and
      { apiVersion = 'example.com/v1', kind = 'Gadget', metadata = updated.metadata,
        spec = { enabled = false }, status = { ready = true } })
    assert.equals(200, status)
    assert.is_true(updated.status.ready)
    assert.is_true(updated.spec.enabled, 'the status subresource ignores spec changes')
    assert.is_true(sb:kubectl_json('get gd g1').status.ready)
  end)
end)
