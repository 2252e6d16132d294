--- What the live page answers (`--ui-bind-address`, docs/ui.md; served
-- from C by src/lua/lua_endpoint.c, on the loop like the metrics):
--
--   /ui/        the page (lua/klua/internal/ui.html, embedded in the binary),
--               which polls /ui/state once a second and draws the pipeline.
--   /ui/state   the pipeline's figures as JSON, field by field in docs/ui.md.
--
-- Everything here is read when a request comes, from counters the
-- pipeline keeps anyway (inf:stats(), the reflector's last transitions,
-- ctl:stats(), the HTTP layer's request counts): an open page costs the
-- event path nothing.
local core = require('klua.core')
local endpoint = require('klua.internal.endpoint')

local M = {}

local json = core.json
local C = core.informer_fns

local function array(t) return setmetatable(t, json.array_mt) end

local function informer_state(inf)
  local s = inf:stats()
  local transitions = array {}
  for i, r in ipairs(C.history(inf)) do
    transitions[i] = { age = r.age, from = r.from, to = r.to, cause = r.cause, action = r.action }
  end
  return {
    name = inf:name(),
    synced = inf:synced(),
    stream = { bytes = s.bytes, lists = s.lists, relists = s.relists, watches = s.watches,
      rewatches = s.rewatches },
    framer = { frames = s.frames, oversize = s.oversize },
    decoder = { added = s.added, modified = s.modified, deleted = s.deleted, bookmarks = s.bookmarks,
      malformed = s.malformed },
    reflector = { state = s.state, resource_version = s.resource_version,
      last_event_age = s.last_event_age or json.null, staleness = s.staleness, errors = s.errors, backoffs = s.backoffs,
      idle_restarts = s.idle_restarts, failing_for = s.failing_for, refused = s.refused or json.null,
      transitions = transitions },
    store = { objects = s.cached },
    handlers = { notifications = s.notifications, pending = s.pending, transform_errors = s.transform_errors, index_errors = s.index_errors,
      calls = { add = s.add_calls, update = s.update_calls, delete = s.delete_calls, error = s.error_calls },
      errors = s.handler_errors, budget_stops = s.handler_budget_stops },
  }
end

local function controller_state(ctl, t)
  local s = ctl:stats()
  local errors = array {}
  for i, e in ipairs(ctl.last_errors) do errors[i] = { key = e.key, error = e.error, age = t - e.at } end
  local r = s.reconcile
  return {
    name = ctl.name,
    workers = ctl.workers,
    queue = { depth = s.depth, adds = s.adds, retries = s.retries, in_flight = s.active,
      longest_running = s.longest, oldest_waiting = s.oldest },
    reconciles = { total = s.reconciles, successes = s.successes, failures = s.failures, requeues = s.requeues,
      requeues_after = s.requeues_after, panics = s.panics,
      mean_seconds = r.count > 0 and r.sum / r.count or 0, max_seconds = r.max, last_errors = errors },
  }
end

-- The API's answers to everything but GET, by verb and code (client-go's
-- rest_client_requests_total, which the HTTP layer counts anyway).
local function writes()
  local out = array {}
  for _, r in ipairs(core.http_metrics().requests) do
    if r[1] ~= 'GET' then out[#out + 1] = { verb = r[1], code = r[2], count = r[3] } end
  end
  return out
end

local function leadership()
  local election = require('klua.leader').current()
  local group = require('klua.shards').current()
  return election and { name = election.name, leading = election:is_leader() } or json.null,
    group and { name = group.name, count = group.n, held = array(group:shards()) } or json.null
end

--- /ui/state's document (docs/ui.md).
function M.state()
  local t = core.now()
  local infs, ctls = array {}, array {}
  for i, inf in ipairs(endpoint.informers()) do infs[i] = informer_state(inf) end
  for i, ctl in ipairs(endpoint.controllers()) do ctls[i] = controller_state(ctl, t) end
  local leader, shards = leadership()
  return {
    time = core.wall_time(),
    phase = core.phase(),
    lua_memory_bytes = core.stats().lua_memory,
    handler_errors = core.stats().task_errors,
    budget_stops = core.stats().budget_stops,
    leader = leader,
    shards = shards,
    informers = infs,
    controllers = ctls,
    writes = writes(),
  }
end

--- Answers a GET for path: status, content type, body.
function M.handle(path)
  if path == '/ui/' or path == '/ui' or path == '/ui/index.html' then
    return 200, 'text/html; charset=utf-8', require('klua.internal.ui_html')
  elseif path == '/ui/state' then
    return 200, 'application/json', json.encode(M.state())
  end
  return 404, 'text/plain', 'klua serves its live page at /ui/ and its data at /ui/state\n'
end

return M
