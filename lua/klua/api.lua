--- `klua.api`: reads and writes the cluster from handlers, timers and
-- reconcile functions. Every call suspends only the calling coroutine; the
-- event loop, the watches and other reconciles go on meanwhile.
--
-- Resources are named as for informers ("pods", "deployments.apps", a CRD's
-- plural...) or given as an informer. Objects are addressed by key:
-- "namespace/name", or "name" for cluster-scoped objects (and for
-- namespaced ones, in the context's namespace).
--
-- Every call returns its result, or nil and an error table
-- {code=, reason=, message=, details=, retry_after=, warnings=}; tostring(err) reads
-- well in a log line, and err.reason is what a script branches on. A
-- mistake in the call raises instead, naming the call as it is written: an
-- argument of the wrong type, such as a namespace where the object goes
-- (klua.api.create('configmaps', 'ns', obj)) or a key in two words
-- (klua.api.delete('configmaps', 'ns', 'name')).
--
-- When the server answered, err is its Status: code is the HTTP status,
-- reason kube's ("NotFound", "Conflict", "Forbidden", "TooManyRequests",
-- ...), retry_after the seconds of a Retry-After header. When it did not,
-- code is 0 and reason says why:
--
--   "Timeout"         no complete answer within --request-timeout (60 s
--                     unless set), whether or not its headers had come
--   "TransportError"  no answer, or one broken off: connection refused or
--                     reset, DNS, TLS, a body cut short
--   "TooLarge"        a response body, inflated, over --memory-limit (64 MiB
--                     without one): ask for smaller pages (api.list's limit)
--   "ConfigError"     not sent: the credentials or TLS settings could not
--                     be used (an exec plugin failed, a CA file is unreadable)
--   "NotLeader"       not sent: a write that only a Lease's holder may make
--                     (any write under leader election; a reconcile's writes
--                     under --shards), and this replica does not hold the
--                     Lease, or no longer: its last successful renewal was
--                     sent more than the renew deadline ago. Counted in
--                     klua_fenced_writes_total.
--   "DeadlineExceeded" cancelled, or not sent: the reconcile making it ran
--                     past its controller's reconcile_timeout.
--
-- Under `klua run --dry-run` every write (create, update, update_status,
-- patch, apply, delete, and a request that is not a GET) is sent with
-- dryRun=All whatever its opts say: the server validates it and answers
-- as if it had been made, persists nothing, and klua logs at info level
-- what it would have changed (verb, resource, key, and the dotted paths
-- that differ from the cached object, with the old and new values). Such
-- an answer is never observed by a watch: a controller that "created" a
-- child finds it missing at its next reconcile.
--
-- These are worth retrying later (a controller's reconcile can return the
-- error and be requeued with backoff); so is a Status with code >= 500 or
-- 429. A 2xx answer whose body is not JSON, or whose Content-Type is not
-- JSON (a protobuf, YAML, a proxy's HTML page) or missing, is reason
-- "InvalidResponse".
local core = require('klua.core')
local discovery = require('klua.internal.discovery')
local dryrun = require('klua.internal.dryrun')
local fence = require('klua.internal.fence')
local util = require('klua.internal.objutil')
local writes = require('klua.internal.writes')
local json = core.json

local api = {}

local Error = {}
Error.__index = Error
function Error:__tostring()
  return ('%s (%s %s)'):format(self.message or 'request failed', tostring(self.code or '?'),
    self.reason or '')
end

local function new_error(code, reason, message, details)
  return setmetatable({ code = code, reason = reason, message = message, details = details }, Error)
end

-- A mistake in the call raises (docs/api.md: "a mistake in the call
-- raises"), with the call as it is written: a script that passes a
-- namespace where the object goes (create('configmaps', 'ns', obj), as some
-- clients take it) would otherwise send the wrong body or key to the server.
-- What the server or the data gets wrong is returned as nil, err.
local CALLS = {
  request = 'klua.api.request(method, path [, body [, content_type [, accept]]])',
  get = 'klua.api.get(resource, key)',
  list = 'klua.api.list(resource [, opts])',
  create = 'klua.api.create(resource, obj [, opts])',
  update = 'klua.api.update(resource, obj [, opts])',
  update_status = 'klua.api.update_status(resource, obj [, opts])',
  patch = 'klua.api.patch(resource, key, patch [, opts])',
  apply = 'klua.api.apply(obj, opts)',
  delete = 'klua.api.delete(resource, key [, opts])',
}

local function shown(v)
  if type(v) == 'string' then return ('the string %q'):format(v) end
  if getmetatable(v) == 'klua.view' then return core.writable(v) and 'klua.edit(obj)' or 'a view' end
  return v == nil and 'nil' or ('a ' .. type(v))
end

-- Raises, for the caller of api[fn], "CALL: WHAT, not VALUE".
local function misuse(fn, what, v)
  error(('%s: %s, not %s'):format(CALLS[fn], what, shown(v)), 3)
end

local function check_resource(fn, resource)
  if (type(resource) == 'string' and resource ~= '') or core.is(resource, 'informer')
      or (type(resource) == 'table' and resource.kind and resource.version) then return end
  misuse(fn, 'resource is a resource name such as "configmaps", or an informer', resource)
end

local function check_key(fn, key)
  if type(key) == 'string' and key ~= '' then return end
  misuse(fn, 'key is "namespace/name", or "name"', key)
end

-- An object: a table, or a view from an informer.
local function check_obj(fn, obj, what)
  if type(obj) == 'table' or type(obj) == 'userdata' then return end
  misuse(fn, what or 'obj is the object, a table (its namespace in obj.metadata.namespace or opts.namespace)', obj)
end

local function check_opts(fn, opts, what)
  if opts == nil or type(opts) == 'table' then return end
  misuse(fn, what or 'opts is a table of options, or nil', opts)
end

-- What opts is after a key: a third word there is a slip for "namespace/name".
local AFTER_KEY = 'opts is a table of options, or nil (the key is one string: "namespace/name")'

local function resolve(resource)
  if core.is(resource, 'informer') then return resource:resource() end
  if type(resource) == 'table' and resource.kind and resource.version then return resource end
  local r, err = discovery.resolve(resource)
  if not r then return nil, new_error(404, 'NotFound', err) end
  return r
end

local function encode_query(q)
  local parts = {}
  for k, v in pairs(q) do
    if v ~= nil and v ~= false then
      local s = tostring(v):gsub('[^%w%-%._~]', function(c) return ('%%%02X'):format(c:byte()) end)
      parts[#parts + 1] = k .. '=' .. s
    end
  end
  table.sort(parts)
  return #parts > 0 and ('?' .. table.concat(parts, '&')) or ''
end

local function split_key(r, key, ns_hint)
  local ns, name = key:match('^([^/]+)/([^/]+)$')
  if not ns then name = key end
  if r.namespaced then ns = ns or ns_hint or core.namespace() else ns = nil end
  return ns, name
end

local function object_path(r, ns, name, sub)
  local p = discovery.collection_path(r, ns)
  if name then p = p .. '/' .. name end
  if sub then p = p .. '/' .. sub end
  return p
end

local function decode_error(status, body, retry_after)
  local obj = json.decode(body or '')
  if type(obj) == 'table' and obj.kind == 'Status' then
    local e = new_error(obj.code or status, obj.reason, obj.message, obj.details)
    e.retry_after = retry_after
    return e
  end
  local e = new_error(status, status == 404 and 'NotFound' or 'Unknown',
    ('the server answered %d: %s'):format(status, (body or ''):sub(1, 200)))
  e.retry_after = retry_after
  return e
end

-- The warnings of each coroutine's latest call (see api.last_warnings):
-- weak keys, so that a finished coroutine's go with it.
local warned = setmetatable({}, { __mode = 'k' })
local NONE = {}

-- Remembers a call's warnings for its coroutine; `more` adds those of the
-- next request of the same call (a page of api.list).
local function remember(warnings, more)
  local co = coroutine.running()
  if not more or not warned[co] or warned[co] == NONE then
    warned[co] = warnings or NONE
  elseif warnings then
    local all = table.move(warned[co], 1, #warned[co], 1, {})
    warned[co] = table.move(warnings, 1, #warnings, #all + 1, all)
  end
end

--- api.request(method, path [, body [, content_type [, accept]]]) -> the
-- decoded body, or nil, err. body is a string sent as it is, or a table
-- sent as JSON (content_type "application/json" unless given); accept is
-- the Accept header ("application/json" unless given).
-- @function klua.api.request(method, path, body, content_type, accept)
-- @param method "GET", "POST", "PUT", "PATCH" or "DELETE"
-- @param path the request's path and query, such as "/api/v1/namespaces"
-- @param body optional: a string, or a table sent as JSON
-- @param content_type optional: the body's type
-- @param accept optional: the answer's type, such as
--   "application/json;as=Table;g=meta.k8s.io;v=v1,application/json"
-- @return the decoded body, or nil and err
-- @usage
-- local ns, err = klua.api.request('GET', '/api/v1/namespaces/default')
local function call(method, path, body, content_type, accept, unfenced, more)
  local payload
  if body ~= nil then
    payload = type(body) == 'string' and body or json.encode(body)
  end
  -- Checked last before the request starts, and by the C side again as it
  -- is about to leave (send_by): a task resumed after a pause of the whole
  -- process sees the lapse before anything is sent.
  local send_by, lease
  if method ~= 'GET' and not unfenced then
    send_by, lease = fence.send_by()
    if send_by and core.now() >= send_by then
      return nil, new_error(0, 'NotLeader', fence.refuse(method, path, lease))
    end
  end
  local status, resp, retry_after, not_json, warnings = core.request(method, path, payload,
    payload and (content_type or 'application/json') or nil, accept, send_by)
  remember(warnings, more)
  -- Without an answer, resp is the outcome's name and retry_after its words.
  if not status and resp == 'TooLate' then return nil, new_error(0, 'NotLeader', fence.refuse(method, path, lease)) end
  if not status then return nil, new_error(0, resp, retry_after) end
  if status < 200 or status > 299 then
    local e = decode_error(status, resp, retry_after)
    e.warnings = warnings
    return nil, e
  end
  if not_json == '' then
    return nil, new_error(status, 'InvalidResponse', 'the server answered without a Content-Type, so klua '
      .. 'cannot tell JSON from anything else: kube-apiserver names every body\'s type, so a proxy between '
      .. 'klua and it likely dropped the header')
  elseif not_json then
    return nil, new_error(status, 'InvalidResponse', ('the server answered %s, not JSON'):format(not_json))
  end
  local obj, err = json.decode(resp)
  if obj == nil then return nil, new_error(status, 'InvalidResponse', 'invalid JSON from the server: ' .. tostring(err)) end
  return obj
end
function api.request(method, path, body, content_type, accept)
  if type(method) ~= 'string' then misuse('request', 'method is "GET", "POST", "PUT", "PATCH" or "DELETE"', method) end
  if type(path) ~= 'string' or path:sub(1, 1) ~= '/' then misuse('request', 'path is a string such as "/api/v1/namespaces"', path) end
  if body ~= nil and type(body) ~= 'string' then check_obj('request', body, 'body is a string, a table sent as JSON, or nil') end
  if content_type ~= nil and type(content_type) ~= 'string' then misuse('request', 'content_type is a string, or nil', content_type) end
  if accept ~= nil and type(accept) ~= 'string' then misuse('request', 'accept is a string, or nil', accept) end
  if not dryrun.on or method:upper() == 'GET' then return call(method, path, body, content_type, accept) end
  -- A DELETE with a body takes its options from the body alone
  -- (endpoints/handlers/delete.go), so a DeleteOptions body says it too.
  if type(body) == 'table' and body.kind == 'DeleteOptions' then
    local copy = { dryRun = setmetatable({ 'All' }, json.array_mt) }
    for k, v in pairs(body) do
      if k ~= 'dryRun' then copy[k] = v end
    end
    body = copy
  end
  local answer, err = call(method, path .. (path:find('?', 1, true) and '&' or '?') .. 'dryRun=All', body,
    content_type, accept)
  if answer ~= nil then dryrun.report_request(method, path) end
  return answer, err
end

--- api.last_warnings() -> the texts of the warnings the server sent with
-- the answer to the calling coroutine's latest klua.api call (every page
-- of an api.list), in order, repeats included; an empty table when there
-- were none. kube-apiserver warns in a `Warning: 299` header (KEP-1693) of
-- a deprecated API version, an unknown field under fieldValidation=Warn,
-- an admission webhook's or policy's warning: the answer is still the
-- answer, and the call's results are unchanged. An error that the server
-- answered carries them as err.warnings too. klua logs each distinct
-- warning once, whichever call met it, and counts every one in
-- klua_api_warnings_total.
-- @return a list of strings
-- @usage
-- local obj, err = klua.api.create('widgets.example.com', widget)
-- for _, w in ipairs(klua.api.last_warnings()) do klua.log.warn('create warned: ' .. w) end
function api.last_warnings()
  local w = warned[coroutine.running()] or NONE
  return table.move(w, 1, #w, 1, {})
end

local function meta_key(obj)
  local md = obj and obj.metadata
  if not md or not md.name then return nil end
  return util.key(md.namespace, md.name)
end

--- api.get(resource, key) -> object table, or nil, err.
-- @param resource a resource name ("pods"), a resolved resource or an informer
-- @param key "namespace/name", or "name"
-- @return the object, or nil and err (err.reason "NotFound" when it does not exist)
-- @usage
-- local cm, err = klua.api.get('configmaps', 'default/settings')
-- if not cm and not klua.api.is_not_found(err) then return nil, err end
-- @function klua.api.get(resource, key)
function api.get(resource, key, ...)
  check_resource('get', resource)
  check_key('get', key)
  if select('#', ...) > 0 then misuse('get', 'nothing after the key (it is one string: "namespace/name")', (...)) end
  local r, err = resolve(resource)
  if not r then return nil, err end
  local ns, name = split_key(r, key)
  return call('GET', object_path(r, ns, name))
end

-- The Accept header of kubectl get: a Table, or the plain form.
local TABLE = 'application/json;as=Table;g=meta.k8s.io;v=v1,application/json'

--- api.list(resource, opts) -> {items = {...}, metadata = {...}} with every
-- page fetched. opts: namespace (default all), label_selector,
-- field_selector, shard_selector (KEP-5866's shardSelector, as
-- klua.shards.selector makes it; a server without the feature ignores it,
-- and one that applied it says so in metadata.shardInfo), limit (page
-- size), one_page (fetch the first page only;
-- its metadata.continue says whether more would follow), as_table (ask for
-- the server's Table form, kubectl get's columns, with whole objects: the
-- answer is a meta.k8s.io Table, {columnDefinitions = {...}, rows = {{cells
-- = {...}, object = {...}}, ...}}, with every page's rows; a server that
-- cannot make one answers with the plain list, and one that refuses fails
-- with 406).
-- @param resource a resource name, a resolved resource or an informer
-- @param opts optional, as above
-- @return the list, or nil and err
-- @usage
-- local list = assert(klua.api.list('pods', { namespace = 'default', label_selector = 'app=web' }))
-- print(#list.items)
function api.list(resource, opts)
  check_resource('list', resource)
  check_opts('list', opts, 'opts is a table of options such as { namespace = "default" }, or nil')
  opts = opts or {}
  local r, err = resolve(resource)
  if not r then return nil, err end
  local base = object_path(r, opts.namespace)
  local items, result, cont = {}, nil, nil
  local member = 'items'
  repeat
    local page
    page, err = call('GET', base .. encode_query {
      labelSelector = opts.label_selector, fieldSelector = opts.field_selector,
      shardSelector = opts.shard_selector, limit = opts.limit or 500, continue = cont, includeObject = opts.as_table and 'Object' or nil,
    }, nil, nil, opts.as_table and TABLE or nil, nil, cont ~= nil)
    if not page then return nil, err end
    if page.kind == 'Table' then member = 'rows' end
    for _, it in ipairs(page[member] or {}) do items[#items + 1] = it end
    result = page
    cont = not opts.one_page and page.metadata and page.metadata.continue
  until not cont or cont == '' or cont == json.null
  result[member] = setmetatable(items, getmetatable(result[member]) or json.array_mt)
  return result
end

-- Whether a write with these opts is a dry run: asked for, or --dry-run.
local function dry(opts)
  return dryrun.on or (opts ~= nil and opts.dry_run and true) or false
end

local function write_opts(opts)
  opts = opts or {}
  return encode_query { fieldManager = opts.field_manager, dryRun = dry(opts) and 'All' or nil }
end

-- The object as it is before a --dry-run write: as cached, else as the
-- server has it (nil when it has none).
local function before(r, ns, name)
  local cached = writes.cached(r, ns, name)
  if cached ~= nil then return cached end
  return (call('GET', object_path(r, ns, name)))
end

-- Passes a write's outcome on, telling the informers' bookkeeping of
-- every write the server made so that controllers read their own writes
-- (lua/klua/internal/writes.lua). A dry run made none: under --dry-run
-- it is logged as what it would change.
local function wrote(verb, r, ns, name, is_dry, answer, err, deleting)
  if answer == nil then return answer, err end
  if not is_dry then
    writes.record(r, ns, name, answer, deleting)
  elseif dryrun.on then
    dryrun.report(verb, r, ns, name, (verb ~= 'create' and verb ~= 'delete') and before(r, ns, name) or nil, answer)
  end
  return answer, err
end

--- api.create(resource, obj, opts) -> created object, or nil, err. The
-- namespace comes from obj.metadata.namespace, else opts.namespace, else
-- the context's. opts: namespace, field_manager, dry_run.
-- @param resource a resource name, a resolved resource or an informer
-- @param obj the object, a table
-- @param opts optional, as above
-- @return the created object, or nil and err (reason "AlreadyExists" when it exists)
-- @usage
-- local cm, err = klua.api.create('configmaps', {
--   apiVersion = 'v1', kind = 'ConfigMap',
--   metadata = { name = 'settings', namespace = 'default' }, data = { mode = 'on' },
-- })
function api.create(resource, obj, opts)
  check_resource('create', resource)
  check_obj('create', obj)
  check_opts('create', opts)
  opts = opts or {}
  local r, err = resolve(resource)
  if not r then return nil, err end
  local md = obj.metadata or {}
  local ns = r.namespaced and (md.namespace or opts.namespace or core.namespace()) or nil
  local q = write_opts(opts)
  local created, cerr = call('POST', object_path(r, ns) .. q, obj, nil, nil, opts[fence.EXEMPT])
  local name = created and util.field(created.metadata, 'name')
  if not name then return created, cerr end
  return wrote('create', r, ns, name, dry(opts), created, cerr)
end

local function put(fn, resource, obj, sub, opts)
  check_resource(fn, resource)
  check_obj(fn, obj, 'obj is the whole object, a table with metadata.name')
  check_opts(fn, opts)
  local r, err = resolve(resource)
  if not r then return nil, err end
  local key = meta_key(obj)
  if not key then return nil, new_error(400, 'BadRequest', 'the object needs metadata.name') end
  local ns, name = split_key(r, key)
  local q = write_opts(opts)
  return wrote(sub and 'update status' or 'update', r, ns, name, dry(opts),
    call('PUT', object_path(r, ns, name, sub) .. q, obj, nil, nil, opts and opts[fence.EXEMPT]))
end

--- api.update(resource, obj, opts) -> updated object, or nil, err. obj
-- carries its metadata.resourceVersion: a stale one fails with a conflict
-- (see api.is_conflict); fetch again and retry.
-- @param resource a resource name, a resolved resource or an informer
-- @param obj the whole object, with metadata.name and resourceVersion
-- @param opts optional {field_manager=, dry_run=}
-- @return the updated object, or nil and err (reason "Conflict" when stale)
-- @usage
-- local cm = klua.copy(cms:get('default/settings'))
-- cm.data.mode = 'off'
-- local _, err = klua.api.update('configmaps', cm)
-- if klua.api.is_conflict(err) then return klua.requeue() end
function api.update(resource, obj, opts) return put('update', resource, obj, nil, opts) end

--- api.update_status(resource, obj, opts): like update, for the status
-- subresource: only obj.status is written.
-- @param resource a resource name, a resolved resource or an informer
-- @param obj the whole object; its status is written
-- @param opts optional {field_manager=, dry_run=}
-- @return the updated object, or nil and err
-- @usage
-- local ps = klua.copy(podset)
-- ps.status = { replicas = #pods }
-- klua.api.update_status('podsets', ps)
function api.update_status(resource, obj, opts) return put('update_status', resource, obj, 'status', opts) end

local PATCH_TYPES = {
  merge = 'application/merge-patch+json',
  json = 'application/json-patch+json',
  strategic = 'application/strategic-merge-patch+json',
  apply = 'application/apply-patch+yaml',
}

--- api.patch(resource, key, patch, opts) -> patched object, or nil, err.
-- opts.type: "merge" (default), "json", "strategic" or "apply" (server-side
-- apply: needs opts.field_manager; opts.force takes fields from other
-- managers). opts.subresource: e.g. "status". opts.dry_run: validated and
-- answered, not persisted.
-- @param resource a resource name, a resolved resource or an informer
-- @param key "namespace/name", or "name"
-- @param patch the patch, a table (sent as JSON) or a string
-- @param opts optional, as above
-- @return the patched object, or nil and err
-- @usage
-- klua.api.patch('deployments.apps', 'default/web', { spec = { replicas = 3 } })
function api.patch(resource, key, patch, opts)
  check_resource('patch', resource)
  check_key('patch', key)
  if type(patch) ~= 'string' then check_obj('patch', patch, 'patch is a table sent as JSON, or a string') end
  check_opts('patch', opts, AFTER_KEY)
  opts = opts or {}
  local r, err = resolve(resource)
  if not r then return nil, err end
  local ct = PATCH_TYPES[opts.type or 'merge']
  if not ct then
    return nil, new_error(400, 'BadRequest', ('unknown patch type "%s": use merge, json, strategic or apply'):format(opts.type))
  end
  if opts.type == 'apply' and not opts.field_manager then
    return nil, new_error(400, 'BadRequest', 'server-side apply needs opts.field_manager')
  end
  local ns, name = split_key(r, key)
  local q = encode_query { fieldManager = opts.field_manager, force = opts.force and 'true' or nil,
    dryRun = dry(opts) and 'All' or nil }
  return wrote('patch', r, ns, name, dry(opts), call('PATCH', object_path(r, ns, name, opts.subresource) .. q, patch, ct))
end

--- api.apply(obj, opts) -> the object as stored, or nil, err. Server-side
-- apply: obj is the part of the object this manager wants to own, with
-- apiVersion, kind and metadata.name (the resource comes from apiVersion
-- and kind); the server creates the object if it does not exist, sets what
-- obj sets, and removes what this manager set before and obj leaves out.
-- opts: field_manager (required: who owns the fields), force (take fields
-- another manager owns instead of failing with a Conflict whose message
-- names them), namespace (when obj.metadata has none; default the
-- context's), dry_run.
-- @param obj the fields to own, a table with apiVersion, kind and metadata.name
-- @param opts a table: field_manager (required), force, namespace, dry_run
-- @return the object as stored, or nil and an error (a Conflict names the
--   fields and their managers)
-- @raise when obj is not a table: a view or klua.edit(obj) is a whole stored
--   object, which would claim every field it holds; klua.api.update sends it
-- @usage
-- local cm, err = klua.api.apply({ apiVersion = 'v1', kind = 'ConfigMap',
--   metadata = { name = 'settings', namespace = 'web' },
--   data = { mode = 'fast' } }, { field_manager = 'my-controller' })
-- if klua.api.is_conflict(err) then klua.log.warn('%s', err.message) end
function api.apply(obj, opts)
  check_obj('apply', obj, 'obj is the object to apply, a table with apiVersion, kind and metadata.name')
  if type(obj) ~= 'table' then
    misuse('apply', 'obj is the object to apply, a table with apiVersion, kind and metadata.name: the fields this '
      .. 'manager owns (a view, or klua.edit(obj), is a whole stored object: send its changes with klua.api.update)', obj)
  end
  check_opts('apply', opts, 'opts is a table with field_manager')
  opts = opts or {}
  if type(obj.apiVersion) ~= 'string' or type(obj.kind) ~= 'string'
      or type(obj.metadata) ~= 'table' or type(obj.metadata.name) ~= 'string' then
    return nil, new_error(400, 'BadRequest', 'api.apply needs an object with apiVersion, kind and metadata.name')
  end
  if type(opts.field_manager) ~= 'string' or opts.field_manager == '' then
    return nil, new_error(400, 'BadRequest', 'api.apply needs opts.field_manager: the name that owns the applied fields')
  end
  local r, err = resolve(obj.apiVersion .. '/' .. obj.kind)
  if not r then return nil, err end
  local md = obj.metadata
  local ns = r.namespaced and (md.namespace or opts.namespace or core.namespace()) or nil
  local q = encode_query { fieldManager = opts.field_manager, force = opts.force and 'true' or nil,
    dryRun = dry(opts) and 'All' or nil }
  return wrote('apply', r, ns, md.name, dry(opts), call('PATCH', object_path(r, ns, md.name) .. q, obj, PATCH_TYPES.apply))
end

--- api.delete(resource, key, opts) -> the server's answer (the object
-- or a Status), or nil, err. opts: propagation_policy ("Foreground",
-- "Background", "Orphan"), preconditions {uid=, resource_version=},
-- grace_period_seconds, dry_run.
-- @param resource a resource name, a resolved resource or an informer
-- @param key "namespace/name", or "name"
-- @param opts optional, as above
-- @return the server's answer, or nil and err
-- @usage
-- local _, err = klua.api.delete('pods', 'default/web-0', { propagation_policy = 'Background' })
-- if err and not klua.api.is_not_found(err) then return nil, err end
function api.delete(resource, key, opts)
  check_resource('delete', resource)
  check_key('delete', key)
  check_opts('delete', opts, AFTER_KEY)
  opts = opts or {}
  local r, err = resolve(resource)
  if not r then return nil, err end
  local ns, name = split_key(r, key)
  local body = { kind = 'DeleteOptions', apiVersion = 'v1' }
  body.propagationPolicy = opts.propagation_policy
  body.gracePeriodSeconds = opts.grace_period_seconds
  if opts.preconditions then
    body.preconditions = { uid = opts.preconditions.uid, resourceVersion = opts.preconditions.resource_version }
  end
  -- In the body: the server reads a DELETE's options from its body alone.
  if dry(opts) then body.dryRun = setmetatable({ 'All' }, json.array_mt) end
  local answer, derr = call('DELETE', object_path(r, ns, name), body)
  return wrote('delete', r, ns, name, dry(opts), answer, derr, true)
end

local function reason_is(reason, code)
  return function(err) return type(err) == 'table' and (err.reason == reason or (code and err.code == code and not err.reason)) or false end
end

--- True when err says the object does not exist (404 NotFound).
-- @param err an error from a klua.api call (anything else is false)
-- @return true or false
-- @usage
-- local pod, err = klua.api.get('pods', key)
-- if klua.api.is_not_found(err) then return end
api.is_not_found = reason_is('NotFound', 404)
--- True when err is a write conflict (409 Conflict): fetch again and retry.
-- @param err an error from a klua.api call (anything else is false)
-- @return true or false
-- @usage
-- if klua.api.is_conflict(err) then return klua.requeue() end
api.is_conflict = reason_is('Conflict')
--- True when err says the object already exists (409 AlreadyExists).
-- @param err an error from a klua.api call (anything else is false)
-- @return true or false
-- @usage
-- local _, err = klua.api.create('configmaps', cm)
-- if err and not klua.api.is_already_exists(err) then return nil, err end
api.is_already_exists = reason_is('AlreadyExists')
--- True when err says the credentials may not do this (403 Forbidden).
-- @param err an error from a klua.api call (anything else is false)
-- @return true or false
-- @usage
-- if klua.api.is_forbidden(err) then klua.log.error('grant update on configmaps') end
api.is_forbidden = reason_is('Forbidden', 403)
--- True when err says the object is invalid (422 Invalid).
-- @param err an error from a klua.api call (anything else is false)
-- @return true or false
-- @usage
-- if klua.api.is_invalid(err) then klua.log.error('%s', err.message) end
api.is_invalid = reason_is('Invalid', 422)

return api
