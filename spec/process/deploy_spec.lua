-- deploy/: the manifests of docs/deploy.md, applied to the sandbox with kubectl, and the
-- PodSet example controller run as the Deployment runs it: two replicas with the
-- Deployment's own arguments and its ConfigMap's script, each reaching the API server by
-- the in-cluster configuration (KUBERNETES_SERVICE_HOST/PORT, the service account's token,
-- CA and namespace files) with a token of the ServiceAccount deploy/rbac.yaml makes. The
-- sandbox enforces RBAC for that token as kube-apiserver does (docs/sandbox.md), so the
-- controller working here shows the Roles grant all it needs.
local cjson = require('cjson')
local testing = require('klua.testing')
local sandbox = require('support.sandbox')
local K = require('support.klua')

local root = os.getenv('KLUA_ROOT') or '.'
local NS = 'klua-system'

describe('deploy/ manifests', function()
  local sb, sa_dir, home, script, args
  local procs = {}

  setup(function()
    sb = sandbox.start{ tls = true, auth = 'token' }
    sb:kubectl('apply -f ' .. root .. '/examples/podset-crd.yaml')
    for _, f in ipairs({ 'namespace.yaml', 'rbac.yaml', 'deployment.yaml' }) do
      sb:kubectl('apply -f ' .. root .. '/deploy/' .. f)
    end
    sb:kubectl(('-n %s create configmap podset-controller --from-file=controller.lua=%s'
      .. '/examples/podset-controller.lua'):format(NS, root))
    -- What the kubelet would mount: the ConfigMap's script, the service account's files.
    local dir = K.tmpdir()
    script = dir .. '/controller.lua'
    K.write_file(script, sb:kubectl_json('-n ' .. NS .. ' get configmap podset-controller')
      .data['controller.lua'])
    sa_dir, home = dir .. '/sa', dir .. '/home'
    os.execute('mkdir -p ' .. K.quote(sa_dir) .. ' ' .. K.quote(home))
    K.write_file(sa_dir .. '/token', (sb:kubectl('-n ' .. NS .. ' create token podset-controller')
      :gsub('%s+$', '')))
    K.write_file(sa_dir .. '/ca.crt', K.read_file(sb.dir .. '/ca.crt'))
    K.write_file(sa_dir .. '/namespace', NS)
    local deploy = sb:kubectl_json('-n ' .. NS .. ' get deployment podset-controller')
    args = deploy.spec.template.spec.containers[1].args
  end)

  teardown(function()
    for _, p in ipairs(procs) do p:cleanup() end
    sb:stop()
  end)

  -- The Deployment's arguments for one replica on this machine: its script where the
  -- ConfigMap would be mounted, and ports of its own (two replicas share one host here).
  local function replica_args()
    local out = {}
    for _, a in ipairs(args) do
      if a == '/etc/klua/controller.lua' then a = script end
      a = a:gsub('^(%-%-metrics%-bind%-address=):8080$', '%1127.0.0.1:0')
      a = a:gsub('^(%-%-health%-probe%-bind%-address=):8081$', '%1127.0.0.1:0')
      out[#out + 1] = a
    end
    return out
  end

  local function start_replica()
    local p = K.spawn(replica_args(), { env = {
      HOME = home, KUBERNETES_SERVICE_HOST = '127.0.0.1',
      KUBERNETES_SERVICE_PORT = tostring(sb.port), KLUA_SERVICEACCOUNT_DIR = sa_dir } })
    procs[#procs + 1] = p
    return p
  end

  local function holder()
    local lease = sb:get('-n ' .. NS .. ' lease podset-controller')
    return lease and lease.spec.holderIdentity
  end

  local function pods_of(name)
    return #sb:kubectl_json('-n default get pods -l demo.klua.dev/podset=' .. name).items
  end

  it('are accepted by the API server as written', function()
    assert.equals('podset-controller', sb:kubectl_json('-n ' .. NS .. ' get serviceaccount '
      .. 'podset-controller').metadata.name)
    assert.same({ '--leader-elect', '--leader-election-id=podset-controller',
      '--metrics-bind-address=:8080', '--health-probe-bind-address=:8081',
      '--graceful-shutdown-timeout=30s', 'run',
      '/etc/klua/controller.lua' }, args)
  end)

  it('grant the ServiceAccount only what the controller needs', function()
    -- The status of a request made with the ServiceAccount's token alone.
    local function as_controller(method, path)
      return tonumber(K.run_command(('curl -s -o /dev/null -w %%{http_code} -X %s --cacert %s '
        .. '-H "Authorization: Bearer $(cat %s)" %s'):format(method, K.quote(sa_dir .. '/ca.crt'),
        K.quote(sa_dir .. '/token'), K.quote(sb.url .. path))))
    end
    assert.equals(200, as_controller('GET', '/api/v1/pods'))
    assert.equals(403, as_controller('GET', '/api/v1/secrets'))
    assert.equals(403, as_controller('DELETE',
      '/apis/demo.klua.dev/v1/namespaces/default/podsets/x'))
    assert.equals(403, as_controller('GET', '/apis/coordination.k8s.io/v1/namespaces/default/leases'))
  end)

  it('run two replicas in-cluster: one leads and reconciles, the other takes over', function()
    local a, b = start_replica(), start_replica()
    local first = testing.poll(holder, 30 * K.slowdown)
    assert.truthy(first, a:errors() .. b:errors())
    sb:apply(cjson.encode({ apiVersion = 'demo.klua.dev/v1', kind = 'PodSet',
      metadata = { name = 'web', namespace = 'default' }, spec = { replicas = 2 } }))
    testing.eventually(function() return pods_of('web') == 2 end, 30 * K.slowdown,
      { what = 'the leader creating the PodSet\'s pods' })
    for _, p in ipairs({ a, b }) do
      -- Both addresses are 127.0.0.1:0 here, so one listener serves metrics and probes.
      local port = tonumber(testing.poll(function() return p:errors():match('%(port (%d+)%)') end,
        10 * K.slowdown))
      assert.truthy(port, p:errors())
      testing.eventually(function()
        return K.run_command(('curl -s -o /dev/null -w %%{http_code} http://127.0.0.1:%d/readyz')
          :format(port)) == '200'
      end, 20 * K.slowdown, { what = 'both replicas ready, the follower with a warm cache' })
    end
    local leader = a:errors():find('successfully acquired the lease', 1, true) and a or b
    local follower = leader == a and b or a
    leader:signal('KILL')
    testing.eventually(function()
      local h = holder()
      return h and h ~= first
    end, 60 * K.slowdown, { what = 'the other replica taking the lease' })
    sb:apply(cjson.encode({ apiVersion = 'demo.klua.dev/v1', kind = 'PodSet',
      metadata = { name = 'api', namespace = 'default' }, spec = { replicas = 1 } }))
    testing.eventually(function() return pods_of('api') == 1 end, 30 * K.slowdown,
      { what = 'the new leader reconciling' })
  end)
end)
