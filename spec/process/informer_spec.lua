-- An informer keeps a correct local copy of a resource and tells the
-- script's handlers about every change: the initial list as adds, then each
-- watch event, across drops, relists and server faults.
local K = require('support.klua')
local I = require('support.informer')
local testing = require('klua.testing')

local CM = '/api/v1/namespaces/default/configmaps'

local function contains(list, item)
  for _, v in ipairs(list) do if v == item then return true end end
  return false
end

describe('an informer', function()
  -- A server per spec: it and the recorder a spec starts are stopped after it.
  local sb = testing.with_sandbox { each = true, bookmark_interval = 0.5 }

  it('delivers the existing objects as adds from the initial list, then reports synced', function()
    local rv1 = I.configmap(sb, 'one')
    local rv2 = I.configmap(sb, 'two')
    local p = I.start(sb, 'configmaps')
    local calls = I.calls(p)
    assert.same({ 'add default/one ' .. rv1 .. ' true', 'add default/two ' .. rv2 .. ' true' }, calls)
    assert.truthy(p:output():find('synced 2', 1, true))
  end)

  it('delivers add, update with old and new, and delete for changes made with kubectl', function()
    local p = I.start(sb, 'cm')
    sb:kubectl('create configmap web --from-literal=a=1')
    assert.truthy(p:wait_for('add default/web'))
    local created = sb:kubectl_json('get configmap web').metadata.resourceVersion
    sb:kubectl('label configmap web tier=front')
    assert.truthy(p:wait_for('update default/web'))
    local labelled = sb:kubectl_json('get configmap web').metadata.resourceVersion
    sb:kubectl('delete configmap web')
    assert.truthy(p:wait_for('delete default/web'))
    local calls = I.calls(p)
    assert.equals(3, #calls)
    assert.equals('add default/web ' .. created .. ' false', calls[1])
    assert.equals('update default/web ' .. created .. ' ' .. labelled, calls[2])
    -- The DELETED event carries the revision of the deletion itself.
    local deleted_rv = tonumber(calls[3]:match('^delete default/web (%d+) false$'))
    assert.truthy(deleted_rv and deleted_rv > tonumber(labelled))
  end)

  it('keeps the cache equal to the server after a burst of 1,000 changes by kubectl and direct API calls', function()
    local p = I.start(sb, 'configmaps', { namespace = 'default' })
    local root = os.getenv('KLUA_ROOT')
    local n = K.run_command(('python3 %s/spec/support/burst.py %s default burst 500 300 100'):format(root, sb.url))
    assert.equals('900', n)
    local docs = {}
    for i = 1, 50 do
      docs[#docs + 1] = ('apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: k-%d\n  labels: {from: kubectl}'):format(i)
    end
    local _, ok = sb:try_kubectl('create -f -', table.concat(docs, '\n---\n'))
    assert.is_true(ok)
    _, ok = sb:try_kubectl('label configmaps -l from=kubectl changed=yes')
    assert.is_true(ok)
    local cache = I.converged(sb, p, CM)
    assert.equals(450, select(2, cache:gsub('\n', '')))
    assert.equals(0, I.stale(p))
  end)

  it('delivers exactly the changes made during a gap when a 410 forces a relist', function()
    I.configmap(sb, 'kept')
    I.configmap(sb, 'changed')
    I.configmap(sb, 'removed')
    local p = I.start(sb, 'configmaps', { flags = { '-v', '2' } })
    local before = #I.events(p)
    -- Every watch is now cut before its first event: the informer sees nothing.
    sb:fault { watch_drop_after = 0 }
    local st, obj = sb:json('PATCH', CM .. '/changed', { data = { v = '2' } },
      { ['Content-Type'] = 'application/merge-patch+json' })
    assert.equals(200, st)
    local changed_rv = obj.metadata.resourceVersion
    assert.equals(200, (sb:json('DELETE', CM .. '/removed')))
    local added_rv = I.configmap(sb, 'added')
    -- The history moves on: the informer's resourceVersion is now too old.
    sb:fault { compact = true }
    sb:reset_faults()
    assert.truthy(p:wait_for('delete default/removed', 15))
    local calls = I.calls(p, before)
    table.sort(calls)
    local old_rv = p:output():match('add default/changed (%d+)')
    local removed_rv = p:output():match('add default/removed (%d+)')
    assert.same({
      'add default/added ' .. added_rv .. ' false',
      'delete default/removed ' .. removed_rv .. ' true',
      'update default/changed ' .. old_rv .. ' ' .. changed_rv,
    }, calls)
    assert.truthy(p:errors():find('resourceVersion', 1, true))
    I.converged(sb, p, CM)
  end)

  it('answers get and list from its cache with read-only views', function()
    I.configmap(sb, 'cfg', { greeting = 'hello' })
    local script = K.script([[
      local inf = klua.informer { resource = 'configmaps' }
      klua.on_synced(function()
        local cm = inf:get('default/cfg')
        print('get', cm.metadata.name, cm.data.greeting)
        print('missing', inf:get('default/nope'))
        print('list', #inf:list())
        local ok, err = pcall(function() cm.data.greeting = 'bye' end)
        print('write', ok, err:match('read%-only') ~= nil)
        local copy = klua.copy(cm)
        copy.data.greeting = 'bye'
        print('copy', copy.data.greeting, cm.data.greeting)
        klua.stop()
      end)
    ]])
    local out, err, code = K.run({ '--kubeconfig', sb.kubeconfig, 'run', script })
    assert.equals(0, code, err)
    assert.equals('get\tcfg\thello\nmissing\tnil\nlist\t1\nwrite\tfalse\ttrue\ncopy\tbye\thello\n', out)
  end)

  it('names a failing handler by its informer\'s whole name, however long its selectors make it', function()
    local selector = 'klua.dev/spec-label-with-a-long-key!=a-value-that-makes-the-name-long,other-key!=x'
    local script = K.script(([[
      local inf = klua.informer { resource = 'configmaps', namespace = 'default', label_selector = '%s' }
      inf:on('add', function(o) error('cannot handle ' .. o.metadata.name) end)
      klua.every(0.05, function() if klua.stats().task_errors > 0 then klua.stop() end end)
    ]]):format(selector))
    I.configmap(sb, 'long-name')
    local _, err, code = K.run({ '--kubeconfig', sb.kubeconfig, 'run', script })
    assert.equals(0, code, err)
    assert.truthy(err:find('add handler of configmaps -n default -l ' .. selector .. ' failed: ', 1, true), err)
  end)

  it('logs a failing handler with its traceback, counts it, and goes on with the next events', function()
    local script = K.script([[
      local inf = klua.informer { resource = 'configmaps' }
      inf:on('add', function(o)
        if o.metadata.name == 'bad' then error('cannot handle ' .. o.metadata.name) end
        print('handled', o.metadata.name)
      end)
      inf:on('add', function(o) print('second handler', o.metadata.name) end)
      klua.every(0.05, function()
        if inf:get('default/good') then print('errors', klua.stats().task_errors); klua.stop() end
      end)
    ]])
    I.configmap(sb, 'bad')
    I.configmap(sb, 'good')
    local out, err, code = K.run({ '--kubeconfig', sb.kubeconfig, 'run', script })
    assert.equals(0, code)
    assert.truthy(err:find('cannot handle bad', 1, true))
    assert.truthy(err:find('stack traceback', 1, true))
    assert.truthy(err:find('add handler of configmaps', 1, true))
    assert.truthy(out:find('second handler\tbad', 1, true))
    assert.truthy(out:find('handled\tgood', 1, true))
    assert.truthy(out:find('errors\t1', 1, true))
  end)

  it('stops a handler that runs past its instruction budget and keeps delivering', function()
    local script = K.script([[
      local inf = klua.informer { resource = 'configmaps' }
      inf:on('add', function(o)
        if o.metadata.name == 'spin' then while true do end end
        print('handled', o.metadata.name)
        klua.stop()
      end)
    ]])
    I.configmap(sb, 'spin')
    I.configmap(sb, 'zzz')
    local out, err, code = K.run({ '--kubeconfig', sb.kubeconfig, '--instruction-budget', '100000', 'run', script })
    assert.equals(0, code)
    assert.truthy(err:find('instruction budget of 100000', 1, true))
    assert.equals('handled\tzzz\n', out)
  end)

  it('delivers every event in order to a slow handler, reading the stream only as fast as it consumes', function()
    local script = K.script([[
      local inf = klua.informer { resource = 'configmaps' }
      local seen = 0
      inf:on('add', function(o, initial)
        if initial then return end
        klua.sleep(0.002)
        seen = seen + 1
        print(o.metadata.name)
        if seen == 300 then klua.stop() end
      end)
      klua.on_synced(function() io.stderr:write('ready\n') end)
    ]])
    local pr = K.spawn({ '--kubeconfig', sb.kubeconfig, 'run', script })
    assert.truthy(pr:wait_for('ready', 10, 'err'))
    K.run_command(('python3 %s/spec/support/burst.py %s default slow 300 0 0'):format(os.getenv('KLUA_ROOT'), sb.url))
    assert.equals(0, pr:wait(30))
    local expected = {}
    for i = 0, 299 do expected[#expected + 1] = 'slow-' .. i end
    local got = {}
    for line in pr:output():gmatch('[^\n]+') do got[#got + 1] = line end
    pr:cleanup()
    assert.same(expected, got)
  end)

  it('narrates its reflector at -v 2: lists, watches, bookmarks, relists and waits', function()
    local p = I.start(sb, 'configmaps', { flags = { '--watch-list=false', '-v', '2' } })
    assert.truthy(p:wait_for('BOOKMARK at resourceVersion', 5, 'err'))
    sb:fault { expire_watches = true }
    assert.truthy(p:wait_for('relisting', 5, 'err'), p:errors())
    sb:fault { fail = { count = 1, code = 503, verbs = { 'list' } } }
    sb:fault { expire_watches = true }
    assert.truthy(p:wait_for('waiting [%d.]+ s before LIST', 10, 'err'), p:errors())
    local log = p:errors()
    assert.truthy(log:find('LIST from resourceVersion "0"', 1, true))
    assert.truthy(log:find('WATCH from resourceVersion', 1, true))
    assert.truthy(log:find('LIST complete', 1, true))
  end)

  it('narrates a watch-list at -v 2: the request, the end of its initial events, the watch it becomes', function()
    I.configmap(sb, 'narrated-watch-list')
    local p = I.start(sb, 'configmaps', { flags = { '-v', '2' } })
    local log = p:errors()
    assert.truthy(log:find('IDLE -> WATCHLIST: start, WatchList on (the default)', 1, true), log)
    assert.truthy(log:find('WATCH with initial events %(timeout %d+ s%)'), log)
    assert.truthy(log:find('initial events end at resourceVersion %d+: %d+ objects'), log)
    assert.truthy(log:find('WATCHLIST -> WATCH: initial-events-end bookmark', 1, true), log)
    assert.is_nil(log:find('LIST from', 1, true), log)
  end)

  -- malloc_trim walks every free chunk of the heap, and after a relist or a
  -- resync there is one between most cached objects: 0.2 s of the loop at
  -- 1,000,000 objects (docs/benchmarks.md). Only the first list's burst is
  -- followed by a trim.
  it('hands back the memory of its initial list once, not after each resync', function()
    local root = os.getenv('KLUA_ROOT')
    -- Over 1,024 notifications at once grow the queue past what it keeps.
    assert.equals('1100', K.run_command(('python3 %s/spec/support/burst.py %s default bulk 1100 0 0')
      :format(root, sb.url)))
    local out, err = K.run_script_ok([[
      local inf = klua.informer { resource = 'configmaps', namespace = 'default', resync = 0.3 }
      local updates = 0
      inf:on('update', function()
        updates = updates + 1
        if updates == 2 * 1100 then print('two resyncs') klua.stop() end
      end)
    ]], { kubeconfig = sb.kubeconfig, flags = { '-v', '2' }, timeout = 60 })
    assert.equals('two resyncs\n', out)
    local _, trims = err:gsub('the initial list handled: its freed memory handed back', '')
    assert.equals(1, trims, err)
  end)
end)
