-- Stopping an informer: inf:stop() ends its watch, frees its cache and its handlers, and
-- closes its handle; it is safe from one of the informer's own handlers, even one still
-- waiting on the API, and the other informers go on.
local testing = require('klua.testing')
local K = require('support.klua')

local SCRIPT = [[
io.stdout:setvbuf('line')
local cms = klua.informer { resource = 'configmaps', namespace = 'default' }
local pods = klua.informer { resource = 'pods', namespace = 'default' }
local mode = klua.args[1]
cms:on('add', function(obj)
  print('cm add ' .. obj.metadata.name)
  if obj.metadata.name == 'stop-me' then
    if mode == 'waiting' then klua.api.get('configmaps', 'default/stop-me') end
    cms:stop()
    cms:stop()
    print('still reads ' .. obj.metadata.name)
    print(select(2, pcall(cms.get, cms, 'default/stop-me')))
    if mode == 'waiting' then klua.sleep(0.2) end
    print('handler done')
  end
end)
pods:on('add', function(obj) print('pod add ' .. obj.metadata.name) end)
]]

describe('inf:stop()', function()
  local sb = testing.with_sandbox { each = true }

  for _, mode in ipairs({ 'at once', 'waiting' }) do
    it('from a handler of that informer (' .. mode .. '): no more of its events, its watch closed, the rest goes on',
      function()
        local p = K.spawn({ '--kubeconfig', sb.kubeconfig, 'run', K.script(SCRIPT), mode })
        testing.eventually(function() return (sb:stats().watches.configmaps or 0) == 1 end, 15 * K.slowdown)
        sb:kubectl('create configmap stop-me')
        assert.truthy(p:wait_for('handler done', 15 * K.slowdown), p:errors())
        testing.eventually(function() return (sb:stats().watches.configmaps or 0) == 0 end, 15 * K.slowdown,
          { what = 'the stopped informer closing its watch' })
        sb:kubectl('create configmap after')
        sb:kubectl('run web --image=nginx')
        assert.truthy(p:wait_for('pod add web', 15 * K.slowdown), p:errors())
        local out = p:output()
        p:cleanup()
        assert.is_nil(out:find('cm add after', 1, true), out)
        assert.truthy(out:find('still reads stop-me', 1, true), out)
        assert.truthy(out:find('this informer is stopped (inf:stop() was called)', 1, true), out)
      end)
  end

  it('ends klua when nothing else is left to run', function()
    local _, err, code = K.run({ '--kubeconfig', sb.kubeconfig, 'run', K.script([[
      local cms = klua.informer { resource = 'configmaps' }
      klua.on_synced(function() cms:stop() end)
    ]]) })
    assert.equals(0, code, err)
  end)

  -- 2,000 ConfigMaps created in default (burst.py's requests counted): views
  -- enough for the collector to run finalizers while they are made.
  local function bulk_configmaps()
    assert.equals('2000', K.run_command(('python3 %s/spec/support/burst.py %s default bulk 2000 0 0')
      :format(os.getenv('KLUA_ROOT'), sb.url)))
  end

  -- inf:list() and inf:get() read the cache while they make views, and making
  -- a view may run the collector, whose finalizers may be any of the
  -- script's code: one that stops the informer frees the cache it reads.
  it('from a finalizer the collector runs while inf:list() makes its views', function()
    bulk_configmaps()
    local out, err = K.run_script_ok([[
      local inf = klua.informer { resource = 'configmaps', namespace = 'default' }
      klua.on_synced(function()
        klua.after(0, function()
          setmetatable({}, { __gc = function() print('finalizer stops it') inf:stop() end })
          -- A cycle at each allocation: finalizers run within the list.
          collectgarbage('incremental', 1, 1000, 0)
          local all = inf:list()
          local ok, mine = pcall(inf.list, inf, { namespace = 'default' })
          collectgarbage('incremental', 200, 100, 13)
          print(#all, ok and #mine or mine)
        end)
      end)
    ]], { kubeconfig = sb.kubeconfig, timeout = 60 })
    -- Whichever list the finalizer ran in returned every object; a list
    -- after it is refused.
    assert.truthy(out:find('^finalizer stops it\n2000\t'), out .. err)
    assert.truthy(out:find('\t2000\n$') or out:find('is stopped (inf:stop() was called)\n', 1, true), out)
  end)

  -- The views of each notification are made before its handler runs: a
  -- finalizer run then may stop the informer being dispatched.
  it('from a finalizer the collector runs while a notification\'s views are made', function()
    bulk_configmaps()
    local out, err = K.run_script_ok([[
      local inf = klua.informer { resource = 'configmaps', namespace = 'default' }
      local in_handler, stopped, adds = false, false, 0
      -- Outside a handler it stops the informer; inside one it waits for
      -- the next cycle.
      local function arm()
        setmetatable({}, { __gc = function()
          if in_handler then arm() elseif not stopped then stopped = true print('finalizer stops it') inf:stop() end
        end })
      end
      inf:on('add', function()
        in_handler = true
        adds = adds + 1
        if adds == 1 then
          arm()
          collectgarbage('incremental', 1, 1000, 0)
        end
        in_handler = false
      end)
      klua.every(0.05, function()
        if not stopped then return end
        collectgarbage('incremental', 200, 100, 13)
        print('stopped after', adds > 0 and 'some adds' or 'none')
        klua.stop()
      end)
    ]], { kubeconfig = sb.kubeconfig, timeout = 60 })
    assert.equals('finalizer stops it\nstopped after\tsome adds\n', out, err)
  end)
end)
