-- The sandbox calls admission and conversion webhooks as kube-apiserver 1.32 does
-- (docs/sandbox.md, "Admission and conversion webhooks", names the source of each rule):
-- ValidatingWebhookConfigurations and MutatingWebhookConfigurations are resources kubectl
-- manages; a matching webhook gets an admission.k8s.io/v1 AdmissionReview over HTTPS,
-- checked against its caBundle; denials, JSON patches, warnings, failurePolicy and
-- timeoutSeconds act as on a cluster; a CRD with a conversion webhook stores objects at
-- its storage version and converts them on the way in and out. The webhook is
-- spec/support/webhook_server.py.
local cjson = require('cjson')
local testing = require('klua.testing')
local webhook = require('support.webhook')

local function rule(resources, operations, extra)
  local r = { apiGroups = { '' }, apiVersions = { 'v1' }, resources = resources,
    operations = operations or { 'CREATE' } }
  for k, v in pairs(extra or {}) do r[k] = v end
  return r
end

-- A webhook configuration of kind (Validating or Mutating) named name, whose webhooks are
-- given as {name, client, rules, and any other field}.
local function configuration(kind, name, hooks)
  local list = {}
  for i, h in ipairs(hooks) do
    local hook = { sideEffects = 'None', admissionReviewVersions = { 'v1' } }
    for k, v in pairs(h) do hook[k] = v end
    list[i] = hook
  end
  return cjson.encode { apiVersion = 'admissionregistration.k8s.io/v1', kind = kind .. 'WebhookConfiguration',
    metadata = { name = name }, webhooks = list }
end

local function configmap(name, labels, namespace)
  return cjson.encode { apiVersion = 'v1', kind = 'ConfigMap', data = { k = 'v' },
    metadata = { name = name, namespace = namespace or 'default', labels = labels } }
end

