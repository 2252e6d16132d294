-- Service-account tokens and RBAC (scripts/sandbox/rbac.py), so that a controller's
-- ServiceAccount, Roles and bindings can be tried here before a cluster: a token from the
-- TokenRequest API (kubectl create token) authenticates as the ServiceAccount, and its
-- requests are allowed only as kube-apiserver's RBAC authorizer allows them.
local sandbox = require('support.sandbox')

local RBAC = [[
apiVersion: v1
kind: ServiceAccount
metadata: {name: reader, namespace: team}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: cm-reader, namespace: team}
rules:
- {apiGroups: [""], resources: [configmaps], verbs: [get, list, watch]}
- {apiGroups: [""], resources: [pods/status], verbs: [patch]}
- {apiGroups: [""], resources: [secrets], verbs: [get], resourceNames: [visible]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: reader-cm, namespace: team}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: cm-reader}
subjects: [{kind: ServiceAccount, name: reader, namespace: team}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: lease-holder}
rules:
- {apiGroups: [coordination.k8s.io], resources: ["*"], verbs: ["*"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: reader-leases, namespace: team}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: lease-holder}
subjects: [{kind: Group, name: "system:serviceaccounts:team"}]
]]

describe('sandbox service accounts and RBAC', function()
  local sb, token

  -- A request made with the ServiceAccount's token: status, decoded body.
  local function as_reader(method, path, body, headers)
    headers = headers or {}
    headers.Authorization = 'Bearer ' .. token
    return sb:json(method, path, body, headers)
  end

  setup(function()
    sb = sandbox.start{}
    sb:kubectl('create namespace team')
    sb:kubectl('create namespace other')
    sb:apply(RBAC)
    token = sb:kubectl('create token reader -n team'):gsub('%s+$', '')
  end)
  teardown(function() sb:stop() end)

  it('issues a token for a ServiceAccount through the TokenRequest API', function()
    assert.matches('^sandbox%-sa%.', token)
    local status, tr = sb:json('POST', '/api/v1/namespaces/team/serviceaccounts/reader/token',
      { apiVersion = 'authentication.k8s.io/v1', kind = 'TokenRequest', spec = {} })
    assert.equals(201, status)
    assert.equals('TokenRequest', tr.kind)
    assert.truthy(tr.status.token ~= token, 'each request gets its own token')
    status = sb:json('POST', '/api/v1/namespaces/team/serviceaccounts/nobody/token', {})
    assert.equals(404, status)
  end)

  it('allows what a Role bound to the ServiceAccount grants, in that namespace', function()
    assert.equals(200, (as_reader('GET', '/api/v1/namespaces/team/configmaps')))
    assert.equals(200, (as_reader('GET', '/api/v1/namespaces/team/configmaps?watch=1&timeoutSeconds=1')))
  end)

  it('forbids the rest with the RBAC authorizer\'s words', function()
    local status, st = as_reader('POST', '/api/v1/namespaces/team/configmaps',
      { metadata = { name = 'x' } })
    sandbox.failed(status, st, 403, 'Forbidden',
      'configmaps is forbidden: User "system:serviceaccount:team:reader" cannot '
      .. 'create resource "configmaps" in API group "" in the namespace "team"')
    status, st = as_reader('GET', '/api/v1/namespaces/other/configmaps')
    assert.equals(403, status, 'a RoleBinding grants in its own namespace only')
    status, st = as_reader('GET', '/api/v1/configmaps')
    assert.equals(403, status)
    assert.matches('at the cluster scope', st.message, 1, true)
  end)

  it('matches subresources and resourceNames as written in the rule', function()
    sb:kubectl('-n team create secret generic visible --from-literal=a=b')
    sb:kubectl('-n team create secret generic hidden --from-literal=a=b')
    assert.equals(200, (as_reader('GET', '/api/v1/namespaces/team/secrets/visible')))
    local status, st = as_reader('GET', '/api/v1/namespaces/team/secrets/hidden')
    assert.equals(403, status)
    assert.matches('cannot get resource "secrets"', st.message, 1, true)
    assert.equals(403, (as_reader('GET', '/api/v1/namespaces/team/secrets')),
      'resourceNames never grant a list')
    status, st = as_reader('PATCH', '/api/v1/namespaces/team/pods/p/status', { status = {} },
      { ['Content-Type'] = 'application/merge-patch+json' })
    assert.equals(404, status, 'pods/status is granted: the pod is merely missing')
    status, st = as_reader('PATCH', '/api/v1/namespaces/team/pods/p', { spec = {} },
      { ['Content-Type'] = 'application/merge-patch+json' })
    assert.equals(403, status)
  end)

  it('grants a ClusterRole through a RoleBinding to a group, within the namespace', function()
    local lease = { apiVersion = 'coordination.k8s.io/v1', kind = 'Lease',
      metadata = { name = 'l' }, spec = { holderIdentity = 'me' } }
    assert.equals(201, (as_reader('POST', '/apis/coordination.k8s.io/v1/namespaces/team/leases',
      lease)))
    assert.equals(403, (as_reader('POST',
      '/apis/coordination.k8s.io/v1/namespaces/other/leases', lease)))
  end)

  it('leaves discovery open to every authenticated user, as kubectl needs', function()
    assert.equals(200, (as_reader('GET', '/api')))
    assert.equals(200, (as_reader('GET', '/apis/rbac.authorization.k8s.io/v1')))
    assert.equals(200, (as_reader('GET', '/version')))
  end)

  it('stops accepting a token once its ServiceAccount is deleted, as a bound token', function()
    sb:kubectl('-n team create serviceaccount shortlived')
    local t = sb:kubectl('create token shortlived -n team'):gsub('%s+$', '')
    assert.equals(200, (sb:json('GET', '/api', nil, { Authorization = 'Bearer ' .. t })))
    sb:kubectl('-n team delete serviceaccount shortlived')
    local status, st = sb:json('GET', '/api', nil, { Authorization = 'Bearer ' .. t })
    sandbox.failed(status, st, 401, 'Unauthorized')
  end)

  it('lists the RBAC kinds and ServiceAccounts as kubectl shows them', function()
    assert.matches('reader', sb:kubectl('-n team get serviceaccounts -o name'), 1, true)
    assert.matches('rolebinding.rbac.authorization.k8s.io/reader-cm',
      sb:kubectl('-n team get rolebindings -o name'), 1, true)
    assert.matches('clusterrole.rbac.authorization.k8s.io/lease-holder',
      sb:kubectl('get clusterroles -o name'), 1, true)
  end)
  it('lets a user act as another only with the impersonate verb, as kube-apiserver\'s filter', function()
    -- reader may impersonate the ServiceAccount team/other-sa and the group "auditors",
    -- which cannot read configmaps.
    sb:apply([[
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: impersonator, namespace: team}
rules:
- {apiGroups: [""], resources: [serviceaccounts], verbs: [impersonate], resourceNames: [other-sa]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: reader-impersonates, namespace: team}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: impersonator}
subjects: [{kind: ServiceAccount, name: reader, namespace: team}]
]])
    local other = { ['Impersonate-User'] = 'system:serviceaccount:team:other-sa' }
    local status, st = as_reader('GET', '/api/v1/namespaces/team/configmaps', nil, other)
    assert.equals(403, status)
    assert.equals('configmaps is forbidden: User "system:serviceaccount:team:other-sa" cannot list resource '
      .. '"configmaps" in API group "" in the namespace "team"', st.message)
    status, st = as_reader('GET', '/api/v1/namespaces/team/configmaps', nil,
      { ['Impersonate-User'] = 'system:serviceaccount:team:reader2' })
    assert.equals(403, status)
    assert.equals('serviceaccounts "reader2" is forbidden: User "system:serviceaccount:team:reader" cannot '
      .. 'impersonate resource "serviceaccounts" in API group "" in the namespace "team"', st.message)
    status, st = as_reader('GET', '/api', nil, { ['Impersonate-User'] = 'system:serviceaccount:team:other-sa',
      ['Impersonate-Extra-acme.com%2Fproject'] = 'blue' })
    assert.equals(403, status)
    assert.equals('userextras.authentication.k8s.io "blue" is forbidden: User "system:serviceaccount:team:reader" '
      .. 'cannot impersonate resource "userextras/acme.com/project" in API group "authentication.k8s.io" at the '
      .. 'cluster scope', st.message)
    status, st = sb:json('GET', '/api', nil, { ['Impersonate-Group'] = 'g' })
    assert.equals(500, status)
    assert.matches('without impersonating a user', st.message)
    -- The sandbox's own credentials may impersonate anyone; RBAC then binds that user.
    assert.equals(200, (sb:json('GET', '/api/v1/namespaces/team/configmaps', nil,
      { ['Impersonate-User'] = 'system:serviceaccount:team:reader' })))
    assert.equals(403, (sb:json('GET', '/api/v1/namespaces/team/configmaps', nil,
      { ['Impersonate-User'] = 'alice' })))
    assert.equals(200, (sb:json('GET', '/api/v1/namespaces/team/configmaps', nil,
      { ['Impersonate-User'] = 'alice', ['Impersonate-Group'] = 'system:masters' })))
  end)
end)
