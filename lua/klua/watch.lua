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
-- This module owns watch's flags: FLAGS below drives the parser, the usage
-- line and `klua watch --help`, whose lines have the layout of klua's global
-- flags (src/cli.c), which klua prints after them.
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
-- to 34 columns, then the help), as klua's global flags are printed.
function M.help()
  local out = { usage(), '', [[
Prints one line per event, like kubectl get -w: ADDED for each object of the
initial list, then ADDED, MODIFIED and DELETED as they happen. RESOURCE is
named as kubectl names it (pods, po, deployments.apps, apps/v1/deployments, a
CRD's plural or short name); NAME watches that object alone. -e is a Lua
expression, or a chunk with return, run per event with type, obj and old (on
MODIFIED) in scope: nil or false drops the event, true prints the default
line, a string is printed as it is and a table as JSON. When stdout's reader
goes away (klua watch pods | head -1), klua watch ends with exit status 141,
as kubectl get -w does when SIGPIPE ends it.]], '', 'Flags:' }
  for _, f in ipairs(FLAGS) do
    local left = (f.short and (f.short .. ', ') or '    ') .. f.long .. (f.arg and (' ' .. f.arg) or '')
    out[#out + 1] = ('  %-32s %s'):format(left, f.help)
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
  local o, err = M.parse({ ... })
  if not o then return fail(err) end
  if o.help then
    io.stdout:write(M.help())
    return klua.stop(0)
  end
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
  local write = output(require 'klua.core')

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
