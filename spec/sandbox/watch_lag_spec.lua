-- The sandbox's --watch-lag: each change reaches the watch cache, and so the watches
-- and the lists it serves, that many seconds after its write was answered, as a loaded
-- kube-apiserver's watch cache trails etcd; reads of storage (a GET, a consistent LIST)
-- see it at once.
local testing = require('klua.testing')

local CM = '/api/v1/namespaces/default/configmaps'

local function names(list)
  local out = {}
  for _, item in ipairs(list.items) do out[#out + 1] = item.metadata.name end
  return table.concat(out, ',')
end

describe('the sandbox with --watch-lag 5', function()
  local sb = testing.with_sandbox { args = { '--watch-lag', '5' } }

  it('answers a write at once and delivers it to watches and the watch cache later, in order', function()
    local before = sb:stats().resourceVersion
    local w = sb:watch(CM .. '?watch=1&resourceVersion=' .. before, { max_time = 30 })
    local status, created = sb:json('POST', CM, { metadata = { name = 'first' } })
    assert.equals(201, status)
    assert.equals(201, (sb:json('POST', CM, { metadata = { name = 'second' } })))
    assert.equals(200, (sb:json('GET', CM .. '/first')))
    local _, consistent = sb:json('GET', CM)
    assert.equals('first,second', names(consistent))
    local _, cached = sb:json('GET', CM .. '?resourceVersion=0')
    assert.equals('', names(cached))
    assert.is_true(tonumber(cached.metadata.resourceVersion) < tonumber(created.metadata.resourceVersion))
    assert.equals(0, #w.events())
    assert.is_truthy(w.wait_for(function(events) return #events == 2 end, 30))
    local events = w.events()
    assert.equals('ADDED first', events[1].type .. ' ' .. events[1].object.metadata.name)
    assert.equals('ADDED second', events[2].type .. ' ' .. events[2].object.metadata.name)
    local _, later = sb:json('GET', CM .. '?resourceVersion=0')
    assert.equals('first,second', names(later))
    w.stop()
  end)
end)
