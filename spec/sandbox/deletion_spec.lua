-- Deletion in the sandbox as kube-apiserver and its garbage collector do it: propagation
-- policies (staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go,
-- deletionFinalizersForGarbageCollection), ownerReferences (pkg/controller/garbagecollector)
-- and the DELETED event of an object whose last finalizer an update removed
-- (store.go Update -> errEmptiedFinalizers -> deleteWithoutFinalizers).
local testing = require('klua.testing')
local sandbox = require('support.sandbox')

local CM = '/api/v1/namespaces/%s/configmaps'

describe('sandbox deletion', function()
  local sb = testing.with_sandbox()
  local namespace = sandbox.namespaces(sb, 'del')

  local function create(ns, name, meta) return sandbox.create_configmap(sb, ns, name, meta) end

  local function owned_by(owner, block)
    return { { apiVersion = 'v1', kind = 'ConfigMap', name = owner.metadata.name,
      uid = owner.metadata.uid, blockOwnerDeletion = block or nil } }
  end

  local function gone(ns, name)
    return testing.poll(function()
      return sb:json('GET', CM:format(ns) .. '/' .. name) == 404
    end, 10)
  end

  it('deletes the dependents of a deleted owner in the background', function()
    local ns = namespace()
    local owner = create(ns, 'owner')
    create(ns, 'dependent', { ownerReferences = owned_by(owner) })
    local status, body = sb:json('DELETE', CM:format(ns) .. '/owner')
    assert.equals(200, status)
    assert.equals('Success', body.status)
    assert.truthy(gone(ns, 'dependent'), 'the garbage collector deletes an object whose owners are gone')
  end)

  it('drops only the reference to a gone owner when another owner remains', function()
    local ns = namespace()
    local a, b = create(ns, 'a'), create(ns, 'b')
    local refs = owned_by(a)
    refs[2] = owned_by(b)[1]
    create(ns, 'shared', { ownerReferences = refs })
    sb:json('DELETE', CM:format(ns) .. '/a')
    local left = testing.poll(function()
      local _, obj = sb:json('GET', CM:format(ns) .. '/shared')
      return obj and obj.metadata and #obj.metadata.ownerReferences == 1 and obj
    end, 10)
    assert.truthy(left)
    assert.equals('b', left.metadata.ownerReferences[1].name)
  end)

  it('keeps a Foreground-deleted owner, with its finalizer, until its blocking dependents are gone', function()
    local ns = namespace()
    local owner = create(ns, 'fg-owner')
    -- The dependent's own finalizer holds it, so the owner must wait for it.
    create(ns, 'fg-dependent', { ownerReferences = owned_by(owner, true), finalizers = { 'example.com/hold' } })
    local status, body = sb:json('DELETE', CM:format(ns) .. '/fg-owner', { propagationPolicy = 'Foreground' })
    assert.equals(200, status)
    assert.equals('ConfigMap', body.kind)
    assert.same({ 'foregroundDeletion' }, body.metadata.finalizers)
    assert.truthy(body.metadata.deletionTimestamp)
    -- The collector deletes the dependent (in the foreground, as its reference blocks the
    -- owner; having no dependents of its own it loses that finalizer at once).
    local held = testing.poll(function()
      local _, dep = sb:json('GET', CM:format(ns) .. '/fg-dependent')
      return dep.metadata.deletionTimestamp and #dep.metadata.finalizers == 1 and dep
    end, 10)
    assert.truthy(held, 'the collector deletes the dependent')
    assert.same({ 'example.com/hold' }, held.metadata.finalizers)
    local _, still = sb:json('GET', CM:format(ns) .. '/fg-owner')
    assert.same({ 'foregroundDeletion' }, still.metadata.finalizers)
    held.metadata.finalizers = nil
    assert.equals(200, (sb:json('PUT', CM:format(ns) .. '/fg-dependent', held)))
    assert.truthy(gone(ns, 'fg-dependent'))
    assert.truthy(gone(ns, 'fg-owner'))
  end)

  it('orphans the dependents of an Orphan-deleted owner, removing their references to it', function()
    local ns = namespace()
    local owner = create(ns, 'or-owner')
    create(ns, 'or-dependent', { ownerReferences = owned_by(owner) })
    local status, body = sb:json('DELETE', CM:format(ns) .. '/or-owner', { propagationPolicy = 'Orphan' })
    assert.equals(200, status)
    assert.same({ 'orphan' }, body.metadata.finalizers)
    assert.truthy(gone(ns, 'or-owner'))
    local _, dep = sb:json('GET', CM:format(ns) .. '/or-dependent')
    assert.equals('or-dependent', dep.metadata.name)
    assert.is_nil(dep.metadata.ownerReferences)
  end)

  it('sends a DELETED event with the last stored state, finalizers included, when an update removes the last one', function()
    local ns = namespace()
    create(ns, 'held', { finalizers = { 'example.com/hold' } })
    local _, marked = sb:json('DELETE', CM:format(ns) .. '/held')
    local w = sb:watch(CM:format(ns) .. '?watch=1&resourceVersion=' .. marked.metadata.resourceVersion)
    marked.metadata.finalizers = nil
    local status, answer = sb:json('PUT', CM:format(ns) .. '/held', marked)
    assert.equals(200, status)
    assert.is_nil(answer.metadata.finalizers, 'the writer gets back the object it sent')
    assert.truthy(w.wait_for(function(events) return #events >= 1 end))
    w.stop()
    local event = w.events()[1]
    assert.equals('DELETED', event.type)
    assert.same({ 'example.com/hold' }, event.object.metadata.finalizers)
    assert.truthy(event.object.metadata.deletionTimestamp)
    assert.is_true(tonumber(event.object.metadata.resourceVersion) > tonumber(marked.metadata.resourceVersion))
  end)
end)
