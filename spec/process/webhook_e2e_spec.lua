-- klua.webhook end to end: `klua run` serves a script's webhooks over HTTPS, the
-- sandbox API server calls them as kube-apiserver does (docs/sandbox.md, "Admission
-- and conversion webhooks"), kubectl drives the sandbox. The configurations applied
-- are those `klua webhook-config --url ... --ca-bundle ...` prints for the script
-- (support/webhook.lua), so the script and the configuration cannot disagree.
--
-- What kubectl prints is kube-apiserver's: a denial is the webhook's status
-- (apiserver's pkg/admission/plugin/webhook/errors/statuserror.go, ToStatusErr); a
-- handler's failure is klua's HTTP 500, which client-go turns into "an error on the
-- server (...)" (rest/request.go, newUnstructuredResponseError) and the dispatcher
-- into an internal error under failurePolicy Fail, or passes over under Ignore
-- (validating/dispatcher.go, ErrCallingWebhook; docs/webhooks.md).
local testing = require('klua.testing')
local cjson = require('cjson')
local K = require('support.klua')
local webhook = require('support.webhook')

local SCRIPT = [[
klua.webhook.validating { path = '/validate', name = 'check.e2e.klua.dev', resources = { 'v1/configmaps' },
  object_selector = { matchLabels = { ['e2e.klua.dev/checked'] = 'yes' } },
  handler = function(req)
    local verdict = req.object.data and req.object.data.verdict
    if verdict == 'deny' then return false, 'verdict "deny" is not allowed in ' .. req.namespace end
    if verdict == 'warn' then return true, { 'verdict "warn" is deprecated' } end
    return true
  end }

klua.webhook.mutating { path = '/default', name = 'default.e2e.klua.dev', resources = { 'v1/configmaps' },
  object_selector = { matchLabels = { ['e2e.klua.dev/checked'] = 'yes' } },
  handler = function(req)
    local cm = klua.copy(req.object)
    cm.metadata.labels['e2e.klua.dev/owner'] = cm.metadata.labels['e2e.klua.dev/owner'] or req.user_info.username
    cm.data = cm.data or {}
    cm.data.defaulted = 'true'
    return cm
  end }

-- The same broken handler under each failurePolicy, chosen by a label. klua answers
-- by the timeout less a tenth (docs/webhooks.md): 5 s leaves half a second for the
-- answer to reach the sandbox on a loaded machine.
local function broken(req)
  local how = req.object.data and req.object.data.break_by
  if how == 'error' then error('cannot judge ' .. req.name) end
  if how == 'spin' then while true do end end
  if how == 'sleep' then klua.log.info('sleeping on %s', req.name) klua.sleep(60) end
  return true
end
for _, policy in ipairs { 'Fail', 'Ignore' } do
  klua.webhook.validating { path = '/broken-' .. policy:lower(), name = policy:lower() .. '.e2e.klua.dev',
    resources = { 'v1/configmaps' }, failure_policy = policy, timeout_seconds = 5,
    object_selector = { matchLabels = { ['e2e.klua.dev/policy'] = policy } }, handler = broken }
end

-- things.e2e.klua.dev: v1 has spec.size, a number; v2 spec.size.value.
klua.webhook.conversion { path = '/convert', crd = 'things.e2e.klua.dev', convert = function(obj, desired)
  local t = klua.copy(obj)
  t.apiVersion = desired
  if desired == 'e2e.klua.dev/v2' then t.spec.size = { value = t.spec.size } else t.spec.size = t.spec.size.value end
  return t
end }
]]

local THINGS_CRD = [[
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: things.e2e.klua.dev}
spec:
  group: e2e.klua.dev
  scope: Namespaced
  names: {plural: things, singular: thing, kind: Thing}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {size: {type: integer}}}
  - name: v2
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {size: {type: object, properties: {value: {type: integer}}}}}
]]

local function configmap(name, labels, data)
  return cjson.encode { apiVersion = 'v1', kind = 'ConfigMap',
    metadata = { name = name, namespace = 'default', labels = labels }, data = data }
end

