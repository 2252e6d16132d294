--- What the helper modules share: readers that work alike on plain tables
-- and on views (userdata with a metatable), and the error value.
local M = {}

-- Whether writes to a value are taken: a table, and for the host also a
-- view from klua.edit (klua.helpers.set_writable).
local writable = function(v) return type(v) == 'table' end

--- Sets what says whether a value takes writes.
function M.set_writable(fn) writable = fn end

--- Whether v can be indexed as an object: a table or a view.
function M.indexable(v)
  local kind = type(v)
  return kind == 'table' or (kind == 'userdata' and getmetatable(v) ~= nil)
end

--- t[key] when t can be indexed, else nil.
function M.field(t, key)
  if M.indexable(t) then return t[key] end
end

--- The first item of list for which match(item) is true, and its index;
-- nil when none is or list cannot be indexed. list may be a view: it is
-- read by index up to its first nil.
function M.find(list, match)
  if not M.indexable(list) then return nil end
  local i = 1
  while true do
    local v = list[i]
    if v == nil then return nil end
    if match(v) then return v, i end
    i = i + 1
  end
end

--- Raises, naming fn, when obj takes no writes: a helper that changes an
-- object was handed a read-only view (or nothing). A table and a view
-- from klua.edit take them. The error points at the caller of fn.
function M.check_mutable(fn, obj)
  if not writable(obj) then
    error(fn .. ': obj must be a mutable table or klua.edit(obj) (views are read-only: use klua.edit(obj) '
      .. 'or klua.copy(obj))', 3)
  end
end

--- Raises, naming fn, unless t.reason is a non-empty string and t.message
-- nil or a string: what a condition and an Event ask of their reason and
-- message. example is a reason the error suggests. The error points at the
-- caller of fn, which calls this through one checker of its own.
function M.check_reason_and_message(fn, t, example)
  if not M.non_empty(t.reason) then
    error(("%s: reason must be a non-empty CamelCase word such as '%s'"):format(fn, example), 4)
  end
  if t.message ~= nil and type(t.message) ~= 'string' then
    error(fn .. ': message must be a string', 4)
  end
end

--- The table t[key] of the mutable object t, made (with metatable mt, if
-- given) when absent or not a table; a view of it in an object from
-- klua.edit, which takes writes throughout. Raises, naming fn and path,
-- when it is a read-only view: replacing it would drop its members, and the
-- fix is in the script (pass klua.copy(obj), whose parts are all tables).
function M.subtable(fn, t, key, path, mt)
  local v = t[key]
  if type(v) == 'table' or (v ~= nil and writable(v)) then return v end
  if M.indexable(v) then
    error(('%s: %s is a read-only view: pass klua.edit(obj), or klua.copy(obj), a mutable table throughout')
      :format(fn, path), 3)
  end
  v = setmetatable({}, mt)
  t[key] = v
  return v
end

--- An error value of the helpers: err.reason is a CamelCase word for code
-- to test, err.message (also tostring(err)) a sentence for people.
local error_mt = { __tostring = function(e) return e.message end }
function M.refusal(reason, fmt, ...)
  return setmetatable({ reason = reason, message = fmt:format(...) }, error_mt)
end

--- An object's key as the cache, the work queues and klua.api take it:
-- "namespace/name", or "name" for a cluster-scoped object (an empty
-- namespace counts as none), as client-go's MetaNamespaceKeyFunc makes it
-- and the store's C (kl_obj_key in src/wire/obj.c) does.
function M.key(namespace, name)
  if namespace and namespace ~= '' then return namespace .. '/' .. name end
  return name
end

--- Whether v is a string with at least one character.
function M.non_empty(v) return type(v) == 'string' and v ~= '' end

--- The keys of t, sorted: an object's members in the order that makes the
-- same input give the same output.
function M.sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys)
  return keys
end

--- The keys of old and new together, each once, sorted: the members a
-- comparison of two objects visits.
function M.union_keys(old, new)
  local keys, seen = {}, {}
  for k in pairs(old) do keys[#keys + 1], seen[k] = k, true end
  for k in pairs(new) do
    if not seen[k] then keys[#keys + 1] = k end
  end
  table.sort(keys)
  return keys
end

return M
