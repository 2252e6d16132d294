-- Cache transforms: klua.informer{transform = ...} changes every object before it is
-- cached or handed to a handler, as client-go's SharedIndexInformer.SetTransform does
-- (client-go applies it as an object enters the DeltaFIFO, deleted objects included).
-- klua.drop_fields(...) drops members in C (src/wire/prune.c), as SetTransform is most
-- used to drop metadata.managedFields; a function does anything else, in Lua
-- (src/lua/lua_transform.c). Either way the cache keeps fewer bytes, and views, get,
-- list, indexes and handlers all see the same, transformed object.
local testing = require('klua.testing')
local K = require('support.klua')

-- Prints one line per object the script sees: how, name, data.big, data.small,
-- the klua.dev/mark annotation (or the annotations' JSON size) and the JSON's size.
local SHOW = [[
local function show(how, obj)
  local ann = obj.metadata.annotations
  print(how, obj.metadata.name, tostring(obj.data and obj.data.big), tostring(obj.data and obj.data.small),
    tostring(ann and (ann['klua.dev/mark'] or #tostring(ann))), #tostring(obj))
end
local function watch(inf)
  inf:on('add', function(obj) show('add', obj) end)
  inf:on('update', function(_, obj) show('update', obj) end)
  inf:on('delete', function(obj) show('delete', obj) end)
end
]]

local SCRIPT = SHOW .. [[
local cms = klua.informer { resource = 'configmaps', namespace = 'default',
  transform = klua.drop_fields('data.big', 'metadata.annotations') }
watch(cms)
klua.on_synced(function()
  show('get', cms:get('default/old'))
  show('list', cms:list()[1])
end)
]]

-- The function drops data.big and adds an annotation; an index reads it.
local FUNCTION_SCRIPT = SHOW .. [[
local cms = klua.informer { resource = 'configmaps', namespace = 'default',
  indexes = { by_mark = function(obj)
    return obj.metadata.annotations and obj.metadata.annotations['klua.dev/mark'] end },
  transform = function(obj)
    local o = klua.copy(obj)
    if o.data then o.data.big = nil end
    o.metadata.annotations = { ['klua.dev/mark'] = 'marked' }
    return o
  end }
watch(cms)
klua.on_synced(function()
  show('get', cms:get('default/old'))
  show('list', cms:list()[1])
  show('index', cms:by_index('by_mark', 'marked')[1])
end)
]]

-- The same, written as client-go's TransformFuncs are: the object given, changed and returned.
local IN_PLACE_SCRIPT = FUNCTION_SCRIPT:gsub([[
    local o = klua.copy%(obj%)
    if o.data then o.data.big = nil end
    o.metadata.annotations = { %['klua.dev/mark'%] = 'marked' }
    return o]], [[
    if obj.data then obj.data.big = nil end
    obj.metadata.annotations = { ['klua.dev/mark'] = 'marked' }
    return obj]])
assert(IN_PLACE_SCRIPT ~= FUNCTION_SCRIPT)

-- The lines the script printed, each "how name big small mark", each object small.
local function seen(p)
  local lines = {}
  for line in p:output():gmatch('[^\n]+') do
    if line:find('^errors\t') then goto next end
    local how, name, b, small, ann, size = line:match('^(%S+)\t(%S+)\t(%S+)\t(%S+)\t(%S+)\t(%d+)$')
    assert.truthy(how, line)
    lines[#lines + 1] = how .. ' ' .. name .. ' ' .. b .. ' ' .. small .. ' ' .. ann
    assert.is_true(tonumber(size) < 1000, 'the object kept is small: ' .. line)
    ::next::
  end
  return lines
end

describe('informer transforms', function()
  -- A server per spec, stopped after it with the klua it started (p).
  local sb = testing.with_sandbox { each = true }
  local p

  -- Runs script over a listed ConfigMap "old" (a big data member, a long
  -- annotation) until it prints `ready`, then creates, labels and deletes
  -- "new", and waits for its delete; returns what the script saw. flags: klua's
  -- global flags, before run.
  local function through_changes(script, ready, flags)
    local big = ('x'):rep(5000)
    sb:kubectl('create configmap old --from-literal=big=' .. big .. ' --from-literal=small=s')
    sb:kubectl('annotate configmap old note=' .. ('n'):rep(200))
    local argv = { '--kubeconfig', sb.kubeconfig }
    for _, f in ipairs(flags or {}) do argv[#argv + 1] = f end
    argv[#argv + 1] = 'run'
    argv[#argv + 1] = K.script(script)
    p = K.spawn(argv)
    assert.truthy(p:wait_for(ready, 15 * K.slowdown), p:errors())
    sb:kubectl('create configmap new --from-literal=big=' .. big .. ' --from-literal=small=t')
    sb:kubectl('label configmap new seen=yes')
    sb:kubectl('delete configmap new')
    assert.truthy(p:wait_for('delete\tnew', 15 * K.slowdown), p:errors())
    return seen(p)
  end

  it('drop the named members from listed, watched and deleted objects alike', function()
    local got = through_changes(SCRIPT, 'list\told')
    assert.same({ 'add old nil s nil', 'get old nil s nil', 'list old nil s nil',
      'add new nil t nil', 'update new nil t nil', 'delete new nil t nil' }, got)
  end)

  -- A LIST's items are pruned as each is decoded (src/wire/list_stream.c), a watch-list's
  -- initial events and watch events as each arrives: the same objects either way.
  it('drop the named members from the items of a LIST as from a watch-list\'s objects', function()
    local got = through_changes(SCRIPT, 'list\told', { '--watch-list=false' })
    assert.same({ 'add old nil s nil', 'get old nil s nil', 'list old nil s nil',
      'add new nil t nil', 'update new nil t nil', 'delete new nil t nil' }, got)
  end)

  -- A function returns a table it made, or, as client-go's TransformFuncs do, the object it
  -- was given, changed: given a watch-list's initial event with its parsed form, or a LIST's
  -- item, parsed when first read.
  for _, case in ipairs({
    { 'returning a table', FUNCTION_SCRIPT },
    { 'changing the object it is given', IN_PLACE_SCRIPT },
    { 'changing the object it is given, a LIST\'s item', IN_PLACE_SCRIPT, { '--watch-list=false' } },
  }) do
    it('run a function on listed, watched and deleted objects before handlers, get, list and indexes see them, '
      .. case[1], function()
      local got = through_changes(case[2], 'index\told', case[3])
      assert.same({ 'add old nil s marked', 'get old nil s marked', 'list old nil s marked',
        'index old nil s marked', 'add new nil t marked', 'update new nil t marked',
        'delete new nil t marked' }, got)
    end)
  end

  -- What the cache keys on is compared as the strings a table holds, or, when it holds them
  -- otherwise (a view of the object's metadata), as the JSON the table encodes to.
  it('cache a table that keeps what the cache keys on, as strings or inside a view', function()
    sb:kubectl('create configmap old --from-literal=small=s')
    for _, body in ipairs({
      "local o = klua.copy(obj); o.data = { small = 'z' }; return o",
      "return { kind = obj.kind, apiVersion = obj.apiVersion, metadata = obj.metadata, data = { small = 'z' } }",
      "return { kind = 'ConfigMap', apiVersion = 'v1', metadata = { name = obj.metadata.name, namespace = 'default', "
        .. "resourceVersion = obj.metadata.resourceVersion, uid = obj.metadata.uid }, data = { small = 'z' } }",
    }) do
      p = K.spawn({ '--kubeconfig', sb.kubeconfig, 'run', K.script(
        "local cms = klua.informer { resource = 'configmaps', namespace = 'default', transform = function(obj) "
        .. body .. " end }\ncms:on('add', function(obj) print('cached', obj.metadata.name, obj.data.small, "
        .. "cms:stats().transform_errors) end)\n") })
      assert.truthy(p:wait_for('cached\told\tz\t0', 15 * K.slowdown), body .. '\n' .. p:output() .. p:errors())
      p:cleanup()
    end
  end)

  it('refuse a path the cache keys on, and a transform that is not drop_fields', function()
    for _, case in ipairs({
      { "klua.drop_fields('metadata.name')", 'path "metadata.name" cannot be dropped: the cache keys on it' },
      { '42', 'transform takes a function(obj) that returns the object to cache, or klua.drop_fields(path, ...)' },
      { 'klua.drop_fields(7)', 'drop_fields: path 1 must be a string' },
    }) do
      K.informer_refused(sb, 'transform = ' .. case[1], case[2])
    end
  end)

  -- client-go fails the list (or drops the watch event) an object's transform fails on;
  -- klua refuses the object the same way, and relists after a backoff, so the cache never
  -- holds an untransformed object nor misses a change (docs/scale.md).
  it('log a failing function as a failed task naming the informer, and cache nothing it failed on', function()
    sb:kubectl('create configmap old --from-literal=small=s')
    local informer = "configmaps %-n default"
    for _, case in ipairs({
      { "function(obj) error('no ' .. obj.metadata.name) end", 'no old' },
      { 'function() return nil end', 'returned nil where the object to cache was expected: return obj, changed or not, or a table' },
      { 'function() return 7 end', 'returned number where the object to cache was expected' },
      { 'function(obj) local o = klua.copy(obj); o.metadata.name = nil; return o end',
        'removed metadata%.name %("old"%): the cache keys on kind, apiVersion and metadata\'s name' },
      { "function(obj) local o = klua.copy(obj); o.metadata.namespace = 'other'; return o end",
        'changed metadata%.namespace from "default" to "other"' },
      { 'function(obj) local o = klua.copy(obj); o.kind = 7; return o end',
        'removed kind %("ConfigMap"%): the cache keys on' },
      { "function(obj) return { kind = obj.kind, apiVersion = obj.apiVersion, metadata = { name = 'old' } } end",
        'removed metadata%.namespace %("default"%)' },
      { "function(obj) obj.metadata.name = 'new'; return obj end", 'changed metadata%.name from "old" to "new"' },
      { 'function(obj) obj.metadata = { name = obj.metadata.name }; return obj end',
        'removed metadata%.namespace %("default"%)' },
      { 'function(obj) obj.kind = nil; return obj end', 'removed kind %("ConfigMap"%)' },
      { "function(obj) obj.metadata.name = 'new'; return klua.copy(obj) end",
        'changed metadata%.name from "old" to "new"' },
      { 'function() while true do end end',
        'stopped after running past its instruction budget of 1000000 instructions', { '--instruction-budget', '1000000' } },
      -- The stream waits for the transform, which therefore cannot wait itself.
      { 'function(obj) klua.sleep(1); return obj end', 'klua.sleep cannot wait inside a function that C code calls' },
      { 'function(obj) cms:stop(); return obj end',
        "inf:stop%(%) cannot be called from the informer's own transform" },
    }) do
      local script = "local cms\ncms = klua.informer { resource = 'configmaps', namespace = 'default', transform = "
        .. case[1] .. " }\ncms:on('add', function(obj) print('cached', obj.metadata.name) end)\n"
        .. "klua.every(0.2, function() print('errors', cms:stats().transform_errors) end)\n"
      local args = { '--kubeconfig', sb.kubeconfig }
      for _, flag in ipairs(case[3] or {}) do args[#args + 1] = flag end
      args[#args + 1] = 'run'
      args[#args + 1] = K.script(script)
      p = K.spawn(args)
      p:wait_log('transform of ' .. informer .. ' failed: .-' .. case[2], 15 * K.slowdown)
      p:wait_log(informer .. '.-the transform failed on default/old, which is not cached: relisting after a backoff',
        15 * K.slowdown)
      assert.truthy(p:wait_for('errors\t[1-9]', 15 * K.slowdown), p:output())
      assert.falsy(p:output():find('cached', 1, true), p:output())
      p:cleanup()
    end
  end)

  it('refuse writes to the object a function kept, once the function returned or failed', function()
    sb:kubectl('create configmap old --from-literal=small=s')
    p = K.spawn({ '--kubeconfig', sb.kubeconfig, 'run', K.script([[
      local kept, calls = {}, 0
      klua.informer { resource = 'configmaps', namespace = 'default', transform = function(obj)
        calls = calls + 1
        kept[calls] = obj
        obj.metadata.labels = { n = tostring(calls) }
        if calls == 1 then error('first') end
        return obj
      end }
      klua.every(0.2, function()
        for i, obj in ipairs(kept) do
          print('write', i, obj.metadata.labels.n, select(2, pcall(function() obj.x = 1 end)))
        end
      end)
    ]]) })
    assert.truthy(p:wait_for('write\t2', 30 * K.slowdown), p:output() .. p:errors())
    for i = 1, 2 do
      assert.truthy(p:output():find('write\t' .. i .. '\t' .. i .. '\t[^\n]*klua: cannot set x: the transform that '
        .. 'was given this object has ended', 1), p:output())
    end
  end)

  it('stop on SIGTERM in the middle of a function that does not end, logging it as interrupted, not failed', function()
    sb:kubectl('create configmap old --from-literal=small=s')
    p = K.spawn({ '--kubeconfig', sb.kubeconfig, '--instruction-budget', '0', 'run', K.script([[
      klua.informer { resource = 'configmaps', namespace = 'default', transform = function()
        klua.log.info('transform started')
        while true do end
      end }
    ]]) })
    p:wait_log('transform started', 15 * K.slowdown)
    local code = p:stop('TERM')
    local err = p:errors()
    assert.equals(0, code, err)
    assert.truthy(err:find('transform of configmaps -n default interrupted: klua is stopping on SIGTERM', 1, true), err)
    assert.falsy(err:find('failed', 1, true), err)
  end)

  it('relist after a backoff once an object fails, and miss no change', function()
    -- With --watch-list the initial state comes as a watch: refused, it falls back to LIST.
    for _, flags in ipairs({ {}, { '--watch-list' } }) do
      sb:kubectl('create configmap old --from-literal=small=s')
      local args = { '--kubeconfig', sb.kubeconfig }
      for _, flag in ipairs(flags) do args[#args + 1] = flag end
      args[#args + 1] = 'run'
      args[#args + 1] = K.script(SHOW .. [[
local cms = klua.informer { resource = 'configmaps', namespace = 'default',
  transform = function(obj)
    if obj.metadata.labels and obj.metadata.labels.bad then error('refusing ' .. obj.metadata.name) end
    return obj
  end }
watch(cms)
cms:on('update', function() print('errors', cms:stats().transform_errors) end)
]])
      p = K.spawn(args)
      assert.truthy(p:wait_for('add\told', 15 * K.slowdown), p:errors())
      sb:kubectl('label configmap old bad=yes')
      p:wait_log('transform of configmaps %-n default failed: .-refusing old', 15 * K.slowdown)
      -- While old is refused the watch is down and each relist fails: new comes with
      -- the first relist that succeeds, after old is fixed.
      sb:kubectl('create configmap new --from-literal=small=t')
      sb:kubectl('label configmap old bad-')
      assert.truthy(p:wait_for('add\tnew', 30 * K.slowdown), p:errors())
      assert.truthy(p:wait_for('errors\t[1-9]', 15 * K.slowdown), p:output())
      -- The relist delivers what changed in the meantime, in the cache's order.
      local lines = seen(p)
      table.sort(lines)
      assert.same({ 'add new nil t nil', 'add old nil s nil', 'update old nil s nil' }, lines)
      p:cleanup()
      sb:kubectl('delete configmap old new')
    end
  end)
end)
