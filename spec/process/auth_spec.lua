-- klua authenticates to the API server as kubectl does: bearer tokens,
-- token files, client certificates, exec credential plugins and the
-- in-cluster service account, always over a verified TLS connection unless
-- told otherwise. These specs run a small script that lists and gets
-- namespaces against sandboxes that require a token or a client certificate.
local sandbox = require 'support.sandbox'
local testing = require 'klua.testing'
local fixtures = require 'support.fixtures'
local K = require 'support.klua'

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

local probe_path
-- Temporary directories are removed when their describe block (or the file) ends.
local tmpdir = K.tmpdir

setup(function() probe_path = K.script(PROBE) end)

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
      -- Discovery, LIST, WATCH and GET: several requests, one plugin run.
      assert.is_true(select(2, err:gsub('%-> 200', '')) >= 4, err)
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
