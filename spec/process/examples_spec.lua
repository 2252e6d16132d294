-- The example controllers in examples/ do what their comments promise:
-- each runs as `klua run examples/NAME.lua` against a sandbox API server,
-- kubectl changes the cluster, and the cluster converges to the state the
-- controller is responsible for. They use klua.testing (docs/testing.md) as a
-- user's specs would: copy from here.
local testing = require('klua.testing')

local EXAMPLES = testing.root .. '/examples/'
-- Convergence is polled; the limit only bounds a failing run.
local CONVERGE = 30

local function start_example(cluster, name, args)
  return cluster:run(EXAMPLES .. name, { args = args })
end

-- Waits until fn returns true; fails naming what and showing fn's other
-- results (what it saw last) and the controller's log otherwise.
local function converge(what, fn)
  return testing.eventually(fn, CONVERGE, { what = what, interval = 0.2 })
end

-- The messages an example logged with klua.log, without timestamps.
local function log_lines(p, script)
  local lines = {}
  for line in p:log():gmatch('[^\n]+') do
    local msg = line:match('%[' .. script:gsub('%p', '%%%0') .. '%] (.*)$')
    if msg then lines[#lines + 1] = msg end
  end
  return lines
end

local function sorted(list)
  table.sort(list)
  return list
end

local function join(list) return table.concat(list, ' ') end

describe('examples/pod-logger.lua', function()
  -- A server per spec: each starts from an empty cluster, and the server and the
  -- controller a spec starts are stopped after it.
  local cluster = testing.with_sandbox { each = true }

  -- Waits until the logger p has logged last; what it logged must then be lines.
  local function logged(p, last, lines)
    p:wait_log(last, CONVERGE)
    assert.same(lines, log_lines(p, 'pod-logger.lua'))
  end

  it('logs the adds, phase changes and deletions of the pods matching the selector given as argument', function()
    cluster:kubectl('run web --image=nginx -l app=web')
    cluster:kubectl('run db --image=postgres -l app=db')
    local p = start_example(cluster, 'pod-logger.lua', { 'app=web' })
    p:wait_log('watching pods matching app=web: 1 found', CONVERGE)
    cluster:kubectl('run api --image=nginx -l app=web')
    p:wait_log('added default/api', CONVERGE)
    cluster:kubectl([[patch pod api --subresource=status --type=merge -p '{"status":{"phase":"Running"}}']])
    p:wait_log('phase default/api', CONVERGE)
    -- A label change that does not touch the phase is not logged.
    cluster:kubectl('label pod api tier=front')
    -- A pod that starts matching the selector is an add, one that stops
    -- matching is gone, as if it had been deleted.
    cluster:kubectl('label pod db app=web --overwrite')
    p:wait_log('added default/db', CONVERGE)
    cluster:kubectl('label pod web app=old --overwrite')
    p:wait_log('gone default/web', CONVERGE)
    cluster:kubectl('delete pod api')
    logged(p, 'gone default/api', {
      'found default/web (Pending)',
      'watching pods matching app=web: 1 found',
      'added default/api (Pending)',
      'phase default/api Pending -> Running',
      'added default/db (Pending)',
      'gone default/web (Pending; deleted or no longer matching app=web)',
      'gone default/api (Running; deleted or no longer matching app=web)',
    })
  end)

  it('logs every pod in every namespace when no selector is given', function()
    cluster:kubectl('create namespace shop')
    local p = start_example(cluster, 'pod-logger.lua')
    p:wait_log('watching pods: 0 found', CONVERGE)
    cluster:kubectl('run cart -n shop --image=nginx')
    cluster:kubectl('delete pod cart -n shop')
    logged(p, 'deleted shop/cart', {
      'watching pods: 0 found',
      'added shop/cart (Pending)',
      'deleted shop/cart (Pending)',
    })
  end)
end)

describe('examples/configmap-sync.lua', function()
  local cluster = testing.with_sandbox()
  local p

  -- "namespace=value" for each copy of team-a/settings, sorted; value is
  -- the copy's data.color.
  local function copies()
    local list = cluster:kubectl_json('get configmaps -A -l klua.dev/sync-copy=true')
    local found = {}
    for _, cm in ipairs(list.items) do
      assert.equals('team-a/settings', cm.metadata.annotations['klua.dev/sync-source'])
      assert.equals('settings', cm.metadata.name)
      found[#found + 1] = cm.metadata.namespace .. '=' .. tostring(cm.data and cm.data.color)
    end
    return join(sorted(found))
  end

  local function copies_become(want)
    converge('copies ' .. want, function()
      local got = copies()
      return got == want, got
    end)
  end

  it('copies a labelled ConfigMap into every other namespace and keeps the copies in step with it', function()
    cluster:kubectl('create namespace team-a')
    cluster:kubectl('create namespace team-b')
    -- team-b already has a ConfigMap of that name that is not a copy.
    cluster:kubectl('create configmap settings -n team-b --from-literal=color=mine')
    p = start_example(cluster, 'configmap-sync.lua')
    p:wait_log('syncing 0 source ConfigMaps into 5 namespaces', CONVERGE)

    cluster:kubectl('create configmap settings -n team-a --from-literal=color=blue')
    cluster:kubectl('label configmap settings -n team-a klua.dev/sync=true')
    copies_become('default=blue kube-public=blue kube-system=blue')
    p:wait_log('team%-b/settings exists and is not a copy of team%-a/settings: left alone', CONVERGE)
    assert.equals('mine', cluster:kubectl_json('get configmap settings -n team-b').data.color)

    cluster:kubectl([[patch configmap settings -n team-a --type=merge -p '{"data":{"color":"green"}}']])
    copies_become('default=green kube-public=green kube-system=green')

    cluster:kubectl('create namespace team-c')
    copies_become('default=green kube-public=green kube-system=green team-c=green')
    -- Three reconciles met the ConfigMap in team-b; it was reported once.
    local _, reports = p:log():gsub('team%-b/settings exists and is not a copy', '')
    assert.equals(1, reports, p:log())

    -- A copy deleted by hand comes back.
    local uid = cluster:kubectl_json('get configmap settings -n default').metadata.uid
    cluster:kubectl('delete configmap settings -n default')
    converge('the copy in default recreated', function()
      local out, ok = cluster:try_kubectl('get configmap settings -n default -o jsonpath={.metadata.uid}')
      return ok and out ~= uid, out
    end)
    copies_become('default=green kube-public=green kube-system=green team-c=green')
  end)

  it('deletes the copies when the source loses its label, and when the source is deleted', function()
    cluster:kubectl('label configmap settings -n team-a klua.dev/sync-')
    copies_become('')
    cluster:kubectl('label configmap settings -n team-a klua.dev/sync=true')
    copies_become('default=green kube-public=green kube-system=green team-c=green')
    cluster:kubectl('delete configmap settings -n team-a')
    copies_become('')
    assert.equals('mine', cluster:kubectl_json('get configmap settings -n team-b').data.color)
    assert.is_nil(p:log():find('failed', 1, true))
  end)

  it('deletes, once restarted, the copies of a source deleted while it was down', function()
    cluster:kubectl('create configmap settings -n team-a --from-literal=color=red')
    cluster:kubectl('label configmap settings -n team-a klua.dev/sync=true')
    copies_become('default=red kube-public=red kube-system=red team-c=red')
    assert.equals(0, p:stop())
    cluster:kubectl('delete configmap settings -n team-a')
    p = start_example(cluster, 'configmap-sync.lua')
    copies_become('')
  end)
end)

describe('examples/podset-controller.lua', function()
  local cluster = testing.with_sandbox()
  local p
  setup(function() cluster:kubectl('apply -f ' .. EXAMPLES .. 'podset-crd.yaml') end)

  local function start_controller()
    p = start_example(cluster, 'podset-controller.lua')
    p:wait_log('managing %d+ PodSets', CONVERGE)
  end

  local function pods_of(name)
    return cluster:kubectl_json('get pods -l demo.klua.dev/podset=' .. name).items
  end

  local function pod_names(name)
    local names = {}
    for _, pod in ipairs(pods_of(name)) do names[#names + 1] = pod.metadata.name end
    return sorted(names)
  end

  -- Waits until the PodSet has n pods and its status says so.
  local function has_pods(name, n)
    converge(('%d pods for %s'):format(n, name), function()
      local count = #pods_of(name)
      local ps = cluster:kubectl_json('get podset ' .. name)
      local status = ps.status and ps.status.replicas
      return count == n and status == n, ('%d pods, status.replicas %s'):format(count, tostring(status))
    end)
  end

  local function podset(name, replicas)
    return ([[
apiVersion: demo.klua.dev/v1
kind: PodSet
metadata: {name: %s}
spec:
  replicas: %d
  template:
    metadata: {labels: {app: %s}}
    spec: {containers: [{name: main, image: nginx}]}
]]):format(name, replicas, name)
  end

  local function events_about(name)
    local messages = {}
    for _, e in ipairs(cluster:kubectl_json('get events').items) do
      if e.involvedObject.kind == 'PodSet' and e.involvedObject.name == name then
        messages[#messages + 1] = e.reason .. ': ' .. e.message
      end
    end
    return messages
  end

  it('creates the pods of a new PodSet from its template, controlled by the PodSet', function()
    start_controller()
    cluster:kubectl('apply -f -', podset('web', 3))
    has_pods('web', 3)
    local ps = cluster:kubectl_json('get podset web')
    for _, pod in ipairs(pods_of('web')) do
      assert.truthy(pod.metadata.name:match('^web%-%w+$'))
      assert.equals('web', pod.metadata.labels.app)
      assert.equals('nginx', pod.spec.containers[1].image)
      local ref = pod.metadata.ownerReferences[1]
      assert.same({ 'demo.klua.dev/v1', 'PodSet', 'web', ps.metadata.uid, true },
        { ref.apiVersion, ref.kind, ref.name, ref.uid, ref.controller })
    end
    assert.equals('demo.klua.dev/podset=web', ps.status.selector)
    assert.same({ 'ScaledUp: Scaled from 0 to 3 pods' }, events_about('web'))
  end)

  it('scales up and down with kubectl scale and records an Event each time', function()
    cluster:kubectl('scale podset web --replicas=5')
    has_pods('web', 5)
    cluster:kubectl('scale podset web --replicas=1')
    has_pods('web', 1)
    assert.same({
      'ScaledDown: Scaled from 5 to 1 pods',
      'ScaledUp: Scaled from 0 to 3 pods',
      'ScaledUp: Scaled from 3 to 5 pods',
    }, sorted(events_about('web')))
  end)

  it('replaces a pod deleted by hand', function()
    local before = pod_names('web')
    cluster:kubectl('delete pod ' .. before[1])
    converge('a replacement pod', function()
      local now = pod_names('web')
      return #now == 1 and now[1] ~= before[1], join(now)
    end)
  end)

  it('converges after a restart to the changes made while it was down', function()
    local survivor = pod_names('web')[1]
    assert.equals(0, p:stop())
    cluster:kubectl('scale podset web --replicas=4')
    cluster:kubectl('apply -f -', podset('api', 2))
    start_controller()
    has_pods('web', 4)
    has_pods('api', 2)
    -- The pod that was there is kept: the controller counted it, because it
    -- reconciled only once its pod cache was filled.
    local names = pod_names('web')
    assert.truthy(join(names):find(survivor, 1, true), join(names))
    assert.truthy(join(events_about('web')):find('Scaled from 1 to 4 pods', 1, true))
  end)

  it('reports ready pods in status.readyReplicas and the Ready condition', function()
    local ps = cluster:kubectl_json('get podset web')
    local ready = ps.status.conditions[1]
    assert.same({ 'Ready', 'False', 'PodsNotReady', '0 of 4 pods are ready', ps.metadata.generation },
      { ready.type, ready.status, ready.reason, ready.message, ready.observedGeneration })
    -- Nothing runs pods in the sandbox: mark them ready as a kubelet would.
    local ready_patch = [['{"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}}']]
    for _, name in ipairs(pod_names('web')) do
      cluster:kubectl('patch pod ' .. name .. ' --subresource=status --type=merge -p ' .. ready_patch)
    end
    converge('Ready=True', function()
      local status = cluster:kubectl_json('get podset web').status
      local c = status.conditions[1]
      return status.readyReplicas == 4 and c.status == 'True' and c.reason == 'AllPodsReady', c.reason
    end)
  end)

  it('requeues a status update that met a conflict', function()
    cluster:fault { fail = { count = 1, code = 409, verbs = { 'update' }, path = 'podsets/web/status$' } }
    cluster:kubectl('scale podset web --replicas=2')
    has_pods('web', 2)
    assert.equals(1, cluster:stats().faults.fail_409)
    assert.is_nil(p:log():find('failed', 1, true), p:log())
  end)

  it('deletes the pods of a deleted PodSet, also when it was deleted while the controller was down', function()
    cluster:kubectl('delete podset web')
    converge('the pods of web deleted', function() return #pods_of('web') == 0 end)
    assert.equals(0, p:stop())
    cluster:kubectl('delete podset api')
    start_controller()
    converge('the pods of api deleted', function() return #pods_of('api') == 0 end)
  end)
end)

describe('examples/finalizer.lua', function()
  local cluster = testing.with_sandbox()
  local p
  setup(function()
    p = start_example(cluster, 'finalizer.lua')
    p:wait_log('guarding 0 ConfigMaps', CONVERGE)
  end)

  local function finalizers(name)
    local cm = cluster:kubectl_json('get configmap ' .. name)
    return join(cm.metadata.finalizers or {})
  end

  local function exists(name)
    local _, ok = cluster:try_kubectl('get configmap ' .. name)
    return ok
  end

  it('adds its finalizer to guarded ConfigMaps only', function()
    cluster:kubectl('create configmap plain')
    cluster:kubectl('create configmap guarded')
    cluster:kubectl('create configmap guarded-backup')
    cluster:kubectl('label configmap guarded klua.dev/guarded=true')
    converge('the finalizer added', function() return finalizers('guarded') == 'demo.klua.dev/cleanup' end)
    assert.equals('', finalizers('plain'))
  end)

  it('cleans up when a guarded ConfigMap is deleted, then lets the deletion complete', function()
    cluster:kubectl('delete configmap guarded --wait=false')
    converge('guarded deleted', function() return not exists('guarded') end)
    assert.is_false(exists('guarded-backup'))
    local reasons = {}
    for _, e in ipairs(cluster:kubectl_json('get events').items) do
      if e.involvedObject.name == 'guarded' then reasons[#reasons + 1] = e.reason .. ': ' .. e.message end
    end
    assert.same({ 'CleanedUp: deleted default/guarded-backup' }, reasons)
    assert.is_true(exists('plain'))
  end)

  it('cleans up, once restarted, a guarded ConfigMap deleted while it was down', function()
    cluster:kubectl('create configmap orders')
    cluster:kubectl('create configmap orders-backup')
    cluster:kubectl('label configmap orders klua.dev/guarded=true')
    converge('the finalizer added', function() return finalizers('orders') == 'demo.klua.dev/cleanup' end)
    assert.equals(0, p:stop())
    cluster:kubectl('delete configmap orders --wait=false')
    -- The finalizer holds the deletion: the object waits, marked.
    local held = cluster:kubectl_json('get configmap orders')
    assert.truthy(held.metadata.deletionTimestamp)
    assert.is_true(exists('orders-backup'))
    p = start_example(cluster, 'finalizer.lua')
    converge('orders deleted', function() return not exists('orders') end)
    assert.is_false(exists('orders-backup'))
  end)

  it('removes its finalizer from a ConfigMap that loses the label', function()
    cluster:kubectl('create configmap keep')
    cluster:kubectl('label configmap keep klua.dev/guarded=true')
    converge('the finalizer added', function() return finalizers('keep') == 'demo.klua.dev/cleanup' end)
    cluster:kubectl('label configmap keep klua.dev/guarded-')
    converge('the finalizer removed', function() return finalizers('keep') == '' end)
    cluster:kubectl('delete configmap keep --wait=false')
    converge('keep deleted', function() return not exists('keep') end)
  end)
end)

-- Without expectations of its own: klua holds each reconcile of a PodSet
-- until the pod cache has the pods the last one created and deleted.
describe('examples/podset-controller.lua with a watch that trails its writes by 0.3 s', function()
  local cluster = testing.with_sandbox { args = { '--watch-lag', '0.3' } }

  local function count(p, pattern)
    local n = 0
    for _, line in ipairs(log_lines(p, 'podset-controller.lua')) do
      if line:find(pattern) then n = n + 1 end
    end
    return n
  end

  it('creates and deletes exactly the pods spec.replicas asks for', function()
    cluster:kubectl('apply -f ' .. EXAMPLES .. 'podset-crd.yaml')
    local p = start_example(cluster, 'podset-controller.lua')
    p:wait_log('managing %d+ PodSets', CONVERGE)
    cluster:kubectl('apply -f -', 'apiVersion: demo.klua.dev/v1\nkind: PodSet\nmetadata: {name: lagged}\nspec: {replicas: 3}\n')
    local function settles(n)
      converge(('%d pods, and the status says so'):format(n), function()
        local pods = #cluster:kubectl_json('get pods -l demo.klua.dev/podset=lagged').items
        local status = cluster:kubectl_json('get podset lagged').status
        return pods == n and status and status.replicas == n, ('%d pods, status %s'):format(pods, tostring(status and status.replicas))
      end)
    end
    settles(3)
    cluster:kubectl('scale podset lagged --replicas=5')
    settles(5)
    cluster:kubectl('scale podset lagged --replicas=2')
    settles(2)
    assert.equals(5, count(p, 'created pod'))
    assert.equals(3, count(p, 'deleted pod'))
    assert.equals(0, count(p, 'reconcile .* failed'), p:log())
  end)
end)

-- The webhook examples are served by klua to the sandbox, which calls them as
-- kube-apiserver does; their configurations are those `klua webhook-config` prints
-- (support/webhook.lua). For a describe block: a sandbox per spec, the example's CRD
-- file crd applied and the webhooks of its script served and configured; returns it.
local function serving(crd, script)
  local webhook = require('support.webhook')
  local cluster = testing.with_sandbox { each = true }
  before_each(function()
    cluster:kubectl('apply -f ' .. EXAMPLES .. crd)
    webhook.configure(cluster, EXAMPLES .. script, webhook.serve(cluster, EXAMPLES .. script))
  end)
  return cluster
end

describe('examples/podset-webhook.lua', function()
  local cluster = serving('podset-crd.yaml', 'podset-webhook.lua')

  local function podset(name, replicas, template)
    return ([[
apiVersion: demo.klua.dev/v1
kind: PodSet
metadata: {name: %s}
spec: {replicas: %d%s}
]]):format(name, replicas, template and (', template: ' .. template) or '')
  end

  it('refuses a PodSet of more than 10 replicas, also when kubectl scale asks for them', function()
    local _, ok, err = cluster:try_kubectl('create -f -', podset('huge', 11, '{metadata: {labels: {app: huge}}}'))
    assert.is_false(ok)
    assert.are.equal('Error from server (Forbidden): error when creating "STDIN": admission webhook '
      .. '"podset-replicas.demo.klua.dev" denied the request: spec.replicas is 11: a PodSet runs at most 10 pods\n',
      err)
    assert.is_nil(cluster:get('podset huge'))
    cluster:kubectl('create -f -', podset('web', 3, '{metadata: {labels: {app: web}}}'))
    _, ok, err = cluster:try_kubectl('scale podset web --replicas=11')
    assert.is_false(ok)
    assert.are.equal('Error from server (Forbidden): admission webhook "podset-replicas.demo.klua.dev" denied the '
      .. 'request: spec.replicas is 11: a PodSet runs at most 10 pods\n', err)
    _, ok, err = cluster:try_kubectl([[patch podset web --type merge -p '{"spec":{"replicas":12}}']])
    assert.is_false(ok)
    assert.matches('spec.replicas is 12', err, 1, true)
    cluster:kubectl('scale podset web --replicas=10')
    assert.are.equal(10, cluster:kubectl_json('get podset web').spec.replicas)
  end)

  it('defaults the pods\' app label to the PodSet\'s name, saying so, and keeps one given', function()
    local _, ok, err = cluster:try_kubectl('create -f -', podset('web', 2))
    assert.is_true(ok, err)
    assert.are.equal('Warning: spec.template.metadata.labels.app defaulted to web\n', err)
    assert.are.same({ app = 'web' }, cluster:kubectl_json('get podset web').spec.template.metadata.labels)
    cluster:kubectl('create -f -', podset('db', 1, '{metadata: {labels: {app: postgres, tier: data}}}'))
    assert.are.same({ app = 'postgres', tier = 'data' },
      cluster:kubectl_json('get podset db').spec.template.metadata.labels)
    -- The controller makes the pods from the template as stored: labelled.
    local p = start_example(cluster, 'podset-controller.lua')
    p:wait_log('managing %d+ PodSets', CONVERGE)
    converge('2 pods labelled app=web', function()
      local n = #cluster:kubectl_json('get pods -l app=web,demo.klua.dev/podset=web').items
      return n == 2, n .. ' pods'
    end)
  end)
end)

describe('examples/podset-conversion.lua and podset-crd-v1alpha1.yaml', function()
  local cluster = serving('podset-crd-v1alpha1.yaml', 'podset-conversion.lua')

  local function get(version, name)
    return cluster:kubectl_json(('get podsets.%s.demo.klua.dev %s'):format(version, name))
  end

  it('stores a v1alpha1 PodSet at v1, spec.size become spec.replicas, and serves it back at v1alpha1', function()
    cluster:apply([[{"apiVersion": "demo.klua.dev/v1alpha1", "kind": "PodSet", "metadata": {"name": "old"},
      "spec": {"size": 2}}]])
    local v1 = get('v1', 'old')
    assert.are.equal('demo.klua.dev/v1', v1.apiVersion)
    assert.are.same({ replicas = 2 }, v1.spec)
    local alpha = get('v1alpha1', 'old')
    assert.are.equal('demo.klua.dev/v1alpha1', alpha.apiVersion)
    assert.are.same({ size = 2 }, alpha.spec)
  end)

  it('serves a v1 PodSet at v1alpha1, and a v1alpha1 client\'s change reaches v1', function()
    cluster:apply([[{"apiVersion": "demo.klua.dev/v1", "kind": "PodSet", "metadata": {"name": "new"},
      "spec": {"replicas": 3, "template": {"metadata": {"labels": {"app": "new"}}}}}]])
    local alpha = get('v1alpha1', 'new')
    assert.are.same({ size = 3, template = { metadata = { labels = { app = 'new' } } } }, alpha.spec)
    cluster:kubectl([[patch podsets.v1alpha1.demo.klua.dev new --type merge -p '{"spec":{"size":1}}']])
    local v1 = get('v1', 'new')
    assert.are.same({ replicas = 1, template = { metadata = { labels = { app = 'new' } } } }, v1.spec)
  end)

  it('lets the v1 controller run the pods of a PodSet written at v1alpha1', function()
    local p = start_example(cluster, 'podset-controller.lua')
    p:wait_log('managing %d+ PodSets', CONVERGE)
    cluster:apply([[{"apiVersion": "demo.klua.dev/v1alpha1", "kind": "PodSet", "metadata": {"name": "old"},
      "spec": {"size": 2}}]])
    converge('2 pods for old, in its v1alpha1 status', function()
      local n = #cluster:kubectl_json('get pods -l demo.klua.dev/podset=old').items
      local status = get('v1alpha1', 'old').status
      return n == 2 and status and status.replicas == 2, n .. ' pods'
    end)
  end)
end)
