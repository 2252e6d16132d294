-- The graceful shutdown of klua run, with controller-runtime's manager
-- semantics (lua/klua/internal/shutdown.lua, docs/deploy.md): on SIGTERM no new key
-- is taken, the reconciles in flight finish and their writes land, the
-- klua.on_shutdown hooks run in order, the Lease is released and klua
-- exits 0; past --graceful-shutdown-timeout it exits 1 at once, naming
-- what was still running, and a second signal ends it at once.
local K = require('support.klua')
local sandbox = require('support.sandbox')
local testing = require('klua.testing')

-- A controller over the ConfigMaps of one namespace, beside a handler of
-- the script's own, whose reconcile says it started, takes its time
-- (klua.sleep, the CPU with mode "spin", or with mode "late" until the
-- handler has seen a ConfigMap named late), then marks the ConfigMap done;
-- three hooks, the second of which fails. With mode "late" a fourth hook
-- creates a ConfigMap named after and waits until the informer has cached
-- it and handed it on.
local SLOW = [[
io.stdout:setvbuf('line')
local ns, seconds, mode = klua.args[1], tonumber(klua.args[2]), klua.args[3]
local cms = klua.informer { resource = 'configmaps', namespace = ns }
local seen = {}
cms:on('add', function(cm)
  seen[cm.metadata.name] = true
  print('handler saw ' .. cm.metadata.name)
end)
klua.controller {
  name = 'slow',
  watches = { cms },
  reconcile = function(key)
    if klua.get(cms:get(key), 'metadata', 'annotations', 'done') then return end
    print('reconciling ' .. key)
    if mode == 'spin' then
      local t = os.time()
      while true do if os.time() > t + 3600 then break end end
    end
    while mode == 'late' and not seen.late do klua.sleep(0.02) end
    klua.sleep(seconds)
    local _, err = klua.api.patch('configmaps', key, { metadata = { annotations = { done = 'yes' } } })
    assert(not err, tostring(err))
    print('reconciled ' .. key)
  end,
}
klua.on_shutdown(function() print('hook 1') end)
klua.on_shutdown(function() klua.sleep(0.1) error('hook 2 broke') end)
klua.on_shutdown(function() print('hook 3') end)
if mode == 'late' then
  klua.on_shutdown(function()
    local _, err = klua.api.create('configmaps', { apiVersion = 'v1', kind = 'ConfigMap', metadata = { name = 'after', namespace = ns } })
    assert(not err, tostring(err))
    while not (cms:get(ns .. '/after') and cms:stats().pending == 0) do klua.sleep(0.02) end
    print('hook saw after cached')
  end)
end
]]

local function literally(s) return (s:gsub('%p', '%%%0')) end