describe('sandbox admission webhooks', function()
  local sb = testing.with_sandbox { each = true }
  local w

  setup(function() w = webhook.start() end)
  teardown(function() w:stop() end)

  it('serves webhook configurations to kubectl with kube-apiserver defaults, and refuses bad ones', function()
    sb:apply(configuration('Validating', 'checks', { { name = 'allow.example.com', clientConfig = w:client('/allow'),
      rules = { rule({ 'configmaps' }) } } }))
    sb:apply(configuration('Mutating', 'fixes', { { name = 'mutate.example.com', clientConfig = w:client('/mutate'),
      rules = { rule({ 'configmaps' }) } } }))
    local v = sb:kubectl_json('get validatingwebhookconfiguration checks').webhooks[1]
    assert.same({ 'Fail', 'Equivalent', 10, '*' }, { v.failurePolicy, v.matchPolicy, v.timeoutSeconds, v.rules[1].scope })
    assert.same({}, v.namespaceSelector)
    assert.same({}, v.objectSelector)
    assert.equals('Never', sb:kubectl_json('get mutatingwebhookconfiguration fixes').webhooks[1].reinvocationPolicy)
    assert.matches('mutatingwebhookconfigurations', sb:kubectl('api-resources --api-group admissionregistration.k8s.io'))
    assert.matches('^NAME%s+WEBHOOKS%s+AGE\nchecks%s+1%s', sb:kubectl('get validatingwebhookconfigurations'))

    local _, ok, err = sb:try_kubectl('apply -f -', configuration('Validating', 'bad', {
      { name = 'some.example.com', clientConfig = w:client('/allow'), rules = { rule({ 'configmaps' }) },
        sideEffects = 'Some' } }))
    assert.is_false(ok)
    assert.matches('webhooks[0].sideEffects: Unsupported value: "Some": supported values: "None", "NoneOnDryRun"',
      err, 1, true)
    sb:kubectl('delete validatingwebhookconfiguration checks')
    assert.is_nil(sb:get('validatingwebhookconfiguration checks'))
  end)

  it('applies a changed configuration again, its webhooks merged by name as kubectl apply patches them', function()
    local function checks(timeout)
      return configuration('Validating', 'checks', {
        { name = 'a.example.com', clientConfig = w:client('/allow'), rules = { rule({ 'configmaps' }) } },
        { name = 'b.example.com', clientConfig = w:client('/allow'), rules = { rule({ 'configmaps' }) },
          timeoutSeconds = timeout } })
    end
    sb:apply(checks(5))
    -- kubectl sends a strategic merge patch with $setElementOrder/webhooks: the webhooks
    -- list merges by name (k8s.io/api admissionregistration/v1 types.go, patchMergeKey).
    sb:apply(checks(7))
    local hooks = sb:kubectl_json('get validatingwebhookconfiguration checks').webhooks
    assert.same({ 'a.example.com', 'b.example.com' }, { hooks[1].name, hooks[2].name })
    assert.same({ 10, 7 }, { hooks[1].timeoutSeconds, hooks[2].timeoutSeconds })
  end)

  it('sends an AdmissionReview v1 for create, update and delete as kube-apiserver builds it', function()
    sb:apply(configuration('Validating', 'checks', { { name = 'allow.example.com', clientConfig = w:client('/allow'),
      rules = { rule({ 'configmaps' }, { '*' }) } } }))
    local before = #w:requests('/allow')
    sb:kubectl('create -f -', configmap('reviewed'))
    sb:kubectl('label configmap reviewed colour=blue')
    sb:kubectl('delete configmap reviewed')
    local calls = w:requests('/allow')
    assert.equals(before + 3, #calls)
    local create, update, delete = calls[before + 1], calls[before + 2], calls[before + 3]
    assert.equals('timeout=10s', create.query)
    assert.equals('admission.k8s.io/v1', create.body.apiVersion)
    local r = create.body.request
    assert.matches('^%x+%-%x+%-%x+%-%x+%-%x+$', r.uid)
    assert.same({ group = '', version = 'v1', kind = 'ConfigMap' }, r.kind)
    assert.same({ group = '', version = 'v1', resource = 'configmaps' }, r.resource)
    assert.same(r.kind, r.requestKind)
    assert.same(r.resource, r.requestResource)
    assert.same({ 'reviewed', 'default', 'CREATE', false }, { r.name, r.namespace, r.operation, r.dryRun })
    assert.equals('sandbox-admin', r.userInfo.username)
    assert.equals('v', r.object.data.k)
    assert.is_string(r.object.metadata.uid)
    assert.equals(cjson.null, r.oldObject)
    assert.same({ kind = 'CreateOptions', apiVersion = 'meta.k8s.io/v1', fieldManager = 'kubectl-create',
      fieldValidation = 'Strict' }, r.options)

    r = update.body.request
    assert.same({ 'UPDATE', 'blue' }, { r.operation, r.object.metadata.labels.colour })
    assert.is_nil(r.oldObject.metadata.labels)
    assert.same({ kind = 'UpdateOptions', apiVersion = 'meta.k8s.io/v1', fieldManager = 'kubectl-label' }, r.options)

    r = delete.body.request
    assert.same({ 'DELETE', 'reviewed' }, { r.operation, r.name })
    assert.equals(cjson.null, r.object)
    assert.equals('blue', r.oldObject.metadata.labels.colour)
    assert.equals('DeleteOptions', r.options.kind)

    -- A deletecollection is admitted item by item.
    sb:kubectl('create -f -', configmap('one', { doomed = 'yes' }))
    sb:kubectl('create -f -', configmap('two', { doomed = 'yes' }))
    before = #w:requests('/allow')
    assert.equals(200, (sb:request('DELETE', '/api/v1/namespaces/default/configmaps?labelSelector=doomed%3Dyes')))
    assert.is_nil(sb:get('configmap one'))
    local names = {}
    for i = before + 1, #w:requests('/allow') do
      r = w:requests('/allow')[i].body.request
      names[#names + 1] = r.operation .. ' ' .. r.name
    end
    table.sort(names)
    assert.same({ 'DELETE one', 'DELETE two' }, names)
  end)

  it('fails a denied request with the webhook status, as kubectl prints it, having called every validating webhook', function()
    sb:apply(configuration('Validating', 'checks', {
      { name = 'deny.example.com', clientConfig = w:client('/deny'), rules = { rule({ 'configmaps' }) } },
      { name = 'allow.example.com', clientConfig = w:client('/allow'), rules = { rule({ 'configmaps' }) } },
      { name = 'bare.example.com', clientConfig = w:client('/deny-bare'), rules = { rule({ 'secrets' }) } } }))
    local allowed = #w:requests('/allow')
    local _, ok, err = sb:try_kubectl('create -f -', configmap('denied'))
    assert.is_false(ok)
    assert.equals('Error from server (Forbidden): error when creating "STDIN": admission webhook "deny.example.com" '
      .. 'denied the request: widgets need an owner\n', err)
    assert.is_nil(sb:get('configmap denied'))
    -- Validating webhooks are called all at once; one denying does not stop the others.
    assert.equals(allowed + 1, #w:requests('/allow'))
    local status, body = sb:json('POST', '/api/v1/namespaces/default/secrets', { metadata = { name = 's' } })
    assert.equals(400, status)
    assert.equals('admission webhook "bare.example.com" denied the request without explanation', body.message)
    assert.is_nil(body.reason)
  end)

  it('applies JSON patches of mutating webhooks, before validating webhooks run', function()
    sb:apply(configuration('Mutating', 'fixes', { { name = 'mutate.example.com', clientConfig = w:client('/mutate'),
      rules = { rule({ 'configmaps' }) } } }))
    sb:kubectl('create -f -', configmap('plain'))
    local plain = sb:get('configmap plain --show-managed-fields')
    assert.equals('true', plain.metadata.labels.mutated)
    -- managedFields record the object as the request gave it, before admission.
    assert.same({ ['f:data'] = { ['.'] = {}, ['f:k'] = {} } }, plain.metadata.managedFields[1].fieldsV1)
    -- Denies only what carries the label the mutating webhook adds.
    sb:apply(configuration('Validating', 'checks', { { name = 'deny.example.com', clientConfig = w:client('/deny'),
      rules = { rule({ 'configmaps' }) }, objectSelector = { matchLabels = { mutated = 'true' } } } }))
    local _, ok, err = sb:try_kubectl('create -f -', configmap('second', { team = 'a' }))
    assert.is_false(ok)
    assert.matches('admission webhook "deny.example.com" denied the request', err, 1, true)
    local seen = w:requests('/deny')
    assert.same({ mutated = 'true', team = 'a' }, seen[#seen].body.request.object.metadata.labels)
  end)

  it('lets the API be used while a webhook runs, and starts a write over when its object changed meanwhile', function()
    sb:kubectl('create -f -', configmap('busy'))
    local client = w:client('/touch')
    client.url = client.url .. '?server=' .. sb.url
    sb:apply(configuration('Validating', 'checks', { { name = 'touch.example.com', clientConfig = client,
      rules = { rule({ 'configmaps' }, { 'UPDATE' }) } } }))
    sb:kubectl('label configmap busy colour=blue')
    local cm = sb:get('configmap busy')
    assert.same({ 'blue', 'yes' }, { cm.metadata.labels.colour, cm.metadata.annotations.touched })
    -- The label's update was admitted twice: once before the webhook's own change, once after.
    local labelled = 0
    for _, call in ipairs(w:requests('/touch')) do
      local r = call.body.request
      if r.options.fieldManager == 'kubectl-label' then labelled = labelled + 1 end
    end
    assert.equals(2, labelled)
  end)

  it('calls mutating webhooks after the built-in admission plugins and before the create strategy', function()
    sb:apply(configuration('Mutating', 'pods', { { name = 'allow.example.com', clientConfig = w:client('/allow'),
      rules = { rule({ 'pods' }) } } }))
    sb:kubectl('run web --image=nginx')
    local calls = w:requests('/allow')
    local pod = calls[#calls].body.request.object
    assert.equals(0, pod.spec.priority)
    assert.equals(2, #pod.spec.tolerations)
    assert.is_nil(pod.metadata.uid)
    assert.is_nil((pod.status or {}).phase)
    assert.equals('Pending', sb:get('pod web').status.phase)
  end)

  it('passes the webhooks warnings to the client', function()
    sb:apply(configuration('Validating', 'checks', { { name = 'warn.example.com', clientConfig = w:client('/warn'),
      rules = { rule({ 'configmaps' }) } } }))
    local _, ok, err = sb:try_kubectl('create -f -', configmap('warned'))
    assert.is_true(ok)
    assert.equals('Warning: careful\n', err)
  end)

  it('fails closed or open on a webhook that errors, as failurePolicy says', function()
    sb:apply(configuration('Validating', 'checks', {
      { name = 'error.example.com', clientConfig = w:client('/error'), rules = { rule({ 'configmaps' }) } },
      { name = 'ignored.example.com', clientConfig = w:client('/error'), rules = { rule({ 'secrets' }) },
        failurePolicy = 'Ignore' } }))
    local _, ok, err = sb:try_kubectl('create -f -', configmap('closed'))
    assert.is_false(ok)
    assert.equals('Error from server (InternalError): error when creating "STDIN": Internal error occurred: failed '
      .. 'calling webhook "error.example.com": failed to call webhook: an error on the server ("boom") has prevented '
      .. 'the request from succeeding\n', err)
    sb:kubectl('create secret generic open')
    assert.is_table(sb:get('secret open'))
  end)

  it('gives up on a webhook after its timeoutSeconds, failing closed or open', function()
    sb:apply(configuration('Validating', 'checks', {
      { name = 'hang.example.com', clientConfig = w:client('/hang'), rules = { rule({ 'configmaps' }) },
        timeoutSeconds = 1 },
      { name = 'ignored.example.com', clientConfig = w:client('/hang'), rules = { rule({ 'secrets' }) },
        timeoutSeconds = 1, failurePolicy = 'Ignore' } }))
    local _, ok, err = sb:try_kubectl('create -f -', configmap('late'))
    assert.is_false(ok)
    assert.equals('Error from server (InternalError): error when creating "STDIN": Internal error occurred: failed '
      .. 'calling webhook "hang.example.com": failed to call webhook: Post "' .. w.url .. '/hang?timeout=1s": '
      .. 'context deadline exceeded\n', err)
    sb:kubectl('create secret generic open')
    assert.is_table(sb:get('secret open'))
  end)

  it('refuses a server whose certificate the caBundle did not sign', function()
    local client = w:client('/allow')
    client.caBundle = nil -- then the system's roots, which do not know the spec's CA
    sb:apply(configuration('Validating', 'checks', { { name = 'allow.example.com', clientConfig = client,
      rules = { rule({ 'configmaps' }) } } }))
    local _, ok, err = sb:try_kubectl('create -f -', configmap('untrusted'))
    assert.is_false(ok)
    assert.matches('failed calling webhook "allow.example.com": failed to call webhook: Post "' .. w.url
      .. '/allow?timeout=10s": tls: failed to verify certificate: x509: certificate signed by unknown authority',
      err, 1, true)
  end)

  it('tells webhooks about dry runs and stores nothing', function()
    sb:apply(configuration('Validating', 'checks', { { name = 'allow.example.com', clientConfig = w:client('/allow'),
      rules = { rule({ 'configmaps' }) }, sideEffects = 'NoneOnDryRun' } }))
    sb:kubectl('create -f - --dry-run=server', configmap('dry'))
    local calls = w:requests('/allow')
    local r = calls[#calls].body.request
    assert.same({ 'dry', true, { 'All' } }, { r.name, r.dryRun, r.options.dryRun })
    assert.is_nil(sb:get('configmap dry'))
  end)

  it('calls only the webhooks whose rules, namespaceSelector and objectSelector match', function()
    sb:kubectl('create namespace team-a')
    sb:kubectl('label namespace team-a team=a')
    sb:kubectl('create namespace team-b')
    sb:apply(configuration('Validating', 'checks', {
      { name = 'ns.example.com', clientConfig = w:client('/deny'), rules = { rule({ 'configmaps' }) },
        namespaceSelector = { matchLabels = { team = 'a' } } },
      { name = 'obj.example.com', clientConfig = w:client('/deny'), rules = { rule({ 'secrets' }) },
        objectSelector = { matchExpressions = { { key = 'checked', operator = 'Exists' } } } },
      { name = 'delete.example.com', clientConfig = w:client('/deny'), rules = { rule({ 'services' }, { 'DELETE' }) } },
      { name = 'unlabelled.example.com', clientConfig = w:client('/deny'), rules = { rule({ 'serviceaccounts' }) },
        objectSelector = { matchExpressions = { { key = 'exempt', operator = 'DoesNotExist' } } } },
      { name = 'status.example.com', clientConfig = w:client('/deny'),
        rules = { rule({ 'services/status' }, { 'UPDATE' }) } } }))
    local _, ok, err = sb:try_kubectl('create -f -', configmap('x', nil, 'team-a'))
    assert.is_false(ok)
    assert.matches('"ns.example.com" denied', err, 1, true)
    sb:kubectl('create -f -', configmap('x', nil, 'team-b'))
    sb:kubectl('create secret generic plain')
    _, ok, err = sb:try_kubectl('create -f -', cjson.encode { apiVersion = 'v1', kind = 'Secret',
      metadata = { name = 'checked', labels = { checked = 'yes' } } })
    assert.is_false(ok)
    assert.matches('"obj.example.com" denied', err, 1, true)
    -- An object without labels has the empty set of them.
    _, ok, err = sb:try_kubectl('create serviceaccount robot')
    assert.is_false(ok)
    assert.matches('"unlabelled.example.com" denied', err, 1, true)
    sb:kubectl('create service clusterip web --tcp=80')
    local status = sb:json('PATCH', '/api/v1/namespaces/default/services/web', { metadata = { labels = { a = 'b' } } },
      { ['Content-Type'] = 'application/merge-patch+json' })
    assert.equals(200, status)
    local body
    status, body = sb:json('PATCH', '/api/v1/namespaces/default/services/web/status', { status = {} },
      { ['Content-Type'] = 'application/merge-patch+json' })
    assert.equals(403, status)
    assert.matches('"status.example.com" denied', body.message, 1, true)
    _, ok, err = sb:try_kubectl('delete service web')
    assert.is_false(ok)
    assert.matches('"delete.example.com" denied', err, 1, true)

    -- The scale subresource is admitted as an autoscaling/v1 Scale.
    sb:apply(configuration('Validating', 'scale', { { name = 'scale.example.com', clientConfig = w:client('/deny'),
      rules = { { apiGroups = { 'apps' }, apiVersions = { 'v1' }, resources = { 'deployments/scale' },
        operations = { 'UPDATE' } } } } }))
    sb:kubectl('create deployment web --image=nginx')
    _, ok, err = sb:try_kubectl('scale deployment web --replicas=3')
    assert.is_false(ok)
    assert.matches('"scale.example.com" denied', err, 1, true)
    local r = w:requests('/deny')[#w:requests('/deny')].body.request
    assert.same({ { group = 'autoscaling', version = 'v1', kind = 'Scale' }, 'scale', 3, 1 },
      { r.kind, r.subResource, r.object.spec.replicas, r.oldObject.spec.replicas })
    assert.equals('apps', r.resource.group)

    -- A namespace created is matched by its own labels.
    sb:apply(configuration('Validating', 'namespaces', { { name = 'teams.example.com', clientConfig = w:client('/deny'),
      rules = { rule({ 'namespaces' }, { 'CREATE' }) }, namespaceSelector = { matchLabels = { team = 'c' } } } }))
    sb:kubectl('create namespace team-d')
    _, ok, err = sb:try_kubectl('create -f -', cjson.encode { apiVersion = 'v1', kind = 'Namespace',
      metadata = { name = 'team-c', labels = { team = 'c' } } })
    assert.is_false(ok)
    assert.matches('"teams.example.com" denied', err, 1, true)
    local calls = w:requests('/deny')
    assert.is_nil(calls[#calls].body.request.namespace)
  end)
end)

local PAINTS = '/apis/example.com/%s/namespaces/default/paints'

local function paints_crd(client)
  local function version(name, field, storage)
    return { name = name, served = true, storage = storage, schema = { openAPIV3Schema = { type = 'object',
      properties = { spec = { type = 'object', properties = { [field] = { type = 'string' } } } } } } }
  end
  return cjson.encode { apiVersion = 'apiextensions.k8s.io/v1', kind = 'CustomResourceDefinition',
    metadata = { name = 'paints.example.com' },
    spec = { group = 'example.com', scope = 'Namespaced',
      names = { plural = 'paints', singular = 'paint', kind = 'Paint' },
      conversion = { strategy = 'Webhook', webhook = { clientConfig = client, conversionReviewVersions = { 'v1' } } },
      versions = { version('v1', 'colour', true), version('v2', 'color', false) } } }
end

describe('sandbox conversion webhooks', function()
  local sb = testing.with_sandbox { each = true, args = { '--watch-cache-fill', '0' } }
  local w

  setup(function() w = webhook.start() end)
  teardown(function() w:stop() end)

  it('stores custom resources at the storage version and converts them on every read and write', function()
    sb:apply(paints_crd(w:client('/convert')))
    local before = #w:requests('/convert')
    local status, created = sb:json('POST', PAINTS:format('v2'), { apiVersion = 'example.com/v2', kind = 'Paint',
      metadata = { name = 'red' }, spec = { color = 'red' } })
    assert.equals(201, status)
    assert.same({ 'example.com/v2', 'red' }, { created.apiVersion, created.spec.color })
    local calls = w:requests('/convert')
    local r = calls[before + 1].body.request
    assert.same({ 'example.com/v1', 'example.com/v2', 'red' },
      { r.desiredAPIVersion, r.objects[1].apiVersion, r.objects[1].spec.color })

    assert.same({ colour = 'red' }, sb:get('paints.v1.example.com red').spec)
    assert.same({ color = 'red' }, sb:get('paints.v2.example.com red').spec)

    local w2 = sb:watch(PAINTS:format('v2') .. '?watch=1&resourceVersion=' .. created.metadata.resourceVersion)
    sb:kubectl([[patch paints.v2.example.com red --type merge -p '{"spec":{"color":"blue"}}']])
    assert.same({ colour = 'blue' }, sb:get('paints.v1.example.com red').spec)
    local events = w2.wait_for(function(ev) return #ev >= 1 and ev end)
    w2.stop()
    assert.same({ 'MODIFIED', 'example.com/v2', 'blue' },
      { events[1].type, events[1].object.apiVersion, events[1].object.spec.color })

    sb:json('POST', PAINTS:format('v1'), { metadata = { name = 'green' }, spec = { colour = 'green' } })
    before = #w:requests('/convert')
    local _, list = sb:json('GET', PAINTS:format('v2'))
    assert.same({ 'green', 'blue' }, { list.items[1].spec.color, list.items[2].spec.color })
    calls = w:requests('/convert')
    assert.equals(before + 1, #calls)
    assert.equals(2, #calls[#calls].body.request.objects)
  end)

  it('fails a read, a write or a watch the conversion webhook refuses, with apiextensions-apiserver message', function()
    sb:apply(paints_crd(w:client('/convert')))
    local _, red = sb:json('POST', PAINTS:format('v1'), { metadata = { name = 'red' }, spec = { colour = 'red' } })
    local crd = sb:kubectl_json('get crd paints.example.com')
    crd.spec.conversion.webhook.clientConfig = w:client('/convert-fail')
    sb:kubectl('replace -f -', cjson.encode(crd))
    local _, ok, err = sb:try_kubectl('get paints.v2.example.com red')
    assert.is_false(ok)
    assert.equals('Error from server: conversion webhook for example.com/v1, Kind=Paint failed: cannot convert\n', err)
    assert.same({ colour = 'red' }, sb:get('paints.v1.example.com red').spec)

    local status, body = sb:json('POST', PAINTS:format('v2'), { metadata = { name = 'blue' }, spec = { color = 'blue' } })
    assert.same({ 500, 'conversion webhook for example.com/v2, Kind=Paint failed: cannot convert' },
      { status, body.message })
    assert.is_nil(body.reason)

    local watch = sb:watch(PAINTS:format('v2') .. '?watch=1&resourceVersion=' .. red.metadata.resourceVersion)
    sb:kubectl([[label paints.v1.example.com red shade=dark]])
    assert.is_number(watch.finished(10))
    local events = watch.events()
    assert.same({ 'ERROR', 500, 'conversion webhook for example.com/v1, Kind=Paint failed: cannot convert' },
      { events[1].type, events[1].object.code, events[1].object.message })

    -- Converted objects keep their identity.
    crd = sb:kubectl_json('get crd paints.example.com')
    crd.spec.conversion.webhook.clientConfig = w:client('/convert-rename')
    sb:kubectl('replace -f -', cjson.encode(crd))
    _, ok, err = sb:try_kubectl('get paints.v2.example.com red')
    assert.is_false(ok)
    assert.equals('Error from server: conversion webhook for example.com/v1, Kind=Paint returned invalid object: '
      .. 'must have the same name: red != renamed\n', err)
  end)

  it('refuses a Webhook conversion strategy without the webhook or its v1 review version', function()
    local crd = cjson.decode(paints_crd(w:client('/convert')))
    crd.spec.conversion.webhook.conversionReviewVersions = { 'v1beta1' }
    local _, ok, err = sb:try_kubectl('create -f -', cjson.encode(crd))
    assert.is_false(ok)
    assert.matches('spec.conversion.webhook.conversionReviewVersions: Invalid value', err, 1, true)
    crd.spec.conversion.webhook = nil
    _, ok, err = sb:try_kubectl('create -f -', cjson.encode(crd))
    assert.is_false(ok)
    assert.matches('spec.conversion.webhook: Required value', err, 1, true)
  end)
end)
