-- The klua script that scripts/soak runs under chaos: a controller that
-- writes, plus a record of everything its informers delivered.
--
--   klua run soak-controller.lua DIR
--
-- For every ConfigMap labelled soak/role=source it keeps a copy named
-- NAME-owned in the same namespace, labelled soak/role=owned, controlled by
-- the source (an ownerReference with its uid) and holding the source's data;
-- when the source goes (deleted, or relabelled out of the selector) the copy
-- is deleted, since nothing else would collect it.
--
-- Three informers: "sources" and "owned" (by label, all namespaces) and
-- "ns0" (every ConfigMap in namespace soak-0). Every handler call is
-- appended to DIR/events-INFORMER.log as one line:
--   add KEY RV INITIAL | update KEY OLD_RV NEW_RV | delete KEY RV FINAL_STATE_UNKNOWN
-- DIR/synced appears once all three have synced. Writing a number to
-- DIR/dump.req makes the script flush those logs, write each cache as sorted
-- "KEY RV" lines to DIR/cache-INFORMER.txt and its counters as JSON to
-- DIR/stats.json, and then write the same number to DIR/dump.done.
local dir = ...
assert(dir and dir ~= '', 'usage: klua run soak-controller.lua DIR')

local ROLE = 'soak/role'
local informers = {
  sources = klua.informer { resource = 'configmaps', label_selector = ROLE .. '=source' },
  owned = klua.informer { resource = 'configmaps', label_selector = ROLE .. '=owned' },
  ns0 = klua.informer { resource = 'configmaps', namespace = 'soak-0' },
}
local sources, owned = informers.sources, informers.owned

local function key_of(o)
  local md = o.metadata
  return md.namespace .. '/' .. md.name
end

-- Handler calls go to one buffered log per informer, flushed on each dump.
local logs, delivered = {}, {}
for name, inf in pairs(informers) do
  local f = assert(io.open(('%s/events-%s.log'):format(dir, name), 'w'))
  f:setvbuf('full', 1 << 16)
  logs[name], delivered[name] = f, 0
  local function record(...)
    f:write(table.concat({ ... }, ' '), '\n')
    delivered[name] = delivered[name] + 1
  end
  inf:on('add', function(o, initial)
    record('add', key_of(o), o.metadata.resourceVersion, tostring(initial))
  end)
  inf:on('update', function(old, new)
    record('update', key_of(new), old.metadata.resourceVersion, new.metadata.resourceVersion)
  end)
  inf:on('delete', function(o, unknown)
    record('delete', key_of(o), o.metadata.resourceVersion, tostring(unknown))
  end)
end

-- ---- the controller ---------------------------------------------------------

local function data_of(o)
  local d = o and o.data
  if d == nil or d == klua.null then return {} end
  return type(d) == 'table' and d or klua.copy(d)
end

local function same_data(a, b)
  for k, v in pairs(a) do if b[k] ~= v then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end

local function controller_uid(o)
  local ref = klua.helpers.get_controller_of(o)
  return ref and ref.uid
end

-- The owned copy src should have, as a new object.
local function desired(src)
  local md = src.metadata
  local copy = {
    apiVersion = 'v1',
    kind = 'ConfigMap',
    metadata = { name = md.name .. '-owned', namespace = md.namespace, labels = { [ROLE] = 'owned' } },
  }
  local data = data_of(src)
  if next(data) then copy.data = data end
  assert(klua.helpers.set_controller_reference(src, copy, { api_version = 'v1', kind = 'ConfigMap' }))
  return copy
end

-- A cache that lags behind the server makes writes fail with conflicts or
-- "already exists"; the informer's next event brings the key back, and the
-- backoff covers the case where it does not.
local function write_failed(err)
  if klua.api.is_conflict(err) or klua.api.is_already_exists(err) or klua.api.is_not_found(err) then
    return klua.requeue()
  end
  return nil, err
end

local function remove_copy(copy)
  local _, err = klua.api.delete('configmaps', key_of(copy), { preconditions = { uid = copy.metadata.uid } })
  if err and not klua.api.is_not_found(err) then return write_failed(err) end
  return true
end

local function reconcile(key)
  local src = sources:get(key)
  local copy = owned:get(key .. '-owned')
  if not src then
    if copy then return remove_copy(copy) end
    return true
  end
  local want = desired(src)
  if not copy then
    local _, err = klua.api.create('configmaps', want)
    if err then return write_failed(err) end
    return true
  end
  if controller_uid(copy) == src.metadata.uid and same_data(data_of(copy), data_of(src)) then
    return true
  end
  local update = klua.copy(copy)
  update.data = want.data
  update.metadata.ownerReferences = want.metadata.ownerReferences
  local _, err = klua.api.update('configmaps', update)
  if err then return write_failed(err) end
  return true
end

local controller = klua.controller {
  name = 'soak-owned-copies',
  watches = { sources },
  owns = { owned },
  workers = 4,
  reconcile = reconcile,
}

-- ---- synced marker and dumps --------------------------------------------------

local function write_atomically(path, text)
  local f = assert(io.open(path .. '.tmp', 'w'))
  f:write(text)
  f:close()
  assert(os.rename(path .. '.tmp', path))
end

klua.on_synced(function() write_atomically(dir .. '/synced', 'synced\n') end)

local function dump(seq)
  local stats = { informers = {}, delivered = delivered, controller = controller:stats(), runtime = klua.stats() }
  for name, inf in pairs(informers) do
    logs[name]:flush()
    local lines = {}
    for _, o in ipairs(inf:list()) do lines[#lines + 1] = key_of(o) .. ' ' .. o.metadata.resourceVersion end
    table.sort(lines)
    write_atomically(('%s/cache-%s.txt'):format(dir, name), table.concat(lines, '\n') .. (#lines > 0 and '\n' or ''))
    stats.informers[name] = inf:stats()
  end
  write_atomically(dir .. '/stats.json', klua.json.encode(stats))
  write_atomically(dir .. '/dump.done', seq)
end

klua.every(0.2, function()
  local req = io.open(dir .. '/dump.req')
  if not req then return end
  local seq = req:read('a')
  req:close()
  os.remove(dir .. '/dump.req')
  dump(seq)
end)
