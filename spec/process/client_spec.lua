-- klua as a client that hears kube-apiserver out and lets its user choose:
-- compression on by default and off with --disable-compression or the
-- cluster's disable-compression; the server's warnings (a deprecated CRD
-- version, an unknown field) logged once each, counted in /metrics, on
-- klua.api's results and on klua watch's stderr as kubectl prints them; and
-- impersonation (--as, --as-group, --as-uid, the kubeconfig user's as,
-- as-groups, as-uid, as-user-extra) to see a cluster as a ServiceAccount
-- sees it. The sandbox models each as kube-apiserver does (docs/sandbox.md).
local cjson = require('cjson')
local testing = require('klua.testing')
local fixtures = require('support.fixtures')
local prometheus = require('support.prometheus')
local K = require('support.klua')

-- widgets.example.com served at v1alpha1, deprecated, and v1.
local function deprecated_widgets_crd()
  local crd = cjson.decode(fixtures.WIDGETS_CRD)
  local v1 = crd.spec.versions[1]
  local old = cjson.decode(cjson.encode(v1))
  old.name, old.storage, old.deprecated = 'v1alpha1', false, true
  crd.spec.versions = { old, v1 }
  return cjson.encode(crd)
end
local DEPRECATED = 'example.com/v1alpha1 Widget is deprecated; use example.com/v1 Widget'

-- A kubeconfig for sb with extra lines under the cluster and the user's fields.
local function kubeconfig(sb, dir, name, cluster, user)
  return fixtures.kubeconfig(dir .. '/' .. name, { server = sb.url, cluster = cluster, user = user or '{}',
    ca = sb.tls and (sb.dir .. '/ca.crt') or nil, namespace = 'default' })
end

describe('compression', function()
  local sb = testing.with_sandbox()
  local dir

  setup(function()
    dir = K.tmpdir()
    -- Over kube-apiserver's 128 KiB threshold, under the ConfigMap's 1 MiB.
    sb:json('POST', '/api/v1/namespaces/default/configmaps', {
      metadata = { name = 'big' }, data = { blob = ('0123456789abcdef'):rep(12 * 1024) } })
  end)

  local GET_BIG = "assert(klua.api.get('configmaps', 'default/big')) print('got it') klua.stop()"

  -- How many answers the sandbox gzipped while fn ran.
  local function gzipped_during(fn)
    local before = sb:stats().encodings.gzip or 0
    fn()
    return (sb:stats().encodings.gzip or 0) - before
  end

  it('is asked for by default: the sandbox gzips an answer over 128 KiB', function()
    assert.are.equal(1, gzipped_during(function()
      assert.matches('got it', (K.run_script_ok(GET_BIG, { kubeconfig = sb.kubeconfig })))
    end))
  end)

  it('is not asked for with --disable-compression', function()
    assert.are.equal(0, gzipped_during(function()
      assert.matches('got it', (K.run_script_ok(GET_BIG, { kubeconfig = sb.kubeconfig,
        flags = { '--disable-compression' } })))
    end))
  end)

  it("is not asked for when the kubeconfig's cluster sets disable-compression", function()
    local kc = kubeconfig(sb, dir, 'plain.yaml', { 'disable-compression: true' })
    assert.are.equal(0, gzipped_during(function()
      assert.matches('got it', (K.run_script_ok(GET_BIG, { kubeconfig = kc })))
    end))
  end)
end)

