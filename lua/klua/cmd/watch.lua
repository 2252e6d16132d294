--- `klua watch`: ad hoc event filtering from the shell.
--
--   klua watch TYPE[,TYPE...] [NAME] | TYPE/NAME... [-n NS | -A] [-l SEL]
--              [--field-selector SEL] [-e LUA] [-o FORMAT] [--watch-only] ...
--
-- Prints what kubectl get -w prints (klua.cmd.printers, klua.cmd.jsonpath, and
-- klua.core.yaml for -o yaml): the table formats print the server's Table
-- rows, which the informer lists and watches (server_print), with the
-- objects they carry for -e; M.help() says what -e sees and does.
--
-- This module owns watch's flags: FLAGS below drives the parser, the usage
-- line and `klua watch --help`, whose lines have the layout of klua's global
-- flags (src/cli/cli.c), which klua prints after them.
--
-- Exit status 2 for a usage error found before any request; 1, with the
-- server's words, for a resource it does not serve, a first LIST or a
-- first WATCH it refuses with 400, 403 or 404 (a field selector it does
-- not know, a resource these credentials may not list, or may list but
-- not watch: the rows are printed first, as kubectl get -w prints them),
-- or an object named that does not exist; 141 when stdout's reader goes
-- away. Later failures are retried, as informers do. A wait (--until, --for:
-- klua.cmd.waiter) ends with 0 when it is over, 1 on --fail-if or
-- --timeout.
local selector = require('klua.selector')
local util = require('klua.internal.objutil')
local jsonpath = require('klua.cmd.jsonpath')
local printers = require('klua.cmd.printers')
local diff = require('klua.cmd.diff')
local waiter = require('klua.cmd.waiter')

local M = {}

-- Every flag of `klua watch`, with the option it sets (a flag with an arg
-- takes a value, the others are switches; a `many` flag adds its comma-separated
-- values to a list, and may come again; a `list` flag adds its whole value to a
-- list, and may come again) and its one line of help.
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
  { short = '-o', long = '--output', arg = 'FORMAT', key = 'output',
    help = 'a table (default), wide, name, json, ndjson, yaml, jsonpath=T, custom-columns=SPEC, line' },
  { long = '--output-watch-events', key = 'output_watch_events',
    help = 'show the event type (EVENT column, or {"type":...,"object":...})' },
  { long = '--no-headers', key = 'no_headers', help = 'print table rows without their header' },
  { short = '-L', long = '--label-columns', arg = 'KEY,...', key = 'label_columns', many = true,
    help = 'a column for the value of each of these labels' },
  { long = '--show-labels', key = 'show_labels', help = 'a LABELS column with every label' },
  { long = '--show-managed-fields', key = 'show_managed_fields',
    help = 'keep metadata.managedFields in -o json, ndjson and yaml' },
  { long = '--sort-by', arg = 'JSONPATH', key = 'sort_by', help = 'order the initial list by this field' },
  { long = '--server-print', key = 'no_server_print', negated = true,
    help = "the server's columns (default); --server-print=false: NAME and AGE" },
  { long = '--watch-only', key = 'watch_only', help = 'print only changes, not the objects that exist already' },
  { long = '--diff', key = 'diff', help = 'on MODIFIED, print only what changed (-o json: a JSON Patch)' },
  { long = '--diff-all', key = 'diff_all', help = 'as --diff, with resourceVersion, managedFields and generation' },
  { long = '--until', arg = 'LUA', key = 'untils', list = true,
    help = 'wait until this Lua expression holds for the objects, then exit 0' },
  { long = '--for', arg = 'COND', key = 'fors', list = true,
    help = "wait for kubectl wait's delete, create, condition=C[=V] or jsonpath=P[=V]" },
  { long = '--fail-if', arg = 'LUA', key = 'fail_ifs', list = true,
    help = 'while waiting, exit 1 as soon as this Lua expression holds for an event' },
  { long = '--any', key = 'any', help = 'the wait is over when one object meets it, not every one' },
  { long = '--timeout', arg = 'DURATION', key = 'timeout_text',
    help = 'while waiting, exit 1 after this long (30s, 5m, 1h; 0: check once)' },
  { short = '-w', long = '--watch', key = 'watch', help = 'accepted for kubectl get -w; watching is what klua watch does' },
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
  local words = { 'usage: klua [flags] watch TYPE[,TYPE...] [NAME] | TYPE/NAME...' }
  for _, f in ipairs(FLAGS) do
    local name = f.short or f.long
    if f.key == 'namespace' then
      words[#words + 1] = '[' .. name .. ' ' .. f.arg .. ' | -A]'
    elseif f.key ~= 'all_namespaces' and f.key ~= 'help' and f.key ~= 'watch' and not f.negated then
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
Prints what kubectl get -w prints: the objects that exist (a table with a
header: the server's columns, from the Table form that kubectl get asks for
too, or NAME and AGE from a server without it), then a row for each change,
with the cells the server sent for it. TYPE is named as kubectl names it
(pods, po, deployments.apps, apps/v1/deployments, a CRD's plural or short
name); several types are separated by commas (pods,configmaps); NAME, or
TYPE/NAME, watches that object alone. "No resources found" goes to stderr
when nothing exists yet. When stdout's reader goes away (klua watch pods |
head -1), klua watch ends with exit status 141, as kubectl get -w does when
SIGPIPE ends it.

