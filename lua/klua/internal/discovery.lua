--- Resource discovery: turns the names people type (kubectl's names) into
-- the group, version and plural the API serves.
--
-- Accepted forms: "pods", "pod", "po", "Pod", "deployments.apps",
-- "deploy.apps", "deployments.v1.apps", "apps/v1/deployments", "v1/pods",
-- and custom resources by plural, singular, kind or short name once their
-- CRD exists, at whichever version serves them, the group's preferred one
-- first (M.group_versions). Results are cached; an unknown name refreshes
-- the cache once, so a CRD created a moment ago is found.
local core = require('klua.core')
local json = core.json

local M = {}

local cache = { groups = nil, lists = {} }

local function get_json(path)
  local status, body, why = core.request('GET', path)
  if not status then
    return nil, ('cannot reach the API server: %s'):format(why)
  end
  if status ~= 200 then
    local obj = json.decode(body)
    local msg = type(obj) == 'table' and obj.message or body
    return nil, ('GET %s failed: %d %s'):format(path, status, msg), status
  end
  local obj, err = json.decode(body)
  if not obj then return nil, ('GET %s returned invalid JSON: %s'):format(path, err) end
  return obj
end

--- Returns the resources (APIResourceList.resources) of a group ('' for
-- core) at a version, or nil and an error message.
function M.resources_of(group, version)
  local gv = group == '' and version or (group .. '/' .. version)
  if cache.lists[gv] == nil then
    local list, err, status = get_json(group == '' and ('/api/' .. gv) or ('/apis/' .. gv))
    if not list then
      if status == 404 then list = { resources = {} } else return nil, err end
    end
    cache.lists[gv] = list.resources or {}
  end
  return cache.lists[gv]
end

--- Returns {{group=, version=}, ...} in the order kubectl's RESTMapper
-- prefers them (client-go restmapper.NewDiscoveryRESTMapper): core v1, then
-- each group at its preferred version and then at its other versions, as
-- discovery lists them, since a group's resources need not all be served at
-- one version (a CRD served at v1 only in a group another CRD prefers at v2).
function M.group_versions()
  if not cache.groups then
    local groups, err = get_json('/apis')
    if not groups then return nil, err end
    local out = { { group = '', version = 'v1' } }
    for _, g in ipairs(groups.groups or {}) do
      local preferred = (g.preferredVersion or (g.versions or {})[1] or {}).version
      if preferred then out[#out + 1] = { group = g.name, version = preferred } end
      for _, v in ipairs(g.versions or {}) do
        if v.version ~= preferred then out[#out + 1] = { group = g.name, version = v.version } end
      end
    end
    cache.groups = out
  end
  return cache.groups
end

local function matches(r, name)
  if r.name:find('/') then return false end -- a subresource such as pods/status
  local lname = name:lower()
  if r.name == lname or (r.singularName or '') == lname or (r.kind or ''):lower() == lname then
    return true
  end
  for _, s in ipairs(r.shortNames or {}) do
    if s == lname then return true end
  end
  return false
end

local function describe(r, group, version, all)
  local sub = {}
  for _, other in ipairs(all) do
    local parent, child = other.name:match('^([^/]+)/(.+)$')
    if parent == r.name then sub[child] = true end
  end
  return {
    group = group,
    version = version,
    resource = r.name,
    kind = r.kind,
    namespaced = r.namespaced and true or false,
    verbs = r.verbs or {},
    subresources = sub,
    api_version = group == '' and version or (group .. '/' .. version),
  }
end

local function find_in(group, version, name)
  local list, err = M.resources_of(group, version)
  if not list then return nil, err end
  for _, r in ipairs(list) do
    if matches(r, name) then return describe(r, group, version, list) end
  end
  return false
end

local function search(name, group, version)
  if version then return find_in(group, version, name) end
  local gvs, err = M.group_versions()
  if not gvs then return nil, err end
  for _, gv in ipairs(gvs) do
    if group == nil or gv.group == group then
      local found, ferr = find_in(gv.group, gv.version, name)
      if found == nil then return nil, ferr end
      if found then return found end
    end
  end
  return false
end

--- Splits a name into (resource, group or nil, version or nil).
local function parse(name)
  local parts = {}
  for p in name:gmatch('[^/]+') do parts[#parts + 1] = p end
  if #parts == 3 then return parts[3], parts[1], parts[2] end
  if #parts == 2 then return parts[2], '', parts[1] end
  local res, rest = name:match('^([^.]+)%.(.+)$')
  if not res then return name, nil, nil end
  local version, group = rest:match('^(v%d+[a-z0-9]*)%.(.+)$')
  if version then return res, group, version end
  return res, rest, nil
end

--- Resolves a resource name as kubectl does. Returns a table {group=,
-- version=, resource=, kind=, namespaced=, verbs=, subresources=,
-- api_version=}, or nil and an error message.
function M.resolve(name)
  if type(name) ~= 'string' or name == '' then
    return nil, 'a resource name is needed, such as "pods" or "deployments.apps"'
  end
  local res, group, version = parse(name)
  for attempt = 1, 2 do
    local found, err = search(res, group, version)
    if found == nil then return nil, err end
    if found then return found end
    if attempt == 1 then M.invalidate() end
  end
  return nil, ('the server doesn\'t have a resource type "%s"'):format(name)
end

--- Forgets everything discovered, e.g. after a CRD was created.
function M.invalidate()
  cache.groups = nil
  cache.lists = {}
end

--- The collection path of a resolved resource, in namespace ns (nil for all
-- namespaces or a cluster-scoped resource).
function M.collection_path(r, ns)
  local base = r.group == '' and ('/api/' .. r.version) or ('/apis/' .. r.group .. '/' .. r.version)
  if r.namespaced and ns and ns ~= '' then
    return base .. '/namespaces/' .. ns .. '/' .. r.resource
  end
  return base .. '/' .. r.resource
end

return M
