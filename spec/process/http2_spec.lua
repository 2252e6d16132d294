-- Over TLS klua speaks HTTP/2, so every list and watch of the process share
-- one connection. nghttpx (Debian's nghttp2-proxy) terminates HTTP/2 in
-- front of the sandbox, which speaks HTTP/1.1.
local K = require 'support.klua'
local testing = require 'klua.testing'
local fixtures = require 'support.fixtures'

local function free_port()
  return tonumber(K.run_command([[python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])']]))
end

--- Connections from pid to port, from the kernel's socket tables.
local function connections(pid, port)
  local inodes = {}
  for fd in K.run_command('ls -l /proc/' .. pid .. '/fd 2>/dev/null'):gmatch('socket:%[(%d+)%]') do inodes[fd] = true end
  local n = 0
  for _, table_ in ipairs({ '/proc/net/tcp', '/proc/net/tcp6' }) do
    for line in K.read_file(table_):gmatch('[^\n]+') do
      local rem, state, inode = line:match('^%s*%d+: %x+:%x+ %x+:(%x+) (%x+) %x+:%x+ %x+:%x+ %x+ +%d+ +%d+ (%d+)')
      if rem and tonumber(rem, 16) == port and state == '01' and inodes[inode] then n = n + 1 end
    end
  end
  return n
end

describe('klua over HTTP/2', function()
  local sb = testing.with_sandbox()
  local dir, proxy_pid, port
  setup(function()
    dir = K.tmpdir()
    os.execute(('openssl req -x509 -newkey rsa:2048 -nodes -keyout %s/key.pem -out %s/cert.pem -days 2 ' ..
      '-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 2>/dev/null'):format(dir, dir))
    port = free_port()
    -- --conf=/dev/null: Debian's /etc/nghttpx/nghttpx.conf also listens on 127.0.0.1:3000, so that
    -- a second nghttpx on the machine (another spec run, a bench) would not start.
    proxy_pid = tonumber(K.run_command(("nghttpx --conf=/dev/null -f'127.0.0.1,%d' -b'127.0.0.1,%d' %s/key.pem %s/cert.pem " ..
      '--workers=1 --no-ocsp --frontend-read-timeout=1h --backend-read-timeout=1h ' ..
      '--accesslog-file=%s/access.log --errorlog-file=%s/error.log > /dev/null 2>&1 & echo $!'):format(
      port, sb.port, dir, dir, dir, dir)))
    fixtures.kubeconfig(dir .. '/kubeconfig', { server = 'https://127.0.0.1:' .. port, ca = dir .. '/cert.pem' })
    local up, failure = testing.eventually(function()
      return K.run_command(('curl -s -o /dev/null -w %%{http_code} --cacert %s/cert.pem https://127.0.0.1:%d/version'):format(dir, port)) == '200'
    end, 10, { fail = false })
    assert(up, 'nghttpx did not start: ' .. K.read_file(dir .. '/error.log') .. '\n' .. tostring(failure))
  end)
  teardown(function()
    if proxy_pid then os.execute('kill ' .. proxy_pid) end
  end)

  it('lists and watches three resources through a single connection', function()
    local script = K.script([[
      for _, r in ipairs({ 'configmaps', 'pods', 'namespaces' }) do klua.informer { resource = r } end
      klua.on_synced(function() print('synced') end)
    ]])
    local p = K.spawn({ '--kubeconfig', dir .. '/kubeconfig', 'run', script })
    assert.truthy(p:wait_for('synced', 10), p:errors())
    testing.eventually(function() return sb:stats().open_watches == 3 end, 10)
    local n = connections(p.pid, port)
    p:cleanup()
    assert.equals(1, n)
    local log = K.read_file(dir .. '/access.log')
    assert.truthy(log:find('GET /api/v1/pods%?limit=500&resourceVersion=0 HTTP/2'))
    assert.truthy(log:find('GET /api/v1/configmaps%?limit=500&resourceVersion=0 HTTP/2'))
  end)
end)
