--- podset-controller: keeps spec.replicas pods for each PodSet, like a
-- ReplicaSet.
--
--   kubectl apply -f examples/podset-crd.yaml
--   klua run examples/podset-controller.lua
--
-- PodSet is the custom resource in examples/podset-crd.yaml:
--
--   apiVersion: demo.klua.dev/v1
--   kind: PodSet
--   metadata: {name: web}
--   spec:
--     replicas: 3
--     template:                 # a pod template; optional
--       metadata: {labels: {app: web}}
--       spec: {containers: [{name: web, image: nginx}]}
--
-- For each PodSet the controller creates pods named <podset>-<random>,
-- labelled demo.klua.dev/podset=<podset> and controlled by the PodSet
-- (an ownerReference with controller = true), deletes the extra ones,
-- writes status.replicas, status.readyReplicas and a Ready condition
-- through the status subresource, and records an Event when it scales.
--
-- It creates and deletes its pods one by one rather than declaring them
-- with klua.helpers.apply_children: a ReplicaSet's pods are
-- interchangeable, named at random (generateName, which apply cannot
-- address), keep the spec they were created with (a pod's spec cannot be
-- changed, so applying a changed template would fail), and scaling down
-- picks the pods not ready first. apply_children is for children named
-- after their owner whose content follows its spec (docs/tutorial.md).
--
-- Deleting a PodSet: the garbage collector (a cluster's, and the sandbox
-- API server's) deletes the pods whose owner is gone. This controller also
-- deletes them itself when it reconciles a PodSet that no longer exists, so
-- the clean-up does not wait for the collector; the two race harmlessly, a
-- 404 for the loser being ignored. No finalizer is needed for that, because
-- reconciling is level-based: a pod whose PodSet was deleted while the
-- controller was down is still in the pod cache when it starts again, and
-- its owner's key is reconciled like any other. (A finalizer is for
-- clean-up that needs the deleted object itself, or that leaves nothing
-- behind in the cache to find: see examples/finalizer.lua.)
local PODSET_LABEL = 'demo.klua.dev/podset'
local COMPONENT = 'podset-controller'

if not klua.resolve('podsets.demo.klua.dev') then
  klua.log.error('the PodSet resource is not installed: kubectl apply -f examples/podset-crd.yaml')
  return klua.stop(1)
end

local podsets = klua.informer { resource = 'podsets.demo.klua.dev' }
-- Only the pods this controller made: the label keeps other pods out of
-- the cache.
local pods = klua.informer { resource = 'pods', label_selector = PODSET_LABEL }

local function key_of(obj)
  return obj.metadata.namespace .. '/' .. obj.metadata.name
end

local function is_ready(pod)
  return klua.helpers.is_condition_true(pod, 'Ready')
end

-- A pod being deleted (in a real cluster it lingers for its grace period)
-- no longer counts as a replica.
local function terminating(pod)
  return pod.metadata.deletionTimestamp ~= nil
end

-- The cached pods controlled by a PodSet named name in ns: those of the
-- PodSet ps (matched by uid), and strays left by a deleted PodSet of the
-- same name (any uid when ps is nil).
local function pods_of(ns, name, ps)
  local uid = ps and ps.metadata.uid
  local owned, strays = {}, {}
  for _, pod in ipairs(pods:list { namespace = ns }) do
    local ref = klua.helpers.get_controller_of(pod)
    if ref and ref.kind == 'PodSet' and ref.name == name
        and not terminating(pod) then
      if ref.uid == uid then owned[#owned + 1] = pod else strays[#strays + 1] = pod end
    end
  end
  return owned, strays
end

-- Like a ReplicaSet's, replicas defaults to 1.
local function desired(ps)
  return ps.spec and ps.spec.replicas or 1
end

-- A new pod for ps, from its template. Views are read-only: klua.copy makes
-- the template's parts into tables that can be changed and sent (klua.get
-- reads nil where the template leaves a part out, and klua.copy(nil) is nil).
local function new_pod(ps)
  local template = klua.get(ps, 'spec', 'template')
  local pod = {
    apiVersion = 'v1',
    kind = 'Pod',
    metadata = {
      generateName = ps.metadata.name .. '-',
      namespace = ps.metadata.namespace,
      labels = klua.copy(klua.get(template, 'metadata', 'labels')) or {},
      annotations = klua.copy(klua.get(template, 'metadata', 'annotations')),
    },
    spec = klua.copy(klua.get(template, 'spec'))
        or { containers = { { name = 'main', image = 'registry.k8s.io/pause:3.10' } } },
  }
  pod.metadata.labels[PODSET_LABEL] = ps.metadata.name
  local ok, err = klua.helpers.set_controller_reference(ps, pod)
  if not ok then return nil, err end
  return pod
end

-- Scaling down removes pods that are not ready first, then the newest.
local function deletion_order(a, b)
  if is_ready(a) ~= is_ready(b) then return not is_ready(a) end
  if a.metadata.creationTimestamp ~= b.metadata.creationTimestamp then
    return a.metadata.creationTimestamp > b.metadata.creationTimestamp
  end
  return a.metadata.name > b.metadata.name