describe('klua run on SIGTERM', function()
  local sb = testing.with_sandbox()
  local script

  setup(function() script = K.script(SLOW) end)

  local namespace = sandbox.namespaces(sb, 'shutdown', 'work')

  local function done(ns)
    local cm = sb:get('-n ' .. ns .. ' configmap work')
    return cm and cm.metadata.annotations and cm.metadata.annotations.done
  end

  local function slow(ns, seconds, mode, flags)
    local args = { '--kubeconfig', sb.kubeconfig }
    for _, f in ipairs(flags or {}) do args[#args + 1] = f end
    for _, a in ipairs({ 'run', script, ns, tostring(seconds), mode or 'sleep' }) do args[#args + 1] = a end
    local p = K.spawn(args)
    assert.truthy(p:wait_for(literally('reconciling ' .. ns .. '/work'), 20 * K.slowdown), p:errors())
    return p
  end

  it('lets the reconcile in flight finish, so that its write lands, runs the hooks in order and exits 0', function()
    local ns = namespace()
    local p = slow(ns, 2)
    p:signal('TERM')
    assert.are.equal(0, p:wait(20 * K.slowdown), p:errors())
    local out, err = p:output(), p:errors()
    p:cleanup()
    assert.are.equal('yes', done(ns))
    local reconciled = out:find('reconciled ' .. ns .. '/work', 1, true)
    local h1, h3 = out:find('hook 1', 1, true), out:find('hook 3', 1, true)
    assert.truthy(reconciled and h1 and h3, out)
    assert.truthy(reconciled < h1 and h1 < h3, out)
    assert.matches('shutting down on SIGTERM: waiting up to 30s for 1 reconcile in flight and 3 on_shutdown hooks', err)
    -- A failing hook is logged with where it was defined, and is no failure of the run.
    assert.matches('on_shutdown hook 2 %(.-script%.lua:%d+%) failed: .-hook 2 broke', err)
  end)

  -- Runs the slow controller (seconds, mode) on a new namespace with a 1 s
  -- --graceful-shutdown-timeout and sends it SIGTERM; asserts that it exits 1
  -- naming the reconcile still running. Returns the namespace and its stdout.
  local function times_out(seconds, mode)
    local ns = namespace()
    local p = slow(ns, seconds, mode, { '--graceful-shutdown-timeout', '1s' })
    p:signal('TERM')
    assert.are.equal(1, p:wait(15 * K.slowdown), p:errors())
    local out, err = p:output(), p:errors()
    p:cleanup()
    assert.matches(literally('shutdown timed out after 1s (--graceful-shutdown-timeout); still running: reconcile of '
      .. ns .. '/work (controller slow)'), err)
    return ns, out
  end

  it('exits 1 at once past --graceful-shutdown-timeout, naming the reconcile still running', function()
    local ns, out = times_out(3600, 'sleep')
    assert.is_nil(out:find('hook 1', 1, true), out)
    assert.is_nil(done(ns))
  end)

  it('stops a reconcile that spins on the CPU once the timeout has passed', function()
    times_out(0, 'spin')
  end)

  it('names the on_shutdown hook that outlasts the timeout', function()
    local hook = K.script([[
      klua.informer('namespaces')
      klua.on_synced(function() klua.log.info('synced') end)
      klua.on_shutdown(function() klua.sleep(3600) end)
    ]])
    local p = K.spawn({ '--kubeconfig', sb.kubeconfig, '--graceful-shutdown-timeout', '1s', 'run', hook })
    assert.truthy(p:wait_for('synced', 20 * K.slowdown, 'err'), p:errors())
    p:signal('TERM')
    assert.are.equal(1, p:wait(15 * K.slowdown), p:errors())
    local err = p:errors()
    p:cleanup()
    os.execute('rm -rf ' .. K.quote(hook:match('^(.*)/[^/]+$')))
    assert.matches('shutdown timed out after 1s %(%-%-graceful%-shutdown%-timeout%); still running: '
      .. 'on_shutdown hook 1 %(.-script%.lua:3%)', err)
  end)

  -- controller-runtime's SetupSignalHandler: "If a second signal is
  -- caught, the program is terminated with exit code 1."
  it('exits 1 at once on a second SIGTERM, saying so, running nothing more', function()
    local ns = namespace()
    local p = slow(ns, 3600)
    p:signal('TERM')
    assert.truthy(p:wait_for('shutting down on SIGTERM', 10 * K.slowdown, 'err'), p:errors())
    K.signal_delivered(p)
    p:signal('TERM')
    assert.are.equal(1, p:wait(10 * K.slowdown), p:errors())
    local out, err = p:output(), p:errors()
    p:cleanup()
    assert.is_nil(out:find('hook 1', 1, true), out)
    assert.matches('a second signal: exiting at once, the graceful shutdown cut short', err)
  end)

  -- controller-runtime's manager stops its controllers, waiting for their
  -- reconciles, and only then its caches (manager/internal.go,
  -- engageStopProcedure): a reconcile waiting for an informer's handlers
  -- to see something still gets there.
  it('takes no new key once the signal came, and calls handlers until the reconciles in flight end', function()
    local ns = namespace()
    local p = slow(ns, 0, 'late')
    p:signal('TERM')
    assert.truthy(p:wait_for('shutting down on SIGTERM', 10 * K.slowdown, 'err'), p:errors())
    sb:kubectl('-n ' .. ns .. ' create configmap late --from-literal=k=v')
    assert.are.equal(0, p:wait(20 * K.slowdown), p:errors())
    local out = p:output()
    p:cleanup()
    assert.truthy(out:find('handler saw late', 1, true), out)
    assert.truthy(out:find('reconciled ' .. ns .. '/work', 1, true), out)
    assert.is_nil(out:find('reconciling ' .. ns .. '/late', 1, true), out)
    assert.truthy(out:find('hook saw after cached', 1, true), out)
    assert.is_nil(out:find('handler saw after', 1, true), out)
    assert.are.equal('yes', done(ns))
  end)
end)

-- A candidate as spec/process/leader_spec.lua's, with --leader-elect, a lease of
-- 60 s and a retry period of 0.5 s: a takeover within seconds comes from the
-- release, not from the Lease expiring.
local CANDIDATE = [[
io.stdout:setvbuf('line')
local id = klua.args[1]
klua.on_leading(function() print('leading ' .. id) end)
klua.on_shutdown(function() print('hook of ' .. id .. ' leader=' .. tostring(klua.leader())) end)
]]

describe('klua run --leader-elect on SIGTERM', function()
  local sb = testing.with_sandbox()
  local track = K.per_spec()
  local script

  setup(function() script = K.script(CANDIDATE) end)

  local function candidate(id, ns)
    local p = K.spawn({ '--kubeconfig', sb.kubeconfig, '--leader-elect', '--leader-election-id', 'spec-lease',
      '--leader-election-namespace', ns, '--leader-elect-lease-duration', '60s',
      '--leader-elect-renew-deadline', '2s', '--leader-elect-retry-period', '0.5s', 'run', script, id })
    track(p)
    return p
  end

  local function lease(ns) return sandbox.lease(sb, ns, 'spec-lease') end

  local namespace = sandbox.namespaces(sb, 'shutdown-lease')

  it('releases the Lease as client-go ReleaseOnCancel writes it, after the hooks, still leading in them', function()
    local ns = namespace()
    local p = K.leading(candidate('only', ns), 'only')
    p:signal('TERM')
    assert.are.equal(0, p:wait(20 * K.slowdown), p:errors())
    assert.matches('hook of only leader=true', p:output())
    local spec = lease(ns)
    assert.are.equal('', spec.holderIdentity or '')
    assert.are.equal(1, spec.leaseDurationSeconds)
    assert.matches(literally('lease ' .. ns .. '/spec-lease: released'), p:errors())
  end)

  it('hands over to another replica at its next tries, long before the lease duration', function()
    local ns = namespace()
    local first = K.leading(candidate('first', ns), 'first')
    local second = candidate('second', ns)
    -- The second has seen the first lead: it is a candidate waiting for the Lease.
    assert.truthy(second:wait_for('new leader elected: ', 20 * K.slowdown, 'err'), second:errors())
    first:signal('TERM')
    assert.are.equal(0, first:wait(20 * K.slowdown), first:errors())
    -- The 60 s lease would hold for 60 s unreleased: a few retry periods is the release.
    assert.truthy(second:wait_for('leading second', 10 * K.slowdown), second:errors())
    testing.eventually(function() return (lease(ns) or {}).holderIdentity ~= nil end, 5)
    assert.are.equal(1, lease(ns).leaseTransitions)
  end)
end)

describe('--graceful-shutdown-timeout', function()
  it('takes a positive duration, for klua run only, refusing others with status 2 and the flag named', function()
    for _, case in ipairs {
      { { '--graceful-shutdown-timeout', '0s', 'run', 'x.lua' }, '%-%-graceful%-shutdown%-timeout must be longer than 0s' },
      { { '--graceful-shutdown-timeout', 'soon', 'run', 'x.lua' },
        '%-%-graceful%-shutdown%-timeout needs a duration such as 30s' },
      { { '--server', 'http://127.0.0.1:1', '--graceful-shutdown-timeout', '5s', 'watch', 'pods' },
        'the graceful shutdown.* are for klua run, not klua watch' },
    } do
      K.run_fails(case[1], 2, case[2])
    end
  end)
end)

describe('klua run with many pending timers', function()
  -- Shutdown cancels every pending timer, one at a time: each in O(log n),
  -- so that 300,000 of them take a moment, not the tens of seconds that
  -- scanning the pending timers for each cancel took.
  it('ends promptly on SIGTERM with 300,000 klua.after timers pending', function()
    local script = K.script([[
io.stdout:setvbuf('line')
for _ = 1, 300000 do klua.after(3600, function() end) end
print('timers set')
]])
    local p = K.spawn { '--server', 'http://127.0.0.1:1', 'run', script }
    assert.truthy(p:wait_for('timers set', 30 * K.slowdown), p:errors())
    p:signal('TERM')
    -- A generous bound for a loaded machine: the time is spent cancelling.
    assert.are.equal(0, p:wait(10 * K.slowdown), 'klua still ran 10 s after SIGTERM: ' .. p:errors())
  end)
end)
