--- The webhooks a script declares (klua.webhook) and how klua answers
-- the API server's calls to them: AdmissionReview v1 for admission
-- webhooks, ConversionReview v1 for a CustomResourceDefinition's
-- conversion webhook (docs/webhooks.md cites the API server's code each
-- rule follows). src/lua/lua_webhook.c runs `serve` in a task of its own
-- for each call, and `expired` or `failed` for a call its task could not
-- answer; every answer goes through `answer`, which counts it in
-- controller-runtime's webhook metrics.
local core = require('klua.core')
local jsonpatch = require('klua.internal.jsonpatch')
local metrics = require('klua.metrics')
local util = require('klua.internal.objutil')

local json = core.json
local M = {}

local hooks = {}    -- path -> declaration
local declared = {} -- declarations in order
local calls = {}    -- call id -> { hook =, started = }
local collecting = false

local ADMISSION = 'admission.k8s.io/v1'
local CONVERSION = 'apiextensions.k8s.io/v1'
local OPERATIONS = { CREATE = true, UPDATE = true, DELETE = true, CONNECT = true, ['*'] = true }

--- The declarations so far, in order (for klua webhook-config).
function M.declared() return declared end

--- Collects declarations without serving them: `klua webhook-config`
-- loads a script only to print its webhooks' configuration.
function M.collect_only() collecting = true end

local function fail(what, fmt, ...)
  error(('%s: ' .. fmt):format(what, ...), 4)
end

local function one_of(what, name, v, allowed, default)
  if v == nil then return default end
  for _, a in ipairs(allowed) do
    if v == a then return v end
  end
  fail(what, '%s is %q: give %s', name, tostring(v), table.concat(allowed, ' or '))
end

