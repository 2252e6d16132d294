--- What klua's metrics and probe endpoint answers (`--metrics-bind-address`,
-- `--health-probe-bind-address`; served from C by src/lua/lua_endpoint.c):
--
--   /metrics  the script's own metrics (klua.metrics) and klua's, in
--             Prometheus's text format, with the names Kubernetes users
--             chart: workqueue_*, controller_runtime_*, leader_election_*,
--             process_*, rest_client_*, and klua_informer_* (klua_informer_write_lag_seconds:
--             inf:lag()), klua_informer_staleness_seconds (inf:stats().staleness),
--             klua_informer_cache_verifications_total and
--             klua_informer_drift_objects_total (--verify-cache:
--             lua/klua/internal/verify.lua), klua_informer_compressed_* and
--             klua_informer_compaction_seconds_total (--cache-compression), klua_controller_stale_read_* (read your own writes:
--             lua/klua/internal/writes.lua), klua_handler_errors_total,
--             klua_api_warnings_total, klua_lua_memory_bytes, klua_shards_held and
--             klua_fenced_writes_total
--             (under leader election or --shards).
--   /healthz  200 "ok": the answer itself shows the loop turns (a handler
--             that never returns stops every answer, so the probe times out).
--   /readyz   503 until every informer has synced, while the server refuses
--             one's lists or watches (a 4xx that lasts until someone acts: a
--             permission not granted yet), and while one has been failing
--             for longer than READY_FAILING_SECONDS, and, with
--             --readyz-max-staleness S, while one has heard nothing from the
--             server for longer than S; 200 "ok" otherwise.
--             The body says why.
local core = require('klua.core')
local metrics = require('klua.metrics')

local M = {}

--- How long an informer may fail before /readyz turns 503.
M.READY_FAILING_SECONDS = 60
--- How long an informer may hear nothing from the server (no watch event,
-- bookmark or LIST) before /readyz turns 503: --readyz-max-staleness, or
-- nil for no bound.
M.max_staleness = core.controller_options().readyz_max_staleness

local informers, controllers = {}, {}

