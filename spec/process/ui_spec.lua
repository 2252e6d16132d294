-- The live page (`--ui-bind-address`, docs/ui.md): a real browser (Debian's
-- chromium, headless) loads /ui/ from the podset example controller, whose
-- watches the sandbox then expires (a 410): the page shows the reflector
-- going through LIST and back to WATCH, and the work queue drained. Its
-- screenshot is kept in $KLUA_BUILD/test-artifacts/ui.png. /ui/state's fields
-- are those docs/ui.md documents, no more and no fewer; a bare :PORT listens
-- on 127.0.0.1 only.
local testing = require('klua.testing')
local cjson = require('cjson')
local K = require('support.klua')

local EXAMPLES = testing.root .. '/examples/'
local ARTIFACTS = testing.root .. '/' .. (os.getenv('KLUA_BUILD') or 'build') .. '/test-artifacts'
-- Convergence is polled; the limit only bounds a failing run.
local CONVERGE = 30 * K.slowdown

local function ui_port(p)
  assert.truthy(p:wait_for('live page.*%(port %d+%)', 20 * K.slowdown, 'err'), p:errors())
  return tonumber(p:errors():match('live page[^\n]*%(port (%d+)%)'))
end

local function state(port)
  local out = K.run_command(('curl -s --max-time 10 http://127.0.0.1:%d/ui/state'):format(port))
  return cjson.decode(out)
end

local function find(list, name)
  for _, x in ipairs(list) do
    if x.name:find(name, 1, true) then return x end
  end
end

