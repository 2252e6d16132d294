-- Stopping an informer: inf:stop() ends its watch, frees its cache and its handlers, and
-- closes its handle; it is safe from one of the informer's own handlers, even one still
-- waiting on the API, and the other informers go on.
local testing = require 'klua.testing'
local K = require 'support.klua'

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
end)
