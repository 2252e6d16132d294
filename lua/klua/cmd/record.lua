--- `klua record`: writes what klua's informers see, for `klua replay`.
--
--   klua record TYPE[,TYPE...] [-n NS | -A] [-l SEL] --output FILE
--                [--include-secret-data]
--
-- One informer per type; every notification its handlers get (the initial
-- list, then each change, a relist's as the informer delivers them) becomes
-- one NDJSON line of FILE with its arrival time. docs/record.md describes
-- the file field by field; scripts/sandbox/replay.py plays it back. The
-- help text is in src/cli/cli.c's command table, which prints it for
-- `klua record --help`.
local flags = require('klua.cmd.flags')

local M = {}

local FORMAT_VERSION = 1
local REDACTED_VALUE = 'PHJlZGFjdGVkPg==' -- base64 of "<redacted>"
local REDACTED_TEXT = '<redacted>'
-- kubectl apply keeps the whole manifest, data included, in this annotation.
local LAST_APPLIED = 'kubectl.kubernetes.io/last-applied-configuration'

local FLAGS = {
  ['-n'] = 'namespace', ['--namespace'] = 'namespace',
  ['-A'] = 'all_namespaces', ['--all-namespaces'] = 'all_namespaces',
  ['-l'] = 'selector', ['--selector'] = 'selector',
  ['-o'] = 'output', ['--output'] = 'output',
  ['--include-secret-data'] = 'include_secret_data',
}
local SWITCHES = { all_namespaces = true, include_secret_data = true }

--- Parses the words after `record`: returns the options ({types = {...},
-- namespace, all_namespaces, selector, output, include_secret_data}), or
-- nil and a message.
function M.parse(args)
  local o, positional = flags.parse(args, FLAGS, SWITCHES)
  if not o then return nil, positional end
  local types, err = flags.one(positional, 'a resource is needed, such as "pods" or "configmaps,secrets"')
  if not types then return nil, err end
  if not o.output or o.output == '' then return nil, '--output FILE is needed: the file to write' end
  if o.all_namespaces and o.namespace then return nil, '-n and -A cannot be combined' end
  o.types = {}
  for t in (types .. ','):gmatch('([^,]*),') do
    if t == '' then return nil, ('"%s" names an empty resource type'):format(types) end
    o.types[#o.types + 1] = t
  end
  return o
end

-- A Secret as it may be written without --include-secret-data: the keys of
-- data and stringData stay, their values do not, nor the manifest kubectl
-- apply keeps in an annotation.
local function redacted(secret)
  local s = klua.copy(secret)
  for _, field in ipairs({ 'data', 'stringData' }) do
    if type(s[field]) == 'table' then
      for k in pairs(s[field]) do s[field][k] = field == 'data' and REDACTED_VALUE or REDACTED_TEXT end
    end
  end
  local annotations = s.metadata and s.metadata.annotations
  if type(annotations) == 'table' and annotations[LAST_APPLIED] then annotations[LAST_APPLIED] = REDACTED_TEXT end
  return s
end

local function fail(msg, code)
  io.stderr:write('klua record: ', msg, '\n')
  if code == 2 then io.stderr:write("Run 'klua record --help' for usage.\n") end
  klua.stop(code)
end

--- Entry point: `klua record ARGS...`.
function M.main(...)
  local o, err = M.parse({ ... })
  if not o then return fail(err, 2) end
  local core = require('klua.core')
  local targets = {}
  for _, t in ipairs(o.types) do
    local r, rerr = klua.resolve(t)
    if not r then return fail(rerr, 1) end
    local ns = nil
    if r.namespaced and not o.all_namespaces then ns = o.namespace or klua.namespace() end
    targets[#targets + 1] = { name = t, r = r, ns = ns, secret = r.group == '' and r.kind == 'Secret' }
  end
  local file, ferr = io.open(o.output, 'w')
  if not file then return fail('cannot write ' .. tostring(ferr), 1) end
  local json = klua.json
  local resources = {}
  for i, t in ipairs(targets) do
    resources[i] = { group = t.r.group, version = t.r.version, resource = t.r.resource, kind = t.r.kind,
      namespace = t.ns or json.null, labelSelector = o.selector or json.null }
  end
  -- Written field by field, so that the header reads the same in every file.
  file:write(('{"kind":"KluaRecording","version":%d,"started":"%s","secretData":"%s","resources":%s}\n'):format(
    FORMAT_VERSION, os.date('!%Y-%m-%dT%H:%M:%SZ', math.floor(core.wall_time())),
    o.include_secret_data and 'included' or 'redacted', json.encode(json.array(resources))))
  file:flush()
  local start = core.now()
  local function write(t, etype, obj, extra)
    if t.secret and not o.include_secret_data then obj = redacted(obj) end
    file:write(('{"t":%.3f,"type":"%s","resource":"%s"%s,"object":%s}\n')
      :format(core.now() - start, etype, t.r.resource, extra or '', json.encode(obj)))
    file:flush()
  end
  local listed = 0
  for _, t in ipairs(targets) do
    local inf = klua.informer { resource = t.name, namespace = t.ns, label_selector = o.selector }
    inf:on('add', function(obj, initial)
      if initial then listed = listed + 1 end
      write(t, 'ADDED', obj, initial and ',"initial":true' or nil)
    end)
    inf:on('update', function(_, new) write(t, 'MODIFIED', new) end)
    inf:on('delete', function(obj, unknown) write(t, 'DELETED', obj, unknown and ',"finalStateUnknown":true' or nil) end)
  end
  klua.on_synced(function()
    io.stderr:write(('klua record: %d objects listed into %s; recording their changes until interrupted\n')
      :format(listed, o.output))
  end)
end

return M
