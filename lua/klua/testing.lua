--- klua.testing: a harness for testing klua controllers with busted.
--
--   local testing = require('klua.testing')
--
--   describe('my controller', function()
--     local cluster, controller
--     setup(function()
--       cluster = testing.sandbox()                -- a sandbox API server on a free port
--       controller = cluster:run('controller.lua') -- `klua run controller.lua` against it
--     end)
--
--     it('labels new ConfigMaps', function()
--       cluster:kubectl('create configmap settings')
--       testing.eventually(function()
--         return cluster:get('configmap settings').metadata.labels.seen == 'true'
--       end, 10)
--     end)
--   end)
--
-- Everything the harness starts (servers, klua processes, temporary directories) belongs
-- to the innermost describe block (or the spec file) running when it was started, and is
-- stopped and removed when that block ends, whether its specs passed or not; :stop() ends
-- it earlier. Run the specs with `klua test` (which puts this module on the path and sets
-- KLUA_BIN to itself) or with busted directly. docs/testing.md is the guide.
--
-- This file is not embedded into the klua binary (the Makefile leaves it out of the
-- embedded library): it runs in busted's interpreter, which has io.popen, os.execute and
-- luasystem, none of which a controller's script environment offers. It is installed
-- under PREFIX/share/klua/lua/klua/ beside the sandbox server (PREFIX/share/klua/scripts),
-- the same layout as the source tree, so it finds the server relative to itself.
local cjson = require('cjson')
local system = require('system')

local M = {}

local function quote(s)
  return "'" .. (tostring(s):gsub("'", "'\\''")) .. "'"
end

local function read_file(path)
  local f = io.open(path, 'rb')
  if not f then return nil end
  local data = f:read('a')
  f:close()
  return data
end

local function write_file(path, data)
  local f = assert(io.open(path, 'wb'))
  f:write(data)
  f:close()
end

-- Runs a shell command; returns its stdout and whether it exited 0.
local function run(cmd)
  local p = assert(io.popen(cmd, 'r'))
  local out = p:read('a')
  local ok = p:close()
  return out, ok == true
end

local function trim(s) return (s:gsub('^%s+', ''):gsub('%s+$', '')) end

local function join(args)
  local quoted = {}
  for i, a in ipairs(args) do quoted[i] = quote(a) end
  return table.concat(quoted, ' ')
end

--- Quotes s for a POSIX shell.
M.quote = quote
--- The contents of the file at path, or nil when it cannot be read.
M.read_file = read_file
--- Writes data to the file at path, replacing it.
M.write_file = write_file

-- Where things are. The harness is lua/klua/testing.lua below a base directory: the
-- source tree, or PREFIX/share/klua once installed.
local function find_base()
  local source = debug.getinfo(1, 'S').source:match('^@(.*)$') or ''
  local base = source:match('^(.*)/lua/klua/testing%.lua$')
  if not base and source:match('^lua/klua/testing%.lua$') then base = '.' end
  if not base then return nil end
  if base:sub(1, 1) ~= '/' then base = trim(run('pwd')) .. '/' .. base end
  return base
end

local base = find_base()

local function first_file(...)
  for _, path in ipairs({ ... }) do
    if read_file(path) then return path end
  end
end

--- The directory holding scripts/sandbox-apiserver: $KLUA_ROOT, else the harness's own
-- base (the source tree, or PREFIX/share/klua).
M.root = os.getenv('KLUA_ROOT') or base or '.'

--- The klua binary the harness runs: $KLUA_BIN (`klua test` sets it to itself), else the
-- source tree's build/klua, else the installed PREFIX/bin/klua, else klua on the PATH.
M.bin = os.getenv('KLUA_BIN')
  or (base and first_file(base .. '/build/klua', base .. '/../../bin/klua'))
  or 'klua'

-- Ownership: each describe block (and spec file) that runs gets a scope; what is
-- started goes into the innermost one and is released when it ends. Without busted
-- (a plain Lua script) the caller stops what it starts.
local root_scope = {}
local open_scopes = {}
-- Raises a spec failure (rather than an error) under busted.
local fail = error
-- Whether the running spec's failure message already shows the klua processes' logs.
local logs_shown = false

