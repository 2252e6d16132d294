-- The klua command line: `klua version`, `klua --help`, how bad commands and
-- flags are refused, how `klua run` reports scripts that cannot start or
-- fail, how it stops on signals, its JSON log, and how it connects with
-- --server alone.
local cjson = require('cjson')
local K = require('support.klua')
local testing = require('klua.testing')

-- Writes a script into a fresh directory, removed when its describe block ends.
local script = K.script

-- An environment without any kubeconfig: an empty HOME and no KUBECONFIG.
local function no_kubeconfig()
  return { HOME = K.tmpdir(), KUBECONFIG = '' }
end

-- Runs klua to completion with variables added to its environment; returns
-- stdout, stderr and the exit status, like K.run.
local function run_env(env, args)
  return K.run(args, { env = env })
end

local lines = K.lines

describe('klua version', function()
  it('prints the versions of klua, Lua, libcurl and lua-cjson, one per line', function()
    local out, err, code = K.run({ 'version' })
    assert.equals(0, code, err)
    local root = os.getenv('KLUA_ROOT') or '.'
    local version = K.read_file(root .. '/src/base/version.h'):match('KLUA_VERSION "([^"]+)"')
    local curl = K.run_command('pkg-config --modversion libcurl')
    local lua = K.run_command('lua5.4 -v'):match('^(Lua %d+%.%d+%.%d+)')
    assert.same({ 'klua ' .. version, lua, 'libcurl ' .. curl, 'lua-cjson ' .. cjson._VERSION:match('[%d.]+$') },
      lines(out))
  end)
end)

describe('klua --version', function()
  it('and -V print what klua version prints', function()
    local version = K.run({ 'version' })
    for _, flag in ipairs({ '--version', '-V' }) do
      local out, err, code = K.run({ flag })
      assert.equals(0, code, err)
      assert.equals(version, out)
    end
  end)
end)

