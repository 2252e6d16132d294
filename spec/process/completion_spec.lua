-- Shell completion (`klua completion bash|zsh|fish`), as kubectl's: the
-- script calls back into klua as `klua __complete WORDS...`, which offers
-- the commands and flags its help lists (the global flag table of
-- src/cli/cli.c, and for watch lua/klua/cmd/watch.lua's FLAGS) and asks the
-- server's discovery, through the kubeconfig on the line, for the resources
-- after `watch`. The bash script is exercised as bash runs it: sourced,
-- with COMP_WORDS and COMP_CWORD set, its function called, COMPREPLY read.
local sandbox = require('support.sandbox')
local K = require('support.klua')

local root = os.getenv('KLUA_ROOT') or '.'

-- What bash offers for the words of a line, the last the one being
-- completed (COMP_CWORD points at it), in the order klua gave them.
local function bash_complete(words)
  local dir = K.tmpdir()
  local quoted = { K.quote(K.bin) }
  for _, w in ipairs(words) do quoted[#quoted + 1] = K.quote(w) end
  K.write_file(dir .. '/t.bash', ([[
source <(%s completion bash) || exit 1
COMP_WORDS=(%s)
COMP_CWORD=%d
COMP_LINE="${COMP_WORDS[*]}"
_klua
printf '%%s\n' "${COMPREPLY[@]}"
]]):format(K.quote(K.bin), table.concat(quoted, ' '), #words))
  local out = K.run_command('cd ' .. K.quote(dir) .. ' && bash --norc --noprofile t.bash 2>&1')
  os.execute('rm -rf ' .. K.quote(dir))
  local got = {}
  for line in out:gmatch('[^\n]+') do got[#got + 1] = line end
  return got
end

local function has(list, want)
  for _, v in ipairs(list) do
    if v == want then return true end
  end
  return false
end

-- The flag names a help text lists, in its layout ("  -n, --namespace NS").
local function flags_of_help(args)
  local out = K.run(args)
  local names = {}
  for line in out:gmatch('[^\n]+') do
    local left = line:match('^  (%-.-)  ') or line:match('^  (    %-%-.-)  ')
    if left then
      for name in left:gmatch('%-%-?[%w-]+') do names[#names + 1] = name end
    end
  end
  return names
end

describe('klua completion', function()
  it('refuses an unknown shell with one line naming those it knows, exit 2', function()
    local out, err, code = K.run({ 'completion', 'tcsh' })
    assert.are.equal(2, code)
    assert.are.equal('', out)
    assert.are.equal('klua completion: unknown shell "tcsh": use bash, zsh or fish\n', err)
    local _, err2, code2 = K.run({ 'completion' })
    assert.are.equal(2, code2)
    assert.matches('^klua completion: [^\n]*bash, zsh or fish\n$', err2)
  end)

  it('prints a bash script bash reads without error', function()
    local out = K.run_command(K.quote(K.bin) .. ' completion bash | bash -n 2>&1; echo "status $?"')
    assert.are.equal('status 0', out)
  end)

  for _, shell in ipairs({ 'zsh', 'fish' }) do
    -- zsh and fish come from Debian's packages, installed by scripts/build/bootstrap test.
    -- fish's script is also run below; zsh's completion system cannot be driven
    -- without a terminal (zpty), so its script is only parsed.
    it('prints a ' .. shell .. ' script ' .. shell .. ' parses without error', function()
      local check = shell == 'zsh' and 'zsh -n' or 'fish --no-execute'
      local dir = K.tmpdir()
      local out = K.run_command(('%s completion %s > %s/script && %s %s/script 2>&1; echo "status $?"')
        :format(K.quote(K.bin), shell, K.quote(dir), check, K.quote(dir)))
      assert.are.equal('status 0', out)
      assert.matches('__complete', K.read_file(dir .. '/script'))
      os.execute('rm -rf ' .. K.quote(dir))
    end)
  end
end)

describe('fish completion', function()
  -- fish's `complete -C LINE` answers as a TAB at the end of LINE would; the
  -- script calls the klua it finds on PATH by the name typed.
  local function fish_complete(line)
    local dir = K.tmpdir()
    local bindir = K.run_command('dirname "$(realpath ' .. K.quote(K.bin) .. ')"')
    K.run_command(('%s completion fish > %s/klua.fish'):format(K.quote(K.bin), K.quote(dir)))
    local out = K.run_command(('PATH=%s:"$PATH" fish --no-config -c %s 2>&1'):format(K.quote(bindir),
      K.quote(('source %s/klua.fish; complete -C %s'):format(dir, K.quote(line)))))
    os.execute('rm -rf ' .. K.quote(dir))
    local got = {}
    for word in out:gmatch('[^\n]+') do got[#got + 1] = word end
    return got
  end

  it("completes commands and the words of a flag's argument as the bash script does", function()
    assert.are.same({ 'watch' }, fish_complete('klua wa'))
    assert.are.same({ 'custom-columns', 'json', 'jsonpath', 'line', 'name', 'ndjson', 'wide', 'yaml' },
      fish_complete('klua watch pods -o '))
    assert.are.same({ '--log-format=json', '--log-format=text' }, fish_complete('klua --log-format='))
  end)
end)

describe('bash completion', function()
  it('completes the commands the help lists', function()
    local got = bash_complete({ '' })
    for _, command in ipairs({ 'run', 'watch', 'record', 'replay', 'test', 'version', 'completion', 'help' }) do
      assert.is_true(has(got, command), command)
    end
    assert.is_false(has(got, '__complete'))
    assert.are.same({ 'watch' }, bash_complete({ 'wa' }))
  end)

  it('completes every global flag klua --help lists, and only what begins with the word', function()
    local got = bash_complete({ '--' })
    local listed = flags_of_help({ '--help' })
    assert.is_true(#listed > 20)
    for _, flag in ipairs(listed) do
      if flag:sub(1, 2) == '--' and flag ~= '--v' then assert.is_true(has(got, flag), flag) end
    end
    assert.are.same({ '--leader-elect', '--leader-election-id', '--leader-election-namespace',
      '--leader-elect-lease-duration', '--leader-elect-renew-deadline', '--leader-elect-retry-period' },
      bash_complete({ '--lead' }))
  end)

  it("completes watch's own flags from klua watch --help, after watch only", function()
    local got = bash_complete({ 'watch', 'pods', '-' })
    local listed = flags_of_help({ 'watch', '--help' })
    for _, flag in ipairs(listed) do
      if flag ~= '--v' then assert.is_true(has(got, flag), flag) end
    end
    assert.is_true(has(got, '--field-selector'))
    assert.is_false(has(bash_complete({ '--' }), '--field-selector'))
  end)

  it("completes record's and replay's own flags from their help, and a recording's file name after replay", function()
    for _, command in ipairs({ 'record', 'replay' }) do
      local got = bash_complete({ command, 'x', '-' })
      local listed = flags_of_help({ command, '--help' })
      for _, flag in ipairs(listed) do
        if flag ~= '--v' then assert.is_true(has(got, flag), command .. ' ' .. flag) end
      end
    end
    assert.are.same({ '--include-secret-data' }, bash_complete({ 'record', 'pods', '--inc' }))
    assert.are.same({ '--kubeconfig-out' }, bash_complete({ 'replay', 'x', '--kubeconfig-o' }))
    local dir = K.tmpdir()
    K.write_file(dir .. '/incident.ndjson', '')
    assert.are.same({ dir .. '/incident.ndjson' }, bash_complete({ 'replay', dir .. '/inci' }))
    os.execute('rm -rf ' .. K.quote(dir))
  end)

  it('completes the words a flag takes one of, and file names for a FILE', function()
    assert.are.same({ 'text', 'json' }, bash_complete({ '--log-format', '' }))
    assert.are.same({ 'json', 'jsonpath' }, bash_complete({ 'watch', 'pods', '-o', 'j' }))
    assert.are.same({ 'bash', 'zsh', 'fish' }, bash_complete({ 'completion', '' }))
    local dir = K.tmpdir()
    K.write_file(dir .. '/kubeconfig-for-completion', '')
    local got = bash_complete({ '--kubeconfig', dir .. '/kubeconfig-for-c' })
    assert.are.same({ dir .. '/kubeconfig-for-completion' }, got)
    os.execute('rm -rf ' .. K.quote(dir))
  end)

  describe('with a server', function()
    local sb

    setup(function()
      sb = sandbox.start()
      sb:kubectl('apply -f ' .. K.quote(root .. '/examples/podset-crd.yaml'))
      sb:kubectl('create namespace completion-a')
      sb:kubectl('create namespace completion-b')
      sb:kubectl('-n completion-a create configmap alpha-one')
      sb:kubectl('-n completion-a create configmap alpha-two')
      sb:kubectl('-n completion-b create configmap alpha-three')
    end)

    teardown(function() sb:stop() end)

    it("completes watch's resource from the server's discovery, custom resources included", function()
      local got = bash_complete({ '--kubeconfig', sb.kubeconfig, 'watch', '' })
      for _, r in ipairs({ 'pods', 'configmaps', 'namespaces', 'deployments.apps', 'podsets.demo.klua.dev' }) do
        assert.is_true(has(got, r), r)
      end
      -- Subresources and resources that cannot be watched are not offered.
      assert.is_false(has(got, 'pods/status'))
      assert.are.same({ 'configmaps' }, bash_complete({ '--kubeconfig', sb.kubeconfig, 'watch', 'configm' }))
    end)

    it('completes namespaces after -n from the server', function()
      assert.are.same({ 'completion-a', 'completion-b' },
        bash_complete({ 'watch', '--kubeconfig', sb.kubeconfig, 'pods', '-n', 'completion-' }))
    end)

    it('completes the names of the objects after watch TYPE, in the namespace of -n, or every one with -A', function()
      local function names(...)
        local got = {}
        for _, n in ipairs(bash_complete({ '--kubeconfig', sb.kubeconfig, 'watch', ... })) do
          if n:match('^alpha') then got[#got + 1] = n end
        end
        return got
      end
      assert.are.same({ 'alpha-one', 'alpha-two' }, names('configmaps', '-n', 'completion-a', 'alpha'))
      assert.are.same({ 'alpha-three' }, names('cm', '--namespace=completion-b', 'al'))
      assert.are.same({ 'alpha-one', 'alpha-three', 'alpha-two' }, names('-A', 'configmaps', 'alpha'))
      -- The context's namespace (the sandbox's is default) holds none of them.
      assert.are.same({}, names('configmaps', 'alpha'))
    end)

    it('offers nothing, quietly, when no server answers', function()
      local dir = K.tmpdir()
      K.write_file(dir .. '/kubeconfig', K.read_file(sb.kubeconfig):gsub('https?://[^\n]+',
        'http://127.0.0.1:1'))
      local out, err, code = K.run({ '__complete', '--kubeconfig', dir .. '/kubeconfig', 'watch', '' })
      assert.are.same({ '', '', 0 }, { out:gsub(':4\n$', ''), err, code })
      local out2, err2, code2 = K.run({ '__complete', '--kubeconfig', dir .. '/missing', 'watch', '' })
      assert.are.same({ ':4\n', '', 0 }, { out2, err2, code2 })
      os.execute('rm -rf ' .. K.quote(dir))
    end)
  end)
end)