local function current_scope()
  local top = open_scopes[#open_scopes]
  return top and top.items or root_scope
end

local function track(release, obj)
  local scope = current_scope()
  scope[#scope + 1] = { release = release, obj = obj }
end

local function release_all(items)
  for i = #items, 1, -1 do
    pcall(items[i].release, items[i].obj)
    items[i] = nil
  end
end

-- busted's API (describe-level functions such as before_each), or nil outside busted.
local busted_api

local function subscribe_to_busted()
  local ok, busted = pcall(require, 'busted')
  if not ok or type(busted) ~= 'table' then return end
  local has, subscribe = pcall(function() return busted.subscribe end)
  if not has or type(subscribe) ~= 'function' then return end
  fail = busted.fail
  busted_api = busted
  local function open(element)
    open_scopes[#open_scopes + 1] = { element = element, items = {} }
    return nil, true
  end
  local function close(element)
    for i = #open_scopes, 1, -1 do
      if open_scopes[i].element == element then
        local scope = table.remove(open_scopes, i)
        release_all(scope.items)
        return nil, true
      end
    end
    -- The file that required the harness started before the harness was loaded:
    -- what it started outside its describe blocks is released with it.
    release_all(root_scope)
    return nil, true
  end
  -- A spec that fails otherwise than in eventually() gets the logs on stderr.
  subscribe({ 'test', 'start' }, function()
    logs_shown = false
    return nil, true
  end)
  subscribe({ 'test', 'end' }, function(element, _, status)
    if (status == 'failure' or status == 'error') and not logs_shown then
      local logs = M.process_reports()
      if logs ~= '' then
        io.stderr:write(('klua.testing: "%s" did not pass; the klua processes it ran:\n%s\n')
          :format(tostring(element.name), logs))
      end
    end
    return nil, true
  end)
  subscribe({ 'describe', 'start' }, open)
  subscribe({ 'describe', 'end' }, close)
  subscribe({ 'file', 'start' }, open)
  subscribe({ 'file', 'end' }, close)
  subscribe({ 'suite', 'end' }, function()
    for i = #open_scopes, 1, -1 do release_all(table.remove(open_scopes, i).items) end
    release_all(root_scope)
    return nil, true
  end)
end

subscribe_to_busted()

--- A new temporary directory, removed with the describe block that made it.
function M.tmpdir()
  local dir = trim(run('mktemp -d "${TMPDIR:-/tmp}/klua-test.XXXXXX"'))
  track(function(d) os.execute('rm -rf ' .. quote(d)) end, dir)
  return dir
end

-- Every klua process started and not yet cleaned up, for failure reports.
local live_processes = {}

-- A readable rendering of a value for failure messages: tables as Lua
-- constructors with sorted keys, a few levels deep.
local function render(v, depth)
  depth = depth or 0
  if type(v) == 'string' then return string.format('%q', v) end
  if type(v) ~= 'table' then return tostring(v) end
  if depth >= 4 then return '{...}' end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b)
    if type(a) == type(b) and (type(a) == 'number' or type(a) == 'string') then return a < b end
    return type(a) < type(b)
  end)
  local parts = {}
  for _, k in ipairs(keys) do
    local key = (type(k) == 'string' and k:match('^[%a_][%w_]*$')) and k or ('[' .. render(k, depth + 1) .. ']')
    parts[#parts + 1] = key .. ' = ' .. render(v[k], depth + 1)
  end
  return '{ ' .. table.concat(parts, ', ') .. ' }'
end

local function error_text(e)
  if type(e) == 'table' and e.message ~= nil then e = e.message end
  return tostring(e)
end

local LOG_LINES = 60

local function log_tail(text)
  local lines = {}
  for line in text:gmatch('[^\n]*\n?') do
    if line ~= '' then lines[#lines + 1] = (line:gsub('\n$', '')) end
  end
  local from = math.max(1, #lines - LOG_LINES + 1)
  local head = from > 1 and ('(last %d of %d lines)\n'):format(LOG_LINES, #lines) or ''
  return head .. table.concat(lines, '\n', from)
end

--- The log of every klua process the harness runs, each under a header saying which
-- and whether it still runs: what a failure report shows.
function M.process_reports()
  local parts = {}
  for _, p in ipairs(live_processes) do
    local code = p:exit_code()
    parts[#parts + 1] = ('--- log of %s (%s):\n%s'):format(p.name,
      code and ('exited with code ' .. code) or 'running', log_tail(p:log()))
  end
  return table.concat(parts, '\n')
end

--- Polls fn until it returns a truthy first value and returns what it returned.
-- fn may raise (an assert that does not hold yet): that counts as not yet.
-- When timeout seconds (default 10) pass first, fails the spec with a message that says
-- what fn last returned or raised, followed by the log of every klua process the harness
-- is running.
-- opts: interval (seconds between tries, default 0.05), what (the condition, for the
-- message), fail = false (return nil and the message instead of raising).
function M.eventually(fn, timeout, opts)
  opts = opts or {}
  timeout = timeout or 10
  local deadline = system.gettime() + timeout
  local last, tries = nil, 0
  while true do
    tries = tries + 1
    last = table.pack(pcall(fn))
    if last[1] and last[2] then return table.unpack(last, 2, last.n) end
    if system.gettime() > deadline then break end
    system.sleep(opts.interval or 0.05)
  end
  local seen
  if last[1] then
    local values = {}
    for i = 2, math.max(last.n, 2) do values[#values + 1] = render(last[i]) end
    seen = 'last returned: ' .. table.concat(values, ', ')
  else
    seen = 'last raised: ' .. error_text(last[2])
  end
  local message = ('eventually: %s did not hold within %g s (%d tries); %s'):format(
    opts.what or 'the condition', timeout, tries, seen)
  local logs = M.process_reports()
  if logs ~= '' then message = message .. '\n' .. logs end
  if opts.fail == false then return nil, message end
  logs_shown = true
  fail(message, 2)
end

--- Polls fn every interval seconds (default 0.05) until it returns a truthy value, and
-- returns that value; nil once timeout seconds (default 10) pass. Unlike eventually, it
-- never fails the spec: for a spec that asserts on what it got.
function M.poll(fn, timeout, interval)
  return (M.eventually(fn, timeout, { fail = false, interval = interval }))
end
local poll = M.poll

-- Processes -------------------------------------------------------------------

-- The pid of this Lua process: the parent of the shell that popen starts.
local function own_pid()
  return trim(run('echo $PPID'))
end

local Process = {}
Process.__index = Process

local function command(args, env, bin)
  local parts = { 'env' }
  for k, v in pairs(env or {}) do parts[#parts + 1] = k .. '=' .. quote(v) end
  parts[#parts + 1] = bin and quote(bin) or quote(M.bin)
  for _, a in ipairs(args) do parts[#parts + 1] = quote(a) end
  return table.concat(parts, ' ')
end

local function private_dir()
  return trim(run('mktemp -d "${TMPDIR:-/tmp}/klua-test.XXXXXX"'))
end

--- Runs klua with args until it exits or timeout seconds (default 20) pass, when it is
-- sent SIGTERM, and SIGKILL 5 s later if it still runs. Returns stdout, stderr and the
-- exit code (124 on timeout, 137 when it had to be killed). opts: env (variables to
-- add), timeout, bin (another klua, or a command that runs one), cwd, stdout (a path
-- such as /dev/full for klua to write to; the stdout returned is then empty), pipe (a
-- shell command such as "head -1" klua writes into; the stdout returned is what the
-- command printed).
function M.run(args, opts)
  opts = opts or {}
  local d = private_dir()
  local klua = ('cd %s && timeout -k 5 -s TERM %s %s 2> %s/err < /dev/null; echo $? > %s/code')
    :format(quote(opts.cwd or '.'), opts.timeout or 20, command(args, opts.env, opts.bin), quote(d), quote(d))
  if opts.pipe then
    os.execute(('{ %s; } | %s > %s/out'):format(klua, opts.pipe, quote(d)))
  else
    os.execute(('{ %s; } > %s'):format(klua, quote(opts.stdout or (d .. '/out'))))
  end
  local out, err = read_file(d .. '/out') or '', read_file(d .. '/err') or ''
  local code = tonumber(read_file(d .. '/code') or '')
  os.execute('rm -rf ' .. quote(d))
  return out, err, code
end

--- Starts klua with args in the background, its output captured. Returns a process
-- (methods below). opts: env (variables to add), cwd, bin, name (shown in reports).
function M.spawn(args, opts)
  opts = opts or {}
  local d = private_dir()
  local inner = ('echo $$ > %s/pid; exec %s'):format(quote(d), command(args, opts.env, opts.bin))
  -- The subshell holds no descriptor of ours: whoever reads this process's output
  -- (a pipe) must not wait for klua to end.
  os.execute(('( cd %s && sh -c %s > %s/out 2> %s/err < /dev/null; echo $? > %s/code ) > /dev/null 2>&1 &')
    :format(quote(opts.cwd or '.'), quote(inner), quote(d), quote(d), quote(d)))
  local p = setmetatable({ dir = d, name = opts.name or ('klua ' .. table.concat(args, ' ')) }, Process)
  p.pid = poll(function() return tonumber(read_file(d .. '/pid') or '') end, 2)
  -- Should this process die without cleaning up (busted killed), klua follows it, as
  -- the sandbox does with --owner-pid.
  if p.pid then
    os.execute(('( while kill -0 %s && kill -0 %d; do sleep 1; done 2>/dev/null; kill %d 2>/dev/null )'
      .. ' > /dev/null 2>&1 &'):format(own_pid(), p.pid, p.pid))
  end
  live_processes[#live_processes + 1] = p
  track(Process.cleanup, p)
  return p
end

--- What the process wrote to stdout so far.
function Process:output() return read_file(self.dir .. '/out') or '' end
--- What the process wrote to stderr so far: klua's log.
function Process:errors() return read_file(self.dir .. '/err') or '' end
Process.log = Process.errors
--- The exit code, or nil while the process runs.
function Process:exit_code() return tonumber(read_file(self.dir .. '/code') or '') end

--- Waits until stdout (stderr with where = 'err') matches the Lua pattern; returns
-- whether it did within timeout seconds (default 10).
function Process:wait_for(pattern, timeout, where)
  return poll(function()
    local text = where == 'err' and self:errors() or self:output()
    return text:find(pattern) ~= nil
  end, timeout or 10) == true
end

--- Waits until the log (stderr) matches the Lua pattern; raises with the log otherwise.
function Process:wait_log(pattern, timeout)
  M.eventually(function() return self:errors():find(pattern) ~= nil end, timeout,
    { what = 'a log line matching "' .. pattern .. '"' })
end

--- Waits for the process to exit; returns its exit code, or nil after timeout seconds.
function Process:wait(timeout)
  return poll(function() return self:exit_code() end, timeout or 10)
end

--- Sends SIGTERM (or sig, a name such as 'INT') without waiting.
function Process:signal(sig)
  if self.pid then os.execute(('kill -%s %d 2>/dev/null'):format(sig or 'TERM', self.pid)) end
end

--- Sends SIGTERM (or sig), waits for the exit (SIGKILL after 10 s); returns the code.
function Process:stop(sig)
  self:signal(sig)
  local code = self:wait(10)
  if not code and self.pid then
    os.execute(('kill -KILL %d 2>/dev/null'):format(self.pid))
    code = self:wait(5)
  end
  return code
end

--- Stops the process if it runs and removes its files; safe to call twice.
function Process:cleanup()
  if not self.dir then return end
  if not self:exit_code() then self:stop() end
  for i, p in ipairs(live_processes) do
    if p == self then table.remove(live_processes, i) break end
  end
  os.execute('rm -rf ' .. quote(self.dir))
  self.dir = nil
end

-- The sandbox API server ------------------------------------------------------

local Sandbox = {}
Sandbox.__index = Sandbox
M.Sandbox = Sandbox

local START_TIMEOUT = 15

local function random_token()
  local parts = {}
  for i = 1, 4 do parts[i] = string.format('%08x', math.random(0, 0x7fffffff)) end
  return table.concat(parts)
end

--- Starts a sandbox API server (scripts/sandbox-apiserver, docs/sandbox.md) on a free
-- port and waits until it listens. opts: tls (bool), auth ('none' | 'token' | 'cert'),
-- history (events kept for watch replay: the watch cache), storage_history (revisions
-- kept for Exact and paged lists: etcd's history), bookmark_interval (seconds; default
-- the server's, about a minute as kube-apiserver's), token (default: random), args
-- (extra command-line arguments, e.g. fault flags).
-- The server's directory, sb.dir, holds its kubeconfig (sb.kubeconfig), kubectl's cache
-- and, with tls, its certificates; the server exits with this process.
function M.sandbox(opts)
  opts = opts or {}
  local self = setmetatable({ auth = opts.auth or 'none', tls = opts.tls or false, seq = 0 },
    Sandbox)
  self.dir = private_dir()
  self.kubeconfig = self.dir .. '/kubeconfig'
  local args = { M.root .. '/scripts/sandbox-apiserver', '--port', '0',
    '--kubeconfig-out', self.kubeconfig, '--cert-dir', self.dir,
    '--history', tostring(opts.history or 1000),
    '--auth', self.auth, '--owner-pid', own_pid() }
  if opts.bookmark_interval then
    args[#args + 1] = '--bookmark-interval'
    args[#args + 1] = tostring(opts.bookmark_interval)
  end
  if opts.storage_history then
    args[#args + 1] = '--storage-history'
    args[#args + 1] = tostring(opts.storage_history)
  end
  if self.tls then args[#args + 1] = '--tls' end
  if self.auth == 'token' then
    self.token = opts.token or random_token()
    args[#args + 1] = '--token'
    args[#args + 1] = self.token
  end
  for _, a in ipairs(opts.args or {}) do args[#args + 1] = a end
  local out = run(join(args) .. ' > ' .. quote(self.dir .. '/stdout') .. ' 2> '
    .. quote(self.dir .. '/stderr') .. ' & echo $!')
  self.pid = tonumber(trim(out))
  track(Sandbox.stop, self)
  local url = poll(function()
    local text = read_file(self.dir .. '/stdout') or ''
    return text:match('listening on (%S+)') or (not self:alive() and '') or nil
  end, START_TIMEOUT)
  if not url or url == '' then
    local err = read_file(self.dir .. '/stderr') or ''
    self:stop()
    error('sandbox-apiserver (' .. args[1] .. ') did not start: ' .. err
      .. '\nSet KLUA_ROOT to the directory holding scripts/sandbox-apiserver.', 2)
  end
  self.url = url
  self.port = tonumber(url:match(':(%d+)$'))
  return self
end

-- A table that stands for whichever server get() returns at the time of use: its fields
-- are that server's and its methods run on it, so a spec names the server once.
local function stand_in(get)
  local function current()
    local sb = get()
    if not sb then error('with_sandbox: its server runs only while the specs of its block run', 3) end
    return sb
  end
  return setmetatable({}, {
    __index = function(_, key)
      local sb = current()
      local value = sb[key]
      if type(value) == 'function' then
        return function(_, ...) return value(sb, ...) end
      end
      return value
    end,
    __newindex = function(_, key, value) current()[key] = value end,
  })
end

--- Declares the sandbox API server of the describe block (or spec file) it is called in,
-- and returns it. By default one server serves every spec of the block: started before
-- the first, stopped when the block ends. With opts.each every spec gets a fresh server
-- (an empty cluster), started before it and stopped after it together with everything
-- else the spec started (klua processes, temporary directories). The other opts are
-- testing.sandbox's.
--
--   describe('my controller', function()
--     local cluster = testing.with_sandbox { each = true }
--     it('labels a new ConfigMap', function()
--       local controller = cluster:run('controller.lua')   -- stopped after this spec
--       cluster:kubectl('create configmap settings')
--       ...
--
-- The value returned stands for the server of the spec running: cluster:kubectl(...),
-- cluster.kubeconfig. Only under busted.
function M.with_sandbox(opts)
  if not busted_api then error('with_sandbox needs busted: call testing.sandbox instead', 2) end
  opts = opts or {}
  local server
  if opts.each then
    local scope
    busted_api.before_each(function()
      scope = { items = {} }
      open_scopes[#open_scopes + 1] = scope
      server = M.sandbox(opts)
    end)
    busted_api.after_each(function()
      for i = #open_scopes, 1, -1 do
        if open_scopes[i] == scope then table.remove(open_scopes, i) end
      end
      release_all(scope.items)
      server = nil
    end)
  else
    busted_api.setup(function() server = M.sandbox(opts) end)
  end
  return stand_in(function() return server end)
end

--- Whether the server process is still running (an exited process not yet reaped by
-- its new parent counts as gone).
function Sandbox:alive()
  local stat = self.pid and read_file('/proc/' .. self.pid .. '/stat')
  return stat ~= nil and not stat:match('^%d+ %b() [ZX]')
end

--- The server's stderr so far (its log; -v in args makes it log every request).
function Sandbox:log()
  return read_file(self.dir .. '/stderr') or ''
end

--- A new file name inside sb.dir (removed with it), starting with name.
function Sandbox:tmpfile(name)
  self.seq = self.seq + 1
  return string.format('%s/%s.%d', self.dir, name, self.seq)
end

--- The shell command that runs `kubectl ARGS` against this server (for running it in the
-- background, e.g. `kubectl get -w`); args is a shell-quoted string.
function Sandbox:kubectl_command(args)
  return 'kubectl --kubeconfig=' .. quote(self.kubeconfig) .. ' --cache-dir='
    .. quote(self.dir .. '/kubectl-cache') .. ' ' .. args
end

--- Runs `kubectl ARGS` against this server, stdin (a string) as its input; args is a
-- command line as typed in a shell. Returns stdout, whether kubectl exited 0, and stderr.
function Sandbox:try_kubectl(args, stdin)
  local cmd = self:kubectl_command(args)
  if stdin then
    local input = self:tmpfile('kubectl-in')
    write_file(input, stdin)
    cmd = cmd .. ' < ' .. quote(input)
  end
  local errfile = self:tmpfile('kubectl-err')
  local out, ok = run(cmd .. ' 2> ' .. quote(errfile))
  return out, ok, read_file(errfile) or ''
end

--- Runs `kubectl ARGS` (as try_kubectl) and returns its stdout; raises with kubectl's
-- error when it fails.
function Sandbox:kubectl(args, stdin)
  local out, ok, err = self:try_kubectl(args, stdin)
  if not ok then error('kubectl ' .. args .. ' failed: ' .. err, 2) end
  return out
end

--- Applies the manifest (YAML or JSON, one or more documents) with `kubectl apply`.
function Sandbox:apply(manifest)
  local out, ok, err = self:try_kubectl('apply -f -', manifest)
  if not ok then error('kubectl apply failed: ' .. err .. 'manifest:\n' .. manifest, 2) end
  return out
end

--- Runs `kubectl ARGS -o json` and returns the decoded output; raises when kubectl fails.
function Sandbox:kubectl_json(args)
  local out, ok, err = self:try_kubectl(args .. ' -o json')
  if not ok then error('kubectl ' .. args .. ' failed: ' .. err, 2) end
  return cjson.decode(out)
end

--- `kubectl get ARGS -o json`, decoded; nil when the object does not exist.
function Sandbox:get(args)
  local out, ok, err = self:try_kubectl('get ' .. args .. ' -o json')
  if ok then return cjson.decode(out) end
  if err:find('(NotFound)', 1, true) then return nil end
  error('kubectl get ' .. args .. ' failed: ' .. err, 2)
end

--- Starts `klua run SCRIPT` against this server. opts: args (the script's arguments),
-- flags (klua flags before `run`, e.g. {'-v', '2'}), env, cwd, bin. Returns a process:
-- :log() is its stderr, :output() its stdout, :stop() ends it.
function Sandbox:run(script, opts)
  opts = opts or {}
  local argv = { '--kubeconfig', self.kubeconfig }
  for _, f in ipairs(opts.flags or {}) do argv[#argv + 1] = f end
  argv[#argv + 1] = 'run'
  argv[#argv + 1] = script
  for _, a in ipairs(opts.args or {}) do argv[#argv + 1] = a end
  return M.spawn(argv, { env = opts.env, cwd = opts.cwd, bin = opts.bin,
    name = 'klua run ' .. script })
end

--- The curl command line (as a list) that reaches this server with its credentials.
function Sandbox:curl_args()
  local args = { 'curl', '-sS' }
  if self.tls then
    args[#args + 1] = '--cacert'
    args[#args + 1] = self.dir .. '/ca.crt'
  end
  if self.auth == 'cert' then
    for _, a in ipairs({ '--cert', self.dir .. '/client.crt', '--key', self.dir .. '/client.key' }) do
      args[#args + 1] = a
    end
  elseif self.auth == 'token' then
    args[#args + 1] = '-H'
    args[#args + 1] = 'Authorization: Bearer ' .. self.token
  end
  return args
end

local function parse_headers(text)
  local headers, block = {}, {}
  for line in (text or ''):gmatch('[^\r\n]*\r?\n') do
    line = line:gsub('\r?\n$', '')
    if line:match('^HTTP/') then
      block = {}
    elseif line ~= '' then
      local k, v = line:match('^([^:]+):%s*(.*)$')
      if k then block[k:lower()] = v end
    else
      if next(block) then headers = block end
    end
  end
  if next(block) then headers = block end
  return headers
end

--- Sends one HTTP request with curl. body: a table (sent as JSON), a string, or nil; the
-- Content-Type is application/json unless headers name another.
-- headers: {name = value}. opts.max_time bounds the request (seconds, default 30); a
-- streaming request (a watch) is read until the server ends it or max_time passes.
-- Returns the HTTP status (0 when no response came), the body, and the response headers
-- with lower-case names.
function Sandbox:request(method, path, body, headers, opts)
  opts = opts or {}
  local bodyfile, headfile = self:tmpfile('body'), self:tmpfile('headers')
  local args = self:curl_args()
  for _, a in ipairs({ '-N', '-X', method, '-o', bodyfile, '-D', headfile, '-w', '%{http_code}',
    '--max-time', tostring(opts.max_time or 30) }) do
    args[#args + 1] = a
  end
  headers = headers or {}
  if body ~= nil then
    local infile = self:tmpfile('request')
    write_file(infile, type(body) == 'table' and cjson.encode(body) or body)
    local has_type = false
    for k in pairs(headers) do has_type = has_type or k:lower() == 'content-type' end
    if not has_type then headers['Content-Type'] = 'application/json' end
    args[#args + 1] = '--data-binary'
    args[#args + 1] = '@' .. infile
  end
  for k, v in pairs(headers) do
    args[#args + 1] = '-H'
    args[#args + 1] = k .. ': ' .. v
  end
  args[#args + 1] = self.url .. path
  local out = run(join(args) .. ' 2>/dev/null')
  local status = tonumber(out:match('(%d+)%s*$')) or 0
  local text = read_file(bodyfile) or ''
  os.remove(bodyfile)
  local response_headers = parse_headers(read_file(headfile))
  os.remove(headfile)
  return status, text, response_headers
end

--- Like request, with a JSON body; returns the status and the decoded body (nil if not JSON).
function Sandbox:json(method, path, body, headers)
  local status, text = self:request(method, path, body, headers)
  local ok, decoded = pcall(cjson.decode, text)
  return status, ok and decoded or nil
end

--- Posts fault settings or actions to /sandbox/v1/faults (the table in docs/sandbox.md):
--   sb:fault { expire_watches = true }                -- every watch ends with a 410
--   sb:fault { compact = true }                       -- old resourceVersions get 410
--   sb:fault { fail = { count = 5, code = 500 } }     -- the next 5 requests fail
-- Returns the decoded answer; raises when the server refuses the settings.
function Sandbox:fault(settings)
  local status, text = self:request('POST', '/sandbox/v1/faults', settings)
  if status ~= 200 then error('fault ' .. cjson.encode(settings) .. ' refused: ' .. status
      .. ' ' .. text, 2) end
  return cjson.decode(text)
end

--- Clears every fault setting.
function Sandbox:reset_faults()
  local status, text = self:request('POST', '/sandbox/v1/reset', '')
  if status ~= 200 then error('reset refused: ' .. status .. ' ' .. text, 2) end
end

--- Replays a recording of `klua record` (docs/record.md) in this server, as `klua replay`
-- does: its initial state is stored at once; its events follow, in the file's order and
-- at their recorded pace divided by opts.speed (default 1), from when a client first
-- watches a recorded resource (or at once when one watches already, or when opts.start
-- is 'now'). So a spec can replay an incident and then start the controller under test:
--   cluster:replay('spec/incidents/rollout.ndjson', { speed = 10 })
--   local controller = cluster:run('controller.lua')
--   testing.eventually(function() return cluster:replay_progress().state == 'done' end, 30)
-- The garbage collector stops (the recording holds what it did). One recording per
-- server. Returns the progress, as replay_progress.
function Sandbox:replay(file, opts)
  opts = opts or {}
  if file:sub(1, 1) ~= '/' then file = trim(run('pwd')) .. '/' .. file end
  local status, text = self:request('POST', '/sandbox/v1/replay', { file = file, speed = opts.speed or 1 })
  if status ~= 200 then error('replay of ' .. file .. ' refused: ' .. status .. ' ' .. text, 2) end
  if opts.start == 'now' then
    status, text = self:request('POST', '/sandbox/v1/replay', {})
    if status ~= 200 then error('replay start refused: ' .. status .. ' ' .. text, 2) end
  end
  return cjson.decode(text)
end

--- The decoded /sandbox/v1/replay: state ('waiting' for a watch, 'playing' or 'done'),
-- events (how many the recording holds after its initial state), applied (how many are
-- stored so far), initial, speed and file.
function Sandbox:replay_progress()
  local status, text = self:request('GET', '/sandbox/v1/replay')
  if status ~= 200 then error('replay progress failed: ' .. status .. ' ' .. text, 2) end
  return cjson.decode(text)
end

--- The decoded /sandbox/v1/stats: requests (by verb), resources (by resource, then verb),
-- faults (by kind), open_watches, watches (by resource), restarts, resourceVersion.
function Sandbox:stats()
  local status, text = self:request('GET', '/sandbox/v1/stats')
  if status ~= 200 then error('stats failed: ' .. status .. ' ' .. text, 2) end
  return cjson.decode(text)
end

--- The restart fault: every connection and the listener close, then the server listens
-- on the same port again with all its state. Returns once it serves again.
function Sandbox:restart(down_seconds)
  local before = self:stats().restarts
  self:fault({ restart = down_seconds and { down_seconds = down_seconds } or true })
  local back = poll(function()
    local status, text = self:request('GET', '/sandbox/v1/stats', nil, nil, { max_time = 2 })
    return status == 200 and cjson.decode(text).restarts > before
  end, 10 + (down_seconds or 0))
  if not back then error('sandbox did not come back after a restart', 2) end
end

--- Starts a streaming GET (a watch) in the background; returns a handle:
--   handle:events()          decoded complete lines so far (non-JSON lines as {raw = line})
--   handle:text()            everything received so far
--   handle:wait_for(fn, t)   waits until fn(events) is truthy (t seconds, default 5)
--   handle:finished(t)       waits for curl to end; returns its exit code (18 = cut short)
--   handle:stop()            ends curl
-- opts.max_time bounds the stream (default 20 s); opts.headers (name = value) are sent
-- with the request, as an Accept asking for a Table. It returns once the response headers
-- have arrived, so the watch is registered and sees every later change.
function Sandbox:watch(path, opts)
  opts = opts or {}
  local h = { out = self:tmpfile('watch'), rc = self:tmpfile('watch-rc'),
    pidfile = self:tmpfile('watch-pid'), head = self:tmpfile('watch-headers') }
  local args = self:curl_args()
  for name, value in pairs(opts.headers or {}) do
    args[#args + 1] = '-H'
    args[#args + 1] = name .. ': ' .. value
  end
  for _, a in ipairs({ '-N', '-D', h.head, '--max-time', tostring(opts.max_time or 20),
    self.url .. path }) do
    args[#args + 1] = a
  end
  os.execute('( ' .. join(args) .. ' > ' .. quote(h.out) .. ' 2>/dev/null & echo $! > '
    .. quote(h.pidfile) .. '; wait $!; echo $? > ' .. quote(h.rc) .. ' ) > /dev/null 2>&1 &')
  poll(function()
    return (read_file(h.head) or ''):match('\r\n\r\n') or read_file(h.rc)
  end, 10)
  h.pid = poll(function() return tonumber(read_file(h.pidfile) or '') end, 5)

  function h.text() return read_file(h.out) or '' end

  function h.events()
    local events = {}
    for line in h.text():gmatch('([^\n]*)\n') do
      local ok, decoded = pcall(cjson.decode, line)
      events[#events + 1] = ok and decoded or { raw = line }
    end
    return events
  end

  function h.wait_for(fn, timeout)
    return poll(function() return fn(h.events()) end, timeout or 5)
  end

  function h.finished(timeout)
    return poll(function() return tonumber(read_file(h.rc) or '') end, timeout or 5)
  end

  function h.stop()
    if h.pid then os.execute('kill ' .. h.pid .. ' 2>/dev/null') end
    h.finished(2)
  end

  return h
end

--- Kills the server and removes its directory; safe to call twice.
function Sandbox:stop()
  if self.pid then
    os.execute('kill ' .. self.pid .. ' 2>/dev/null')
    if not poll(function() return not self:alive() end, 5) then
      os.execute('kill -9 ' .. self.pid .. ' 2>/dev/null')
    end
    self.pid = nil
  end
  if self.dir then
    os.execute('rm -rf ' .. quote(self.dir))
    self.dir = nil
  end
end

return M
