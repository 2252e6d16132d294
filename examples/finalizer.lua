--- finalizer: clean-up before deletion, with a finalizer.
--
--   klua run examples/finalizer.lua
--
-- A ConfigMap labelled klua.dev/guarded=true may have a companion named
-- <name>-backup in its namespace. When the guarded ConfigMap is deleted,
-- its companion must go too, and the deletion should leave a trace in the
-- Events. Nothing in the API server does that, and a controller that only
-- hears of the deletion afterwards (or not at all, if it was down) has
-- nothing left to act on. So the controller adds a finalizer,
-- demo.klua.dev/cleanup, to every guarded ConfigMap. Deleting an object
-- with a finalizer only sets metadata.deletionTimestamp; the object stays
-- until its last finalizer is removed. The controller sees that update,
-- cleans up, and removes its finalizer: then the API server deletes the
-- object.
--
-- A ConfigMap that loses the label is released: its finalizer is removed,
-- or nothing would ever let it be deleted.
local FINALIZER = 'demo.klua.dev/cleanup'
local GUARD_LABEL = 'klua.dev/guarded'
local COMPONENT = 'finalizer-example'

local guarded = klua.informer { resource = 'configmaps', label_selector = GUARD_LABEL .. '=true' }

local helpers = klua.helpers

local function is_guarded(obj)
  local labels = obj.metadata.labels
  return labels ~= nil and labels[GUARD_LABEL] == 'true'
end

-- Writes obj (a table read from the cache or the API, with its
-- resourceVersion) without our finalizer.
local function remove_finalizer(obj)
  helpers.remove_finalizer(obj, FINALIZER)
  return klua.api.update('configmaps', obj)
end

-- The clean-up: delete the companion, record what happened. It must be
-- safe to run twice: when removing the finalizer fails, it runs again.
local function clean_up(obj)
  local md = obj.metadata
  local backup = md.namespace .. '/' .. md.name .. '-backup'
  local _, err = klua.api.delete('configmaps', backup)
  if err and not klua.api.is_not_found(err) then return nil, err end
  local message = err and ('nothing to clean up: %s does not exist'):format(backup) or ('deleted ' .. backup)
  klua.log.info('%s/%s is being deleted: %s', md.namespace, md.name, message)
  klua.record_event(obj, { reason = 'CleanedUp', message = message, component = COMPONENT })
  return true
end

-- The object left the informer's selection (or is gone): if it still has
-- our finalizer, it lost its label, so release it.
local function release(key)
  local obj, err = klua.api.get('configmaps', key)
  if not obj then
    if klua.api.is_not_found(err) then return true end
    return nil, err
  end
  if is_guarded(obj) or not helpers.has_finalizer(obj, FINALIZER) then return true end
  klua.log.info('%s is no longer guarded: removing the finalizer', key)
  return remove_finalizer(obj)
end

local function reconcile(key)
  local cached = guarded:get(key)
  local ok, err
  if cached == nil then
    ok, err = release(key)
  elseif cached.metadata.deletionTimestamp then
    -- Being deleted. Without our finalizer the clean-up is done (or was
    -- never ours to do): the deletion completes without us.
    if not helpers.has_finalizer(cached, FINALIZER) then return end
    ok, err = clean_up(cached)
    if ok then ok, err = remove_finalizer(klua.copy(cached)) end
  elseif not helpers.has_finalizer(cached, FINALIZER) then
    -- The finalizer goes on before anything else happens to the object, so
    -- that its deletion cannot be missed from then on.
    local obj = klua.copy(cached)
    helpers.add_finalizer(obj, FINALIZER)
    ok, err = klua.api.update('configmaps', obj)
    if ok then klua.log.info('%s: added finalizer %s', key, FINALIZER) end
  else
    return
  end
  if ok then return end
  -- A conflict: the cache was behind the server. The change that made it
  -- so enqueues the key again; the requeue covers a change still on its way.
  if klua.api.is_conflict(err) then return klua.requeue() end
  return nil, err
end

klua.controller {
  name = COMPONENT,
  watches = { guarded },
  reconcile = reconcile,
}

klua.on_synced(function()
  klua.log.info('guarding %d ConfigMaps', #guarded:list())
end)