-o wide adds the columns the server marks as extra (priority > 0); name
prints kind/name; json prints each object as kubectl does (indented), ndjson
one object a line; yaml prints YAML documents separated by ---;
jsonpath=TEMPLATE and custom-columns=HEADER:PATH,... take kubectl's
JSONPath; line prints "EVENT  NAMESPACE/NAME  PHASE". --output-watch-events
adds the event type: an EVENT column, or {"type":"ADDED","object":{...}}
(one a line for json).

-e LUA is a Lua expression, or a chunk with return, run for every event with
these in scope:
  event   "ADDED", "MODIFIED" or "DELETED"
  obj     the object (a read-only view); old: the previous one on MODIFIED
  get     klua.get: get(obj, 'metadata', 'labels', 'app') is nil, not an
          error, when a step is missing
and Lua's standard functions and klua, as in scripts (type(obj) is
"userdata" for a view; klua.type(obj) is "object"). nil or false drops the
event, true prints the event as -o says (a table row by default), a string
is printed as it is, a table as JSON. An expression that raises drops the
event; each distinct error is reported once when it first happens, then
counted ("-e error (x17): ...") every 10 s and at exit.

Example: klua watch pods -A -e 'get(obj, "metadata", "labels", "app") == "web"'

--diff prints a MODIFIED event as what changed: "MODIFIED pod/web -n shop",
then a line per change, its dotted path and old -> new values as JSON
("  status.phase: "Pending" -> "Running"", (none) for a field not there);
-o json, ndjson and yaml print an RFC 6902 JSON Patch from the old object
to the new ({"type":"MODIFIED","object":{...},"patch":[...]} with
--output-watch-events, the object cut down to its name). Changes to
metadata.resourceVersion, managedFields and generation are left out, and an
update with no other change prints nothing, unless --diff-all. -e still
chooses the events (true prints the diff); ADDED and DELETED print as
without --diff.

--until LUA, or kubectl wait's --for (delete, create, condition=NAME[=VALUE],
jsonpath=PATH[=VALUE], as kubectl 1.32 compares them), makes klua watch a
wait: it ends once every object selected meets one of them (-e's names in
scope), or one object with --any. Objects that do not exist yet are waited
for, where kubectl wait fails ("not found", "no matching resources found"):
a name must exist, and a selection have at least one object, to be met,
except with --for=delete, which a name gone, or a selection with none left,
meets (a DELETED event meets it, as --until 'event == "DELETED"' does).
Nothing is printed while waiting unless -o, -e or --diff say how; at the
end, "pod/web condition met" for each object that met it, as kubectl wait
prints. --until and --for may come several times; any one holding will do.