describe('klua webhooks called by the sandbox, driven with kubectl', function()
  local sb = testing.with_sandbox { each = true }
  local script, p

  before_each(function()
    script = K.script(SCRIPT)
    p = webhook.serve(sb, script, { flags = { '--instruction-budget', '1000000' } })
    sb:apply(THINGS_CRD)
    webhook.configure(sb, script, p)
  end)

  local checked = { ['e2e.klua.dev/checked'] = 'yes' }

  it('admits what the validating webhook allows, and kubectl prints its warnings', function()
    local _, ok, err = sb:try_kubectl('create -f -', configmap('fine', checked, { verdict = 'fine' }))
    assert.is_true(ok, err)
    _, ok, err = sb:try_kubectl('create -f -', configmap('warned', checked, { verdict = 'warn' }))
    assert.is_true(ok, err)
    assert.are.equal('Warning: verdict "warn" is deprecated\n', err)
    assert.truthy(sb:get('configmap warned'))
  end)

  it('refuses what the validating webhook denies, with the message kubectl prints', function()
    local _, ok, err = sb:try_kubectl('create -f -', configmap('denied', checked, { verdict = 'deny' }))
    assert.is_false(ok)
    assert.are.equal('Error from server (Forbidden): error when creating "STDIN": admission webhook '
      .. '"check.e2e.klua.dev" denied the request: verdict "deny" is not allowed in default\n', err)
    assert.is_nil(sb:get('configmap denied'))
    -- An update is judged too (the configuration's operations: CREATE and UPDATE).
    sb:kubectl('create -f -', configmap('later', checked, { verdict = 'fine' }))
    _, ok, err = sb:try_kubectl([[patch configmap later --type merge -p '{"data":{"verdict":"deny"}}']])
    assert.is_false(ok)
    assert.matches('admission webhook "check.e2e.klua.dev" denied the request', err, 1, true)
    assert.are.equal('fine', sb:get('configmap later').data.verdict)
  end)

  it('stores what the mutating webhook changed, its patch applied', function()
    sb:kubectl('create -f -', configmap('mutated', checked, { verdict = 'fine' }))
    local cm = sb:kubectl_json('get configmap mutated')
    assert.are.same({ ['e2e.klua.dev/checked'] = 'yes', ['e2e.klua.dev/owner'] = 'sandbox-admin' },
      cm.metadata.labels)
    assert.are.same({ verdict = 'fine', defaulted = 'true' }, cm.data)
    -- A ConfigMap the objectSelector leaves out is not called for.
    sb:kubectl('create configmap plain --from-literal=verdict=deny')
    assert.are.same({ verdict = 'deny' }, sb:kubectl_json('get configmap plain').data)
  end)

  it('converts a CRD\'s objects both ways through the conversion webhook', function()
    local crd = sb:kubectl_json('get customresourcedefinition things.e2e.klua.dev')
    assert.are.equal('Webhook', crd.spec.conversion.strategy)
    assert.are.equal(p.url .. '/convert', crd.spec.conversion.webhook.clientConfig.url)
    sb:apply([[{"apiVersion":"e2e.klua.dev/v1","kind":"Thing","metadata":{"name":"one","namespace":"default"},
      "spec":{"size":3}}]])
    sb:apply([[{"apiVersion":"e2e.klua.dev/v2","kind":"Thing","metadata":{"name":"two","namespace":"default"},
      "spec":{"size":{"value":5}}}]])
    -- Stored at v1: v2 reads convert up, v1 reads of what was written at v2 down.
    assert.are.same({ value = 3 }, sb:kubectl_json('get things.v2.e2e.klua.dev one').spec.size)
    assert.are.equal(5, sb:kubectl_json('get things.v1.e2e.klua.dev two').spec.size)
    local list = sb:kubectl_json('get things.v2.e2e.klua.dev')
    local sizes = {}
    for _, t in ipairs(list.items) do
      assert.are.equal('e2e.klua.dev/v2', t.apiVersion)
      sizes[t.metadata.name] = t.spec.size.value
    end
    assert.are.same({ one = 3, two = 5 }, sizes)
  end)

  describe('a handler that fails', function()
    -- What kubectl prints when the webhook of policy Fail was called for a ConfigMap
    -- whose handler broke by how.
    local function create(name, policy, how)
      return sb:try_kubectl('create -f -', configmap(name, { ['e2e.klua.dev/policy'] = policy }, { break_by = how }))
    end

    -- klua's one-line answer, as client-go quotes it.
    local function refused(err, why)
      assert.are.equal('Error from server (InternalError): error when creating "STDIN": Internal error occurred: '
        .. 'failed calling webhook "fail.e2e.klua.dev": failed to call webhook: an error on the server ("klua: '
        .. why .. '") has prevented the request from succeeding\n', err)
    end

    -- ConfigMaps whose handler breaks by how: HOW-fail, under failurePolicy Fail,
    -- refused for why and not stored; HOW-ignore, under Ignore, admitted.
    local function refused_under_fail_admitted_under_ignore(how, why)
      local _, ok, err = create(how .. '-fail', 'Fail', how)
      assert.is_false(ok)
      refused(err, why)
      assert.is_nil(sb:get('configmap ' .. how .. '-fail'))
      _, ok, err = create(how .. '-ignore', 'Ignore', how)
      assert.is_true(ok, err)
      assert.truthy(sb:get('configmap ' .. how .. '-ignore'))
    end

    it('with a Lua error fails the request under failurePolicy Fail, and is passed over under Ignore', function()
      local line = select(2, SCRIPT:sub(1, SCRIPT:find('cannot judge')):gsub('\n', '')) + 1
      refused_under_fail_admitted_under_ignore('error',
        ('the call to /broken-fail failed: %s:%d: cannot judge error-fail'):format(script, line))
    end)

    it('past the instruction budget fails the request under Fail, and is passed over under Ignore', function()
      refused_under_fail_admitted_under_ignore('spin', 'the call to /broken-fail failed: it ran past --instruction-budget')
      -- The server goes on answering.
      local _, ok, err = create('after', 'Fail', 'nothing')
      assert.is_true(ok, err)
    end)

    -- klua's answer, not the API server's timeout: the reason is named.
    it('past its deadline is answered before the API server gives up: Fail refuses, Ignore admits', function()
      refused_under_fail_admitted_under_ignore('sleep',
        'the call to /broken-fail was not answered in time: its deadline passed')
    end)
  end)

  it('keeps being called through a certificate rotation, without a restart', function()
    local function admitted(name)
      local _, ok, err = sb:try_kubectl('create -f -', configmap(name, checked, { verdict = 'fine' }))
      assert.is_true(ok, err)
      assert.are.equal('true', sb:get('configmap ' .. name).data.defaulted)
    end
    admitted('before')
    -- As cert-manager rotates a CA: the configuration trusts the old CA and the new,
    -- the pair is replaced, then the old CA is dropped.
    local next_ca = webhook.ca(p.certs, 'next')
    local both = K.tmpdir() .. '/both.crt'
    K.write_file(both, K.read_file(p.ca) .. K.read_file(next_ca))
    webhook.configure(sb, script, p, both)
    admitted('trusting-both')
    local staged = K.tmpdir()
    webhook.pair(p.certs, 'next', staged)
    -- Swapped in as a kubelet updates a mounted Secret: renames.
    assert(os.execute(('cp %s/tls.key %s/k && cp %s/tls.crt %s/c && mv %s/k %s/tls.key && mv %s/c %s/tls.crt')
      :format(staged, p.certs, staged, p.certs, p.certs, p.certs, p.certs, p.certs)))
    p:wait_log('serving the new certificate', 20 * K.slowdown)
    admitted('new-pair')
    webhook.configure(sb, script, p, next_ca)
    admitted('new-ca-only')
    -- Only the new pair is served: trusting the old CA alone fails the calls.
    webhook.configure(sb, script, p, p.ca)
    local _, ok, err = sb:try_kubectl('create -f -', configmap('old-ca', checked, { verdict = 'fine' }))
    assert.is_false(ok)
    assert.matches('x509: certificate signed by unknown authority', err, 1, true)
    assert.is_nil(p:exit_code())
  end)
end)
