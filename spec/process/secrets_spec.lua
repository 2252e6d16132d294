-- klua never prints a credential or a Secret's data, at any verbosity and in
-- either log format; it verifies TLS unless the kubeconfig turns that off;
-- and it sends a bearer token over plain http only when told to.
local sandbox = require('support.sandbox')
local K = require('support.klua')
local testing = require('klua.testing')
local fixtures = require('support.fixtures')
local hostile = require('support.hostile')

local function random_hex(n)
  local t = {}
  for i = 1, n do t[i] = ('%x'):format(math.random(0, 15)) end
  return table.concat(t)
end

local function base64(s)
  local p = io.popen('printf %s ' .. K.quote(s) .. ' | base64 -w0')
  local out = p:read('a')
  p:close()
  return out
end

-- Watches Secrets and ConfigMaps and, once synced, reads, lists and writes
-- Secrets, makes calls that fail (404, 422), and stops once its informer has
-- seen its own change to the Secret: the Secret's data goes through watch
-- frames, LIST bodies, GET and PATCH answers and error paths.
local SCRIPT = [[
local secrets = klua.informer { resource = 'secrets' }
klua.informer { resource = 'configmaps' }
-- Unique per run (a clock, not math.random, whose seed may repeat): the
-- patch below must change the Secret, or no update would come.
local stamp = string.format('%.0f', require('klua.core').now() * 1e6)
secrets:on('update', function(_, new)
  if new.metadata.name == 'klua-marker' and new.metadata.labels and new.metadata.labels.seen == stamp then
    print('seen update of', new.metadata.name, #new.data.marker)
    klua.stop()
  end
end)
klua.on_synced(function()
  local s = assert(klua.api.get('secrets', 'default/klua-marker'))
  assert(s.data.marker == secrets:get('default/klua-marker').data.marker)
  assert(#assert(klua.api.list('secrets')).items >= 1)
  local _, missing = klua.api.get('secrets', 'default/no-such-secret')
  klua.log.info('expected failure: %s', tostring(missing))
  local _, invalid = klua.api.create('configmaps', { metadata = { name = 'Not_Valid' } })
  klua.log.info('expected failure: %s', tostring(invalid))
  assert(klua.api.patch('secrets', 'default/klua-marker', { metadata = { labels = { seen = stamp } } }))
end)
]]

--- Every way the secrets could show up, each with a name for the failure message.
local function needles(secrets)
  local list = {}
  for name, value in pairs(secrets) do
    if value and #value >= 8 then list[#list + 1] = { name = name, value = value } end
  end
  return list
end

local function assert_absent(text, secrets)
  for _, n in ipairs(needles(secrets)) do
    local at = text:find(n.value, 1, true)
    assert(at == nil, ('%s appears in klua\'s output: ...%s...'):format(n.name, text:sub(math.max(1, at or 1) - 80, (at or 1) + 80)))
  end
end

-- The body lines of a PEM file (the base64 between its BEGIN and END lines).
local function pem_body_lines(path)
  local lines = {}
  for line in K.read_file(path):gmatch('[^\n]+') do
    if not line:find('-----', 1, true) then lines[#lines + 1] = line end
  end
  return lines
end

-- Writes a script into dir; returns its path.
local function script(dir, text)
  local path = dir .. '/script.lua'
  K.write_file(path, text)
  return path
end

-- Runs the script at -v 9 in both log formats; returns the combined stdout and stderr.
local function run_both_formats(kubeconfig, dir)
  local all = {}
  for _, format in ipairs({ 'text', 'json' }) do
    local out, err, code = K.run({ '--kubeconfig', kubeconfig, '-v', '9', '--log-format', format, 'run', script(dir, SCRIPT) })
    assert.equals(0, code, err)
    assert.truthy(out:find('seen update of\tklua-marker', 1, true), err)
    assert.truthy(err:find('NotFound', 1, true), err)
    all[#all + 1] = out .. err
  end
  return table.concat(all, '\n')
end

describe('secrets in klua\'s logs', function()
  local marker = 'klua-secret-marker-' .. random_hex(16)
  local dir

  before_each(function() dir = K.tmpdir() end)
  after_each(function() os.execute('rm -rf ' .. K.quote(dir)) end)

  local function with_marker(sb)
    local _, ok, err = sb:try_kubectl('create secret generic klua-marker --from-literal=marker=' .. marker)
    assert(ok, err)
    assert.equals(base64(marker), sb:kubectl_json('get secret klua-marker').data.marker)
  end

  local function secret_needles(extra)
    local t = { ['the Secret marker'] = marker, ['the base64 Secret marker'] = base64(marker) }
    for k, v in pairs(extra) do t[k] = v end
    return t
  end

  it('never show a bearer token or Secret data at -v 9, in text or JSON', function()
    local sb = sandbox.start { tls = true, auth = 'token', token = 'bearer-' .. random_hex(24) }
    with_marker(sb)
    local ok, text = pcall(run_both_formats, sb.kubeconfig, dir)
    local token = sb.token
    sb:stop()
    assert(ok, text)
    assert.truthy(text:find('"level":', 1, true))
    assert_absent(text, secret_needles { ['the bearer token'] = token })
  end)

  it('never show a client key, in PEM or as client-key-data, at -v 9', function()
    local sb = sandbox.start { tls = true, auth = 'cert' }
    with_marker(sb)
    local key_lines = pem_body_lines(sb.dir .. '/client.key')
    local key_data = base64(K.read_file(sb.dir .. '/client.key'))
    local ok, text = pcall(run_both_formats, sb.kubeconfig, dir)
    sb:stop()
    assert(ok, text)
    local secrets = secret_needles { ['client-key-data'] = key_data }
    for i, line in ipairs(key_lines) do secrets['line ' .. i .. ' of the client key'] = line end
    assert_absent(text, secrets)
  end)

  it('never show what an exec credential plugin prints, at -v 9', function()
    local token = 'exec-' .. random_hex(24)
    local sb = sandbox.start { tls = true, auth = 'token', token = token }
    with_marker(sb)
    K.write_file(dir .. '/plugin.sh', '#!/bin/sh\nprintf \'{"apiVersion":"client.authentication.k8s.io/v1",'
      .. '"kind":"ExecCredential","status":{"token":"%s"}}\\n\' ' .. token .. '\n')
    os.execute('chmod +x ' .. K.quote(dir .. '/plugin.sh'))
    local kc = fixtures.kubeconfig(dir .. '/kubeconfig', { server = sb.url, ca = sb.dir .. '/ca.crt',
      user = '{exec: {apiVersion: client.authentication.k8s.io/v1, command: ' .. dir .. '/plugin.sh, '
        .. 'interactiveMode: Never}}' })
    local ok, text = pcall(run_both_formats, kc, dir)
    sb:stop()
    assert(ok, text)
    assert_absent(text, secret_needles { ['the exec plugin\'s token'] = token })
  end)
end)

describe('flags that weaken what a kubeconfig keeps safe', function()
  local kc = K.tmpdir() .. '/kubeconfig'
  fixtures.kubeconfig(kc, { server = 'https://127.0.0.1:1' })

  for _, case in ipairs({
    { { '--token', 'flag-token-b2c4' }, '--token shows the token to every user of this machine', 'tokenFile' },
    { { '--insecure-skip-tls-verify' }, '--insecure-skip-tls-verify: the server\'s certificate is not checked',
      'certificate-authority' },
  }) do
    it(case[1][1] .. ' logs one warning naming the better way', function()
      local flags = { '--kubeconfig', kc }
      for _, f in ipairs(case[1]) do flags[#flags + 1] = f end
      flags[#flags + 1] = 'run'
      flags[#flags + 1] = K.script('print("ran")')
      local out, err, code = K.run(flags)
      assert.equals(0, code, err)
      assert.equals('ran\n', out)
      local lines = K.lines(err)
      assert.equals(1, #lines, err)
      assert.truthy(lines[1]:find(' warn  [klua] ' .. case[2], 1, true), err)
      assert.truthy(lines[1]:find(case[3], 1, true), err)
      assert.falsy(err:find('flag-token-b2c4', 1, true), err)
    end)
  end
end)

describe('core dumps', function()
  -- Files that nobody (uid 65534) can read too, for a klua run as that user.
  local dir = K.tmpdir()
  os.execute('chmod 755 ' .. K.quote(dir))
  local kc = dir .. '/kubeconfig'
  fixtures.kubeconfig(kc, { server = 'https://127.0.0.1:1' })
  local script = dir .. '/sleep.lua'
  K.write_file(script, 'klua.after(60, print) io.stdout:write("up\\n") io.stdout:flush()')
  -- klua with core dumps allowed by its environment, as root or as nobody (and by
  -- AddressSanitizer, which turns them off itself unless told, under make test-asan).
  local as = {}
  local allow = 'ulimit -S -c unlimited\nASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}disable_coredump=0"\n'
  for user, setpriv in pairs({ root = '', nobody = 'setpriv --reuid=65534 --regid=65534 --clear-groups ' }) do
    as[user] = dir .. '/klua-as-' .. user
    K.write_file(as[user], ('#!/bin/sh\n%sexec %s%s "$@"\n'):format(allow, setpriv, K.quote(K.bin)))
    os.execute('chmod 755 ' .. K.quote(as[user]))
  end
  os.execute('chmod 644 ' .. K.quote(kc) .. ' ' .. K.quote(script))

  --- Starts klua (as nobody with as_nobody) and returns the soft limit on its core's
  -- size and the owner of its /proc entries: its user's while it is dumpable, root's after.
  local function inspect(flags, as_nobody)
    local args = { '--kubeconfig', kc }
    for _, f in ipairs(flags) do args[#args + 1] = f end
    args[#args + 1] = 'run'
    args[#args + 1] = script
    local p = K.spawn(args, { bin = as_nobody and as.nobody or as.root })
    assert.is_true(p:wait_for('up', 10 * K.slowdown), p:errors())
    local soft = K.read_file('/proc/' .. p.pid .. '/limits'):match('Max core file size%s+(%S+)')
    local owner = K.run_command('stat -c %u /proc/' .. p.pid .. '/fd'):match('%d+')
    p:stop()
    return soft, owner
  end

  it('are off unless --allow-core-dumps: no core size, and not dumpable', function()
    assert.equals('0', (inspect({})))
    assert.equals('0', select(2, inspect({}, true))) -- root's
  end)

  it('are left as they were with --allow-core-dumps', function()
    assert.equals('unlimited', (inspect({ '--allow-core-dumps' })))
    assert.equals('65534', select(2, inspect({ '--allow-core-dumps' }, true)))
  end)
end)

describe('TLS verification', function()
  local sb = testing.with_sandbox { tls = true, auth = 'token', token = 'tls-' .. random_hex(24) }
  local dir

  setup(function()
    dir = K.tmpdir()
    os.execute(('cd %s && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes '
      .. '-keyout other-ca.key -out other-ca.crt -subj /CN=some-other-ca -days 2 2>/dev/null'):format(K.quote(dir)))
  end)

  -- A kubeconfig for the server with its token and these lines of the cluster.
  local function kubeconfig(cluster_lines)
    return fixtures.kubeconfig(dir .. '/kubeconfig', { server = sb.url, cluster = cluster_lines,
      user = '{token: ' .. sb.token .. '}' })
  end

  local LIST = [[
    local list, err = klua.api.list('namespaces')
    if not list then error(tostring(err)) end
    print(#list.items)
  ]]

  it('refuses a server whose certificate the kubeconfig\'s CA did not sign', function()
    local kc = kubeconfig { 'certificate-authority: ' .. dir .. '/other-ca.crt' }
    local out, err, code = K.run({ '--kubeconfig', kc, 'run', script(dir, LIST) })
    assert.equals(1, code)
    assert.equals('', out)
    assert.truthy(err:find('SSL certificate problem', 1, true), err)
    assert.is_nil(err:find(sb.token, 1, true))
  end)

  it('checks against the system CAs when the kubeconfig names none', function()
    local kc = kubeconfig { '# no certificate-authority' }
    local _, err, code = K.run({ '--kubeconfig', kc, 'run', script(dir, LIST) })
    assert.equals(1, code)
    assert.truthy(err:find('SSL certificate problem', 1, true), err)
  end)

  it('skips verification only when the kubeconfig says insecure-skip-tls-verify', function()
    local kc = kubeconfig { 'insecure-skip-tls-verify: true' }
    local out, err, code = K.run({ '--kubeconfig', kc, 'run', script(dir, LIST) })
    assert.equals(0, code, err)
    assert.equals('3\n', out)
  end)
end)

describe('a bearer token and plain http', function()
  local server, dir, kc
  local token = 'plain-' .. random_hex(24)

  setup(function()
    server = hostile.start()
    dir = server.dir
    kc = server:kubeconfig { token = token }
  end)
  teardown(function() server:stop() end)

  local function requests() return server:stats().requests end

  local SYNC = [[
    local inf = klua.informer { resource = 'configmaps' }
    klua.on_synced(function() print('synced', #inf:list()); klua.stop() end)
  ]]

  it('is not sent: klua refuses before any request and says how to allow it', function()
    local out, err, code = K.run({ '--kubeconfig', kc, 'run', script(dir, SYNC) })
    assert.equals(1, code)
    assert.equals('', out)
    assert.truthy(err:find('--allow-insecure-credentials', 1, true), err)
    assert.is_nil(err:find(token, 1, true))
    assert.same({}, requests())
  end)

  it('is sent with --allow-insecure-credentials', function()
    local out, err, code = K.run({ '--kubeconfig', kc, '--allow-insecure-credentials', 'run', script(dir, SYNC) })
    assert.equals(0, code, err)
    assert.equals('synced\t5\n', out)
    local seen = requests()
    assert.is_true(#seen >= 3)
    for _, r in ipairs(seen) do assert.equals('Bearer ' .. token, r.authorization) end
    assert.is_nil(err:find(token, 1, true))
  end)
end)
