-- `make install` and `make uninstall`: the installed klua carries its Lua
-- library and reads nothing from the source tree, so it runs a controller
-- from any directory; kubectl finds it as the plugin `kubectl klua`; the
-- test harness and the sandbox server are installed with it, and `klua test`
-- uses them (docs/testing.md).
local K = require('support.klua')
local fixtures = require('support.fixtures')
local testing = require('klua.testing')

local root = os.getenv('KLUA_ROOT') or '.'
local build = os.getenv('KLUA_BUILD') or 'build'

-- A script that waits for its ConfigMap informer to sync and prints the names.
local LIST_CONFIGMAPS = fixtures.list_configmaps_script('install-spec', "local klua = require('klua')\n")

describe('make install', function()
  local sb = testing.with_sandbox()
  local dest, script

  setup(function()
    sb:kubectl('create namespace install-spec')
    sb:kubectl('-n install-spec create configmap installed-a --from-literal=k=v')
    sb:kubectl('-n install-spec create configmap installed-b --from-literal=k=v')
    dest = K.tmpdir()
    script = K.script(LIST_CONFIGMAPS)
    local out = K.run_command(('make -s -C %s install BUILD=%s DESTDIR=%s PREFIX=/usr 2>&1; echo "status $?"')
      :format(K.quote(root), K.quote(build), K.quote(dest)))
    assert.matches('status 0$', out)
  end)

  it('puts the binary, the kubectl plugin link and the examples under PREFIX in DESTDIR', function()
    assert.truthy(K.read_file(dest .. '/usr/bin/klua') ~= '')
    assert.are.equal('klua', K.run_command('readlink ' .. K.quote(dest .. '/usr/bin/kubectl-klua')))
    assert.matches('klua.informer', K.read_file(dest .. '/usr/share/doc/klua/examples/pod-logger.lua'))
  end)

  it('puts the man pages where man finds them, rendering without warnings and listing every flag the help lists', function()
    local man = dest .. '/usr/share/man'
    local pages = { { 'man1/klua.1', { '--help' } }, { 'man1/klua-run.1', { 'help', 'run' } },
      { 'man1/klua-watch.1', { 'help', 'watch' } }, { 'man1/klua-record.1', { 'help', 'record' } },
      { 'man1/klua-replay.1', { 'help', 'replay' } }, { 'man1/klua-webhook-config.1', { 'help', 'webhook-config' } },
      { 'man1/klua-test.1', { 'help', 'test' } } }
    for _, p in ipairs(pages) do
      local path = man .. '/' .. p[1]
      local warnings = K.run_command('LC_ALL=C.UTF-8 groff -man -Tutf8 -ww -z ' .. K.quote(path) .. ' 2>&1; echo "status $?"')
      assert.are.equal('status 0', warnings, p[1])
      local text = K.run_command('MANWIDTH=200 man -l ' .. K.quote(path) .. ' 2>&1 | col -b')
      local help = K.run(p[2])
      local flags = 0
      for line in help:gmatch('[^\n]+') do
        local left = line:match('^  (.-%S)  ') or ''
        for flag in left:gmatch('%-%-[%w-]+') do
          flags = flags + 1
          assert.truthy(text:find(flag, 1, true), p[1] .. ' lacks ' .. flag)
        end
      end
      assert.is_true(flags > 20, p[1])
      for _, section in ipairs({ 'EXAMPLES', 'EXIT STATUS', 'ENVIRONMENT', 'FILES' }) do
        assert.truthy(text:find('\n' .. section .. '\n', 1, true), p[1] .. ' lacks ' .. section)
      end
    end
    -- The plugin and its completion command are klua under other names.
    for _, name in ipairs({ 'kubectl-klua', 'kubectl_complete-klua' }) do
      assert.are.equal('.so man1/klua.1\n', K.read_file(man .. '/man1/' .. name .. '.1'))
    end
    -- watch's own flags, from lua/klua/cmd/watch.lua's FLAGS, are in klua-watch(1).
    assert.truthy(K.read_file(man .. '/man1/klua-watch.1'):find('\\-\\-field\\-selector', 1, true))
    local api = K.run_command('MANWIDTH=200 man -l ' .. K.quote(man .. '/man7/klua-lua.7') .. ' 2>&1 | col -b')
    assert.matches('klua%.after%(seconds, fn%)', api)
    assert.matches('klua%.api%.get%(resource, key%)', api)
  end)

  it('puts the shell completions where bash-completion, zsh and fish look', function()
    local share = dest .. '/usr/share'
    assert.matches('complete %-F _klua klua', K.read_file(share .. '/bash-completion/completions/klua'))
    assert.matches('^#compdef klua', K.read_file(share .. '/zsh/vendor-completions/_klua'))
    assert.matches('__klua_complete', K.read_file(share .. '/fish/vendor_completions.d/klua.fish'))
  end)

  it('puts the zsh completion under /usr/local where zsh looks there', function()
    local other = K.tmpdir()
    local out = K.run_command(('make -s -C %s install BUILD=%s DESTDIR=%s PREFIX=/usr/local 2>&1; echo "status $?"')
      :format(K.quote(root), K.quote(build), K.quote(other)))
    assert.matches('status 0$', out)
    assert.matches('^#compdef klua', K.read_file(other .. '/usr/local/share/zsh/site-functions/_klua'))
    os.execute('rm -rf ' .. K.quote(other))
  end)

  it("installs the README with the docs and examples it names, so that its links resolve", function()
    local doc = dest .. '/usr/share/doc/klua/'
    local readme = K.read_file(doc .. 'README.md')
    local named = 0
    for path in (readme .. K.read_file(doc .. 'examples/README.md')):gmatch('%f[%w]docs/[%w_-]+%.md') do
      named = named + 1
      assert.are.equal('yes', K.run_command('test -s ' .. K.quote(doc .. path) .. ' && echo yes'), path)
    end
    for target in readme:gmatch('%]%(([^)#]+)[^)]*%)') do
      if not target:match('^%a+:') then
        assert.are.equal('yes', K.run_command('test -e ' .. K.quote(doc .. target) .. ' && echo yes'), target)
      end
    end
    assert.is_true(named > 10)
    for _, page in ipairs({ 'tutorial', 'config', 'sandbox', 'deploy', 'scale', 'architecture', 'testing', 'api' }) do
      assert.are.equal('yes', K.run_command('test -s ' .. K.quote(doc .. 'docs/' .. page .. '.md') .. ' && echo yes'), page)
    end
    assert.are.equal('yes', K.run_command('test -s ' .. K.quote(doc .. 'docs/img/pipeline.svg') .. ' && echo yes'))
  end)

  it('gives kubectl_complete-klua, which kubectl runs to complete `kubectl klua`', function()
    local function kubectl_complete(...)
      return K.run({ '__complete', 'klua', ... }, {
        bin = 'kubectl', cwd = '/', env = { PATH = dest .. '/usr/bin:' .. os.getenv('PATH') } })
    end
    local out = kubectl_complete('wat')
    assert.matches('^watch\n:4\n$', out)
    out = kubectl_complete('--kubeconfig', sb.kubeconfig, 'watch', '-n', 'install-')
    assert.matches('^install%-spec\n:4\n$', out)
  end)

  it('gives a klua that runs a controller from another directory', function()
    local out, err, code = K.run({ '--kubeconfig', sb.kubeconfig, 'run', script },
      { bin = dest .. '/usr/bin/klua', cwd = '/' })
    assert.are.equal(0, code, err)
    assert.are.equal('installed-a,installed-b\n', out)
  end)

  it('gives a plugin kubectl runs as `kubectl klua`', function()
    local out, err, code = K.run({ 'klua', '--kubeconfig', sb.kubeconfig, 'run', script }, {
      bin = 'kubectl', cwd = '/',
      env = { PATH = dest .. '/usr/bin:' .. os.getenv('PATH') },
    })
    assert.are.equal(0, code, err)
    assert.are.equal('installed-a,installed-b\n', out)
  end)

  it('gives a klua test that runs a user\'s specs with the installed harness, sandbox and klua', function()
    local project = K.tmpdir()
    os.execute('mkdir ' .. K.quote(project .. '/spec'))
    K.write_file(project .. '/lister.lua', LIST_CONFIGMAPS)
    K.write_file(project .. '/spec/lister_spec.lua', [[
local testing = require('klua.testing')
describe('lister.lua', function()
  it('prints the ConfigMaps of install-spec', function()
    print('harness ' .. package.searchpath('klua.testing', package.path))
    print('sandbox ' .. testing.root .. '/scripts/sandbox-apiserver')
    print('klua ' .. testing.bin)
    local cluster = testing.sandbox()
    cluster:kubectl('create namespace install-spec')
    cluster:kubectl('-n install-spec create configmap only')
    local out, err, code = testing.run({ '--kubeconfig', cluster.kubeconfig, 'run', 'lister.lua' })
    assert.equals(0, code, err)
    assert.equals('only\n', out)
  end)
end)
]])
    local out = K.run_command(('cd %s && env -u KLUA_ROOT -u KLUA_BIN -u LUA_PATH -u LUA_CPATH '
      .. 'timeout 120 %s test 2>&1; echo "status $?"'):format(K.quote(project), K.quote(dest .. '/usr/bin/klua')))
    assert.matches('status 0$', out)
    assert.matches('1 success / 0 failures', out)
    local share = dest .. '/usr/share/klua'
    assert.matches('harness ' .. share:gsub('%p', '%%%0') .. '/lua/klua/testing.lua\n', out)
    assert.matches('sandbox ' .. share:gsub('%p', '%%%0') .. '/scripts/sandbox%-apiserver\n', out)
    assert.matches('klua ' .. (dest .. '/usr/bin/klua'):gsub('%p', '%%%0') .. '\n', out)
  end)

  it('is undone by make uninstall', function()
    local other = K.tmpdir()
    K.run_command(('make -s -C %s install uninstall BUILD=%s DESTDIR=%s PREFIX=/opt/k 2>&1')
      :format(K.quote(root), K.quote(build), K.quote(other)))
    assert.are.equal('', K.run_command('find ' .. K.quote(other) .. ' -type f -o -type l'))
    os.execute('rm -rf ' .. K.quote(other))
  end)
end)
