-- Over TLS klua speaks HTTP/2, so every list and watch of the process share
-- one connection. nghttpx (Debian's nghttp2-proxy) terminates HTTP/2 in
-- front of the sandbox, which speaks HTTP/1.1.
local K = require('support.klua')
local testing = require('klua.testing')
local h2 = require('support.h2')

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
  local front, port
  setup(function()
    front = h2.front(sb)
    port = front.port
  end)
  teardown(function()
    if front then front:stop() end
  end)

  it('lists and watches three resources through a single connection', function()
    local script = K.script([[
      for _, r in ipairs({ 'configmaps', 'pods', 'namespaces' }) do klua.informer { resource = r } end
      klua.on_synced(function() print('synced') end)
    ]])
    local p = K.spawn({ '--kubeconfig', front:kubeconfig(), 'run', script })
    assert.truthy(p:wait_for('synced', 10), p:errors())
    testing.eventually(function() return sb:stats().open_watches == 3 end, 10)
    local n = connections(p.pid, port)
    p:cleanup()
    assert.equals(1, n)
    local log = K.read_file(front.dir .. '/access.log')
    assert.truthy(log:find('GET /api/v1/pods%?watch=true[^\n]*&sendInitialEvents=true[^\n]* HTTP/2'), log)
    assert.truthy(log:find('GET /api/v1/configmaps%?watch=true[^\n]*&sendInitialEvents=true[^\n]* HTTP/2'), log)
  end)
end)

-- client-go's HTTP/2 health check: a connection that read nothing for
-- HTTP2_READ_IDLE_TIMEOUT_SECONDS is probed, and closed when the probe has no
-- answer in HTTP2_PING_TIMEOUT_SECONDS; every watch on it resumes from its
-- resourceVersion on a new connection. The relay in front of nghttpx goes
-- silent without closing, as a proxy that lost the connection does.
describe('klua over an HTTP/2 connection that goes silent', function()
  local sb = testing.with_sandbox()
  local front, relay, p
  local env = { HTTP2_READ_IDLE_TIMEOUT_SECONDS = '2', HTTP2_PING_TIMEOUT_SECONDS = '1' }
  setup(function() front = h2.front(sb) end)
  teardown(function()
    if front then front:stop() end
  end)
  before_each(function() relay = h2.relay(front.port) end)
  after_each(function()
    if p then p:cleanup() end
    p = nil
    relay:stop()
  end)

  local function start(flags)
    local script = K.script([[
      for _, r in ipairs({ 'configmaps', 'secrets' }) do
        local inf = klua.informer { resource = r }
        inf:on('add', function(o)
          print(('add %s %s relists=%d'):format(r, o.metadata.name, inf:stats().relists))
        end)
      end
      klua.on_synced(function() print('synced') end)
    ]])
    local args = { '--kubeconfig', front:kubeconfig(relay.port) }
    for _, f in ipairs(flags or {}) do args[#args + 1] = f end
    args[#args + 1], args[#args + 2] = 'run', script
    p = K.spawn(args, { env = env })
    assert.truthy(p:wait_for('synced', 10 * K.slowdown), p:errors())
    assert.equals(1, relay:opened())
  end

  -- Both watches deliver what was made after the blackhole, without a relist.
  local function delivers(name)
    sb:kubectl('create configmap ' .. name)
    sb:kubectl('create secret generic ' .. name)
    for _, r in ipairs({ 'configmaps', 'secrets' }) do
      assert.truthy(p:wait_for(('add %s %s relists=0'):format(r, name), 30 * K.slowdown),
        ('no %s %s: %s\n%s'):format(r, name, p:output(), p:errors()))
    end
    assert.truthy(relay:opened() >= 2)
    assert.truthy(p:errors():find('read nothing for [%d.]+ s nor answered a probe: closed'), p:errors())
  end

  it('moves every watch to a new connection once the probe goes unanswered', function()
    start()
    relay:blackhole()
    delivers('afterblackhole')
  end)

  it('warns of a time that is not a whole number of seconds', function()
    local _, err = K.run_script_ok('', { kubeconfig = sb.kubeconfig, env = { HTTP2_PING_TIMEOUT_SECONDS = '1.5' } })
    assert.truthy(err:find('illegal HTTP2_PING_TIMEOUT_SECONDS ("1.5")', 1, true), err)
  end)

  it('moves a watch the idle limit restarted onto the dead connection too', function()
    start({ '--watch-idle-timeout', '1' })
    relay:blackhole()
    testing.eventually(function() return p:errors():find('watch silent for') ~= nil end, 10 * K.slowdown,
      { what = 'a watch restarted by the idle limit' })
    delivers('afteridlerestart')
  end)
end)
