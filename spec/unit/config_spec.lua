-- Connection configuration: where klua finds the API server and how it
-- authenticates, resolved the way kubectl resolves it (docs/config.md).
--
-- Every load passes `env`, so HOME, KUBECONFIG and the in-cluster variables
-- come from the spec, never from the machine running it. Requests go to a
-- local echo server (spec/fixtures/kubeconfig/echo-server.py) that reports
-- what arrived: the TLS server name, client certificate, Authorization
-- header, Host header and request target.
local testing = require('klua_testing')
local cjson = require('cjson')

local ROOT = os.getenv('KLUA_ROOT') or '.'
local FIX = ROOT .. '/spec/fixtures/kubeconfig'
local TLS = FIX .. '/tls'
local PLUGIN = FIX .. '/exec-plugin.sh'
local V1 = 'client.authentication.k8s.io/v1'
local V1BETA1 = 'client.authentication.k8s.io/v1beta1'

local harness = require('klua.testing')

local function read(path) return (assert(harness.read_file(path))) end
local write = harness.write_file

local function sh(cmd)
  local p = assert(io.popen(cmd))
  local out = p:read('a')
  p:close()
  return (out:gsub('%s+$', ''))
end

local function b64(text)
  local tmp = os.tmpname()
  write(tmp, text)
  local out = sh('base64 -w0 < ' .. tmp)
  os.remove(tmp)
  return out
end

local function lines(path)
  local n = 0
  for _ in io.lines(path) do n = n + 1 end
  return n
end

-- Replaces {{NAME}} in text with vars.NAME.
local function fill(text, vars)
  return (text:gsub('{{(%w+)}}', function(k) return assert(vars[k], 'no value for ' .. k) end))
end

local function find_plain(haystack, needle)
  return haystack:find(needle, 1, true) ~= nil
end

local server = {}
local dir, vars

local function load(opts)
  opts.env = opts.env or { HOME = dir }
  return testing.load_config(opts)
end

-- Writes a kubeconfig into the spec's directory and returns its path.
local function kubeconfig(name, text)
  local path = dir .. '/' .. name
  write(path, fill(text, vars))
  return path
end

-- A kubeconfig whose only context "c" reaches the echo server over TLS
-- with user "u" defined by user_yaml (indented as under `user:`).
local function with_user(name, user_yaml, cluster_extra)
  return kubeconfig(name, [[
apiVersion: v1
kind: Config
current-context: c
clusters:
- name: echo
  cluster:
    server: https://localhost:{{HTTPS}}
    certificate-authority: {{TLS}}/ca.crt
]] .. (cluster_extra or '') .. [[
contexts:
- name: c
  context: {cluster: echo, user: u}
users:
- name: u
  user:
]] .. user_yaml)
end

-- The same, but with the echo server's plain http port.
local function plain_with_user(name, user_yaml)
  return kubeconfig(name, [[
current-context: c
clusters:
- name: plain
  cluster: {server: 'http://127.0.0.1:{{HTTP}}'}
contexts:
- name: c
  context: {cluster: plain, user: u}
users:
- name: u
  user:
]] .. user_yaml)
end

local function echo(conn, url)
  local res, err = conn:request(url or fill('https://localhost:{{HTTPS}}/api', vars))
  assert(res, err)
  assert.equals(200, res.status)
  return cjson.decode(res.body)
end

setup(function()
  local pid = read('/proc/self/stat'):match('^(%d+)')
  server.pipe = assert(io.popen('exec python3 ' .. FIX .. '/echo-server.py ' .. pid))
  local info = cjson.decode(server.pipe:read('l'))
  server.pid = string.format('%d', info.pid)
  server.https, server.http = string.format('%d', info.https), string.format('%d', info.http)
end)

teardown(function()
  os.execute('kill ' .. server.pid)
  server.pipe:close()
end)

before_each(function()
  dir = sh('mktemp -d')
  vars = { DIR = dir, TLS = TLS, FIX = FIX, PLUGIN = PLUGIN,
           HTTPS = server.https, HTTP = server.http }
end)

after_each(function()
  os.execute('rm -rf ' .. dir)
end)

local SIMPLE = [[
apiVersion: v1
kind: Config
current-context: {{NAME}}
clusters:
- name: {{NAME}}
  cluster: {server: 'https://{{NAME}}.example:6443'}
contexts:
- name: {{NAME}}
  context: {cluster: {{NAME}}, namespace: ns-{{NAME}}}
]]

local function simple(path, name)
  vars.NAME = name
  os.execute('mkdir -p ' .. dir .. '/' .. (path:match('^(.*)/') or '.'))
  return kubeconfig(path, SIMPLE)
end