Exit status: 0 when the wait is over; 1 as soon as --fail-if LUA holds for
an event, after --timeout (kubectl wait's status and words: "timed out
waiting for the condition on pods/web"; --timeout 0 checks once: "condition
not met for pods/web"), or on a JSONPath kubectl refuses to compare (several
values, an object); 2 for a usage error; 141 when stdout's reader goes away.
Without --timeout, the wait has no end (kubectl wait's is 30s).]], '', 'Flags:' }
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

--- How many words a flag of watch written as `word` spans: 2 when its value
-- is the next word (-n shop), 1 when it has none or carries it (-A, -n=shop,
-- -nshop), nil when word is no flag of watch. klua asks this of a flag before
-- the command, as kubectl takes `kubectl -n shop get pods -w`.
function M.flag_words(word)
  local name, value = split_flag(word)
  local f = BY_NAME[name]
  if not f then return nil end
  return (f.arg and not value) and 2 or 1
end

local FORMATS = 'custom-columns,json,jsonpath,line,name,ndjson,wide,yaml'
-- What `-o` takes, for the shell completion (src/cli/complete.c).
M.FORMATS = FORMATS

-- Whether a template reads .items of the object at its top level, as a
-- template written for `kubectl get -o jsonpath` (a List) does.
local function reads_items(t)
  for _, node in ipairs(t.nodes) do
    local path = node.range or node.path
    local first = path and path.steps[1]
    if first and first.kind == 'field' and first.name == 'items' then return true end
  end
  return false
end

-- The output format in o.output checked, as kubectl words its complaints:
-- o.output becomes the format's name, with o.template (jsonpath) or
-- o.columns (custom-columns) parsed. Returns true, or nil and a message.
local function check_output(o)
  local format, arg = o.output, nil
  if format == nil then
    o.output = 'table'
    return true
  end
  local kind, rest = format:match('^([%a-]+)=(.*)$')
  if kind == 'jsonpath' or kind == 'custom-columns' then format, arg = kind, rest end
  if format == 'jsonpath' then
    if not arg or arg == '' then return nil, 'template format specified but no template given' end
    local t, err = jsonpath.parse(arg)
    if not t then return nil, err end
    if reads_items(t) then
      -- kubectl 1.32 prints nothing for the first object and fails on the
      -- next with these words (an empty range leaves its {end} unmatched),
      -- or prints nothing at all for a plain path.
      return nil, ('error executing jsonpath %q: Error executing template: not in range, nothing to end: '
        .. 'klua watch, as kubectl get -w, prints each object on its own, which has no .items: '
        .. 'write the template for one object, such as {.metadata.name}{"\\n"}'):format(arg)
    end
    o.template = t
  elseif format == 'custom-columns' then
    local cols, err = printers.custom_columns(arg)
    if not cols then return nil, err end
    o.columns = cols
  elseif not (',' .. FORMATS .. ','):find(',' .. format .. ',', 1, true) or format:find(',', 1, true) then
    return nil, ('unable to match a printer suitable for the output format "%s", allowed formats are: %s')
      :format(format, FORMATS)
  end
  o.output = format
  return true
end

-- The flags of the wait checked: o.conditions (--for, as kubectl reads
-- them), o.timeout (seconds) and o.waiting. Returns true, or nil and a message.
local function check_wait(o)
  if o.diff_all then o.diff = true end
  o.conditions = {}
  for _, text in ipairs(o.fors) do
    local c, err = waiter.condition(text)
    if not c then return nil, '--for: ' .. err end
    o.conditions[#o.conditions + 1] = c
  end
  o.waiting = #o.untils > 0 or #o.fors > 0
  if not o.waiting and (#o.fail_ifs > 0 or o.any or o.timeout_text) then
    return nil, '--fail-if, --any and --timeout go with --until or --for, which say what to wait for'
  end
  if o.timeout_text then
    local t, err = waiter.duration(o.timeout_text)
    if not t then return nil, ('invalid argument %q for "--timeout" flag: %s'):format(o.timeout_text, err) end
    o.timeout = t
  end
  return true
end

-- A group version in "v1/pods" or "apps/v1/deployments", which name a type,
-- unlike kubectl's TYPE/NAME.
local function is_versioned_type(word)
  local first, rest = word:match('^([^/]+)/(.+)$')
  return rest and (rest:find('/', 1, true) or first:match('^v%d+%l*%d*$')) ~= nil
end

-- The objects to watch, from the words after the flags, as kubectl get reads
-- them: TYPE[,TYPE...] [NAME], or TYPE/NAME... Returns a list of
-- {resource=, name=, qualified=} (qualified: print kind/name as kubectl does
-- for several types or TYPE/NAME), or nil and a message.
local function targets_of(words)
  if #words == 0 then return nil, 'a resource is needed, such as "pods"' end
  local out = {}
  if words[1]:find('/', 1, true) and not is_versioned_type(words[1]) then
    for _, w in ipairs(words) do
      local rtype, name = w:match('^([^/]+)/([^/]+)$')
      if not rtype or is_versioned_type(w) then
        return nil, ('there is no need to specify a resource type as a separate argument when passing '
          .. 'arguments in resource/name form (e.g. \'klua watch resource/<resource_name>\' instead of '
          .. '\'klua watch resource resource/<resource_name>\'), not "%s"'):format(w)
      end
      out[#out + 1] = { resource = rtype, name = name }
    end
    -- kubectl names rows kind/NAME when they are of several types.
    local types = {}
    for _, t in ipairs(out) do types[t.resource] = true end
    local several = next(types, next(types)) ~= nil
    for _, t in ipairs(out) do t.qualified = several end
    return out
  end
  if #words > 2 then return nil, ('unexpected argument "%s"'):format(words[3]) end
  if words[2] and words[2]:find('/', 1, true) then return nil, ('a NAME has no "/": %s'):format(words[2]) end
  local types = {}
  for t in (words[1] .. ','):gmatch('([^,]*),') do
    if t == '' then return nil, ('"%s" names an empty resource type'):format(words[1]) end
    types[#types + 1] = t
  end
  for _, t in ipairs(types) do
    out[#out + 1] = { resource = t, name = words[2], qualified = #types > 1 }
  end
  return out
end

--- Parses the arguments after `watch`. Returns the options (`{help = true}`
-- as soon as -h or --help comes), or nil, a message and, for an unknown
-- flag, the nearest known one when `suggest(word, names)` is given (klua
-- passes one that also knows its global flags). The options hold `targets`
-- ({resource=, name=, qualified=} each), `output` (the format's name:
-- table, wide, name, json, ndjson, yaml, jsonpath, custom-columns, line) and
-- the flags' keys.
function M.parse(args, suggest)
  local o, positional, i = { label_columns = {}, untils = {}, fors = {}, fail_ifs = {} }, {}, 1
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
      if f.many then
        for v in value:gmatch('[^,]+') do o[f.key][#o[f.key] + 1] = v end
      elseif f.list then
        o[f.key][#o[f.key] + 1] = value
      else
        o[f.key] = value
      end
    elseif f then
      local on = true
      if value then on = SWITCH_VALUES[value] end
      if on == nil then return nil, ('%s is a switch: true or false, not "%s"'):format(name, value) end
      if f.key == 'help' and on then return { help = true } end
      -- A switch that is on by default sets its key when turned off.
      if f.negated then on = not on end
      o[f.key] = on or nil
    elseif a:match('^%-') and a ~= '-' then
      return nil, ('unknown flag: %s'):format(name), suggest and suggest(name, NAMES) or nil
    else
      positional[#positional + 1] = a
    end
    i = i + 1
  end
  local targets, err = targets_of(positional)
  if not targets then return nil, err end
  o.targets = targets
  if o.all_namespaces and o.namespace then return nil, '-n and -A cannot be combined' end
  o.output_given = o.output ~= nil
  local ok, bad = check_output(o)
  if not ok then return nil, bad end
  ok, bad = check_wait(o)
  if not ok then return nil, bad end
  if o.sort_by then
    local path = o.sort_by:sub(1, 1) == '{' and o.sort_by or ('{' .. o.sort_by .. '}')
    local t, perr = jsonpath.parse(path)
    if not t then return nil, '--sort-by: ' .. perr end
    o.sort_template = t
  end
  local valid
  valid, bad = selector.parse(o.selector)
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
  return util.key(text_at(obj, 'metadata', 'namespace'), text_at(obj, 'metadata', 'name') or '?')
end

-- klua's own line: EVENT  NAMESPACE/NAME  PHASE.
local function line_of(event, obj)
  local phase = text_at(obj, 'status', 'phase')
  return ('%-9s %s%s'):format(event, key_of(obj), phase and ('  ' .. phase) or '')
end

local TABLES = { table = true, wide = true, ['custom-columns'] = true }

-- How one watched type is printed: its columns and tab writer, and the
-- initial list held until it is complete (to sort it and align it as one
-- block, as kubectl prints a list).
local View = {}
View.__index = View

-- definitions: the columnDefinitions of the server's Table for the type,
-- or nil (NAME and AGE).
local function new_view(o, target, r, definitions)
  local v = setmetatable({ o = o, r = r, target = target, tabs = printers.tabs(), initial = {}, target_index = {},
    flushed = false, headed = o.no_headers or false, server_print = definitions ~= nil }, View)
  if o.output == 'custom-columns' then
    v.headers = { table.unpack(o.columns.headers) }
  elseif TABLES[o.output] then
    v.columns = definitions and printers.server_columns(definitions, o.output == 'wide') or printers.default_columns()
    v.headers = { table.unpack(v.columns.headers) }
    for _, key in ipairs(o.label_columns) do v.headers[#v.headers + 1] = printers.label_header(key) end
    if o.show_labels then v.headers[#v.headers + 1] = 'LABELS' end
  end
  if v.headers and o.output_watch_events then
    table.insert(v.headers, 1, 'EVENT')
    -- kubectl's EVENT column is as wide as its widest word, MODIFIED, from the start.
    v.tabs.widths[1] = #'MODIFIED' + 3
  end
  return v
end

-- What the event prints as: { row = cells } for the table formats,
-- { yaml = document } for yaml, { error = message } when the template fails
-- on obj, else the text itself, written as it is (jsonpath adds no newline,
-- as kubectl): a string rather than a table around it, since -o name and
-- line print one per event. inf: the informer that handed out obj, whose
-- row's cells are printed.
function View:render(event, obj, inf)
  local o, r = self.o, self.r
  local format = o.output
  if TABLES[format] then
    local cells
    if format == 'custom-columns' then
      cells = printers.custom_cells(o.columns, klua.copy(obj))
    else
      cells = self.columns.cells(obj, self.server_print and inf:cells(obj) or nil, os.time())
      -- kubectl prefixes the first column with the kind when it prints several.
      if self.target.qualified then cells[1] = r.name_prefix .. cells[1] end
      local labels = klua.get(obj, 'metadata', 'labels')
      for _, key in ipairs(o.label_columns) do
        local value = labels and klua.get(labels, key)
        cells[#cells + 1] = type(value) == 'string' and value or ''
      end
      if o.show_labels then cells[#cells + 1] = printers.labels_text(obj) end
    end
    if o.all_namespaces and r.namespaced and format ~= 'custom-columns' then
      table.insert(cells, 1, text_at(obj, 'metadata', 'namespace') or '')
    end
    if o.output_watch_events then table.insert(cells, 1, event) end
    return { row = cells }
  elseif format == 'name' then
    -- klua.get itself, not text_at: a vararg call more for every line is
    -- 1.3% of watch-names' instructions (callgrind, 20,000 lines).
    local name = klua.get(obj, 'metadata', 'name')
    return r.name_prefix .. (type(name) == 'string' and name or '?') .. '\n'
  elseif format == 'line' then
    return line_of(event, obj) .. '\n'
  end
  local value = klua.copy(obj)
  -- As kubectl's OmitManagedFieldsPrinter: JSON and YAML leave managedFields
  -- out unless asked; templates and columns see the whole object, and so
  -- do watch events (kubectl get -w --output-watch-events prints them whole).
  if (format == 'json' or format == 'ndjson' or format == 'yaml') and not o.show_managed_fields
      and not o.output_watch_events and type(value.metadata) == 'table' then
    value.metadata.managedFields = nil
  end
  if (format == 'json' or format == 'ndjson') and o.output_watch_events then
    -- metav1.WatchEvent's field order, as kubectl writes it: type, then object.
    return ('{"type":%s,"object":%s}\n'):format(jsonpath.json(event), jsonpath.json(value))
  end
  if o.output_watch_events then value = { type = event, object = value } end
  if format == 'json' then
    return jsonpath.json(value, '    ') .. '\n'
  elseif format == 'ndjson' then
    return jsonpath.json(value) .. '\n'
  elseif format == 'yaml' then
    return { yaml = require('klua.core').yaml.encode(value) }
  end
  local text, err = o.template:render(value)
  if not text then return { error = err } end
  return text
end

-- What an event prints as with --diff: a MODIFIED one, its changes
-- (self.changes, set just before), as "MODIFIED pod/web -n shop" and a line
-- per change, or as a JSON Patch for json, ndjson and yaml (with
-- --output-watch-events, {"type":"MODIFIED","object":...,"patch":[...]}, the
-- object cut down to its apiVersion, kind, name, namespace and
-- resourceVersion); the others as without --diff.
function View:render_diff(event, obj, inf)
  if event ~= 'MODIFIED' then return View.render(self, event, obj, inf) end
  local o, format, changes = self.o, self.o.output, self.changes
  local ns = text_at(obj, 'metadata', 'namespace')
  if format == 'json' or format == 'ndjson' or format == 'yaml' then
    local patch = setmetatable(diff.patch(changes), klua.json.array_mt)
    local yaml = require('klua.core').yaml
    if o.output_watch_events then
      local id = { apiVersion = text_at(obj, 'apiVersion'), kind = text_at(obj, 'kind'), metadata = {
        name = text_at(obj, 'metadata', 'name'), namespace = ns,
        resourceVersion = text_at(obj, 'metadata', 'resourceVersion') } }
      if format == 'yaml' then return { yaml = yaml.encode({ type = event, object = id, patch = patch }) } end
      return ('{"type":%s,"object":%s,"patch":%s}\n'):format(jsonpath.json(event), jsonpath.json(id),
        jsonpath.json(patch))
    end
    if format == 'json' then return jsonpath.json(patch, '    ') .. '\n' end
    if format == 'ndjson' then return jsonpath.json(patch) .. '\n' end
    return { yaml = yaml.encode(patch) }
  end
  return ('MODIFIED %s%s%s\n'):format(self.r.name_prefix, text_at(obj, 'metadata', 'name') or '?',
    ns and (' -n ' .. ns) or '') .. diff.text(changes)
end

-- The header of the table formats, with NAMESPACE first for -A.
function View:header()
  local h = { table.unpack(self.headers) }
  if self.o.all_namespaces and self.r.namespaced and self.o.output ~= 'custom-columns' then
    table.insert(h, self.o.output_watch_events and 2 or 1, 'NAMESPACE')
  end
  return h
end

-- Writes items: rows aligned together, the first after the header.
function View:write_items(items, out)
  local rows = {}
  for _, item in ipairs(items) do
    if type(item) == 'table' and item.row then
      if not self.headed then
        rows[#rows + 1] = self:header()
        self.headed = true
      end
      rows[#rows + 1] = item.row
    else
      if #rows > 0 then out.lines(self.tabs:format(rows)) rows = {} end
      out.item(item)
    end
  end
  if #rows > 0 then out.lines(self.tabs:format(rows)) end
end

-- The initial list, sorted with --sort-by, written as one block.
function View:flush(out)
  if self.flushed then return end
  self.flushed = true
  local held = self.initial
  self.initial = nil
  -- The objects named first come first, as kubectl lists them.
  table.sort(held, function(a, b)
    if a.target ~= b.target then return a.target < b.target end
    return a.seq < b.seq
  end)
  if self.o.sort_template and #held > 1 then
    local function key(h)
      local values = self.o.sort_template:values(klua.copy(h.obj))
      return values and values[1]
    end
    for i, h in ipairs(held) do h.key, h.pos = key(h), i end
    -- Stable, as kubectl's sort: equal keys keep their order; a missing key first.
    table.sort(held, function(a, b)
      local x, y = a.key, b.key
      if type(x) ~= type(y) then
        if x == nil or y == nil then return x == nil end
        return type(x) < type(y)
      end
      if (type(x) == 'number' or type(x) == 'string') and x ~= y then return x < y end
      return a.pos < b.pos
    end)
  end
  local items = {}
  for i, h in ipairs(held) do items[i] = h.item end
  if #items > 0 then self:write_items(items, out) end
end

-- The errors of the -e code, each reported when it first happens and then
-- counted, so that a filter failing on most objects (a label they lack)
-- writes a few lines, not one traceback per event.
local Failures = {}
Failures.__index = Failures

-- what: the flag whose code failed ("-e", "-o jsonpath").
local function new_failures(what)
  local f = setmetatable({ what = what, by_message = {}, order = {} }, Failures)
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
  io.stderr:write(('klua watch: %s failed on %s %s, which is not printed: %s '
    .. '(further events failing the same way are counted)\n'):format(self.what, event, key_of(obj), message))
end

--- Writes "-e error (xN): message" (with its flag's name) for each error that
-- happened again since it was last reported.
function Failures:report()
  for _, message in ipairs(self.order) do
    local e = self.by_message[message]
    if e.count > e.reported then
      io.stderr:write(('klua watch: %s error (x%d): %s\n'):format(self.what, e.count, message))
      e.reported = e.count
    end
  end
end

local function fail(msg)
  io.stderr:write('klua watch: ', msg, "\nRun 'klua watch --help' for usage.\n")
  klua.stop(2)
end

-- The answers of the server that retrying will not change, on a first
-- request: a selector it refuses, credentials that may not, a resource or
-- object it does not have. (klua run retries them: permissions may come.)
local REFUSED = { [400] = true, [403] = true, [404] = true }

-- Ends klua watch with the server's words, as kubectl does.
local function refused(message)
  io.stderr:write('klua watch: ', message, '\n')
  klua.stop(1)
end

-- errno of a write to a pipe that nobody reads any more (Linux).
local EPIPE = 32

-- Lines are flushed once klua has handled what it has read (a timer of no
-- delay, which runs after the events of the read that wrote them) rather
-- than one write per line: a burst of events costs one write per read, and a
-- person at a terminal or a pipe sees each line at once, as from kubectl
-- get -w, which writes each line as it comes. When stdout's reader goes away (`klua watch
-- pods | head -1`), klua watch ends with status 141 and says nothing, as
-- kubectl get -w, which SIGPIPE kills at its next write (the shell shows
-- 128 + 13). klua notices at the next flush of a pending line, and, with no
-- line pending, from stdout itself: a tick every 50 ms polls it, and a pipe or
-- socket whose reader has closed reports POLLERR or POLLHUP. Any other failed write
-- (a full disk) is reported, with status 1. Returns write(text).
local function output(core)
  local failed = false
  local function fail_write(err, code)
    if failed then return end
    failed = true
    if code ~= EPIPE then io.stderr:write('klua watch: cannot write to stdout: ', err, '\n') end
    klua.stop(code == EPIPE and 141 or 1)
  end
  -- io.stdout is C's stdout, which core.write_stdout writes to as
  -- io.stdout:write does, for less (it runs for every line).
  local stdout, write = io.stdout, core.write_stdout
  stdout:setvbuf('full', 65536)
  local timer, pending
  local function flush()
    pending = false
    local ok, err, code = stdout:flush()
    if not ok then fail_write(err, code) end
  end
  timer = klua.every(0.05, function()
    if not failed and core.stdout_closed() then fail_write(nil, EPIPE) end
    if failed then timer:cancel() end
  end)
  return function(text)
    if failed then return end
    local ok, err, code = write(text)
    if not ok then return fail_write(err, code) end
    if not pending then
      pending = true
      klua.after(0, flush)
    end
  end
end

-- The first LIST, of one object. In Table form it is asked again after an
-- answer that says nothing of the form (none, 429, 5xx), with the
-- informers' backoff, since NAME and AGE would stand for the server's
-- columns for the whole watch; a plain one is left to the informer's
-- retries. Returns the list, or nil and the error.
local function first_list(r, q)
  local delay = 0.8
  while true do
    local list, err = klua.api.list(r, q)
    if list or not q.as_table or not (err.code == 0 or err.code == 429 or err.code >= 500) then return list, err end
    if delay == 0.8 then klua.log.warn('listing %s failed: %s; retrying', r.resource, err.message or tostring(err)) end
    klua.sleep(err.retry_after and math.min(err.retry_after, 30) or delay * (1 + math.random()))
    delay = math.min(delay * 2, 30)
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
  local filter, failures, render_failures
  if o.expr then
    filter, err = M.compile(o.expr)
    if not filter then return fail('-e: ' .. err) end
    failures = new_failures('-e')
  end
  -- A JSONPath that parsed can still fail on an object (an index out of range).
  if o.template then render_failures = new_failures('-o jsonpath') end
  local reported = {}
  for _, f in pairs({ failures, render_failures }) do reported[#reported + 1] = f end
  local untils, fail_ifs, until_failures, fail_failures = {}, {}, nil, nil
  if o.waiting then
    for flag, exprs in pairs({ ['--until'] = { o.untils, untils }, ['--fail-if'] = { o.fail_ifs, fail_ifs } }) do
      for i, expr in ipairs(exprs[1]) do
        exprs[2][i], err = M.compile(expr)
        if not exprs[2][i] then return fail(flag .. ': ' .. err) end
      end
    end
    until_failures, fail_failures = new_failures('--until'), new_failures('--fail-if')
    reported[#reported + 1] = until_failures
    reported[#reported + 1] = fail_failures
  end
  if #reported > 0 then
    klua.every(10, function()
      for _, f in ipairs(reported) do f:report() end
    end)
  end
  local ns
  -- One view per type: several names of one type share its header and columns.
  local views, view_of, informed = {}, {}, {}
  for _, target in ipairs(o.targets) do
    local r
    r, err = klua.resolve(target.resource)
    if not r then
      io.stderr:write('klua watch: ', err, '\n')
      return klua.stop(1)
    end
    r.name_prefix = r.kind:lower() .. (r.group ~= '' and ('.' .. r.group) or '') .. '/'
    target.prefix, target.plural = r.name_prefix, r.resource
    target.ns = nil
    if r.namespaced and not o.all_namespaces then
      target.ns = o.namespace or klua.namespace()
      ns = target.ns
    end
    local fs = o.field_selector
    if target.name then
      local by_name = 'metadata.name=' .. target.name
      fs = fs and (fs .. ',' .. by_name) or by_name
    end
    target.fs = fs
    -- A selector the server refuses, a resource it does not serve or may not
    -- be listed by these credentials: retrying will not help, so say so and
    -- exit, as kubectl does. (klua run retries these: permissions may come.)
    -- The table formats ask for the Table form, as kubectl get does: its
    -- columnDefinitions are the header, and the informer lists and watches
    -- it too. A server that refuses it (406) or cannot make one (it answers
    -- the plain list) gets NAME and AGE, as kubectl prints for objects
    -- without a Table.
    local server_print = (o.output == 'table' or o.output == 'wide') and not o.no_server_print
    local q = { namespace = target.ns, label_selector = o.selector, field_selector = fs, limit = 1,
      one_page = true, as_table = server_print }
    target.not_found = ('%s "%s" not found'):format(r.resource .. (r.group ~= '' and ('.' .. r.group) or ''),
      target.name)
    -- Under --watch-list a format without the Table needs no LIST: the
    -- informer's WatchList streams the objects, and credentials that may
    -- watch but not list work, as they do for an informer. Refusals and a
    -- missing name are then told by the informer (below).
    local probe, lerr
    target.unprobed = require('klua.core').watch_list and not server_print
    if not target.unprobed then
      probe, lerr = first_list(r, q)
      if lerr and lerr.code == 406 and server_print then
        server_print, q.as_table = false, nil
        probe, lerr = klua.api.list(r, q)
      end
      if lerr and REFUSED[lerr.code] then return refused(lerr.message or tostring(lerr)) end
      -- kubectl get NAME -w gets the object first, and its NotFound ends it.
      -- A wait waits for it to exist.
      if target.name and probe and #(probe.rows or probe.items or {}) == 0 and not o.waiting then
        return refused(target.not_found)
      end
    end
    local definitions = server_print and probe and probe.kind == 'Table' and type(probe.columnDefinitions) == 'table'
      and #probe.columnDefinitions > 0 and probe.columnDefinitions or nil
    target.server_print = definitions ~= nil
    if not view_of[target.resource] then
      view_of[target.resource] = new_view(o, target, r, definitions)
      views[#views + 1] = view_of[target.resource]
    end
    local view = view_of[target.resource]
    view.target_index[target] = #informed + 1
    informed[#informed + 1] = { view = view, target = target }
  end
  local write = output(require('klua.core'))
  local yaml_docs = 0
  local out = {
    lines = function(lines) for _, l in ipairs(lines) do write(l .. '\n') end end,
    item = function(item)
      if type(item) == 'string' then
        write(item)
      else
        write((yaml_docs > 0 and '---\n' or '') .. item.yaml)
        yaml_docs = yaml_docs + 1
      end
    end,
  }

  local listed, synced, refusal = 0, false, nil
  local function emit(view, inf, event, obj, old, initial, target)
    local ok, res = true, true
    if filter then ok, res = pcall(filter, event, obj, old) end
    if not ok then return failures:add(tostring(res), event, obj) end
    if not res then return end
    local item
    if res == true then
      item = view:render(event, obj, inf)
    elseif type(res) == 'table' or type(res) == 'userdata' then
      item = klua.json.encode(res) .. '\n'
    else
      item = tostring(res) .. '\n'
    end
    local text = type(item) == 'string'
    if not text and item.error then return render_failures:add(item.error, event, obj) end
    if not view.flushed then
      if initial then
        view.initial[#view.initial + 1] = { item = item, obj = obj, target = view.target_index[target], seq = #view.initial }
        return
      end
      view:flush(out)
    end
    -- A text goes out as write_items would write it alone, without the
    -- two tables that call makes for each event.
    if text then return write(item) end
    view:write_items({ item }, out)
  end

  -- While waiting, the events are printed only when asked how (-o, -e or
  -- --diff); otherwise the objects that met the wait are, at its end.
  local wait
  if o.waiting then
    local quiet = not (o.output_given or o.expr or o.diff)
    if quiet then emit = function() end end
    wait = waiter.new(o.targets, { conditions = o.conditions, untils = untils, fail_ifs = fail_ifs, any = o.any,
      until_failures = until_failures, fail_failures = fail_failures, quiet = quiet, write = write,
      stop = function(code, message)
        io.stdout:flush()
        if message then io.stderr:write('klua watch: ', message, '\n') end
        klua.stop(code)
      end })
    if o.timeout and o.timeout > 0 then klua.after(o.timeout, function() wait:timeout() end) end
  end

  for _, w in ipairs(informed) do
    local view, target = w.view, w.target
    local inf
    inf = klua.informer {
      resource = target.resource,
      namespace = target.ns,
      label_selector = o.selector,
      field_selector = target.fs,
      server_print = target.server_print,
    }
    target.listed = 0
    local function on_add(obj, initial)
      if initial then
        listed = listed + 1
        target.listed = target.listed + 1
      end
      if not (initial and o.watch_only) then emit(view, inf, 'ADDED', obj, nil, initial, target) end
    end
    local function on_update(old, new) emit(view, inf, 'MODIFIED', new, old, false, target) end
    local function on_delete(obj) emit(view, inf, 'DELETED', obj, nil, false, target) end
    if o.diff then
      view.render = View.render_diff
      -- An update that changes only what is left out prints nothing.
      on_update = function(old, new)
        local changes = diff.changes(klua.copy(old), klua.copy(new), { all = o.diff_all })
        if #changes == 0 then return end
        view.changes = changes
        emit(view, inf, 'MODIFIED', new, old, false, target)
      end
    end
    if wait then
      local add, update, delete = on_add, on_update, on_delete
      on_add = function(obj, initial)
        add(obj, initial)
        wait:track(target, 'ADDED', obj, nil)
      end
      on_update = function(old, new)
        update(old, new)
        wait:track(target, 'MODIFIED', new, old)
      end
      on_delete = function(obj)
        delete(obj)
        wait:track(target, 'DELETED', obj, nil)
      end
    end
    inf:on('add', on_add)
    inf:on('update', on_update)
    inf:on('delete', on_delete)
    -- The first watch refused, as the first LIST: kubectl get -w prints the
    -- list, then exits with the watch's error. A watch refused later (a
    -- permission revoked) is retried, as informers do.
    -- Without the LIST above, a refusal before the first watch is accepted
    -- is the usage error that LIST's would have been.
    inf:on('error', function(err)
      if err.watched or not REFUSED[err.code] then return end
      if target.unprobed then return refused(err.message) end
      if err.verb ~= 'watch' then return end
      if synced then return refused(err.message) end
      refusal = refusal or err.message
    end)
  end
  -- The initial lists are complete: print them, or say that there is
  -- nothing, as kubectl get does ("No resources found in web namespace.").
  klua.on_synced(function()
    synced = true
    for _, w in ipairs(informed) do
      local target = w.target
      if target.unprobed and target.name and target.listed == 0 and not wait then return refused(target.not_found) end
    end
    for _, view in ipairs(views) do view:flush(out) end
    if wait then
      if refusal then return refused(refusal) end
      return wait:synced(o.timeout)
    end
    if listed == 0 and not o.watch_only then
      io.stderr:write(ns and #views == 1 and ('No resources found in %s namespace.\n'):format(ns)
        or 'No resources found\n')
    end
    if refusal then refused(refusal) end
  end)
end

return M
