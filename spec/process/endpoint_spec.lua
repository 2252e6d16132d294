-- The metrics and probe endpoint of `klua run` (--metrics-bind-address,
-- --health-probe-bind-address), with controller-runtime's names and
-- semantics: /metrics in Prometheus's format that promtool accepts and a
-- real Prometheus scrapes, /readyz 503 until every informer has synced,
-- /healthz while the loop turns; bad addresses refused before any watch.
local testing = require('klua.testing')
local cjson = require('cjson')
local K = require('support.klua')
local prometheus = require('support.prometheus')

-- A controller over ConfigMaps labelled endpoint-spec=yes; once `want` of
-- them were reconciled it prints its stats as JSON.
local CONTROLLER = [[
io.stdout:setvbuf('line')
local want = tonumber(klua.args[1])
local cms = klua.informer { resource = 'configmaps', namespace = 'default', label_selector = 'endpoint-spec=yes' }
local done = false
local c
c = klua.controller { name = 'cm-spec', watches = { cms }, workers = 2, reconcile = function(key)
  local s = c:stats()
  if not done and s.successes + 1 >= want then
    done = true
    klua.after(0.2, function()
      local st = c:stats()
      print(klua.json.encode { successes = st.successes, adds = st.adds, failures = st.failures })
    end)
  end
end }
]]

local curl = K.curl
local sample = K.sample

