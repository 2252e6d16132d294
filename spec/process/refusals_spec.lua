-- What the server refuses until someone acts (a permission not granted, an object that
-- does not exist), met as kubectl meets it: `klua watch` treats it as a usage error of
-- its first requests and exits 1 with the server's words, as `kubectl get -w` does,
-- while `klua run` keeps retrying, since the fix comes from outside, and says on
-- /readyz that it is not ready meanwhile. The tokens are ServiceAccount tokens the
-- sandbox authorizes as kube-apiserver's RBAC authorizer does (scripts/sandbox/rbac.py).
local testing = require('klua.testing')
local K = require('support.klua')
local fixtures = require('support.fixtures')

-- `kubectl ARGS` against kubeconfig: stdout, stderr, exit code.
local function kubectl(kubeconfig, args)
  local full = { '--kubeconfig', kubeconfig, '--cache-dir', K.tmpdir() }
  for _, a in ipairs(args) do full[#full + 1] = a end
  return K.run(full, { bin = 'kubectl', timeout = 20 })
end

-- kubectl's "Error from server (Forbidden): M" is klua watch's "klua watch: M".
local function server_message(kubectl_err)
  return assert(kubectl_err:match('^Error from server %(%a+%): ([^\n]*)\n'), kubectl_err)
end

describe('credentials that may list configmaps but not watch them', function()
  local sb = testing.with_sandbox { each = true, tls = true, auth = 'token' }
  local kubeconfig, grant

  before_each(function()
    sb:kubectl('create configmap listed-a --from-literal=k=v')
    sb:kubectl('create configmap listed-b')
    kubeconfig, grant = fixtures.service_account(sb, K.tmpdir(), 'lister', { 'list' })
  end)

  it('make klua watch print the rows, then exit 1 with the Forbidden message, as kubectl get -w', function()
    local kout, kerr, kcode = kubectl(kubeconfig, { 'get', 'configmaps', '-w' })
    assert.equals(1, kcode, kerr)
    local message = server_message(kerr)
    assert.matches('cannot watch resource "configmaps"', message)
    local out, err, code = K.run({ '--kubeconfig', kubeconfig, 'watch', 'configmaps' }, { timeout = 20 })
    assert.equals(1, code, err)
    -- After the informer's own log line of the failure, which klua run writes too.
    local logged, said = err:match('^([^\n]*)\n([^\n]*\n)$')
    assert.matches(' error %[configmaps %-n default%] watch failed: 403 Forbidden: ', logged)
    assert.equals('klua watch: ' .. message .. '\n', said)
    -- The same rows; only the AGE cells may differ by a second.
    local function rows(text) return (text:gsub('%d+s\n', '<age>\n')) end
    assert.equals(rows(kout), rows(out))
    assert.matches('listed%-a', out)
  end)

  it('leave klua run retrying the watch and not ready until the watch is granted', function()
    local script = K.script [[
      local cms = klua.informer { resource = 'configmaps', namespace = 'default' }
      cms:on('add', function(obj, initial) if not initial then print('added ' .. obj.metadata.name) end end)
      cms:on('error', function(err)
        print(('call %d: error %s %d persistent=%s watched=%s: %s'):format(cms:stats().error_calls, err.verb,
          err.code, err.persistent, err.watched, err.message))
      end)
    ]]
    local p = K.spawn { '--kubeconfig', kubeconfig, '--health-probe-bind-address', '127.0.0.1:0', 'run', script }
    assert.truthy(p:wait_for('%(port %d+%)', 20 * K.slowdown, 'err'), p:errors())
    local readyz = ('http://127.0.0.1:%s/readyz'):format(p:errors():match('%(port (%d+)%)'))
    local function ready()
      return K.run_command(('curl -s --max-time 10 %s'):format(K.quote(readyz)))
    end
    local forbidden = 'watch failed: 403 Forbidden: configmaps is forbidden: '
    assert.truthy(p:wait_for(forbidden .. '.*' .. forbidden, 20 * K.slowdown, 'err'), p:errors())
    assert.matches('^not ready: informer configmaps %-n default is refused: 403 Forbidden: configmaps is forbidden: '
      .. '.*cannot watch resource "configmaps"', ready())
    assert.is_nil(p:exit_code())
    -- The script's error handler is told of each, in the server's words;
    -- inf:stats() counts its calls.
    assert.truthy(p:wait_for('call 1: error watch 403 ', 20 * K.slowdown), p:output())
    assert.truthy(p:wait_for('error watch 403 persistent=true watched=false: configmaps is forbidden: User '
      .. '"system:serviceaccount:default:lister" cannot watch resource "configmaps"', 20 * K.slowdown), p:output())
    grant { 'list', 'watch' }
    testing.eventually(function() return ready() == 'ok' end, 60 * K.slowdown, { what = 'readyz ok' })
    sb:kubectl('create configmap after-grant')
    assert.truthy(p:wait_for('added after%-grant', 20 * K.slowdown), p:errors())
  end)
end)

describe('klua watch of an object by name', function()
  local sb = testing.with_sandbox()

  it('exits 1 with NotFound, as kubectl get NAME -w, when there is no such object', function()
    local _, kerr, kcode = kubectl(sb.kubeconfig, { 'get', 'configmap', 'no-such-cm', '-w' })
    assert.equals(1, kcode, kerr)
    assert.equals('Error from server (NotFound): configmaps "no-such-cm" not found\n', kerr)
    for _, args in ipairs({ { 'configmap', 'no-such-cm' }, { 'configmap/no-such-cm' },
      { 'configmap', 'no-such-cm', '--watch-only' } }) do
      local out, err, code = K.run({ '--kubeconfig', sb.kubeconfig, 'watch', table.unpack(args) }, { timeout = 20 })
      assert.equals(1, code, err)
      assert.equals('', out)
      assert.equals('klua watch: ' .. server_message(kerr) .. '\n', err)
    end
  end)

  it('names the group of the resource, as the server does', function()
    local _, kerr, kcode = kubectl(sb.kubeconfig, { 'get', 'deployment', 'no-such-deploy', '-w' })
    assert.equals(1, kcode, kerr)
    local _, err, code = K.run({ '--kubeconfig', sb.kubeconfig, 'watch', 'deployment', 'no-such-deploy' },
      { timeout = 20 })
    assert.equals(1, code, err)
    assert.equals('klua watch: ' .. server_message(kerr) .. '\n', err)
  end)
end)

-- kube-apiserver authorizes a WatchList request (watch=1&sendInitialEvents=true)
-- as a watch (its RequestInfo verb is "watch"): credentials that may watch but
-- not list still get the initial state through it, as an informer does.
describe('credentials that may watch configmaps but not list them, with --watch-list', function()
  local sb = testing.with_sandbox { each = true, tls = true, auth = 'token' }
  local kubeconfig

  before_each(function()
    sb:kubectl('create configmap streamed-a --from-literal=k=v')
    kubeconfig = fixtures.service_account(sb, K.tmpdir(), 'watcher', { 'watch' })
  end)

  it('let klua watch stream the objects and their changes, with no LIST of its own', function()
    local p = K.spawn { '--kubeconfig', kubeconfig, '--watch-list', 'watch', 'configmaps', '-o', 'name' }
    assert.truthy(p:wait_for('configmap/streamed%-a', 20 * K.slowdown), p:output() .. p:errors())
    sb:kubectl('create configmap streamed-b')
    assert.truthy(p:wait_for('configmap/streamed%-b', 20 * K.slowdown), p:output() .. p:errors())
    assert.is_nil(p:exit_code(), p:errors())
    p:stop()
    p:cleanup()
  end)

  it('still end klua watch with NotFound for a name that does not exist', function()
    local out, err, code = K.run({ '--kubeconfig', kubeconfig, '--watch-list', 'watch', 'configmap', 'absent',
      '-o', 'name' }, { timeout = 20 })
    assert.equals(1, code, out .. err)
    assert.matches('klua watch: configmaps "absent" not found\n$', err)
  end)

  it('end klua watch at once with the Forbidden message when it may not watch either', function()
    local none = fixtures.service_account(sb, K.tmpdir(), 'nobody', { 'get' })
    local _, err, code = K.run({ '--kubeconfig', none, '--watch-list', 'watch', 'configmaps', '-o', 'name' },
      { timeout = 20 })
    assert.equals(1, code, err)
    assert.matches('klua watch: configmaps is forbidden: User "system:serviceaccount:default:nobody" cannot ', err)
  end)
end)
