-- `klua __complete`: the words of the shell completion that only the server
-- knows, asked for by src/cli/complete.c: the resources it serves (named as
-- `kubectl api-resources -o name` names them, which is what kubectl's own
-- completion offers) and its namespaces. Not part of the klua module: a
-- script has no use for it. Whatever fails prints nothing: a completion
-- that cannot reach the server offers nothing rather than an error.
local core = require 'klua.core'
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
-- "pods" for the core group, "deployments.apps" for the others, each group
-- at its preferred version.
local function resources()
  local out, lists = {}, { { path = '/api/v1', group = '' } }
  local groups = get('/apis')
  for _, g in ipairs(groups and groups.groups or {}) do
    local pv = g.preferredVersion or (g.versions or {})[1]
    if pv then lists[#lists + 1] = { path = '/apis/' .. pv.groupVersion, group = g.name } end
  end
  for _, l in ipairs(lists) do
    local list = get(l.path)
    for _, r in ipairs(list and list.resources or {}) do
      if not r.name:find('/') and has_verbs(r, 'list', 'watch') then
        out[#out + 1] = r.name .. (l.group ~= '' and ('.' .. l.group) or '')
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

--- Prints, one a line and sorted, the names of `what` ("resources" or
-- "namespaces") that begin with `cur`, each after `prefix` (the
-- "--namespace=" of a word that holds both).
function M.main(what, prefix, cur)
  local names = (what == 'namespaces' and namespaces or resources)()
  table.sort(names)
  for _, name in ipairs(names) do
    if name:sub(1, #cur) == cur then io.write(prefix, name, '\n') end
  end
end

return M