-- The states of an informer's last transitions, "FROM>TO FROM>TO ...".
local function path_of(inf)
  local steps = {}
  for _, t in ipairs(inf.reflector.transitions) do steps[#steps + 1] = t.from .. '>' .. t.to end
  return table.concat(steps, ' ')
end

-- chromium, headless, on url: what it rendered (the DOM once the page's
-- script ran for a few seconds of the page's time) and a screenshot.
local function browse(url, screenshot)
  local profile = K.tmpdir()
  local base = ('chromium --headless --no-sandbox --disable-gpu --user-data-dir=%s --virtual-time-budget=4000 '
    .. '--window-size=1400,1000 '):format(K.quote(profile))
  local dom = K.run_command(base .. '--dump-dom ' .. K.quote(url) .. ' 2>/dev/null')
  K.run_command(base .. '--screenshot=' .. K.quote(screenshot) .. ' ' .. K.quote(url) .. ' 2>/dev/null')
  os.execute('rm -rf ' .. K.quote(profile))
  return dom
end

describe('the live page', function()
  local cluster = testing.with_sandbox()
  setup(function() cluster:kubectl('apply -f ' .. EXAMPLES .. 'podset-crd.yaml') end)

  it('shows in a real browser the reflector relisting after a 410 and the queue drained', function()
    local p = cluster:run(EXAMPLES .. 'podset-controller.lua', { flags = { '--ui-bind-address', '127.0.0.1:0' } })
    local port = ui_port(p)
    cluster:kubectl('apply -f -', [[
apiVersion: demo.klua.dev/v1
kind: PodSet
metadata: {name: web}
spec: {replicas: 3}
]])
    testing.eventually(function()
      local ps = cluster:kubectl_json('get podset web')
      return ps.status and ps.status.replicas == 3
    end, CONVERGE, { what = 'the PodSet web reconciled' })
    cluster:fault { expire_watches = true }
    testing.eventually(function()
      local s = state(port)
      local inf, ctl = find(s.informers, 'podsets'), s.controllers[1]
      local path = path_of(inf)
      return path:find('WATCH>WATCHLIST WATCHLIST>WATCH$') and inf.reflector.state == 'WATCH' and ctl.queue.depth == 0
        and ctl.queue.in_flight == 0, path
    end, CONVERGE, { what = 'the podsets reflector back in WATCH after a watch-list, the queue empty' })

    os.execute('mkdir -p ' .. K.quote(ARTIFACTS))
    local dom = browse(('http://127.0.0.1:%d/ui/'):format(port), ARTIFACTS .. '/ui.png')
    -- The podsets informer's row: its reflector's state lit, its transitions.
    local row = dom:match('data%-informer="podsets[^"]*".-</ul>')
    assert.truthy(row, dom)
    assert.matches('class="st lit" data%-state="WATCH"', row)
    assert.matches('data%-from="WATCH" data%-to="WATCHLIST">WATCH → WATCHLIST: 410', row)
    assert.matches('data%-from="WATCHLIST" data%-to="WATCH">WATCHLIST → WATCH: initial%-events%-end bookmark', row)
    local last_event = row:match('data%-fig="last event">last event: <b>([^<]*)</b>')
    assert.truthy(last_event == 'now' or last_event:match('^%d+ s ago$'), row)
    -- The handlers' calls per kind: the podsets add handler had web.
    local add_calls = 0
    for n in dom:gmatch('data%-fig="add calls">add calls: <b>(%d+)</b>') do add_calls = math.max(add_calls, tonumber(n)) end
    assert.is_true(add_calls >= 1, dom)
    assert.matches('data%-fig="budget stops">budget stops: <b>0</b>', dom)
    local queue = dom:match('id="ctl0%-queue".-</div></div>')
    assert.truthy(queue, dom)
    assert.matches('data%-fig="depth">depth: <b>0</b>', queue)
    assert.matches('data%-fig="in flight">in flight: <b>0</b>', queue)
    -- A stage chosen (a click sets the address's #) shows its figures at each poll.
    local detail = browse(('http://127.0.0.1:%d/ui/#inf0-decoder'):format(port), ARTIFACTS .. '/ui-detail.png')
    local polls = tonumber(detail:match('inf0%-decoder: the last (%d+) samples'))
    assert.truthy(polls and polls >= 2, detail)
    assert.matches('<th>added</th><th>modified</th><th>deleted</th><th>bookmarks</th><th>malformed</th>', detail)
    local f = io.open(ARTIFACTS .. '/ui.png', 'rb')
    assert.truthy(f, 'chromium wrote no screenshot')
    assert.are.equal('\137PNG', f:read(4))
    f:close()
    p:cleanup()
  end)

  -- Every field path in doc, docs/ui.md's table: `a.b[].c`.
  local function documented()
    local paths = {}
    for line in io.lines(testing.root .. '/docs/ui.md') do
      local path = line:match('^| `([^`]+)` |')
      if path then paths[path] = true end
    end
    return paths
  end

  -- The paths of v's leaves (values that are not objects or arrays), into out.
  local function leaves(v, path, out)
    if type(v) ~= 'table' then
      out[path] = true
    elseif #v > 0 then
      for _, x in ipairs(v) do leaves(x, path .. '[]', out) end
    else
      for k, x in pairs(v) do leaves(x, path == '' and k or path .. '.' .. k, out) end
    end
    return out
  end

  -- A controller that fails on default/ui-bad, an add handler that never
  -- ends on it (stopped by --instruction-budget) and an update handler
  -- that fails once (resyncs bring updates), under leader election and
  -- shards, so that every part of the state has something to show.
  local FAILING = [[
local cms = klua.informer { resource = 'configmaps', namespace = 'default', resync = 1 }
cms:on('add', function(obj) if obj.metadata.name == 'ui-bad' then while true do end end end)
local failed_once = false
cms:on('update', function()
  if not failed_once then failed_once = true error('this update fails once') end
end)
klua.controller { name = 'ui-state', watches = { cms }, reconcile = function(key)
  if key == 'default/ui-bad' then error('ui-bad is bad') end
end }
]]

  -- Runs FAILING with flags until ready(state) holds; returns the last state
  -- and the lines of /proc/net/tcp{,6} of its listening socket.
  local function state_of(flags, ready, what)
    local args = { '--kubeconfig', cluster.kubeconfig, '--ui-bind-address', ':0', '--instruction-budget', '1000000' }
    for _, f in ipairs(flags) do args[#args + 1] = f end
    for _, a in ipairs { 'run', K.script(FAILING) } do args[#args + 1] = a end
    local p = K.spawn(args)
    local port = ui_port(p)
    local listening = K.run_command(('grep -i ":%04X 0\\+:0000 0A" /proc/net/tcp /proc/net/tcp6'):format(port))
    local s
    testing.eventually(function()
      s = state(port)
      return ready(s), cjson.encode(s)
    end, CONVERGE, { what = what })
    p:cleanup()
    return s, listening, port
  end

  it('serves /ui/state with the fields docs/ui.md documents, and :PORT on 127.0.0.1 only', function()
    cluster:kubectl('create configmap ui-bad --from-literal=k=v')
    local function failed(s)
      local c = s.controllers[1]
      local h = s.informers[1].handlers
      return #c.reconciles.last_errors > 0 and #s.writes > 0 and s.budget_stops == 1
        and h.notifications >= 1 and h.calls and h.calls.update >= 1
    end
    local led, listening, port = state_of({ '--leader-elect', '--leader-election-namespace', 'default' }, function(s)
      return s.leader ~= cjson.null and s.leader.leading and failed(s)
    end, 'leading and a failed reconcile')
    local sharded = state_of({ '--leader-elect', '--leader-election-namespace', 'default', '--shards', '2' },
      function(s) return s.shards ~= cjson.null and #s.shards.held == 2 and failed(s) end,
      'both shards held and a failed reconcile')
    -- Its one listening socket is on 127.0.0.1 (0100007F in /proc/net/tcp).
    assert.are.equal(1, #K.lines(listening), listening)
    assert.truthy(listening:upper():find(('0100007F:%04X'):format(port), 1, true), listening)
    -- Per informer: the add handler stopped by the budget and the update
    -- handler's one failure are its two failed calls, each kind's calls
    -- counted (the controller's handlers are called too).
    local h = led.informers[1].handlers
    assert.are.same({ errors = 2, budget_stops = 1, error_calls = 0 },
      { errors = h.errors, budget_stops = h.budget_stops, error_calls = h.calls.error })
    assert.is_true(h.calls.add >= 2 and h.calls.update >= 2 and h.calls.delete == 0, cjson.encode(h))
    assert.are.equal('default/ui-bad', led.controllers[1].reconciles.last_errors[1].key)
    assert.matches('ui%-bad is bad', led.controllers[1].reconciles.last_errors[1].error)
    local doc, seen = documented(), leaves(led, '', {})
    leaves(sharded, '', seen)
    for path in pairs(seen) do assert.is_true(doc[path], path .. ' is in /ui/state but not in docs/ui.md') end
    for path in pairs(doc) do
      local found = seen[path]
      for leaf in pairs(seen) do
        found = found or leaf:sub(1, #path + 1) == path .. '.' or leaf:sub(1, #path + 2) == path .. '[]'
      end
      assert.is_true(found, path .. ' is in docs/ui.md but not in /ui/state')
    end
  end)
end)
