-- What the sandbox refuses, drops and fills in, as kube-apiserver 1.32 does:
-- pkg/apis/core/validation (ValidateConfigMap, ValidateSecret, ValidatePodSpec,
-- ValidatePodUpdate), pkg/apis/core/v1/defaults.go, the pod strategy's PrepareForCreate,
-- the Priority and DefaultTolerationSeconds admission plugins, fieldValidation
-- (staging/src/k8s.io/apiserver/pkg/endpoints/handlers) and CRD structural schemas
-- (staging/src/k8s.io/apiextensions-apiserver: schema/pruning and validation).
local testing = require('klua.testing')
local sandbox = require('support.sandbox')

local PODS = '/api/v1/namespaces/default/pods'
local CM = '/api/v1/namespaces/default/configmaps'

local function pod(name, containers)
  return { metadata = { name = name }, spec = { containers = containers } }
end

describe('sandbox validation and defaults', function()
  local sb = testing.with_sandbox()


  describe('validation', function()
    it('refuses a Pod without containers with the message and cause kube-apiserver gives', function()
      local status, body = sb:json('POST', PODS, { metadata = { name = 'empty' }, spec = {} })
      assert.equals(422, status)
      assert.equals('Pod "empty" is invalid: spec.containers: Required value', body.message)
      assert.same({ { reason = 'FieldValueRequired', message = 'Required value', field = 'spec.containers' } },
        body.details.causes)
    end)

    it('requires a container name that is a DNS label, unique, and an image', function()
      local status, body = sb:json('POST', PODS, pod('bad', {
        { name = 'Web', image = 'nginx' }, { name = 'db' }, { name = 'db', image = 'pg' } }))
      assert.equals(422, status)
      local fields = {}
      for _, c in ipairs(body.details.causes) do fields[#fields + 1] = c.field .. ' ' .. c.reason end
      assert.same({ 'spec.containers[0].name FieldValueInvalid', 'spec.containers[1].image FieldValueRequired',
        'spec.containers[2].name FieldValueDuplicate' }, fields)
    end)

    it('refuses ConfigMap keys IsConfigMapKey refuses, and data over 1 MiB', function()
      local status, body = sb:json('POST', CM, { metadata = { name = 'keys' }, data = { ['a b'] = 'x' } })
      assert.equals(422, status)
      assert.equals('data[a b]', body.details.causes[1].field)
      assert.matches("a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
        body.message, 1, true)
      status, body = sb:json('POST', CM, { metadata = { name = 'dots' }, data = { ['..'] = 'x' } })
      assert.equals(422, status)
      assert.equals([[ConfigMap "dots" is invalid: data[..]: Invalid value: "..": must not be '..']], body.message)
      status, body = sb:json('POST', CM, { metadata = { name = 'big' }, data = { a = string.rep('x', 1024 * 1024 + 1) } })
      assert.equals(422, status)
      assert.equals('FieldValueTooLong', body.details.causes[1].reason)
    end)

    it('lets a Pod update change images but not the rest of the spec', function()
      local _, p = sb:json('POST', PODS, pod('frozen', { { name = 'web', image = 'nginx:1' } }))
      p.spec.containers[1].image = 'nginx:2'
      local status, updated = sb:json('PUT', PODS .. '/frozen', p)
      assert.equals(200, status)
      assert.equals('nginx:2', updated.spec.containers[1].image)
      updated.spec.restartPolicy = 'Never'
      local body
      status, body = sb:json('PUT', PODS .. '/frozen', updated)
      assert.equals(422, status)
      assert.equals('spec', body.details.causes[1].field)
      assert.equals('FieldValueForbidden', body.details.causes[1].reason)
      assert.truthy(body.message:find('Pod "frozen" is invalid: spec: Forbidden: pod updates may not change '
        .. 'fields other than `spec.containers[*].image`', 1, true))
    end)
  end)

  describe('fieldValidation', function()
    local body = { metadata = { name = 'fv' }, data = { a = '1' }, spec = { foo = 1 } }

    it('Strict refuses an unknown field with 400 and the strict decoding error', function()
      local status, answer = sb:json('POST', CM .. '?fieldValidation=Strict', body)
      sandbox.failed(status, answer, 400, 'BadRequest',
        'ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: '
        .. 'unknown field "spec"')
    end)

    it('Warn (the default) answers with a Warning header and drops the field', function()
      local status, text, headers = sb:request('POST', CM, body)
      assert.equals(201, status)
      assert.equals([[299 - "unknown field \"spec\""]], headers['warning'])
      assert.is_nil(text:find('"spec"', 1, true))
    end)

    it('Ignore drops the field silently', function()
      local status, text, headers = sb:request('POST', CM .. '?fieldValidation=Ignore',
        { metadata = { name = 'fv-ignore' }, spec = { foo = 1 } })
      assert.equals(201, status)
      assert.is_nil(headers['warning'])
      assert.is_nil(text:find('"spec"', 1, true))
    end)
  end)

  describe('defaults', function()
    it('fills the Pod defaults, admission defaults and status a real server sets', function()
      local _, p = sb:json('POST', PODS, pod('defaults', {
        { name = 'web', image = 'nginx' }, { name = 'side', image = 'envoy:1.30', resources = { requests = { cpu = '100m' } } } }))
      local spec, c = p.spec, p.spec.containers[1]
      assert.same({ 'ClusterFirst', 'Always', 'default-scheduler', 30, true, 'PreemptLowerPriority', 0 },
        { spec.dnsPolicy, spec.restartPolicy, spec.schedulerName, spec.terminationGracePeriodSeconds,
          spec.enableServiceLinks, spec.preemptionPolicy, spec.priority })
      assert.same({}, spec.securityContext)
      assert.same({ '/dev/termination-log', 'File', 'Always' },
        { c.terminationMessagePath, c.terminationMessagePolicy, c.imagePullPolicy })
      assert.equals('IfNotPresent', spec.containers[2].imagePullPolicy)
      assert.same({}, c.resources)
      assert.same({
        { key = 'node.kubernetes.io/not-ready', operator = 'Exists', effect = 'NoExecute', tolerationSeconds = 300 },
        { key = 'node.kubernetes.io/unreachable', operator = 'Exists', effect = 'NoExecute', tolerationSeconds = 300 },
      }, spec.tolerations)
      assert.same({ phase = 'Pending', qosClass = 'Burstable' }, p.status)
      assert.is_nil(p.metadata.generation, 'Pods have no generation before 1.33')
    end)

    it('computes the QoS class: Guaranteed when limits (copied to requests) cover cpu and memory', function()
      local _, p = sb:json('POST', PODS, pod('guaranteed', {
        { name = 'web', image = 'nginx', resources = { limits = { cpu = '500m', memory = '64Mi' } } } }))
      assert.equals('Guaranteed', p.status.qosClass)
      assert.same({ cpu = '500m', memory = '64Mi' }, p.spec.containers[1].resources.requests)
      _, p = sb:json('POST', PODS, pod('besteffort', { { name = 'web', image = 'nginx' } }))
      assert.equals('BestEffort', p.status.qosClass)
    end)
  end)

  describe('custom resources against their schema', function()
    setup(function()
      local status = sb:json('POST', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions', {
        metadata = { name = 'widgets.example.com' },
        spec = { group = 'example.com', scope = 'Namespaced',
          names = { plural = 'widgets', singular = 'widget', kind = 'Widget' },
          versions = { { name = 'v1', served = true, storage = true, schema = { openAPIV3Schema = {
            type = 'object', properties = {
              spec = { type = 'object', required = { 'size' }, properties = {
                size = { type = 'integer', minimum = 1, maximum = 10 },
                mode = { type = 'string', enum = { 'fast', 'safe' } },
                name = { type = 'string', pattern = '^[a-z]+$', maxLength = 8 },
                extra = { type = 'object', ['x-kubernetes-preserve-unknown-fields'] = true },
              } } } } } } } } })
      assert.equals(201, status)
    end)

    local WIDGETS = '/apis/example.com/v1/namespaces/default/widgets'

    it('refuses values the schema refuses, with kube-openapi\'s messages', function()
      local status, body = sb:json('POST', WIDGETS, { apiVersion = 'example.com/v1', kind = 'Widget',
        metadata = { name = 'w1' }, spec = { size = 20, mode = 'slow', name = 'Abc' } })
      assert.equals(422, status)
      local messages = {}
      for _, c in ipairs(body.details.causes) do messages[#messages + 1] = c.field .. ': ' .. c.message end
      assert.same({
        'spec.mode: Unsupported value: "slow": supported values: "fast", "safe"',
        'spec.name: Invalid value: "Abc": spec.name in body should match \'^[a-z]+$\'',
        'spec.size: Invalid value: 20: spec.size in body should be less than or equal to 10',
      }, messages)
      status, body = sb:json('POST', WIDGETS, { apiVersion = 'example.com/v1', kind = 'Widget',
        metadata = { name = 'w2' }, spec = { size = 'big' } })
      assert.equals(422, status)
      assert.equals('Widget.example.com "w2" is invalid: spec.size: Invalid value: "string": '
        .. 'spec.size in body must be of type integer: "string"', body.message)
      status, body = sb:json('POST', WIDGETS, { apiVersion = 'example.com/v1', kind = 'Widget',
        metadata = { name = 'w3' }, spec = {} })
      assert.equals('Widget.example.com "w3" is invalid: spec.size: Required value', body.message)
    end)

    it('prunes unknown fields unless x-kubernetes-preserve-unknown-fields, and Strict refuses them', function()
      local w = { apiVersion = 'example.com/v1', kind = 'Widget', metadata = { name = 'pruned' },
        spec = { size = 2, colour = 'red', extra = { anything = { goes = true } } } }
      local status, body = sb:json('POST', WIDGETS .. '?fieldValidation=Strict', w)
      assert.equals(400, status)
      assert.equals('Widget in version "v1" cannot be handled as a Widget: strict decoding error: '
        .. 'unknown field "spec.colour"', body.message)
      status, body = sb:json('POST', WIDGETS, w)
      assert.equals(201, status)
      assert.is_nil(body.spec.colour)
      assert.same({ anything = { goes = true } }, body.spec.extra)
    end)
  end)
end)
