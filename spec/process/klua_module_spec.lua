-- The `klua` module, as a script sees it: one spec (or a few) per function,
-- each running a small script with `klua run` against one shared sandbox.
-- Specs that write to the server work in namespaces of their own.
local cjson = require('cjson')
local testing = require('klua.testing')
local K = require('support.klua')
local fixtures = require('support.fixtures')

local sb = testing.with_sandbox()

-- K.run_script's options against the sandbox. opts: flags (before run), args (after the
-- script), kubeconfig, timeout.
local function against_sandbox(opts)
  opts = opts or {}
  return { kubeconfig = opts.kubeconfig or sb.kubeconfig, flags = opts.flags, args = opts.args,
    timeout = opts.timeout or 15 }
end

-- Runs a script with `klua [flags] run SCRIPT [args]` against the sandbox.
-- Returns stdout, stderr, exit status and the script's path.
local function run(text, opts) return K.run_script(text, against_sandbox(opts)) end

-- Like run, and asserts that the script exited 0; returns stdout and stderr.
local function run_ok(text, opts) return K.run_script_ok(text, against_sandbox(opts)) end

local function namespace(name)
  local status = sb:json('POST', '/api/v1/namespaces', { metadata = { name = name } })
  assert(status == 201, 'cannot create namespace ' .. name)
  return name
end

local function configmap(ns, name, labels, data)
  local status, obj = sb:json('POST', '/api/v1/namespaces/' .. ns .. '/configmaps',
    { metadata = { name = name, labels = labels }, data = data or { v = '1' } })
  assert(status == 201, 'cannot create configmap ' .. ns .. '/' .. name .. ': ' .. tostring(status))
  return obj
end

-- kubectl ARGS, which must succeed.
local function kubectl(args, stdin) return sb:kubectl(args, stdin) end

-- A kubeconfig like the sandbox's, whose context has another namespace line.
local function kubeconfig_with_namespace(line)
  local kc = sb:tmpfile('kubeconfig')
  K.write_file(kc, (K.read_file(sb.kubeconfig):gsub('\n    namespace: default', line)))
  return kc
end

local CRD = fixtures.GADGETS_CRD

