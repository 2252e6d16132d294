-- `klua __complete`: the words of the shell completion that only the server
-- knows, asked for by src/cli/complete.c: the resources it serves (named as
-- `kubectl api-resources -o name` names them, which is what kubectl's own
-- completion offers), its namespaces, and the objects of one type (the
-- names `kubectl get TYPE <TAB>` offers: kubectl's CompGetResource lists
-- them in the namespace of -n, the context's, or all of them with -A). Not part of the klua module: a
-- script has no use for it. Whatever fails prints nothing: a completion
-- that cannot reach the server offers nothing rather than an error.
local core = require('klua.core')
local discovery = require('klua.internal.discovery')
local json = core.json

local M = {}

local function get(path)
  local status, body = core.request('GET', path)
  if status ~= 200 then return nil end
  local obj = json.decode(body)
  return type(obj) == 'table' and obj or nil
end

local function has_verbs(r, ...)
  local verbs = {}
  for _, v in ipairs(r.verbs or {}) do verbs[v] = true end
  for _, v in ipairs({ ... }) do
    if not verbs[v] then return false end
  end
  return true
end

-- Every resource klua watch can watch: listed and watched, no subresource;
-- "pods" for the core group, "deployments.apps" for the others, each once
-- whatever versions serve it, as kubectl api-resources (ServerPreferredResources)
-- lists a resource served only at a version its group does not prefer.
local function resources()
  local out, seen = {}, {}
  for _, gv in ipairs(discovery.group_versions() or {}) do
    local list = discovery.resources_of(gv.group, gv.version)
    for _, r in ipairs(list or {}) do
      local name = r.name .. (gv.group ~= '' and ('.' .. gv.group) or '')
      if not r.name:find('/') and has_verbs(r, 'list', 'watch') and not seen[name] then
        seen[name] = true
        out[#out + 1] = name
      end
    end
  end
  return out
end

local function namespaces()
  local out, list = {}, get('/api/v1/namespaces')
  for _, ns in ipairs(list and list.items or {}) do out[#out + 1] = ns.metadata.name end
  return out
end

-- The names of the objects of type `kind` in namespace `ns` ("" for the
-- context's, "*" for every namespace), as kubectl get TYPE names them.
local function objects(kind, ns)
  local r = discovery.resolve(kind)
  if not r then return {} end
  if ns == '' then ns = core.namespace() elseif ns == '*' then ns = nil end
  local out, seen, list = {}, {}, get(discovery.collection_path(r, ns))
  for _, obj in ipairs(list and list.items or {}) do
    local name = obj.metadata.name
    if not seen[name] then out[#out + 1], seen[name] = name, true end
  end
  return out
end

--- Prints, one a line and sorted, the names of `what` ("resources",
-- "namespaces", or "objects" of type `kind` in namespace `ns`) that begin
-- with `cur`, each after `prefix` (the "--namespace=" of a word that holds
-- both).
function M.main(what, prefix, cur, kind, ns)
  local names
  if what == 'objects' then names = objects(kind, ns)
  else names = (what == 'namespaces' and namespaces or resources)() end
  table.sort(names)
  for _, name in ipairs(names) do
    if name:sub(1, #cur) == cur then io.write(prefix, name, '\n') end
  end
end

return M