-- The flag lines of a help text, as cli.h promises them: "  -s, --long ARG"
-- or "      --long ARG" padded to 40 columns, a space, then the help.
local function flag_lines(text)
  local out = {}
  for line in text:gmatch('[^\n]+') do
    if line:match('^  %-') or line:match('^      %-%-') then
      assert(line:sub(41, 41) == ' ' and line:sub(42, 42):match('%S'), 'the help does not start at column 42: ' .. line)
      local left = line:sub(1, 40):gsub('%s+$', '')
      local short, long, arg = left:match('^  (%-%a), (%-%-[%w-]+) ?(%S*)$')
      if not short then long, arg = left:match('^      (%-%-[%w-]+) ?(%S*)$') end
      assert.truthy(long, 'not a flag line: ' .. line)
      out[#out + 1] = { short = short, long = long, arg = arg ~= '' and arg or nil, help = line:sub(42) }
    end
  end
  return out
end

describe('klua --help', function()
  it('lists the commands and every global flag, one line each, on stdout', function()
    local out, err, code = K.run({ '--help' })
    assert.equals(0, code)
    assert.equals('', err)
    assert.truthy(out:find('^usage: klua %[flags%] COMMAND %[args%.%.%.%]\n'))
    for _, cmd in ipairs({ 'run SCRIPT.lua [args...]', 'watch RESOURCE [NAME]', 'record TYPE[,TYPE...] --output FILE',
      'replay FILE --kubeconfig-out KC', 'test [busted args...]', 'version ',
      'help [COMMAND]' }) do
      assert.truthy(out:find('\n  ' .. cmd, 1, true), 'the help does not list ' .. cmd)
    end
    local listed = {}
    for _, f in ipairs(flag_lines(out)) do listed[f.long] = f end
    for _, flag in ipairs({ '--kubeconfig', '--context', '--server', '--token', '--insecure-skip-tls-verify',
      '--allow-insecure-credentials', '--v', '--log-format', '--allow-core-dumps', '--instruction-budget',
      '--memory-limit',
      '--watch-idle-timeout', '--watch-timeout', '--page-size', '--watch-list', '--watch-list-deadline',
      '--request-timeout', '--cache-compression', '--cache-compression-after', '--help', '--version' }) do
      assert.truthy(listed[flag], 'the help does not list ' .. flag)
    end
    assert.equals('-v', listed['--v'].short)
    assert.equals('-h', listed['--help'].short)
    assert.equals('-V', listed['--version'].short)
  end)

  it('says what each -v level adds: the reflector, the controller half, the wire, the requests', function()
    local out = K.run({ '--help' })
    local levels = out:match('\nVerbosity levels[^\n]*\n(.-)\n\n')
    assert.truthy(levels, out)
    local said, n = {}, nil
    for line in levels:gmatch('[^\n]+') do
      local num, text = line:match('^  (%d)   (.*)$')
      if num then n, said[tonumber(num)] = tonumber(num), text
      else said[n] = said[n] .. ' ' .. line:match('^%s*(.*)$') end
    end
    for level, words in pairs({ [2] = { 'reflector', 'LIST', 'WATCH' },
      [3] = { 'handler call', 'enqueue', 'informer and event', 'deduplicated', 'reconcile', 'duration', 'backoff' },
      [5] = { "read's size", "frame's size", 'decoded event', 'resourceVersion' }, [6] = { 'HTTP request' } }) do
      for _, w in ipairs(words) do
        assert.truthy(said[level] and said[level]:find(w, 1, true),
          ('level %d does not say "%s": %s'):format(level, w, levels))
      end
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
    assert.equals((K.run({ '--help' })), err)
  end)
end)

describe('the help of a command', function()
  local cli = require('klua_testing.cli')
  local watch = require('klua.cmd.watch')

  it('is shown by COMMAND --help and by klua help COMMAND, without a kubeconfig', function()
    for _, cmd in ipairs({ 'run', 'watch', 'version', 'help' }) do
      local out, err, code = run_env(no_kubeconfig(), { cmd, '--help' })
      assert.equals(0, code, err)
      assert.equals('', err)
      assert.truthy(out:find('^usage: klua'), out)
      assert.equals(out, (run_env(no_kubeconfig(), { 'help', cmd })))
      assert.equals(out, (run_env(no_kubeconfig(), { cmd, '-h' })))
    end
  end)

  it('of watch lists each of its flags on one line, then the global flags', function()
    local out = K.run({ 'watch', '--help' })
    assert.truthy(out:find('usage: klua [flags] watch TYPE[,TYPE...] [NAME] | TYPE/NAME... [-n NS | -A] [-l SEL] '
      .. '[--field-selector SEL] [-e LUA] [-o FORMAT] [--output-watch-events] [--no-headers] [-L KEY,...] '
      .. '[--show-labels] [--show-managed-fields] [--sort-by JSONPATH] [--watch-only] [--diff] [--diff-all] '
      .. '[--until LUA] [--for COND] [--fail-if LUA] [--any] [--timeout DURATION]\n', 1, true) == 1, out)
    local own, global = out:match('\nFlags:\n(.-)\nGlobal flags:\n(.*)$')
    assert.truthy(own, out)
    local got = {}
    for _, f in ipairs(flag_lines(own)) do got[#got + 1] = (f.short or '') .. ' ' .. f.long .. ' ' .. (f.arg or '') end
    assert.same({ '-n --namespace NS', '-A --all-namespaces ', '-l --selector SEL', ' --field-selector SEL',
      '-e --expr LUA', '-o --output FORMAT', ' --output-watch-events ', ' --no-headers ', '-L --label-columns KEY,...',
      ' --show-labels ', ' --show-managed-fields ', ' --sort-by JSONPATH', ' --server-print ', ' --watch-only ',
      ' --diff ', ' --diff-all ', ' --until LUA', ' --for COND', ' --fail-if LUA', ' --any ', ' --timeout DURATION',
      '-w --watch ', '-h --help ' }, got)
    assert.truthy(global:find('      --kubeconfig FILE', 1, true))
    -- The flags that stand for a command belong to klua alone.
    assert.is_nil(global:find('--version', 1, true))
  end)

  it('of run says that every word after the script is the script\'s and lists the global flags', function()
    local out = K.run({ 'run', '--help' })
    assert.truthy(out:find('^usage: klua %[flags%] run SCRIPT%.lua %[script args%.%.%.%]\n'))
    assert.truthy(out:find('klua\'s flags go before it. Those\nunder "Running a controller" are run\'s alone.', 1, true), out)
    assert.truthy(out:find('klua run --dry-run --once SCRIPT.lua', 1, true), out)
    assert.truthy(out:find('\nGlobal flags:\n', 1, true))
    assert.truthy(out:find('      --kubeconfig FILE', 1, true))
  end)

  it('lists only flags that the parsers take, with or without a value as the help says', function()
    -- A value of each kind the help names.
    local VALUES = { FILE = 'f', NAME = 'n', URL = 'http://x', TOKEN = 't', N = '5', MIB = '5', SEC = '5',
      ['text|json'] = 'json', ['json|cbor'] = 'cbor', ['MIN[:MAX]'] = '300:600', DURATION = '30s',
      NS = 'default', DUR = '15s', ADDR = ':8080', USER = 'alice', GROUP = 'g', UID = '42', DIR = 'd' }
    for _, f in ipairs(flag_lines(K.run({ '--help' }))) do
      if f.long ~= '--help' and f.long ~= '--version' then
        assert(not f.arg or VALUES[f.arg], 'no value for ' .. f.long .. ' ' .. tostring(f.arg))
        for _, name in ipairs({ f.long, f.short }) do
          local args = { name, 'version' }
          if f.arg then table.insert(args, 2, VALUES[f.arg]) end
          local o, err = cli.parse(args)
          assert.truthy(o, name .. ': ' .. tostring(err))
          assert.equals('version', o.command, name)
        end
      end
    end
    local own = K.run({ 'watch', '--help' }):match('\nFlags:\n(.-)\nGlobal flags:\n')
    for _, f in ipairs(flag_lines(own)) do
      local value = ({ FORMAT = 'json', SEL = 'app=web', LUA = 'true', NS = 'default', ['KEY,...'] = 'app',
        JSONPATH = '.metadata.name', COND = 'delete', DURATION = '30s' })[f.arg]
      for _, name in ipairs({ f.long, f.short }) do
        local args = { 'pods', name }
        if f.arg then args[3] = value end
        -- These tell how to wait, which another flag says what for.
        if f.long == '--fail-if' or f.long == '--any' or f.long == '--timeout' then
          args[#args + 1] = '--for=delete'
        end
        local o, err = watch.parse(args)
        assert.truthy(o, name .. ': ' .. tostring(err))
      end
    end
  end)

  it('of watch is what -h asks for, but not a -e expression that reads --help', function()
    local w = assert(watch.parse({ 'pods', '-e', '--help' }))
    assert.equals('--help', w.expr)
    assert.is_nil(w.help)
    assert.is_true(assert(watch.parse({ 'pods', '-n', 'x', '-h', '--frobnicate' })).help)
  end)
end)

describe('klua refuses', function()
  it('an unknown command with exit status 2, naming it', function()
    local out, err, code = K.run({ 'frobnicate' })
    assert.equals(2, code)
    assert.equals('', out)
    assert.equals('klua: unknown command "frobnicate"\nRun \'klua --help\' for usage.\n', err)
  end)

  it('a mistyped command, suggesting the nearest one as kubectl does', function()
    for typed, meant in pairs({ wacth = 'watch', rnu = 'run', verison = 'version', wat = 'watch' }) do
      local _, err, code = K.run({ typed })
      assert.equals(2, code)
      assert.equals('klua: unknown command "' .. typed .. '"\n\nDid you mean this?\n\t' .. meant
        .. '\n\nRun \'klua --help\' for usage.\n', err)
    end
  end)

  it('an unknown help topic, suggesting the nearest command', function()
    local out, err, code = K.run({ 'help', 'wach' })
    assert.equals(2, code)
    assert.equals('', out)
    assert.equals('klua: unknown help topic "wach"\n\nDid you mean this?\n\twatch\n\nRun \'klua --help\' for usage.\n',
      err)
  end)

  it('an unknown flag with exit status 2, pointing to --help', function()
    local _, err, code = K.run({ '--frobnicate', 'version' })
    assert.equals(2, code)
    assert.equals('klua: unknown flag: --frobnicate\nRun \'klua --help\' for usage.\n', err)
  end)

  it('a mistyped flag, suggesting the nearest one, and the help of the command it follows', function()
    local _, err, code = K.run({ '--kubconfig', 'k', 'version' })
    assert.equals(2, code)
    assert.equals('klua: unknown flag: --kubconfig\n\nDid you mean this?\n\t--kubeconfig\n\n'
      .. 'Run \'klua --help\' for usage.\n', err)
    _, err, code = K.run({ 'run', '--page-sise', '5', 'script.lua' })
    assert.equals(2, code)
    assert.equals('klua: unknown flag: --page-sise\n\nDid you mean this?\n\t--page-size\n\n'
      .. 'Run \'klua run --help\' for usage.\n', err)
  end)

  it('a bad flag value with exit status 2 and one line naming the flag and the value', function()
    local cases = {
      { { '--log-format', 'xml' }, 'klua: --log-format must be text or json, not "xml"' },
      { { '-v', 'abc' }, 'klua: -v needs a number of at least 0, not "abc"' },
      { { '-vabc' }, 'klua: -v needs a number of at least 0, not "abc"' },
      { { '--watch-timeout', '0' }, 'klua: --watch-timeout needs a number of at least 1, not "0"' },
      { { '--memory-limit=0' }, 'klua: --memory-limit needs a number of at least 1, not "0"' },
      { { '--page-size', '10x' }, 'klua: --page-size needs a number of at least 1, not "10x"' },
      { { '--watch-list=maybe' }, 'klua: --watch-list is a switch: true or false, not "maybe"' },
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

  it('a --context that the kubeconfig does not define, naming the file and the contexts it has', function()
    local home = no_kubeconfig().HOME
    local path = home .. '/config'
    K.write_file(path, 'current-context: a\nclusters:\n- name: k\n  cluster: {server: "https://127.0.0.1:1"}\n'
      .. 'contexts:\n- name: a\n  context: {cluster: k}\n- name: b\n  context: {cluster: k}\n')
    local out, err, code = K.run({ '--kubeconfig', path, '--context', 'nope', 'watch', 'pods' })
    assert.equals(1, code)
    assert.equals('', out)
    assert.equals('klua: context "nope" not found in ' .. path .. ' (contexts: a, b); choose one with --context '
      .. 'or set current-context\n', err)
  end)

  it('a flag without its value with exit status 2', function()
    local _, err, code = K.run({ 'version', '--kubeconfig' })
    assert.equals(2, code)
    assert.equals('klua: flag --kubeconfig needs a value\n', err)
  end)
end)

describe('klua takes flags as kubectl writes them', function()
  local cli = require('klua_testing.cli')

  it('a switch alone or with true or false, a short flag with its value joined', function()
    assert.is_true(cli.parse({ '--insecure-skip-tls-verify', 'version' }).insecure_skip_tls_verify)
    assert.is_true(cli.parse({ '--insecure-skip-tls-verify=true', 'version' }).insecure_skip_tls_verify)
    assert.is_false(cli.parse({ '--insecure-skip-tls-verify=false', 'version' }).insecure_skip_tls_verify)
    assert.equals(4, cli.parse({ '-v4', 'version' }).verbosity)
    assert.equals(7, cli.parse({ '-v=7', 'version' }).verbosity)
    assert.equals(12, cli.parse({ '--v', '12', 'version' }).verbosity)
  end)

  it('--as-group as often as there are groups, and the other impersonation flags', function()
    local o = cli.parse({ '--as', 'system:serviceaccount:ns:sa', '--as-group=g1', 'version', '--as-group', 'g 2',
      '--as-uid', '42', '--disable-compression' })
    assert.equals('system:serviceaccount:ns:sa', o.as)
    assert.same({ 'g1', 'g 2' }, o.as_groups)
    assert.equals('42', o.as_uid)
    assert.is_true(o.disable_compression)
  end)

  it('--cache-compression on unless =false, and how long an object stays unwritten before', function()
    local o = cli.parse({ 'version' })
    assert.same({ true, 0 }, { o.cache_compression, o.cache_compression_after })
    o = cli.parse({ '--cache-compression=false', '--cache-compression-after', '1m', 'version' })
    assert.same({ false, 60 }, { o.cache_compression, o.cache_compression_after })
    local _, err = cli.parse({ '--cache-compression-after=0s', 'version' })
    assert.equals('klua: --cache-compression-after must be longer than 0s', err)
  end)
end)

describe('klua takes watch\'s flags before the command, as kubectl -n NS get pods', function()
  local cli = require('klua_testing.cli')

  it('handing them to watch first, with their values, and global flags anywhere', function()
    local c = cli.parse({ '-n', 'shop', '-A=false', '--kubeconfig', 'kc', '-lapp=web', 'watch', 'pods', '-o', 'name' })
    assert.equals('watch', c.command)
    assert.same({ '-n', 'shop', '-A=false', '-lapp=web', 'pods', '-o', 'name' }, c.args)
    assert.equals('kc', c.kubeconfig)
    local after = cli.parse({ 'watch', 'pods', '--kubeconfig', 'kc' })
    assert.same({ 'pods' }, after.args)
    assert.equals('kc', after.kubeconfig)
  end)

  it('and refuses them before another command, naming watch', function()
    local _, err, code = K.run({ '-n', 'shop', 'run', 'x.lua' })
    assert.equals(2, code)
    assert.equals("klua: -n is a flag of klua watch, not of klua run\nRun 'klua run --help' for usage.\n", err)
  end)
end)

describe('klua test --help', function()
  it('prints the help of klua test, not busted\'s, as klua help test does', function()
    local help = K.run({ 'help', 'test' })
    assert.truthy(help:find('^usage: klua test %[busted args%.%.%.%]\n'), help)
    assert.truthy(help:find('except --help\nand -h, which print this help', 1, true), help)
    for _, args in ipairs({ { 'test', '--help' }, { 'test', '-h' }, { 'test', 'spec/', '--help' } }) do
      local out, err, code = run_env(no_kubeconfig(), args)
      assert.equals(0, code, err)
      assert.equals('', err)
      assert.equals(help, out)
    end
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
  local sb = testing.with_sandbox()

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
    assert.truthy(seen['info configmaps IDLE -> WATCHLIST: start, WatchList on (the default)'], err)
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

describe('klua stopping on a signal', function()
  local sb = testing.with_sandbox()

  -- A handler that never returns, logging first that it has started.
  local SPINNER = [[
    local inf = klua.informer { resource = 'configmaps', namespace = ... }
    inf:on('add', function() klua.log.info('handler started') while true do end end)
  ]]

  for _, sig in ipairs({ 'INT', 'TERM' }) do
    -- 0 is no budget at all; the other never runs out in this spec.
    for _, budget in ipairs({ '0', '1000000000000' }) do
      it(('stops on SIG%s while a handler runs without end, under --instruction-budget %s, with status 0 and one line'):format(sig, budget), function()
        local ns = 'spinner-' .. sig:lower() .. '-' .. #budget
        sb:kubectl('create namespace ' .. ns)
        sb:kubectl('create configmap spinner -n ' .. ns)
        local p = K.spawn({ '--kubeconfig', sb.kubeconfig, '--instruction-budget', budget, 'run', script(SPINNER), ns })
        assert.truthy(p:wait_for('handler started', 10, 'err'), p:errors())
        local code = p:stop(sig)
        local err = p:errors()
        p:cleanup()
        assert.equals(0, code, err)
        assert.truthy(err:find('add handler of configmaps -n ' .. ns .. ' interrupted: klua is stopping on SIG' .. sig, 1, true), err)
        assert.falsy(err:find('failed', 1, true), err)
      end)
    end
  end

  it('ends at once on a second SIGINT, even while a __gc handler runs without end as it exits', function()
    local p = K.spawn({ '--kubeconfig', sb.kubeconfig, 'run', script([[
      keep = setmetatable({}, { __gc = function() klua.log.info('finalizing') while true do end end })
      klua.informer('namespaces')
      klua.on_synced(function() klua.log.info('synced') end)
    ]]) })
    assert.truthy(p:wait_for('synced', 10, 'err'), p:errors())
    p:signal('INT')
    assert.truthy(p:wait_for('finalizing', 10, 'err'), p:errors())
    local code = p:stop('INT')
    p:cleanup()
    assert.equals(130, code)
  end)
end)
