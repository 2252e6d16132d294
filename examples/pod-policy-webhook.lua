-- Admission webhooks for Pods (docs/webhooks.md): a validating webhook that
-- refuses host networking and containers without a memory limit, and a
-- mutating one that labels each Pod with the team of its namespace.
--
--   klua run --webhook-bind-address :9443 --webhook-cert-dir CERTS examples/pod-policy-webhook.lua
--   klua webhook-config examples/pod-policy-webhook.lua --service klua-system/pod-policy-webhook \
--     --inject-ca-from klua-system/pod-policy-webhook | kubectl apply -f -
--
-- The team comes from the namespace's label example.com/team, read from an
-- informer's cache: a webhook must answer within its timeout, so it reads
-- the cache rather than asking the API server on every call.
local namespaces = klua.informer { resource = 'namespaces' }

klua.webhook.validating {
  path = '/validate-pods', name = 'pod-policy.example.com', resources = { 'v1/pods' },
  operations = { 'CREATE', 'UPDATE' },
  handler = function(req)
    local pod = req.object
    if pod.spec.hostNetwork then return false, 'hostNetwork is not allowed: ask the cluster admins' end
    for _, c in ipairs(pod.spec.containers) do
      if not klua.get(c, 'resources', 'limits', 'memory') then
        return false, ('container %s has no memory limit: set resources.limits.memory'):format(c.name)
      end
    end
    return true
  end,
}

klua.webhook.mutating {
  path = '/label-pods', name = 'pod-team.example.com', resources = { 'v1/pods' }, operations = { 'CREATE' },
  handler = function(req)
    local ns = namespaces:get(req.namespace)
    local team = ns and klua.get(ns, 'metadata', 'labels', 'example.com/team')
    if not team or klua.get(req.object, 'metadata', 'labels', 'example.com/team') == team then return nil end
    local pod = klua.copy(req.object)
    pod.metadata.labels = pod.metadata.labels or {}
    pod.metadata.labels['example.com/team'] = team
    return pod
  end,
}
