-- A klua script the specs run: it prints one line per handler call and,
-- when asked through a file, writes its cache to another file.
--   klua run recorder.lua RESOURCE [DUMP_PATH] [NAMESPACE]
-- Lines: "synced N", "add KEY RV INITIAL", "update KEY OLD_RV NEW_RV",
-- "delete KEY RV FINAL_STATE_UNKNOWN". Touching DUMP_PATH.req makes it
-- write "KEY RV" lines, sorted, to DUMP_PATH, then a "dumped" line.
local resource, dump, namespace = ...

local inf = klua.informer { resource = resource, namespace = namespace ~= '' and namespace or nil }

local function key(o)
  local md = o.metadata
  if md.namespace then return md.namespace .. '/' .. md.name end
  return md.name
end

local function out(...)
  io.write(table.concat({ ... }, ' '), '\n')
  io.flush()
end

inf:on('add', function(o, initial) out('add', key(o), o.metadata.resourceVersion, tostring(initial)) end)
inf:on('update', function(old, new)
  out('update', key(new), old.metadata.resourceVersion, new.metadata.resourceVersion)
end)
inf:on('delete', function(o, unknown) out('delete', key(o), o.metadata.resourceVersion, tostring(unknown)) end)
klua.on_synced(function() out('synced', #inf:list()) end)

if dump and dump ~= '' then
  klua.every(0.05, function()
    local req = io.open(dump .. '.req')
    if not req then return end
    req:close()
    os.remove(dump .. '.req')
    local lines = {}
    for _, o in ipairs(inf:list()) do lines[#lines + 1] = key(o) .. ' ' .. o.metadata.resourceVersion end
    table.sort(lines)
    local f = assert(io.open(dump .. '.tmp', 'w'))
    f:write(table.concat(lines, '\n'), '\n')
    f:close()
    os.rename(dump .. '.tmp', dump)
    local s = inf:stats()
    out('dumped', 'lists=' .. s.lists, 'relists=' .. s.relists, 'watches=' .. s.watches,
      'rewatches=' .. s.rewatches, 'errors=' .. s.errors, 'idle=' .. s.idle_restarts,
      'oversize=' .. s.oversize, 'malformed=' .. s.malformed)
  end)
end
