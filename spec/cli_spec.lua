-- The klua command line: `klua version`, `klua --help`, how bad commands and
-- flags are refused, how `klua run` reports scripts that cannot start or
-- fail, how it stops on signals, its JSON log, and how it connects with
-- --server alone.
local cjson = require 'cjson'
local sandbox = require 'support.sandbox'
local K = require 'support.klua'
local testing = require 'klua.testing'

local dirs = {}

-- Writes a script into a fresh directory, removed after the file's specs.
local function script(text)
  local path = K.script(text)
  dirs[#dirs + 1] = path:match('^(.*)/[^/]+$')
  return path
end

-- An environment without any kubeconfig: an empty HOME and no KUBECONFIG.
local function no_kubeconfig()
  local home = K.tmpdir()
  dirs[#dirs + 1] = home
  return { HOME = home, KUBECONFIG = '' }
end

-- Runs klua to completion with variables added to its environment; returns
-- stdout, stderr and the exit status, like K.run.
local function run_env(env, args)
  return K.run(args, { env = env })
end

local function lines(text)
  local out = {}
  for line in text:gmatch('[^\n]+') do out[#out + 1] = line end
  return out
end

teardown(function()
  for _, d in ipairs(dirs) do os.execute('rm -rf ' .. K.quote(d)) end
end)

describe('klua version', function()
  it('prints the versions of klua, Lua, libcurl and lua-cjson, one per line', function()
    local out, err, code = K.run({ 'version' })
    assert.equals(0, code, err)
    local root = os.getenv('KLUA_ROOT') or '.'
    local version = K.read_file(root .. '/src/version.h'):match('KLUA_VERSION "([^"]+)"')
    local curl = K.run_command('pkg-config --modversion libcurl')
    local lua = K.run_command('lua5.4 -v'):match('^(Lua %d+%.%d+%.%d+)')
    assert.same({ 'klua ' .. version, lua, 'libcurl ' .. curl, 'lua-cjson ' .. cjson._VERSION:match('[%d.]+$') },
      lines(out))
  end)
end)

describe('klua --help', function()
  it('prints the usage of run, watch, test and version and every flag on stdout', function()
    local out, err, code = K.run({ '--help' })
    assert.equals(0, code)
    assert.equals('', err)
    assert.truthy(out:find('klua [flags] run SCRIPT.lua [script args...]', 1, true))
    assert.truthy(out:find('klua [flags] watch RESOURCE [NAME]', 1, true))
    assert.truthy(out:find('klua version', 1, true))
    assert.truthy(out:find('klua test [busted args...]', 1, true))
    for _, flag in ipairs({ '--kubeconfig', '--context', '--server', '--token', '--insecure-skip-tls-verify',
      '--allow-insecure-credentials', '-v N', '--log-format', '--instruction-budget', '--memory-limit',
      '--watch-idle-timeout', '--watch-timeout', '--page-size', '--watch-list', '--watch-list-deadline' }) do
      assert.truthy(out:find(flag, 1, true), 'the usage does not mention ' .. flag)
    end
  end)

  it('is also shown by -h and help', function()
    local help = K.run({ '--help' })
    assert.equals(help, (K.run({ '-h' })))
    assert.equals(help, (K.run({ 'help' })))
  end)

  it('goes to stderr with exit status 2 when no command is given', function()
    local out, err, code = K.run({})
    assert.equals(2, code)
    assert.equals('', out)
    assert.truthy(err:find('^usage: klua'))
  end)
end)

describe('klua refuses', function()
  it('an unknown command with exit status 2, naming it', function()
    local out, err, code = K.run({ 'frobnicate' })
    assert.equals(2, code)
    assert.equals('', out)
    assert.equals('klua: unknown command "frobnicate"\nRun \'klua --help\' for usage.\n', err)
  end)

  it('an unknown flag with exit status 2, pointing to --help', function()
    local _, err, code = K.run({ '--frobnicate', 'version' })
    assert.equals(2, code)
    assert.equals('klua: unknown flag --frobnicate\nRun \'klua --help\' for usage.\n', err)
  end)

  it('a bad flag value with exit status 2 and one line naming the flag and the value', function()
    local cases = {
      { { '--log-format', 'xml' }, 'klua: --log-format must be text or json, not "xml"' },
      { { '-v', 'abc' }, 'klua: -v needs a number of at least 0, not "abc"' },
      { { '--watch-timeout', '0' }, 'klua: --watch-timeout needs a number of at least 1, not "0"' },
      { { '--memory-limit=0' }, 'klua: --memory-limit needs a number of at least 1, not "0"' },
      { { '--page-size', '10x' }, 'klua: --page-size needs a number of at least 1, not "10x"' },
    }
    for _, c in ipairs(cases) do
      local args = { table.unpack(c[1]) }
      args[#args + 1] = 'version'
      local out, err, code = K.run(args)
      assert.equals(2, code, table.concat(args, ' '))
      assert.equals('', out)
      assert.equals(c[2] .. '\n', err)
    end
  end)

  it('a flag without its value with exit status 2', function()
    local _, err, code = K.run({ 'version', '--kubeconfig' })
    assert.equals(2, code)
    assert.equals('klua: flag --kubeconfig needs a value\n', err)
  end)
end)

describe('klua run', function()
  it('without a script exits 2 and says how to call it', function()
    local _, err, code = K.run({ 'run' })
    assert.equals(2, code)
    assert.equals('klua: run needs a script: klua run SCRIPT.lua\n', err)
  end)

  it('with a missing script exits non-zero and names the file', function()
    local _, err, code = K.run({ 'run', '/nonexistent/klua-spec.lua' })
    assert.equals(1, code)
    assert.equals('klua: cannot open /nonexistent/klua-spec.lua: No such file or directory\n', err)
  end)

  it('with a syntax error exits 1 with the Lua message and its line', function()
    local path = script('local x = 1\nprint(x +)\n')
    local out, err, code = run_env(no_kubeconfig(), { '--server', 'http://127.0.0.1:1', 'run', path })
    assert.equals(1, code)
    assert.equals('', out)
    assert.equals('klua: ' .. path .. ":2: unexpected symbol near ')'\n", err)
  end)

  it('whose main chunk raises exits 1 with the message, its line and a traceback', function()
    local path = script('print("before")\nerror("no config map named " .. "web")\nprint("after")\n')
    local out, err, code = run_env(no_kubeconfig(), { '--server', 'http://127.0.0.1:1', 'run', path })
    assert.equals(1, code)
    assert.equals('before\n', out)
    assert.truthy(err:find("the script's main chunk failed: " .. path .. ':2: no config map named web', 1, true), err)
    assert.truthy(err:find('stack traceback', 1, true))
  end)

  it('passes the arguments after the script to it, flags included', function()
    local path = script('print(select("#", ...), ...)\n')
    local out, err, code = run_env(no_kubeconfig(),
      { '--server', 'http://127.0.0.1:1', 'run', path, 'a', 'b c', '-v', '--x' })
    assert.equals(0, code, err)
    assert.equals('4\ta\tb c\t-v\t--x\n', out)
  end)
end)

describe('klua against a server', function()
  local sb
  setup(function() sb = sandbox.start() end)
  teardown(function() sb:stop() end)

  local WATCHER = [[
    local inf = klua.informer('configmaps')
    inf:on('add', function(o) print('add', o.metadata.name) end)
    klua.on_synced(function() print('synced') end)
  ]]

  for _, sig in ipairs({ 'INT', 'TERM' }) do
    it('stops a running script cleanly with exit status 0 on SIG' .. sig, function()
      local p = K.spawn({ '--kubeconfig', sb.kubeconfig, 'run', script(WATCHER) })
      assert.truthy(p:wait_for('synced'), p:errors())
      testing.eventually(function() return sb:stats().open_watches == 1 end, 5)
      local code = p:stop(sig)
      local err = p:errors()
      p:cleanup()
      assert.equals(0, code)
      assert.equals('', err)
      -- The watch connection was closed, not left behind.
      testing.eventually(function() return sb:stats().open_watches == 0 end, 5)
    end)
  end

  it('writes every stderr line as a JSON object with time, level, component and msg under --log-format json', function()
    sb:kubectl('create configmap json-log')
    local path = script([[
      local inf = klua.informer('configmaps')
      inf:on('add', function(o) error('handler trouble with ' .. o.metadata.name) end)
      klua.on_synced(function()
        klua.log.info('synced %d', #inf:list())
        klua.log.warn('a "quoted"\nmulti-line warning')
        klua.stop()
      end)
    ]])
    local _, err, code = K.run({ '--kubeconfig', sb.kubeconfig, '--log-format', 'json', '-v', '6', 'run', path })
    assert.equals(0, code, err)
    local seen = {}
    for _, line in ipairs(lines(err)) do
      local ok, rec = pcall(cjson.decode, line)
      assert.is_true(ok and type(rec) == 'table', 'not a JSON object: ' .. line)
      assert.matches('^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%dZ$', rec.time)
      assert.truthy(({ debug = true, info = true, warn = true, error = true })[rec.level], line)
      assert.equals('string', type(rec.component))
      assert.equals('string', type(rec.msg))
      seen[rec.level .. ' ' .. rec.component .. ' ' .. rec.msg:match('^[^\n]*')] = true
    end
    assert.truthy(seen['info script.lua synced 1'])
    assert.truthy(seen['warn script.lua a "quoted"'])
    assert.truthy(seen['info configmaps LIST from resourceVersion "0"'])
    local failed = 'error script.lua add handler of configmaps failed: ' .. path
      .. ':2: handler trouble with json-log'
    assert.truthy(seen[failed], err)
  end)

  it('writes its own start-up errors as JSON objects under --log-format json', function()
    local _, err, code = run_env(no_kubeconfig(), { '--log-format', 'json', 'run', script('print(1)') })
    assert.equals(1, code)
    local rec = cjson.decode(err)
    assert.equals('error', rec.level)
    assert.equals('klua', rec.component)
    assert.matches('^no configuration: ', rec.msg)
  end)

  it('connects with --server alone when there is no kubeconfig', function()
    local path = script([[
      local inf = klua.informer('namespaces')
      klua.on_synced(function()
        local names = {}
        for _, ns in ipairs(inf:list()) do names[#names + 1] = ns.metadata.name end
        table.sort(names)
        print(klua.namespace(), table.concat(names, ' '))
        klua.stop()
      end)
    ]])
    local out, err, code = run_env(no_kubeconfig(), { '--server', sb.url, 'run', path })
    assert.equals(0, code, err)
    assert.equals('default\tdefault kube-public kube-system\n', out)
  end)
end)

describe('klua with an unreachable server', function()
  it('fails a script that starts an informer with a non-zero exit and says it cannot reach the server', function()
    local path = script('klua.informer("pods")\n')
    local _, err, code = run_env(no_kubeconfig(), { '--server', 'http://127.0.0.1:1', 'run', path })
    assert.is_true(code ~= 0)
    local first = err:match('^[^\n]*')
    assert.truthy(first:find('cannot reach the API server: ', 1, true), err)
    assert.truthy(first:find('127.0.0.1 port 1', 1, true), err)
  end)

  it('fails klua watch with one line saying it cannot reach the server', function()
    local out, err, code = run_env(no_kubeconfig(), { '--server', 'http://127.0.0.1:1', 'watch', 'pods' })
    assert.equals(1, code)
    assert.equals('', out)
    assert.equals(1, #lines(err))
    assert.matches('^klua watch: cannot reach the API server: .*127%.0%.0%.1 port 1', err)
  end)
end)
