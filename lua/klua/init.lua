--- The `klua` module, loaded for every script as the global `klua`.
--
-- Informers keep a local copy of a resource and call handlers on every
-- change; timers run functions later; `klua.api` reads and writes the
-- cluster. Objects handed to handlers and returned by the cache are
-- read-only views: index them like tables, call `klua.copy(obj)` for a
-- mutable table.
local core = require 'klua.core'
local endpoint = require 'klua.endpoint'
local discovery = require 'klua.discovery'
local selector = require 'klua.selector'

local klua = {}

--- JSON encoding and decoding that keep integers, nulls and empty arrays.
klua.json = core.json
--- The value JSON null decodes to (the same as lua-cjson's `cjson.null`).
klua.null = core.json.null

-- Views have no methods, so that every member reads as itself whatever its
-- name (a label "copy", a ConfigMap key "get"): what a script does with an
-- object beyond reading it is a function here, alike for views and tables.

--- A plain, mutable, fully decoded copy of a view (as `klua.json.decode`
-- builds tables: arrays carry `klua.json.array_mt`), a deep copy of a table
-- (views inside decoded, metatables kept), or `v` itself for a string,
-- number, boolean, `klua.null` or any other value.
klua.copy = core.copy
--- `klua.get(obj, 'metadata', 'labels', 'app')`: the nested member, or nil
-- as soon as one step is missing or reaches a value without members
-- (a string, a number, `klua.null`). Never raises; reads views and tables.
klua.get = core.get
--- The JSON type of a view or value: "object", "array", "string",
-- "number", "boolean" or "null"; Lua's `type()` name for a value without a
-- JSON form ("nil", "function", "table" for mixed keys). `type(view)` is
-- "userdata", since a view is not a table.
klua.type = core.type

local function format(fmt, ...)
  if select('#', ...) == 0 then return tostring(fmt) end
  return string.format(fmt, ...)
end

--- Logging to stderr: `klua.log.info("synced %d pods", n)`. Messages go
-- through string.format when arguments follow the first.
klua.log = {}
for _, level in ipairs({ 'debug', 'info', 'warn', 'error' }) do
  klua.log[level] = function(fmt, ...) core.log(level, format(fmt, ...)) end
end

local leader = require 'klua.leader'
local shutdown = require 'klua.shutdown'
-- Script code that starts on its own (handlers, timers, hooks) goes
-- through shutdown.guard: once SIGTERM has come it no longer starts.
local guard = shutdown.guard

local Timer = {}
Timer.__index = Timer
--- Cancels the timer; returns true if it had not fired (or, for
-- `klua.every`, was still repeating).
function Timer:cancel()
  if self.id then return core.cancel(self.id) end
  local waiting = not self.cancelled
  self.cancelled = true
  return waiting
end

--- Runs `fn` once, `seconds` from now. Returns a timer with `:cancel()`.
function klua.after(seconds, fn) return setmetatable({ id = core.after(seconds, guard(fn)) }, Timer) end
--- Runs `fn` every `seconds`. Returns a timer with `:cancel()`. With
-- `opts.leader_only = true` the timer starts once this process leads
-- (at once without leader election; see klua.on_leading) and a tick runs
-- only while it still leads, as controller-runtime runs its
-- leader-election runnables: work only one replica may do.
function klua.every(seconds, fn, opts)
  if opts ~= nil and type(opts) ~= 'table' then error('klua.every takes a table of options such as {leader_only = true}', 2) end
  local leader_only = opts and opts.leader_only
  if leader_only ~= nil and type(leader_only) ~= 'boolean' then error('leader_only must be true or false', 2) end
  if not leader_only then return setmetatable({ id = core.every(seconds, guard(fn)) }, Timer) end
  if type(seconds) ~= 'number' or seconds <= 0 then error('klua.every needs a positive number of seconds', 2) end
  if type(fn) ~= 'function' then error('klua.every takes a function', 2) end
  local timer = setmetatable({}, Timer)
  leader.on_leading(guard(function()
    if timer.cancelled then return end
    timer.id = core.every(seconds, guard(function()
      if leader.leading() then return fn() end
    end))
  end))
  return timer
end
--- Suspends the calling handler or timer for `seconds` without blocking
-- anything else.
klua.sleep = core.sleep
--- Ends the run with exit status `code` (default 0) once the current
-- callback returns; no handler, timer or callback starts after it.
klua.stop = core.stop
--- Runs `fn` once, when every informer has listed its resource and handed
-- the initial objects to its handlers.
function klua.on_synced(fn) return core.on_synced(guard(fn)) end
--- Runs `fn` on SIGTERM or SIGINT under `klua run`, once the reconciles in
-- flight have ended and before the Lease is released; hooks run one after
-- the other in the order they were added, may wait (API calls,
-- klua.sleep), and one that fails is logged without stopping the others.
-- Everything must end within --graceful-shutdown-timeout (docs/deploy.md).
klua.on_shutdown = shutdown.on_shutdown
--- The namespace of the kubeconfig's current context ("default" if unset).
klua.namespace = core.namespace
--- Counters of the runtime: task_errors, lua_memory, suspended.
klua.stats = core.stats

local Informer = {}
Informer.__index = Informer

--- Registers a handler: "add" fn(obj, in_initial_list), "update" fn(old,
-- new), "delete" fn(obj, final_state_unknown). Returns the informer.
-- Handlers added while the main chunk runs see every notification; one
-- added later sees the changes from then on, and an add handler first
-- gets every cached object (in_initial_list true).
function Informer:on(event, fn)
  if event ~= 'add' and event ~= 'update' and event ~= 'delete' then
    error(('unknown event "%s": use "add", "update" or "delete"'):format(tostring(event)), 2)
  end
  self._c:on(event, guard(fn))
  return self
end
--- The cached object under "namespace/name" ("name" when cluster-scoped).
function Informer:get(key) return self._c:get(key) end
--- The cached objects: every one, or with opts those in opts.namespace
-- whose labels match opts.label_selector (a string or a klua.labels
-- selector), as client-go's listers filter.
function Informer:list(opts)
  if opts == nil then return self._c:list() end
  if type(opts) ~= 'table' then error('list takes nothing or a table such as {namespace = "default"}', 2) end
  local sel, err = selector.of(opts.label_selector)
  if not sel then error(err, 2) end
  if opts.namespace ~= nil and type(opts.namespace) ~= 'string' then error('namespace must be a string', 2) end
  local all = self._c:list(opts.namespace)
  if sel:empty() then return all end
  local out = {}
  for _, obj in ipairs(all) do
    if sel:matches(obj) then out[#out + 1] = obj end
  end
  return out
end
--- Whether the first list is cached and was handed to the handlers.
function Informer:synced() return self._c:synced() end
--- The reflector's counters (lists, relists, watches, events, ...).
function Informer:stats() return self._c:stats() end
function Informer:__tostring() return tostring(self._c) end
--- The informer's name: its resource, namespace and selector, as logs show it.
function Informer:name() return self._name end

--- Creates and starts an informer.
-- opts.resource: as kubectl names it ("pods", "po", "deployments.apps",
--   "apps/v1/deployments", a CRD's plural or short name);
-- opts.namespace: one namespace (default: all namespaces);
-- opts.label_selector, opts.field_selector: server-side filters;
-- opts.resync: seconds between resyncs that re-deliver every cached object
--   as an update (default: none).
function klua.informer(opts)
  if type(opts) == 'string' then opts = { resource = opts } end
  if type(opts) ~= 'table' then error('klua.informer takes a table such as {resource = "pods"}', 2) end
  local valid, bad = selector.parse(opts.label_selector)
  if not valid then error(bad, 2) end
  local r, err = discovery.resolve(opts.resource)
  if not r then error(err, 2) end
  if opts.namespace and not r.namespaced then
    error(('%s is cluster-scoped: drop namespace = "%s"'):format(r.resource, opts.namespace), 2)
  end
  local name = r.resource .. (r.group ~= '' and ('.' .. r.group) or '')
  if opts.namespace then name = name .. ' -n ' .. opts.namespace end
  if opts.label_selector then name = name .. ' -l ' .. opts.label_selector end
  -- Before its first LIST: a Lease that cannot be kept ends klua first.
  leader.check()
  local c = core.informer {
    name = name,
    path = discovery.collection_path(r, opts.namespace),
    kind = r.kind,
    label_selector = opts.label_selector,
    field_selector = opts.field_selector,
    resync = opts.resync,
  }
  local inf = setmetatable({ _c = c, _name = name, resource = r, namespace = opts.namespace }, Informer)
  endpoint.track_informer(inf)
  return inf
end

--- Prometheus metrics of the script's own (see lua/klua/metrics.lua):
-- klua.metrics.counter/gauge/histogram{name=, help=, labels=}, served on
-- /metrics beside klua's own with --metrics-bind-address.
klua.metrics = require 'klua.metrics'

--- Starts leader election on a coordination.k8s.io/v1 Lease, as client-go's
-- leaderelection does (see lua/klua/leader.lua); `klua run --leader-elect`
-- does the same from flags. opts: name (the Lease), namespace (default:
-- the context's), identity (default: host name and a random suffix),
-- lease_duration (15 s), renew_deadline (10 s), retry_period (2 s),
-- on_started_leading, on_stopped_leading, on_new_leader(identity),
-- release_on_stop (default true). Losing the Lease ends klua with status 1.
-- Returns the election: e:is_leader(), e:stop() (releases the Lease).
klua.leader_election = leader.elect
--- Whether this process leads: true without leader election.
klua.leader = leader.leading
--- Runs fn once this process leads (at once without leader election).
-- Controllers start their workers this way.
function klua.on_leading(fn) return leader.on_leading(guard(fn)) end

local controller = require 'klua.controller'
--- Creates and starts a controller: informers' changes become keys in a
-- work queue that `workers` coroutines reconcile (see klua.controller docs).
klua.controller = controller.new
--- Reconcile results: process the key again after `seconds`, or after its
-- rate-limited backoff.
klua.requeue_after = controller.requeue_after
klua.requeue = controller.requeue
--- A work queue with client-go's semantics, for scripts that drive their
-- own workers: q:add, add_after, add_rate_limited, get (suspends), done,
-- forget, num_requeues, len, shutdown, stats.
klua.queue = core.queue
--- The REST API client (see lua/klua/api.lua).
klua.api = require 'klua.api'
--- Label selectors on the client, as apimachinery parses and matches them:
-- klua.labels.parse(text) -> selector (sel:matches(obj_or_labels),
-- tostring(sel)) or nil and a message.
klua.labels = { parse = selector.parse }
--- Helpers for owner references, finalizers, conditions, events and
-- update predicates (see lua/klua/helpers.lua).
klua.helpers = require 'klua.helpers'
klua.helpers.set_array_mt(core.json.array_mt)

--- Records a core/v1 Event about obj (opts: type "Normal" or "Warning",
-- reason, message, component; see klua.helpers.event_for). Returns the
-- created Event, or nil, err: err from event_for when obj lacks
-- metadata.name or kind ({reason, message}), else from klua.api.create.
-- Raises when opts is not valid, a mistake in the call.
function klua.record_event(obj, opts)
  local ev, err = klua.helpers.event_for(obj, opts)
  if not ev then return nil, err end
  return klua.api.create('events', ev)
end

--- Resolves a resource name through discovery: {group=, version=,
-- resource=, kind=, namespaced=, ...} or nil and a message.
klua.resolve = discovery.resolve

--- `klua.args`: the script's command-line arguments (also passed to the
-- chunk as `...`). Looked up on each read, because the runtime sets them
-- after this module has loaded.
setmetatable(klua, {
  __index = function(_, k)
    if k == 'args' then return core.args or {} end
  end,
})

-- `klua run --leader-elect`: the election starts before the script runs,
-- so that its controllers wait to lead while their informers sync. The
-- Lease is named after the script unless --leader-election-id says.
local ctl = core.controller_options()
if ctl.script then shutdown.install() end
if ctl.leader_elect then
  local id = ctl.election_id or (ctl.script or 'klua'):gsub('%.lua$', ''):lower():gsub('[^a-z0-9.-]', '-')
  leader.elect {
    name = id, namespace = ctl.election_namespace,
    lease_duration = ctl.lease_duration, renew_deadline = ctl.renew_deadline, retry_period = ctl.retry_period,
    namespace_source = '--leader-election-namespace',
  }
end

return klua
