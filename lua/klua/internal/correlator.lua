-- The EventCorrelator of client-go's core/v1 event recorder
-- (tools/record/events_cache.go, client-go 1.32; controller-runtime's
-- GetEventRecorderFor uses that recorder), which klua.record_event runs
-- every Event through before writing it, so that a controller failing in a
-- loop stores what a client-go controller stores:
--   - an Event seen again (same source, object, type, reason and message)
--     is the same Event object: its count grows, by a PATCH of count,
--     lastTimestamp and message;
--   - similar Events (the same but for the message) become, from the 10th
--     distinct message on, one Event "(combined from similar events): <the
--     last message>" whose count grows; a gap of more than 10 minutes
--     between similar Events starts the count of messages again;
--   - a source may send 25 Events about an object (and type) at once, and
--     then 1 more every 5 minutes: the rest are dropped.
-- Each of the three caches holds at most 4096 keys, the least recently
-- used forgotten first (groupcache's lru, as client-go's).
local M = {}

-- client-go's defaults (events_cache.go).
M.CACHE_SIZE = 4096
M.AGGREGATE_MAX_EVENTS = 10
M.AGGREGATE_INTERVAL = 600
M.SPAM_BURST = 25
M.SPAM_QPS = 1 / 300

local clock = os.time

--- Sets the clock of the aggregation window and the spam filter: a
-- function returning seconds since the Unix epoch (os.time by default).
function M.set_clock(fn) clock = fn end

-- An LRU cache of at most `size` keys: a map and a list, most recent first.
local Lru = {}
Lru.__index = Lru

local function lru(size) return setmetatable({ size = size, n = 0, map = {} }, Lru) end

function Lru:_unlink(node)
  if node.prev then node.prev.next = node.next else self.head = node.next end
  if node.next then node.next.prev = node.prev else self.tail = node.prev end
  node.prev, node.next = nil, nil
end

function Lru:_push(node)
  node.next = self.head
  if self.head then self.head.prev = node end
  self.head = node
  self.tail = self.tail or node
end

function Lru:get(key)
  local node = self.map[key]
  if not node then return nil end
  self:_unlink(node)
  self:_push(node)
  return node.value
end

function Lru:add(key, value)
  local node = self.map[key]
  if node then
    node.value = value
    self:_unlink(node)
    self:_push(node)
    return
  end
  node = { key = key, value = value }
  self.map[key] = node
  self:_push(node)
  self.n = self.n + 1
  if self.n > self.size then
    local oldest = self.tail
    self:_unlink(oldest)
    self.map[oldest.key] = nil
    self.n = self.n - 1
  end
end

-- The keys are client-go's: its fields joined with nothing between them.
local function join(...)
  local parts = table.pack(...)
  for i = 1, parts.n do parts[i] = parts[i] == nil and '' or tostring(parts[i]) end
  return table.concat(parts, '', 1, parts.n)
end

local function source(ev) return ev.source or {} end
local function involved(ev) return ev.involvedObject or {} end

-- getEventKey: what makes two Events the same one.
local function event_key(ev)
  local s, o = source(ev), involved(ev)
  return join(s.component, s.host, o.kind, o.namespace, o.name, o.fieldPath, o.uid, o.apiVersion, ev.type,
    ev.reason, ev.message)
end

--- getSpamKey: the source, object and type whose Events share a spam
-- budget. Every key the correlator files an Event under extends it, so
-- that Events with different spam keys never touch the same entry.
function M.spam_key(ev)
  local s, o = source(ev), involved(ev)
  return join(s.component, s.host, o.kind, o.namespace, o.name, o.uid, o.apiVersion, ev.type)
end

-- EventAggregatorByReasonFunc: the group of similar Events, and what
-- tells them apart (the message).
local function aggregate_key(ev)
  local s, o = source(ev), involved(ev)
  return join(s.component, s.host, o.kind, o.namespace, o.name, o.uid, o.apiVersion, ev.type, ev.reason,
    ev.reportingComponent, ev.reportingInstance), ev.message or ''
end

-- The Event that stands for similar ones: client-go copies these fields only.
local function combined(ev)
  return {
    apiVersion = 'v1',
    kind = 'Event',
    metadata = { generateName = involved(ev).name .. '.', namespace = ev.metadata.namespace },
    count = 1,
    firstTimestamp = ev.lastTimestamp,
    lastTimestamp = ev.lastTimestamp,
    involvedObject = ev.involvedObject,
    message = '(combined from similar events): ' .. (ev.message or ''),
    type = ev.type,
    reason = ev.reason,
    source = ev.source,
  }
end

local Correlator = {}
Correlator.__index = Correlator

--- A correlator with client-go's settings; opts.cache_size overrides the
-- size of its caches (client-go's CorrelatorOptions.LRUCacheSize).
function M.new(opts)
  local size = opts and opts.cache_size or M.CACHE_SIZE
  return setmetatable({ aggregates = lru(size), seen = lru(size), spam = lru(size) }, Correlator)
end

-- EventAggregate: ev, or the combined Event once its group has had
-- AGGREGATE_MAX_EVENTS distinct messages; and the key to file it under.
function Correlator:_aggregate(ev, now)
  local key, message = aggregate_key(ev)
  local group = self.aggregates:get(key)
  if not group or now - group.last > M.AGGREGATE_INTERVAL then group = { messages = {}, n = 0 } end
  if not group.messages[message] then
    group.messages[message] = true
    group.n = group.n + 1
  end
  group.last = now
  self.aggregates:add(key, group)
  if group.n < M.AGGREGATE_MAX_EVENTS then return ev, event_key(ev) end
  -- client-go's PopAny: the group stays one message short of the threshold.
  group.messages[next(group.messages)] = nil
  group.n = group.n - 1
  return combined(ev), key
end

-- The spam filter's token bucket for ev's source and object: false when
-- it has no token left (golang.org/x/time/rate, as client-go's
-- TokenBucketPassiveRateLimiter).
function Correlator:_accept(ev, now)
  local key = M.spam_key(ev)
  local bucket = self.spam:get(key) or { tokens = M.SPAM_BURST, at = now }
  bucket.tokens = math.min(M.SPAM_BURST, bucket.tokens + math.max(0, now - bucket.at) * M.SPAM_QPS)
  bucket.at = now
  local ok = bucket.tokens >= 1
  if ok then bucket.tokens = bucket.tokens - 1 end
  self.spam:add(key, bucket)
  return ok
end

--- Runs ev (an Event from klua.helpers.event_for, changed in place) through
-- the aggregator, the count of Events seen and the spam filter, in
-- client-go's order (EventCorrelate): an Event dropped by the spam filter
-- still counts. Returns nil when it is dropped; else {event =, key =,
-- name =}: name is the stored Event to update (count and lastTimestamp
-- set), nil when it is to be created.
function Correlator:correlate(ev)
  local now = clock()
  local key
  ev, key = self:_aggregate(ev, now)
  local last = self.seen:get(key)
  local name
  if last then
    ev.count = last.count + 1
    ev.firstTimestamp = last.first
    name = last.name
  end
  self.seen:add(key, { count = ev.count, first = ev.firstTimestamp, name = name })
  if not self:_accept(ev, now) then return nil end
  return { event = ev, key = key, name = name }
end

--- Records the Event as the server stored it under key (client-go's
-- UpdateState): its name, for the next PATCH, and its count.
function Correlator:update(key, stored)
  local md = stored.metadata or {}
  self.seen:add(key, { count = stored.count or 1, first = stored.firstTimestamp, name = md.name })
end

return M
