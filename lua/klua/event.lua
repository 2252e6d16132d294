--- Events: core/v1 Event objects about an object, as `kubectl describe`
-- shows them. event_for builds the table; klua.record_event
-- (lua/klua/recorder.lua) correlates it with those recorded before and
-- writes it.
local M = {}

local clock = os.time

--- Sets the clock that dates events: a function returning seconds since
-- the Unix epoch (os.time by default).
function M.set_clock(fn) clock = fn end

local util = require('klua.internal.objutil')
local field = util.field
local non_empty = util.non_empty
local refusal = util.refusal

local TYPES = { Normal = true, Warning = true }

local function check_opts(o)
  if type(o) ~= 'table' then
    error("event_for: pass the event as a table {type =, reason =, message =, component =}", 3)
  end
  if o.type ~= nil and not TYPES[o.type] then
    error(("event_for: type must be 'Normal' or 'Warning' (got %s)"):format(tostring(o.type)), 3)
  end
  util.check_reason_and_message('event_for', o, 'Created')
end

local function involved_object(obj, o)
  local md = field(obj, 'metadata')
  local name, kind = field(md, 'name'), o.kind or field(obj, 'kind')
  if not non_empty(name) then
    return nil, refusal('MissingName', '%s', 'event_for: the object needs metadata.name')
  end
  if not non_empty(kind) then
    return nil, refusal('MissingKind', '%s', "event_for: the object has no kind (objects from a list lack it);"
      .. " pass it: event_for(obj, {kind = 'Pod', api_version = 'v1', ...})")
  end
  local ns = field(md, 'namespace')
  return {
    apiVersion = o.api_version or field(obj, 'apiVersion'),
    kind = kind,
    name = name,
    namespace = non_empty(ns) and ns or nil,
    uid = field(md, 'uid'),
    resourceVersion = field(md, 'resourceVersion'),
  }
end

--- A core/v1 Event about obj, ready to create:
-- opts = {type = 'Normal' | 'Warning' (default 'Normal'), reason = 'CamelCase',
--   message = '...', component = 'my-controller' (default 'klua'),
--   action =, instance = (reportingInstance), kind =, api_version =}.
-- kind and api_version are only needed when obj lacks them, as list items do.
-- The event lives in obj's namespace ('default' for cluster-scoped objects)
-- and is named by the server from generateName "<obj name>.".
-- obj may be a view. Returns the Event, or nil and an error {reason,
-- message} when obj lacks metadata.name ('MissingName') or a kind
-- ('MissingKind'). Raises when opts is not valid (a mistake in the call).
-- @param obj a view or a table
-- @param opts as above
-- @return the Event, or nil and err {reason, message}
-- @raise when opts is not valid
-- @usage
-- local ev = assert(klua.helpers.event_for(podset, { reason = 'Scaled', message = 'now 3 pods' }))
-- klua.api.create('events', ev)
function M.event_for(obj, opts)
  check_opts(opts)
  local ref, err = involved_object(obj, opts)
  if not ref then return nil, err end
  local now = os.date('!%Y-%m-%dT%H:%M:%SZ', math.floor(clock()))
  local component = opts.component or 'klua'
  return {
    apiVersion = 'v1',
    kind = 'Event',
    metadata = { generateName = ref.name .. '.', namespace = ref.namespace or 'default' },
    involvedObject = ref,
    type = opts.type or 'Normal',
    reason = opts.reason,
    message = opts.message or '',
    action = opts.action,
    firstTimestamp = now,
    lastTimestamp = now,
    count = 1,
    source = { component = component },
    reportingComponent = component,
    reportingInstance = opts.instance,
  }
end

return M
