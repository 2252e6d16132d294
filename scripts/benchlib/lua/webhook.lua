--- Scenario webhook: a small validating admission webhook, as a policy script would write it.
--
--   klua run --webhook-bind-address 127.0.0.1:0 --webhook-cert-dir DIR webhook.lua
--
-- Allows a Pod unless it asks for the host's network or has a container
-- without resource limits; scripts/bench posts AdmissionReview v1 bodies of
-- its generated Pods (all of them allowed) and times the answers.
klua.webhook.validating {
  path = '/validate-pods', resources = { 'v1/pods' }, operations = { 'CREATE', 'UPDATE' },
  handler = function(req)
    local spec = req.object.spec
    if spec.hostNetwork then return false, 'hostNetwork is not allowed' end
    for _, c in ipairs(spec.containers) do
      if not (c.resources and c.resources.limits) then
        return false, ('container %s has no resource limits'):format(c.name)
      end
    end
    return true
  end,
}