end

-- The writes of one reconcile: how many pods it created and deleted, and
-- its first error.
local function new_changes()
  return { created = 0, deleted = 0, err = nil }
end

-- No expectations to keep, as client-go's ReplicaSet controller keeps
-- them: klua does not start the next reconcile of a PodSet until the pod
-- informer holds the pods this one created and deleted (read your own
-- writes, klua.controller's read_your_writes), so it never counts too few
-- and creates more.
local function create_pod(ps, changes)
  local pod, err = new_pod(ps)
  if pod then pod, err = klua.api.create('pods', pod) end
  if not pod then
    changes.err = changes.err or err
    return
  end
  changes.created = changes.created + 1
  klua.log.info('%s: created pod %s', key_of(ps), pod.metadata.name)
end

local function delete_pod(pod, changes, why)
  local owner = klua.helpers.get_controller_of(pod).name
  -- The uid precondition makes sure the pod deleted is the one in the cache.
  local _, err = klua.api.delete('pods', key_of(pod), { preconditions = { uid = pod.metadata.uid } })
  if err and not klua.api.is_not_found(err) then
    changes.err = changes.err or err
    return
  end
  changes.deleted = changes.deleted + 1
  if not err then
    klua.log.info('%s/%s: deleted pod %s (%s)', pod.metadata.namespace, owner, pod.metadata.name, why)
  end
end

-- Creates or deletes pods so that ps has spec.replicas of them.
local function scale(ps, owned, changes)
  local want = desired(ps)
  for _ = #owned + 1, want do create_pod(ps, changes) end
  if #owned > want then
    table.sort(owned, deletion_order)
    for i = 1, #owned - want do delete_pod(owned[i], changes, 'scaling down') end
  end
end

local function record_scaling(ps, from, to)
  local reason = to > from and 'ScaledUp' or 'ScaledDown'
  local _, err = klua.record_event(ps, {
    reason = reason,
    message = ('Scaled from %d to %d pods'):format(from, to),
    component = COMPONENT,
  })
  if err then klua.log.warn('%s: cannot record the %s event: %s', key_of(ps), reason, tostring(err)) end
end

-- Ready is True when every wanted pod exists and is ready.
local function ready_condition(want, owned, ready)
  local c = { type = 'Ready', status = 'False' }
  if owned ~= want then
    c.reason, c.message = 'Scaling', ('%d of %d pods exist'):format(owned, want)
  else
    if ready == want then c.status = 'True' end
    c.reason = ready == want and 'AllPodsReady' or 'PodsNotReady'
    c.message = ('%d of %d pods are ready'):format(ready, want)
  end
  return c
end

local function set_field(t, field, value)
  if t[field] == value then return false end
  t[field] = value
  return true
end

-- Writes the status of ps from its pods in the cache, when it changed.
local function update_status(ps, owned)
  local ready = 0
  for _, pod in ipairs(owned) do
    if is_ready(pod) then ready = ready + 1 end
  end
  local obj = klua.copy(ps)
  obj.status = obj.status or {}
  local changed = set_field(obj.status, 'replicas', #owned)
  changed = set_field(obj.status, 'readyReplicas', ready) or changed
  changed = set_field(obj.status, 'selector', PODSET_LABEL .. '=' .. ps.metadata.name) or changed
  changed = set_field(obj.status, 'observedGeneration', ps.metadata.generation) or changed
  changed = klua.helpers.set_condition(obj, ready_condition(desired(ps), #owned, ready)) or changed
  if not changed then return true end
  -- obj carries the cached resourceVersion: if the PodSet changed since,
  -- the update fails with a conflict rather than write a stale status.
  return klua.api.update_status(podsets, obj)
end

local function reconcile(key)
  local ns, name = key:match('^([^/]+)/(.+)$')
  local ps = podsets:get(key)
  local owned, strays = pods_of(ns, name, ps)
  local changes = new_changes()
  for _, pod in ipairs(strays) do delete_pod(pod, changes, 'its PodSet is gone') end
  if ps == nil or ps.metadata.deletionTimestamp then
    for _, pod in ipairs(owned) do delete_pod(pod, changes, 'its PodSet is being deleted') end
    return nil, changes.err
  end
  local before = #owned
  scale(ps, owned, changes)
  local after = before + changes.created - changes.deleted
  if after ~= before then record_scaling(ps, before, after) end
  if changes.err then return nil, changes.err end
  -- The events of the pods just created or deleted bring the key back,
  -- and klua starts that reconcile once the cache holds them: it writes
  -- the status from the pods as they are.
  if changes.created + changes.deleted > 0 then return end
  local ok, err = update_status(ps, owned)
  if ok then return end
  -- A conflict only means the cache was behind: try again soon, quietly.
  if klua.api.is_conflict(err) then return klua.requeue() end
  return nil, err
end

klua.controller {
  name = COMPONENT,
  watches = { podsets },
  owns = { pods },
  workers = 2,
  reconcile = reconcile,
}

klua.on_synced(function()
  klua.log.info('managing %d PodSets with %d pods', #podsets:list(), #pods:list())
end)
