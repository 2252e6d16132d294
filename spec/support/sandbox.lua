--- Starts and drives a sandbox API server (scripts/sandbox-apiserver) from specs: the
-- harness's sandbox (lua/klua/testing.lua, docs/testing.md), whose every method a spec
-- can use.
--
--   local sandbox = require('support.sandbox')
--   local sb = sandbox.start{ tls = true, auth = 'token' }
--   local status, obj = sb:json('GET', '/api/v1/namespaces/default')
--   sb:stop()
--
-- A describe block whose specs share a server (or get one each) declares it with
-- testing.with_sandbox{...} instead (spec/README.md).
--
-- Each server gets its own temporary directory, sb.dir, holding the kubeconfig, kubectl's
-- discovery cache and, with tls, the certificates the server made: ca.crt, ca.key,
-- server.crt, server.key, client.crt and client.key (CN=sandbox-admin, O=system:masters).
local assert = require('luassert')
local cjson = require('cjson')
local testing = require('klua.testing')

local M = {}

--- Starts a server on a free port and waits until it listens (testing.sandbox).
M.start = testing.sandbox

--- A function that creates a new namespace on sb each time it is called, named
-- PREFIX-1, PREFIX-2, ..., with a ConfigMap named configmap (data k=v) in it if given,
-- and returns its name: specs that share a server each work in a namespace of their own.
function M.namespaces(sb, prefix, configmap)
  local count = 0
  return function()
    count = count + 1
    local name = prefix .. '-' .. count
    local status = sb:json('POST', '/api/v1/namespaces', { metadata = { name = name } })
    assert(status == 201, ('cannot create namespace %s: %s'):format(name, status))
    if configmap then sb:kubectl('-n ' .. name .. ' create configmap ' .. configmap .. ' --from-literal=k=v') end
    return name
  end
end

--- The API path of the ConfigMaps of namespace ns, or of the one named name in it.
function M.configmap_path(ns, name)
  return '/api/v1/namespaces/' .. ns .. '/configmaps' .. (name and ('/' .. name) or '')
end

--- The spec of the Lease name in namespace ns on sb, or nil while there is none.
function M.lease(sb, ns, name)
  local out, ok = sb:try_kubectl('-n ' .. ns .. ' get lease ' .. name .. ' -o json')
  return ok and cjson.decode(out).spec or nil
end

--- Fails unless an answer (the status and decoded body that sb:json returns) is a
-- failure's Status: HTTP code, reason and, when given, message.
function M.failed(status, body, code, reason, message)
  assert.equals(code, status)
  assert.equals(reason, body.reason)
  if message then assert.equals(message, body.message) end
end

--- Creates the ConfigMap name in namespace ns on sb, with more metadata (labels,
-- ownerReferences, ...) and data if given; fails unless the server answers 201.
-- Returns the object stored.
function M.create_configmap(sb, ns, name, metadata, data)
  local meta = { name = name }
  for k, v in pairs(metadata or {}) do meta[k] = v end
  local status, obj = sb:json('POST', M.configmap_path(ns), { metadata = meta, data = data })
  assert(status == 201, ('cannot create configmap %s/%s: %s'):format(ns, name, status))
  return obj
end

return M