describe('configuration sources', function()
  it('reads ~/.kube/config when nothing else is given', function()
    simple('.kube/config', 'home')
    local c = assert(load {})
    assert.equals('https://home.example:6443', c.server)
    assert.equals('home', c.context)
    assert.equals('ns-home', c.namespace)
    assert.equals('kubeconfig', c.source)
  end)

  it('prefers the KUBECONFIG files over ~/.kube/config', function()
    simple('.kube/config', 'home')
    local path = simple('env.yaml', 'env')
    local c = assert(load { env = { HOME = dir, KUBECONFIG = path } })
    assert.equals('env', c.context)
  end)

  it('prefers --kubeconfig over KUBECONFIG, reading only that file', function()
    local env_path = simple('env.yaml', 'env')
    local flag_path = simple('flag.yaml', 'flag')
    local c = assert(load { kubeconfig = flag_path, env = { HOME = dir, KUBECONFIG = env_path } })
    assert.equals('flag', c.context)
    local _, err = load { kubeconfig = flag_path, context = 'env', env = { KUBECONFIG = env_path } }
    assert.equals('context "env" not found in ' .. flag_path .. ' (contexts: flag); choose one with --context or '
      .. 'set current-context', err)
  end)

  it('fails when the --kubeconfig file does not exist, even if others do', function()
    simple('.kube/config', 'home')
    local c, err = load { kubeconfig = dir .. '/missing.yaml' }
    assert.is_nil(c)
    assert.equals('kubeconfig ' .. dir .. '/missing.yaml (from --kubeconfig) does not exist', err)
  end)

  it('skips KUBECONFIG files that do not exist', function()
    local path = simple('present.yaml', 'present')
    local c = assert(load { env = { KUBECONFIG = dir .. '/absent.yaml:' .. path .. '::' } })
    assert.equals('present', c.context)
  end)

  it('fails when none of the KUBECONFIG files exists and klua is not in a cluster', function()
    simple('.kube/config', 'home')
    local list = dir .. '/a.yaml:' .. dir .. '/b.yaml'
    local c, err = load { env = { HOME = dir, KUBECONFIG = list } }
    assert.is_nil(c)
    assert.equals('no configuration: none of the files in KUBECONFIG (' .. list .. ') exists, and '
      .. 'not running in a cluster (KUBERNETES_SERVICE_HOST or KUBERNETES_SERVICE_PORT is unset); '
      .. 'pass --kubeconfig or --server, or set KUBECONFIG', err)
  end)

  it('says where it looked when there is no configuration at all', function()
    local _, err = load { env = { HOME = dir } }
    assert.truthy(find_plain(err, 'no configuration: ' .. dir .. '/.kube/config does not exist'))
  end)

  it('reads a kubeconfig of many entries, past the first read buffer, and refuses one past 16 MiB', function()
    local parts = { 'current-context: c150\nclusters:\n' }
    for i = 1, 200 do parts[#parts + 1] = ('- name: k%d\n  cluster: {server: "https://k%d.example:6443"}\n'):format(i, i) end
    parts[#parts + 1] = 'contexts:\n'
    for i = 1, 200 do parts[#parts + 1] = ('- name: c%d\n  context: {cluster: k%d, namespace: n%d}\n'):format(i, i, i) end
    local text = table.concat(parts)
    assert.is_true(#text > 3 * 4096)
    local c = assert(load { kubeconfig = kubeconfig('many.yaml', text) })
    assert.equals('https://k150.example:6443', c.server)
    assert.equals('n150', c.namespace)
    local big = kubeconfig('big.yaml', text .. '#' .. ('x'):rep(16 * 1024 * 1024))
    local _, err = load { kubeconfig = big }
    assert.equals('kubeconfig ' .. big .. ': larger than 16 MiB', err)
  end)

  it('reports invalid YAML with the file and line', function()
    local path = kubeconfig('broken.yaml', 'apiVersion: v1\nclusters:\n- name: a\n  cluster: {server: x\n')
    local _, err = load { kubeconfig = path }
    assert.equals('kubeconfig ' .. path .. ': invalid YAML at line 5: did not find expected \',\' or \'}\'', err)
  end)

  it('reports a wrongly shaped kubeconfig with the file and line', function()
    local path = kubeconfig('shape.yaml', 'apiVersion: v1\nclusters:\n  name: a\n')
    local _, err = load { kubeconfig = path }
    assert.equals('kubeconfig ' .. path .. ' line 3: clusters must be a list', err)
  end)
end)

describe('merging KUBECONFIG files', function()
  local first = [[
current-context: one
clusters:
- name: shared
  cluster: {server: 'https://first.example'}
users:
- name: shared
  user: {token: first-token}
contexts:
- name: one
  context: {cluster: shared, user: shared, namespace: first-ns}
]]
  local second = [[
current-context: two
clusters:
- name: shared
  cluster: {server: 'https://second.example', insecure-skip-tls-verify: true}
- name: only-second
  cluster: {server: 'https://only-second.example'}
users:
- name: shared
  user: {username: second, password: second-password}
contexts:
- name: one
  context: {cluster: only-second, namespace: second-ns}
- name: two
  context: {cluster: shared, user: shared}
]]

  it('takes each cluster, user and context from the first file that names it, whole', function()
    local list = kubeconfig('1.yaml', first) .. ':' .. kubeconfig('2.yaml', second)
    local c = assert(load { env = { KUBECONFIG = list } })
    assert.equals('one', c.context)
    assert.equals('https://first.example', c.server)
    assert.equals('first-ns', c.namespace)
    assert.equals('token', c.auth)
    assert.is_false(c.insecure)
    c = assert(load { context = 'two', env = { KUBECONFIG = list } })
    assert.equals('https://first.example', c.server)
    assert.equals('token', c.auth)
  end)

  it('takes current-context from the first file that sets one', function()
    local none = kubeconfig('0.yaml', 'apiVersion: v1\nkind: Config\n')
    local list = none .. ':' .. kubeconfig('2.yaml', second) .. ':' .. kubeconfig('1.yaml', first)
    local c = assert(load { env = { KUBECONFIG = list } })
    assert.equals('two', c.context)
    assert.equals('https://second.example', c.server)
    assert.equals('basic', c.auth)
  end)

  it('uses entries that only a later file defines', function()
    local list = kubeconfig('1.yaml', first) .. ':' .. kubeconfig('2.yaml', second .. [[
- name: three
  context: {cluster: only-second}
]])
    local c = assert(load { context = 'three', env = { KUBECONFIG = list } })
    assert.equals('https://only-second.example', c.server)
  end)

  it('lets a later entry of the same file replace an earlier one', function()
    local path = kubeconfig('dup.yaml', [[
current-context: c
clusters:
- name: k
  cluster: {server: 'https://earlier.example'}
- name: k
  cluster: {server: 'https://later.example'}
contexts:
- name: c
  context: {cluster: k}
]])
    assert.equals('https://later.example', assert(load { kubeconfig = path }).server)
  end)
end)

describe('contexts', function()
  local two = [[
current-context: a
clusters:
- name: ka
  cluster: {server: 'https://a.example/'}
- name: kb
  cluster: {server: 'b.example:6443'}
contexts:
- name: a
  context: {cluster: ka, namespace: team-a}
- name: b
  context: {cluster: kb}
- name: no-cluster
  context: {namespace: x}
- name: bad-cluster
  context: {cluster: nope}
- name: bad-user
  context: {cluster: ka, user: nobody}
]]

  it('uses current-context unless --context names another', function()
    local path = kubeconfig('two.yaml', two)
    assert.equals('a', assert(load { kubeconfig = path }).context)
    local c = assert(load { kubeconfig = path, context = 'b' })
    assert.equals('b', c.context)
  end)

  it("takes the namespace from the context, else \"default\"", function()
    local path = kubeconfig('two.yaml', two)
    assert.equals('team-a', assert(load { kubeconfig = path }).namespace)
    assert.equals('default', assert(load { kubeconfig = path, context = 'b' }).namespace)
  end)

  it('drops trailing slashes from the server and reads a bare host:port as https', function()
    local path = kubeconfig('two.yaml', two)
    assert.equals('https://a.example', assert(load { kubeconfig = path }).server)
    assert.equals('https://b.example:6443', assert(load { kubeconfig = path, context = 'b' }).server)
  end)

  it('reports an unknown context with the files read, the contexts they define and how to choose one', function()
    local path = kubeconfig('two.yaml', two)
    local _, err = load { kubeconfig = path, context = 'x' }
    assert.equals('context "x" not found in ' .. path .. ' (contexts: a, b, no-cluster, bad-cluster, bad-user); '
      .. 'choose one with --context or set current-context', err)
  end)

  it('names only the KUBECONFIG files that exist, and says so when they define no context', function()
    local first = kubeconfig('first.yaml', 'current-context: gone\nclusters:\n- name: k\n  cluster: {server: x}\n')
    local second = kubeconfig('second.yaml', 'contexts:\n- name: kept\n  context: {cluster: k}\n')
    local list = first .. ':' .. dir .. '/missing.yaml:' .. second
    local _, err = load { env = { KUBECONFIG = list } }
    assert.equals('current-context "gone" not found in ' .. first .. ', ' .. second .. ' (contexts: kept); '
      .. 'choose one with --context or set current-context', err)
    _, err = load { kubeconfig = first }
    assert.equals('current-context "gone" not found in ' .. first .. ' (no contexts); '
      .. 'choose one with --context or set current-context', err)
  end)

  it('reports a context that refers to a missing cluster or user', function()
    local path = kubeconfig('two.yaml', two)
    local _, err = load { kubeconfig = path, context = 'bad-cluster' }
    assert.equals('context "bad-cluster" refers to cluster "nope", which is not in kubeconfig', err)
    _, err = load { kubeconfig = path, context = 'bad-user' }
    assert.equals('context "bad-user" refers to user "nobody", which is not in kubeconfig', err)
  end)

  it('reports a context without a cluster, unless --server gives one', function()
    local path = kubeconfig('two.yaml', two)
    local _, err = load { kubeconfig = path, context = 'no-cluster' }
    assert.equals('context "no-cluster" names no cluster; add one or pass --server', err)
    local c = assert(load { kubeconfig = path, context = 'no-cluster', server = 'https://s.example' })
    assert.equals('https://s.example', c.server)
    assert.equals('x', c.namespace)
  end)

  it('reports a cluster without a server', function()
    local path = kubeconfig('k.yaml', [[
current-context: c
clusters:
- name: empty
  cluster: {certificate-authority-data: ''}
contexts:
- name: c
  context: {cluster: empty}
]])
    local _, err = load { kubeconfig = path }
    assert.equals('cluster "empty" has no server; set one or pass --server', err)
  end)

  it('asks for --context when the kubeconfig has no current-context', function()
    local path = kubeconfig('k.yaml', 'contexts:\n- name: a\n  context: {}\n')
    local _, err = load { kubeconfig = path }
    assert.equals('kubeconfig has no current-context; pass --context NAME', err)
  end)

  it('refuses a server that is not an http or https URL', function()
    local _, err = load { server = 'ftp://files.example' }
    assert.equals('server "ftp://files.example" is not an http:// or https:// URL', err)
  end)
end)

describe('impersonation', function()
  local AS = '    token: t\n    as: system:serviceaccount:ns:sa\n    as-uid: "42"\n'
    .. '    as-groups: [system:serviceaccounts, team a]\n'
    .. '    as-user-extra: {acme.com/project: [blue, green], "scopes%": [x]}\n'

  it("sends client-go's Impersonate-* headers for the user's as fields", function()
    local c = assert(load { kubeconfig = with_user('k.yaml', AS) })
    assert.equals('system:serviceaccount:ns:sa', c.as)
    -- The extra keys percent-encoded as client-go's headerKeyEscape does.
    assert.same({ 'Authorization: Bearer t', 'Impersonate-User: system:serviceaccount:ns:sa',
      'Impersonate-Uid: 42', 'Impersonate-Group: system:serviceaccounts', 'Impersonate-Group: team a',
      'Impersonate-Extra-acme.com%2Fproject: blue', 'Impersonate-Extra-acme.com%2Fproject: green',
      'Impersonate-Extra-scopes%25: x' }, assert(c:prepare()))
  end)

  it('takes --as, --as-uid and --as-group over the fields of the same meaning only', function()
    local c = assert(load { kubeconfig = with_user('k.yaml', AS), as = 'alice', as_groups = { 'g1', 'g2' } })
    assert.same({ 'Authorization: Bearer t', 'Impersonate-User: alice', 'Impersonate-Uid: 42',
      'Impersonate-Group: g1', 'Impersonate-Group: g2', 'Impersonate-Extra-acme.com%2Fproject: blue',
      'Impersonate-Extra-acme.com%2Fproject: green', 'Impersonate-Extra-scopes%25: x' }, assert(c:prepare()))
    c = assert(load { server = 'https://flags.example', as = 'bob', as_uid = '7' })
    assert.same({ 'Impersonate-User: bob', 'Impersonate-Uid: 7' }, assert(c:prepare()))
  end)

  it('refuses groups or a uid without a user, and values that would break a header', function()
    local _, err = load { server = 'https://flags.example', as_groups = { 'g' } }
    assert.equals('as-uid, as-groups and as-user-extra (--as-uid, --as-group) need a user to '
      .. 'impersonate: set as, or pass --as', err)
    _, err = load { server = 'https://flags.example', as = 'alice\r\nX-Injected: 1' }
    assert.equals('the user to impersonate (as, --as) contains control characters', err)
    _, err = load { kubeconfig = with_user('k2.yaml', '    as: alice\n    as-groups: x\n') }
    assert.matches('user "u": as%-groups must be a list of strings$', err)
  end)
end)

describe('disable-compression', function()
  it("is read from the cluster, and --disable-compression adds to it", function()
    assert.is_nil(assert(load { kubeconfig = with_user('k.yaml', '    token: t\n') }).disable_compression)
    local c = assert(load { kubeconfig = with_user('k2.yaml', '    token: t\n', '    disable-compression: true\n') })
    assert.is_true(c.disable_compression)
    assert.is_true(assert(load { server = 'https://flags.example', disable_compression = true }).disable_compression)
  end)
end)

describe('Warning headers', function()
  it("are read as client-go's ParseWarningHeaders reads them; 299s with a text kept", function()
    assert.same({ 'a', 'b "quoted" \\ c', 'after a date' },
      testing.parse_warnings('299 - "a", 299 kube-apiserver "b \\"quoted\\" \\\\ c", '
        .. '199 - "not a 299", 299 - "", 299 - "after a date" "Wed, 21 Oct 2015 07:28:00 GMT"'))
    assert.same({ 'one' }, testing.parse_warnings('299 - "one", 99 - "bad code", 299 - "dropped"'))
    assert.same({}, testing.parse_warnings('299 - unquoted'))
    assert.same({}, testing.parse_warnings('299 - "unterminated'))
    assert.same({ 'x' }, testing.parse_warnings('  299 - "x"  \r\n'))
  end)
end)

describe('--server and --token', function()
  it('make a connection without any kubeconfig', function()
    local c = assert(load { server = 'https://flags.example:6443', token = 'flag-token' })
    assert.same({ server = 'https://flags.example:6443', namespace = 'default', context = '',
                  source = 'flags', auth = 'token', ca = 'none', client_cert = 'none',
                  insecure = false }, c:describe())
    assert.same({ 'Authorization: Bearer flag-token' }, assert(c:prepare()))
  end)

  it('override the server and the credentials of the kubeconfig', function()
    local path = with_user('k.yaml', '    username: admin\n    password: hunter2\n')
    local c = assert(load { kubeconfig = path, server = 'https://other.example', token = 'flag-token' })
    assert.equals('https://other.example', c.server)
    assert.equals('token', c.auth)
    assert.equals('file', c.ca)
    assert.same({ 'Authorization: Bearer flag-token' }, assert(c:prepare()))
  end)

  it('send the token to the server', function()
    local c = assert(load { server = fill('https://localhost:{{HTTPS}}', vars), token = 'flag-token',
                            insecure = true })
    assert.equals('Bearer flag-token', echo(c).authorization)
  end)
end)

describe('TLS settings', function()
  it('verifies the server against certificate-authority, relative to the kubeconfig', function()
    os.execute('mkdir -p ' .. dir .. '/sub/certs && cp ' .. TLS .. '/ca.crt ' .. dir .. '/sub/certs/')
    local path = kubeconfig('sub/k.yaml', [[
current-context: c
clusters:
- name: echo
  cluster: {server: 'https://localhost:{{HTTPS}}', certificate-authority: certs/ca.crt}
contexts:
- name: c
  context: {cluster: echo}
]])
    local c = assert(load { kubeconfig = path })
    assert.equals('file', c.ca)
    assert.equals('localhost', echo(c).sni)
  end)

  it('verifies the server against certificate-authority-data', function()
    vars.CA = b64(read(TLS .. '/ca.crt'))
    local path = kubeconfig('k.yaml', [[
current-context: c
clusters:
- name: echo
  cluster: {server: 'https://localhost:{{HTTPS}}', certificate-authority-data: {{CA}}}
contexts:
- name: c
  context: {cluster: echo}
]])
    local c = assert(load { kubeconfig = path })
    assert.equals('data', c.ca)
    assert.equals(200, assert(c:request(fill('https://localhost:{{HTTPS}}/', vars))).status)
  end)

  it('rejects a server its CA did not sign', function()
    local c = assert(load { kubeconfig = with_user('k.yaml', '    {}\n') })
    assert.truthy(c:request(fill('https://localhost:{{HTTPS}}/', vars)))
    local path = kubeconfig('other.yaml', (read(dir .. '/k.yaml'):gsub('ca%.crt', 'other-ca.crt')))
    local res, err = assert(load { kubeconfig = path }):request(fill('https://localhost:{{HTTPS}}/', vars))
    assert.is_nil(res)
    assert.truthy(find_plain(err, 'SSL peer certificate'))
  end)

  it('verifies against the system CAs when no CA is configured', function()
    local c = assert(load { server = fill('https://localhost:{{HTTPS}}', vars) })
    assert.equals('none', c.ca)
    local res, err = c:request(fill('https://localhost:{{HTTPS}}/', vars))
    assert.is_nil(res)
    assert.truthy(find_plain(err, 'SSL peer certificate'))
  end)

  it('checks the host name: a certificate for other names is refused', function()
    local c = assert(load { kubeconfig = with_user('k.yaml', '    {}\n') })
    local res, err = c:request(fill('https://127.0.0.1:{{HTTPS}}/', vars))
    assert.is_nil(res)
    assert.truthy(find_plain(err, 'SSL peer certificate'))
  end)

  it('skips verification with insecure-skip-tls-verify', function()
    local path = kubeconfig('k.yaml', [[
current-context: c
clusters:
- name: echo
  cluster: {server: 'https://127.0.0.1:{{HTTPS}}', insecure-skip-tls-verify: true}
contexts:
- name: c
  context: {cluster: echo}
]])
    local c = assert(load { kubeconfig = path })
    assert.is_true(c.insecure)
    assert.equals(200, assert(c:request(fill('https://127.0.0.1:{{HTTPS}}/', vars))).status)
  end)

  it('refuses a cluster with both insecure-skip-tls-verify and a CA', function()
    local path = with_user('k.yaml', '    {}\n', '    insecure-skip-tls-verify: true\n')
    local _, err = load { kubeconfig = path }
    assert.equals('cluster "echo" sets both insecure-skip-tls-verify and a certificate authority; remove one', err)
  end)

  it('lets --insecure-skip-tls-verify drop the kubeconfig CA', function()
    local c = assert(load { kubeconfig = with_user('k.yaml', '    {}\n'), insecure = true })
    assert.is_true(c.insecure)
    assert.equals('none', c.ca)
    assert.equals(200, assert(c:request(fill('https://127.0.0.1:{{HTTPS}}/', vars))).status)
  end)

  it('sends tls-server-name as SNI and verifies the certificate against it', function()
    local path = kubeconfig('k.yaml', [[
current-context: c
clusters:
- name: by-ip
  cluster:
    server: https://127.0.0.1:{{HTTPS}}
    certificate-authority: {{TLS}}/ca.crt
    tls-server-name: kube.test
- name: wrong-name
  cluster:
    server: https://127.0.0.1:{{HTTPS}}
    certificate-authority: {{TLS}}/ca.crt
    tls-server-name: elsewhere.test
contexts:
- name: c
  context: {cluster: by-ip}
- name: wrong
  context: {cluster: wrong-name}
]])
    local c = assert(load { kubeconfig = path })
    assert.equals('kube.test', c.tls_server_name)
    local seen = echo(c, fill('https://127.0.0.1:{{HTTPS}}/api', vars))
    assert.equals('kube.test', seen.sni)
    assert.equals(fill('127.0.0.1:{{HTTPS}}', vars), seen.host)
    local res, err = assert(load { kubeconfig = path, context = 'wrong' })
      :request(fill('https://127.0.0.1:{{HTTPS}}/api', vars))
    assert.is_nil(res)
    assert.truthy(find_plain(err, 'SSL peer certificate'))
  end)

  it('drops the kubeconfig tls-server-name when --server overrides the server', function()
    local path = with_user('k.yaml', '    {}\n', '    tls-server-name: kube.test\n')
    local c = assert(load { kubeconfig = path, server = 'https://other.example' })
    assert.is_nil(c.tls_server_name)
  end)

  it('reports an unreadable CA file and bad base64 without quoting the data', function()
    local good = read(with_user('k.yaml', '    {}\n'))
    local _, err = load { kubeconfig = kubeconfig('missing.yaml', (good:gsub('ca%.crt', 'nope.crt'))) }
    assert.equals('cluster "echo": certificate-authority ' .. TLS .. '/nope.crt: No such file or directory', err)
    local bad = kubeconfig('bad.yaml', [[
current-context: c
clusters:
- name: echo
  cluster: {server: 'https://x.example', certificate-authority-data: 'not*base64!'}
contexts:
- name: c
  context: {cluster: echo}
]])
    _, err = load { kubeconfig = bad }
    assert.equals('cluster "echo": certificate-authority-data is not valid base64', err)
  end)

  it('sends requests through proxy-url and hides its password when described', function()
    local path = kubeconfig('k.yaml', [[
current-context: c
clusters:
- name: behind-proxy
  cluster:
    server: http://api.internal.example
    proxy-url: http://user:proxy-secret@127.0.0.1:{{HTTP}}
contexts:
- name: c
  context: {cluster: behind-proxy}
]])
    local c = assert(load { kubeconfig = path })
    assert.equals(fill('http://<redacted>@127.0.0.1:{{HTTP}}', vars), c.proxy)
    local seen = echo(c, 'http://api.internal.example/api/v1/pods')
    assert.equals('http://api.internal.example/api/v1/pods', seen.path)
    assert.equals('api.internal.example', seen.host)
  end)
end)

describe('user credentials', function()
  it('sends a token as a bearer token', function()
    local c = assert(load { kubeconfig = with_user('k.yaml', '    token: static-token\n') })
    assert.equals('token', c.auth)
    assert.same({ 'Authorization: Bearer static-token' }, assert(c:prepare()))
    assert.equals('Bearer static-token', echo(c).authorization)
    assert.is_false(c:unauthorized())
  end)

  it('refuses to send credentials over plain http unless allowed', function()
    local path = plain_with_user('k.yaml', '    token: plain-token\n')
    local c = assert(load { kubeconfig = path })
    local res, err = c:request(fill('http://127.0.0.1:{{HTTP}}/', vars))
    assert.is_nil(res)
    assert.equals(fill('refusing to send credentials to http://127.0.0.1:{{HTTP}} over plain http; '
      .. 'use an https:// server, or pass --allow-insecure-credentials if the network is trusted', vars), err)
    c = assert(load { kubeconfig = path, allow_insecure_credentials = true })
    assert.equals('Bearer plain-token', echo(c, fill('http://127.0.0.1:{{HTTP}}/', vars)).authorization)
  end)

  it('talks plain http without credentials', function()
    local c = assert(load { server = fill('http://127.0.0.1:{{HTTP}}', vars) })
    assert.equals('none', c.auth)
    assert.is_nil(echo(c, fill('http://127.0.0.1:{{HTTP}}/', vars)).authorization)
  end)

  it('reads tokenFile relative to the kubeconfig, trimmed', function()
    write(dir .. '/token', '  file-token-1\n')
    local c = assert(load { kubeconfig = with_user('k.yaml', '    tokenFile: token\n') })
    assert.equals('token-file', c.auth)
    assert.same({ 'Authorization: Bearer file-token-1' }, assert(c:prepare()))
  end)

  it('re-reads tokenFile once a minute, not on every request', function()
    write(dir .. '/token', 'file-token-1\n')
    local c = assert(load { kubeconfig = with_user('k.yaml', '    tokenFile: token\n') })
    write(dir .. '/token', 'file-token-2\n')
    c:advance_clock(30)
    assert.same({ 'Authorization: Bearer file-token-1' }, assert(c:prepare()))
    c:advance_clock(31)
    assert.same({ 'Authorization: Bearer file-token-2' }, assert(c:prepare()))
  end)

  it('re-reads tokenFile after a 401 and says whether the token changed', function()
    write(dir .. '/token', 'file-token-1\n')
    local c = assert(load { kubeconfig = with_user('k.yaml', '    tokenFile: token\n') })
    assert.is_false(c:unauthorized())
    write(dir .. '/token', 'file-token-2\n')
    assert.is_true(c:unauthorized())
    assert.same({ 'Authorization: Bearer file-token-2' }, assert(c:prepare()))
  end)

  it('keeps the last token when tokenFile disappears after loading', function()
    write(dir .. '/token', 'file-token-1\n')
    local c = assert(load { kubeconfig = with_user('k.yaml', '    tokenFile: token\n') })
    os.remove(dir .. '/token')
    assert.is_false(c:unauthorized())
    assert.same({ 'Authorization: Bearer file-token-1' }, assert(c:prepare()))
  end)

  it('prefers tokenFile over token when both are set', function()
    write(dir .. '/token', 'from-file\n')
    local c = assert(load { kubeconfig = with_user('k.yaml', '    token: inline\n    tokenFile: token\n') })
    assert.same({ 'Authorization: Bearer from-file' }, assert(c:prepare()))
  end)

  it('reports a missing or empty tokenFile', function()
    local _, err = load { kubeconfig = with_user('k.yaml', '    tokenFile: token\n') }
    assert.equals('user "u": token file ' .. dir .. '/token: No such file or directory', err)
    write(dir .. '/token', '\n')
    _, err = load { kubeconfig = dir .. '/k.yaml' }
    assert.equals('user "u": token file ' .. dir .. '/token is empty', err)
  end)

  it('uses basic auth for username and password', function()
    local c = assert(load { kubeconfig = with_user('k.yaml', '    username: admin\n    password: hunter2\n') })
    assert.equals('basic', c.auth)
    assert.same({}, assert(c:prepare()))
    assert.equals('Basic ' .. b64('admin:hunter2'), echo(c).authorization)
  end)

  it('refuses a user with both a token and a password', function()
    local _, err = load { kubeconfig = with_user('k.yaml', '    token: t\n    username: a\n    password: p\n') }
    assert.equals('user "u" sets both a token and a username/password; keep one', err)
  end)

  it('presents client-certificate and client-key files', function()
    local c = assert(load { kubeconfig = with_user('k.yaml',
      '    client-certificate: {{TLS}}/client.crt\n    client-key: {{TLS}}/client.key\n') })
    assert.equals('client-cert', c.auth)
    assert.equals('file', c.client_cert)
    assert.equals('spec-client', echo(c).client_cn)
  end)

  it('presents client-certificate-data and client-key-data from memory', function()
    local user = '    client-certificate-data: ' .. b64(read(TLS .. '/client.crt')) .. '\n'
      .. '    client-key-data: ' .. b64(read(TLS .. '/client.key')) .. '\n'
    local c = assert(load { kubeconfig = with_user('k.yaml', user) })
    assert.equals('data', c.client_cert)
    assert.equals('spec-client', echo(c).client_cn)
  end)

  it('sends a token together with a client certificate', function()
    local c = assert(load { kubeconfig = with_user('k.yaml', '    client-certificate: {{TLS}}/client.crt\n'
      .. '    client-key: {{TLS}}/client.key\n    token: both-token\n') })
    local seen = echo(c)
    assert.equals('spec-client', seen.client_cn)
    assert.equals('Bearer both-token', seen.authorization)
  end)

  it('reports a certificate without a key, and unreadable key files', function()
    local _, err = load { kubeconfig = with_user('k.yaml', '    client-certificate: {{TLS}}/client.crt\n') }
    assert.equals('user "u" has a client certificate but no client key', err)
    _, err = load { kubeconfig = with_user('k2.yaml',
      '    client-certificate: {{TLS}}/client.crt\n    client-key: missing.key\n') }
    assert.equals('user "u": client-key ' .. dir .. '/missing.key: No such file or directory', err)
    _, err = load { kubeconfig = with_user('k3.yaml',
      '    client-certificate-data: ' .. b64('cert') .. '\n    client-key-data: "%%%"\n') }
    assert.equals('user "u": client-key-data is not valid base64', err)
  end)

  it('refuses legacy auth-providers', function()
    local _, err = load { kubeconfig = with_user('k.yaml', '    auth-provider: {name: oidc}\n') }
    assert.equals('user "u" uses auth-provider "oidc", which klua does not support; '
      .. 'use an exec credential plugin instead', err)
  end)

  it('refuses a token that would break the Authorization header', function()
    local _, err = load { server = 'https://x.example', token = 'abc\r\nX-Injected: 1' }
    assert.equals('--token: the token contains control characters', err)
  end)
end)

-- The exec user block for a plugin run; env adds PLUGIN_* variables.
local function exec_user(opts)
  local env = { '      - {name: PLUGIN_LOG, value: ' .. dir .. '/runs}' }
  for k, v in pairs(opts.env or {}) do
    env[#env + 1] = '      - {name: ' .. k .. ', value: "' .. v .. '"}'
  end
  table.sort(env)
  return '    exec:\n'
    .. '      apiVersion: ' .. (opts.api or V1) .. '\n'
    .. '      command: ' .. (opts.command or PLUGIN) .. '\n'
    .. (opts.extra or '      interactiveMode: Never\n')
    .. '      args: ["--first", "second arg"]\n'
    .. '      env:\n' .. table.concat(env, '\n') .. '\n'
end

local function runs()
  local f = io.open(dir .. '/runs')
  if not f then return 0 end
  f:close()
  return lines(dir .. '/runs')
end

describe('exec credential plugins', function()
  it('run the command with its args, env and KUBERNETES_EXEC_INFO (v1)', function()
    local c = assert(load { kubeconfig = with_user('k.yaml', exec_user {
      env = { PLUGIN_ECHO_VAR = 'PLUGIN_TOKEN', PLUGIN_TOKEN = 'from-env' } }) })
    assert.equals('exec', c.auth)
    assert.equals(0, runs())
    assert.same({ 'Authorization: Bearer from-env-1' }, assert(c:prepare()))
    assert.equals(1, runs())
    assert.equals('--first\nsecond arg\n', read(dir .. '/runs.args'))
    assert.equals('from-env', read(dir .. '/runs.var'))
    assert.same({ kind = 'ExecCredential', apiVersion = V1, spec = { interactive = false } },
      cjson.decode(read(dir .. '/runs.info')))
    assert.equals('Bearer from-env-1', echo(c).authorization)
    assert.equals(1, runs())
  end)

  it('speak v1beta1, where interactiveMode is optional', function()
    local c = assert(load { kubeconfig = with_user('k.yaml', exec_user { api = V1BETA1, extra = '' }) })
    assert.same({ 'Authorization: Bearer plugin-token-1' }, assert(c:prepare()))
    assert.equals(V1BETA1, cjson.decode(read(dir .. '/runs.info')).apiVersion)
  end)

  it('need interactiveMode with v1, reported only for the user in use', function()
    local path = with_user('k.yaml', '    token: fine\n- name: broken\n  user:\n'
      .. exec_user { extra = '' })
    assert(load { kubeconfig = path })
    path = with_user('k2.yaml', exec_user { extra = '' })
    local _, err = load { kubeconfig = path }
    assert.equals('kubeconfig ' .. path .. ': user "u": exec interactiveMode must be set for '
      .. V1 .. ' (Never, IfAvailable or Always)', err)
  end)

  it('tell the plugin about the cluster with provideClusterInfo', function()
    local path = with_user('k.yaml', exec_user { extra = '      interactiveMode: Never\n'
      .. '      provideClusterInfo: true\n' }, '    tls-server-name: kube.test\n')
    assert(assert(load { kubeconfig = path }):prepare())
    local info = cjson.decode(read(dir .. '/runs.info'))
    assert.same({
      server = fill('https://localhost:{{HTTPS}}', vars),
      ['tls-server-name'] = 'kube.test',
      ['certificate-authority-data'] = b64(read(TLS .. '/ca.crt')),
    }, info.spec.cluster)
  end)

  it('run a relative command from the kubeconfig directory', function()
    os.execute('mkdir -p ' .. dir .. '/bin && cp ' .. PLUGIN .. ' ' .. dir .. '/bin/')
    local c = assert(load { kubeconfig = with_user('k.yaml', exec_user { command = './bin/exec-plugin.sh' }) })
    assert.same({ 'Authorization: Bearer plugin-token-1' }, assert(c:prepare()))
  end)

  it('cache the credential until its expirationTimestamp', function()
    local c = assert(load { kubeconfig = with_user('k.yaml', exec_user { env = { PLUGIN_EXPIRES = 'future' } }) })
    assert.same({ 'Authorization: Bearer plugin-token-1' }, assert(c:prepare()))
    assert.same({ 'Authorization: Bearer plugin-token-1' }, assert(c:prepare()))
    assert.equals(1, runs())
    c:advance_clock(2 * 3600)
    assert.same({ 'Authorization: Bearer plugin-token-2' }, assert(c:prepare()))
    assert.equals(2, runs())
  end)

  it('run again for every request while the credential comes back expired', function()
    local c = assert(load { kubeconfig = with_user('k.yaml', exec_user { env = { PLUGIN_EXPIRES = 'past' } }) })
    assert(c:prepare())
    assert(c:prepare())
    assert.equals(2, runs())
  end)

  it('read expirationTimestamp as RFC 3339, with fractions and zone offsets', function()
    local c = assert(load { kubeconfig = with_user('k.yaml', exec_user {
      env = { PLUGIN_EXPIRES = '2999-12-31T23:59:59.999999+14:00' } }) })
    assert(c:prepare())
    assert(c:prepare())
    assert.equals(1, runs())
    c = assert(load { kubeconfig = with_user('k2.yaml', exec_user {
      env = { PLUGIN_EXPIRES = '2001-02-03t04:05:06-07:00' } }) })
    assert(c:prepare())
    assert(c:prepare())
    assert.equals(3, runs())
    c = assert(load { kubeconfig = with_user('k3.yaml', exec_user { env = { PLUGIN_EXPIRES = 'tomorrow' } }) })
    local _, err = c:prepare()
    assert.equals('exec plugin "' .. PLUGIN .. '" returned an invalid status.expirationTimestamp '
      .. '(want RFC 3339, like 2006-01-02T15:04:05Z)', err)
  end)

  it('keep a credential without expirationTimestamp until a 401', function()
    local c = assert(load { kubeconfig = with_user('k.yaml', exec_user {}) })
    assert(c:prepare())
    c:advance_clock(30 * 24 * 3600)
    assert(c:prepare())
    assert.equals(1, runs())
  end)

  it('run again once after 401s, and do not loop on a fresh credential', function()
    local c = assert(load { kubeconfig = with_user('k.yaml', exec_user {}) })
    assert.is_false(c:unauthorized()) -- nothing was sent yet
    assert.same({ 'Authorization: Bearer plugin-token-1' }, assert(c:prepare()))
    assert.is_true(c:unauthorized())
    assert.is_true(c:unauthorized()) -- a second request with the same credential
    assert.same({ 'Authorization: Bearer plugin-token-2' }, assert(c:prepare()))
    assert.same({ 'Authorization: Bearer plugin-token-2' }, assert(c:prepare()))
    assert.equals(2, runs())
    assert.is_false(c:unauthorized()) -- the fresh credential is rejected too
    assert.equals(2, runs())
  end)

  it('present a client certificate the plugin returns', function()
    local c = assert(load { kubeconfig = with_user('k.yaml', exec_user { env = { PLUGIN_MODE = 'cert' } }) })
    local seen = echo(c)
    assert.equals('spec-client', seen.client_cn)
    assert.is_nil(seen.authorization)
  end)

  it('report a failing plugin by command and first stderr line, never its output', function()
    local c = assert(load { kubeconfig = with_user('k.yaml', exec_user { env = { PLUGIN_MODE = 'fail' } }) })
    local headers, err = c:prepare()
    assert.is_nil(headers)
    assert.equals('exec plugin "' .. PLUGIN .. '" failed with exit status 3: '
      .. 'login expired: run corp-login again', err)
  end)

  it('report output that is not an ExecCredential without quoting it', function()
    local c = assert(load { kubeconfig = with_user('k.yaml', exec_user { env = { PLUGIN_MODE = 'garbage' } }) })
    local _, err = c:prepare()
    assert.equals('exec plugin "' .. PLUGIN .. '" did not print an ExecCredential with apiVersion ' .. V1, err)
    c = assert(load { kubeconfig = with_user('k2.yaml', exec_user { env = { PLUGIN_API = V1BETA1 } }) })
    _, err = c:prepare()
    assert.equals('exec plugin "' .. PLUGIN .. '" did not print an ExecCredential with apiVersion ' .. V1, err)
  end)

  it('report a missing command with its installHint', function()
    local c = assert(load { kubeconfig = with_user('k.yaml', exec_user {
      command = 'klua-no-such-plugin', extra = '      interactiveMode: Never\n'
        .. '      installHint: "install it with: apt install klua-no-such-plugin"\n' }) })
    local _, err = c:prepare()
    assert.equals('exec plugin "klua-no-such-plugin" not found: install it with: apt install klua-no-such-plugin', err)
  end)

  it('stop a plugin that does not finish in time', function()
    local c = assert(load { kubeconfig = with_user('k.yaml', exec_user { env = { PLUGIN_MODE = 'hang' } }),
                            exec_timeout_ms = 300 })
    local _, err = c:prepare()
    assert.equals('exec plugin "' .. PLUGIN .. '" did not finish within 0.3 s', err)
  end)

  -- Whether pid is a process that has not ended (a zombie has).
  local function running(pid)
    return sh('ps -o stat= -p ' .. pid):match('^[^Z]') ~= nil
  end

  it('stop a plugin that does not finish in time with every process it started', function()
    local c = assert(load { kubeconfig = with_user('k.yaml', exec_user { env = { PLUGIN_MODE = 'hang-group' } }),
                            exec_timeout_ms = 300 })
    finally(function() os.execute('kill $(cat ' .. dir .. '/runs.child) 2>/dev/null') end)
    local _, err = c:prepare()
    assert.equals('exec plugin "' .. PLUGIN .. '" did not finish within 0.3 s', err)
    local child = read(dir .. '/runs.child')
    harness.eventually(function() return not running(child) end, 5, { what = 'the end of the plugin\'s child' })
  end)

  it('end with the plugin, not with a child it leaves holding its stdout', function()
    local c = assert(load { kubeconfig = with_user('k.yaml', exec_user { env = { PLUGIN_MODE = 'linger' } }),
                            exec_timeout_ms = 20000 })
    finally(function() os.execute('kill $(cat ' .. dir .. '/runs.child) 2>/dev/null') end)
    assert.same({ 'Authorization: Bearer plugin-token-1' }, assert(c:prepare()))
  end)

  it('give the plugin no descriptor of klua\'s but stdin, stdout and stderr', function()
    local marker = dir .. '/open-in-klua'
    local f = assert(io.open(marker, 'w'))
    finally(function() f:close() end)
    assert(assert(load { kubeconfig = with_user('k.yaml', exec_user {}) }):prepare())
    local fds = read(dir .. '/runs.fds')
    assert.is_nil(fds:find(marker, 1, true), fds)
  end)

  it('do not run over plain http unless insecure credentials are allowed', function()
    local path = plain_with_user('k.yaml', exec_user {})
    local _, err = assert(load { kubeconfig = path }):prepare()
    assert.truthy(find_plain(err, 'refusing to send credentials'))
    assert.equals(0, runs())
  end)

  it('give way to --token', function()
    local c = assert(load { kubeconfig = with_user('k.yaml', exec_user {}), token = 'flag-token' })
    assert.same({ 'Authorization: Bearer flag-token' }, assert(c:prepare()))
    assert.equals(0, runs())
  end)
end)

describe('in-cluster configuration', function()
  local function pod(files)
    os.execute('mkdir -p ' .. dir .. '/sa')
    for name, text in pairs(files) do write(dir .. '/sa/' .. name, text) end
    return { HOME = dir, KUBERNETES_SERVICE_HOST = '10.96.0.1', KUBERNETES_SERVICE_PORT = '443',
             KLUA_SERVICEACCOUNT_DIR = dir .. '/sa' }
  end

  it('is used when there is no kubeconfig and the pod environment is present', function()
    local env = pod { token = 'sa-token\n', ['ca.crt'] = read(TLS .. '/ca.crt'), namespace = 'apps\n' }
    local c = assert(load { env = env })
    assert.same({ server = 'https://10.96.0.1:443', namespace = 'apps', context = '',
                  source = 'in-cluster', auth = 'token-file', ca = 'file', client_cert = 'none',
                  insecure = false }, c:describe())
    assert.same({ 'Authorization: Bearer sa-token' }, assert(c:prepare()))
  end)

  it('puts an IPv6 service host in brackets', function()
    local env = pod { token = 't' }
    env.KUBERNETES_SERVICE_HOST = 'fd00:10:96::1'
    assert.equals('https://[fd00:10:96::1]:443', assert(load { env = env }).server)
  end)

  it('falls back to the default namespace and the system CAs', function()
    local c = assert(load { env = pod { token = 't' } })
    assert.equals('default', c.namespace)
    assert.equals('none', c.ca)
  end)

  it('takes the namespace from POD_NAMESPACE first', function()
    local env = pod { token = 't', namespace = 'from-file' }
    env.POD_NAMESPACE = 'from-env'
    assert.equals('from-env', assert(load { env = env }).namespace)
  end)

  it('follows the rotating service-account token', function()
    local c = assert(load { env = pod { token = 'sa-token-1' } })
    write(dir .. '/sa/token', 'sa-token-2')
    assert.same({ 'Authorization: Bearer sa-token-1' }, assert(c:prepare()))
    c:advance_clock(61)
    assert.same({ 'Authorization: Bearer sa-token-2' }, assert(c:prepare()))
  end)

  it('is not used when a kubeconfig exists', function()
    local env = pod { token = 't' }
    simple('.kube/config', 'home')
    assert.equals('kubeconfig', assert(load { env = env }).source)
  end)

  it('is not used without a readable token', function()
    local env = pod {}
    local _, err = load { env = env }
    assert.truthy(find_plain(err, 'the service-account token ' .. dir .. '/sa/token is unreadable'))
  end)

  it('yields to --server', function()
    local c = assert(load { env = pod { token = 't' }, server = 'https://elsewhere.example' })
    assert.equals('flags', c.source)
    assert.equals('none', c.auth)
  end)
end)

describe('error messages', function()
  it('never contain a token, password, key or plugin output', function()
    local secrets = { 'static-secret-token', 'secret-password', 'stdout-secret', 'PRIVATE KEY' }
    local errors = {}
    local function collect(conn, err)
      if conn then conn, err = conn:prepare() end
      if err then errors[#errors + 1] = err end
    end
    collect(load { kubeconfig = with_user('1.yaml',
      '    token: static-secret-token\n    username: u\n    password: secret-password\n') })
    collect(load { kubeconfig = with_user('2.yaml',
      '    token: static-secret-token\n    client-certificate: x.crt\n') })
    collect(load { kubeconfig = with_user('3.yaml', '    password: secret-password\n    as-uid: x\n') })
    collect(load { kubeconfig = with_user('4.yaml', exec_user { env = { PLUGIN_MODE = 'fail' } }) })
    collect(load { kubeconfig = with_user('5.yaml', exec_user { env = { PLUGIN_MODE = 'garbage' } }) })
    collect(load { kubeconfig = with_user('6.yaml', '    client-certificate: {{TLS}}/client.crt\n'
      .. '    client-key-data: "' .. read(TLS .. '/client.key'):gsub('\n', '\\n') .. '"\n') })
    collect(load { server = 'http://x.example', token = 'static-secret-token' })
    assert.equals(7, #errors)
    for _, err in ipairs(errors) do
      for _, secret in ipairs(secrets) do
        assert.is_false(find_plain(err, secret), err)
      end
    end
  end)
end)
