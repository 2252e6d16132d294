-- `klua watch ... --until EXPR` and kubectl wait's `--for` spellings: a
-- wait that ends with status 0 once the selected objects meet it, printing
-- "pod/x condition met" as kubectl wait does, 1 on --fail-if or --timeout
-- (kubectl wait's status and words), and which waits for objects that do
-- not exist yet where kubectl wait fails. Where kubectl has the same wait,
-- each case runs `kubectl wait` and `klua watch` side by side on the same
-- sandbox object, makes the same change once both watch, and compares
-- their exit status, stdout and error. The reading of --for and --timeout
-- is in spec/unit/watch_diff_spec.lua; the rules, with the kubectl source
-- they follow, in lua/klua/cmd/waiter.lua and docs/watch.md.
local K = require('support.klua')
local sandbox = require('support.sandbox')
local testing = require('klua.testing')

describe('klua watch waits', function()
  local sb, watcher = K.watched_sandbox()
  local namespace = sandbox.namespaces(sb, 'wait')

  local function pod(ns, name, labels)
    sb:kubectl(('run %s -n %s --image=nginx%s'):format(name, ns, labels and (' -l ' .. labels) or ''))
  end

  local function set_status(ns, name, status)
    sb:kubectl(('patch pod %s -n %s --subresource=status --type=merge -p \'%s\''):format(name, ns, status))
  end

  -- The wait p must be over, with status 0, having printed printed.
  local function over(p, printed)
    assert.equals(0, p:wait(20), p:errors())
    assert.equals(printed, p:output())
  end

  local function ready(ns, name)
    set_status(ns, name, '{"status":{"conditions":[{"type":"Ready","status":"True"}]}}')
  end

  -- `kubectl ARGS` in the background: its output(), errors() and exit_code().
  local function kubectl_bg(args)
    local base = sb:tmpfile('kubectl-wait')
    os.execute(('( %s > %s.out 2> %s.err; echo $? > %s.code ) > /dev/null 2>&1 &')
      :format(sb:kubectl_command(args), base, base, base))
    return {
      output = function() return K.read_file(base .. '.out') or '' end,
      errors = function() return K.read_file(base .. '.err') or '' end,
      exit_code = function() return tonumber(K.read_file(base .. '.code') or '') end,
    }
  end

  -- The WATCH requests the server has had.
  local function watches() return sb:stats().requests.watch or 0 end

  -- Waits until the server has had `count` more WATCH requests than `before`:
  -- each from the resourceVersion of a LIST or GET made before it, so that a
  -- change made now reaches the watcher.
  local function watches_open(before, count)
    testing.eventually(function() return watches() >= before + count end, 15,
      { what = count .. ' more watch requests' })
  end

  -- Runs `kubectl wait WAIT RESOURCE -n NS` and `klua watch RESOURCE -n NS WAIT`;
  -- once both watch (when change is given), makes the change; then compares
  -- their exit status and stdout, and their error past kubectl's "error: " and
  -- klua's "klua watch: ". Returns klua's stdout, stderr and status.
  local function same(ns, resource, wait, change)
    local before = watches()
    local kc = kubectl_bg(('wait %s %s -n %s'):format(wait, resource, ns))
    if change then watches_open(before, 1) end
    local words = {}
    for w in (resource .. ' -n ' .. ns):gmatch('%S+') do words[#words + 1] = w end
    for w in wait:gsub("'", ''):gmatch('%S+') do words[#words + 1] = w end
    local p = watcher.watch(words)
    if change then
      watches_open(before, 2)
      change()
    end
    local code = p:wait(20)
    testing.eventually(function() return kc.exit_code() end, 20, { what = 'kubectl wait to exit' })
    assert.equals(kc.exit_code(), code, 'kubectl: ' .. kc.errors() .. '\nklua: ' .. p:errors())
    assert.equals(kc.output(), p:output())
    local want = kc.errors():gsub('^error: ', '')
    local got = p:errors():gsub('^klua watch: ', '')
    assert.equals(want, got)
    return p:output(), p:errors(), code
  end

  describe('as kubectl wait does', function()
    it('--for=condition=Ready: "pod/web condition met" and 0 once the condition is True', function()
      local ns = namespace()
      pod(ns, 'web')
      local out = same(ns, 'pod/web', '--for=condition=Ready', function() ready(ns, 'web') end)
      assert.equals('pod/web condition met\n', out)
    end)

    it('--for=delete: met when the object is deleted, and at once when it does not exist', function()
      local ns = namespace()
      pod(ns, 'web')
      local out = same(ns, 'pod/web', '--for=delete', function() sb:kubectl('delete pod web --wait=false -n ' .. ns) end)
      assert.equals('pod/web condition met\n', out)
      out = same(ns, 'pod/never', '--for=delete')
      assert.equals('', out)
    end)

    it('--for=jsonpath=PATH=VALUE: met once the value reads as VALUE, at once when it already does', function()
      local ns = namespace()
      pod(ns, 'web')
      assert.equals('pod/web condition met\n', same(ns, 'pod/web', '--for=jsonpath={.status.phase}=Pending'))
      local out = same(ns, 'pod/web', "--for=jsonpath='{.status.phase}'=Running",
        function() set_status(ns, 'web', '{"status":{"phase":"Running"}}') end)
      assert.equals('pod/web condition met\n', out)
    end)

    it('--for=jsonpath on an object or several values: status 1 with kubectl\'s words', function()
      local ns = namespace()
      pod(ns, 'web')
      local _, err = same(ns, 'pod/web', '--for=jsonpath={.metadata.labels}=x')
      assert.truthy(err:find('nested object or list', 1, true), err)
      same(ns, 'pod/web', '--for=jsonpath={.spec.containers[*].name}=web')
    end)

    it('a selection: every object must meet it; a line for each', function()
      local ns = namespace()
      pod(ns, 'a', 'app=web')
      pod(ns, 'b', 'app=web')
      local out = same(ns, 'pods -l app=web', '--for=condition=Ready', function()
        ready(ns, 'b')
        ready(ns, 'a')
      end)
      assert.equals('pod/a condition met\npod/b condition met\n', out)
    end)

    it('--timeout: status 1, "timed out waiting for the condition on pods/web"; --timeout=0 checks once', function()
      local ns = namespace()
      pod(ns, 'web')
      for _, case in ipairs {
        { '--for=condition=Ready --timeout=1s', 'klua watch: timed out waiting for the condition on pods/web\n' },
        { '--for=condition=Ready --timeout=0', 'klua watch: condition not met for pods/web\n' },
      } do
        local _, err, code = same(ns, 'pod/web', case[1])
        assert.equals(1, code)
        assert.equals(case[2], err)
      end
    end)
  end)

  describe('where kubectl wait gives up', function()
    -- kubectl ARGS must fail, saying says.
    local function kubectl_wait_fails(args, says)
      local _, ok, err = sb:try_kubectl(args)
      assert.is_false(ok)
      assert.truthy(err:find(says, 1, true), err)
    end

    -- kubectl wait ends with NotFound, or "no matching resources found" for a
    -- selection (wait.go's RunWait); klua watch waits for the objects to appear.
    it('waits for an object that does not exist yet', function()
      local ns = namespace()
      kubectl_wait_fails('wait --for=condition=Ready pod/later --timeout=5s -n ' .. ns, 'not found')
      local p = watcher.watching(sb, { 'pod/later', '-n', ns, '--for=condition=Ready' })
      pod(ns, 'later')
      ready(ns, 'later')
      over(p, 'pod/later condition met\n')
      assert.equals('', p:errors())
    end)

    it('waits for a selection to have objects', function()
      local ns = namespace()
      kubectl_wait_fails('wait --for=condition=Ready pods -l app=web --timeout=5s -n ' .. ns, 'no matching resources found')
      local p = watcher.watching(sb, { 'pods', '-l', 'app=web', '-n', ns, '--until', 'obj.status.phase == "Running"' })
      pod(ns, 'web', 'app=web')
      assert.is_nil(p:exit_code())
      set_status(ns, 'web', '{"status":{"phase":"Running"}}')
      over(p, 'pod/web condition met\n')
    end)
  end)

  describe('with --until, --fail-if and --any', function()
    it('--until: a Lua expression with -e\'s names; several --until and --for, any one will do', function()
      local ns = namespace()
      pod(ns, 'web')
      local p = watcher.watching(sb, { 'pod/web', '-n', ns,
        '--until', 'old and get(old, "status", "phase") ~= obj.status.phase',
        '--for', 'condition=Ready' })
      set_status(ns, 'web', '{"status":{"phase":"Running"}}')
      over(p, 'pod/web condition met\n')
    end)

    it('--fail-if: status 1 as soon as it holds, naming the object and the event', function()
      local ns = namespace()
      pod(ns, 'job')
      local p = watcher.watching(sb, { 'pod/job', '-n', ns, '--for', 'jsonpath={.status.phase}=Succeeded',
        '--fail-if', 'obj.status.phase == "Failed"' })
      set_status(ns, 'job', '{"status":{"phase":"Failed"}}')
      assert.equals(1, p:wait(20), p:errors())
      assert.equals('', p:output())
      assert.equals('klua watch: --fail-if held for pod/job on MODIFIED\n', p:errors())
    end)

    it('--any: over when one object meets it, printing that one', function()
      local ns = namespace()
      pod(ns, 'a', 'app=web')
      pod(ns, 'b', 'app=web')
      local p = watcher.watching(sb, { 'pods', '-l', 'app=web', '-n', ns, '--for=condition=Ready', '--any' })
      ready(ns, 'b')
      over(p, 'pod/b condition met\n')
    end)

    it('--for=delete on a selection: over when none is left, a line for each deleted', function()
      local ns = namespace()
      pod(ns, 'a', 'app=web')
      pod(ns, 'b', 'app=web')
      local p = watcher.watching(sb, { 'pods', '-l', 'app=web', '-n', ns, '--for=delete' })
      sb:kubectl('delete pod a --wait=false -n ' .. ns)
      assert.is_nil(p:wait(1))
      sb:kubectl('delete pod b --wait=false -n ' .. ns)
      over(p, 'pod/a condition met\npod/b condition met\n')
    end)

    it('prints the events while waiting when -o says how, and no "condition met" lines then', function()
      local ns = namespace()
      pod(ns, 'web')
      local p = watcher.watching(sb, { 'pod/web', '-n', ns, '-o', 'name', '--for', 'jsonpath={.status.phase}=Running' })
      set_status(ns, 'web', '{"status":{"phase":"Running"}}')
      over(p, 'pod/web\npod/web\n')
    end)
  end)

  describe('refuses, with status 2', function()
    local function usage(args, message)
      local full = { '--kubeconfig', sb.kubeconfig, 'watch' }
      for _, a in ipairs(args) do full[#full + 1] = a end
      local _, err, code = K.run(full, { timeout = 10 })
      assert.equals(2, code, err)
      assert.truthy(err:find(message, 1, true), err)
    end

    it('a --for kubectl does not know, a bad --timeout, and --timeout, --any or --fail-if without a wait', function()
      usage({ 'pods', '--for=ready' }, 'klua watch: --for: unrecognized condition: "ready"')
      usage({ 'pods', '--for=jsonpath={.status.phase}=' }, 'jsonpath wait has to have a value after equal sign')
      usage({ 'pods', '--for=delete', '--timeout', '30' },
        'invalid argument "30" for "--timeout" flag: time: missing unit in duration "30"')
      usage({ 'pods', '--timeout', '1s' }, '--fail-if, --any and --timeout go with --until or --for')
      usage({ 'pods', '--any' }, '--fail-if, --any and --timeout go with --until or --for')
      usage({ 'pods', '--until', 'obj ==' }, 'klua watch: --until: ')
    end)

    it('and says what the statuses mean in its help', function()
      local out, _, code = K.run({ 'watch', '--help' }, { timeout = 10 })
      assert.equals(0, code)
      assert.truthy(out:find('Exit status: 0 when the wait is over; 1 as soon as --fail-if', 1, true), out)
      assert.truthy(out:find('timed out\nwaiting for the condition on pods/web', 1, true), out)
    end)
  end)
end)
