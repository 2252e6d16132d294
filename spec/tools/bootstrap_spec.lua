-- scripts/build/bootstrap, the set-up every make target runs first: it installs
-- only what the target needs, says what and why, waits for a dpkg lock
-- held by another package manager, and on a machine without apt prints the
-- packages to install by hand. The package tools are stand-ins here, so no
-- spec installs anything: a folder of stub commands comes first on PATH.
local K = require('support.klua')

local root = os.getenv('KLUA_ROOT') or '.'

-- A folder holding only the tools the script runs, by link, so that no
-- package tool of this machine is found.
local function bare_path()
  local dir = K.tmpdir()
  for _, tool in ipairs({ 'sh', 'grep', 'cat', 'printf' }) do
    os.execute(('ln -s "$(command -v %s)" %s/%s'):format(tool, K.quote(dir), tool))
  end
  return dir
end

-- A folder of stub commands on a bare path. `installed` lists the packages dpkg-query
-- reports as installed; apt-get logs its arguments to apt.log and fails
-- with apt's lock message the first `lock_failures` times it is called.
local function stubs(opts)
  local dir = bare_path()
  local installed = table.concat(opts.installed or {}, ' ')
  K.write_file(dir .. '/dpkg-query', ([[#!/bin/sh
for p in %s; do [ "$p" = "$3" ] && { printf 'install ok installed'; exit 0; }; done
exit 1
]]):format(installed ~= '' and installed or 'none'))
  K.write_file(dir .. '/apt-get', ([[#!/bin/sh
n=$(cat %s/apt.count 2>/dev/null || echo 0)
echo $((n + 1)) > %s/apt.count
if [ "$n" -lt %d ]; then
  echo "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 42 (apt-get)" >&2
  exit 100
fi
echo "$*" >> %s/apt.log
]]):format(dir, dir, opts.lock_failures or 0, dir))
  K.write_file(dir .. '/sleep', '#!/bin/sh\nexit 0\n')
  K.write_file(dir .. '/id', '#!/bin/sh\necho 0\n')
  if opts.kubectl then K.write_file(dir .. '/kubectl', '#!/bin/sh\n') end
  os.execute('find ' .. K.quote(dir) .. ' -type f -exec chmod +x {} +')
  return dir
end

-- Runs the bootstrap for a target with PATH set to `path`; returns stderr,
-- the exit status and apt-get's log.
local function bootstrap(target, path, dir)
  local err = os.tmpname()
  local ok, _, status = os.execute(('PATH=%s sh %s/scripts/build/bootstrap %s >/dev/null 2>%s')
    :format(K.quote(path), K.quote(root), target, err))
  local text = K.read_file(err)
  os.remove(err)
  return text, ok and 0 or status, dir and K.read_file(dir .. '/apt.log') or ''
end

local BUILD = { 'gcc', 'g++', 'make', 'pkg-config', 'python3', 'liblua5.4-dev', 'lua-cjson-dev',
  'libcurl4-openssl-dev', 'libyaml-dev', 'libsimdjson-dev', 'libmicrohttpd-dev', 'libzstd-dev' }

local function with(list, ...)
  local out = { table.unpack(list) }
  for _, p in ipairs({ ... }) do out[#out + 1] = p end
  return out
end

describe('scripts/build/bootstrap', function()
  it('does nothing when the target has everything it needs', function()
    local dir = stubs { installed = BUILD }
    local err, status, log = bootstrap('build', dir, dir)
    assert.are.equal(0, status)
    assert.are.equal('', err)
    assert.are.equal('', log)
  end)

  it('installs only what the demo needs: no test runner, fuzzer or HTTP/2 proxy', function()
    local dir = stubs { installed = BUILD, kubectl = true }
    local err, status, log = bootstrap('demo', dir, dir)
    assert.are.equal(0, status)
    assert.matches('install %-y %-qq %-%-no%-install%-recommends openssl\n$', log)
    assert.matches('openssl +the sandbox API server', err)
    for _, p in ipairs({ 'busted', 'clang', 'nghttp2' }) do assert.is_nil(log:find(p, 1, true)) end
  end)

  it('adds the spec runner and proxy for make test, and kubectl where none is installed', function()
    local dir = stubs { installed = with(BUILD, 'openssl') }
    local err, status, log = bootstrap('test', dir, dir)
    assert.are.equal(0, status)
    local install = log:match('install %-y %-qq %-%-no%-install%-recommends ([^\n]*)')
    for _, p in ipairs({ 'lua5.4', 'lua-busted', 'curl', 'nghttp2-proxy', 'kubernetes-client' }) do
      assert.truthy(install:find(p, 1, true), p .. ' in: ' .. install)
    end
    assert.is_nil(install:find('clang', 1, true))
    assert.matches('make test needs these Debian packages', err)
    assert.matches('lua%-busted +the spec runner', err)
  end)

  it('adds the peers make bench measures, the HTTP/2 proxy of its many-informers row, and node and npm where none is installed', function()
    local dir = stubs { installed = with(BUILD, 'openssl'), kubectl = true }
    local err, status, log = bootstrap('bench', dir, dir)
    assert.are.equal(0, status)
    assert.matches('install %-y %-qq %-%-no%-install%-recommends python3%-kubernetes nghttp2%-proxy nodejs npm\n$', log)
    assert.matches('python3%-kubernetes +the Python kubernetes client, a peer in make bench', err)
  end)

  it('waits for the dpkg lock another package manager holds, saying so once', function()
    local dir = stubs { installed = { 'gcc' }, lock_failures = 3 }
    local err, status, log = bootstrap('build', dir, dir)
    assert.are.equal(0, status)
    local waits = K.count(err, 'holds the dpkg lock')
    assert.are.equal(1, waits)
    assert.matches('update %-qq\n', log)
    assert.matches('install %-y %-qq %-%-no%-install%-recommends g%+%+ ', log)
  end)

  it('on a machine without apt prints the packages to install by hand', function()
    local dir = bare_path()
    local err, status = bootstrap('build', dir)
    assert.are.equal(1, status)
    assert.matches('not a Debian%-like system', err)
    assert.matches('libsimdjson%-dev', err)
  end)

  it('refuses a target it does not know, naming the ones it does', function()
    local err, status = bootstrap('nope', bare_path())
    assert.are.equal(2, status)
    assert.matches("unknown target 'nope' %(build, demo, test, fuzz, bench or deb%)", err)
  end)
end)

describe('make', function()
  local function warn_flags(dir)
    return K.run_command(('make -s -C %s -f %s/Makefile --eval %s show-warn 2>&1')
      :format(K.quote(dir), K.quote(root), K.quote('show-warn: ; @echo $(WARN)')))
  end

  it('makes warnings errors in a git checkout, and not in a release tree', function()
    assert.are.equal('-Wall -Wextra -Werror', warn_flags(root))
    local release = K.tmpdir()
    assert.are.equal('-Wall -Wextra', warn_flags(release))
  end)

  it('names the Debian package of a library pkg-config cannot find', function()
    local out = K.run_command(('make -s -C %s pkgcheck PKG_DEB=nosuchlib-klua:libnosuch-dev 2>&1'):format(K.quote(root)))
    assert.matches('library nosuchlib%-klua not found by pkg%-config: install the Debian package libnosuch%-dev', out)
  end)
end)
