--- The `klua` module, loaded for every script as the global `klua`.
--
-- Informers keep a local copy of a resource and call handlers on every
-- change; timers run functions later; `klua.api` reads and writes the
-- cluster. Objects handed to handlers and returned by the cache are
-- read-only views: index them like tables, call `klua.edit(obj)` for one
-- that takes writes or `klua.copy(obj)` for a mutable table.
local core = require('klua.core')
local endpoint = require('klua.internal.endpoint')
local discovery = require('klua.internal.discovery')
local selector = require('klua.selector')
local index = require('klua.internal.index')
local writes = require('klua.internal.writes')
local verify = require('klua.internal.verify')

local klua = {}

--- JSON encoding and decoding that keep integers, nulls and empty arrays:
-- `klua.json.encode`, `klua.json.decode`, `klua.json.array`.
klua.json = core.json

--- Encodes a value as JSON: tables (and views) as objects or arrays,
-- `klua.null` as null, integers without a fraction, floats as Go's
-- encoding/json writes them (as the API server does: a number it sent
-- encodes back to the same text, 12345678901234567000 or 1e-7).
-- @function klua.json.encode(value)
-- @param value a table, view, string, number, boolean or `klua.null`
-- @return the JSON text
-- @raise when value holds a function, a userdata other than a view, or a
--   table that is nested too deeply or refers to itself
-- @usage
-- print(klua.json.encode({ name = 'web', replicas = 3 }))

--- Decodes JSON text into tables: null as `klua.null`, arrays marked with
-- `klua.json.array_mt` so that they encode as arrays again, even empty.
-- @function klua.json.decode(text)
-- @param text a JSON text
-- @return the value, or nil and a message when text is not JSON
-- @usage
-- local obj, err = klua.json.decode('{"items": []}')

