--- What several specs hand to klua or to the server: kubeconfig files and the custom
-- resource definitions of the example.com group.
local cjson = require('cjson')
local testing = require('klua.testing')

local M = {}

--- Writes a kubeconfig whose current context joins one cluster and one user, and returns
-- its path. opts: server (URL), ca (a certificate-authority file), cluster (more lines of
-- the cluster, e.g. {'insecure-skip-tls-verify: true'}), user (the user as a YAML flow
-- mapping, e.g. '{token: abc}'; default '{}'), namespace (the context's).
function M.kubeconfig(path, opts)
  local cluster = { '    server: ' .. opts.server }
  if opts.ca then cluster[#cluster + 1] = '    certificate-authority: ' .. opts.ca end
  for _, line in ipairs(opts.cluster or {}) do cluster[#cluster + 1] = '    ' .. line end
  local context = 'cluster: c, user: u' .. (opts.namespace and (', namespace: ' .. opts.namespace) or '')
  testing.write_file(path, table.concat({
    'apiVersion: v1',
    'kind: Config',
    'clusters:',
    '- name: c',
    '  cluster:',
    table.concat(cluster, '\n'),
    'users:',
    '- name: u',
    '  user: ' .. (opts.user or '{}'),
    'contexts:',
    '- name: ctx',
    '  context: {' .. context .. '}',
    'current-context: ctx',
    '',
  }, '\n'))
  return path
end

--- The path of custom resource definitions on the server.
--- A script that waits for its ConfigMap informer on namespace ns to sync, prints the
-- names it lists, comma-separated and sorted, and stops; preamble (optional) goes first.
function M.list_configmaps_script(ns, preamble)
  return (preamble or '') .. ([[
local cms = klua.informer { resource = 'configmaps', namespace = '%s' }
klua.on_synced(function()
  local names = {}
  for _, cm in ipairs(cms:list()) do names[#names + 1] = cm.metadata.name end
  table.sort(names)
  print(table.concat(names, ','))
  klua.stop()
end)
]]):format(ns)
end

M.CRDS = '/apis/apiextensions.k8s.io/v1/customresourcedefinitions'

-- A namespaced example.com resource that keeps any fields and has a status
-- subresource, served at each of served (default {'v1'}) and stored at the last;
-- extra is merged into each version.
local function crd(plural, kind, short, extra, served)
  local versions = {}
  served = served or { 'v1' }
  for i, name in ipairs(served) do
    local version = { name = name, served = true, storage = i == #served,
      subresources = { status = {} },
      schema = { openAPIV3Schema = { type = 'object', ['x-kubernetes-preserve-unknown-fields'] = true } } }
    for k, v in pairs(extra or {}) do version[k] = v end
    versions[i] = version
  end
  return cjson.encode {
    apiVersion = 'apiextensions.k8s.io/v1', kind = 'CustomResourceDefinition',
    metadata = { name = plural .. '.example.com' },
    spec = { group = 'example.com', scope = 'Namespaced',
      names = { plural = plural, singular = kind:lower(), kind = kind, shortNames = { short } },
      versions = versions },
  }
end

--- The Deployment web (2 replicas of nginx:1.25, labelled app=web), as YAML
-- for `kubectl apply -f -`.
M.WEB_DEPLOYMENT = [[
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web}
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: nginx
        image: nginx:1.25
        ports:
        - containerPort: 80
]]

--- widgets.example.com (kind Widget, short name wd), as JSON for `kubectl apply -f -`
-- or a POST to M.CRDS.
M.WIDGETS_CRD = crd('widgets', 'Widget', 'wd')

--- gadgets.example.com (kind Gadget, short name gd), whose table output adds the columns
-- Size (.spec.size) and, with -o wide, Colour (.spec.colour).
local GADGET_COLUMNS = { additionalPrinterColumns = {
  { name = 'Size', type = 'integer', jsonPath = '.spec.size' },
  { name = 'Colour', type = 'string', jsonPath = '.spec.colour', priority = 1 },
} }
M.GADGETS_CRD = crd('gadgets', 'Gadget', 'gd', GADGET_COLUMNS)

--- gadgets.example.com as M.GADGETS_CRD, served at v1 and v2 (stored at v2): with
-- M.WIDGETS_CRD (v1 only), example.com's preferred version, v2, lacks widgets, as
-- gateway.networking.k8s.io's v1 lacks TCPRoute (served at v1alpha2).
M.GADGETS_V2_CRD = crd('gadgets', 'Gadget', 'gd', GADGET_COLUMNS, { 'v1', 'v2' })

--- gizmos.example.com (kind Gizmo, short name gz) whose table output has the
-- printer columns given (additionalPrinterColumns entries), as JSON for
-- `kubectl apply -f -`.
function M.gizmos_crd(columns)
  return crd('gizmos', 'Gizmo', 'gz', { additionalPrinterColumns = columns })
end

--- gizmos.example.com with the columns Size (.spec.size), with -o wide
-- Colour (.spec.colour), and Age.
M.GIZMOS_CRD = M.gizmos_crd {
  { name = 'Size', type = 'integer', jsonPath = '.spec.size' },
  { name = 'Colour', type = 'string', jsonPath = '.spec.colour', priority = 1 },
  { name = 'Age', type = 'date', jsonPath = '.metadata.creationTimestamp' },
}

--- A ServiceAccount `name` in namespace default of sandbox sb, bound to a Role of its
-- own that allows `verbs` (a list, such as {'list'}) on configmaps, and a kubeconfig
-- (in dir; klua sends a token over https only, so a sandbox with tls) whose user is its token, from the TokenRequest API as `kubectl create
-- token` asks for it; the sandbox authorizes that token as kube-apiserver's RBAC
-- authorizer does (docs/sandbox.md). Returns the kubeconfig's path and grant(verbs),
-- which rewrites the Role.
function M.service_account(sb, dir, name, verbs)
  local function grant(v)
    sb:apply(cjson.encode {
      apiVersion = 'rbac.authorization.k8s.io/v1', kind = 'Role',
      metadata = { name = name, namespace = 'default' },
      rules = { { apiGroups = { '' }, resources = { 'configmaps' }, verbs = v } },
    })
  end
  sb:kubectl('create serviceaccount ' .. name)
  grant(verbs)
  sb:apply(cjson.encode {
    apiVersion = 'rbac.authorization.k8s.io/v1', kind = 'RoleBinding',
    metadata = { name = name, namespace = 'default' },
    roleRef = { apiGroup = 'rbac.authorization.k8s.io', kind = 'Role', name = name },
    subjects = { { kind = 'ServiceAccount', name = name, namespace = 'default' } },
  })
  local token = sb:kubectl('create token ' .. name):gsub('%s+$', '')
  local kubeconfig = M.kubeconfig(dir .. '/' .. name .. '.kubeconfig',
    { server = sb.url, ca = sb.url:match('^https:') and (sb.dir .. '/ca.crt'), user = ('{token: %s}'):format(token),
      namespace = 'default' })
  return kubeconfig, grant
end

return M
