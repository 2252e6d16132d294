--- `klua.webhook`: admission and conversion webhooks in Lua, served by
-- `klua run --webhook-bind-address :9443 --webhook-cert-dir DIR` over
-- HTTPS, each call a task with the instruction budget, the memory cap and
-- a deadline below the API server's timeout (docs/webhooks.md).
--
--   klua.webhook.validating {
--     path = '/validate-pods', resources = { 'v1/pods' }, operations = { 'CREATE', 'UPDATE' },
--     handler = function(req)
--       if req.object.spec.hostNetwork then return false, 'hostNetwork is not allowed here' end
--       return true
--     end,
--   }
--
-- `klua webhook-config SCRIPT` prints the ValidatingWebhookConfiguration,
-- MutatingWebhookConfiguration and CRD conversion stanza of the webhooks
-- a script declares, so the two cannot disagree.
local webhook = require('klua.internal.webhook')

local M = {}

--- Declares a validating admission webhook at `path`. opts:
-- `path` (the URL path the API server calls), `resources` (what it is
-- called for: "v1/pods", "apps/v1/deployments", "v1/pods/status",
-- "*/*/*"), `operations` (default { "CREATE", "UPDATE" }; "DELETE",
-- "CONNECT", "*"), `handler`, and for the configuration klua prints:
-- `name` (default PATH.webhook.klua.dev), `failure_policy` ("Fail", the
-- default, or "Ignore"), `timeout_seconds` (1 to 30, default 10),
-- `side_effects` ("None" or "NoneOnDryRun"), `scope`, `namespace_selector`,
-- `object_selector`.
--
-- `handler(req)` gets the AdmissionRequest: `req.object` and
-- `req.old_object` (read-only views; nil where the operation has none),
-- `req.operation`, `req.user_info`, `req.dry_run`, `req.namespace`,
-- `req.name`, `req.kind`, `req.resource`, `req.sub_resource`, `req.uid`,
-- `req.options`. It returns `true` to allow, or `false, message` to deny
-- (403 Forbidden, as controller-runtime's `admission.Denied`); a list of
-- warnings may follow either (`true, { "..." }`, `false, msg, { "..." }`),
-- which kubectl prints. An error, or a handler still running at its
-- deadline, answers HTTP 500, and the API server applies the webhook's
-- failurePolicy.
-- @param opts {path=, resources=, operations=, handler=, name=, failure_policy=, timeout_seconds=,
-- side_effects=, scope=, namespace_selector=, object_selector=}
-- @raise when an option is missing or not valid, the path is taken, or klua run has no --webhook-bind-address
-- @usage
-- klua.webhook.validating { path = '/validate-pods', resources = { 'v1/pods' }, handler = function(req)
--   if req.object.spec.hostNetwork then return false, 'hostNetwork is not allowed here' end
--   return true
-- end }
function M.validating(opts)
  webhook.declare('validating', opts)
end

--- Declares a mutating admission webhook: the options of `validating`,
-- and `reinvocation_policy` ("Never" or "IfNeeded"). `handler(req)`
-- returns the object changed (`klua.copy(req.object)`, modified), from
-- which klua computes the JSON Patch (RFC 6902) the answer carries; nil
-- (or req.object itself) to leave it as it is; or `false, message` to
-- deny. Warnings may follow the object (`obj, { "..." }`).
-- @param opts the options of validating, and reinvocation_policy=
-- @raise as validating
-- @usage
-- klua.webhook.mutating { path = '/label-pods', resources = { 'v1/pods' }, handler = function(req)
--   local pod = klua.copy(req.object)
--   pod.metadata.labels = pod.metadata.labels or {}
--   pod.metadata.labels['example.com/seen'] = 'true'
--   return pod
-- end }
function M.mutating(opts)
  webhook.declare('mutating', opts)
end

--- Declares the conversion webhook of a CustomResourceDefinition
-- (`spec.conversion.strategy: Webhook`) at `path`. `convert(obj,
-- desired_api_version)` gets each object (a read-only view) and returns
-- it converted: a table whose `apiVersion` is `desired_api_version`. An
-- error, or a wrong apiVersion, fails the whole request with its message
-- (a ConversionReview has no partial answer). `crd` names the CRD
-- (PLURAL.GROUP) for the stanza `klua webhook-config` prints.
-- @param opts {path=, convert=, crd=}
-- @raise when an option is missing or not valid, the path is taken, or klua run has no --webhook-bind-address
-- @usage
-- klua.webhook.conversion { path = '/convert-widgets', crd = 'widgets.example.com', convert = function(obj, desired)
--   local w = klua.copy(obj)
--   w.apiVersion = desired
--   return w
-- end }
function M.conversion(opts)
  webhook.declare('conversion', opts)
end

return M