--- Registers an informer for the klua_informer_* metrics and /readyz.
function M.track_informer(inf) informers[#informers + 1] = inf end
--- Forgets a stopped informer.
function M.untrack_informer(inf)
  for i, x in ipairs(informers) do
    if x == inf then return table.remove(informers, i) end
  end
end
--- Registers a controller for the workqueue_* and controller_runtime_* metrics.
function M.track_controller(c) controllers[#controllers + 1] = c end
--- The informers and controllers tracked, for the live page (klua.internal.ui).
function M.informers() return informers end
function M.controllers() return controllers end

local function gauge_or_counter(add, kind, name, help, labels, rows)
  local samples = {}
  for i, r in ipairs(rows) do samples[i] = { values = r[1], value = r[2] } end
  add { kind = kind, name = name, help = help, labels = labels, samples = samples }
end

-- A histogram family from queue durations {count, sum, buckets = {{le, n}}}.
local function histogram(add, name, help, labels, rows)
  local bounds, samples = {}, {}
  for i, r in ipairs(rows) do
    local d = r[2]
    local counts = {}
    for j, b in ipairs(d.buckets or {}) do
      bounds[j] = b[1]
      counts[j] = b[2]
    end
    samples[i] = { values = r[1], counts = counts, sum = d.sum, count = d.count }
  end
  add { kind = 'histogram', name = name, help = help, labels = labels, buckets = bounds, samples = samples }
end

-- Families with one sample an object (an informer, a controller): each row
-- of `families` is {kind, name, help, value}, value the name of the field of
-- object:stats() that is the sample's value, or a function(object, its
-- stats) returning it; the sample's labels are `labels`, valued values(object).
local function per_object(add, objects, labels, values, families)
  local stats = {}
  for i, o in ipairs(objects) do stats[i] = o:stats() end
  for _, f in ipairs(families) do
    local rows = {}
    local value = f[4]
    for i, o in ipairs(objects) do
      local v
      if type(value) == 'string' then v = stats[i][value] else v = value(o, stats[i]) end
      rows[i] = { values(o), v }
    end
    if f[1] == 'histogram' then histogram(add, f[2], f[3], labels, rows)
    else gauge_or_counter(add, f[1], f[2], f[3], labels, rows) end
  end
end

local INFORMER_FAMILIES = {
  { 'counter', 'klua_informer_relists_total', 'LISTs after the first.', 'relists' },
  { 'counter', 'klua_informer_watch_restarts_total', 'Watches started again.', 'rewatches' },
  { 'gauge', 'klua_informer_cached_objects', 'Objects in the cache.', 'cached' },
  { 'gauge', 'klua_informer_synced', '1 once the first list reached the handlers.',
    function(inf) return inf:synced() and 1 or 0 end },
  { 'counter', 'klua_informer_transform_errors_total',
    'Objects the transform function failed on (each refuses its LIST or watch).', 'transform_errors' },
  { 'gauge', 'klua_informer_write_lag_seconds',
    'Seconds since the oldest write through klua.api that the cache has yet to observe (0: none).',
    function(inf) return inf:lag() end },
  { 'gauge', 'klua_informer_staleness_seconds',
    'Seconds since the informer last heard its cache is current: a watch event, a bookmark or a completed LIST.',
    'staleness' },
  { 'counter', 'klua_informer_cache_verifications_total',
    'Checks of the cache against a consistent LIST (--verify-cache).', 'verifications' },
  { 'counter', 'klua_informer_drift_objects_total',
    'Objects --verify-cache found differing between the cache and the server (each drift relists).', 'drift_objects' },
  { 'gauge', 'klua_informer_compressed_objects',
    'Cached objects stored compressed, having stayed unwritten (--cache-compression).', 'compressed' },
  { 'gauge', 'klua_informer_compressed_bytes', 'Bytes the compressed cached objects take.', 'compressed_bytes' },
  { 'gauge', 'klua_informer_compressed_json_bytes', 'Bytes of JSON the compressed cached objects hold.',
    'compressed_json_bytes' },
  { 'counter', 'klua_informer_compaction_seconds_total',
    'CPU seconds the loop spent compressing cached objects.', 'compaction_seconds' },
}

local function informer_families(add)
  local events = {}
  for _, inf in ipairs(informers) do
    local s, name = inf:stats(), inf:name()
    events[#events + 1] = { { name, 'ADDED' }, s.added }
    events[#events + 1] = { { name, 'MODIFIED' }, s.modified }
    events[#events + 1] = { { name, 'DELETED' }, s.deleted }
  end
  gauge_or_counter(add, 'counter', 'klua_informer_events_total', 'Watch events an informer received, by type.',
    { 'resource', 'type' }, events)
  per_object(add, informers, { 'resource' }, function(inf) return { inf:name() } end, INFORMER_FAMILIES)
end

-- controller-runtime's names, help texts, labels and buckets (v0.20, with
-- client-go 1.32): pkg/internal/metrics/workqueue.go for workqueue_* (labels
-- name and controller, both the controller's name) and
-- pkg/internal/controller/metrics/metrics.go for controller_runtime_*,
-- counted as pkg/internal/controller/controller.go counts them. Labels are
-- written in the order client_golang writes them: sorted by name.
local WORKQUEUE_FAMILIES = {
  { 'gauge', 'workqueue_depth', 'Current depth of workqueue', 'depth' },
  { 'counter', 'workqueue_adds_total', 'Total number of adds handled by workqueue', 'adds' },
  { 'histogram', 'workqueue_queue_duration_seconds',
    'How long in seconds an item stays in workqueue before being requested', 'wait' },
  { 'histogram', 'workqueue_work_duration_seconds', 'How long in seconds processing an item from workqueue takes.',
    'work' },
  { 'gauge', 'workqueue_unfinished_work_seconds',
    'How many seconds of work has been done that is in progress and hasn\'t been observed by work_duration. '
    .. 'Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate '
    .. 'at which this increases.', function(_, s) return s.unfinished or 0 end },
  { 'gauge', 'workqueue_longest_running_processor_seconds',
    'How many seconds has the longest running processor for workqueue been running.', 'longest' },
  { 'counter', 'workqueue_retries_total', 'Total number of retries handled by workqueue', 'retries' },
}

local RECONCILE_FAMILIES = {
  { 'counter', 'controller_runtime_reconcile_errors_total', 'Total number of reconciliation errors per controller',
    'failures' },
  { 'counter', 'controller_runtime_terminal_reconcile_errors_total',
    'Total number of terminal reconciliation errors per controller', 'terminal_errors' },
  { 'counter', 'controller_runtime_reconcile_panics_total', 'Total number of reconciliation panics per controller',
    'panics' },
  -- klua's own: controller-runtime has no reconcile timeout, and so no
  -- metric of one; the name is that of its family.
  { 'counter', 'controller_runtime_reconcile_timeouts_total',
    'Total number of reconciliations ended by reconcile_timeout per controller', 'timeouts' },
  { 'histogram', 'controller_runtime_reconcile_time_seconds', 'Length of time per reconciliation per controller',
    'reconcile' },
  { 'gauge', 'controller_runtime_max_concurrent_reconciles', 'Maximum number of concurrent reconciles per controller',
    function(ctl) return ctl.workers end },
  { 'gauge', 'controller_runtime_active_workers', 'Number of currently used workers per controller', 'active' },
  { 'counter', 'klua_controller_stale_read_waits_total',
    'Reconciles held until the cache held the controller\'s own writes.', 'stale_read_waits' },
  { 'counter', 'klua_controller_stale_read_timeouts_total',
    'Held reconciles that went ahead at the read_your_writes bound, the cache still behind.', 'stale_read_timeouts' },
}

local function controller_families(add)
  per_object(add, controllers, { 'controller', 'name' }, function(ctl) return { ctl.name, ctl.name } end,
    WORKQUEUE_FAMILIES)
  local total = {}
  for _, ctl in ipairs(controllers) do
    local s = ctl:stats()
    total[#total + 1] = { { ctl.name, 'error' }, s.failures }
    total[#total + 1] = { { ctl.name, 'requeue' }, s.requeues }
    total[#total + 1] = { { ctl.name, 'requeue_after' }, s.requeues_after }
    total[#total + 1] = { { ctl.name, 'success' }, s.successes }
  end
  gauge_or_counter(add, 'counter', 'controller_runtime_reconcile_total',
    'Total number of reconciliations per controller', { 'controller', 'result' }, total)
  per_object(add, controllers, { 'controller' }, function(ctl) return { ctl.name } end, RECONCILE_FAMILIES)
end

-- client-go's names and labels (component-base's restclient metrics).
local function rest_client_families(add)
  local m = core.http_metrics()
  local requests, durations = {}, {}
  for i, r in ipairs(m.requests) do requests[i] = { { r[2], r[1], m.host }, r[3] } end
  for i, d in ipairs(m.durations) do durations[i] = { { d[1], m.host }, d[2] } end
  gauge_or_counter(add, 'counter', 'rest_client_requests_total',
    'Number of HTTP requests, partitioned by status code, method, and host.', { 'code', 'method', 'host' }, requests)
  histogram(add, 'rest_client_request_duration_seconds', 'Request latency in seconds. Broken down by verb, and host.',
    { 'verb', 'host' }, durations)
  -- client-go's WarningHandlers log or print warnings and count none;
  -- kube-apiserver counts its side (apiserver_requested_deprecated_apis).
  -- klua counts what it receives, with rest_client_*'s host label.
  gauge_or_counter(add, 'counter', 'klua_api_warnings_total',
    'Warnings (Warning: 299 headers, KEP-1693) the API server sent, repeats included.', { 'host' },
    { { { m.host }, m.warnings } })
end

local function runtime_families(add)
  local leader = require('klua.leader')
  local stats = core.stats()
  -- An index function that fails is a handler that failed (lua/klua/internal/index.lua).
  local index_errors = 0
  for _, inf in ipairs(informers) do index_errors = index_errors + inf:stats().index_errors end
  gauge_or_counter(add, 'counter', 'klua_handler_errors_total',
    'Handler, timer, reconcile and index function calls that failed.', {},
    { { {}, stats.task_errors + index_errors } })
  gauge_or_counter(add, 'gauge', 'klua_lua_memory_bytes', 'Bytes the Lua state holds.', {},
    { { {}, stats.lua_memory } })
  local election = leader.current()
  if election then
    -- controller-runtime's pkg/metrics/leaderelection.go (v0.20). Its
    -- leader_election_slowpath_total counts renewals that fell back from
    -- client-go's optimistic update to a read first: klua's renewals always
    -- read first (lua/klua/leader.lua), so it has no such family.
    gauge_or_counter(add, 'gauge', 'leader_election_master_status',
      'Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. '
      .. "'name' is the string used to identify the lease. Please make sure to group by name.",
      { 'name' }, { { { election.name }, election:is_leader() and 1 or 0 } })
  end
  local group = require('klua.shards').current()
  if election or group then
    gauge_or_counter(add, 'counter', 'klua_fenced_writes_total',
      'Writes not sent because the Lease they need (the leader\'s, or a shard\'s) was not held or had lapsed.',
      {}, { { {}, require('klua.internal.fence').refused } })
  end
  if group then
    gauge_or_counter(add, 'gauge', 'klua_shards_held', 'Shards (of --shards) this replica holds.',
      { 'name' }, { { { group.name }, #group:shards() } })
  end
  local p = core.process()
  if p then
    local none = {}
    gauge_or_counter(add, 'counter', 'process_cpu_seconds_total', 'Total user and system CPU time spent in seconds.',
      none, { { none, p.cpu_seconds } })
    gauge_or_counter(add, 'gauge', 'process_resident_memory_bytes', 'Resident memory size in bytes.', none,
      { { none, p.resident_bytes } })
    gauge_or_counter(add, 'gauge', 'process_virtual_memory_bytes', 'Virtual memory size in bytes.', none,
      { { none, p.virtual_bytes } })
    gauge_or_counter(add, 'gauge', 'process_open_fds', 'Number of open file descriptors.', none,
      { { none, p.open_fds } })
    gauge_or_counter(add, 'gauge', 'process_max_fds', 'Maximum number of open file descriptors.', none,
      { { none, p.max_fds } })
    gauge_or_counter(add, 'gauge', 'process_start_time_seconds',
      'Start time of the process since unix epoch in seconds.', none, { { none, p.start_time } })
  end
end

metrics.collector(informer_families)
metrics.collector(controller_families)
metrics.collector(rest_client_families)
metrics.collector(runtime_families)

-- Set once the script's main chunk has returned and its informers have
-- handed their first lists to the handlers: before that the informers a
-- script will make may not exist yet.
local started = false
core.on_synced(function() started = true end)

-- Why the process is not ready, or nil.
local function not_ready()
  if not started then return 'the informers have not synced yet' end
  for _, inf in ipairs(informers) do
    if not inf:synced() then return ('informer %s has not synced yet'):format(inf:name()) end
    local s = inf:stats()
    if s.refused then return ('informer %s is refused: %s'):format(inf:name(), s.refused) end
    local failing = s.failing_for
    if failing and failing > M.READY_FAILING_SECONDS then
      return ('informer %s has been failing for %.0f s'):format(inf:name(), failing)
    end
    if M.max_staleness and s.staleness > M.max_staleness then
      return ('informer %s has heard nothing from the server for %.0f s (--readyz-max-staleness %gs)'):format(
        inf:name(), s.staleness, M.max_staleness)
    end
  end
end

--- Answers a GET for path: status, content type, body.
function M.handle(path)
  if path == '/metrics' then
    return 200, 'text/plain; version=0.0.4', metrics.expose()
  elseif path == '/healthz' or path == '/livez' then
    return 200, 'text/plain', 'ok\n'
  elseif path == '/readyz' then
    local why = not_ready()
    if why then return 503, 'text/plain', 'not ready: ' .. why .. '\n' end
    return 200, 'text/plain', 'ok\n'
  end
  return 404, 'text/plain', 'klua serves /metrics, /healthz and /readyz\n'
end

return M
