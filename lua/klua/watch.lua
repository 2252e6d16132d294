--- `klua watch`: ad hoc event filtering from the shell.
--
--   klua watch RESOURCE [NAME] [-n NS | -A] [-l SEL] [--field-selector SEL]
--              [-e LUA] [-o line|json|name] [--watch-only]
--
-- Prints one line per event; M.help() says what -e sees and does.
--
-- This module owns watch's flags: FLAGS below drives the parser, the usage
-- line and `klua watch --help`, whose lines have the layout of klua's global
-- flags (src/cli/cli.c), which klua prints after them.
--
-- Exit status 2 for a usage error found before any request; 1, with the
-- server's words, for a resource it does not serve or a first LIST it
-- refuses with 400, 403 or 404 (a field selector it does not know, a
-- resource these credentials may not list); 141 when stdout's reader goes
-- away. Later failures are retried, as informers do.
local selector = require 'klua.selector'

local M = {}

-- Every flag of `klua watch`, with the option it sets (a flag with an arg
-- takes a value, the others are switches) and its one line of help.
local FLAGS = {
  { short = '-n', long = '--namespace', arg = 'NS', key = 'namespace',
    help = "watch this namespace (default: the kubeconfig context's)" },
  { short = '-A', long = '--all-namespaces', key = 'all_namespaces', help = 'watch every namespace' },
  { short = '-l', long = '--selector', arg = 'SEL', key = 'selector',
    help = 'only objects whose labels match, filtered by the server' },
  { long = '--field-selector', arg = 'SEL', key = 'field_selector',
    help = 'only objects whose fields match, filtered by the server' },
  { short = '-e', long = '--expr', arg = 'LUA', key = 'expr',
    help = 'print what this Lua expression or chunk returns per event' },
  { short = '-o', long = '--output', arg = 'line|json|name', key = 'output', help = 'format of a line (default line)' },
  { long = '--watch-only', key = 'watch_only', help = 'print only changes, not the objects that exist already' },
  { short = '-h', long = '--help', key = 'help', help = 'print this help' },
}

