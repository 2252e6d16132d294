-- Admission webhooks for the PodSet of examples/podset-crd.yaml
-- (docs/webhooks.md): a validating webhook that keeps spec.replicas within
-- bounds, and a defaulting (mutating) one that labels the pods of a PodSet
-- whose template has no app label with the PodSet's name.
--
--   klua run --webhook-bind-address :9443 --webhook-cert-dir CERTS examples/podset-webhook.lua
--   klua webhook-config examples/podset-webhook.lua --service NS/NAME --ca-bundle CERTS/ca.crt \
--     | kubectl apply -f -
--
-- The schema already refuses a negative spec.replicas (minimum: 0); what
-- it cannot say is a policy of this cluster, here that a PodSet runs at
-- most MAX_REPLICAS pods. `kubectl scale` writes spec.replicas through the
-- scale subresource, which the API server admits as an autoscaling/v1
-- Scale (also with spec.replicas), so the rule names podsets/scale too:
-- without it, scaling would go around the limit.
local MAX_REPLICAS = 10

klua.webhook.validating {
  path = '/validate-podsets', name = 'podset-replicas.demo.klua.dev',
  resources = { 'demo.klua.dev/v1/podsets', 'demo.klua.dev/v1/podsets/scale' },
  handler = function(req)
    local replicas = klua.get(req.object, 'spec', 'replicas') or 1
    if replicas > MAX_REPLICAS then
      return false, ('spec.replicas is %d: a PodSet runs at most %d pods'):format(replicas, MAX_REPLICAS)
    end
    return true
  end,
}

-- Defaulting belongs in a mutating webhook, before validation and storage:
-- the label is then in the stored PodSet, where the controller and kubectl
-- see it, rather than added by each reader. Only on CREATE, so that a user
-- who removes it later is not overruled.
klua.webhook.mutating {
  path = '/default-podsets', name = 'podset-defaults.demo.klua.dev',
  resources = { 'demo.klua.dev/v1/podsets' }, operations = { 'CREATE' },
  handler = function(req)
    if klua.get(req.object, 'spec', 'template', 'metadata', 'labels', 'app') then return nil end
    local ps = klua.copy(req.object)
    ps.spec.template = ps.spec.template or {}
    ps.spec.template.metadata = ps.spec.template.metadata or {}
    ps.spec.template.metadata.labels = ps.spec.template.metadata.labels or {}
    ps.spec.template.metadata.labels.app = ps.metadata.name
    return ps, { ('spec.template.metadata.labels.app defaulted to %s'):format(ps.metadata.name) }
  end,
}
