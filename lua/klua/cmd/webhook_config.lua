--- `klua webhook-config`: the API objects that register a script's webhooks.
--
--   klua webhook-config SCRIPT.lua (--service NS/NAME [--port N] | --url URL)
--                       [--ca-bundle FILE | --inject-ca-from NS/CERT] [--name NAME]
--
-- Loads the script as klua run would, but only to collect what it declares
-- with klua.webhook: the main chunk runs without a cluster, its informers,
-- controllers, queues, timers and hooks inert (made, never run), and klua
-- stops. It prints, as YAML documents kubectl apply takes,
-- a ValidatingWebhookConfiguration and a MutatingWebhookConfiguration for
-- the admission webhooks, and for each conversion webhook the stanza to
-- merge into its CustomResourceDefinition (as comments, since only a whole
-- CRD can be applied). The help text is in src/cli/cli.c's command table.
local core = require('klua.core')
local webhook = require('klua.internal.webhook')
local jsonpatch = require('klua.internal.jsonpatch')
local flags = require('klua.cmd.flags')

local M = {}

local FLAGS = {
  ['--service'] = 'service', ['--port'] = 'port', ['--url'] = 'url', ['--ca-bundle'] = 'ca_bundle',
  ['--inject-ca-from'] = 'inject_ca_from', ['--name'] = 'name',
}

--- Parses the words after `webhook-config`: returns the options ({script,
-- service = {namespace, name}, port, url, ca_bundle, inject_ca_from,
-- name}), or nil and a message.
function M.parse(args)
  local o, positional = flags.parse(args, FLAGS)
  if not o then return nil, positional end
  local err
  o.script, err = flags.one(positional, 'a script is needed: klua webhook-config SCRIPT.lua --service NS/NAME')
  if not o.script then return nil, err end
  if (o.service == nil) == (o.url == nil) then
    return nil, 'give --service NS/NAME (the Service in front of klua) or --url https://HOST:PORT, one of them'
  end
  if o.service then
    local ns, svc = o.service:match('^([^/]+)/([^/]+)$')
    if not ns then return nil, ('--service %q: write NAMESPACE/NAME'):format(o.service) end
    o.service = { namespace = ns, name = svc }
  elseif not o.url:match('^https://[^/]') then
    return nil, ('--url %q: the API server calls webhooks over HTTPS only: https://HOST:PORT'):format(o.url)
  elseif o.port then
    return nil, '--port is the Service\'s: with --url, write the port in the URL'
  end
  if o.port then
    local n = math.tointeger(tonumber(o.port))
    if not n or n < 1 or n > 65535 then return nil, ('--port %q: a port from 1 to 65535'):format(o.port) end
    o.port = n
  end
  if o.ca_bundle and o.inject_ca_from then return nil, '--ca-bundle and --inject-ca-from cannot be combined' end
  if o.inject_ca_from and not o.inject_ca_from:match('^[^/]+/[^/]+$') then
    return nil, ('--inject-ca-from %q: write the cert-manager Certificate as NAMESPACE/NAME'):format(o.inject_ca_from)
  end
  return o
end

-- What a script sets up at its top level besides its webhooks, made inert
-- while its declarations are collected: nothing of it runs, and an informer
-- would need the cluster's discovery. An inert object takes any method call.
local INERT = { 'informer', 'controller', 'queue', 'leader_election', 'on_leading', 'on_synced', 'on_shutdown',
  'after', 'every' }
local inert = setmetatable({}, { __index = function() return function() end end })

local function fail(msg, code)
  io.stderr:write('klua webhook-config: ', msg, '\n')
  if code == 2 then io.stderr:write("Run 'klua webhook-config --help' for usage.\n") end
  klua.stop(code)
end

local function array(t) return setmetatable(t, core.json.array_mt) end

-- admissionregistration.k8s.io/v1's WebhookClientConfig for a path.
local function client_config(o, path, ca)
  local c = {}
  if o.service then
    c.service = { namespace = o.service.namespace, name = o.service.name, path = path, port = o.port or 443 }
  else
    c.url = o.url:gsub('/+$', '') .. path
  end
  c.caBundle = ca
  return c
end

