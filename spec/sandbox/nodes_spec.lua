-- The sandbox's simulated nodes (--nodes N): Node objects, a scheduler and kubelets that
-- move Pods through the states a cluster shows (PodScheduled, then Running with
-- containerStatuses and the Ready conditions), graceful Pod deletion
-- (pkg/registry/core/pod/strategy.go CheckGracefulDelete) and a control endpoint that
-- makes a Pod's containers exit.
local testing = require('klua.testing')

local PODS = '/api/v1/namespaces/default/pods'

describe('sandbox simulated nodes', function()
  local sb = testing.with_sandbox { args = { '--nodes', '2' } }


  local function create(name, restart_policy)
    local status = sb:json('POST', PODS, { metadata = { name = name },
      spec = { restartPolicy = restart_policy, containers = { { name = 'web', image = 'nginx:1.27' } } } })
    assert.equals(201, status)
  end

  local function running(name)
    return testing.poll(function()
      local _, pod = sb:json('GET', PODS .. '/' .. name)
      return pod.status.phase == 'Running' and pod
    end, 10)
  end

  local function condition(pod, kind)
    for _, c in ipairs(pod.status.conditions or {}) do
      if c.type == kind then return c.status end
    end
  end

  it('serves Ready v1 Nodes', function()
    local _, nodes = sb:json('GET', '/api/v1/nodes')
    assert.equals('NodeList', nodes.kind)
    assert.equals(2, #nodes.items)
    local node = nodes.items[1]
    assert.equals('sandbox-node-1', node.metadata.name)
    assert.equals('True', condition(node, 'Ready'))
    assert.equals('sandbox-node-1', node.metadata.labels['kubernetes.io/hostname'])
  end)

  it('schedules a Pod and runs it: Pending, then Running with container statuses and Ready conditions', function()
    local w = sb:watch(PODS .. '?watch=1&fieldSelector=metadata.name%3Dweb')
    create('web')
    local pod = running('web')
    assert.truthy(pod, 'the pod runs')
    assert.matches('^sandbox%-node%-%d$', pod.spec.nodeName)
    for _, kind in ipairs({ 'PodScheduled', 'Initialized', 'ContainersReady', 'Ready' }) do
      assert.equals('True', condition(pod, kind), kind)
    end
    local cs = pod.status.containerStatuses[1]
    assert.same({ 'web', true, true, 0, 'docker.io/library/nginx:1.27' },
      { cs.name, cs.ready, cs.started, cs.restartCount, cs.image })
    assert.truthy(cs.state.running.startedAt)
    assert.matches('^containerd://%x+$', cs.containerID)
    assert.matches('^docker.io/library/nginx@sha256:%x+$', cs.imageID)
    assert.truthy(pod.status.podIP and pod.status.hostIP and pod.status.startTime)
    -- The kubelet's status writes are its managedFields entry, as on a cluster.
    local kubelet
    for _, e in ipairs(pod.metadata.managedFields) do
      if e.manager == 'kubelet' then kubelet = e end
    end
    assert.same({ 'Update', 'status', 'v1' }, { kubelet.operation, kubelet.subresource, kubelet.apiVersion })
    assert.truthy(kubelet.fieldsV1['f:status']['f:podIP'])
    assert.truthy(w.wait_for(function(events) return #events >= 3 end))
    w.stop()
    local events = w.events()
    assert.same({ 'ADDED', 'Pending', false }, { events[1].type, events[1].object.status.phase,
      events[1].object.spec.nodeName ~= nil })
    assert.same({ 'MODIFIED', 'Pending', 'True' }, { events[2].type, events[2].object.status.phase,
      condition(events[2].object, 'PodScheduled') })
    assert.same({ 'MODIFIED', 'Running' }, { events[3].type, events[3].object.status.phase })
  end)

  it('fails a Pod on request: Failed with the exit code under restartPolicy Never', function()
    create('doomed', 'Never')
    assert.truthy(running('doomed'))
    local status, pod = sb:json('POST', '/sandbox/v1/pods/fail', { name = 'doomed', exitCode = 3 })
    assert.equals(200, status)
    assert.equals('Failed', pod.status.phase)
    assert.same({ exitCode = 3, reason = 'Error' }, { exitCode = pod.status.containerStatuses[1].state.terminated.exitCode,
      reason = pod.status.containerStatuses[1].state.terminated.reason })
    assert.equals('False', condition(pod, 'Ready'))
  end)

  it('restarts the containers of a failed Pod under restartPolicy Always', function()
    create('crashy')
    assert.truthy(running('crashy'))
    local _, pod = sb:json('POST', '/sandbox/v1/pods/fail', { name = 'crashy', exitCode = 1 })
    local cs = pod.status.containerStatuses[1]
    assert.equals('Running', pod.status.phase)
    assert.same({ 1, 1, 'CrashLoopBackOff' }, { cs.restartCount, cs.lastState.terminated.exitCode, cs.state.waiting.reason })
  end)

  it('deletes a running Pod gracefully: kept with deletionTimestamp until its kubelet stops it', function()
    create('graceful')
    assert.truthy(running('graceful'))
    local status, pod = sb:json('DELETE', PODS .. '/graceful')
    assert.equals(200, status)
    assert.equals(30, pod.metadata.deletionGracePeriodSeconds)
    assert.truthy(pod.metadata.deletionTimestamp)
    assert.truthy(testing.poll(function() return sb:json('GET', PODS .. '/graceful') == 404 end, 10))
  end)
end)
