--- configmap-sync: copies shared ConfigMaps into every namespace.
--
--   klua run examples/configmap-sync.lua
--
-- A ConfigMap labelled klua.dev/sync=true (in any namespace) is the source;
-- every other namespace gets a copy with the same name and data, labelled
-- klua.dev/sync-copy=true and annotated klua.dev/sync-source=<ns>/<name>.
-- Copies follow their source's data, appear in namespaces created later,
-- come back when deleted by hand, and are deleted when the source is
-- deleted or loses its label.
--
-- Owner references cannot cross namespaces, so the copies do not point at
-- their source that way (and no garbage collector would delete them): the
-- annotation ties a copy to its source, and this controller deletes copies
-- itself.
--
-- The work key is the source's key "namespace/name". Every change that
-- matters to a source -- to the source, to one of its copies, to the set of
-- namespaces -- enqueues that key, and reconcile makes the copies of that
-- source match it, whatever the change was.
local SOURCE_SELECTOR = 'klua.dev/sync=true'
local COPY_LABEL = 'klua.dev/sync-copy'
local SOURCE_ANNOTATION = 'klua.dev/sync-source'

local sources = klua.informer { resource = 'configmaps', label_selector = SOURCE_SELECTOR }
local copies = klua.informer { resource = 'configmaps', label_selector = COPY_LABEL .. '=true' }
local namespaces = klua.informer { resource = 'namespaces' }

local function key_of(obj)
  return obj.metadata.namespace .. '/' .. obj.metadata.name
end

local function source_key_of(copy)
  local annotations = copy.metadata.annotations
  return annotations and annotations[SOURCE_ANNOTATION]
end

local function accepts_objects(ns)
  return ns.metadata.deletionTimestamp == nil and (ns.status == nil or ns.status.phase ~= 'Terminating')
end

-- The namespaces that should hold a copy of source: all but its own.
local function target_namespaces(source)
  local wanted = {}
  if source == nil or source.metadata.deletionTimestamp then return wanted end
  for _, ns in ipairs(namespaces:list()) do
    local name = ns.metadata.name
    if name ~= source.metadata.namespace and accepts_objects(ns) then wanted[name] = true end
  end
  return wanted
end

-- The copies of the source under key, from the cache. A scan is fine for an
-- example; a controller with many sources would index copies by source.
local function copies_of(key)
  local found = {}
  for _, copy in ipairs(copies:list()) do
    if source_key_of(copy) == key then found[#found + 1] = copy end
  end
  return found
end

-- The copy of source in namespace ns as it should be. Views are
-- read-only: klua.copy turns the source's data into tables we may send
-- (and gives nil for a part the source does not have).
local function desired_copy(source, ns)
  return {
    apiVersion = 'v1',
    kind = 'ConfigMap',
    metadata = {
      name = source.metadata.name,
      namespace = ns,
      labels = { [COPY_LABEL] = 'true' },
      annotations = { [SOURCE_ANNOTATION] = key_of(source) },
    },
    data = klua.copy(source.data),
    binaryData = klua.copy(source.binaryData),
  }
end

local same = klua.helpers.deep_equal

local function up_to_date(current, want)
  return same(current.data, want.data) and same(current.binaryData, want.binaryData)
end

-- Objects in a copy's way, by "namespace/name uid": each is reported once,
-- not at every reconcile of its source.
local reported = {}

local function report_once(obj, fmt, ...)
  local id = key_of(obj) .. ' ' .. obj.metadata.uid
  if reported[id] then return end
  reported[id] = true
  klua.log.warn(fmt, ...)
end

-- Called when creating a copy found an object of that name that the cache
-- does not hold: either a copy made a moment ago whose add event has not
-- arrived yet (that event enqueues the source again), or a ConfigMap that
-- is not a copy, which this controller leaves alone.
local function check_existing(source, key)
  local existing, err = klua.api.get('configmaps', key)
  if not existing then return nil, err end
  if source_key_of(existing) ~= key_of(source) then
    report_once(existing, '%s exists and is not a copy of %s: left alone', key, key_of(source))
  end
  return true
end

-- Creates or updates the copy in ns. Returns nil, err when a write failed.
local function ensure_copy(source, ns)
  local want = desired_copy(source, ns)
  local current = copies:get(ns .. '/' .. want.metadata.name)
  if current == nil then
    local _, err = klua.api.create('configmaps', want)
    if err and klua.api.is_already_exists(err) then return check_existing(source, key_of(want)) end
    if err then return nil, err end
    klua.log.info('copied %s to %s', key_of(source), ns)
    return true
  end
  if source_key_of(current) ~= key_of(source) then
    report_once(current, '%s is a copy of %s, not of %s: left alone',
      key_of(current), source_key_of(current), key_of(source))
    return true
  end
  if up_to_date(current, want) then return true end
  -- Update the cached copy rather than a fresh object: it carries the
  -- resourceVersion, so a concurrent change makes this fail with a
  -- conflict instead of being overwritten.
  local updated = klua.copy(current)
  updated.data, updated.binaryData = want.data, want.binaryData
  local _, err = klua.api.update('configmaps', updated)
  if err then return nil, err end
  klua.log.info('updated the copy of %s in %s', key_of(source), ns)
  return true
end

local function delete_copy(copy)
  -- The uid precondition makes sure that what is deleted is the copy seen
  -- in the cache, not an object created since under the same name.
  local _, err = klua.api.delete('configmaps', key_of(copy), { preconditions = { uid = copy.metadata.uid } })
  if err == nil then
    klua.log.info('deleted %s (copy of %s)', key_of(copy), source_key_of(copy))
  elseif not klua.api.is_not_found(err) then
    return nil, err
  end
  return true
end

-- Makes the copies of the source under key match it: level-based, so it
-- does not matter which change enqueued the key, nor how many changes
-- were folded into one reconcile.
local function reconcile(key)
  local source = sources:get(key)
  local wanted = target_namespaces(source)
  local first_err
  local function note(ok, err)
    if not ok and first_err == nil then first_err = err end
  end
  for _, copy in ipairs(copies_of(key)) do
    if not wanted[copy.metadata.namespace] then note(delete_copy(copy)) end
  end
  for ns in pairs(wanted) do note(ensure_copy(source, ns)) end
  if first_err == nil then return end
  -- A conflict only means the cache was behind: try again soon. Other
  -- errors are logged by the controller and retried with backoff.
  if klua.api.is_conflict(first_err) then return klua.requeue() end
  return nil, first_err
end

local sync = klua.controller {
  name = 'configmap-sync',
  watches = { sources },
  workers = 2,
  reconcile = reconcile,
}

-- Copies are not owned through ownerReferences, so their changes are mapped
-- to their source by hand: a copy edited or deleted by someone else is put
-- back.
local function enqueue_source_of(copy)
  local key = source_key_of(copy)
  if key then sync:enqueue(key) end
end
copies:on('add', enqueue_source_of)
copies:on('update', function(_, new) enqueue_source_of(new) end)
copies:on('delete', enqueue_source_of)

-- A new namespace needs a copy of every source.
namespaces:on('add', function()
  for _, source in ipairs(sources:list()) do sync:enqueue(key_of(source)) end
end)

klua.on_synced(function()
  klua.log.info('syncing %d source ConfigMaps into %d namespaces', #sources:list(), #namespaces:list())
end)
