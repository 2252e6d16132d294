--- Declarative children: a reconcile says which children an owner should
-- have, and apply_children makes it so, as metacontroller's runtime does
-- with the children a sync hook returns: each desired child is applied
-- (server-side apply) with the owner as its controller and a label naming
-- the owner, and every child of the owner that is no longer desired is
-- deleted.
local refs = require('klua.owner')
local util = require('klua.internal.objutil')

local M = {}

-- The label apply_children puts on each child, whose value is the
-- owner's uid: what it selects the owner's children by.
local DEFAULT_LABEL = 'klua.dev/owner-uid'

local field = util.field
local refusal = util.refusal

-- A deep copy of a child as the script built it (tables only), keeping
-- the metatables that mark arrays.
local function copy(v)
  if type(v) ~= 'table' then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = copy(x) end
  return setmetatable(out, getmetatable(v))
end

local function is_informer(core, v) return core.is(v, 'informer') end

-- The places children are found in to be pruned: {r =, inf =} each, from
-- opts.informer (one or a list) or opts.resources (names).
local function prune_targets(core, opts)
  local infs = opts.informer
  if infs ~= nil then
    if is_informer(core, infs) then infs = { infs } end
    if type(infs) ~= 'table' or #infs == 0 then
      error('apply_children: opts.informer is an informer, or a list of them, caching the children', 3)
    end
    local out = {}
    for i, inf in ipairs(infs) do
      if not is_informer(core, inf) then
        error(('apply_children: opts.informer[%d] must be an informer made by klua.informer'):format(i), 3)
      end
      out[i] = { r = inf:resource(), inf = inf }
    end
    return out
  end
  local names = opts.resources
  if type(names) == 'string' then names = { names } end
  if type(names) ~= 'table' or #names == 0 then
    error('apply_children needs opts.informer (the informers that cache the children) or opts.resources '
      .. '(their resource names, such as {"configmaps"}): that is where children no longer desired are '
      .. 'found and deleted', 3)
  end
  local discovery = require('klua.internal.discovery')
  local out = {}
  for i, name in ipairs(names) do
    local r, err = discovery.resolve(name)
    if not r then return nil, refusal('NotFound', 'apply_children: %s', tostring(err)) end
    out[i] = { r = r }
  end
  return out
end

local function same_resource(a, b) return a.group == b.group and a.resource == b.resource end

local function covered(targets, r)
  for _, t in ipairs(targets) do
    if same_resource(t.r, r) then return true end
  end
  return false
end

local function name_of(r) return (r.group and r.group ~= '' and (r.resource .. '.' .. r.group)) or r.resource end

-- The desired child i made ready to apply: a copy with the owner's
-- namespace (when it has none), the label and the controller reference;
-- and its resource. Raises on a child that is no object with apiVersion,
-- kind and metadata.name; nil, err for what the data gets wrong.
local function prepare(i, child, owner, label, uid, targets)
  if type(child) ~= 'table' or type(child.apiVersion) ~= 'string' or type(child.kind) ~= 'string'
      or type(child.metadata) ~= 'table' or type(child.metadata.name) ~= 'string' then
    error(('apply_children: desired[%d] must be a table with apiVersion, kind and metadata.name '
      .. '(server-side apply addresses objects by name)'):format(i), 3)
  end
  local discovery = require('klua.internal.discovery')
  local r, rerr = discovery.resolve(child.apiVersion .. '/' .. child.kind)
  if not r then return nil, refusal('NotFound', 'apply_children: desired[%d]: %s', i, tostring(rerr)) end
  if not covered(targets, r) then
    return nil, refusal('NotPruned', 'apply_children: desired[%d] is a %s, which neither opts.informer nor '
      .. 'opts.resources covers: once no longer desired it would never be deleted; add %s', i, child.kind, name_of(r))
  end
  local obj = copy(child)
  local md = obj.metadata
  local ns = field(field(owner, 'metadata'), 'namespace')
  if r.namespaced and md.namespace == nil and ns then md.namespace = ns end
  md.labels = md.labels or {}
  md.labels[label] = uid
  local ok, err = refs.set_controller_reference(owner, obj)
  if not ok then return nil, err end
  return obj, r
end

-- The owner's children in target t: cached, or listed by the label.
local function children_in(api, t, ns, selector)
  if t.inf then return t.inf:list { namespace = ns, label_selector = selector } end
  local list, err = api.list(t.r, { namespace = ns, label_selector = selector })
  if not list then return nil, err end
  return list.items
end

