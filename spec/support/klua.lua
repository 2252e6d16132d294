--- Runs the klua binary from specs: to completion, or in the background
-- with its output captured to files that the spec can poll.
local system = require 'system'

local M = {}

M.bin = os.getenv('KLUA_BIN') or './build/klua'

--- Under make test-asan klua runs several times slower and its allocator
-- holds redzones and a quarantine: waits and memory bounds scale by this.
M.slowdown = os.getenv('KLUA_ASAN') and 3 or 1

local function shell_quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end
M.quote = shell_quote

local function read_file(path)
  local f = io.open(path, 'rb')
  if not f then return '' end
  local s = f:read('a')
  f:close()
  return s
end
M.read_file = read_file

local function write_file(path, text)
  local f = assert(io.open(path, 'wb'))
  f:write(text)
  f:close()
end
M.write_file = write_file

local function tmpdir()
  local p = io.popen('mktemp -d /tmp/klua-spec.XXXXXX')
  local d = p:read('l')
  p:close()
  return d
end
M.tmpdir = tmpdir

--- Runs a shell command; returns its stdout without the final newline.
function M.run_command(cmd)
  local p = io.popen(cmd)
  local out = p:read('a')
  p:close()
  return (out:gsub('\n$', ''))
end

--- Writes a Lua script into a fresh temp file and returns its path.
function M.script(text)
  local path = tmpdir() .. '/script.lua'
  write_file(path, text)
  return path
end

local function command(args, env, bin)
  local parts = { 'env' }
  for k, v in pairs(env or {}) do parts[#parts + 1] = k .. '=' .. shell_quote(v) end
  parts[#parts + 1] = shell_quote(bin or M.bin)
  for _, a in ipairs(args) do parts[#parts + 1] = shell_quote(a) end
  return table.concat(parts, ' ')
end

--- Runs klua with args until it exits or `timeout` seconds pass (then it is
-- sent SIGTERM, and SIGKILL 5 s later if it is still running). Returns
-- stdout, stderr, exit code (124 on timeout, 137 when it had to be killed).
-- opts: env (variables to add), timeout, bin (another klua binary, or a
-- command that runs one), cwd (the directory to run it in), stdout (a path
-- such as /dev/full for klua to write to; the stdout returned is then
-- empty), pipe (a shell command such as "head -1" klua writes into; the
-- stdout returned is what the command printed).
function M.run(args, opts)
  opts = opts or {}
  local d = tmpdir()
  local klua = ('cd %s && timeout -k 5 -s TERM %s %s 2> %s/err < /dev/null; echo $? > %s/code'):format(
    shell_quote(opts.cwd or '.'), opts.timeout or 20 * M.slowdown, command(args, opts.env, opts.bin), d, d)
  local cmd
  if opts.pipe then
    cmd = ('{ %s; } | %s > %s/out'):format(klua, opts.pipe, d)
  else
    cmd = ('{ %s; } > %s'):format(klua, shell_quote(opts.stdout or (d .. '/out')))
  end
  os.execute(cmd)
  local out, err = read_file(d .. '/out'), read_file(d .. '/err')
  local code = tonumber(read_file(d .. '/code'))
  os.execute('rm -rf ' .. shell_quote(d))
  return out, err, code
end

local Proc = {}
Proc.__index = Proc

--- Starts klua in the background. Returns a process with :output(),
-- :errors(), :wait_for(pattern, timeout), :stop(), :kill(), :wait(timeout).
function M.spawn(args, opts)
  opts = opts or {}
  local d = tmpdir()
  local inner = ('echo $$ > %s/pid; exec %s'):format(d, command(args, opts.env))
  local cmd = ('( sh -c %s > %s/out 2> %s/err < /dev/null; echo $? > %s/code ) &'):format(
    shell_quote(inner), d, d, d)
  os.execute(cmd)
  local p = setmetatable({ dir = d }, Proc)
  for _ = 1, 200 do
    p.pid = tonumber(read_file(d .. '/pid'))
    if p.pid then break end
    system.sleep(0.01)
  end
  return p
end

function Proc:output() return read_file(self.dir .. '/out') end
function Proc:errors() return read_file(self.dir .. '/err') end
function Proc:exit_code() return tonumber(read_file(self.dir .. '/code')) end

--- Polls until fn() returns a truthy value or timeout seconds pass.
function M.eventually(fn, timeout, interval)
  local deadline = system.gettime() + (timeout or 10)
  repeat
    local v = fn()
    if v then return v end
    system.sleep(interval or 0.05)
  until system.gettime() > deadline
  return fn()
end

--- Waits until stdout (or stderr with where = 'err') matches pattern.
function Proc:wait_for(pattern, timeout, where)
  return M.eventually(function()
    local text = where == 'err' and self:errors() or self:output()
    return text:find(pattern) ~= nil
  end, timeout or 10)
end

--- Waits for the process to exit; returns its exit code or nil on timeout.
function Proc:wait(timeout)
  return M.eventually(function() return self:exit_code() end, timeout or 10)
end

--- Sends SIGTERM (or sig, a name such as 'INT') without waiting.
function Proc:signal(sig)
  if self.pid then os.execute(('kill -%s %d 2>/dev/null'):format(sig or 'TERM', self.pid)) end
end

--- Sends SIGTERM (or sig) and waits for the exit code; a process still
-- running after 10 s is killed (status 137).
function Proc:stop(sig)
  self:signal(sig)
  local code = self:wait(10)
  if not code then
    os.execute(('kill -KILL %d 2>/dev/null'):format(self.pid))
    code = self:wait(5)
  end
  return code
end

--- Stops the process if needed and removes its files.
function Proc:cleanup()
  if not self:exit_code() then self:stop() end
  os.execute('rm -rf ' .. shell_quote(self.dir))
end

return M
