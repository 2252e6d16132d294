-- klua authenticates to the API server as kubectl does: bearer tokens,
-- token files, client certificates, exec credential plugins and the
-- in-cluster service account, always over a verified TLS connection unless
-- told otherwise. These specs run a small script that lists and gets
-- namespaces against sandboxes that require a token or a client certificate.
local sandbox = require('support.sandbox')
local testing = require('klua.testing')
local fixtures = require('support.fixtures')
local K = require('support.klua')

local ROOT = os.getenv('KLUA_ROOT') or '.'
local PLUGIN = ROOT .. '/spec/fixtures/auth/exec-plugin.sh'

-- Lists namespaces through an informer, gets one through klua.api, prints
-- both and the namespace klua.namespace() gives.
local PROBE = [[
local inf = klua.informer('namespaces')
klua.on_synced(function()
  local names = {}
  for _, ns in ipairs(inf:list()) do names[#names + 1] = ns.metadata.name end
  table.sort(names)
  local default = assert(klua.api.get('namespaces', 'default'))
  print(table.concat(names, ' '), default.metadata.name, klua.namespace())
  klua.stop()
end)
]]
local PROBED = 'default kube-public kube-system\tdefault\tdefault\n'

-- Ticks every 0.1 s, printing after each tick the worst gap between two
-- ticks so far; gets the default namespace once the file $GO_FILE exists
-- (at once without it) and prints how that went. Runs until stopped.
local GAPS = [[
local core = require('klua.core')
local function say(text) io.stdout:write(text, '\n') io.stdout:flush() end
local last, worst, ticks = core.now(), 0, 0
klua.every(0.1, function()
  local now = core.now()
  worst, last, ticks = math.max(worst, now - last), now, ticks + 1
  say(('tick %d worst %.3f'):format(ticks, worst))
end)
local go = os.getenv('GO_FILE')
local waiting
waiting = klua.every(0.1, function()
  local f = go and io.open(go)
  if go and not f then return end
  if f then f:close() end
  waiting:cancel()
  local ns, err = klua.api.get('namespaces', 'default')
  say(ns and 'got ' .. ns.metadata.name or 'failed: ' .. tostring(err))
end)
]]
-- The longest a 0.1 s timer may wait while credentials are fetched.
local MAX_GAP = 0.5 * K.slowdown

-- The worst gap between two ticks that a run of GAPS printed so far.
local function worst_gap(p)
  local worst
  for w in p:output():gmatch('worst ([%d.]+)') do worst = tonumber(w) end
  return worst
end

local function assert_loop_turned(p)
  local worst = worst_gap(p)
  assert(worst and worst < MAX_GAP, ('a 0.1 s timer waited %s s\n%s'):format(tostring(worst), p:output()))
end

-- Whether a process of the group pgid still runs (zombies aside).
local function group_running(pgid)
  for g, stat in K.run_command('ps -e -o pgid=,stat='):gmatch('(%d+)%s+(%S+)') do
    if tonumber(g) == pgid and not stat:find('^Z') then return true end
  end
  return false
end

local function assert_group_ends(pgid)
  testing.eventually(function() return not group_running(pgid) end, 5, { what = "the end of the plugin's processes" })
end

local function kill_group(pgid) os.execute(('kill -s KILL -- -%d 2>/dev/null'):format(pgid)) end

local probe_path, gaps_path
-- Temporary directories are removed when their describe block (or the file) ends.
local tmpdir = K.tmpdir

setup(function()
  probe_path, gaps_path = K.script(PROBE), K.script(GAPS)
end)

-- Runs `klua FLAGS... run PROBE` with variables added to klua's environment
-- (by default an empty HOME and no KUBECONFIG, so that only what the spec
-- names is used). Returns stdout, stderr and the exit status.
local function probe(flags, env)
  env = env or {}
  if env.HOME == nil then env.HOME = tmpdir() end
  if env.KUBECONFIG == nil then env.KUBECONFIG = '' end
  local args = {}
  for _, f in ipairs(flags) do args[#args + 1] = f end
  args[#args + 1] = 'run'
  args[#args + 1] = probe_path
  return K.run(args, { env = env })
end

local function assert_probed(out, err, code)
  assert(code == 0, ('klua exited %s\nstdout:\n%s\nstderr:\n%s'):format(tostring(code), out, err))
  assert.equals(PROBED, out)
end

describe('with TLS and a bearer token', function()
  local sb = testing.with_sandbox { tls = true, auth = 'token' }
  local other_ca

  setup(function()
    local d = tmpdir()
    other_ca = d .. '/other-ca.crt'
    os.execute(('openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 '
      .. '-subj /CN=another-ca -keyout %s/other-ca.key -out %s 2>/dev/null'):format(d, other_ca))
    assert(K.read_file(other_ca):find('BEGIN CERTIFICATE', 1, true), 'openssl made no CA')
  end)

  it('connects with the kubeconfig the sandbox wrote (embedded CA and token)', function()
    assert_probed(probe({ '--kubeconfig', sb.kubeconfig }))
  end)

  it('never prints the token, even at -v 9', function()
    local out, err, code = probe({ '--kubeconfig', sb.kubeconfig, '-v', '9' })
    assert_probed(out, err, code)
    assert.truthy(err:find('GET /api/v1/namespaces/default -> 200', 1, true), err)
    assert.is_nil(err:find(sb.token, 1, true))
  end)

  it('fails with a non-zero exit and an Unauthorized message when the token is wrong, printing neither token', function()
    local wrong = 'wrong-token-5e1f0c9a'
    local out, err, code = probe({ '--kubeconfig', sb.kubeconfig, '--token', wrong, '-v', '9' })
    assert.is_true(code ~= 0)
    assert.equals('', out)
    assert.truthy(err:find('GET /apis failed: 401 Unauthorized', 1, true), err)
    assert.is_nil(err:find(wrong, 1, true))
    assert.is_nil(err:find(sb.token, 1, true))
  end)

  it('fails TLS verification when the kubeconfig names another CA, and connects with --insecure-skip-tls-verify', function()
    local kc = fixtures.kubeconfig(tmpdir() .. '/kubeconfig', { server = sb.url, ca = other_ca, user = ('{token: %s}'):format(sb.token) })
    local out, err, code = probe({ '--kubeconfig', kc })
    assert.equals(1, code)
    assert.equals('', out)
    assert.truthy(err:find('cannot reach the API server: SSL certificate problem', 1, true), err)
    assert_probed(probe({ '--kubeconfig', kc, '--insecure-skip-tls-verify' }))
  end)

  it('connects with --server and --token alone only with --insecure-skip-tls-verify, the sandbox CA being unknown', function()
    local out, err, code = probe({ '--server', sb.url, '--token', sb.token })
    assert.equals(1, code)
    assert.equals('', out)
    assert.truthy(err:find('cannot reach the API server: SSL certificate problem', 1, true), err)
    assert_probed(probe({ '--server', sb.url, '--token', sb.token, '--insecure-skip-tls-verify' }))
  end)

  it('reads the token from a tokenFile, relative to the kubeconfig', function()
    local d = tmpdir()
    K.write_file(d .. '/token', sb.token .. '\n')
    local kc = fixtures.kubeconfig(d .. '/kubeconfig', { server = sb.url, ca = sb.dir .. '/ca.crt', user = '{tokenFile: token}' })
    assert_probed(probe({ '--kubeconfig', kc }))
  end)

  describe('from an exec credential plugin', function()
    local function plugin_kubeconfig(d, env)
      local vars = {}
      for k, v in pairs(env) do vars[#vars + 1] = ('{name: %s, value: "%s"}'):format(k, v) end
      table.sort(vars)
      return fixtures.kubeconfig(d .. '/kubeconfig', { server = sb.url, ca = sb.dir .. '/ca.crt', user =
        ('{exec: {apiVersion: client.authentication.k8s.io/v1, command: sh, args: ["%s"], '
          .. 'interactiveMode: Never, env: [%s]}}'):format(PLUGIN, table.concat(vars, ', ')) })
    end

    local function runs(count_file)
      return select(2, K.read_file(count_file):gsub('\n', ''))
    end

    it('runs the plugin once for all the requests of a run', function()
      local d = tmpdir()
      local count = d .. '/runs'
      local out, err, code = probe({ '--kubeconfig', plugin_kubeconfig(d, { COUNT_FILE = count, TOKEN = sb.token }),
        '-v', '6' })
      assert_probed(out, err, code)
      -- Discovery, the watch-list (the initial state and the watch on one stream) and
      -- GET: several requests, one plugin run.
      assert.is_true(select(2, err:gsub('%-> 200', '')) >= 3, err)
      assert.truthy(err:find('sendInitialEvents=true', 1, true), err)
      assert.equals(1, runs(count))
      assert.is_nil(err:find(sb.token, 1, true))
    end)

    it('runs the plugin again, once, after the token it gave is rejected with 401', function()
      local d = tmpdir()
      local count = d .. '/runs'
      local kc = plugin_kubeconfig(d, { COUNT_FILE = count, TOKEN = sb.token, FIRST_TOKEN = 'expired-token' })
      assert_probed(probe({ '--kubeconfig', kc }))
      assert.equals(2, runs(count))
    end)

    -- Three tasks GET the default namespace at once, each printing how it went.
    local AT_ONCE = [[
local left = 3
for _ = 1, 3 do
  klua.after(0, function()
    local ns, err = klua.api.request('GET', '/api/v1/namespaces/default')
    print(ns and 'got ' .. ns.metadata.name or 'failed: ' .. tostring(err))
    left = left - 1
    if left == 0 then klua.stop() end
  end)
end
]]

    it('runs the plugin once for the requests that wait for the credential together', function()
      local d = tmpdir()
      local count = d .. '/runs'
      local kc = plugin_kubeconfig(d, { COUNT_FILE = count, TOKEN = sb.token })
      local out, err, code = K.run_script(AT_ONCE, { kubeconfig = kc })
      assert.equals(0, code, err)
      assert.equals('got default\ngot default\ngot default\n', out)
      assert.equals(1, runs(count))
    end)

    it('gives up on requests after --request-timeout while the plugin runs, and kills it as klua ends', function()
      local d = tmpdir()
      local pid_file = d .. '/pid'
      local kc = plugin_kubeconfig(d, { COUNT_FILE = d .. '/runs', TOKEN = sb.token, MODE = 'hang', PID_FILE = pid_file })
      local out, err, code = K.run_script(AT_ONCE, { kubeconfig = kc, flags = { '--request-timeout', '1s' } })
      local pgid = assert(tonumber(K.read_file(pid_file)), 'the plugin did not start')
      finally(function() kill_group(pgid) end)
      assert.equals(0, code, err)
      local lines = K.lines(out)
      assert.equals(3, #lines, out)
      for _, line in ipairs(lines) do
        assert.equals('failed: no credential within 1 s: the exec plugin is still running (0 Timeout)', line)
      end
      assert_group_ends(pgid)
    end)

    describe('keeps timers on time', function()
      -- Runs GAPS with the plugin in mode; returns klua's process and the
      -- plugin's process group, which is killed after the spec whatever happens.
      local function gaps_with_plugin(mode)
        local d = tmpdir()
        local pid_file = d .. '/pid'
        local kc = plugin_kubeconfig(d, { COUNT_FILE = d .. '/runs', TOKEN = sb.token, MODE = mode, PID_FILE = pid_file })
        local p = K.spawn({ '--kubeconfig', kc, 'run', gaps_path })
        local pgid = testing.eventually(function() return tonumber(K.read_file(pid_file)) end, 10 * K.slowdown,
          { what = 'the plugin to start' })
        finally(function() kill_group(pgid) end)
        return p, pgid
      end

      it('while the plugin hangs, and SIGTERM stops klua and every process of the plugin', function()
        local p, pgid = gaps_with_plugin('hang')
        assert.truthy(p:wait_for('tick 30 ', 10 * K.slowdown), p:output() .. p:errors())
        assert.is_nil(p:output():find('got', 1, true))
        assert_loop_turned(p)
        p:signal()
        assert(p:wait(10 * K.slowdown), 'klua did not stop on SIGTERM')
        assert_group_ends(pgid)
      end)

      it('when the plugin exits, leaving a child that holds its stdout', function()
        local p, pgid = gaps_with_plugin('linger')
        assert.truthy(p:wait_for('got default\ntick', 10 * K.slowdown), p:output() .. p:errors())
        assert.is_true(group_running(pgid), "the plugin's child no longer holds its stdout")
        assert_loop_turned(p)
        p:stop()
      end)
    end)
  end)

  describe('with a tokenFile that is a FIFO', function()
    it('at the start, refuses it, naming it', function()
      local d = tmpdir()
      os.execute('mkfifo ' .. d .. '/token')
      local kc = fixtures.kubeconfig(d .. '/kubeconfig', { server = sb.url, ca = sb.dir .. '/ca.crt', user = '{tokenFile: token}' })
      local out, err, code = probe({ '--kubeconfig', kc })
      assert.equals(1, code, err)
      assert.equals('', out)
      assert.truthy(err:find('token file ' .. d .. '/token: not a regular file', 1, true), err)
    end)

    it('put in its place later, keeps the token it had at the re-read after a 401, timers keeping their time', function()
      local d = tmpdir()
      K.write_file(d .. '/token', 'rejected-token\n')
      local kc = fixtures.kubeconfig(d .. '/kubeconfig', { server = sb.url, ca = sb.dir .. '/ca.crt', user = '{tokenFile: token}' })
      local p = K.spawn({ '--kubeconfig', kc, 'run', gaps_path }, { env = { GO_FILE = d .. '/go' } })
      assert.truthy(p:wait_for('tick 3 ', 10 * K.slowdown), p:errors())
      assert(os.execute(('rm %s/token && mkfifo %s/token && touch %s/go'):format(d, d, d)))
      assert.truthy(p:wait_for('failed: [^\n]*\ntick', 10 * K.slowdown), p:output() .. p:errors())
      assert.truthy(p:errors():find('token file ' .. d .. '/token: not a regular file; keeping the previous token', 1, true),
        p:errors())
      assert_loop_turned(p)
      p:stop()
    end)
  end)

  it('uses the in-cluster service account when there is no kubeconfig', function()
    local sa = tmpdir()
    K.write_file(sa .. '/token', sb.token)
    K.write_file(sa .. '/ca.crt', K.read_file(sb.dir .. '/ca.crt'))
    K.write_file(sa .. '/namespace', 'kube-system')
    local out, err, code = probe({}, {
      KUBERNETES_SERVICE_HOST = '127.0.0.1',
      KUBERNETES_SERVICE_PORT = tostring(sb.port),
      KLUA_SERVICEACCOUNT_DIR = sa,
    })
    assert.equals(0, code, err)
    assert.equals('default kube-public kube-system\tdefault\tkube-system\n', out)
  end)
end)

describe('with TLS and client certificates', function()
  local sb = testing.with_sandbox { tls = true, auth = 'cert' }

  it('connects with the kubeconfig the sandbox wrote (embedded certificate and key)', function()
    assert_probed(probe({ '--kubeconfig', sb.kubeconfig }))
  end)

  it('connects with certificate and key files named in a kubeconfig', function()
    local kc = fixtures.kubeconfig(tmpdir() .. '/kubeconfig', { server = sb.url, ca = sb.dir .. '/ca.crt', user =
      ('{client-certificate: %s/client.crt, client-key: %s/client.key}'):format(sb.dir, sb.dir) })
    assert_probed(probe({ '--kubeconfig', kc }))
  end)

  it('fails with Unauthorized without a client certificate', function()
    local kc = fixtures.kubeconfig(tmpdir() .. '/kubeconfig', { server = sb.url, ca = sb.dir .. '/ca.crt' })
    local out, err, code = probe({ '--kubeconfig', kc })
    assert.is_true(code ~= 0)
    assert.equals('', out)
    assert.truthy(err:find('401 Unauthorized', 1, true), err)
  end)
end)

describe('over plain http', function()
  local sb = testing.with_sandbox { auth = 'token' }

  it('refuses to send a bearer token, before any request, unless --allow-insecure-credentials', function()
    local kc = fixtures.kubeconfig(tmpdir() .. '/kubeconfig', { server = sb.url, user = ('{token: %s}'):format(sb.token) })
    local before = sb:stats().requests
    local out, err, code = probe({ '--kubeconfig', kc })
    assert.equals(1, code)
    assert.equals('', out)
    assert.truthy(err:find('refusing to send credentials to ' .. sb.url .. ' over plain http', 1, true), err)
    assert.truthy(err:find('--allow-insecure-credentials', 1, true), err)
    assert.is_nil(err:find(sb.token, 1, true))
    assert.same(before, sb:stats().requests)
    assert_probed(probe({ '--kubeconfig', kc, '--allow-insecure-credentials' }))
  end)
end)