-- 'v1/pods', 'apps/v1/deployments', 'apps/v1/deployments/scale', '*/*/*'
-- -> a rule's apiGroups, apiVersions and resources.
local function parse_resource(what, s)
  if type(s) ~= 'string' then fail(what, 'resources holds %s: give strings such as "v1/pods"', type(s)) end
  local parts = {}
  for p in (s .. '/'):gmatch('([^/]*)/') do parts[#parts + 1] = p end
  for _, p in ipairs(parts) do
    if p == '' then fail(what, 'resource %q has an empty part: write GROUP/VERSION/RESOURCE, or v1/RESOURCE for '
      .. 'the core group', s) end
  end
  -- A version starts with "v" and a digit, or is "*": then the group is core.
  if #parts >= 2 and (parts[1]:match('^v%d') or (parts[1] == '*' and #parts == 2)) then
    table.insert(parts, 1, '')
  end
  if #parts < 3 or #parts > 4 then
    fail(what, 'resource %q: write GROUP/VERSION/RESOURCE ("apps/v1/deployments"), v1/RESOURCE for the core '
      .. 'group ("v1/pods"), a subresource after it ("v1/pods/status"), or "*/*/*"', s)
  end
  return { group = parts[1], version = parts[2], resource = parts[4] and (parts[3] .. '/' .. parts[4]) or parts[3] }
end

local function list_of_strings(what, name, t)
  if type(t) ~= 'table' then fail(what, '%s must be a list of strings', name) end
  for _, v in ipairs(t) do
    if type(v) ~= 'string' then fail(what, '%s must be a list of strings', name) end
  end
  return t
end

-- A webhook's name must be a fully qualified domain name of at least
-- three segments (admissionregistration's validation).
local function default_name(path)
  local base = path:sub(2):lower():gsub('[^a-z0-9-]+', '-'):gsub('^-+', ''):gsub('-+$', '')
  if base == '' then base = 'root' end
  return base .. '.webhook.klua.dev'
end

--- Declares a webhook of kind 'validating', 'mutating' or 'conversion'
-- (klua.webhook's functions; the options are theirs).
function M.declare(kind, opts)
  local what = 'klua.webhook.' .. kind
  if type(opts) ~= 'table' then fail(what, 'give a table of options: {path =, ...}') end
  local path = opts.path
  if type(path) ~= 'string' or path:sub(1, 1) ~= '/' or path:find('[%s?#]') then
    fail(what, 'path must be the URL path the API server calls, starting with "/", e.g. "/validate-pods"')
  end
  if hooks[path] then fail(what, 'path %s is declared twice: each webhook needs a path of its own', path) end
  local h = { kind = kind, path = path }
  if kind == 'conversion' then
    if type(opts.convert) ~= 'function' then
      fail(what, 'convert must be a function(obj, desired_api_version) returning the converted object')
    end
    h.convert = opts.convert
    if opts.crd ~= nil and (type(opts.crd) ~= 'string' or not opts.crd:find('%.')) then
      fail(what, 'crd must be the CustomResourceDefinition\'s name, PLURAL.GROUP, e.g. "widgets.example.com"')
    end
    h.crd = opts.crd
  else
    if type(opts.handler) ~= 'function' then fail(what, 'handler must be a function(req)') end
    h.handler = opts.handler
    if type(opts.resources) ~= 'table' or #opts.resources == 0 then
      fail(what, 'resources must list what the webhook is called for, e.g. { "v1/pods", "apps/v1/deployments" }')
    end
    h.rules = {}
    for i, r in ipairs(opts.resources) do h.rules[i] = parse_resource(what, r) end
    h.operations = list_of_strings(what, 'operations', opts.operations or { 'CREATE', 'UPDATE' })
    for _, op in ipairs(h.operations) do
      if not OPERATIONS[op] then fail(what, 'operation %q is not one of CREATE, UPDATE, DELETE, CONNECT or *', op) end
    end
    h.name = opts.name or default_name(path)
    if type(h.name) ~= 'string' or select(2, h.name:gsub('%.', '')) < 2 then
      fail(what, 'name %q must be a fully qualified name of at least three segments, e.g. "pods.example.com"',
        tostring(h.name))
    end
    for _, other in ipairs(declared) do
      if other.kind == kind and other.name == h.name then
        fail(what, 'name %q is taken by the webhook at %s: the names of one configuration\'s webhooks must differ',
          h.name, other.path)
      end
    end
    h.failure_policy = one_of(what, 'failure_policy', opts.failure_policy, { 'Fail', 'Ignore' }, 'Fail')
    h.side_effects = one_of(what, 'side_effects', opts.side_effects, { 'None', 'NoneOnDryRun' }, 'None')
    h.scope = one_of(what, 'scope', opts.scope, { '*', 'Cluster', 'Namespaced' }, '*')
    h.timeout_seconds = opts.timeout_seconds or 10
    if math.type(h.timeout_seconds) ~= 'integer' or h.timeout_seconds < 1 or h.timeout_seconds > 30 then
      fail(what, 'timeout_seconds must be a whole number of seconds from 1 to 30, as the API server allows')
    end
    h.namespace_selector, h.object_selector = opts.namespace_selector, opts.object_selector
    if kind == 'mutating' then
      h.reinvocation_policy = one_of(what, 'reinvocation_policy', opts.reinvocation_policy, { 'Never', 'IfNeeded' },
        'Never')
    end
  end
  if not collecting and not core.webhook_serving() then
    fail(what, 'klua serves webhooks with --webhook-bind-address (e.g. :9443) and --webhook-cert-dir: add them to '
      .. 'klua run (docs/webhooks.md)')
  end
  hooks[path] = h
  declared[#declared + 1] = h
  return h
end

-- ---- metrics: controller-runtime's (pkg/webhook/internal/metrics) ----------

local stats = {} -- path -> { in_flight =, codes = {code -> n}, latency = {code -> {count, sum, counts}} }
local BUCKETS = metrics.default_buckets

local function stats_of(path)
  local s = stats[path]
  if not s then
    s = { in_flight = 0, codes = {}, latency = {} }
    stats[path] = s
  end
  return s
end

local function observe(path, code, seconds)
  local s = stats_of(path)
  s.in_flight = s.in_flight - 1
  code = tostring(code)
  s.codes[code] = (s.codes[code] or 0) + 1
  local l = s.latency[code]
  if not l then
    l = { count = 0, sum = 0, counts = {} }
    for i = 1, #BUCKETS do l.counts[i] = 0 end
    s.latency[code] = l
  end
  l.count, l.sum = l.count + 1, l.sum + seconds
  for i, le in ipairs(BUCKETS) do
    if seconds <= le then l.counts[i] = l.counts[i] + 1 end
  end
end

metrics.collector(function(add)
  if #declared == 0 then return end
  local total, latency, flight = {}, {}, {}
  for _, h in ipairs(declared) do
    local s = stats_of(h.path)
    flight[#flight + 1] = { values = { h.path }, value = s.in_flight }
    for _, code in ipairs(util.sorted_keys(s.codes)) do
      total[#total + 1] = { values = { code, h.path }, value = s.codes[code] }
      local l = s.latency[code]
      latency[#latency + 1] = { values = { code, h.path }, counts = l.counts, sum = l.sum, count = l.count }
    end
  end
  -- Labels sorted by name, as client_golang writes them.
  add { kind = 'histogram', name = 'controller_runtime_webhook_latency_seconds',
    help = 'Histogram of the latency of processing admission requests', labels = { 'code', 'webhook' },
    buckets = BUCKETS, samples = latency }
  add { kind = 'counter', name = 'controller_runtime_webhook_requests_total',
    help = 'Total number of admission requests by HTTP status code.', labels = { 'code', 'webhook' },
    samples = total }
  add { kind = 'gauge', name = 'controller_runtime_webhook_requests_in_flight',
    help = 'Current number of admission requests being served.', labels = { 'webhook' }, samples = flight }
end)

-- ---- answering ---------------------------------------------------------------

-- Answers call id once (later answers find it gone): status, and a body
-- that is JSON, or text when `text` is set.
local function answer(id, status, body, text)
  local c = calls[id]
  if not c then return end
  calls[id] = nil
  core.webhook_reply(id, status, body, text and 'text/plain' or nil)
  if c.hook then observe(c.hook.path, status, core.now() - c.started) end
end

-- The body is message on one line: client-go quotes a text answer whole in
-- the error the API server returns, which kubectl prints. logged (the
-- message with its traceback, say) goes to klua's log instead.
local function answer_error(id, status, message, logged)
  local c = calls[id]
  if c and status >= 500 then core.log('error', ('webhook %s: %s'):format(c.path, logged or message)) end
  answer(id, status, 'klua: ' .. message:gsub('%s*\n%s*', ' ') .. '\n', true)
end

--- Answers call id for its task, which ran past its deadline.
function M.expired(id, why)
  local c = calls[id]
  if c then answer_error(id, 500, ('the call to %s was not answered in time: %s'):format(c.path, why)) end
end

--- Answers call id for its task, which ended without answering.
function M.failed(id, why)
  local c = calls[id]
  if c then answer_error(id, 500, ('the call to %s failed: %s'):format(c.path, why)) end
end

local function present(v)
  if v == nil or v == json.null then return nil end
  return v
end

-- The handler's view of an AdmissionRequest (admission/v1's fields).
local function admission_request(r)
  return {
    uid = r.uid, kind = r.kind, resource = r.resource, sub_resource = present(r.subResource),
    request_kind = present(r.requestKind), request_resource = present(r.requestResource),
    request_sub_resource = present(r.requestSubResource),
    name = present(r.name), namespace = present(r.namespace), operation = r.operation,
    user_info = r.userInfo, object = present(r.object), old_object = present(r.oldObject),
    dry_run = r.dryRun == true, options = present(r.options),
  }
end

local function is_warnings(v)
  if type(v) ~= 'table' then return false end
  for _, w in ipairs(v) do
    if type(w) ~= 'string' then return false end
  end
  return true
end

local function admission_review(response)
  return json.encode { apiVersion = ADMISSION, kind = 'AdmissionReview', response = response }
end

-- A denial as controller-runtime's admission.Denied writes it: 403 Forbidden.
local function denied(uid, message, warnings)
  return admission_review { uid = uid, allowed = false, warnings = warnings,
    status = { code = 403, reason = 'Forbidden', message = message } }
end

local function bad(h, fmt, ...)
  error(('the %s webhook %s %s'):format(h.kind, h.path, fmt:format(...)), 0)
end

local function validate(h, r)
  local uid = r.uid
  local ok, second, third = h.handler(admission_request(r))
  local message, warnings = second, third
  if is_warnings(second) then message, warnings = nil, second end
  if warnings ~= nil and not is_warnings(warnings) then bad(h, 'returned warnings that are not a list of strings') end
  if ok == true then return admission_review { uid = uid, allowed = true, warnings = warnings } end
  if ok == false or ok == nil then
    if message ~= nil and type(message) ~= 'string' then bad(h, 'returned a message that is not a string') end
    return denied(uid, message or ('denied by ' .. h.path), warnings)
  end
  bad(h, 'returned %s: return true to allow, or false and a message to deny', type(ok))
end

local function mutate(h, r)
  local uid = r.uid
  local req = admission_request(r)
  local out, second, third = h.handler(req)
  if out == false then
    local message, warnings = second, third
    if message ~= nil and type(message) ~= 'string' then bad(h, 'returned a message that is not a string') end
    if warnings ~= nil and not is_warnings(warnings) then bad(h, 'returned warnings that are not a list of strings') end
    return denied(uid, message or ('denied by ' .. h.path), warnings)
  end
  local warnings = second
  if warnings ~= nil and not is_warnings(warnings) then bad(h, 'returned warnings that are not a list of strings') end
  if out == nil or out == true or rawequal(out, req.object) then
    return admission_review { uid = uid, allowed = true, warnings = warnings }
  end
  if type(out) ~= 'table' and core.type(out) ~= 'object' then
    bad(h, 'returned %s: return the object changed (klua.copy(req.object), modified), nil to leave it as it is, '
      .. 'or false and a message to deny', type(out))
  end
  if not req.object then bad(h, 'returned an object for a %s, which has none to change', req.operation) end
  local from = json.decode(json.encode(req.object))
  local to = json.decode(json.encode(out))
  local ops = jsonpatch.diff(from, to)
  if #ops == 0 then return admission_review { uid = uid, allowed = true, warnings = warnings } end
  return admission_review { uid = uid, allowed = true, warnings = warnings, patchType = 'JSONPatch',
    patch = jsonpatch.base64(json.encode(ops)) }
end

local function object_name(obj)
  local md = obj.metadata
  return md and md.name
end

-- ConversionReview: every object converted, or the request fails with a
-- Failure result (apiextensions-apiserver's webhook converter takes no
-- partial answer).
local function convert(h, r)
  local uid, desired = r.uid, r.desiredAPIVersion
  local function failure(message)
    return json.encode { apiVersion = CONVERSION, kind = 'ConversionReview',
      response = { uid = uid, result = { status = 'Failure', message = message } } }
  end
  if type(desired) ~= 'string' then return failure('the request has no desiredAPIVersion') end
  local converted = setmetatable({}, json.array_mt)
  for i, obj in ipairs(r.objects or {}) do
    local ok, out = xpcall(h.convert, debug.traceback, obj, desired)
    if not ok then
      core.log('error', ('webhook %s: convert failed: %s'):format(h.path, tostring(out)))
      return failure(('converting %s %s to %s failed: %s'):format(tostring(obj.kind),
        tostring(object_name(obj)), desired, tostring(out):match('^[^\n]*')))
    end
    if core.type(out) ~= 'object' then
      return failure(('convert returned %s for %s: return the object converted to %s'):format(type(out),
        tostring(object_name(obj)), desired))
    end
    if out.apiVersion ~= desired then
      return failure(('convert returned apiVersion %s for %s, where %s was asked: set obj.apiVersion'):format(
        tostring(out.apiVersion), tostring(object_name(obj)), desired))
    end
    converted[i] = out
  end
  return json.encode { apiVersion = CONVERSION, kind = 'ConversionReview',
    response = { uid = uid, convertedObjects = converted, result = { status = 'Success' } } }
end

local serve_kind = { validating = validate, mutating = mutate, conversion = convert }
local review_of = { validating = { ADMISSION, 'AdmissionReview' }, mutating = { ADMISSION, 'AdmissionReview' },
  conversion = { CONVERSION, 'ConversionReview' } }

-- The request of the review, or nil and why not.
local function request_of(h, review)
  local want = review_of[h.kind]
  local ok, r, why = pcall(function()
    if review.apiVersion ~= want[1] or review.kind ~= want[2] then
      return nil, ('the body is not a %s %s (klua answers %s only: list only v1 in the webhook\'s '
        .. '%s)'):format(want[1], want[2], want[1], h.kind == 'conversion' and 'conversionReviewVersions'
        or 'admissionReviewVersions')
    end
    local req = review.request
    if core.type(req) ~= 'object' or type(req.uid) ~= 'string' then
      return nil, ('the %s has no request with a uid'):format(want[2])
    end
    return req
  end)
  if not ok then return nil, 'the body is not JSON: ' .. (tostring(r):match('not valid JSON (.*)$') or tostring(r)) end
  return r, why
end

--- Answers one call (a task of its own, src/lua/lua_webhook.c): id is the
-- call's, path its URL path, review a view of its body, deadline the
-- seconds it has.
function M.serve(id, path, review, deadline)
  local h = hooks[path]
  calls[id] = { hook = h, path = path, started = core.now() }
  if not h then return answer(id, 404, ('klua: no webhook is declared at %s\n'):format(path), true) end
  stats_of(path).in_flight = stats_of(path).in_flight + 1
  local r, why = request_of(h, review)
  if not r then return answer_error(id, 400, why) end
  core.set_deadline(deadline, ('the webhook %s ran past its deadline (%g s, below the API server\'s timeout)')
    :format(path, deadline))
  local trace
  local ok, body = xpcall(serve_kind[h.kind], function(e)
    trace = debug.traceback(tostring(e), 2)
    return e
  end, h, r)
  if not ok then return answer_error(id, 500, ('the call to %s failed: %s'):format(path, tostring(body)), trace) end
  answer(id, 200, body)
end

return M