describe('klua.informer', function()
  -- kube-apiserver writes the items of built-in lists without kind and apiVersion; klua
  -- fills them in from the list, so an object reads the same from a LIST as from a watch.
  it('hands over objects from the initial list with their kind and apiVersion, in views, copies and JSON', function()
    namespace('inf-kind')
    configmap('inf-kind', 'listed')
    local out = run_ok([[
      local cms = klua.informer { resource = 'configmaps', namespace = 'inf-kind' }
      local deps = klua.informer { resource = 'deployments', namespace = 'inf-kind' }
      cms:on('add', function(cm, initial)
        local copy = klua.copy(cm)
        print(cm.kind, cm.apiVersion, tostring(initial), copy.kind, copy.apiVersion,
          klua.json.decode(klua.json.encode(cm)).kind)
      end)
      klua.on_synced(function()
        print(#deps:list(), cms:list()[1].kind)
        klua.stop()
      end)
    ]])
    assert.equals('ConfigMap v1 true ConfigMap v1 ConfigMap\n0 ConfigMap\n', (out:gsub('\t', ' ')))
  end)

  it('takes a resource name alone and caches that resource in every namespace', function()
    namespace('inf-all-a')
    namespace('inf-all-b')
    configmap('inf-all-a', 'x')
    configmap('inf-all-b', 'y')
    local out = run_ok([[
      local inf = klua.informer('configmaps')
      klua.on_synced(function()
        local keys = {}
        for _, cm in ipairs(inf:list()) do
          if cm.metadata.namespace:find('^inf%-all%-') then
            keys[#keys + 1] = cm.metadata.namespace .. '/' .. cm.metadata.name
          end
        end
        table.sort(keys)
        print(table.concat(keys, ' '))
        klua.stop()
      end)
    ]])
    assert.equals('inf-all-a/x inf-all-b/y\n', out)
  end)

  it('takes a table whose namespace restricts the cache to one namespace', function()
    namespace('inf-ns-a')
    namespace('inf-ns-b')
    configmap('inf-ns-a', 'x')
    configmap('inf-ns-b', 'y')
    local out = run_ok([[
      local inf = klua.informer { resource = 'configmaps', namespace = 'inf-ns-a' }
      klua.on_synced(function()
        for _, cm in ipairs(inf:list()) do print(cm.metadata.namespace, cm.metadata.name) end
        klua.stop()
      end)
    ]])
    assert.equals('inf-ns-a\tx\n', out)
  end)

  it('filters on the server with label_selector and field_selector', function()
    local ns = namespace('inf-selectors')
    configmap(ns, 'web-1', { tier = 'web' })
    configmap(ns, 'web-2', { tier = 'web' })
    configmap(ns, 'db-1', { tier = 'db' })
    local out = run_ok([[
      local ns = ...
      local by_label = klua.informer { resource = 'configmaps', namespace = ns, label_selector = 'tier=web' }
      local by_field = klua.informer { resource = 'configmaps', namespace = ns, field_selector = 'metadata.name=db-1' }
      local function names(inf)
        local out = {}
        for _, cm in ipairs(inf:list()) do out[#out + 1] = cm.metadata.name end
        table.sort(out)
        return table.concat(out, ' ')
      end
      klua.on_synced(function()
        print(names(by_label))
        print(names(by_field))
        klua.stop()
      end)
    ]], { args = { ns } })
    assert.equals('web-1 web-2\ndb-1\n', out)
  end)

  it('re-delivers every cached object as an update with old and new at the same resourceVersion every resync seconds', function()
    local ns = namespace('inf-resync')
    local rv = configmap(ns, 'only').metadata.resourceVersion
    local out = run_ok([[
      local inf = klua.informer { resource = 'configmaps', namespace = ..., resync = 0.2 }
      local n = 0
      inf:on('update', function(old, new)
        n = n + 1
        print(new.metadata.name, old.metadata.resourceVersion, new.metadata.resourceVersion)
        if n == 2 then klua.stop() end
      end)
    ]], { args = { ns } })
    assert.equals(('only\t%s\t%s\n'):format(rv, rv):rep(2), out)
  end)

  it('refuses a namespace for a cluster-scoped resource, at the line of the call', function()
    local _, err, code, path = run('local inf = klua.informer { resource = "namespaces", namespace = "team-a" }\n')
    assert.equals(1, code)
    assert.truthy(err:find(path .. ':1: namespaces is cluster-scoped: drop namespace = "team-a"', 1, true), err)
  end)

  it('refuses a resource the server does not have, as kubectl words it', function()
    local _, err, code, path = run('klua.informer("podz")\n')
    assert.equals(1, code)
    assert.truthy(err:find(path .. ':1: the server doesn\'t have a resource type "podz"', 1, true), err)
  end)

  it('refuses a field_selector that is not a string, naming the option', function()
    local _, err, code = run('klua.informer { resource = "configmaps", field_selector = { "a=b" } }\n')
    assert.equals(1, code)
    assert.truthy(err:find('informer option field_selector must be a string, not a table', 1, true), err)
  end)
end)

describe('an informer', function()
  it('calls the handlers registered with :on for add (with in_initial_list), update (old, new) and delete', function()
    local ns = namespace('inf-on')
    configmap(ns, 'existing')
    local out = run_ok([[
      local ns = ...
      local inf = klua.informer { resource = 'configmaps', namespace = ns }
      local same = inf:on('add', function(o, initial) print('add', o.metadata.name, initial) end)
        :on('update', function(old, new) print('update', old.data.v, new.data.v) end)
        :on('delete', function(o, unknown)
          print('delete', o.metadata.name, unknown)
          klua.stop()
        end)
      print('chained', same == inf)
      klua.on_synced(function()
        assert(klua.api.create('configmaps', { metadata = { name = 'new', namespace = ns }, data = { v = '1' } }))
        assert(klua.api.patch('configmaps', ns .. '/new', { data = { v = '2' } }))
        assert(klua.api.delete('configmaps', ns .. '/new'))
      end)
    ]], { args = { ns } })
    assert.equals('chained\ttrue\nadd\texisting\ttrue\nadd\tnew\tfalse\nupdate\t1\t2\ndelete\tnew\tfalse\n', out)
  end)

  it('hands every handler of a notification the same views', function()
    local ns = namespace('inf-shared-views')
    configmap(ns, 'cm', nil, { v = '1' })
    local out = run_ok([[
      local ns = ...
      local inf = klua.informer { resource = 'configmaps', namespace = ns }
      local first
      inf:on('add', function(o, initial) first = o end)
        :on('add', function(o, initial) print('add', rawequal(first, o), o.data.v, initial) end)
        :on('update', function(old, new) first = { old, new } end)
        :on('update', function(old, new)
          print('update', rawequal(first[1], old), rawequal(first[2], new), old.data.v, new.data.v)
          klua.stop()
        end)
      klua.on_synced(function() assert(klua.api.patch('configmaps', ns .. '/cm', { data = { v = '2' } })) end)
    ]], { args = { ns } })
    assert.equals('add\ttrue\t1\ttrue\nupdate\ttrue\ttrue\t1\t2\n', out)
  end)

  it('keeps the views a lone handler holds reading their own objects after it returns, through later events and collections', function()
    local ns = namespace('inf-kept-views')
    configmap(ns, 'cm', nil, { v = '0' })
    local out = run_ok([[
      local ns = ...
      local inf = klua.informer { resource = 'configmaps', namespace = ns }
      local kept = {}
      inf:on('update', function(old, new)
        kept[#kept + 1] = { old, new }
        if #kept < 3 then return end
        collectgarbage()
        collectgarbage()
        for _, pair in ipairs(kept) do print(pair[1].data.v, pair[2].data.v, tostring(pair[2].data)) end
        klua.stop()
      end)
      klua.on_synced(function()
        for v = 1, 3 do assert(klua.api.patch('configmaps', ns .. '/cm', { data = { v = tostring(v) } })) end
      end)
    ]], { args = { ns } })
    assert.equals('0\t1\t{"v":"1"}\n1\t2\t{"v":"2"}\n2\t3\t{"v":"3"}\n', out)
  end)

  it('gives an add handler added after the sync every cached object, with in_initial_list true, then the changes after it', function()
    local ns = namespace('inf-late')
    configmap(ns, 'a')
    configmap(ns, 'b')
    local out = run_ok([[
      local ns = ...
      local inf = klua.informer { resource = 'configmaps', namespace = ns }
      klua.on_synced(function()
        local seen = {}
        inf:on('add', function(o, initial)
          seen[#seen + 1] = o.metadata.name .. '=' .. tostring(initial)
          if o.metadata.name == 'c' then
            table.sort(seen)
            print(table.concat(seen, ' '))
            klua.stop()
          end
        end)
        assert(klua.api.create('configmaps', { metadata = { name = 'c', namespace = ns } }))
      end)
    ]], { args = { ns } })
    assert.equals('a=true b=true c=false\n', out)
  end)

  it('gives a handler added by another handler, while notifications wait, each cached object once', function()
    local ns = namespace('inf-nested')
    for i = 1, 30 do configmap(ns, ('cm-%02d'):format(i)) end
    local out = run_ok([[
      local ns = ...
      local inf = klua.informer { resource = 'configmaps', namespace = ns }
      local seen, count = 0, {}
      inf:on('add', function()
        -- Registered halfway through the initial list: ten objects were
        -- handed out already, the rest are queued and already cached.
        seen = seen + 1
        if seen ~= 10 then return end
        klua.sleep(0.1)
        inf:on('add', function(obj) count[obj.metadata.name] = (count[obj.metadata.name] or 0) + 1 end)
      end)
      klua.on_synced(function()
        klua.sleep(0.2)
        local names, twice = 0, 0
        for _, n in pairs(count) do
          names = names + 1
          if n > 1 then twice = twice + 1 end
        end
        print(names, twice)
        klua.stop()
      end)
    ]], { args = { ns } })
    assert.equals('30\t0\n', out)
  end)

  it('refuses an unknown event name in :on, saying which names exist, at the line of the call', function()
    local _, err, code, path = run('local inf = klua.informer("configmaps")\ninf:on("added", print)\n')
    assert.equals(1, code)
    assert.truthy(err:find(path .. ':2: unknown event "added": use "add", "update", "delete" or "error"', 1, true), err)
  end)

  it('answers :get from its cache by "namespace/name", or "name" when cluster-scoped, with read-only views', function()
    local ns = namespace('inf-get')
    configmap(ns, 'cfg', nil, { greeting = 'hello' })
    local out = run_ok([[
      local ns = ...
      local cms = klua.informer { resource = 'configmaps', namespace = ns }
      local namespaces = klua.informer('namespaces')
      klua.on_synced(function()
        local cm = cms:get(ns .. '/cfg')
        print(cm.metadata.name, cm.data.greeting, type(cm))
        print(cms:get(ns .. '/missing'), cms:get('cfg'))
        print(namespaces:get(ns).metadata.name)
        print(pcall(function() cm.data.greeting = 'bye' end))
        klua.stop()
      end)
    ]], { args = { ns } })
    local l = {}
    for line in out:gmatch('[^\n]+') do l[#l + 1] = line end
    assert.equals('cfg\thello\tuserdata', l[1])
    assert.equals('nil\tnil', l[2])
    assert.equals(ns, l[3])
    assert.matches('^false\t.*read%-only', l[4])
  end)

  it('answers :list with every cached object', function()
    local ns = namespace('inf-list')
    for i = 1, 5 do configmap(ns, 'cm-' .. i) end
    local out = run_ok([[
      local inf = klua.informer { resource = 'configmaps', namespace = ... }
      klua.on_synced(function()
        local names = {}
        for _, cm in ipairs(inf:list()) do names[#names + 1] = cm.metadata.name end
        table.sort(names)
        print(#inf:list(), table.concat(names, ' '))
        klua.stop()
      end)
    ]], { args = { ns } })
    assert.equals('5\tcm-1 cm-2 cm-3 cm-4 cm-5\n', out)
  end)

  it('answers :list{namespace=, label_selector=} with the cached objects in that namespace whose labels match', function()
    local a, b = namespace('inf-filter-a'), namespace('inf-filter-b')
    configmap(a, 'web', { app = 'web', tier = 'front' })
    configmap(a, 'db', { app = 'db' })
    configmap(b, 'web', { app = 'web', tier = 'back' })
    configmap(b, 'bare')
    local out = run_ok([[
      local a, b = ...
      local inf = klua.informer { resource = 'configmaps', label_selector = 'klua-spec!=skip' }
      local function keys(opts)
        local found = {}
        for _, cm in ipairs(inf:list(opts)) do
          local ns = cm.metadata.namespace
          if ns == a or ns == b then found[#found + 1] = ns .. '/' .. cm.metadata.name end
        end
        table.sort(found)
        return table.concat(found, ' ')
      end
      klua.on_synced(function()
        print(keys { namespace = a })
        print(keys { label_selector = 'app=web' })
        print(keys { namespace = b, label_selector = '!app' })
        print(keys { label_selector = klua.labels.parse('tier in (front,back),app') })
        print(pcall(inf.list, inf, { label_selector = 'app in web' }))
        klua.stop()
      end)
    ]], { args = { a, b } })
    assert.equals(table.concat({
      'inf-filter-a/db inf-filter-a/web',
      'inf-filter-a/web inf-filter-b/web',
      'inf-filter-b/bare',
      'inf-filter-a/web inf-filter-b/web',
      [[false	label selector "app in web": found 'web', expected '(']],
    }, '\n') .. '\n', out)
  end)

  it('keeps :list{namespace=} exact as objects of that namespace are deleted, first, last and in between', function()
    local ns = namespace('inf-ns-index')
    for i = 1, 4 do configmap(ns, 'cm-' .. i) end
    local out = run_ok([[
      local ns = ...
      local inf = klua.informer { resource = 'configmaps', namespace = ns }
      local function names()
        local found = {}
        for _, cm in ipairs(inf:list { namespace = ns }) do found[#found + 1] = cm.metadata.name end
        table.sort(found)
        return table.concat(found, ' ')
      end
      local steps = {
        function() return klua.api.delete('configmaps', ns .. '/cm-1') end,
        function() return klua.api.delete('configmaps', ns .. '/cm-4') end,
        function() return klua.api.delete('configmaps', ns .. '/cm-2') end,
        function() return klua.api.delete('configmaps', ns .. '/cm-3') end,
        function()
          return klua.api.create('configmaps', { metadata = { name = 'cm-5', namespace = ns } })
        end,
      }
      local step = 0
      local function next_step()
        print(names())
        step = step + 1
        if step > #steps then return klua.stop() end
        assert(steps[step]())
      end
      inf:on('delete', next_step)
      inf:on('add', function(_, in_initial_list) if not in_initial_list then next_step() end end)
      klua.on_synced(next_step)
    ]], { args = { ns } })
    assert.equals('cm-1 cm-2 cm-3 cm-4\ncm-2 cm-3 cm-4\ncm-2 cm-3\ncm-3\n\ncm-5\n', out)
  end)

  it('refuses a label_selector that does not parse, at the line of the call, before asking the server', function()
    local _, err, code, path = run('local inf = klua.informer { resource = "pods", label_selector = "app in web" }\n',
      { kubeconfig = sb.kubeconfig, flags = { '--server', 'http://127.0.0.1:1' } })
    assert.equals(1, code)
    assert.truthy(err:find(path .. [[:1: label selector "app in web": found 'web', expected '(']], 1, true), err)
    assert.is_nil(err:find('cannot reach', 1, true), err)
  end)

  it('reports :synced false until its first list was handed to the handlers, true after', function()
    local out = run_ok([[
      local inf = klua.informer('configmaps')
      local adds = 0
      inf:on('add', function() adds = adds + 1 end)
      print('at start', inf:synced())
      klua.on_synced(function()
        print('on sync', inf:synced(), adds == #inf:list())
        klua.stop()
      end)
    ]])
    assert.equals('at start\tfalse\non sync\ttrue\ttrue\n', out)
  end)

  -- A watch-list (the default) is a watch whose initial events stream the state; with
  -- --watch-list=false the state comes from a LIST, and no event came before the sync.
  for _, case in ipairs {
    { flags = {}, expected = '0\t0\t2\t2\t0\tstring\n0\t1\t3\t3\ttrue\n', what = 'from a watch-list' },
    { flags = { '--watch-list=false' }, expected = '1\t0\t0\t2\t0\tstring\n1\t1\t1\t3\ttrue\n', what = 'from a LIST' },
  } do
  it('counts lists, watches, events and cached objects in :stats, synced ' .. case.what, function()
    local ns = namespace('inf-stats-' .. #case.flags)
    configmap(ns, 'a')
    configmap(ns, 'b')
    local out = run_ok([[
      local ns = ...
      local inf = klua.informer { resource = 'configmaps', namespace = ns }
      inf:on('add', function(o, initial)
        if initial then return end
        local s = inf:stats()
        print(s.lists, s.watches, s.events, s.cached, s.resource_version == o.metadata.resourceVersion)
        klua.stop()
      end)
      klua.on_synced(function()
        local s = inf:stats()
        print(s.lists, s.relists, s.events, s.cached, s.errors, type(s.resource_version))
        assert(klua.api.create('configmaps', { metadata = { name = 'c', namespace = ns } }))
      end)
    ]], { args = { ns }, flags = case.flags })
    assert.equals(case.expected, out)
  end)
  end
end)

describe('klua.on_synced', function()
  it('runs its function once, when every informer has synced', function()
    local out = run_ok([[
      local a = klua.informer('configmaps')
      local b = klua.informer('namespaces')
      local calls = 0
      klua.on_synced(function()
        calls = calls + 1
        print('synced', a:synced(), b:synced())
      end)
      klua.after(0.3, function() print('calls', calls); klua.stop() end)
    ]])
    assert.equals('synced\ttrue\ttrue\ncalls\t1\n', out)
  end)

  it('runs a function registered after the sync at once', function()
    local out = run_ok([[
      local inf = klua.informer('configmaps')
      klua.on_synced(function()
        klua.after(0.1, function()
          klua.on_synced(function() print('late', inf:synced()); klua.stop() end)
        end)
      end)
    ]])
    assert.equals('late\ttrue\n', out)
  end)

  it('waits for the informers the main chunk creates after registering it', function()
    local out = run_ok([[
      klua.on_synced(function() print('synced', inf:synced()); klua.stop() end)
      inf = klua.informer('configmaps')
    ]], { timeout = 5 })
    assert.equals('synced\ttrue\n', out)
  end)
end)

describe('timers', function()
  it('klua.after runs a function once, later; the script then exits by itself', function()
    local out = run_ok([[
      klua.after(0.2, function() print('second') end)
      klua.after(0.05, function() print('first') end)
      print('main')
    ]])
    assert.equals('main\nfirst\nsecond\n', out)
  end)

  it('klua.after returns a timer whose :cancel() keeps it from running', function()
    local out = run_ok([[
      local t = klua.after(0.1, function() print('ran') end)
      print(t:cancel(), t:cancel())
      klua.after(0.2, function() print('done') end)
    ]])
    assert.equals('true\tfalse\ndone\n', out)
  end)

  it('klua.every repeats until :cancel()', function()
    local out = run_ok([[
      local n, t = 0, nil
      t = klua.every(0.02, function()
        n = n + 1
        if n == 3 then print('cancel', t:cancel(), t:cancel()) end
      end)
      klua.after(0.2, function() print('ran', n) end)
    ]])
    assert.equals('cancel\ttrue\tfalse\nran\t3\n', out)
  end)

  it('klua.sleep suspends only the calling function: timers and handlers run meanwhile', function()
    local out = run_ok([[
      klua.after(0.05, function() print('timer') end)
      print('sleeping', klua.stats().suspended)
      klua.sleep(0.2)
      print('woke')
    ]])
    assert.equals('sleeping\t0\ntimer\nwoke\n', out)
  end)

  it('klua.sleep refuses to wait inside a function that C code calls without letting it wait, and the script still exits by itself', function()
    local out, err, code = run([[
      klua.after(0, function()
        print(pcall(table.sort, { 2, 1 }, function(a, b) klua.sleep(0) return a < b end))
      end)
    ]])
    assert.equals(0, code, err)
    assert.matches('^false\t.*klua.sleep cannot wait inside a function that C code calls without letting it wait '
      .. '%(a __gc or __close handler, a table.sort comparison, a string.gsub replacement%): wait in the handler itself\n$', out)
  end)

  it('refuses a negative delay and a non-positive interval', function()
    local out = run_ok([[
      print(select(2, pcall(klua.after, -1, print)))
      print(select(2, pcall(klua.every, 0, print)))
    ]])
    assert.truthy(out:find('seconds must not be negative', 1, true), out)
    assert.truthy(out:find('the interval must be positive', 1, true), out)
  end)
end)

describe('klua.stop', function()
  it('ends the run with the given exit status once the current callback returns', function()
    local out, err, code = run([[
      klua.informer('configmaps')
      klua.on_synced(function()
        klua.stop(3)
        print('still in the callback')
      end)
    ]])
    assert.equals(3, code, err)
    assert.equals('still in the callback\n', out)
  end)

  it('ends the run with status 0 when no code is given', function()
    local _, err, code = run('klua.every(0.05, function() klua.stop() end)\n')
    assert.equals(0, code, err)
  end)

  it('starts no further handler call once called, even for notifications already queued', function()
    local ns = namespace('stop-between-calls')
    for _, name in ipairs({ 'a', 'b', 'c' }) do configmap(ns, name) end
    local out, err, code = run([[
      local inf = klua.informer { resource = 'configmaps', namespace = ... }
      inf:on('add', function(o) print('add', o.metadata.name) klua.stop(4) end)
    ]], { args = { ns } })
    assert.equals(4, code, err)
    assert.equals('add\ta\n', out)
  end)
end)

describe('a __gc handler run as klua exits', function()
  it('finds queues and informers closed and cannot start anything, each saying so', function()
    local out, err, code = run([[
      local q = klua.queue()
      local inf = klua.informer('namespaces')
      local function try(what, fn) print(what, select(2, pcall(fn))) end
      keep = setmetatable({}, { __gc = function()
        try('add', function() q:add('x') end)
        try('get', function() inf:get('default') end)
        try('after', function() klua.after(1, print) end)
        try('queue', function() klua.queue() end)
      end })
      klua.on_synced(function() klua.stop() end)
    ]])
    assert.equals(0, code, err)
    assert.equals('add\tthis queue is closed: klua is shutting down\n'
      .. 'get\tthis informer is closed: klua is shutting down\n'
      .. 'after\tcannot start a timer: klua is shutting down\n'
      .. 'queue\tcannot make a queue: klua is shutting down\n', K.unplaced(out))
  end)
end)

describe('a view', function()
  it('keeps its metatable: getmetatable names it, debug.setmetatable refuses it', function()
    local out = run_ok([[
      local inf = klua.informer('namespaces')
      klua.on_synced(function()
        local ns = inf:get('default')
        for _, v in ipairs({ ns, ns.metadata }) do
          print(getmetatable(v), pcall(debug.setmetatable, v, nil))
          print(pcall(debug.setmetatable, v, {}))
        end
        print(ns.metadata.name, debug.setmetatable({}, nil) ~= nil)
        klua.stop()
      end)
    ]])
    local refused = "false\tbad argument #1 to 'debug.setmetatable' (the metatable of a klua view cannot be changed)"
    assert.equals(('klua.view\t%s\n%s\n'):format(refused, refused):rep(2) .. 'default\ttrue\n', out)
  end)

  -- A dead view stays for its finalizer's cycle; what it held in the collector's heap
  -- would then raise the next cycle's threshold, geometrically at a pause over 200
  -- (docs/benchmarks.md, "The per-event path, step by step"). Its parsed form is
  -- outside that heap but in the Lua state's memory, which klua.stats() reports.
  for _, case in ipairs({
    { 'the generational collector klua runs', '', 'view-gen' },
    { 'a pause of 400 the script sets', "collectgarbage('incremental', 400)", 'view-pause' },
  }) do
    it("keeps the script's memory bounded under " .. case[1], function()
      namespace(case[3])
      configmap(case[3], 'big', nil, { note = ('n'):rep(4000) })
      local out = run_ok([[
        local ns = ...
        local inf = klua.informer { resource = 'configmaps', namespace = ns }
        klua.on_synced(function()
          collectgarbage()
          local live, most = klua.stats().lua_memory, 0
          ]] .. case[2] .. [[

          for _ = 1, 20000 do
            assert(inf:get(ns .. '/big').metadata.name)
            most = math.max(most, klua.stats().lua_memory)
          end
          -- a pause of 400 lets the heap grow to 4 times the live heap; 8 with a margin
          print(most < 8 * live or ('%d bytes at most, %d live'):format(most, live))
          klua.stop()
        end)
      ]], { args = { case[3] } })
      assert.equals('true\n', out)
    end)
  end
end)

-- What a handler makes dies young; klua runs Lua's generational collector while the
-- heap is small and the incremental one, in small steps, while it is large
-- (src/lua/collector.h, docs/architecture.md "The Lua collector").
describe('the Lua collector', function()
  -- till(cond, k): k() once cond() holds, looked at once a loop iteration: klua
  -- changes collectors in deferred work, after the allocation that crossed a bound.
  local UNTIL = [[
    local function till(cond, k, tries)
      tries = tries or 0
      if cond() then return k() end
      if tries > 1000 then print('never') return klua.stop() end
      klua.after(0, function() till(cond, k, tries + 1) end)
    end
    local function mode() return klua.stats().collector end
  ]]

  it('is generational while the Lua state is small', function()
    local out = run_ok([[
      print(klua.stats().collector, collectgarbage('incremental'), klua.stats().collector)
    ]])
    assert.equals('generational\tgenerational\tscript\n', out)
  end)

  -- A generational major collection visits the whole heap at once, about 1 ms a MiB;
  -- the incremental collector's steps stay small: klua sets a step multiplier of 25
  -- and steps of 1 KB, so that a basic step does a thirtieth of the work, and a
  -- cycle over 150,000 tables takes hundreds of them rather than a handful.
  it('turns incremental, in small steps, past 8 MiB, and generational again under 2 MiB', function()
    local out = run_ok(UNTIL .. [[
      local big = {}
      for i = 1, 150000 do big[i] = { i } end
      print(mode())
      till(function() return mode() == 'incremental' end, function()
        print(mode(), klua.stats().lua_memory > 8 << 20)
        collectgarbage()
        local steps = 0
        repeat steps = steps + 1 until collectgarbage('step', 0) or steps > 100000
        print(steps >= 100 and steps <= 100000 or steps .. ' steps')
        big = nil
        collectgarbage()
        till(function() return mode() == 'generational' end, function()
          print(mode(), klua.stats().lua_memory < 2 << 20, collectgarbage('incremental'))
        end)
      end)
    ]])
    assert.equals('generational\nincremental\ttrue\ntrue\ngenerational\ttrue\tgenerational\n', out)
  end)

  it('keeps the collector a script chose, whatever its size', function()
    local out = run_ok(UNTIL .. [[
      collectgarbage('incremental', 400)
      local big = {}
      for i = 1, 150000 do big[i] = { i } end
      big = nil
      collectgarbage()
      -- a change klua made would have been made before this timer's iteration
      klua.after(0, function()
        print(mode(), collectgarbage('generational'), mode())
      end)
    ]])
    assert.equals('script\tincremental\tscript\n', out)
  end)

  it("names collectgarbage in its argument errors, as Lua's own does", function()
    local out = run_ok([[
      print(select(2, pcall(collectgarbage, 'nope')))
      print(select(2, pcall(collectgarbage, 'incremental', 100, {})))
      print(select(2, pcall(collectgarbage, 'step', 'x')))
      print(klua.stats().collector, collectgarbage('count') > 0, collectgarbage('isrunning'))
    ]])
    assert.equals("bad argument #1 to 'collectgarbage' (invalid option 'nope')\n"
      .. "bad argument #3 to 'collectgarbage' (number expected, got table)\n"
      .. "bad argument #2 to 'collectgarbage' (number expected, got string)\n"
      .. 'generational\ttrue\ttrue\n', out)
  end)
end)

describe('klua.log', function()
  local SCRIPT = [[
    klua.log.debug('debug %d', 1)
    klua.log.info('synced %d pods in %s', 3, 'default')
    klua.log.warn('disk at 100%')
    klua.log.error('cannot %s: %q', 'patch', 'web')
  ]]

  it('writes info, warn and error lines naming the script, formatting arguments with string.format', function()
    local out, err = run_ok(SCRIPT)
    assert.equals('', out)
    local got = {}
    for line in err:gmatch('[^\n]+') do
      got[#got + 1] = assert(line:match('^%d+%-%d+%-%d+T[%d:.]+Z (.*)$'), line)
    end
    assert.same({
      'info  [script.lua] synced 3 pods in default',
      'warn  [script.lua] disk at 100%',
      'error [script.lua] cannot patch: "web"',
    }, got)
  end)

  it('shows debug lines only at -v 4 and above', function()
    local _, quiet = run_ok(SCRIPT, { flags = { '-v', '3' } })
    local _, loud = run_ok(SCRIPT, { flags = { '-v', '4' } })
    assert.is_nil(quiet:find('debug', 1, true))
    assert.truthy(loud:find('debug [script.lua] debug 1', 1, true), loud)
  end)
end)

describe('klua.json', function()
  it('decodes and encodes JSON, keeping integers, floats, nulls, empty arrays and empty objects', function()
    local out = run_ok([[
      local v = klua.json.decode('{"n":1,"f":1.5,"z":null,"a":[],"o":{},"l":[1,2]}')
      print(math.type(v.n), math.type(v.f), v.z == klua.null, #v.l)
      local again = klua.json.decode(klua.json.encode(v))
      print(klua.json.encode(again.a), klua.json.encode(again.o), klua.json.encode(again.z), again.n, again.f)
      print(klua.json.encode(klua.json.array({})), klua.json.encode({}), klua.json.encode({ 1, 2 }))
      print(klua.json.decode('{"a":'))
    ]])
    local l = {}
    for line in out:gmatch('[^\n]+') do l[#l + 1] = line end
    assert.equals('integer\tfloat\ttrue\t2', l[1])
    assert.equals('[]\t{}\tnull\t1\t1.5', l[2])
    assert.equals('[]\t{}\t[1,2]', l[3])
    assert.matches('^nil\t.+', l[4])
  end)

  it('klua.null is JSON null: what null decodes to and what encodes as null', function()
    local out = run_ok([[
      print(klua.null == require('cjson').null, klua.json.decode('null') == klua.null)
      print(klua.json.encode({ gone = klua.null }))
    ]])
    assert.equals('true\ttrue\n{"gone":null}\n', out)
  end)
end)

describe('the script', function()
  it('gets its arguments as klua.args and as ... in the main chunk', function()
    local out = run_ok([[
      print(#klua.args, table.concat(klua.args, '|'))
      print(select('#', ...), table.concat({ ... }, '|'))
    ]], { args = { 'one', 'two words', '--flag' } })
    assert.equals('3\tone|two words|--flag\n3\tone|two words|--flag\n', out)
  end)

  it("learns the kubeconfig context's namespace from klua.namespace(), default when it names none", function()
    local with = kubeconfig_with_namespace('\n    namespace: team-a')
    local without = kubeconfig_with_namespace('')
    assert.equals('team-a\n', (run_ok('print(klua.namespace())', { kubeconfig = with })))
    assert.equals('default\n', (run_ok('print(klua.namespace())', { kubeconfig = without })))
  end)

  it('reads task_errors, lua_memory and suspended from klua.stats()', function()
    local out = run_ok([[
      local s = klua.stats()
      print(s.task_errors, math.type(s.lua_memory), s.lua_memory > 0, s.suspended)
      klua.after(0, function() error('a failing timer') end)
      klua.after(0.05, function()
        local s2 = klua.stats()
        print(s2.task_errors, s2.suspended)
      end)
      klua.sleep(0.1)
    ]])
    assert.equals('0\tinteger\ttrue\t0\n1\t1\n', out)
  end)
end)

describe('klua.record_event', function()
  it('creates a core/v1 Event about an object, a cached view included', function()
    local ns = namespace('record-event')
    configmap(ns, 'cfg')
    local out = run_ok([[
      local ns = ...
      local cms = klua.informer { resource = 'configmaps', namespace = ns }
      klua.on_synced(function()
        local cm = cms:get(ns .. '/cfg')
        local ev = assert(klua.record_event(cm, { reason = 'Synced', message = 'copied', kind = 'ConfigMap',
          api_version = 'v1', component = 'spec' }))
        local got = assert(klua.api.get('events', ns .. '/' .. ev.metadata.name))
        print(got.reason, got.message, got.involvedObject.kind, got.involvedObject.name, got.source.component)
        klua.stop()
      end)
    ]], { args = { ns } })
    assert.equals('Synced\tcopied\tConfigMap\tcfg\tspec\n', out)
  end)

  it('returns nil and an error, without a request, for an object without name or kind', function()
    local out, err = run_ok([[
      local ev, err = klua.record_event({ kind = 'Pod', metadata = {} }, { reason = 'Synced' })
      print(ev, err.reason, tostring(err))
      ev, err = klua.record_event({ metadata = { name = 'web' } }, { reason = 'Synced' })
      print(ev, err.reason)
    ]], { flags = { '-v', '6' } })
    assert.equals('nil\tMissingName\tevent_for: the object needs metadata.name\nnil\tMissingKind\n', out)
    assert.is_nil(err:find('/events', 1, true), err)
  end)

  it('raises for options that are a mistake in the call, naming the fix', function()
    local out = run_ok([[
      print(pcall(klua.record_event, { kind = 'Pod', metadata = { name = 'web' } }, { type = 'Error', reason = 'X' }))
    ]])
    assert.truthy(out:find("^false\t.*event_for: type must be 'Normal' or 'Warning' %(got Error%)"), out)
  end)
end)

describe('klua.resolve', function()
  it('resolves the names kubectl accepts to group, version, resource, kind and scope', function()
    kubectl('apply -f -', CRD)
    local out = run_ok([[
      for _, name in ipairs({ 'deploy', 'ns', 'po', 'apps/v1/replicasets', 'gd', 'gadgets.example.com' }) do
        local r = assert(klua.resolve(name))
        print(name, r.group, r.version, r.resource, r.kind, r.namespaced, r.api_version)
      end
      print(klua.resolve('podz'))
    ]])
    assert.equals(table.concat({
      'deploy\tapps\tv1\tdeployments\tDeployment\ttrue\tapps/v1',
      'ns\t\tv1\tnamespaces\tNamespace\tfalse\tv1',
      'po\t\tv1\tpods\tPod\ttrue\tv1',
      'apps/v1/replicasets\tapps\tv1\treplicasets\tReplicaSet\ttrue\tapps/v1',
      'gd\texample.com\tv1\tgadgets\tGadget\ttrue\texample.com/v1',
      'gadgets.example.com\texample.com\tv1\tgadgets\tGadget\ttrue\texample.com/v1',
      'nil\tthe server doesn\'t have a resource type "podz"',
    }, '\n') .. '\n', out)
  end)
end)

describe('klua.api', function()
  it('is the klua.api module', function()
    assert.equals('table\ttrue\n', (run_ok('print(type(klua.api), klua.api == require("klua.api"))')))
  end)

  it('raises on a mistake in the call, naming the call as written, and sends nothing', function()
    local ns = namespace('api-misuse')
    configmap(ns, 'keep')
    local out = run_ok([[
      local ns = ...
      local api = klua.api
      local body = { metadata = { name = 'c' } }
      local calls = {
        function() return api.create('configmaps', ns, body) end,
        function() return api.delete('configmaps', ns, 'keep') end,
        function() return api.get('configmaps', ns, 'keep') end,
        function() return api.get('configmaps', 42) end,
        function() return api.list('configmaps', ns) end,
        function() return api.update('configmaps', ns .. '/keep') end,
        function() return api.update_status('configmaps', body, 'status') end,
        function() return api.patch('configmaps', ns .. '/keep', 7) end,
        function() return api.patch('configmaps', ns .. '/keep', {}, 'merge') end,
        function() return api.apply('configmaps', body) end,
        function() return api.request('GET') end,
        function() return api.create(nil, body) end,
      }
      for _, call in ipairs(calls) do
        local ok, err = pcall(call)
        print(ok, (tostring(err):gsub('^[^:]+:%d+: ', '')))
      end
    ]], { args = { ns } })
    local function line(call, what, v) return ('false\t%s: %s, not %s\n'):format(call, what, v) end
    local obj = 'obj is the object, a table (its namespace in obj.metadata.namespace or opts.namespace)'
    local after_key = 'opts is a table of options, or nil (the key is one string: "namespace/name")'
    assert.equals(line('klua.api.create(resource, obj [, opts])', obj, 'the string "api-misuse"')
      .. line('klua.api.delete(resource, key [, opts])', after_key, 'the string "keep"')
      .. line('klua.api.get(resource, key)', 'nothing after the key (it is one string: "namespace/name")',
        'the string "keep"')
      .. line('klua.api.get(resource, key)', 'key is "namespace/name", or "name"', 'a number')
      .. line('klua.api.list(resource [, opts])', 'opts is a table of options such as { namespace = "default" }, or nil',
        'the string "api-misuse"')
      .. line('klua.api.update(resource, obj [, opts])', 'obj is the whole object, a table with metadata.name',
        'the string "api-misuse/keep"')
      .. line('klua.api.update_status(resource, obj [, opts])', 'opts is a table of options, or nil',
        'the string "status"')
      .. line('klua.api.patch(resource, key, patch [, opts])', 'patch is a table sent as JSON, or a string', 'a number')
      .. line('klua.api.patch(resource, key, patch [, opts])', after_key, 'the string "merge"')
      .. line('klua.api.apply(obj, opts)', 'obj is the object to apply, a table with apiVersion, kind and metadata.name',
        'the string "configmaps"')
      .. line('klua.api.request(method, path [, body [, content_type [, accept]]])',
        'path is a string such as "/api/v1/namespaces"', 'nil')
      .. line('klua.api.create(resource, obj [, opts])',
        'resource is a resource name such as "configmaps", or an informer', 'nil'), out)
    -- Nothing was deleted or created.
    local left = sb:kubectl_json('get configmaps -n ' .. ns).items
    assert.equals(1, #left)
    assert.equals('keep', left[1].metadata.name)
  end)

  it('create returns the created object; creating it again fails with is_already_exists', function()
    local ns = namespace('api-create')
    local out = run_ok([[
      local ns = ...
      local cm = assert(klua.api.create('configmaps', { metadata = { name = 'c', namespace = ns }, data = { k = 'v' } }))
      print(cm.metadata.name, cm.data.k, type(cm.metadata.uid), type(cm.metadata.resourceVersion))
      local none, err = klua.api.create('configmaps', { metadata = { name = 'c', namespace = ns } })
      print(none, err.code, err.reason, klua.api.is_already_exists(err), klua.api.is_conflict(err))
      print(tostring(err))
    ]], { args = { ns } })
    assert.equals('c\tv\tstring\tstring\nnil\t409\tAlreadyExists\ttrue\tfalse\n'
      .. 'configmaps "c" already exists (409 AlreadyExists)\n', out)
    assert.equals('v', sb:kubectl_json('get configmap c -n ' .. ns).data.k)
  end)

  it('get returns the object by key; a missing one fails with is_not_found', function()
    local ns = namespace('api-get')
    configmap(ns, 'there', nil, { k = 'v' })
    local out = run_ok([[
      local ns = ...
      print(klua.api.get('configmaps', ns .. '/there').data.k)
      print(klua.api.get('namespaces', ns).metadata.name)
      local none, err = klua.api.get('cm', ns .. '/missing')
      print(none, err.code, klua.api.is_not_found(err), tostring(err))
    ]], { args = { ns } })
    assert.equals('v\n' .. ns .. '\nnil\t404\ttrue\tconfigmaps "missing" not found (404 NotFound)\n', out)
  end)

  it('list fetches every page, filtered by namespace and label_selector', function()
    local ns = namespace('api-list')
    for i = 1, 5 do configmap(ns, 'cm-' .. i, { odd = tostring(i % 2 == 1) }) end
    local out, err = run_ok([[
      local ns = ...
      local all = assert(klua.api.list('configmaps', { namespace = ns, limit = 2 }))
      local names = {}
      for _, cm in ipairs(all.items) do names[#names + 1] = cm.metadata.name end
      print(#all.items, table.concat(names, ' '), all.kind)
      local odd = assert(klua.api.list('configmaps', { namespace = ns, label_selector = 'odd=true' }))
      print(#odd.items)
      local none = assert(klua.api.list('configmaps', { namespace = ns, label_selector = 'odd=maybe' }))
      print(klua.json.encode(none.items))
    ]], { args = { ns }, flags = { '-v', '6' } })
    assert.equals('5\tcm-1 cm-2 cm-3 cm-4 cm-5\tConfigMapList\n3\n[]\n', out)
    local pages = 0
    for line in err:gmatch('[^\n]+') do
      if line:find('GET /api/v1/namespaces/api-list/configmaps?', 1, true) and line:find('limit=2 -> 200', 1, true) then
        pages = pages + 1
      end
    end
    assert.equals(3, pages, err)
  end)

  describe('update', function()
    -- A custom resource with what JSON round trips tend to lose.
    local BODY = '{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"%s","annotations":{}},'
      .. '"spec":{"size":3,"ratio":1.5,"big":9007199254740993,"neg":-7,"tags":[],"empty":{},"none":null,'
      .. '"nested":[{"a":[]},{"b":null}],"text":"\\u00e9\\ud83d\\ude00"}}'

    local function strip_changes(text)
      return (text:gsub('\n%s*"labels": {[^}]*},?', ''):gsub('"resourceVersion": "%d+"', '"resourceVersion": ""'))
    end

    -- Written back as fetched, as a copy of a cached view, and as a cached view from klua.edit,
    -- whose members not written to are sent as the bytes they were.
    it('writes back a fetched object changing nothing it did not touch: arrays, integers and nulls survive', function()
      kubectl('apply -f -', CRD)
      local ns = namespace('api-fidelity')
      local path = '/apis/example.com/v1/namespaces/' .. ns .. '/gadgets'
      local names = { 'fetched', 'cached', 'edited' }
      local before = {}
      for _, name in ipairs(names) do
        local status = sb:request('POST', path, BODY:format(name))
        assert.equals(201, status)
        before[name] = kubectl('get gadget ' .. name .. ' -o json -n ' .. ns)
      end
      run_ok([[
        local ns = ...
        local fetched = assert(klua.api.get('gadgets', ns .. '/fetched'))
        fetched.metadata.labels = { touched = 'yes' }
        assert(klua.api.update('gadgets', fetched))
        local inf = klua.informer { resource = 'gadgets', namespace = ns }
        klua.on_synced(function()
          local copy = klua.copy(inf:get(ns .. '/cached'))
          copy.metadata.labels = { touched = 'yes' }
          assert(klua.api.update('gadgets', copy))
          local edited = klua.edit(inf:get(ns .. '/edited'))
          edited.metadata.labels = { touched = 'yes' }
          assert(klua.api.update('gadgets', edited))
          klua.stop()
        end)
      ]], { args = { ns } })
      for _, name in ipairs(names) do
        local after = kubectl('get gadget ' .. name .. ' -o json -n ' .. ns)
        assert.equals('yes', cjson.decode(after).metadata.labels.touched)
        assert.equals(strip_changes(before[name]), strip_changes(after))
        -- kubectl prints 3 and 3.0 alike; the server's own bytes tell them apart.
        local _, raw = sb:request('GET', path .. '/' .. name)
        for _, piece in ipairs({ '"big":9007199254740993', '"neg":-7', '"ratio":1.5', '"tags":[]', '"empty":{}',
          '"none":null', '"nested":[{"a":[]},{"b":null}]', '"annotations":{}' }) do
          assert.truthy(raw:find(piece, 1, true), name .. ': ' .. piece .. ' lost in ' .. raw)
        end
        assert.truthy(raw:find('"size":3[,}]'), name .. ': size is no longer the integer 3 in ' .. raw)
      end
    end)

    it('fails with is_conflict when the object carries a stale resourceVersion', function()
      local ns = namespace('api-conflict')
      configmap(ns, 'c')
      local out = run_ok([[
        local ns = ...
        local a = assert(klua.api.get('configmaps', ns .. '/c'))
        local b = assert(klua.api.get('configmaps', ns .. '/c'))
        a.data.v = 'from a'
        assert(klua.api.update('configmaps', a))
        b.data.v = 'from b'
        local none, err = klua.api.update('configmaps', b)
        print(none, err.code, err.reason, klua.api.is_conflict(err))
        print(err.message)
      ]], { args = { ns } })
      local l1, l2 = out:match('^([^\n]*)\n([^\n]*)\n$')
      assert.equals('nil\t409\tConflict\ttrue', l1)
      assert.matches('the object has been modified', l2, 1, true)
      assert.equals('from a', sb:kubectl_json('get configmap c -n ' .. ns).data.v)
    end)

    it('update_status writes only the status', function()
      local ns = namespace('api-status')
      kubectl('run web --image=nginx -n ' .. ns)
      local out = run_ok([[
        local ns = ...
        local pod = assert(klua.api.get('pods', ns .. '/web'))
        pod.status.phase = 'Running'
        pod.spec.containers[1].image = 'ignored'
        local updated = assert(klua.api.update_status('pods', pod))
        print(updated.status.phase, updated.spec.containers[1].image)
      ]], { args = { ns } })
      assert.equals('Running\tnginx\n', out)
      local pod = sb:kubectl_json('get pod web -n ' .. ns)
      assert.equals('Running', pod.status.phase)
      assert.equals('nginx', pod.spec.containers[1].image)
    end)
  end)

  describe('patch', function()
    it('applies merge (the default), JSON and strategic merge patches', function()
      local ns = namespace('api-patch')
      configmap(ns, 'c', nil, { a = '1' })
      kubectl('run web --image=nginx -n ' .. ns)
      local out = run_ok([[
        local ns = ...
        local api = klua.api
        local merged = assert(api.patch('configmaps', ns .. '/c', { data = { b = '2' } }))
        print(merged.data.a, merged.data.b)
        local ops = klua.json.array { { op = 'replace', path = '/data/a', value = 'one' } }
        local patched = assert(api.patch('configmaps', ns .. '/c', ops, { type = 'json' }))
        print(patched.data.a, patched.data.b)
        local pod = assert(api.patch('pods', ns .. '/web',
          { spec = { containers = { { name = 'web', image = 'nginx:2' } } } }, { type = 'strategic' }))
        print(#pod.spec.containers, pod.spec.containers[1].image)
        print(select(2, api.patch('configmaps', ns .. '/c', {}, { type = 'yaml' })))
      ]], { args = { ns } })
      assert.equals('1\t2\none\t2\n1\tnginx:2\n'
        .. 'unknown patch type "yaml": use merge, json, strategic or apply (400 BadRequest)\n', out)
    end)

    it('applies server-side with a field_manager, and refuses apply without one', function()
      local ns = namespace('api-apply')
      local out = run_ok([[
        local ns = ...
        local desired = { apiVersion = 'v1', kind = 'ConfigMap', metadata = { name = 'applied', namespace = ns },
          data = { k = 'v' } }
        local obj = assert(klua.api.patch('configmaps', ns .. '/applied', desired,
          { type = 'apply', field_manager = 'klua-spec' }))
        print(obj.data.k, obj.metadata.managedFields[1].manager, obj.metadata.managedFields[1].operation)
        local none, err = klua.api.patch('configmaps', ns .. '/applied', desired, { type = 'apply' })
        print(none, err.code, err.message)
      ]], { args = { ns } })
      assert.equals('v\tklua-spec\tApply\nnil\t400\tserver-side apply needs opts.field_manager\n', out)
      local cm = sb:kubectl_json('get configmap applied --show-managed-fields -n ' .. ns)
      assert.equals('klua-spec', cm.metadata.managedFields[1].manager)
    end)

    it('api.apply finds the resource from apiVersion and kind, creates, and needs force to '
      .. 'take a field another manager owns', function()
      local ns = namespace('api-apply-fn')
      local out = run_ok([[
        local ns = ...
        local api = klua.api
        local function desired(replicas)
          return { apiVersion = 'apps/v1', kind = 'Deployment', metadata = { name = 'web', namespace = ns },
            spec = { replicas = replicas, selector = { matchLabels = { app = 'web' } },
              template = { metadata = { labels = { app = 'web' } },
                spec = { containers = { { name = 'web', image = 'nginx' } } } } } }
        end
        local dep = assert(api.apply(desired(2), { field_manager = 'web-controller' }))
        print(dep.spec.replicas, dep.metadata.managedFields[1].manager, dep.metadata.managedFields[1].operation)
        assert(api.patch('deployments.apps', ns .. '/web', { spec = { replicas = 5 } }, { field_manager = 'autoscaler' }))
        local none, err = api.apply(desired(3), { field_manager = 'web-controller' })
        print(none, api.is_conflict(err), err.message)
        dep = assert(api.apply(desired(3), { field_manager = 'web-controller', force = true }))
        print(dep.spec.replicas)
        print(select(2, api.apply(desired(3), {})))
        print(select(2, api.apply({ kind = 'Deployment' }, { field_manager = 'x' })))
      ]], { args = { ns } })
      assert.equals('2\tweb-controller\tApply\n'
        .. 'nil\ttrue\tApply failed with 1 conflict: conflict with "autoscaler" using apps/v1: .spec.replicas\n'
        .. '3\n'
        .. 'api.apply needs opts.field_manager: the name that owns the applied fields (400 BadRequest)\n'
        .. 'api.apply needs an object with apiVersion, kind and metadata.name (400 BadRequest)\n', out)
    end)

    -- An apply sends the fields a manager owns, built for it, as controller-runtime's
    -- apply configurations are: a stored object would claim every field it holds (and
    -- the server refuses its managedFields). Its changes go with update.
    it('api.apply refuses a view or klua.edit(obj), a whole stored object, naming klua.api.update, and sends nothing', function()
      local ns = namespace('api-apply-view')
      configmap(ns, 'stored', nil, { k = 'v' })
      local out = run_ok([[
        local ns = ...
        local inf = klua.informer { resource = 'configmaps', namespace = ns }
        klua.on_synced(function()
          local stored = inf:get(ns .. '/stored')
          local edited = klua.edit(stored)
          edited.data.k = 'changed'
          for _, obj in ipairs({ stored, edited }) do
            local ok, err = pcall(klua.api.apply, obj, { field_manager = 'x' })
            print(ok, (tostring(err):gsub('^[^:]+:%d+: ', '')))
          end
          klua.stop()
        end)
      ]], { args = { ns } })
      local what = 'klua.api.apply(obj, opts): obj is the object to apply, a table with apiVersion, kind and '
        .. 'metadata.name: the fields this manager owns (a view, or klua.edit(obj), is a whole stored object: '
        .. 'send its changes with klua.api.update), not '
      assert.equals('false\t' .. what .. 'a view\nfalse\t' .. what .. 'klua.edit(obj)\n', out)
      assert.equals('v', sb:kubectl_json('get configmap stored -n ' .. ns).data.k)
    end)
  end)

  it('delete honours preconditions: a stale resourceVersion fails with is_conflict, the right uid deletes', function()
    local ns = namespace('api-delete')
    configmap(ns, 'c')
    local out = run_ok([[
      local ns = ...
      local api = klua.api
      local cm = assert(api.get('configmaps', ns .. '/c'))
      local none, err = api.delete('configmaps', ns .. '/c', { preconditions = { resource_version = '1' } })
      print(none, err.code, api.is_conflict(err), api.get('configmaps', ns .. '/c') ~= nil)
      assert(api.delete('configmaps', ns .. '/c', { preconditions = { uid = cm.metadata.uid } }))
      local gone, gerr = api.get('configmaps', ns .. '/c')
      print(gone, api.is_not_found(gerr))
    ]], { args = { ns } })
    assert.equals('nil\t409\ttrue\ttrue\nnil\ttrue\n', out)
  end)

  it('reports a 403 so that is_forbidden is true', function()
    sb:fault { forbid = { 'secrets' } }
    local out, err, code = run([[
      local none, err = klua.api.list('secrets')
      print(none, err.code, err.reason, klua.api.is_forbidden(err), klua.api.is_not_found(err))
    ]])
    sb:reset_faults()
    assert.equals(0, code, err)
    assert.equals('nil\t403\tForbidden\ttrue\tfalse\n', out)
  end)

  it('is called by a script that exits 0 by itself once its calls are done', function()
    local ns = namespace('api-exit')
    local out, err, code = run([[
      local ns = ...
      assert(klua.api.create('configmaps', { metadata = { name = 'done', namespace = ns } }))
      print(klua.api.get('configmaps', ns .. '/done').metadata.name)
    ]], { args = { ns }, timeout = 10 })
    assert.equals(0, code, err)
    assert.equals('done\n', out)
  end)

  it('refuses calls from a coroutine the script created itself, saying where calls may be made', function()
    local out = run_ok([[
      local co = coroutine.create(function() return klua.api.get('namespaces', 'default') end)
      print(coroutine.resume(co))
      print(pcall(coroutine.wrap(function() klua.sleep(0.01) end)))
    ]])
    local l1, l2 = out:match('^([^\n]*)\n([^\n]*)\n$')
    assert.truthy(l1, out)
    assert.matches('^false\t.*not from a coroutine the script created', l1)
    assert.matches('^false\t.*not from a coroutine the script created', l2)
  end)
end)

describe('--instruction-budget', function()
  -- Runs script under a small budget; returns stdout, stderr and the status.
  local function run_budget(text, budget, ...)
    return run(text, { flags = { '--instruction-budget', budget or '100000' }, args = { ... } })
  end

  it('also stops a runaway loop inside a coroutine the script created: the task fails as a whole, naming the budget', function()
    local out, err, code = run_budget([[
      local co = coroutine.create(function() while true do end end)
      print(coroutine.resume(co))
    ]])
    assert.equals(1, code)
    assert.equals('', out)
    assert.truthy(err:find("the script's main chunk failed: stopped after running past its instruction budget "
      .. 'of 100000 instructions (raise it with --instruction-budget)', 1, true), err)
  end)

  it('cannot be caught: once over budget every further instruction fails until the callback has returned', function()
    -- Each callback catches the error and loops again, or runs more code in
    -- an xpcall handler, a __close handler or a coroutine of its own: all
    -- fail, and the script goes on with its next callback.
    local out, err, code = run_budget([[
      local function spin() while true do end end
      local tries = {
        pcall = function() while true do pcall(spin) end end,
        xpcall = function() while true do xpcall(spin, spin) end end,
        close = function()
          while true do
            pcall(function()
              local guard <close> = setmetatable({}, { __close = spin })
              spin()
            end)
          end
        end,
        coroutine = function()
          while true do coroutine.resume(coroutine.create(function() while true do pcall(spin) end end)) end
        end,
      }
      for _, name in ipairs({ 'pcall', 'xpcall', 'close', 'coroutine' }) do
        klua.after(0, function() tries[name]() print('escaped with ' .. name) end)
      end
      klua.after(0.1, function() print('task_errors', klua.stats().task_errors) end)
    ]])
    assert.equals(0, code, err)
    assert.equals('task_errors\t4\n', out)
    assert.equals(4, K.count(err, 'klua.after callback failed: [^\n]*past its instruction budget of 100000'), err)
  end)

  it('stops every handler call that runs away, not only the first', function()
    local ns = namespace('budget-every-call')
    for _, name in ipairs({ 'a', 'b', 'c' }) do configmap(ns, name) end
    local out, err, code = run_budget([[
      local inf = klua.informer { resource = 'configmaps', namespace = ... }
      inf:on('add', function(o) print('started', o.metadata.name) while true do end end)
      klua.on_synced(function()
        print('task_errors', klua.stats().task_errors)
        klua.stop()
      end)
    ]], '1000000', ns)
    assert.equals(0, code, err)
    assert.equals('started\ta\nstarted\tb\nstarted\tc\ntask_errors\t3\n', out)
  end)
end)

-- For the --memory-limit scripts below: in_each_room(outcomes, try, judge) fills
-- the Lua state, frees round * 32 KiB of it and calls try() in that room, for
-- rounds 0 to 30; counts in outcomes judge(what try returned), or try's error,
-- judged once the room is given back; returns outcomes.
local IN_EACH_ROOM = [[
local function in_each_room(outcomes, try, judge)
  local hog, size
  local function grow() hog = { hog, ('x'):rep(size) .. size } end
  for round = 0, 30 do
    collectgarbage()
    size = 1 << 16
    while size > 0 do
      if not pcall(grow) then size = size // 2 end
    end
    local free = round * 32768
    while hog and free > 0 do
      free = free - #hog[2]
      hog = hog[1]
    end
    local ok, v = pcall(try)
    hog = nil
    local o = ok and judge(v) or v
    outcomes[o] = (outcomes[o] or 0) + 1
  end
  collectgarbage()
  return outcomes
end

-- Prints each outcome but `expected` and running out of memory, after label if given.
local function print_others(outcomes, expected, label)
  for k, n in pairs(outcomes) do
    if k ~= expected and k ~= 'not enough memory' then
      if label then print(label, 'other', k, n) else print('other', k, n) end
    end
  end
end
]]

-- Runs body under --memory-limit 16 once an informer, inf, holds the ConfigMap big (key
-- its key) of a namespace named ns, whose data.note is 100,000 bytes: in_each_room and
-- print_others in scope. Returns run's output, errors and exit code.
local function on_big(ns, body)
  ns = namespace(ns)
  configmap(ns, 'big', nil, { note = ('n'):rep(100000) })
  return run(IN_EACH_ROOM .. [[
    local ns = ...
    local key = ns .. '/big'
    local inf = klua.informer { resource = 'configmaps', namespace = ns }
    klua.on_synced(function()
  ]] .. body .. [[
      klua.stop()
    end)
  ]], { flags = { '--memory-limit', '16' }, args = { ns }, timeout = 60 })
end

describe('--memory-limit', function()
  it('fails a handler that allocates without bound, naming it and the limit, while other handlers and events go on', function()
    local ns = namespace('memory')
    configmap(ns, 'a-hog')
    configmap(ns, 'b-fine')
    local out, err, code = run([[
      local inf = klua.informer { resource = 'configmaps', namespace = ... }
      inf:on('add', function(o)
        if o.metadata.name ~= 'a-hog' then return end
        local t = {}
        for i = 1, math.huge do t[i] = ('x'):rep(64) .. i end
      end)
      inf:on('add', function(o) print('second handler', o.metadata.name) end)
      klua.on_synced(function()
        print('errors', klua.stats().task_errors)
        klua.stop()
      end)
    ]], { flags = { '--memory-limit', '16' }, args = { ns }, timeout = 30 })
    assert.equals(0, code, err)
    assert.equals('second handler\ta-hog\nsecond handler\tb-fine\nerrors\t1\n', out)
    assert.truthy(err:find('add handler of configmaps -n memory: not enough memory: the Lua state reached its '
      .. 'limit of 16 MiB (raise it with --memory-limit)', 1, true), err)
  end)

  it('still binds in a callback after a callback it started inside itself has run', function()
    -- klua.on_synced after the sync runs its function at once, as a task
    -- inside the calling one; the caller is limited as before afterwards.
    local out, err, code = run([[
      klua.informer('namespaces')
      klua.on_synced(function()
        klua.after(0, function()
          klua.on_synced(function() print('inner ran') end)
          local t = {}
          for i = 1, math.huge do t[i] = ('x'):rep(64) .. i end
        end)
        klua.after(0.2, function() print('errors', klua.stats().task_errors) klua.stop() end)
      end)
    ]], { flags = { '--memory-limit', '16' }, timeout = 30 })
    assert.equals(0, code, err)
    assert.equals('inner ran\nerrors\t1\n', out)
    assert.truthy(err:find('klua.after callback: not enough memory: the Lua state reached its limit of 16 MiB', 1, true), err)
  end)

  it('never keeps a callback from starting for lack of memory: its thread is klua\'s, made past the limit', function()
    -- klua.on_synced after the sync starts its callback at once, inside the calling
    -- task, on a new thread while every pooled one waits. Each round fills the Lua
    -- state and frees a little more of it, so that in some round klua.on_synced's own
    -- table fits and the thread would not.
    local out, err, code = run([[
      local core = require('klua.core')
      for _ = 1, 80 do klua.after(0, function() klua.sleep(30) end) end
      klua.after(0.5, function()
        local ran, outcomes = 0, {}
        local function inner() ran = ran + 1 klua.sleep(30) end
        local hog, size
        local function grow() hog = { hog, ('x'):rep(size) .. size } end
        local function tiny() hog = { hog } end
        for freed = 0, 12 do
          collectgarbage()
          size = 1 << 16
          while size > 0 do
            if not pcall(grow) then size = size // 2 end
          end
          while pcall(tiny) do end
          for _ = 1, freed do hog = hog[1] end
          local ok, e = pcall(core.on_synced, inner)
          hog = nil
          outcomes[#outcomes + 1] = ok and 'ran' or e
        end
        local seen = {}
        for _, o in ipairs(outcomes) do seen[o] = true end
        print('rounds', #outcomes, 'callbacks ran', ran > 0, 'calls refused', seen['not enough memory'])
        klua.stop()
      end)
    ]], { flags = { '--memory-limit', '16' }, timeout = 30 })
    assert.equals(0, code, err)
    -- Some rounds left klua.on_synced no room for its own table (a Lua error in the
    -- caller, as the limit says), the others started the callback.
    assert.equals('rounds\t13\tcallbacks ran\ttrue\tcalls refused\ttrue\n', out, err)
  end)

  it('fails a decode that does not fit cleanly, and decodes exactly once there is room', function()
    -- klua.json.decode and klua.copy share the decoder and its cache of short strings
    -- (lua_json.c). Each round fills the Lua state and frees 32 KiB more of it than the
    -- round before, so that the decode runs out of memory at different points of filling
    -- that cache, until it fits.
    local out, err, code = K.run(K.offline_args(IN_EACH_ROOM .. [[
      local N = 3000
      local parts = {}
      for i = 1, N do parts[i] = ('"key-%d":"value-%d"'):format(i, i % 97) end
      local text = '{' .. table.concat(parts, ',') .. '}'
      local function exact(t)
        for i = 1, N do
          if t['key-' .. i] ~= 'value-' .. i % 97 then return false end
        end
        return true
      end
      klua.after(0, function()
        local outcomes = in_each_room({ ['not enough memory'] = 0, exact = 0, wrong = 0, other = 0 },
          function() return klua.json.decode(text) end,
          function(t) return exact(t) and 'exact' or 'wrong' end)
        print('refused', outcomes['not enough memory'] > 0, 'exact', outcomes.exact > 0, 'wrong', outcomes.wrong,
          'other', outcomes.other, 'afterwards', exact(klua.json.decode(text)))
        klua.stop()
      end)
    ]], { '--memory-limit', '16' }), { timeout = 60 })
    assert.equals(0, code, err)
    assert.equals('refused\ttrue\texact\ttrue\twrong\t0\tother\t0\tafterwards\ttrue\n', out, err)
  end)

  -- A view's parsed form is a block of its own from the Lua state's allocator, made
  -- after the view: the read that it does not fit in fails as any allocation would,
  -- and the view made so far lets go of the object's bytes (the ASan run checks it).
  it('fails a cache read whose parsed form does not fit, and reads once there is room', function()
    local out, err, code = on_big('memory-view', [[
        local outcomes = in_each_room({ ['not enough memory'] = 0, read = 0 },
          function() return #inf:get(key).data.note end,
          function(n) return n == 100000 and 'read' or 'wrong' end)
        print_others(outcomes, 'read')
        print('refused', outcomes['not enough memory'] > 0, 'read', outcomes.read > 0,
          'afterwards', #inf:get(key).data.note)
    ]])
    assert.equals(0, code, err)
    assert.equals('refused\ttrue\tread\ttrue\tafterwards\t100000\n', out, err)
  end)

  -- klua.edit copies a parsed object's tape, or encodes an edited one into bytes of its
  -- own: either may not fit, and the edit made so far lets go of what it holds (the ASan
  -- run checks it).
  it('fails a klua.edit that does not fit, of a parsed object and of an edited one, and edits once there is room', function()
    local out, err, code = on_big('memory-edit', [[
        local parsed = inf:get(key)
        assert(parsed.metadata.name == 'big')
        local edited = klua.edit(parsed)
        edited.data.extra = 'x'
        local function judge(e) return #e.data.note == 100000 and 'edited' or 'wrong' end
        for what, v in pairs({ parsed = parsed, edited = edited }) do
          local outcomes = in_each_room({ ['not enough memory'] = 0, edited = 0 },
            function()
              local e = klua.edit(v)
              e.data.mine = 'y'
              return e
            end, judge)
          print_others(outcomes, 'edited', what)
          print(what, 'refused', outcomes['not enough memory'] > 0, 'edited', outcomes.edited > 0)
        end
    ]])
    assert.equals(0, code, err)
    local lines = {}
    for line in out:gmatch('[^\n]+') do lines[#lines + 1] = line end
    table.sort(lines)
    assert.same({ 'edited\trefused\ttrue\tedited\ttrue', 'parsed\trefused\ttrue\tedited\ttrue' }, lines, err)
  end)
end)

describe('klua.queue', function()
  it('says whether an add queued the key or merged into one waiting, and how long a rate-limited add waits', function()
    local out, err, code = K.run(K.offline_args([[
      local q = klua.queue { base_delay = 0.25, qps = 1000, burst = 1000 }
      print(q:add('a'), q:add('a'), q:add('b'))
      print(q:add_rate_limited('c'), q:add_rate_limited('c'), q:add_rate_limited('c'))
      q:shutdown()
      print(q:add('d'))
    ]]))
    assert.equals(0, code, err)
    assert.equals('true\tfalse\ttrue\n0.25\t0.5\t1.0\nfalse\n', out)
  end)
end)
