--- HTTP/2 in front of the sandbox, which speaks HTTP/1.1 only: nghttpx (Debian's
-- nghttp2-proxy) terminates TLS and HTTP/2 and forwards to it; and a relay
-- (spec/support/blackhole.py) that can go silent in front of nghttpx without
-- closing its connections.
local testing = require('klua.testing')
local K = require('support.klua')
local fixtures = require('support.fixtures')

local M = {}

local function free_port()
  return tonumber(K.run_command([[python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])']]))
end

local Front = {}
Front.__index = Front

--- Starts nghttpx on a free port in front of sandbox sb, with a certificate of its
-- own for 127.0.0.1; waits until it answers. Returns f: f.port, f.dir (its logs:
-- access.log, error.log), f.ca (the certificate to trust), f:kubeconfig(port),
-- f:stop().
function M.front(sb)
  local f = setmetatable({ dir = K.tmpdir(), port = free_port() }, Front)
  f.ca = f.dir .. '/cert.pem'
  os.execute(('openssl req -x509 -newkey rsa:2048 -nodes -keyout %s/key.pem -out %s -days 2 ' ..
    '-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 2>/dev/null'):format(f.dir, f.ca))
  -- --conf=/dev/null: the package's /etc/nghttpx/nghttpx.conf adds a frontend on port 3000,
  -- which a second nghttpx (a bench run, another spec job) cannot bind.
  f.pid = tonumber(K.run_command(("nghttpx --conf=/dev/null -f'127.0.0.1,%d' -b'127.0.0.1,%d' " ..
    '%s/key.pem %s --workers=1 --no-ocsp --frontend-read-timeout=1h --backend-read-timeout=1h ' ..
    '--accesslog-file=%s/access.log --errorlog-file=%s/error.log > /dev/null 2>&1 & echo $!'):format(
    f.port, sb.port, f.dir, f.ca, f.dir, f.dir)))
  local up, failure = testing.eventually(function()
    return K.run_command(('curl -s -o /dev/null -w %%{http_code} --cacert %s https://127.0.0.1:%d/version'):format(
      f.ca, f.port)) == '200'
  end, 10, { fail = false })
  assert(up, 'nghttpx did not start: ' .. K.read_file(f.dir .. '/error.log') .. '\n' .. tostring(failure))
  return f
end

--- Writes a kubeconfig for https://127.0.0.1:PORT (nghttpx's own port when PORT is
-- nil, or a relay's in front of it) trusting nghttpx's certificate; returns its path.
function Front:kubeconfig(port)
  local path = ('%s/kubeconfig-%d'):format(self.dir, port or self.port)
  return fixtures.kubeconfig(path, { server = 'https://127.0.0.1:' .. (port or self.port), ca = self.ca })
end

function Front:stop() os.execute('kill ' .. self.pid .. ' 2>/dev/null') end

local Relay = {}
Relay.__index = Relay

--- Starts spec/support/blackhole.py in front of 127.0.0.1:upstream_port. Returns r:
-- r.port, r:blackhole() (silences every connection open now, and waits until it
-- has), r:opened() (connections accepted so far), r:stop().
function M.relay(upstream_port)
  local r = setmetatable({ dir = K.tmpdir() }, Relay)
  r.pid = tonumber(K.run_command(('python3 %s/spec/support/blackhole.py %d --owner-pid %s > %s/out 2>&1 & echo $!'):format(
    testing.root, upstream_port, K.run_command('echo $PPID'), r.dir)))
  r.port = tonumber(testing.poll(function() return K.read_file(r.dir .. '/out'):match('listening (%d+)') end, 10, 0.1))
  assert(r.port, 'the relay did not start: ' .. K.read_file(r.dir .. '/out'))
  return r
end

local function count(self, pattern)
  return select(2, K.read_file(self.dir .. '/out'):gsub(pattern, ''))
end

function Relay:opened() return count(self, 'open %d+') end

function Relay:blackhole()
  local before = count(self, 'blackhole done')
  os.execute('kill -USR1 ' .. self.pid)
  testing.eventually(function() return count(self, 'blackhole done') > before end, 10,
    { what = 'the relay to silence its connections' })
end

function Relay:stop() os.execute('kill ' .. self.pid .. ' 2>/dev/null') end

return M
