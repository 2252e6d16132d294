--- Owner references: which object controls which.
--
-- A controller marks what it creates with a controller reference to its
-- owner, so the garbage collector deletes the children with the owner and
-- the controller can find the owner of a child it sees change. These follow
-- controller-runtime's controllerutil. Objects to change are mutable tables
-- (klua.copy(obj)) or klua.edit(obj); objects only read may be read-only
-- views. Errors follow
-- klua.helpers' convention: a mistake in the call raises, a problem with the
-- objects' data returns nil and an error {reason, message}.
local M = {}

local array_mt = {}

--- Sets the metatable that marks the lists these functions create as JSON
-- arrays (the host's, so that a new list re-encodes as [] and not {}).
function M.set_array_mt(mt) array_mt = mt end

local util = require('klua.internal.objutil')
local field = util.field
local non_empty = util.non_empty
local refusal = util.refusal

local function ns_of(obj)
  local ns = field(field(obj, 'metadata'), 'namespace')
  return non_empty(ns) and ns or ''
end

-- The group of an apiVersion: "apps" for "apps/v1", "" for the core "v1".
local function group_of(api_version)
  return type(api_version) == 'string' and (api_version:match('^(.*)/') or '') or ''
end

-- Two references name the same object when group, kind and name agree: the
-- version may differ between clients, and a recreated owner keeps its name.
local function same_object(a, b)
  return group_of(field(a, 'apiVersion')) == group_of(b.apiVersion)
      and field(a, 'kind') == b.kind and field(a, 'name') == b.name
end

--- The ownerReferences entry of obj that has controller = true, or nil.
-- obj may be a view.
-- @param obj a view or a table
-- @return the ownerReferences entry, or nil
-- @usage
-- local ref = klua.helpers.get_controller_of(pod)
-- if ref and ref.kind == 'PodSet' then q:add(pod.metadata.namespace .. '/' .. ref.name) end
function M.get_controller_of(obj)
  local refs = field(field(obj, 'metadata'), 'ownerReferences')
  return (util.find(refs, function(ref) return field(ref, 'controller') == true end))
end

--- Whether owner (by uid) is the controller of obj. Both may be views.
-- @param obj a view or a table
-- @param owner a view or a table with metadata.uid
-- @return true or false
-- @usage
-- if not klua.helpers.is_controlled_by(pod, podset) then return end
function M.is_controlled_by(obj, owner)
  local ref = M.get_controller_of(obj)
  local uid = field(field(owner, 'metadata'), 'uid')
  return ref ~= nil and uid ~= nil and field(ref, 'uid') == uid
end

local function owner_ref(owner, opts)
  local md = field(owner, 'metadata')
  local api_version = opts.api_version or field(owner, 'apiVersion')
  local kind = opts.kind or field(owner, 'kind')
  if not non_empty(api_version) or not non_empty(kind) then
    return nil, refusal('MissingKind', '%s',
      'set_controller_reference: the owner has no apiVersion/kind (objects from a list lack them);'
      .. " pass them: set_controller_reference(owner, obj, {api_version = 'apps/v1', kind = 'Deployment'})")
  end
  local name, uid = field(md, 'name'), field(md, 'uid')
  if not non_empty(name) or not non_empty(uid) then
    return nil, refusal('MissingUID', '%s', 'set_controller_reference: the owner needs metadata.name and'
      .. ' metadata.uid; use the owner as read from the API or the cache')
  end
  return { apiVersion = api_version, kind = kind, name = name, uid = uid,
           controller = true, blockOwnerDeletion = true }
end

-- Namespaced owners may only own objects in their own namespace.
local function check_scope(owner, obj)
  local owner_ns, obj_ns = ns_of(owner), ns_of(obj)
  if owner_ns == '' or owner_ns == obj_ns then return nil end
  if obj_ns == '' then
    return refusal('ClusterScopedWithNamespacedOwner',
      "a cluster-scoped object must not have a namespaced owner (owner's namespace %s);"
      .. ' if the object is namespaced, set obj.metadata.namespace first', owner_ns)
  end
  return refusal('CrossNamespaceOwner',
    "cross-namespace owner references are disallowed: owner's namespace %s, object's namespace %s",
    owner_ns, obj_ns)
end

--- Makes owner the controller of obj: adds to obj.metadata.ownerReferences
-- {apiVersion, kind, name, uid, controller = true, blockOwnerDeletion = true},
-- or replaces the entry that already refers to owner.
-- owner may be a view; obj must be a mutable table or klua.edit(obj). Objects from a list
-- carry no apiVersion/kind: give them as opts = {api_version =, kind =}.
-- Returns true, or nil and an error {reason, message} when obj already has
-- another controller (reason 'AlreadyOwned'), the namespaces do not allow
-- the reference ('CrossNamespaceOwner', 'ClusterScopedWithNamespacedOwner'),
-- or the owner lacks apiVersion/kind ('MissingKind') or name/uid
-- ('MissingUID'). Raises when obj is not a mutable table or opts not a table.
-- @param owner the owner, a view or a table
-- @param obj the owned object, a mutable table or klua.edit(obj)
-- @param opts optional {api_version=, kind=}
-- @return true, or nil and err {reason, message}
-- @raise when obj is not a mutable table or opts not a table
-- @usage
-- local pod = { apiVersion = 'v1', kind = 'Pod', metadata = { name = 'web-0', namespace = 'default' } }
-- assert(klua.helpers.set_controller_reference(podset, pod))
function M.set_controller_reference(owner, obj, opts)
  util.check_mutable('set_controller_reference', obj)
  if opts ~= nil and type(opts) ~= 'table' then
    error("set_controller_reference: opts must be a table such as {api_version = 'apps/v1', kind = 'Deployment'}", 2)
  end
  local ref, err = owner_ref(owner, opts or {})
  if not ref then return nil, err end
  err = check_scope(owner, obj)
  if err then return nil, err end
  local current = M.get_controller_of(obj)
  if current and not same_object(current, ref) then
    local md = field(obj, 'metadata')
    return nil, refusal('AlreadyOwned', 'Object %s/%s is already owned by another %s controller %s',
      ns_of(obj), tostring(field(md, 'name') or ''), tostring(field(current, 'kind')),
      tostring(field(current, 'name')))
  end
  local md = util.subtable('set_controller_reference', obj, 'metadata', 'obj.metadata')
  local refs = util.subtable('set_controller_reference', md, 'ownerReferences', 'obj.metadata.ownerReferences',
    array_mt)
  for i = 1, #refs do
    if same_object(refs[i], ref) then
      refs[i] = ref
      return true
    end
  end
  refs[#refs + 1] = ref
  return true
end

return M