describe("the server's warnings", function()
  local sb, watchers = K.watched_sandbox()

  setup(function()
    sb:apply(deprecated_widgets_crd())
    for _, name in ipairs { 'w0', 'w1' } do
      sb:apply(cjson.encode { apiVersion = 'example.com/v1', kind = 'Widget',
        metadata = { name = name, namespace = 'default' }, spec = { size = 1 } })
    end
  end)

  it('are on klua.api results, logged once each and counted in /metrics', function()
    local script = K.script [[
local old = '/apis/example.com/v1alpha1/namespaces/default/widgets/w1'
local function show(what)
  print(what .. ': ' .. table.concat(klua.api.last_warnings(), ' | '))
end
for _ = 1, 3 do assert(klua.api.request('GET', old)) end
show('old')
assert(klua.api.get('widgets.example.com', 'default/w1'))
show('current')
local _, err = klua.api.request('GET', old .. '-missing')
print('error: ' .. table.concat(err.warnings, ' | '))
assert(klua.api.request('POST', '/api/v1/namespaces/default/configmaps?fieldValidation=Warn',
  { apiVersion = 'v1', kind = 'ConfigMap', metadata = { name = 'warned' }, spec = { x = 1 } }))
show('unknown field')
-- Two pages: the warnings of both.
local list = assert(klua.api.list('widgets.v1alpha1.example.com', { namespace = 'default', limit = 1 }))
print(#list.items .. ' listed: ' .. #klua.api.last_warnings())
print('done')
klua.every(60, function() end) -- serves /metrics until stopped
]]
    local p = K.spawn { '--kubeconfig', sb.kubeconfig, '--metrics-bind-address', '127.0.0.1:0', 'run', script }
    watchers.track(p)
    assert.truthy(p:wait_for('done\n', 20 * K.slowdown), p:errors())
    assert.matches('old: ' .. DEPRECATED:gsub('%p', '%%%0') .. '\ncurrent: \nerror: '
      .. DEPRECATED:gsub('%p', '%%%0') .. '\nunknown field: unknown field "spec"\n2 listed: 2\n', p:output())
    local logged = K.count(p:errors(), K.literally(DEPRECATED))
    assert.are.equal(1, logged, p:errors())
    local port = tonumber(p:errors():match('%(port (%d+)%)'))
    local text = K.run_command(('curl -s --max-time 10 http://127.0.0.1:%d/metrics'):format(port))
    local family = prometheus.parse(text).klua_api_warnings_total
    assert.are.same({ { name = 'klua_api_warnings_total', labels = { host = '127.0.0.1:' .. sb.port },
      label_names = { 'host' }, value = 7 } }, family.samples)
  end)

  it('are printed on klua watch\'s stderr once each, as kubectl prints them', function()
    local _, _, kubectl_err = sb:try_kubectl('get widgets.v1alpha1.example.com')
    assert.are.equal('Warning: ' .. DEPRECATED .. '\n', kubectl_err)
    local p = watchers.watch { 'widgets.v1alpha1.example.com' }
    assert.truthy(p:wait_for('w1', 20 * K.slowdown), p:errors())
    sb:apply(cjson.encode { apiVersion = 'example.com/v1', kind = 'Widget',
      metadata = { name = 'w2', namespace = 'default' }, spec = { size = 2 } })
    -- w2 came by the watch: the LIST and the watch both warned.
    assert.truthy(p:wait_for('w2', 20 * K.slowdown), p:errors())
    local warnings = {}
    for line in p:errors():gmatch('Warning: [^\n]*\n') do warnings[#warnings + 1] = line end
    assert.are.same({ kubectl_err }, warnings)
  end)
end)

describe('impersonation', function()
  -- https, as kubectl sends a token over nothing else; client certificates for the
  -- sandbox's superuser, as kubectl asks for a password when there is no credential.
  local sb, watchers = K.watched_sandbox { tls = true, auth = 'cert' }
  local dir

  -- Lists configmaps in default; prints how that went.
  local LIST = [[
local list, err = klua.api.list('configmaps', { namespace = 'default' })
print(list and ('listed ' .. #list.items) or ('refused: ' .. err.message))
klua.stop()
]]

  setup(function()
    dir = K.tmpdir()
    fixtures.service_account(sb, dir, 'reader', { 'list', 'watch' })
    sb:kubectl('create configmap seen --from-literal=a=b')
    fixtures.service_account(sb, dir, 'nobody', {})
  end)

  it('runs a script as the ServiceAccount --as names, with its RBAC', function()
    local out = K.run_script_ok(LIST, { kubeconfig = sb.kubeconfig,
      flags = { '--as', 'system:serviceaccount:default:reader' } })
    assert.matches('^listed %d+\n$', out)
    out = K.run_script_ok(LIST, { kubeconfig = sb.kubeconfig, flags = { '--as', 'system:serviceaccount:default:nobody' } })
    local _, _, kubectl_err = sb:try_kubectl('get configmaps --as system:serviceaccount:default:nobody')
    assert.are.equal('refused: configmaps is forbidden: User "system:serviceaccount:default:nobody" cannot list '
      .. 'resource "configmaps" in API group "" in the namespace "default"\n', out)
    assert.truthy(kubectl_err:find(out:match('refused: (.*)\n'), 1, true), kubectl_err)
  end)

  it('runs klua watch as the ServiceAccount --as names: what it may see, and 403 as kubectl where not', function()
    local p = K.spawn { '--kubeconfig', sb.kubeconfig, 'watch', 'configmaps', '--as=system:serviceaccount:default:reader' }
    watchers.track(p)
    assert.truthy(p:wait_for('seen', 20 * K.slowdown), p:errors())
    local _, err, code = K.run { '--kubeconfig', sb.kubeconfig, 'watch', 'configmaps',
      '--as', 'system:serviceaccount:default:nobody' }
    local _, _, kubectl_err = sb:try_kubectl('get configmaps -w --as system:serviceaccount:default:nobody')
    local refusal = 'configmaps is forbidden: User "system:serviceaccount:default:nobody" cannot list resource '
      .. '"configmaps" in API group "" in the namespace "default"'
    assert.truthy(kubectl_err:find(refusal, 1, true), kubectl_err)
    assert.truthy(err:find(refusal, 1, true), err)
    assert.are_not.equal(0, code)
  end)

  it("takes the user, groups and uid from the kubeconfig's as fields, and the flags over them", function()
    -- A group the reader's Role is bound to, for a user of no ServiceAccount.
    sb:apply(cjson.encode {
      apiVersion = 'rbac.authorization.k8s.io/v1', kind = 'RoleBinding',
      metadata = { name = 'readers', namespace = 'default' },
      roleRef = { apiGroup = 'rbac.authorization.k8s.io', kind = 'Role', name = 'reader' },
      subjects = { { kind = 'Group', name = 'readers' } },
    })
    local kc = kubeconfig(sb, dir, 'as.yaml', nil, ('{client-certificate: %s/client.crt, client-key: %s/client.key, '
      .. 'as: alice, as-groups: [readers], as-uid: "1234", as-user-extra: {acme.com/project: [blue]}}'):format(sb.dir, sb.dir))
    assert.matches('^listed %d+\n$', (K.run_script_ok(LIST, { kubeconfig = kc })))
    local out = K.run_script_ok(LIST, { kubeconfig = kc, flags = { '--as-group', 'others' } })
    assert.matches('^refused: configmaps is forbidden: User "alice" cannot list', out)
    out = K.run_script_ok(LIST, { kubeconfig = kc, flags = { '--as', 'system:serviceaccount:default:reader',
      '--as-group', 'system:serviceaccounts' } })
    assert.matches('^listed %d+\n$', out)
  end)

  it('is refused, as kubectl is, to a user who may not impersonate', function()
    local token = sb:kubectl('create token reader'):gsub('%s+$', '')
    local out = K.run_script_ok(LIST, { kubeconfig = sb.kubeconfig,
      flags = { '--token', token, '--as', 'alice' } })
    local refusal = 'users.authentication.k8s.io "alice" is forbidden: User "system:serviceaccount:default:reader" '
      .. 'cannot impersonate resource "users" in API group "authentication.k8s.io" at the cluster scope'
    assert.truthy(out:find(refusal, 1, true), out)
    local _, _, kubectl_err = sb:try_kubectl('get configmaps --as alice --token ' .. token)
    assert.truthy(kubectl_err:find(refusal, 1, true), kubectl_err)
  end)
end)