--- Makes the children of owner those of `desired`, and no others. Each
-- desired child (a table with apiVersion, kind and metadata.name; the
-- owner's namespace when it has none) is applied with server-side apply
-- as opts.field_manager, with owner as its controller (an ownerReference
-- with controller = true and blockOwnerDeletion = true) and the label
-- opts.label (default "klua.dev/owner-uid") = the owner's uid. Then each
-- child of the owner (the label selects it, its controller reference must
-- name the owner's uid) that is not desired, and not being deleted
-- already, is deleted (in the background, with a uid precondition). The
-- children to prune are found in opts.informer's caches (an informer or a
-- list of them: no request) or, without it, listed from the API in
-- opts.resources (resource names) by the label; a desired child of
-- another resource is refused, since it could never be pruned. A child
-- that failed to apply stops the pruning: nothing is deleted on a partial
-- view of what is desired.
--
-- Each call sends one apply per desired child, changed or not (a server
-- answers an apply that changes nothing without writing). Under --dry-run
-- every apply and deletion is a dry run, logged.
-- @param owner the owner, a view or a table with apiVersion, kind, metadata.name and uid
-- @param desired a list of the children wanted (tables; not changed)
-- @param opts field_manager (required), informer or resources (one of them
--   required), label (default "klua.dev/owner-uid"), force (default true:
--   take fields other managers own, as a controller should for what it
--   manages), propagation_policy of the deletions (default "Background")
-- @return a summary {applied = the children as stored, in desired's order,
--   deleted = the children deleted, as they were}, or nil and err: the
--   first failure (an API error, or {reason, message} for the data:
--   'MissingUID', 'MissingKind', 'AlreadyOwned', 'CrossNamespaceOwner',
--   'NotPruned', 'NotFound')
-- @raise when opts lacks field_manager or both informer and resources, or a
--   desired child is not a table with apiVersion, kind and metadata.name
-- @usage
-- local summary, err = klua.helpers.apply_children(app, {
--   { apiVersion = 'v1', kind = 'ConfigMap', metadata = { name = app.metadata.name .. '-config' },
--     data = { mode = app.spec.mode } },
-- }, { field_manager = 'app-controller', informer = configmaps })
-- if not summary then return nil, err end
function M.apply_children(owner, desired, opts)
  if type(opts) ~= 'table' or type(opts.field_manager) ~= 'string' or opts.field_manager == '' then
    error('apply_children needs opts.field_manager: the name that owns the applied fields', 2)
  end
  if type(desired) ~= 'table' then error('apply_children: desired is a list of the children wanted', 2) end
  local label = opts.label or DEFAULT_LABEL
  if type(label) ~= 'string' or label == '' then error('apply_children: opts.label is a label key', 2) end
  local core = require('klua.core')
  local api = require('klua.api')
  local targets, terr = prune_targets(core, opts)
  if not targets then return nil, terr end
  local md = field(owner, 'metadata')
  local uid, ns = field(md, 'uid'), field(md, 'namespace')
  if not util.non_empty(uid) then
    return nil, refusal('MissingUID', 'apply_children: the owner needs metadata.uid; use the owner as read from the API or the cache')
  end
  local ready, wanted = {}, {}
  for i, child in ipairs(desired) do
    local obj, r = prepare(i, child, owner, label, uid, targets)
    if not obj then return nil, r end
    ready[i] = obj
    wanted[name_of(r) .. ' ' .. util.key(obj.metadata.namespace, obj.metadata.name)] = true
  end
  local force = opts.force ~= false
  local summary = { applied = setmetatable({}, core.json.array_mt), deleted = setmetatable({}, core.json.array_mt) }
  for _, obj in ipairs(ready) do
    local stored, err = api.apply(obj, { field_manager = opts.field_manager, force = force })
    if not stored then return nil, err end
    summary.applied[#summary.applied + 1] = stored
  end
  local selector = label .. '=' .. uid
  for _, t in ipairs(targets) do
    local found, lerr = children_in(api, t, ns, selector)
    if not found then return nil, lerr end
    for _, child in ipairs(found) do
      local cmd = child.metadata
      local key = util.key(cmd.namespace, cmd.name)
      if not wanted[name_of(t.r) .. ' ' .. key] and not cmd.deletionTimestamp and refs.is_controlled_by(child, owner) then
        local _, derr = api.delete(t.r, key, { preconditions = { uid = cmd.uid },
          propagation_policy = opts.propagation_policy or 'Background' })
        if derr and not api.is_not_found(derr) then return nil, derr end
        if not derr then summary.deleted[#summary.deleted + 1] = child end
      end
    end
  end
  return summary
end

return M
