--- Starts and drives a sandbox API server (scripts/sandbox-apiserver) from specs.
--
--   local sandbox = require 'support.sandbox'
--   local sb = sandbox.start{ tls = true, auth = 'token' }
--   local status, obj = sb:json('GET', '/api/v1/namespaces/default')
--   sb:stop()
--
-- Each server gets its own temporary directory, sb.dir, holding the kubeconfig, kubectl's
-- discovery cache and, with tls, the certificates the server made: ca.crt, ca.key,
-- server.crt, server.key, client.crt and client.key (CN=sandbox-admin, O=system:masters).
local cjson = require 'cjson'
local system = require 'system'

local M = {}
local Sandbox = {}
Sandbox.__index = Sandbox

local START_TIMEOUT = 15

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

-- The pid of this Lua process: the parent of the shell that popen starts.
local function own_pid()
  local p = assert(io.popen('echo $PPID', 'r'))
  local out = p:read('a')
  p:close()
  return trim(out)
end

local function random_token()
  local parts = {}
  for i = 1, 4 do parts[i] = string.format('%08x', math.random(0, 0x7fffffff)) end
  return table.concat(parts)
end

--- Polls fn every interval seconds until it returns a truthy value or timeout passes.
-- Returns fn's value, or nil on timeout.
function M.wait_until(fn, timeout, interval)
  local deadline = system.gettime() + (timeout or 5)
  repeat
    local v = fn()
    if v then return v end
    system.sleep(interval or 0.05)
  until system.gettime() > deadline
  return nil
end

--- Starts a server on a free port and waits until it listens.
-- opts: tls (bool), auth ('none' | 'token' | 'cert'), history (events kept for watch
-- replay: the watch cache), storage_history (revisions kept for Exact and paged lists:
-- etcd's history), bookmark_interval (seconds; default the server's, about a minute as
-- kube-apiserver's), token (default: random), args (extra command-line arguments, e.g.
-- fault flags).
function M.start(opts)
  opts = opts or {}
  local self = setmetatable({ auth = opts.auth or 'none', tls = opts.tls or false, seq = 0 },
    Sandbox)
  self.dir = trim(run('mktemp -d /tmp/klua-sandbox.XXXXXX'))
  self.kubeconfig = self.dir .. '/kubeconfig'
  local root = os.getenv('KLUA_ROOT') or '.'
  local args = { root .. '/scripts/sandbox-apiserver', '--port', '0',
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
  local url = M.wait_until(function()
    local text = read_file(self.dir .. '/stdout') or ''
    return text:match('listening on (%S+)') or (not self:alive() and '') or nil
  end, START_TIMEOUT)
  if not url or url == '' then
    local err = read_file(self.dir .. '/stderr') or ''
    self:stop()
    error('sandbox-apiserver did not start: ' .. err, 2)
  end
  self.url = url
  self.port = tonumber(url:match(':(%d+)$'))
  return self
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

--- Runs `kubectl ARGS` against this server; args is a shell-quoted string.
-- Returns stdout, whether kubectl exited 0, and stderr.
function Sandbox:kubectl(args, stdin)
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

--- Runs `kubectl ARGS -o json` and returns the decoded output; errors when kubectl fails.
function Sandbox:kubectl_json(args)
  local out, ok, err = self:kubectl(args .. ' -o json')
  if not ok then error('kubectl ' .. args .. ' failed: ' .. err, 2) end
  return cjson.decode(out)
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

--- Posts fault settings or actions to /sandbox/v1/faults (see docs/sandbox.md);
-- returns the decoded answer, errors when the server refuses them.
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
  local back = M.wait_until(function()
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
-- opts.max_time bounds the stream (default 20 s). It returns once the response headers
-- have arrived, so the watch is registered and sees every later change.
function Sandbox:watch(path, opts)
  opts = opts or {}
  local h = { out = self:tmpfile('watch'), rc = self:tmpfile('watch-rc'),
    pidfile = self:tmpfile('watch-pid'), head = self:tmpfile('watch-headers') }
  local args = self:curl_args()
  for _, a in ipairs({ '-N', '-D', h.head, '--max-time', tostring(opts.max_time or 20),
    self.url .. path }) do
    args[#args + 1] = a
  end
  os.execute('( ' .. join(args) .. ' > ' .. quote(h.out) .. ' 2>/dev/null & echo $! > '
    .. quote(h.pidfile) .. '; wait $!; echo $? > ' .. quote(h.rc) .. ' ) 2>/dev/null &')
  M.wait_until(function()
    return (read_file(h.head) or ''):match('\r\n\r\n') or read_file(h.rc)
  end, 10)
  h.pid = M.wait_until(function() return tonumber(read_file(h.pidfile) or '') end, 5)

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
    return M.wait_until(function() return fn(h.events()) end, timeout or 5)
  end

  function h.finished(timeout)
    local rc = M.wait_until(function() return tonumber(read_file(h.rc) or '') end, timeout or 5)
    return rc
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
    if not M.wait_until(function() return not self:alive() end, 5) then
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
