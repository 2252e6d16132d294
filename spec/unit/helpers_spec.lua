-- klua.helpers: owner references, finalizers, conditions, events and
-- update predicates for controllers. Functions that change an object take a
-- mutable table (what klua.copy(obj) returns); functions that only read also
-- take read-only views. A mistake in the call raises; a problem with an
-- object's data returns nil and an error {reason, message}.
local helpers = require('klua.helpers')
local testing = require('klua_testing')

local T0 = 1700000000 -- 2023-11-14T22:13:20Z
local now

-- The view a handler would get of t: the host's read-only view of t's JSON.
local function view(t) return testing.view(testing.json.encode(t)) end

local array_mt = { __name = 'json array' }

before_each(function()
  now = T0
  helpers.set_clock(function() return now end)
  helpers.set_array_mt(array_mt)
end)

local function deployment()
  return {
    apiVersion = 'apps/v1', kind = 'Deployment',
    metadata = { name = 'web', namespace = 'shop', uid = 'uid-web', generation = 3 },
  }
end

local function replica_set()
  return { metadata = { name = 'web-1', namespace = 'shop', generation = 1 } }
end

describe('owner references', function()
  it('make the owner the controller of an object', function()
    local rs = replica_set()
    assert.is_true(helpers.set_controller_reference(deployment(), rs))
    assert.same({ {
      apiVersion = 'apps/v1', kind = 'Deployment', name = 'web', uid = 'uid-web',
      controller = true, blockOwnerDeletion = true,
    } }, rs.metadata.ownerReferences)
    assert.equals(array_mt, getmetatable(rs.metadata.ownerReferences))
  end)

  it('create the metadata of an object that has none', function()
    local obj = {}
    local owner = deployment()
    owner.metadata.namespace = nil
    assert.is_true(helpers.set_controller_reference(owner, obj))
    assert.equals('uid-web', obj.metadata.ownerReferences[1].uid)
  end)

  it('replace the reference to the same owner instead of adding one, keeping the others', function()
    local rs = replica_set()
    rs.metadata.ownerReferences = setmetatable({
      { apiVersion = 'v1', kind = 'ConfigMap', name = 'cfg', uid = 'uid-cfg' },
      { apiVersion = 'apps/v1beta1', kind = 'Deployment', name = 'web', uid = 'old-uid' },
    }, array_mt)
    assert.is_true(helpers.set_controller_reference(deployment(), rs))
    local refs = rs.metadata.ownerReferences
    assert.equals(2, #refs)
    assert.equals('cfg', refs[1].name)
    assert.same({ 'apps/v1', 'uid-web', true }, { refs[2].apiVersion, refs[2].uid, refs[2].controller })
  end)

  it('refuse an object that already has another controller, leaving it unchanged', function()
    local rs = replica_set()
    local other = deployment()
    other.metadata.name, other.metadata.uid = 'other', 'uid-other'
    assert.is_true(helpers.set_controller_reference(other, rs))
    local ok, err = helpers.set_controller_reference(deployment(), rs)
    assert.is_nil(ok)
    assert.equals('AlreadyOwned', err.reason)
    assert.equals('Object shop/web-1 is already owned by another Deployment controller other', err.message)
    assert.equals(err.message, tostring(err))
    assert.equals(1, #rs.metadata.ownerReferences)
    assert.equals('uid-other', rs.metadata.ownerReferences[1].uid)
  end)

  it('refuse an owner in another namespace', function()
    local rs = replica_set()
    rs.metadata.namespace = 'elsewhere'
    local ok, err = helpers.set_controller_reference(deployment(), rs)
    assert.is_nil(ok)
    assert.equals('CrossNamespaceOwner', err.reason)
    assert.matches("owner's namespace shop, object's namespace elsewhere", err.message, 1, true)
    assert.is_nil(rs.metadata.ownerReferences)
  end)

  it('refuse a namespaced owner for a cluster-scoped object, and say how to fix a missing namespace', function()
    local ok, err = helpers.set_controller_reference(deployment(), { metadata = { name = 'pv' } })
    assert.is_nil(ok)
    assert.equals('ClusterScopedWithNamespacedOwner', err.reason)
    assert.matches('set obj.metadata.namespace first', err.message, 1, true)
  end)

  it('let a cluster-scoped owner control a namespaced object', function()
    local ns_owner = { apiVersion = 'v1', kind = 'Namespace', metadata = { name = 'shop', uid = 'uid-ns' } }
    assert.is_true(helpers.set_controller_reference(ns_owner, replica_set()))
  end)

  it('take apiVersion and kind from opts when the owner came from a list, and return an error without', function()
    local owner = deployment()
    owner.apiVersion, owner.kind = nil, nil
    local rs = replica_set()
    local ok, err = helpers.set_controller_reference(owner, rs)
    assert.is_nil(ok)
    assert.equals('MissingKind', err.reason)
    assert.equals("set_controller_reference: the owner has no apiVersion/kind (objects from a list lack them);"
      .. " pass them: set_controller_reference(owner, obj, {api_version = 'apps/v1', kind = 'Deployment'})",
      tostring(err))
    assert.is_nil(rs.metadata.ownerReferences)
    assert.is_true(helpers.set_controller_reference(owner, rs, { api_version = 'apps/v1', kind = 'Deployment' }))
    assert.equals('Deployment', rs.metadata.ownerReferences[1].kind)
  end)

  it('read the owner from a view and require its uid', function()
    local rs = replica_set()
    assert.is_true(helpers.set_controller_reference(view(deployment()), rs))
    assert.equals('uid-web', rs.metadata.ownerReferences[1].uid)
    local no_uid = deployment()
    no_uid.metadata.uid = nil
    local ok, err = helpers.set_controller_reference(view(no_uid), replica_set())
    assert.is_nil(ok)
    assert.equals('MissingUID', err.reason)
    assert.equals('set_controller_reference: the owner needs metadata.name and metadata.uid;'
      .. ' use the owner as read from the API or the cache', err.message)
    ok, err = helpers.set_controller_reference(nil, replica_set())
    assert.is_nil(ok)
    assert.equals('MissingKind', err.reason)
  end)

  it('refuse to write into something that is not a mutable table, or with opts that are not a table', function()
    assert.has_error(function() helpers.set_controller_reference(deployment(), 'web-1') end,
      'set_controller_reference: obj must be a mutable table or klua.edit(obj) (views are read-only: use klua.edit(obj) or klua.copy(obj))')
    assert.has_error(function() helpers.set_controller_reference(deployment(), view(replica_set())) end,
      'set_controller_reference: obj must be a mutable table or klua.edit(obj) (views are read-only: use klua.edit(obj) or klua.copy(obj))')
    assert.has_error(function() helpers.set_controller_reference(deployment(), replica_set(), 'apps/v1') end,
      "set_controller_reference: opts must be a table such as {api_version = 'apps/v1', kind = 'Deployment'}")
  end)

  it('refuse to replace a view held inside a table, which would drop its members', function()
    local rs = { metadata = view(replica_set()).metadata }
    assert.has_error(function() helpers.set_controller_reference(deployment(), rs) end,
      'set_controller_reference: obj.metadata is a read-only view: pass klua.edit(obj), or klua.copy(obj), a mutable table throughout')
    assert.equals('web-1', rs.metadata.name)
  end)

  it('find the controller reference of an object, also through a view', function()
    local rs = replica_set()
    rs.metadata.ownerReferences = {
      { kind = 'ConfigMap', name = 'cfg', uid = 'uid-cfg' },
      { kind = 'Deployment', name = 'web', uid = 'uid-web', controller = true },
    }
    assert.equals('uid-web', helpers.get_controller_of(rs).uid)
    assert.equals('uid-web', helpers.get_controller_of(view(rs)).uid)
  end)

  it('find no controller when there are no references or none is a controller', function()
    assert.is_nil(helpers.get_controller_of({}))
    assert.is_nil(helpers.get_controller_of({ metadata = {} }))
    assert.is_nil(helpers.get_controller_of({ metadata = { ownerReferences = {} } }))
    assert.is_nil(helpers.get_controller_of(view { metadata = { ownerReferences = {
      { kind = 'ConfigMap', name = 'cfg', uid = 'u', controller = false } } } }))
  end)

  it('tell whether an object is controlled by an owner, by uid', function()
    local rs = replica_set()
    helpers.set_controller_reference(deployment(), rs)
    assert.is_true(helpers.is_controlled_by(view(rs), view(deployment())))
    local recreated = deployment()
    recreated.metadata.uid = 'uid-new'
    assert.is_false(helpers.is_controlled_by(rs, recreated))
    assert.is_false(helpers.is_controlled_by(replica_set(), deployment()))
  end)
end)

describe('finalizers', function()
  it('are found by name, also through a view', function()
    local obj = { metadata = { finalizers = { 'a.example.com/x', 'b.example.com/y' } } }
    assert.is_true(helpers.has_finalizer(obj, 'b.example.com/y'))
    assert.is_true(helpers.has_finalizer(view(obj), 'a.example.com/x'))
    assert.is_false(helpers.has_finalizer(obj, 'c.example.com/z'))
  end)

  it('are absent from objects without metadata or finalizers', function()
    assert.is_false(helpers.has_finalizer({}, 'x/y'))
    assert.is_false(helpers.has_finalizer({ metadata = {} }, 'x/y'))
    assert.is_false(helpers.has_finalizer({ metadata = { finalizers = {} } }, 'x/y'))
  end)

  it('are added once, in a list marked as an array', function()
    local obj = {}
    assert.is_true(helpers.add_finalizer(obj, 'example.com/cleanup'))
    assert.is_false(helpers.add_finalizer(obj, 'example.com/cleanup'))
    assert.same({ 'example.com/cleanup' }, obj.metadata.finalizers)
    assert.equals(array_mt, getmetatable(obj.metadata.finalizers))
  end)

  it('are added after the ones present', function()
    local obj = { metadata = { finalizers = { 'first/one' } } }
    assert.is_true(helpers.add_finalizer(obj, 'second/one'))
    assert.same({ 'first/one', 'second/one' }, obj.metadata.finalizers)
  end)

  it('are removed, every occurrence, keeping the order of the rest', function()
    local obj = { metadata = { finalizers = { 'a/x', 'mine/f', 'b/y', 'mine/f' } } }
    assert.is_true(helpers.remove_finalizer(obj, 'mine/f'))
    assert.same({ 'a/x', 'b/y' }, obj.metadata.finalizers)
    assert.is_false(helpers.remove_finalizer(obj, 'mine/f'))
  end)

  it('leave an empty list when the last one is removed', function()
    local obj = { metadata = { finalizers = setmetatable({ 'mine/f' }, array_mt) } }
    assert.is_true(helpers.remove_finalizer(obj, 'mine/f'))
    assert.same({}, obj.metadata.finalizers)
    assert.equals(array_mt, getmetatable(obj.metadata.finalizers))
  end)

  it('are not removed from objects that have none', function()
    assert.is_false(helpers.remove_finalizer({}, 'mine/f'))
    assert.is_false(helpers.remove_finalizer({ metadata = {} }, 'mine/f'))
  end)

  it('refuse a view to change, also one held inside a table, leaving it as it was', function()
    local v = view { metadata = { name = 'web', finalizers = { 'mine/f' } } }
    assert.has_error(function() helpers.add_finalizer(v, 'x/y') end,
      'add_finalizer: obj must be a mutable table or klua.edit(obj) (views are read-only: use klua.edit(obj) or klua.copy(obj))')
    local obj = { metadata = v.metadata }
    assert.has_error(function() helpers.add_finalizer(obj, 'x/y') end,
      'add_finalizer: obj.metadata is a read-only view: pass klua.edit(obj), or klua.copy(obj), a mutable table throughout')
    obj = { metadata = { finalizers = v.metadata.finalizers } }
    assert.has_error(function() helpers.remove_finalizer(obj, 'mine/f') end,
      'remove_finalizer: obj.metadata.finalizers is a read-only view: pass klua.edit(obj), or klua.copy(obj), a mutable table throughout')
    assert.equals('mine/f', obj.metadata.finalizers[1])
    assert.is_true(helpers.remove_finalizer(testing.copy(v), 'mine/f'))
  end)

  it('need a name', function()
    assert.has_error(function() helpers.add_finalizer({}, '') end,
      "add_finalizer: the finalizer name must be a non-empty string such as 'example.com/cleanup'")
    assert.has_error(function() helpers.has_finalizer({}, nil) end,
      "has_finalizer: the finalizer name must be a non-empty string such as 'example.com/cleanup'")
  end)
end)

describe('conditions', function()
  local function ready(status, reason, message)
    return { type = 'Ready', status = status, reason = reason or 'Reconciled', message = message }
  end

  it('are added with the transition time, the generation and an empty message', function()
    local obj = deployment()
    assert.is_true(helpers.set_condition(obj, ready('True')))
    assert.same({ {
      type = 'Ready', status = 'True', reason = 'Reconciled', message = '',
      observedGeneration = 3, lastTransitionTime = '2023-11-14T22:13:20Z',
    } }, obj.status.conditions)
    assert.equals(array_mt, getmetatable(obj.status.conditions))
  end)

  -- Sets first on a Deployment, then second a minute later; returns whether the
  -- second changed the object, and its Ready condition.
  local function set_a_minute_apart(first, second)
    local obj = deployment()
    helpers.set_condition(obj, first)
    now = T0 + 60
    local changed = helpers.set_condition(obj, second)
    return changed, helpers.get_condition(obj, 'Ready')
  end

  it('keep the transition time while the status stays the same', function()
    local changed, c = set_a_minute_apart(ready('False', 'Progressing', 'rolling out'),
      ready('False', 'Waiting', 'waiting for pods'))
    assert.is_true(changed)
    assert.equals('2023-11-14T22:13:20Z', c.lastTransitionTime)
    assert.same({ 'False', 'Waiting', 'waiting for pods' }, { c.status, c.reason, c.message })
  end)

  it('move the transition time when the status changes', function()
    local changed, c = set_a_minute_apart(ready('False', 'Progressing'), ready('True'))
    assert.is_true(changed)
    assert.equals('2023-11-14T22:14:20Z', c.lastTransitionTime)
  end)

  it('report no change when the same condition is set again', function()
    local changed, c = set_a_minute_apart(ready('True', 'Reconciled', 'ok'), ready('True', 'Reconciled', 'ok'))
    assert.is_false(changed)
    assert.equals('2023-11-14T22:13:20Z', c.lastTransitionTime)
  end)

  it('record a new generation as a change', function()
    local obj = deployment()
    helpers.set_condition(obj, ready('True'))
    obj.metadata.generation = 4
    assert.is_true(helpers.set_condition(obj, ready('True')))
    assert.equals(4, helpers.get_condition(obj, 'Ready').observedGeneration)
  end)

  it('take an explicit observed generation and transition time', function()
    local obj = deployment()
    helpers.set_condition(obj, { type = 'Ready', status = 'Unknown', reason = 'Pending',
      observed_generation = 2, last_transition_time = '2020-01-01T00:00:00Z' })
    local c = helpers.get_condition(obj, 'Ready')
    assert.equals(2, c.observedGeneration)
    assert.equals('2020-01-01T00:00:00Z', c.lastTransitionTime)
  end)

  it('leave out the observed generation of an object without one', function()
    local obj = { metadata = { name = 'cm' } }
    helpers.set_condition(obj, ready('True'))
    assert.is_nil(obj.status.conditions[1].observedGeneration)
  end)

  it('are kept per type', function()
    local obj = deployment()
    helpers.set_condition(obj, ready('True'))
    helpers.set_condition(obj, { type = 'Degraded', status = 'False', reason = 'AsExpected' })
    helpers.set_condition(obj, ready('False', 'Failing'))
    assert.equals(2, #obj.status.conditions)
    assert.equals('False', helpers.get_condition(obj, 'Ready').status)
    assert.equals('AsExpected', helpers.get_condition(obj, 'Degraded').reason)
  end)

  it('are read from views and from objects without status', function()
    local obj = deployment()
    helpers.set_condition(obj, ready('True'))
    helpers.set_condition(obj, { type = 'Stalled', status = 'Unknown', reason = 'NotYet' })
    local v = view(obj)
    assert.equals('Reconciled', helpers.get_condition(v, 'Ready').reason)
    assert.is_true(helpers.is_condition_true(v, 'Ready'))
    assert.is_false(helpers.is_condition_true(v, 'Stalled'))
    assert.is_false(helpers.is_condition_true(v, 'Missing'))
    assert.is_nil(helpers.get_condition({}, 'Ready'))
    assert.is_nil(helpers.get_condition({ status = {} }, 'Ready'))
    assert.is_false(helpers.is_condition_true({ status = { conditions = {} } }, 'Ready'))
  end)

  it('refuse to replace a view held inside a table, which would drop its members', function()
    local v = view { status = { phase = 'Running', conditions = { { type = 'Ready', status = 'True' } } } }
    local obj = { status = v.status }
    assert.has_error(function() helpers.set_condition(obj, ready('True')) end,
      'set_condition: obj.status is a read-only view: pass klua.edit(obj), or klua.copy(obj), a mutable table throughout')
    assert.has_error(function() helpers.remove_condition(obj, 'Ready') end,
      'remove_condition: obj.status is a read-only view: pass klua.edit(obj), or klua.copy(obj), a mutable table throughout')
    assert.has_error(function() helpers.set_condition(v, ready('True')) end,
      'set_condition: obj must be a mutable table or klua.edit(obj) (views are read-only: use klua.edit(obj) or klua.copy(obj))')
    assert.equals('Running', obj.status.phase)
    local c = testing.copy(v)
    assert.is_true(helpers.remove_condition(c, 'Ready'))
    assert.equals('Running', c.status.phase)
  end)

  it('are removed by type', function()
    local obj = deployment()
    helpers.set_condition(obj, ready('True'))
    helpers.set_condition(obj, { type = 'Degraded', status = 'False', reason = 'AsExpected' })
    assert.is_true(helpers.remove_condition(obj, 'Ready'))
    assert.is_false(helpers.remove_condition(obj, 'Ready'))
    assert.is_false(helpers.remove_condition({}, 'Ready'))
    assert.same({ 'Degraded' }, { obj.status.conditions[1].type, obj.status.conditions[2] })
  end)

  it('refuse a status that is not True, False or Unknown, and a missing reason', function()
    assert.has_error(function() helpers.set_condition({}, { type = 'Ready', status = true, reason = 'R' }) end,
      "set_condition: status must be 'True', 'False' or 'Unknown' (got boolean true)")
    assert.has_error(function() helpers.set_condition({}, { type = 'Ready', status = 'True' }) end,
      "set_condition: reason must be a non-empty CamelCase word such as 'Reconciled'")
    assert.has_error(function() helpers.set_condition({}, { status = 'True', reason = 'R' }) end,
      "set_condition: type must be a non-empty string such as 'Ready'")
  end)
end)

describe('events', function()
  it('describe a namespaced object as a core/v1 Event ready to create', function()
    local pod = { apiVersion = 'v1', kind = 'Pod',
      metadata = { name = 'web-0', namespace = 'shop', uid = 'uid-pod', resourceVersion = '42' } }
    local ev = helpers.event_for(view(pod), { type = 'Warning', reason = 'BackOff',
      message = 'restarting', component = 'web-controller' })
    assert.same({
      apiVersion = 'v1', kind = 'Event',
      metadata = { generateName = 'web-0.', namespace = 'shop' },
      involvedObject = { apiVersion = 'v1', kind = 'Pod', name = 'web-0', namespace = 'shop',
        uid = 'uid-pod', resourceVersion = '42' },
      type = 'Warning', reason = 'BackOff', message = 'restarting',
      firstTimestamp = '2023-11-14T22:13:20Z', lastTimestamp = '2023-11-14T22:13:20Z', count = 1,
      source = { component = 'web-controller' }, reportingComponent = 'web-controller',
    }, ev)
  end)

  it('go to the default namespace for cluster-scoped objects', function()
    local node = { apiVersion = 'v1', kind = 'Node', metadata = { name = 'n1', uid = 'uid-n1' } }
    local ev = helpers.event_for(node, { reason = 'Drained', action = 'Drain', instance = 'host-1' })
    assert.equals('default', ev.metadata.namespace)
    assert.is_nil(ev.involvedObject.namespace)
    assert.same({ 'Normal', '', 'klua', 'Drain', 'host-1' },
      { ev.type, ev.message, ev.source.component, ev.action, ev.reportingInstance })
  end)

  it('take kind and apiVersion from opts for objects from a list, and return an error without', function()
    local obj = { metadata = { name = 'web', namespace = 'shop' } }
    local ev, err = helpers.event_for(view(obj), { reason = 'Synced' })
    assert.is_nil(ev)
    assert.equals('MissingKind', err.reason)
    assert.equals("event_for: the object has no kind (objects from a list lack it); pass it: "
      .. "event_for(obj, {kind = 'Pod', api_version = 'v1', ...})", tostring(err))
    local ev = helpers.event_for(obj, { reason = 'Synced', kind = 'Deployment', api_version = 'apps/v1' })
    assert.same({ 'apps/v1', 'Deployment' }, { ev.involvedObject.apiVersion, ev.involvedObject.kind })
  end)

  it('refuse an unknown type and a missing reason, mistakes in the call, with an error', function()
    local pod = { kind = 'Pod', metadata = { name = 'p' } }
    assert.has_error(function() helpers.event_for(pod, { type = 'Error', reason = 'X' }) end,
      "event_for: type must be 'Normal' or 'Warning' (got Error)")
    assert.has_error(function() helpers.event_for(pod, { message = 'no reason' }) end,
      "event_for: reason must be a non-empty CamelCase word such as 'Created'")
    assert.has_error(function() helpers.event_for(pod) end,
      'event_for: pass the event as a table {type =, reason =, message =, component =}')
  end)

  it('return an error for a nameless object, a problem with the data', function()
    local objs = { { kind = 'Pod' }, view { kind = 'Pod', metadata = { name = '' } }, nil, 'pod' }
    for i = 1, 4 do
      local ev, err = helpers.event_for(objs[i], { reason = 'X' })
      assert.is_nil(ev)
      assert.equals('MissingName', err.reason)
      assert.equals('event_for: the object needs metadata.name', tostring(err))
    end
  end)
end)

describe('predicates', function()
  local function pod()
    return {
      apiVersion = 'v1', kind = 'Pod',
      metadata = {
        name = 'p', namespace = 'ns', generation = 1, resourceVersion = '10',
        labels = { app = 'web', tier = 'front' }, annotations = { note = 'x' },
        managedFields = { { manager = 'kubectl', operation = 'Update' } },
      },
      spec = { containers = { { name = 'c', image = 'nginx:1', ports = { { containerPort = 80 } } } } },
      status = { phase = 'Pending' },
    }
  end

  it('see a generation change', function()
    local old, new = pod(), pod()
    assert.is_false(helpers.generation_changed(view(old), view(new)))
    new.metadata.generation = 2
    assert.is_true(helpers.generation_changed(view(old), view(new)))
    assert.is_false(helpers.generation_changed({}, {}))
  end)

  it('see label changes, not equal labels in other tables', function()
    local old, new = pod(), pod()
    assert.is_false(helpers.labels_changed(view(old), view(new)))
    new.metadata.labels.tier = 'back'
    assert.is_true(helpers.labels_changed(old, new))
    new = pod()
    new.metadata.labels.extra = 'y'
    assert.is_true(helpers.labels_changed(old, view(new)))
    new = pod()
    new.metadata.labels.tier = nil
    assert.is_true(helpers.labels_changed(view(old), new))
  end)

  it('treat absent labels and annotations as empty', function()
    assert.is_false(helpers.labels_changed({ metadata = {} }, { metadata = { labels = {} } }))
    assert.is_false(helpers.annotations_changed({}, { metadata = { annotations = {} } }))
    assert.is_true(helpers.annotations_changed({}, { metadata = { annotations = { a = 'b' } } }))
  end)

  it('see annotation changes', function()
    local old, new = pod(), pod()
    assert.is_false(helpers.annotations_changed(old, new))
    new.metadata.annotations.note = 'y'
    assert.is_true(helpers.annotations_changed(view(old), view(new)))
  end)

  it('find an update that changed only status, resourceVersion and managedFields', function()
    local old, new = pod(), pod()
    new.status = { phase = 'Running', podIP = '10.0.0.1' }
    new.metadata.resourceVersion = '11'
    new.metadata.managedFields[2] = { manager = 'kubelet', operation = 'Update', subresource = 'status' }
    assert.is_true(helpers.only_status_or_rv_changed(view(old), view(new)))
    assert.is_true(helpers.only_status_or_rv_changed(old, new))
  end)

  it('count an update that changed nothing at all as such an update', function()
    assert.is_true(helpers.only_status_or_rv_changed(view(pod()), view(pod())))
  end)

  it('see a change anywhere else, however deep', function()
    local cases = {
      function(p) p.spec.containers[1].ports[1].containerPort = 8080 end,
      function(p) p.spec.containers[2] = { name = 'sidecar', image = 'envoy' } end,
      function(p) p.spec.nodeName = 'n1' end,
      function(p) p.spec = nil end,
      function(p) p.metadata.labels.app = 'api' end,
      function(p) p.metadata.annotations = nil end,
      function(p) p.metadata.generation = 2 end,
      function(p) p.metadata.deletionTimestamp = '2023-11-14T22:13:20Z' end,
      function(p) p.metadata.finalizers = { 'x/y' } end,
      function(p) p.data = { k = 'v' } end,
    }
    for i, change in ipairs(cases) do
      local old, new = pod(), pod()
      change(new)
      new.metadata.resourceVersion = '11'
      assert(not helpers.only_status_or_rv_changed(view(old), view(new)), 'case ' .. i .. ' went unseen')
      assert(not helpers.only_status_or_rv_changed(view(new), view(old)), 'case ' .. i .. ' reversed went unseen')
    end
  end)

  it('compare values deeply', function()
    assert.is_true(helpers.deep_equal({ a = { 1, 2, { b = 'c' } } }, view { a = { 1, 2, { b = 'c' } } }))
    assert.is_false(helpers.deep_equal({ a = { 1, 2 } }, { a = { 1, 2, 3 } }))
    assert.is_false(helpers.deep_equal({ a = 1 }, { a = '1' }))
    assert.is_false(helpers.deep_equal({}, 'x'))
    assert.is_true(helpers.deep_equal(1, 1.0))
  end)
end)

describe('helpers module', function()
  it('gathers the functions of every concept module', function()
    for _, name in ipairs { 'owner', 'finalizer', 'condition', 'event', 'predicate' } do
      for fname, fn in pairs(require('klua.' .. name)) do
        if fname ~= 'set_array_mt' and fname ~= 'set_clock' then
          assert.equals(fn, helpers[fname], 'klua.helpers lacks ' .. fname)
        end
      end
    end
  end)

  it('marks every list it creates with the array metatable the host set', function()
    local mt = {}
    helpers.set_array_mt(mt)
    assert.equals(mt, helpers.array_mt())
    local obj = { metadata = { namespace = 'shop' } }
    helpers.add_finalizer(obj, 'x/y')
    helpers.set_controller_reference(deployment(), obj)
    helpers.set_condition(obj, { type = 'Ready', status = 'True', reason = 'Done' })
    assert.equals(mt, getmetatable(obj.metadata.finalizers))
    assert.equals(mt, getmetatable(obj.metadata.ownerReferences))
    assert.equals(mt, getmetatable(obj.status.conditions))
  end)

  it('dates conditions and events with the clock the host set', function()
    helpers.set_clock(function() return 0 end)
    local obj = deployment()
    helpers.set_condition(obj, { type = 'Ready', status = 'True', reason = 'Done' })
    assert.equals('1970-01-01T00:00:00Z', obj.status.conditions[1].lastTransitionTime)
    assert.equals('1970-01-01T00:00:00Z', helpers.event_for(obj, { reason = 'Done' }).firstTimestamp)
  end)

  it('refuses a clock or metatable of the wrong type', function()
    assert.has_error(function() helpers.set_clock(42) end,
      'set_clock: fn must be a function returning epoch seconds')
    assert.has_error(function() helpers.set_array_mt('array') end, 'set_array_mt: mt must be a table')
  end)
end)

-- A reconcile may change an object through klua.edit(obj) rather than klua.copy(obj): the
-- helpers that change objects take either, and make the same object of each.
describe('the helpers that change an object, given klua.edit(obj)', function()
  before_each(function() helpers.set_writable(testing.writable) end)
  after_each(function() helpers.set_writable(function(v) return type(v) == 'table' end) end)

  local function pod()
    return view {
      apiVersion = 'v1', kind = 'Pod',
      metadata = { name = 'web-0', namespace = 'shop', finalizers = { 'a/one', 'mine/f', 'b/two', 'mine/f' } },
      status = { conditions = { { type = 'Ready', status = 'False', reason = 'Starting', message = '',
        lastTransitionTime = '2023-11-14T22:00:00Z' } } },
    }
  end

  local changes = {
    function(o) return helpers.add_finalizer(o, 'x/y') end,
    function(o) return helpers.remove_finalizer(o, 'mine/f') end,
    function(o) return helpers.set_controller_reference(deployment(), o) end,
    function(o) return helpers.set_condition(o, { type = 'Ready', status = 'True', reason = 'Up' }) end,
    function(o) return helpers.set_condition(o, { type = 'Synced', status = 'True', reason = 'Done' }) end,
    function(o) return helpers.remove_condition(o, 'Ready') end,
  }

  it('make of it the object they make of a copy, and leave the view it came from as it was', function()
    local v = pod()
    local before = tostring(v)
    local edited, copied = testing.edit(v), testing.copy(v)
    for i, change in ipairs(changes) do
      assert.same({ change(copied) }, { change(edited) }, 'change ' .. i)
    end
    assert.same(testing.json.decode(testing.json.encode(copied)), testing.json.decode(testing.json.encode(edited)))
    assert.same({ 'a/one', 'b/two', 'x/y' }, testing.copy(edited.metadata.finalizers))
    assert.equals(before, tostring(v))
  end)

  -- Each object as JSON: without metadata or status, with them null, with empty lists,
  -- and with lists whose entries the changes move (conditions after one removed).
  local shapes = {
    '{"kind":"Pod"}',
    '{"metadata":null,"status":null}',
    '{"metadata":{"finalizers":null,"ownerReferences":null},"status":{"conditions":null}}',
    '{"metadata":{"finalizers":[],"ownerReferences":[]},"status":{"conditions":[]}}',
    '{"metadata":{"namespace":"shop","generation":2,"finalizers":["mine/f","x/y","mine/f"],'
      .. '"ownerReferences":[{"apiVersion":"apps/v1","kind":"Deployment","name":"web","uid":"old","controller":true}]},'
      .. '"status":{"conditions":[{"type":"Ready","status":"True"},{"type":"Synced","status":"False"},{"type":"Other","status":"True"}]}}',
  }

  it('make the object a copy makes, whatever it lacks, in any order, called again, and edited again', function()
    for _, json in ipairs(shapes) do
      for first = 1, #changes do
        local v = testing.view(json)
        local edited, copied = testing.edit(v), testing.copy(v)
        for round = 1, 2 do
          for k = 0, #changes - 1 do
            local i = (first + k - 1) % #changes + 1
            local what = ('%s: change %d, round %d'):format(json, i, round)
            assert.same({ changes[i](copied) }, { changes[i](edited) }, what)
            assert.same(testing.json.decode(testing.json.encode(copied)),
              testing.json.decode(testing.json.encode(edited)), what)
          end
          edited = testing.edit(edited)
        end
        assert.equals(json, tostring(v))
      end
    end
  end)

  it('still refuse a read-only view', function()
    assert.has_error(function() helpers.add_finalizer(pod(), 'x/y') end,
      'add_finalizer: obj must be a mutable table or klua.edit(obj) (views are read-only: use klua.edit(obj) '
      .. 'or klua.copy(obj))')
  end)
end)