local function admission_webhook(h, o, ca)
  local rules = array {}
  for i, r in ipairs(h.rules) do
    rules[i] = { apiGroups = array { r.group }, apiVersions = array { r.version }, resources = array { r.resource },
      operations = array { table.unpack(h.operations) }, scope = h.scope }
  end
  return {
    name = h.name, admissionReviewVersions = array { 'v1' }, clientConfig = client_config(o, h.path, ca),
    rules = rules, failurePolicy = h.failure_policy, sideEffects = h.side_effects,
    timeoutSeconds = h.timeout_seconds, namespaceSelector = h.namespace_selector,
    objectSelector = h.object_selector, reinvocationPolicy = h.reinvocation_policy,
  }
end

local function configuration(kind, name, o, hooks)
  local md = { name = name }
  if o.inject_ca_from then md.annotations = { ['cert-manager.io/inject-ca-from'] = o.inject_ca_from } end
  return { apiVersion = 'admissionregistration.k8s.io/v1', kind = kind, metadata = md, webhooks = array(hooks) }
end

-- The configuration's name: --name, else the script's file name.
local function default_name(script)
  local base = script:match('([^/]+)$'):gsub('%.lua$', ''):lower():gsub('[^a-z0-9.-]+', '-')
  return (base:gsub('^[-.]+', ''):gsub('[-.]+$', ''))
end

--- The YAML text of the objects for the declarations, options o (M.parse)
-- and the CA bundle (base64, or nil).
function M.render(declared, o, ca)
  local name = o.name or default_name(o.script)
  local validating, mutating, docs, comments = {}, {}, {}, {}
  for _, h in ipairs(declared) do
    if h.kind == 'validating' then validating[#validating + 1] = admission_webhook(h, o, ca)
    elseif h.kind == 'mutating' then mutating[#mutating + 1] = admission_webhook(h, o, ca) end
  end
  if #validating > 0 then docs[#docs + 1] = configuration('ValidatingWebhookConfiguration', name, o, validating) end
  if #mutating > 0 then docs[#docs + 1] = configuration('MutatingWebhookConfiguration', name, o, mutating) end
  local out = {}
  for _, d in ipairs(docs) do out[#out + 1] = '---\n' .. core.yaml.encode(d) end
  for _, h in ipairs(declared) do
    if h.kind == 'conversion' then
      local crd = h.crd or 'PLURAL.GROUP'
      local stanza = core.yaml.encode { spec = { conversion = { strategy = 'Webhook', webhook = {
        conversionReviewVersions = array { 'v1' }, clientConfig = client_config(o, h.path, ca) } } } }
      comments[#comments + 1] = ('# The conversion webhook %s of CustomResourceDefinition %s: merge this into it\n'
        .. '# (kubectl patch customresourcedefinition %s --type merge --patch-file FILE, with the lines\n'
        .. '# below uncommented)%s\n'):format(h.path, crd, crd,
        o.inject_ca_from and ', and annotate it cert-manager.io/inject-ca-from: ' .. o.inject_ca_from or '')
        .. stanza:gsub('[^\n]*\n', '#   %0')
    end
  end
  return table.concat(out) .. table.concat(comments)
end

--- Entry point: `klua webhook-config ARGS...`.
function M.main(...)
  local o, err = M.parse({ ... })
  if not o then return fail(err, 2) end
  local ca
  if o.ca_bundle then
    local f, ferr = io.open(o.ca_bundle, 'rb')
    if not f then return fail('--ca-bundle: ' .. tostring(ferr), 1) end
    local pem = f:read('a')
    f:close()
    if not pem:find('-----BEGIN CERTIFICATE-----', 1, true) then
      return fail(('--ca-bundle %s holds no PEM certificate'):format(o.ca_bundle), 1)
    end
    ca = jsonpatch.base64(pem)
  end
  local chunk, lerr = loadfile(o.script)
  if not chunk then return fail(lerr, 1) end
  webhook.collect_only()
  klua.args = {}
  for _, name in ipairs(INERT) do klua[name] = function() return inert end end
  local ok, rerr = xpcall(chunk, debug.traceback)
  if not ok then return fail(('%s failed while klua collected its webhooks: %s'):format(o.script, rerr), 1) end
  local declared = webhook.declared()
  if #declared == 0 then return fail(('%s declares no webhook (klua.webhook.validating, ...)'):format(o.script), 1) end
  if not ca and not o.inject_ca_from then
    io.stderr:write('klua webhook-config: no --ca-bundle nor --inject-ca-from: the API server trusts the '
      .. 'webhook\'s certificate only if its system roots do\n')
  end
  io.stdout:write(M.render(declared, o, ca))
  io.stdout:flush()
  klua.stop(0)
end

return M
