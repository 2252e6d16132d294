--- `klua watch`: ad hoc event filtering from the shell.
--
--   klua watch RESOURCE [NAME] [-n NS | -A] [-l SEL] [--field-selector SEL]
--              [-e LUA] [-o line|json|name] [--watch-only]
--
-- Prints one line per event. `-e` is a Lua expression, or a chunk with
-- `return`, compiled once and evaluated per event with `type` ("ADDED",
-- "MODIFIED", "DELETED"), `obj` and `old` (on MODIFIED) in scope; nil or
-- false drops the event, true prints the default line, a string is printed
-- as it is and a table as JSON.
--
-- Exit status 2 for a usage error found before any request; 1, with the
-- server's words, for a resource it does not serve or a first LIST it
-- refuses with 400, 403 or 404 (a field selector it does not know, a
-- resource these credentials may not list). Later failures are retried,
-- as informers do.
local selector = require 'klua.selector'

local M = {}

local USAGE = 'usage: klua watch RESOURCE [NAME] [-n NS | -A] [-l SEL] [--field-selector SEL] ' ..
  '[-e LUA] [-o line|json|name] [--watch-only]'

local VALUED = {
  ['-n'] = 'namespace', ['--namespace'] = 'namespace',
  ['-l'] = 'selector', ['--selector'] = 'selector',
  ['--field-selector'] = 'field_selector',
  ['-e'] = 'expr', ['--expr'] = 'expr',
  ['-o'] = 'output', ['--output'] = 'output',
}
local SWITCHES = {
  ['-A'] = 'all_namespaces', ['--all-namespaces'] = 'all_namespaces',
  ['--watch-only'] = 'watch_only',
}

--- Parses the arguments after `watch`. Returns options or nil and a message.
function M.parse(args)
  local o, positional, i = { output = 'line' }, {}, 1
  while i <= #args do
    local a = args[i]
    local flag, value = a:match('^(%-%-?[%w-]+)=(.*)$')
    flag = flag or a
    if VALUED[flag] then
      if not value then
        i = i + 1
        value = args[i]
        if value == nil then return nil, ('flag %s needs a value'):format(flag) end
      end
      o[VALUED[flag]] = value
    elseif SWITCHES[a] then
      o[SWITCHES[a]] = true
    elseif a:match('^%-n.') then
      o.namespace = a:sub(3)
    elseif a:match('^%-') and a ~= '-' then
      return nil, ('unknown flag %s'):format(a)
    else
      positional[#positional + 1] = a
    end
    i = i + 1
  end
  if #positional == 0 then return nil, 'a resource is needed, such as "pods"' end
  if #positional > 2 then return nil, ('unexpected argument "%s"'):format(positional[3]) end
  o.resource, o.name = positional[1], positional[2]
  if o.all_namespaces and o.namespace then return nil, '-n and -A cannot be combined' end
  if not ({ line = true, json = true, name = true })[o.output] then
    return nil, ('-o must be line, json or name, not "%s"'):format(o.output)
  end
  local valid, bad = selector.parse(o.selector)
  if not valid then return nil, bad end
  return o
end

--- Compiles the -e expression once. Returns a function(type, obj, old).
function M.compile(expr)
  local env = setmetatable({}, { __index = _G })
  local chunk, err = load('return ' .. expr, '=(-e)', 't', env)
  if not chunk then chunk, err = load(expr, '=(-e)', 't', env) end
  if not chunk then return nil, err end
  return function(type_, obj, old)
    env.type, env.obj, env.old = type_, obj, old
    return chunk()
  end
end

local function key_of(obj)
  local md = obj.metadata or {}
  if md.namespace and md.namespace ~= '' then return md.namespace .. '/' .. (md.name or '?') end
  return md.name or '?'
end

local function default_line(output, r, type_, obj)
  if output == 'name' then
    return r.name_prefix .. ((obj.metadata or {}).name or '?')
  elseif output == 'json' then
    return klua.json.encode({ type = type_, object = obj })
  end
  local status = obj.status
  local readable = type(status) == 'table' or (type(status) == 'userdata' and status ~= klua.null)
  local phase = readable and status.phase or nil
  if type(phase) ~= 'string' then phase = nil end
  return ('%-9s %s%s'):format(type_, key_of(obj), phase and ('  ' .. phase) or '')
end

local function fail(msg)
  io.stderr:write('klua watch: ', msg, '\n', USAGE, '\n')
  klua.stop(2)
end

--- Entry point: `klua watch ARGS...`.
function M.main(...)
  local o, err = M.parse({ ... })
  if not o then return fail(err) end
  local filter
  if o.expr then
    filter, err = M.compile(o.expr)
    if not filter then return fail('-e: ' .. err) end
  end
  local r
  r, err = klua.resolve(o.resource)
  if not r then
    io.stderr:write('klua watch: ', err, '\n')
    return klua.stop(1)
  end
  r.name_prefix = r.kind:lower() .. (r.group ~= '' and ('.' .. r.group) or '') .. '/'
  local ns
  if r.namespaced and not o.all_namespaces then ns = o.namespace or klua.namespace() end
  local fs = o.field_selector
  if o.name then
    local by_name = 'metadata.name=' .. o.name
    fs = fs and (fs .. ',' .. by_name) or by_name
  end
  -- A selector the server refuses, a resource it does not serve or may not
  -- be listed by these credentials: retrying will not help, so say so and
  -- exit, as kubectl does. (klua run retries these: permissions may come.)
  local _, lerr = klua.api.list(r, { namespace = ns, label_selector = o.selector,
    field_selector = fs, limit = 1, one_page = true })
  if lerr and (lerr.code == 400 or lerr.code == 403 or lerr.code == 404) then
    io.stderr:write('klua watch: ', lerr.message or tostring(lerr), '\n')
    return klua.stop(1)
  end
  -- Lines are flushed every 50 ms rather than one write per line: a burst
  -- of events costs one write per buffer, and a person at a terminal or a
  -- pipe still sees each line at once.
  io.stdout:setvbuf('full', 65536)
  klua.every(0.05, function() io.stdout:flush() end)

  local function emit(type_, obj, old)
    local out = true
    if filter then out = filter(type_, obj, old) end
    if not out then return end
    if out == true then
      out = default_line(o.output, r, type_, obj)
    elseif type(out) == 'table' or type(out) == 'userdata' then
      out = klua.json.encode(out)
    else
      out = tostring(out)
    end
    if not io.stdout:write(out, '\n') then klua.stop(0) end
  end

  local inf = klua.informer {
    resource = o.resource,
    namespace = ns,
    label_selector = o.selector,
    field_selector = fs,
  }
  inf:on('add', function(obj, initial)
    if not (initial and o.watch_only) then emit('ADDED', obj) end
  end)
  inf:on('update', function(old, new) emit('MODIFIED', new, old) end)
  inf:on('delete', function(obj) emit('DELETED', obj) end)
end

return M
