--- pod-logger: logs what happens to pods, in every namespace.
--
--   klua run examples/pod-logger.lua            every pod
--   klua run examples/pod-logger.lua app=web    only pods whose labels match
--
-- The argument is a label selector, in kubectl's syntax ("app=web",
-- "tier in (front,back)", "!canary"). It is a server-side filter: the API
-- server sends only the pods that match, so pods outside the selection cost
-- nothing.
--
-- This is the smallest useful klua script: one informer and three
-- handlers. Handlers get read-only views of the pods from the informer's
-- cache; they are called in the order the changes happened.
local selector = ...

local pods = klua.informer {
  resource = 'pods',
  label_selector = selector,
}

local function key(pod)
  return pod.metadata.namespace .. '/' .. pod.metadata.name
end

-- A pod has no phase until the API server defaults it.
local function phase(pod)
  return pod.status and pod.status.phase or 'Unknown'
end

-- in_initial_list is true for the pods that already existed when the
-- informer made its first LIST, false for pods that appear later.
pods:on('add', function(pod, in_initial_list)
  local verb = in_initial_list and 'found' or 'added'
  klua.log.info('%s %s (%s)', verb, key(pod), phase(pod))
end)

-- Every change to a pod is an update (labels, annotations, status...):
-- this logger cares only about the phase.
pods:on('update', function(old, new)
  if phase(old) ~= phase(new) then
    klua.log.info('phase %s %s -> %s', key(new), phase(old), phase(new))
  end
end)

-- With a selector, a pod that stops matching leaves the informer's view of
-- the cluster as if it had been deleted. final_state_unknown is true when
-- the deletion happened while the watch was down: the pod is its last
-- known state.
pods:on('delete', function(pod, final_state_unknown)
  local verb, why = 'deleted', ''
  if selector then verb, why = 'gone', '; deleted or no longer matching ' .. selector end
  if final_state_unknown then why = why .. '; noticed after a reconnect' end
  klua.log.info('%s %s (%s%s)', verb, key(pod), phase(pod), why)
end)

klua.on_synced(function()
  local count = #pods:list()
  klua.log.info('watching pods%s: %d found', selector and (' matching ' .. selector) or '', count)
end)
