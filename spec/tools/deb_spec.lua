-- `make deb`: the Debian package debhelper builds from debian/. Built once
-- for this file (make builds again only what changed, in build/deb), then
-- unpacked with dpkg-deb -x into a temporary root: the klua there carries
-- its Lua library inside and finds the harness and the sandbox server under
-- its own ../share/klua, so it runs from the unpacked tree as it would from
-- /usr.
local sandbox = require('support.sandbox')
local K = require('support.klua')
local fixtures = require('support.fixtures')

local root = os.getenv('KLUA_ROOT') or '.'
local build = os.getenv('KLUA_BUILD') or 'build'

local LIST_CONFIGMAPS = fixtures.list_configmaps_script('deb-spec')

describe('make deb', function()
  local deb, unpacked, bin

  setup(function()
    local out = K.run_command(('make -s -C %s deb BUILD=%s 2>&1; echo "status $?"')
      :format(K.quote(root), K.quote(build)))
    assert.matches('status 0$', out)
    deb = K.run_command(('ls %s/%s/klua_*_*.deb | grep -v dbgsym'):format(K.quote(root), K.quote(build)))
    unpacked = K.tmpdir()
    assert.are.equal('', K.run_command(('dpkg-deb -x %s %s 2>&1'):format(K.quote(deb), K.quote(unpacked))))
    bin = unpacked .. '/usr/bin/klua'
  end)

  teardown(function() os.execute('rm -rf ' .. K.quote(unpacked)) end)

  it('declares the shared libraries it links and lua-cjson as dependencies, bundling none', function()
    local depends = K.run_command('dpkg-deb -f ' .. K.quote(deb) .. ' Depends')
    for _, pkg in ipairs({ 'libcurl4', 'liblua5.4%-0', 'libyaml%-0%-2', 'libsimdjson', 'libmicrohttpd', 'libzstd1', 'lua%-cjson' }) do
      assert.matches(pkg, depends)
    end
    assert.are.equal('', K.run_command('dpkg-deb -c ' .. K.quote(deb) .. ' | grep -E "\\.so(\\.|$)"'))
  end)

  it('holds the binary, the plugin link, the man pages and the completions at their Debian paths', function()
    assert.are.equal('klua', K.run_command('readlink ' .. K.quote(unpacked .. '/usr/bin/kubectl-klua')))
    for _, path in ipairs({ 'man/man1/klua.1.gz', 'man/man1/klua-run.1.gz', 'man/man1/klua-watch.1.gz',
      'man/man1/klua-test.1.gz', 'man/man7/klua-lua.7.gz', 'bash-completion/completions/klua',
      'zsh/vendor-completions/_klua', 'fish/vendor_completions.d/klua.fish', 'doc/klua/copyright',
      'doc/klua/README.md', 'doc/klua/docs/api.md', 'doc/klua/docs/tutorial.md', 'doc/klua/examples/README.md' }) do
      assert.are.equal('yes', K.run_command(('test -s %s && echo yes'):format(K.quote(unpacked .. '/usr/share/' .. path))),
        path)
    end
    local out = K.run_command('LC_ALL=C.UTF-8 man -l ' .. K.quote(unpacked .. '/usr/share/man/man1/klua-watch.1.gz')
      .. ' 2>&1 | col -b')
    assert.matches('%-%-field%-selector', out)
    for _, name in ipairs({ 'kubectl-klua', 'kubectl_complete-klua' }) do
      assert.are.equal('klua.1.gz', K.run_command('readlink ' .. K.quote(unpacked .. '/usr/share/man/man1/' .. name .. '.1.gz')))
    end
  end)

  -- DEP-5: the license named, and its text the repository's LICENSE, line for line.
  it('states its license, the text of LICENSE, in its copyright file', function()
    local copyright = K.read_file(unpacked .. '/usr/share/doc/klua/copyright')
    assert.matches('\nLicense: Expat\n', copyright)
    local license = K.read_file(root .. '/LICENSE')
    local grant = license:match('(Permission is hereby granted.*)$')
    local stanza = copyright:match('\nLicense: Expat\n( Permission is hereby granted.*)$')
    assert.truthy(grant and stanza)
    local lines = {}
    for line in stanza:gmatch('[^\n]+') do lines[#lines + 1] = line == ' .' and '' or line:sub(2) end
    assert.equals(grant, table.concat(lines, '\n') .. '\n')
    assert.matches('Copyright %(c%) 2026 the klua authors', license)
  end)

  it('passes lintian without an error or a warning', function()
    local out = K.run_command('lintian ' .. K.quote(deb) .. ' 2>&1 | grep -E "^[EW]: "')
    assert.are.equal('', out)
  end)

  -- Each shell's own search path, as the shell installed here has it, taken
  -- under the unpacked root: the completions are found where a system that
  -- installed the package would find them.
  it("gives a zsh completion Debian's zsh loads: compinit registers it in _comps", function()
    local out = K.run_command(('zsh -f -c %s 2>&1'):format(K.quote(([[
fpath=(%s${^fpath} $fpath)
autoload -Uz compinit && compinit -u -D
print -r -- "klua=$_comps[klua] kubectl-klua=$_comps[kubectl-klua]"
hits=(${^fpath}/_klua(N))
print -r -- "from $hits[1]"
]]):format(unpacked))))
    assert.matches('klua=_klua kubectl%-klua=_klua', out)
    assert.matches('from ' .. (unpacked .. '/usr/share/zsh/vendor-completions/_klua'):gsub('%p', '%%%0'), out)
  end)

  -- fish --no-config leaves fish_complete_path empty: an empty HOME stands in
  -- for the user's configuration instead.
  it("gives a fish completion fish loads from its vendor directory", function()
    local home = K.tmpdir()
    local out = K.run_command(('HOME=%s XDG_CONFIG_HOME=%s XDG_DATA_HOME=%s PATH=%s/usr/bin:$PATH fish -c %s 2>&1')
      :format(K.quote(home), K.quote(home), K.quote(home), K.quote(unpacked), K.quote(([[
set -p fish_complete_path %s$fish_complete_path
complete -C 'klua wat'
]]):format(unpacked))))
    os.execute('rm -rf ' .. K.quote(home))
    assert.are.equal('watch', out)
  end)

  it('gives a klua that runs a controller from the unpacked tree', function()
    local sb = sandbox.start()
    sb:kubectl('create namespace deb-spec')
    sb:kubectl('-n deb-spec create configmap packaged')
    local out, err, code = K.run({ '--kubeconfig', sb.kubeconfig, 'run', K.script(LIST_CONFIGMAPS) },
      { bin = bin, cwd = '/' })
    sb:stop()
    assert.are.equal(0, code, err)
    assert.are.equal('packaged\n', out)
    local version = K.run({ '--version' }, { bin = bin })
    assert.matches('^klua ' .. K.read_file(root .. '/debian/changelog'):match('^klua %(([^)]+)%)'):gsub('%p', '%%%0'),
      version)
  end)

  it('gives a klua test that finds the harness and the sandbox under the unpacked share/klua', function()
    local project = K.tmpdir()
    os.execute('mkdir ' .. K.quote(project .. '/spec'))
    K.write_file(project .. '/spec/where_spec.lua', [[
local testing = require('klua.testing')
describe('the packaged harness', function()
  it('starts the packaged sandbox', function()
    print('harness ' .. package.searchpath('klua.testing', package.path))
    local cluster = testing.sandbox()
    print('sandbox ' .. testing.root .. '/scripts/sandbox-apiserver')
    cluster:kubectl('create namespace from-deb')
    cluster:stop()
  end)
end)
]])
    local out = K.run_command(('cd %s && env -u KLUA_ROOT -u KLUA_BIN -u LUA_PATH -u LUA_CPATH '
      .. 'timeout 120 %s test 2>&1; echo "status $?"'):format(K.quote(project), K.quote(bin)))
    os.execute('rm -rf ' .. K.quote(project))
    assert.matches('status 0$', out)
    local share = (unpacked .. '/usr/share/klua'):gsub('%p', '%%%0')
    assert.matches('harness ' .. share .. '/lua/klua/testing%.lua\n', out)
    assert.matches('sandbox ' .. share .. '/scripts/sandbox%-apiserver\n', out)
  end)
end)