--- Marks a table as a JSON array, so that it encodes as [] when empty.
-- @function klua.json.array(t)
-- @param t a table (default: a new one)
-- @return t
-- @usage
-- local cm = { data = {}, finalizers = klua.json.array() }
--- The value JSON null decodes to (the same as lua-cjson's `cjson.null`).
klua.null = core.json.null

-- Views have no methods, so that every member reads as itself whatever its
-- name (a label "copy", a ConfigMap key "get"): what a script does with an
-- object beyond reading it is a function here, alike for views and tables.

--- A plain, mutable, fully decoded copy of a view (as `klua.json.decode`
-- builds tables: arrays carry `klua.json.array_mt`), a deep copy of a table
-- (views inside decoded, metatables kept), or `v` itself for a string,
-- number, boolean, `klua.null` or any other value.
-- @param v a view, a table or any value
-- @return the copy
-- @usage
-- local cm = klua.copy(obj)
-- cm.data.seen = 'yes'
-- klua.api.update('configmaps', cm)
klua.copy = core.copy
--- A view of `v`'s object that takes writes, for a change to send: writes
-- are kept beside the object's bytes, reads, `pairs`, `#`, `klua.get` and
-- `klua.copy` see them, and `klua.json.encode` (so `klua.api.update` and
-- `create`) sends the bytes with the objects and arrays written to
-- rewritten. It costs what is written, where `klua.copy` decodes the whole
-- object into tables first: the choice when a reconcile changes a few
-- fields of a large object. `v` itself is left as it was. Arrays take
-- elements 1 to `#arr + 1`, and nil only at their end (`table.insert` and
-- `table.remove` work on them), so that they stay sequences. The helpers
-- that change objects (`klua.helpers.add_finalizer`, `set_condition`, ...)
-- take it as they take a table. A table is given back as it is.
-- @param v a view, or a table
-- @return a view that takes writes, or the table
-- @raise when v is neither
-- @usage
-- local cm = klua.edit(obj)
-- cm.data.seen = 'yes'
-- klua.api.update('configmaps', cm)
klua.edit = core.edit
--- `klua.get(obj, 'metadata', 'labels', 'app')`: the nested member, or nil
-- as soon as one step is missing or reaches a value without members
-- (a string, a number, `klua.null`). Never raises; reads views and tables.
-- @param obj a view or a table
-- @param ... the keys of each step: strings, or integers for arrays
-- @return the member, or nil
-- @usage
-- local app = klua.get(pod, 'metadata', 'labels', 'app') or 'none'
klua.get = core.get
--- The JSON type of a view or value: "object", "array", "string",
-- "number", "boolean" or "null"; Lua's `type()` name for a value without a
-- JSON form ("nil", "function", "table" for mixed keys). `type(view)` is
-- "userdata", since a view is not a table.
-- @param v any value
-- @return the type's name
-- @usage
-- if klua.type(obj.spec) == 'object' then ... end
klua.type = core.type

local function format(fmt, ...)
  if select('#', ...) == 0 then return tostring(fmt) end
  return string.format(fmt, ...)
end

--- Logging to stderr: `klua.log.info("synced %d pods", n)`. Messages go
-- through string.format when arguments follow the first. One function a
-- level: klua.log.debug (shown from -v 4), info, warn and error.
klua.log = {}

--- Logs at level debug, shown from -v 4.
-- @function klua.log.debug(fmt, ...)
-- @param fmt the message, or a string.format format when more follow
-- @param ... the format's arguments
-- @raise when fmt does not format the arguments (string.format's error)
-- @usage
-- klua.log.debug('queue depth %d', q:len())

--- Logs at level info.
-- @function klua.log.info(fmt, ...)
-- @param fmt the message, or a string.format format when more follow
-- @param ... the format's arguments
-- @raise when fmt does not format the arguments (string.format's error)
-- @usage
-- klua.log.info('synced %d pods', #pods:list())

--- Logs at level warn.
-- @function klua.log.warn(fmt, ...)
-- @param fmt the message, or a string.format format when more follow
-- @param ... the format's arguments
-- @raise when fmt does not format the arguments (string.format's error)
-- @usage
-- klua.log.warn('%s has no owner', key)

--- Logs at level error.
-- @function klua.log.error(fmt, ...)
-- @param fmt the message, or a string.format format when more follow
-- @param ... the format's arguments
-- @raise when fmt does not format the arguments (string.format's error)
-- @usage
-- klua.log.error('cannot update %s: %s', key, tostring(err))
for _, level in ipairs({ 'debug', 'info', 'warn', 'error' }) do
  klua.log[level] = function(fmt, ...) core.log(level, format(fmt, ...)) end
end

local leader = require('klua.leader')
local shutdown = require('klua.internal.shutdown')
local shards = require('klua.shards')
-- Script code that starts on its own goes through shutdown.guard: once
-- SIGTERM has come timers and hooks no longer start, and handlers no
-- longer once the reconciles in flight have ended.
local guard = shutdown.guard

--- Cancels the timer; returns true if it had not fired (or, for
-- `klua.every`, was still repeating).
-- @function timer:cancel()
-- @return whether the timer was still pending
-- @raise "this timer is closed: klua is shutting down" from a __gc handler
--   run as klua exits, when every timer is gone already
-- @usage
-- local t = klua.after(30, give_up)
-- if done then t:cancel() end

--- Runs `fn` once, `seconds` from now, as its own task.
-- @param seconds a number >= 0
-- @param fn the function to run; it may call the API and sleep
-- @return a timer with `:cancel()`; tostring gives "timer(after 30 s)"
-- @raise when seconds is not a number or fn not a function
-- @usage
-- klua.after(5, function() klua.log.info('five seconds later') end)
function klua.after(seconds, fn) return core.after(seconds, guard(fn)) end
--- Runs `fn` every `seconds`, each time as its own task. With
-- `opts.leader_only = true` the timer starts once this process leads
-- (at once without leader election; see klua.on_leading) and a tick runs
-- only while it still leads, as controller-runtime runs its
-- leader-election runnables: work only one replica may do.
-- @param seconds a number > 0
-- @param fn the function to run
-- @param opts nil, or {leader_only = true}
-- @return a timer with `:cancel()`; tostring gives "timer(every 60 s)"
-- @raise when seconds is not a number, fn not a function or opts not as above
-- @usage
-- klua.every(60, function() klua.log.info('%d pods', #pods:list()) end)
-- klua.every(300, garbage_collect, { leader_only = true })
function klua.every(seconds, fn, opts)
  if opts ~= nil and type(opts) ~= 'table' then error('klua.every takes a table of options such as {leader_only = true}', 2) end
  local leader_only = opts and opts.leader_only
  if leader_only ~= nil and type(leader_only) ~= 'boolean' then error('leader_only must be true or false', 2) end
  if not leader_only then return core.every(seconds, guard(fn)) end
  if type(seconds) ~= 'number' or seconds <= 0 then error('klua.every needs a positive number of seconds', 2) end
  if type(fn) ~= 'function' then error('klua.every takes a function', 2) end
  -- Held until this process leads: a cancel before then keeps it from starting.
  local timer = core.every(seconds, guard(function()
    if leader.leading() then return fn() end
  end), true)
  leader.on_leading(guard(function() core.start_timer(timer) end))
  return timer
end
--- Suspends the calling handler or timer for `seconds` without blocking
-- anything else. In a reconcile past its reconcile_timeout it returns at
-- once (see klua.controller).
-- @param seconds a number >= 0
-- @raise where Lua cannot suspend (a table.sort comparison, a __gc
--   handler), and when seconds is not a number
-- @usage
-- klua.sleep(0.5)
klua.sleep = core.sleep
--- Ends the run with exit status `code` (default 0) once the current
-- callback returns; no handler, timer or callback starts after it.
-- @param code the exit status (default 0)
-- @usage
-- klua.on_synced(function() klua.stop(0) end)
klua.stop = core.stop
--- Runs `fn` once, when every informer has listed its resource and handed
-- the initial objects to its handlers.
-- @param fn the function to run, as its own task
-- @usage
-- klua.on_synced(function() klua.log.info('%d pods', #pods:list()) end)
function klua.on_synced(fn) return core.on_synced(guard(fn)) end
--- Runs `fn` on SIGTERM or SIGINT under `klua run`, once the reconciles in
-- flight have ended and before the Lease is released; hooks run one after
-- the other in the order they were added, may wait (API calls,
-- klua.sleep), and one that fails is logged without stopping the others.
-- Everything must end within --graceful-shutdown-timeout (docs/deploy.md).
-- @param fn the function to run, as its own task
-- @usage
-- klua.on_shutdown(function() klua.log.info('bye') end)
klua.on_shutdown = shutdown.on_shutdown
--- The namespace of the kubeconfig's current context ("default" if unset).
-- @return the namespace's name
-- @usage
-- local cms = klua.informer { resource = 'configmaps', namespace = klua.namespace() }
klua.namespace = core.namespace
--- Counters of the runtime: task_errors, budget_stops (the calls
-- --instruction-budget stopped), lua_memory, suspended, and collector:
-- which of Lua's collectors runs the script's heap. klua runs the
-- generational one (what handlers make dies young, and minor collections
-- find it without marking the rest of the heap) while lua_memory is under
-- 8 MiB, and the incremental one, in small steps, from 8 MiB until it falls
-- under 2 MiB, since a generational major collection visits the whole heap
-- at once. collector is "generational" or "incremental" accordingly, or
-- "script" once the script called collectgarbage('incremental') or
-- collectgarbage('generational'): klua keeps the script's choice.
-- @return a table of the counters
-- @usage
-- klua.log.info('%d task errors', klua.stats().task_errors)
klua.stats = core.stats

-- An informer is a klua.informer userdata (src/lua/lua_informer.c): get
-- and synced are its C methods, the rest are added here over
-- core.informer_fns, and what this side keeps about it (name, resource,
-- indexes) is in core.state(inf), out of the script's reach.
local Informer = core.class('informer')
local C = core.informer_fns

--- Registers a handler: "add" fn(obj, in_initial_list), "update" fn(old,
-- new), "delete" fn(obj, final_state_unknown). Returns the informer.
-- Handlers added while the main chunk runs see every notification; one
-- added later sees the changes from then on, and an add handler first
-- gets every cached object (in_initial_list true).
-- "error" fn(err), as client-go's SetWatchErrorHandler, is told of each
-- LIST or watch that failed and will be retried after a backoff (not of a
-- 410, which relists): err.verb ("list" or "watch"), err.code (the
-- server's, or -1 without an answer), err.message, err.persistent (a 4xx
-- the server gives until someone acts: a permission, a selector) and
-- err.watched (a watch of this informer was accepted before). A failure
-- the handlers have not had yet gives way to a newer one.
-- @param event "add", "update", "delete" or "error"
-- @param fn the handler, run as its own task
-- @return the informer, so that calls chain
-- @raise for an event other than "add", "update", "delete" or "error"
-- @usage
-- pods:on('add', function(pod, initial) klua.log.info('%s', pod.metadata.name) end)
--     :on('delete', function(pod) klua.log.info('gone: %s', pod.metadata.name) end)
--     :on('error', function(err) if err.code == 403 then klua.log.error('%s', err.message) end end)
function Informer:on(event, fn)
  if event ~= 'add' and event ~= 'update' and event ~= 'delete' and event ~= 'error' then
    error(('unknown event "%s": use "add", "update", "delete" or "error"'):format(tostring(event)), 2)
  end
  C.on(self, event, fn)
  return self
end
--- The cells of the server's Table row that obj came in, for an informer
-- made with server_print: one value per column of the Table's
-- columnDefinitions (klua.api.list with as_table gives them), as the server
-- sent them. nil for an object that came alone (a server that cannot make
-- a Table, or an informer without server_print).
-- @param obj an object this informer handed out (a view)
-- @return a list of cells, or nil
-- @raise when obj is not a view
-- @usage
-- pods:on('add', function(pod) print(table.concat(pods:cells(pod), '  ')) end)
function Informer:cells(obj)
  if klua.type(obj) ~= 'object' or type(obj) ~= 'userdata' then
    error('inf:cells takes an object this informer handed out', 2)
  end
  return core.table_cells(obj)
end
--- The cached object under "namespace/name" ("name" when cluster-scoped).
-- @function inf:get(key)
-- @param key "namespace/name", or "name" for a cluster-scoped object
-- @return the cached object (a view), or nil
-- @usage
-- local pod = pods:get('default/web-0')

--- The cached objects: every one, or with opts those in opts.namespace
-- whose labels match opts.label_selector (a string or a klua.labels
-- selector), as client-go's listers filter.
-- @param opts optional {namespace=, label_selector=}
-- @return a list of views
-- @raise when opts is not a table, namespace not a string, or the selector
--   not valid
-- @usage
-- for _, pod in ipairs(pods:list { label_selector = 'app=web' }) do print(pod.metadata.name) end
function Informer:list(opts)
  if opts == nil then return C.list(self) end
  if type(opts) ~= 'table' then error('list takes nothing or a table such as {namespace = "default"}', 2) end
  local sel, err = selector.of(opts.label_selector)
  if not sel then error(err, 2) end
  if opts.namespace ~= nil and type(opts.namespace) ~= 'string' then error('namespace must be a string', 2) end
  local all = C.list(self, opts.namespace)
  if sel:empty() then return all end
  local out = {}
  for _, obj in ipairs(all) do
    if sel:matches(obj) then out[#out + 1] = obj end
  end
  return out
end
--- The cached objects whose index `name` (opts.indexes of klua.informer)
-- holds `value`, in key order: as client-go's ByIndex, up to date with the
-- cache at the moment of the call.
-- @param name the index's name
-- @param value the value looked up (a string)
-- @return a list of read-only views
-- @raise when the informer has no such index, or value is not a string
-- @usage
-- for _, pod in ipairs(pods:by_index('by_node', 'node-7')) do print(pod.metadata.name) end
function Informer:by_index(name, value)
  local out = {}
  for i, key in ipairs(self:index_keys(name, value)) do out[i] = self:get(key) end
  return out
end
--- The keys of the objects by_index(name, value) would return, sorted.
-- @param name the index's name
-- @param value the value looked up (a string)
-- @return a list of keys ("namespace/name")
-- @raise as by_index
-- @usage
-- local keys = pods:index_keys('by_node', 'node-7')
function Informer:index_keys(name, value)
  C.check(self)
  local s = core.state(self)
  if not s.indexes then error(s.name .. ' has no indexes: give klua.informer indexes = {...}', 2) end
  return s.indexes:lookup(name, value)
end
--- Whether the first list is cached and was handed to the handlers.
-- @function inf:synced()
-- @return true or false
-- @usage
-- if not pods:synced() then return klua.requeue_after(1) end

--- The reflector's counters (lists, the LIST requests, none while
-- WatchList streams the state; relists, the times it fetched the whole
-- state again, by LIST or watch-list; watches, the WATCH requests,
-- watch-lists included; events, a watch-list's initial ones included; bytes
-- of LIST and WATCH bodies, ...), its state (LIST, WATCH, BACKOFF, ...:
-- docs/architecture.md), index_errors, the index function calls that failed,
-- transform_errors, the objects a transform function failed on,
-- failing_for, the seconds its lists or watches have been failing (0
-- while they succeed), notifications, the adds, updates and deletes
-- queued for its handlers so far, pending, those not handed to them yet,
-- add_calls, update_calls, delete_calls and error_calls, the calls of its
-- handlers of each kind started so far (a notification goes to every
-- handler of its kind), handler_errors, the add, update and delete
-- handler calls that failed (an error handler's failure counts in
-- klua.stats().task_errors alone), handler_budget_stops, those of them
-- --instruction-budget stopped,
-- last_event_age, the seconds since its last watch
-- event came (nil before any), staleness, the seconds since it last heard
-- from the server that its cache is current (a watch event, a bookmark or a
-- completed LIST; since it started, before any: /readyz's
-- --readyz-max-staleness bound), verifications and drift_objects, the
-- checks --verify-cache made of its cache and the objects they found
-- differing from the server (each drift relists), compressed, the cached
-- objects stored compressed after staying unwritten (--cache-compression,
-- docs/config.md), compressed_bytes and compressed_json_bytes, what they
-- take and the JSON they hold, compaction, what the compression does:
-- "off", "idle" (nothing left to compress until an object is written),
-- "timed" (waiting for objects to come due), "waiting" (for the handlers'
-- queue to empty), "slicing" (compressing up to 256 KiB of JSON) or
-- "yielding" (between two slices, while the loop reads its sockets),
-- compaction_seconds, the loop's CPU time it
-- took, compaction_passes, the passes over the cache it made, and refused, why they fail while the server refuses them until
-- someone acts (a 4xx: a permission not granted), or nil.
-- @return a table of counters
-- @usage
-- klua.log.info('%d relists', pods:stats().relists)
function Informer:stats()
  local s = C.stats(self)
  local state = core.state(self)
  s.index_errors = state.indexes and state.indexes.errors or 0
  s.verifications, s.drift_objects = state.verifications or 0, state.drift_objects or 0
  return s
end
--- Stops the informer: its watch ends, its cache and handlers are freed, and
-- every later call on it raises "this informer is stopped". Safe from one
-- of its own handlers, which finishes first; stopping it again does nothing.
-- @usage
-- cms:on('add', function(obj) if obj.metadata.name == 'last' then cms:stop() end end)
function Informer:stop()
  endpoint.untrack_informer(self)
  writes.untrack(self)
  verify.untrack(self)
  C.stop(self)
end
--- How far the cache is behind this process's own writes: the seconds
-- since the oldest write made through klua.api (by any handler, timer or
-- reconcile) to an object this informer selects that its watch has not
-- delivered yet; 0 when it holds them all. The gauge
-- klua_informer_write_lag_seconds on /metrics. Controllers wait for these
-- writes before they reconcile (klua.controller's read_your_writes).
-- @return seconds, 0 or more
-- @usage
-- klua.every(10, function() klua.log.info('%s is %.1f s behind', pods:name(), pods:lag()) end)
function Informer:lag()
  C.check(self)
  return writes.lag(self)
end
--- The informer's name: its resource, namespace and selector, as logs show
-- it (tostring(inf) is "informer(" .. name .. ")").
-- @return the name
-- @usage
-- klua.log.info('%s synced', pods:name())
function Informer:name()
  C.check(self)
  return core.state(self).name
end
--- The resource the informer lists and watches, as klua.resolve describes
-- it: {group=, version=, resource=, kind=, namespaced=, ...}.
-- @return the resource's description
-- @usage
-- klua.log.info('watching %s', pods:resource().kind)
function Informer:resource()
  C.check(self)
  return core.state(self).resource
end

local DROP = {}

--- A cache transform for klua.informer{transform = ...}, as client-go's
-- SetTransform is most used: the members at these dotted paths through
-- objects are dropped, in C, before each object is cached or handed to a
-- handler, so an informer that never reads them does not keep them. Paths
-- that the cache keys on (metadata.name, .namespace, .resourceVersion,
-- .uid, kind, apiVersion, metadata) are refused. The fast preset: a
-- function transform does the same in Lua at about twice the cost per
-- object (docs/scale.md).
-- @param ... the dotted paths, such as 'metadata.managedFields'
-- @return a transform for klua.informer's transform option
-- @raise when no path is given or a path is not a string
-- @usage
-- klua.informer { resource = 'pods',
--   transform = klua.drop_fields('metadata.managedFields', 'status.conditions') }
function klua.drop_fields(...)
  local paths = table.pack(...)
  if paths.n == 0 then error("drop_fields takes paths, such as 'metadata.managedFields'", 2) end
  for i = 1, paths.n do
    if type(paths[i]) ~= 'string' then
      error(('drop_fields: path %d must be a string such as \'metadata.managedFields\''):format(i), 2)
    end
  end
  paths.n = nil
  return setmetatable({ paths = paths }, DROP)
end

--- Creates and starts an informer.
-- opts.resource: as kubectl names it ("pods", "po", "deployments.apps",
--   "apps/v1/deployments", a CRD's plural or short name);
-- opts.namespace: one namespace (default: all namespaces);
-- opts.label_selector, opts.field_selector: server-side filters;
-- opts.resync: seconds between resyncs that re-deliver every cached object
--   as an update (default: none);
-- opts.indexes: {name = function(obj) return value(s) end}, for
--   inf:by_index (lua/klua/internal/index.lua);
-- opts.transform: klua.drop_fields(path, ...), members dropped from every
--   object before it is cached and handed to handlers; or a function(obj),
--   client-go's SetTransform: called with every listed and watched object
--   (deleted ones too) before it is cached and before any handler sees it,
--   it returns the object to cache: obj itself, changed or not, or a table,
--   which is cached as its JSON. obj is a view that takes writes, as a
--   TransformFunc changes its object: obj.a.b = nil, obj.x = v, table.insert
--   and table.remove on its arrays; the JSON cached is obj's own bytes with
--   the members written to rewritten (docs/scale.md). It runs
--   under the instruction budget and cannot wait. It must leave kind,
--   apiVersion and metadata's name, namespace, resourceVersion and uid as
--   they are. An object it fails on (an error, nil or a non-table returned,
--   one of those fields changed) is not cached: the error is logged, counted
--   in inf:stats().transform_errors, and the informer relists after a
--   backoff (docs/scale.md);
-- opts.metadata_only: true to list and watch PartialObjectMetadata, as
--   client-go's metadata informers do: each object is its kind
--   (PartialObjectMetadata), apiVersion (meta.k8s.io/v1) and whole metadata
--   (name, namespace, labels, annotations, ownerReferences, ...), so the
--   cache keeps a fraction of the bytes.
-- opts.server_print: true to list and watch the server's Table form with
--   whole objects, as kubectl get does to print (klua watch uses it): the
--   cache holds the objects as ever, and inf:cells(obj) gives the cells of
--   the row each came in; not with metadata_only or transform. It lists
--   and watches, never with WatchList: kube-apiserver 1.32 and 1.33 refuse
--   the Table form to a watch-list request.
-- @param opts a table as above, or the resource's name alone
-- @return the informer (inf:on, inf:get, inf:list, inf:by_index, inf:synced, inf:stats, inf:name,
--   inf:resource, inf:cells, inf:lag, inf:stop); tostring gives "informer(pods -n default)"
-- @raise when the resource is unknown to the server (discovery's message), the
--   label selector is not valid, a namespace is given for a cluster-scoped
--   resource, or indexes or transform are not as above
--   (a transform's failures on objects are not raised: see opts.transform)
-- @usage
-- local pods = klua.informer { resource = 'pods', namespace = 'default', label_selector = 'app=web' }
-- local slim = klua.informer { resource = 'pods', transform = function(pod)
--   pod.metadata.managedFields = nil; pod.spec.containers = nil; return pod end }
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
  -- Metadata-only objects come in no row, and a transform copies each
  -- object out of the row that holds its cells.
  if opts.server_print and (opts.metadata_only or opts.transform ~= nil) then
    error('server_print takes neither metadata_only nor transform: the cells are in the rows of whole objects', 2)
  end
  local indexes = index.new(opts.indexes, name)
  local drop, transform = nil, nil
  if type(opts.transform) == 'function' then
    transform = opts.transform
  elseif opts.transform ~= nil then
    if getmetatable(opts.transform) ~= DROP then
      error('transform takes a function(obj) that returns the object to cache, or '
        .. "klua.drop_fields(path, ...) such as klua.drop_fields('metadata.managedFields')", 2)
    end
    drop = opts.transform.paths
  end
  -- Before its first LIST: a Lease that cannot be kept ends klua first.
  leader.check()
  local c = core.informer {
    name = name,
    path = discovery.collection_path(r, opts.namespace),
    kind = r.kind,
    label_selector = opts.label_selector,
    field_selector = opts.field_selector,
    resync = opts.resync,
    drop = drop,
    transform = transform,
    metadata_only = opts.metadata_only,
    table = opts.server_print,
  }
  local s = core.state(c)
  s.name, s.resource, s.indexes = name, r, indexes and indexes:attach(c)
  s.spec = { namespace = opts.namespace, label_selector = opts.label_selector, field_selector = opts.field_selector }
  endpoint.track_informer(c)
  writes.track(c, { resource = r, namespace = opts.namespace, selector = valid,
    field_selector = opts.field_selector })
  verify.track(c)
  return c
end

--- Prometheus metrics of the script's own (see lua/klua/metrics.lua):
-- klua.metrics.counter/gauge/histogram{name=, help=, labels=}, served on
-- /metrics beside klua's own with --metrics-bind-address.
klua.metrics = require('klua.metrics')

--- Starts leader election on a coordination.k8s.io/v1 Lease, as client-go's
-- leaderelection does (see lua/klua/leader.lua); `klua run --leader-elect`
-- does the same from flags. opts: name (the Lease), namespace (default:
-- the context's), identity (default: host name and a random suffix),
-- lease_duration (15 s), renew_deadline (10 s), retry_period (2 s),
-- on_started_leading, on_stopped_leading, on_new_leader(identity),
-- release_on_stop (default true). Losing the Lease ends klua with status 1.
-- Returns the election: e:is_leader(), e:stop() (releases the Lease).
-- @param opts the table of settings above
-- @return the election
-- @raise when the settings are invalid (client-go's NewLeaderElector's
--   checks) or an election runs already
-- @usage
-- local e = klua.leader_election { name = 'my-controller', on_started_leading = start }
klua.leader_election = leader.elect
--- Whether this process leads: true without leader election.
-- @return true or false
-- @usage
-- if klua.leader() then klua.api.update('configmaps', cm) end
klua.leader = leader.leading
--- Runs fn once this process leads (at once without leader election).
-- Controllers start their workers this way.
-- @param fn the function to run, as its own task
-- @usage
-- klua.on_leading(function() klua.log.info('leading') end)
function klua.on_leading(fn) return leader.on_leading(guard(fn)) end
--- The shards this replica holds under `klua run --shards N`, in order
-- (0 .. N-1; a key's shard is that of its object's uid,
-- require('klua.shards').shard_of(uid, N), docs/scale.md), or
-- nil without --shards.
-- @return a list of shard numbers, or nil
-- @usage
-- klua.every(10, function() klua.log.info('holding shards %s', table.concat(klua.shards() or {}, ',')) end)
function klua.shards()
  local g = shards.current()
  return g and g:shards()
end

local controller = require('klua.controller')
--- Creates and starts a controller: informers' changes become keys in a
-- work queue that `workers` coroutines reconcile (see klua.controller docs).
-- The keys of an initial list or a resync are queued at low priority, a
-- live change at normal priority, so changes go first. reconcile gets ctx:
-- ctx.attempt, ctx.priority, ctx.causes (what queued the key since its last
-- reconcile, oldest first, the last 16) and ctx.cause (the last): {event
-- = "add"|"update"|"delete"|"resync"|"requeue"|"enqueue"|"shard",
-- informer = its name, object = the key of the object that changed (an
-- owned child's, with owner = true), initial = true for the initial list,
-- reason = for a requeue ("requeue", "requeue_after", "error", "timeout"),
-- changed = for an update, the dotted paths that changed, sorted}.
-- @param opts name, watches (informers whose objects' keys are enqueued),
--   owns (informers whose objects enqueue their controller owner's key),
--   workers (default 1), reconcile = function(key, ctx), rate_limit,
--   read_your_writes (seconds, default 10: a key's reconcile waits until
--   these informers hold what klua.api last wrote to its object and to the
--   objects it controls, so that a reconcile never reads the cache from
--   before its own writes, at most this long: then it goes ahead, counted
--   in klua_controller_stale_read_timeouts_total; false: no wait);
--   reconcile_timeout (seconds, default off: a reconcile running longer has
--   its pending API call cancelled, reason "DeadlineExceeded", as every
--   later call, and is counted and retried after its backoff); debounce
--   (seconds, default off: a key's watch events are queued once they have
--   been quiet that long); changed_paths ('all': cause.changed lists
--   every path; by default metadata.resourceVersion and managedFields are
--   left out and a changed status is the one path "status")
-- @return the controller (ctl:enqueue, ctl:stats, ctl:shutdown)
-- @raise when opts has no reconcile function or no informer in watches,
--   or a timeout, a debounce or changed_paths that is not valid
-- @usage
-- klua.controller {
--   watches = { podsets }, owns = { pods },
--   reconcile_timeout = 30, debounce = 0.5,
--   reconcile = function(key, ctx)
--     local c = ctx.cause
--     if c.event == 'update' then klua.log.info('%s changed %s', c.object, table.concat(c.changed, ',')) end
--     return reconcile_podset(key)
--   end,
-- }
klua.controller = controller.new
--- A reconcile result: process the key again after `seconds`.
-- @param seconds a number >= 0
-- @return the result to return from reconcile
-- @usage
-- return klua.requeue_after(30)
klua.requeue_after = controller.requeue_after
--- A reconcile result: process the key again after its rate-limited
-- backoff (per key, 5 ms doubling to 1000 s).
-- @return the result to return from reconcile
-- @usage
-- if not ready then return klua.requeue() end
klua.requeue = controller.requeue
--- A reconcile error that retrying will not fix (controller-runtime's
-- reconcile.TerminalError): a reconcile that returns `nil,
-- klua.terminal_error(err)` is logged and counted
-- (controller_runtime_terminal_reconcile_errors_total and
-- controller_runtime_reconcile_errors_total) but not retried; the key is
-- processed again only when it is added again (a change to the object).
-- tostring() of it is tostring(err).
-- @param err what went wrong, a message or an error table
-- @return the error to return from reconcile
-- @usage
-- if not spec_valid then return nil, klua.terminal_error('spec.replicas must not be negative') end
klua.terminal_error = controller.terminal_error
--- A work queue with client-go's semantics, for scripts that drive their
-- own workers: q:add (false when the key was waiting already: the adds
-- merge), add_after, add_rate_limited (returns the seconds the key waits),
-- get (suspends), done, forget, num_requeues, len, shutdown, stats. The
-- adds take an optional priority last (an integer, 0 by default; -100 is
-- controller-runtime's low): get hands out the highest first, and a key
-- queued twice keeps the higher; get returns the key and its priority.
-- @param rate_limit optional {qps=, burst=, base_delay=, max_delay=}
-- @return the queue
-- @usage
-- local q = klua.queue()
-- q:add('default/web')
-- q:add('default/db', -100)
klua.queue = core.queue
--- The REST API client (see lua/klua/api.lua).
klua.api = require('klua.api')
--- Label selectors on the client, as apimachinery parses and matches them:
-- klua.labels.parse(text) -> selector (sel:matches(obj_or_labels),
-- tostring(sel)) or nil and a message.
klua.labels = { parse = selector.parse }

--- Parses a label selector in apimachinery's syntax ("app=web,tier!=db",
-- "env in (a,b)", "!legacy").
-- @function klua.labels.parse(text)
-- @param text the selector
-- @return the selector (sel:matches, sel:empty, tostring(sel)), or nil and
--   a message that says what is wrong where
-- @usage
-- local sel = assert(klua.labels.parse('app=web'))
-- if sel:matches(pod) then ... end
--- Helpers for owner references, finalizers, conditions, events and
-- update predicates (see lua/klua/helpers.lua).
klua.helpers = require('klua.helpers')

--- Admission and conversion webhooks served over HTTPS by
-- `--webhook-bind-address` (see lua/klua/webhook.lua, docs/webhooks.md):
-- klua.webhook.validating{path=, resources=, handler=},
-- klua.webhook.mutating{...}, klua.webhook.conversion{path=, convert=}.
klua.webhook = require('klua.webhook')
local recorder = require('klua.internal.recorder')
klua.helpers.set_array_mt(core.json.array_mt)
klua.helpers.set_writable(core.writable)

--- Records a core/v1 Event about obj (opts: type "Normal" or "Warning",
-- reason, message, component; see klua.helpers.event_for) as client-go's
-- recorder (controller-runtime's GetEventRecorderFor) records it: an Event
-- recorded again (same component, object, type, reason and message) is
-- the same object, its count and lastTimestamp updated; similar Events
-- (another message) past the 10th in 10 minutes become one Event
-- "(combined from similar events): <message>" whose count grows; and
-- after 25 Events about one object, 1 more every 5 minutes is written, the
-- rest dropped. A controller failing in a loop thus stores one Event, not
-- one per attempt. Returns the Event as the server stored it, or nil, err:
-- err from event_for when obj lacks metadata.name or kind ({reason,
-- message}), reason "TooManyEvents" when dropped, else from klua.api.
-- Raises when opts is not valid, a mistake in the call.
-- @param obj the object the Event is about (a view or a table)
-- @param opts {type=, reason=, message=, component=}
-- @return the stored Event, or nil and err
-- @raise when opts is not valid
-- @usage
-- klua.record_event(podset, { type = 'Warning', reason = 'ScaleFailed', message = tostring(err) })
function klua.record_event(obj, opts)
  return recorder.record(obj, opts)
end

--- Resolves a resource name through discovery: {group=, version=,
-- resource=, kind=, namespaced=, ...} or nil and a message. As kubectl, it
-- finds a resource at any version that serves it, its group's preferred
-- version first.
-- @param name as kubectl names a resource ("po", "deployments.apps")
-- @return the resource's description, or nil and a message
-- @usage
-- local r = assert(klua.resolve('deploy'))
-- print(r.group, r.version, r.resource)
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
if ctl.verify_cache then verify.enable(ctl.verify_cache) end
-- With --shards the same settings make the shard Leases instead, and every
-- replica reconciles the keys of the shards it holds (lua/klua/shards.lua).
if ctl.leader_elect then
  local id = ctl.election_id or (ctl.script or 'klua'):gsub('%.lua$', ''):lower():gsub('[^a-z0-9.-]', '-')
  if ctl.shards then
    shards.start {
      name = id, shards = ctl.shards, namespace = ctl.election_namespace,
      lease_duration = ctl.lease_duration, renew_deadline = ctl.renew_deadline, retry_period = ctl.retry_period,
    }
  else
    leader.elect {
      name = id, namespace = ctl.election_namespace,
      lease_duration = ctl.lease_duration, renew_deadline = ctl.renew_deadline, retry_period = ctl.retry_period,
      namespace_source = '--leader-election-namespace',
    }
  end
end

return klua
