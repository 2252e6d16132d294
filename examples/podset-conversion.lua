-- The conversion webhook of examples/podset-crd-v1alpha1.yaml, the PodSet
-- served at v1alpha1 and v1 (docs/webhooks.md): v1alpha1 called the number
-- of pods spec.size, v1 calls it spec.replicas; the rest is the same. The
-- API server stores PodSets at v1 and calls this webhook to turn a
-- v1alpha1 write into v1, and a stored v1 PodSet into v1alpha1 for a
-- client that asks for it.
--
--   kubectl apply -f examples/podset-crd-v1alpha1.yaml
--   klua run --webhook-bind-address :9443 --webhook-cert-dir CERTS examples/podset-conversion.lua
--   klua webhook-config examples/podset-conversion.lua --service NS/NAME --ca-bundle CERTS/ca.crt
--
-- webhook-config prints the CRD's spec.conversion stanza as comments, to
-- merge into the CRD with kubectl patch.
--
-- A conversion must lose nothing either way: an old client that reads a
-- PodSet at v1alpha1 and writes it back must not drop what v1 holds. The
-- two versions differ by a name only, so moving the field is enough; a v1
-- field v1alpha1 had no room for would go in an annotation.
local ALPHA, V1 = 'demo.klua.dev/v1alpha1', 'demo.klua.dev/v1'

klua.webhook.conversion {
  path = '/convert-podsets', crd = 'podsets.demo.klua.dev',
  convert = function(obj, desired)
    local ps = klua.copy(obj)
    ps.spec = ps.spec or {}
    if desired == V1 and obj.apiVersion == ALPHA then
      ps.spec.replicas, ps.spec.size = ps.spec.size, nil
    elseif desired == ALPHA and obj.apiVersion == V1 then
      ps.spec.size, ps.spec.replicas = ps.spec.replicas, nil
    end
    ps.apiVersion = desired
    return ps
  end,
}
