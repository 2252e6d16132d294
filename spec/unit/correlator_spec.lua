-- klua.record_event's correlator (lua/klua/correlator.lua) holds what it
-- knows of past Events in caches bounded as client-go's
-- (tools/record/events_cache.go: maxLruCacheEntries = 4096), the least
-- recently used key forgotten first: a controller that records Events about
-- ever new objects does not grow the process without end.
local correlator = require('klua.internal.correlator')

-- An Event about ConfigMap default/<name>, as klua.helpers.event_for makes it.
local function event(name, message)
  return {
    apiVersion = 'v1', kind = 'Event',
    metadata = { generateName = name .. '.', namespace = 'default' },
    involvedObject = { apiVersion = 'v1', kind = 'ConfigMap', name = name, namespace = 'default', uid = 'uid-' .. name },
    type = 'Normal', reason = 'Synced', message = message or 'done', count = 1,
    firstTimestamp = '2023-11-14T22:13:20Z', lastTimestamp = '2023-11-14T22:13:20Z',
    source = { component = 'spec' }, reportingComponent = 'spec',
  }
end

-- Correlates an Event about name and records it as stored under name ".stored".
local function record(c, name)
  local r = assert(c:correlate(event(name)))
  c:update(r.key, { metadata = { name = name .. '.stored' }, count = r.event.count,
    firstTimestamp = r.event.firstTimestamp })
  return r
end

describe('the event correlator', function()
  before_each(function()
    local t = 1700000000
    correlator.set_clock(function()
      t = t + 1 -- a second apart: no object reaches the spam filter's burst
      return t
    end)
  end)

  after_each(function() correlator.set_clock(os.time) end)

  it('updates an Event seen before, by the name the server gave it, with its count', function()
    local c = correlator.new()
    assert.is_nil(record(c, 'web').name)
    local again = record(c, 'web')
    assert.are.same({ 'web.stored', 2 }, { again.name, again.event.count })
  end)

  it('remembers 4096 Events, as client-go, and forgets the least recently used one first', function()
    local c = correlator.new()
    assert.equals(4096, correlator.CACHE_SIZE)
    record(c, 'first')
    for i = 1, 4095 do record(c, 'other-' .. i) end
    local remembered = record(c, 'first')
    assert.are.same({ 'first.stored', 2 }, { remembered.name, remembered.event.count })
    for i = 4096, 2 * 4096 do record(c, 'other-' .. i) end
    local forgotten = record(c, 'first')
    assert.are.same({ nil, 1 }, { forgotten.name, forgotten.event.count })
    for _, cache in ipairs { c.seen, c.aggregates, c.spam } do assert.equals(4096, cache.n) end
  end)
end)