describe('the metrics and probe endpoint', function()
  local sb = testing.with_sandbox()
  local script

  setup(function() script = K.script(CONTROLLER) end)

  local function start(args)
    local full = { '--kubeconfig', sb.kubeconfig }
    for _, a in ipairs(args) do full[#full + 1] = a end
    local p = K.spawn(full)
    assert.truthy(p:wait_for('%(port %d+%)', 20 * K.slowdown, 'err'), p:errors())
    p.port = tonumber(p:errors():match('%(port (%d+)%)'))
    return p
  end

  it('serves metrics promtool accepts, whose counters are those of the controller', function()
    for i = 1, 3 do sb:kubectl('create configmap ep-' .. i .. ' --from-literal=k=v') end
    for i = 1, 3 do sb:kubectl('label configmap ep-' .. i .. ' endpoint-spec=yes') end
    local p = start { '--metrics-bind-address', '127.0.0.1:0', 'run', script, '3' }
    assert.truthy(p:wait_for('successes', 20 * K.slowdown), p:errors())
    local stats = cjson.decode(p:output():match('[^\n]+'))
    local code, text = curl(('http://127.0.0.1:%d/metrics'):format(p.port))
    assert.are.equal(200, code)
    assert.matches('status 0', prometheus.check(text))
    assert.are.equal(stats.successes,
      sample(text, 'controller_runtime_reconcile_total{controller="cm-spec",result="success"}'))
    assert.are.equal(stats.adds, sample(text, 'workqueue_adds_total{controller="cm-spec",name="cm-spec"}'))
    assert.are.equal(0, sample(text, 'controller_runtime_reconcile_errors_total{controller="cm-spec"}'))
    assert.are.equal(2, sample(text, 'controller_runtime_max_concurrent_reconciles{controller="cm-spec"}'))
    assert.are.equal(3, sample(text, 'klua_informer_cached_objects{resource="configmaps -n default -l endpoint-spec=yes"}'))
    assert.truthy(sample(text, 'process_resident_memory_bytes') > 0)
    assert.matches('# TYPE workqueue_queue_duration_seconds histogram', text)
    p:cleanup()
  end)

  -- client-go's request metrics, counted where each request ends
  -- (component-base's restclient names and labels), and the informer's
  -- watch events by type.
  it('counts API requests by code, method and host, their durations by verb, and watch events by type', function()
    sb:kubectl('create namespace rest-metrics')
    local calls = K.script([[
      io.stdout:setvbuf('line')
      local cms = klua.informer { resource = 'configmaps', namespace = 'rest-metrics' }
      klua.on_synced(function()
        for _ = 1, 2 do assert(klua.api.get('configmaps', 'rest-metrics/missing') == nil) end
        assert(klua.api.create('configmaps', { metadata = { name = 'made', namespace = 'rest-metrics' }, data = { k = 'v' } }))
        assert(klua.api.patch('configmaps', 'rest-metrics/made', { data = { k = 'w' } }))
        assert(klua.api.delete('configmaps', 'rest-metrics/made'))
        print('done')
      end)
    ]])
    local p = start { '--metrics-bind-address', '127.0.0.1:0', 'run', calls }
    assert.truthy(p:wait_for('done', 20 * K.slowdown), p:errors())
    local host = '127.0.0.1:' .. sb.port
    local inf = 'configmaps -n rest-metrics'
    -- The watch delivers the three changes a moment after the calls returned.
    local text = testing.eventually(function()
      local code, body = curl(('http://127.0.0.1:%d/metrics'):format(p.port))
      return code == 200 and sample(body, ('klua_informer_events_total{resource="%s",type="DELETED"}'):format(inf)) == 1
        and body
    end, 10 * K.slowdown, { what = 'the DELETED event counted' })
    assert.matches('status 0', prometheus.check(text))
    local function requests(code, method)
      return sample(text, ('rest_client_requests_total{code="%s",method="%s",host="%s"}'):format(code, method, host))
    end
    assert.are.equal(2, requests('404', 'GET'))
    assert.are.equal(1, requests('201', 'POST'))
    assert.are.equal(1, requests('200', 'PATCH'))
    assert.are.equal(1, requests('200', 'DELETE'))
    assert.truthy(requests('200', 'GET') >= 1) -- the informer's LIST and discovery
    assert.are.equal(1, sample(text, ('rest_client_request_duration_seconds_count{verb="POST",host="%s"}'):format(host)))
    assert.are.equal(1, sample(text, ('rest_client_request_duration_seconds_bucket{verb="POST",host="%s",le="60"}'):format(host)))
    assert.matches('# TYPE rest_client_request_duration_seconds histogram', text)
    assert.are.equal(1, sample(text, ('klua_informer_events_total{resource="%s",type="ADDED"}'):format(inf)))
    assert.are.equal(1, sample(text, ('klua_informer_events_total{resource="%s",type="MODIFIED"}'):format(inf)))
    p:cleanup()
  end)

  it('counts the objects an informer\'s transform failed on', function()
    sb:kubectl('create namespace transform-metrics')
    sb:kubectl('create configmap bad -n transform-metrics')
    local failing = K.script([[
      klua.informer { resource = 'configmaps', namespace = 'transform-metrics', transform = function(cm)
        if cm.metadata.name == 'bad' then error('cannot transform ' .. cm.metadata.name) end
        return cm
      end }
    ]])
    local p = start { '--metrics-bind-address', '127.0.0.1:0', 'run', failing }
    local series = 'klua_informer_transform_errors_total{resource="configmaps -n transform-metrics"}'
    -- Each failure refuses the LIST, which is retried after a backoff and fails again.
    local text = testing.eventually(function()
      local code, body = curl(('http://127.0.0.1:%d/metrics'):format(p.port))
      return code == 200 and (sample(body, series) or 0) >= 2 and body
    end, 20 * K.slowdown, { what = 'two transform errors counted' })
    assert.matches('status 0', prometheus.check(text))
    assert.matches('# TYPE klua_informer_transform_errors_total counter', text)
    p:cleanup()
  end)

  it('answers /readyz 503 until the informers have synced, then 200; /healthz 200 all along', function()
    -- Every API request waits 3 s, so the first LIST keeps the informer unsynced a while.
    sb:fault { delay = 3 }
    local p = start { '--health-probe-bind-address', '127.0.0.1:0', 'run', script, '1000' }
    local code, body = curl(('http://127.0.0.1:%d/readyz'):format(p.port))
    assert.are.equal(503, code)
    assert.matches('not ready: the informers have not synced yet', body)
    assert.are.equal(200, (curl(('http://127.0.0.1:%d/healthz'):format(p.port))))
    sb:reset_faults()
    assert.truthy(testing.poll(function()
      return curl(('http://127.0.0.1:%d/readyz'):format(p.port)) == 200
    end, 20 * K.slowdown))
    assert.are.equal(404, (curl(('http://127.0.0.1:%d/nothing'):format(p.port))))
    p:cleanup()
  end)

  -- Slow clients that connect and never finish a request (slowloris) must not
  -- crowd out the kubelet, whose probe fails after 1 s: a connection waits at
  -- most 5 s for its request, and one past 64 ends the one that has waited
  -- longest (docs/deploy.md).
  it('answers every probe within the kubelet\'s 1 s while 80 slow clients hold connections', function()
    local p = start { '--health-probe-bind-address', '127.0.0.1:0', 'run', script, '1000' }
    local slow = K.spawn({ testing.root .. '/spec/support/slowloris.py', '127.0.0.1', tostring(p.port), '80' },
      { bin = 'python3', name = 'slowloris' })
    assert.truthy(slow:wait_for('holding 80', 20 * K.slowdown), slow:errors())
    local probes, failed = 0, {}
    -- Probes, as a kubelet sends them, until klua has ended every slow connection.
    testing.eventually(function()
      probes = probes + 1
      local code = K.run_command(('curl -s -o /dev/null --max-time 1 -w "%%{http_code}" http://127.0.0.1:%d/healthz')
        :format(p.port))
      if code ~= '200' then failed[#failed + 1] = ('probe %d: %s'):format(probes, code) end
      return slow:output():find('closed 80\n', 1, true)
    end, 30 * K.slowdown, { what = 'klua ended the 80 slow connections', interval = 0.2 })
    assert.same({}, failed)
    slow:cleanup()
    p:cleanup()
  end)

  -- libmicrohttpd's own timeout counts only idleness, which a byte a second resets.
  it('ends a connection whose request headers still drip in after 5 s', function()
    local p = start { '--health-probe-bind-address', '127.0.0.1:0', 'run', script, '1000' }
    local slow = K.spawn({ testing.root .. '/spec/support/slowloris.py', '127.0.0.1', tostring(p.port), '3', 'drip' },
      { bin = 'python3', name = 'slowloris' })
    assert.truthy(slow:wait_for('holding 3', 20 * K.slowdown), slow:errors())
    testing.eventually(function() return slow:output():find('closed 3\n', 1, true) end, 30 * K.slowdown,
      { what = 'klua ended the 3 dripping connections' })
    slow:cleanup()
    p:cleanup()
  end)

  it('is scraped by a real Prometheus, which reads the reconcile counter back', function()
    for i = 4, 5 do
      sb:kubectl('create configmap ep-' .. i .. ' --from-literal=k=v')
      sb:kubectl('label configmap ep-' .. i .. ' endpoint-spec=yes')
    end
    local p = start { '--metrics-bind-address', '127.0.0.1:0', 'run', script, '5' }
    assert.truthy(p:wait_for('successes', 20 * K.slowdown), p:errors())
    local stats = cjson.decode(p:output():match('[^\n]+'))
    local dir = K.tmpdir()
    K.write_file(dir .. '/prometheus.yml', ([[
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: klua
    static_configs:
      - targets: ['127.0.0.1:%d']
]]):format(p.port))
    local port = tonumber(K.run_command([[python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])']]))
    os.execute(('prometheus --config.file=%s/prometheus.yml --storage.tsdb.path=%s/data '
      .. '--web.listen-address=127.0.0.1:%d > %s/prom.log 2>&1 & echo $! > %s/pid'):format(dir, dir, port, dir, dir))
    local pid = K.read_file(dir .. '/pid'):match('%d+')
    local query = ('http://127.0.0.1:%d/api/v1/query?query=%s'):format(port,
      'controller_runtime_reconcile_total%7Bresult%3D%22success%22%7D')
    local value = testing.poll(function()
      local code, body = curl(query)
      if code ~= 200 then return nil end
      local ok, doc = pcall(cjson.decode, body)
      local r = ok and doc.data and doc.data.result and doc.data.result[1]
      return r and tonumber(r.value[2])
    end, 60 * K.slowdown, 0.5)
    os.execute('kill ' .. pid .. ' 2>/dev/null')
    assert.are.equal(stats.successes, value, K.read_file(dir .. '/prom.log'))
    p:cleanup()
  end)

  it('refuses a port in use and an address it cannot parse, naming the flag, with status 2', function()
    local holder = start { '--metrics-bind-address', '127.0.0.1:0', 'run', script, '1000' }
    K.run_fails({ '--kubeconfig', sb.kubeconfig, '--metrics-bind-address', '127.0.0.1:' .. holder.port, 'run', script,
      '1' }, 2, '%-%-metrics%-bind%-address 127%.0%.0%.1:%d+: Address already in use %(another process listens there: '
      .. 'choose another port%)')
    holder:cleanup()
    K.run_fails({ '--kubeconfig', sb.kubeconfig, '--health-probe-bind-address', 'localhost', 'run', script }, 2,
      '%-%-health%-probe%-bind%-address "localhost" has no port')
    K.run_fails({ '--kubeconfig', sb.kubeconfig, '--metrics-bind-address', ':8080', 'watch', 'pods' }, 2,
      'are for klua run, not klua watch')
  end)
end)

describe('klua run --leader-elect', function()
  local sb = testing.with_sandbox()
  local script

  setup(function()
    script = K.script(CONTROLLER)
    sb:kubectl('create configmap le-1 --from-literal=k=v')
    sb:kubectl('label configmap le-1 endpoint-spec=yes')
  end)

  local FLAGS = { '--leader-elect', '--leader-election-id', 'flag-spec', '--leader-elect-lease-duration', '3s',
    '--leader-elect-renew-deadline', '2s', '--leader-elect-retry-period', '500ms' }

  it('lets one replica reconcile and reports which leads in leader_election_master_status', function()
    local procs = {}
    for i = 1, 2 do
      local args = { '--kubeconfig', sb.kubeconfig, '--metrics-bind-address', '127.0.0.1:0' }
      for _, f in ipairs(FLAGS) do args[#args + 1] = f end
      args[#args + 1] = 'run'
      args[#args + 1] = script
      args[#args + 1] = '1'
      procs[i] = K.spawn(args)
    end
    local leader = testing.poll(function()
      for _, p in ipairs(procs) do if p:output():find('successes', 1, true) then return p end end
    end, 30 * K.slowdown)
    assert.truthy(leader, procs[1]:errors() .. procs[2]:errors())
    local other = leader == procs[1] and procs[2] or procs[1]
    assert.truthy(other:wait_for('new leader elected', 20 * K.slowdown, 'err'), other:errors())
    for _, p in ipairs(procs) do
      p.port = tonumber(p:errors():match('%(port (%d+)%)'))
      local _, text = curl(('http://127.0.0.1:%d/metrics'):format(p.port))
      assert.are.equal(p == leader and 1 or 0, sample(text, 'leader_election_master_status{name="flag-spec"}'))
    end
    assert.are.equal('', other:output())
    for _, p in ipairs(procs) do p:cleanup() end
  end)

  it('refuses lease settings client-go refuses, naming the flags, with status 2', function()
    local _, err, code = K.run { '--kubeconfig', sb.kubeconfig, '--leader-elect', '--leader-elect-lease-duration',
      '5s', '--leader-elect-renew-deadline', '5s', 'run', script }
    assert.are.equal(2, code)
    assert.matches('%-%-leader%-elect%-lease%-duration %(5s%) must be longer than %-%-leader%-elect%-renew%-deadline', err)
  end)
end)