local BY_NAME, NAMES = {}, {}
for _, f in ipairs(FLAGS) do
  BY_NAME[f.long] = f
  NAMES[#NAMES + 1] = f.long
  if f.short then
    BY_NAME[f.short] = f
    NAMES[#NAMES + 1] = f.short
  end
end

-- The usage line, made from FLAGS: -n and -A exclude each other.
local function usage()
  local words = { 'usage: klua [flags] watch RESOURCE [NAME]' }
  for _, f in ipairs(FLAGS) do
    local name = f.short or f.long
    if f.key == 'namespace' then
      words[#words + 1] = '[' .. name .. ' ' .. f.arg .. ' | -A]'
    elseif f.key ~= 'all_namespaces' and f.key ~= 'help' then
      words[#words + 1] = '[' .. name .. (f.arg and (' ' .. f.arg) or '') .. ']'
    end
  end
  return table.concat(words, ' ')
end

--- The help of `klua watch`: its usage, what it prints and its flags, one
-- line each ("  -n, --namespace NS" or "      --field-selector SEL", padded
-- to 40 columns, then the help), as klua's global flags are printed.
function M.help()
  local out = { usage(), '', [[
Prints one line per event, like kubectl get -w: ADDED for each object of the
initial list, then ADDED, MODIFIED and DELETED as they happen. RESOURCE is
named as kubectl names it (pods, po, deployments.apps, apps/v1/deployments, a
CRD's plural or short name); NAME watches that object alone. When stdout's
reader goes away (klua watch pods | head -1), klua watch ends with exit
status 141, as kubectl get -w does when SIGPIPE ends it.

-e LUA is a Lua expression, or a chunk with return, run for every event with
these in scope:
  event   "ADDED", "MODIFIED" or "DELETED"
  obj     the object (a read-only view); old: the previous one on MODIFIED
  get     klua.get: get(obj, 'metadata', 'labels', 'app') is nil, not an
          error, when a step is missing
and Lua's standard functions and klua, as in scripts (type(obj) is
"userdata" for a view; klua.type(obj) is "object"). nil or false drops the
event, true prints the default line, a string is printed as it is, a table
as JSON. An expression that raises drops the event; each distinct error is
reported once when it first happens, then counted ("-e error (x17): ...")
every 10 s and at exit.

Example: klua watch pods -A -e 'get(obj, "metadata", "labels", "app") == "web"']], '', 'Flags:' }
  for _, f in ipairs(FLAGS) do
    local left = (f.short and (f.short .. ', ') or '    ') .. f.long .. (f.arg and (' ' .. f.arg) or '')
    out[#out + 1] = ('  %-38s %s'):format(left, f.help)
  end
  return table.concat(out, '\n') .. '\n'
end

-- A switch is on alone, or as its value says (--watch-only=false), as pflag
-- reads it.
local SWITCH_VALUES = {
  ['1'] = true, t = true, T = true, ['true'] = true, TRUE = true, True = true,
  ['0'] = false, f = false, F = false, ['false'] = false, FALSE = false, False = false,
}

-- The flag a word names and the value written in it, as pflag reads them:
-- "--output=json", "-o=json" and "-ojson" carry one; "-o" does not.
local function split_flag(a)
  if BY_NAME[a] then return a, nil end
  local short = a:match('^%-[^-]')
  local f = short and BY_NAME[short]
  if f and #a > 2 then
    local rest = a:sub(3)
    if rest:sub(1, 1) == '=' then return short, rest:sub(2) end
    if f.arg then return short, rest end
  end
  local name, value = a:match('^(%-%-[^=]+)=(.*)$')
  if name then return name, value end
  return a, nil
end

--- Parses the arguments after `watch`. Returns the options (`{help = true}`
-- as soon as -h or --help comes), or nil, a message and, for an unknown
-- flag, the nearest known one when `suggest(word, names)` is given (klua
-- passes one that also knows its global flags).
function M.parse(args, suggest)
  local o, positional, i = { output = 'line' }, {}, 1
  while i <= #args do
    local a = args[i]
    local name, value = split_flag(a)
    local f = BY_NAME[name]
    if f and f.arg then
      if not value then
        i = i + 1
        value = args[i]
        if value == nil then return nil, ('flag %s needs a value'):format(name) end
      end
      o[f.key] = value
    elseif f then
      local on = true
      if value then on = SWITCH_VALUES[value] end
      if on == nil then return nil, ('%s is a switch: true or false, not "%s"'):format(name, value) end
      if f.key == 'help' and on then return { help = true } end
      o[f.key] = on or nil
    elseif a:match('^%-') and a ~= '-' then
      return nil, ('unknown flag: %s'):format(name), suggest and suggest(name, NAMES) or nil
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

-- src with its comments and string literals each replaced by "", so that
-- what remains is code only.
local function code_of(src)
  local out, i, n = {}, 1, #src
  while i <= n do
    local c = src:sub(i, i)
    local long = src:match('^%-%-%[(=*)%[', i) or (c == '[' and src:match('^%[(=*)%[', i))
    if long then
      local _, e = src:find(']' .. long .. ']', i, true)
      out[#out + 1] = '""'
      i = (e or n) + 1
    elseif src:find('^%-%-', i) then
      i = src:find('\n', i, true) or n + 1
    elseif c == '"' or c == "'" then
      local j = i + 1
      while j <= n and src:sub(j, j) ~= c do j = j + (src:sub(j, j) == '\\' and 2 or 1) end
      out[#out + 1] = '""'
      i = j + 1
    else
      out[#out + 1] = c
      i = i + 1
    end
  end
  return table.concat(out)
end

-- Whether the -e code uses the name `type` other than as a call, as
-- expressions written when it held the event type do (type == "ADDED"):
-- compared with a string, the function would drop every event silently.
local function uses_type_as_value(src)
  local code = code_of(src)
  for pos, after in code:gmatch('()%f[%w_]type%f[^%w_]%s*(.?)') do
    local before = code:sub(1, pos - 1)
    local field = before:match('[^.]%.%s*$') or before:match(':%s*$') or before == '.'
    local declared = before:match('%f[%w_]local%s+$') or before:match('%f[%w_]function%s+$')
    if not field and not declared and not (after ~= '' and ('("\'{['):find(after, 1, true)) then return true end
  end
  return false
end

--- Compiles the -e expression once. Returns a function(event, obj, old),
-- or nil and a message.
function M.compile(expr)
  if uses_type_as_value(expr) then
    return nil, '`type` is Lua\'s type() here; the event type is `event`: write event == "ADDED"'
  end
  local env = setmetatable({ get = klua.get }, { __index = _G })
  local chunk, err = load('return ' .. expr, '=(-e)', 't', env)
  if not chunk then chunk, err = load(expr, '=(-e)', 't', env) end
  if not chunk then return nil, err end
  return function(event, obj, old)
    env.event, env.obj, env.old = event, obj, old
    return chunk()
  end
end

local function text_at(obj, ...)
  local v = klua.get(obj, ...)
  return type(v) == 'string' and v or nil
end

local function key_of(obj)
  local ns, name = text_at(obj, 'metadata', 'namespace'), text_at(obj, 'metadata', 'name') or '?'
  if ns and ns ~= '' then return ns .. '/' .. name end
  return name
end

local function default_line(output, r, event, obj)
  if output == 'name' then
    return r.name_prefix .. (text_at(obj, 'metadata', 'name') or '?')
  elseif output == 'json' then
    return klua.json.encode({ type = event, object = obj })
  end
  local phase = text_at(obj, 'status', 'phase')
  return ('%-9s %s%s'):format(event, key_of(obj), phase and ('  ' .. phase) or '')
end

-- The errors of the -e code, each reported when it first happens and then
-- counted, so that a filter failing on most objects (a label they lack)
-- writes a few lines, not one traceback per event.
local Failures = {}
Failures.__index = Failures

local function new_failures()
  local f = setmetatable({ by_message = {}, order = {} }, Failures)
  -- The summary at exit: the finalizer runs when the Lua state is closed.
  f.at_exit = setmetatable({}, { __gc = function() f:report() end })
  return f
end

function Failures:add(message, event, obj)
  local e = self.by_message[message]
  if e then
    e.count = e.count + 1
    return
  end
  self.by_message[message] = { count = 1, reported = 1 }
  self.order[#self.order + 1] = message
  io.stderr:write(('klua watch: -e failed on %s %s, which is not printed: %s '
    .. '(further events failing the same way are counted)\n'):format(event, key_of(obj), message))
end

--- Writes "-e error (xN): message" for each error that happened again since
-- it was last reported.
function Failures:report()
  for _, message in ipairs(self.order) do
    local e = self.by_message[message]
    if e.count > e.reported then
      io.stderr:write(('klua watch: -e error (x%d): %s\n'):format(e.count, message))
      e.reported = e.count
    end
  end
end

local function fail(msg)
  io.stderr:write('klua watch: ', msg, "\nRun 'klua watch --help' for usage.\n")
  klua.stop(2)
end

-- errno of a write to a pipe that nobody reads any more (Linux).
local EPIPE = 32

-- Lines are flushed every 50 ms rather than one write per line: a burst of
-- events costs one write per buffer, and a person at a terminal or a pipe
-- still sees each line at once. When stdout's reader goes away (`klua watch
-- pods | head -1`), klua watch ends with status 141 and says nothing, as
-- kubectl get -w, which SIGPIPE kills at its next write (the shell shows
-- 128 + 13). klua notices at the next flush of a pending line, and, with no
-- line pending, from stdout itself: each tick polls it, and a pipe or socket
-- whose reader has closed reports POLLERR or POLLHUP. Any other failed write
-- (a full disk) is reported, with status 1. Returns write(line).
local function output(core)
  local failed = false
  local function fail_write(err, code)
    if failed then return end
    failed = true
    if code ~= EPIPE then io.stderr:write('klua watch: cannot write to stdout: ', err, '\n') end
    klua.stop(code == EPIPE and 141 or 1)
  end
  io.stdout:setvbuf('full', 65536)
  local timer
  timer = klua.every(0.05, function()
    local ok, err, code = io.stdout:flush()
    if not ok then fail_write(err, code)
    elseif core.stdout_closed() then fail_write(nil, EPIPE) end
    if failed then timer:cancel() end
  end)
  return function(line)
    if failed then return end
    local ok, err, code = io.stdout:write(line, '\n')
    if not ok then fail_write(err, code) end
  end
end

--- Entry point: `klua watch ARGS...`.
function M.main(...)
  local args = { ... }
  local o, err = M.parse(args)
  if not o then return fail(err) end
  if o.help then
    io.stdout:write(M.help())
    return klua.stop(0)
  end
  local filter, failures
  if o.expr then
    filter, err = M.compile(o.expr)
    if not filter then return fail('-e: ' .. err) end
    failures = new_failures()
    klua.every(10, function() failures:report() end)
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
  local write = output(require 'klua.core')

  local function emit(event, obj, old)
    local ok, out = true, true
    if filter then ok, out = pcall(filter, event, obj, old) end
    if not ok then return failures:add(tostring(out), event, obj) end
    if not out then return end
    if out == true then
      out = default_line(o.output, r, event, obj)
    elseif type(out) == 'table' or type(out) == 'userdata' then
      out = klua.json.encode(out)
    else
      out = tostring(out)
    end
    write(out)
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
