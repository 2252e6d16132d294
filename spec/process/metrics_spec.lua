-- klua.metrics: a script's own counters, gauges and histograms in the
-- Prometheus text format that promtool accepts; names Prometheus would
-- reject are refused when the script declares them.
local testing = require('klua.testing')
local K = require('support.klua')
local prometheus = require('support.prometheus')

-- Runs a script that needs no cluster; returns stdout, stderr, status.
local function run(text)
  return K.run_script(text .. '\nklua.stop()\n', { flags = { '--server', 'http://127.0.0.1:1' } })
end


describe('klua.metrics', function()
  it('exposes counters, gauges and histograms as promtool accepts them', function()
    local out, err, code = run [[
local c = klua.metrics.counter { name = 'shop_orders_total', help = 'Orders seen.', labels = { 'state' } }
c:inc { state = 'new' }
c:inc { state = 'new' }
c:add(3, { state = 'paid' })
local g = klua.metrics.gauge { name = 'shop_queue_length', help = 'Orders waiting.' }
g:set(7)
g:dec()
local h = klua.metrics.histogram { name = 'shop_wait_seconds', help = 'Waits.', buckets = { 0.1, 1 } }
h:observe(0.05)
h:observe(0.5)
h:observe(30)
io.write(klua.metrics.expose())
]]
    assert.are.equal(0, code, err)
    assert.matches('# TYPE shop_orders_total counter\nshop_orders_total{state="new"} 2\nshop_orders_total{state="paid"} 3\n', out)
    assert.matches('# TYPE shop_queue_length gauge\nshop_queue_length 6\n', out)
    assert.matches('shop_wait_seconds_bucket{le="0.1"} 1\nshop_wait_seconds_bucket{le="1"} 2\n'
      .. 'shop_wait_seconds_bucket{le="%+Inf"} 3\nshop_wait_seconds_sum 30.55\nshop_wait_seconds_count 3\n', out)
    assert.matches('status 0', prometheus.check(out))
  end)

  it('escapes label values and help text as the format requires', function()
    local out = run [[
local c = klua.metrics.counter { name = 'odd_total', help = 'Back\\slash\nand newline.', labels = { 'v' } }
c:inc { v = 'quote " back \\ new\nline' }
io.write(klua.metrics.expose())
]]
    assert.matches('# HELP odd_total Back\\\\slash\\nand newline.\n', out, 1, true)
    assert.truthy(out:find('odd_total{v="quote \\" back \\\\ new\\nline"} 1', 1, true), out)
    assert.matches('status 0', prometheus.check(out))
  end)

  local refused = {
    { "klua.metrics.gauge { name = '9lives', help = 'x' }", 'metric name "9lives" is not valid in Prometheus' },
    { "klua.metrics.gauge { name = 'a-b', help = 'x' }", 'metric name "a%-b" is not valid in Prometheus' },
    { "klua.metrics.counter { name = 'requests', help = 'x' }", 'counter "requests": end its name in "_total"' },
    { "klua.metrics.gauge { name = 'g', help = 'x', labels = { '__x' } }", 'label name "__x" is not valid' },
    { "klua.metrics.histogram { name = 'h', help = 'x', labels = { 'le' } }", 'may not have a label named "le"' },
    { "klua.metrics.gauge { name = 'g' }", 'metric g needs help = "what it measures"' },
    { "klua.metrics.gauge { name = 'g', help = 'x' } klua.metrics.gauge { name = 'g', help = 'y' }", 'metric g is declared already' },
    { "klua.metrics.histogram { name = 'h', help = 'x', buckets = { 1, 1 } }", 'buckets must be increasing numbers' },
  }
  for _, case in ipairs(refused) do
    it('refuses at declaration: ' .. case[1], function()
      local _, err, code = run(case[1])
      assert.are_not.equal(0, code)
      assert.matches(case[2], err)
    end)
  end

  it('refuses samples whose labels differ from the declared ones, and counters going down', function()
    local _, err = run [[
local c = klua.metrics.counter { name = 'jobs_total', help = 'Jobs.', labels = { 'queue' } }
local ok, e1 = pcall(c.inc, c, {})
local _, e2 = pcall(c.inc, c, { queue = 'a', extra = 'b' })
local _, e3 = pcall(c.add, c, -1, { queue = 'a' })
local _, e4 = pcall(c.set, c, 1, { queue = 'a' })
klua.log.info('%s | %s | %s | %s | %s', tostring(ok), e1, e2, e3, e4)
]]
    assert.matches('false | [^|]*jobs_total: label "queue" is missing | [^|]*jobs_total has no label "extra" | '
      .. '[^|]*jobs_total: a counter only goes up | [^|]*jobs_total: only a gauge can be set', err)
  end)
end)

-- What a controller-runtime manager serves for one controller, taken from
-- controller-runtime v0.20.4 (with client-go 1.32):
-- pkg/internal/metrics/workqueue.go (workqueue_*: labels name and
-- controller, buckets prometheus.ExponentialBuckets(10e-9, 10, 12), bound
-- after bound multiplied as Go multiplies them) and
-- pkg/internal/controller/metrics/metrics.go (controller_runtime_*); label
-- names as client_golang writes them, sorted.
local WORKQUEUE_BUCKETS = { '1e-08', '1e-07', '1e-06', '9.999999999999999e-06', '9.999999999999999e-05', '0.001',
  '0.01', '0.1', '1', '10', '100', '1000', '+Inf' }
local RECONCILE_TIME_BUCKETS = { '0.005', '0.01', '0.025', '0.05', '0.1', '0.15', '0.2', '0.25', '0.3', '0.35',
  '0.4', '0.45', '0.5', '0.6', '0.7', '0.8', '0.9', '1', '1.25', '1.5', '1.75', '2', '2.5', '3', '3.5', '4', '4.5',
  '5', '6', '7', '8', '9', '10', '15', '20', '25', '30', '40', '50', '60', '+Inf' }
local CONTROLLER_RUNTIME = {
  { 'workqueue_depth', 'gauge', 'Current depth of workqueue', 'controller,name' },
  { 'workqueue_adds_total', 'counter', 'Total number of adds handled by workqueue', 'controller,name' },
  { 'workqueue_queue_duration_seconds', 'histogram',
    'How long in seconds an item stays in workqueue before being requested', 'controller,name', WORKQUEUE_BUCKETS },
  { 'workqueue_work_duration_seconds', 'histogram', 'How long in seconds processing an item from workqueue takes.',
    'controller,name', WORKQUEUE_BUCKETS },
  { 'workqueue_unfinished_work_seconds', 'gauge', 'How many seconds of work has been done that is in progress and '
    .. "hasn't been observed by work_duration. Large values indicate stuck threads. One can deduce the number of "
    .. 'stuck threads by observing the rate at which this increases.', 'controller,name' },
  { 'workqueue_longest_running_processor_seconds', 'gauge',
    'How many seconds has the longest running processor for workqueue been running.', 'controller,name' },
  { 'workqueue_retries_total', 'counter', 'Total number of retries handled by workqueue', 'controller,name' },
  { 'controller_runtime_reconcile_total', 'counter', 'Total number of reconciliations per controller',
    'controller,result' },
  { 'controller_runtime_reconcile_errors_total', 'counter', 'Total number of reconciliation errors per controller',
    'controller' },
  { 'controller_runtime_terminal_reconcile_errors_total', 'counter',
    'Total number of terminal reconciliation errors per controller', 'controller' },
  { 'controller_runtime_reconcile_panics_total', 'counter', 'Total number of reconciliation panics per controller',
    'controller' },
  { 'controller_runtime_reconcile_timeouts_total', 'counter',
    'Total number of reconciliations ended by reconcile_timeout per controller', 'controller' },
  { 'controller_runtime_reconcile_time_seconds', 'histogram', 'Length of time per reconciliation per controller',
    'controller', RECONCILE_TIME_BUCKETS },
  { 'controller_runtime_max_concurrent_reconciles', 'gauge', 'Maximum number of concurrent reconciles per controller',
    'controller' },
  { 'controller_runtime_active_workers', 'gauge', 'Number of currently used workers per controller', 'controller' },
}

-- One key per outcome; those that fail or requeue succeed the second time.
-- Once every key has had its last reconcile, prints the exposition.
local OUTCOMES = [[
local cms = klua.informer { resource = 'configmaps', namespace = 'default', label_selector = 'never=matches' }
local calls, pending = {}, 6
local first = {
  success = function() end,
  after = function() return klua.requeue_after(3600) end,
  requeue = function() return klua.requeue() end,
  error = function() return nil, 'no luck' end,
  terminal = function() return nil, klua.terminal_error('spec.size must be positive') end,
  panic = function() error('a bug') end,
}
local last = { success = 1, after = 1, terminal = 1, requeue = 2, error = 2, panic = 2 }
local c = klua.controller { name = 'metrics-spec', watches = { cms }, reconcile = function(key)
  calls[key] = (calls[key] or 0) + 1
  if calls[key] == last[key] then
    pending = pending - 1
    if pending == 0 then
      klua.after(0, function()
        io.write(klua.metrics.expose())
        klua.stop()
      end)
    end
  end
  if calls[key] == 1 then return first[key]() end
end }
for key in pairs(first) do c:enqueue(key) end
]]

describe('the controller metrics', function()
  local sb = testing.with_sandbox()

  it('are the families, help texts, labels and buckets controller-runtime serves, counted as it counts them', function()
    local out = K.run_script_ok(OUTCOMES, { kubeconfig = sb.kubeconfig, timeout = 30 })
    local families = prometheus.parse(out)
    for _, want in ipairs(CONTROLLER_RUNTIME) do
      local name, kind, help, label_names, buckets = table.unpack(want)
      local f = families[name]
      assert.is_table(f, name .. ' is missing')
      assert.are.same({ kind, help }, { f.type, f.help }, name)
      local les = {}
      for _, s in ipairs(f.samples) do
        local names = {}
        for _, l in ipairs(s.label_names) do
          if l ~= 'le' then names[#names + 1] = l end
        end
        assert.are.equal(label_names, table.concat(names, ','), name)
        assert.are.equal('metrics-spec', s.labels.controller, name)
        if s.labels.name then assert.are.equal('metrics-spec', s.labels.name, name) end
        if s.labels.le then les[#les + 1] = s.labels.le end
      end
      assert.are.same(buckets or {}, les, name)
    end
    -- The value of the sample named `sample` (default: the family's name) of family.
    local function value(family, result, sample)
      for _, s in ipairs(families[family].samples) do
        if s.name == (sample or family) and s.labels.result == result then return s.value end
      end
    end
    local total = 'controller_runtime_reconcile_total'
    assert.are.same({ 3, 1, 1, 4 }, { value(total, 'error'), value(total, 'requeue'), value(total, 'requeue_after'),
      value(total, 'success') })
    assert.are.same({ 3, 1, 1 }, { value('controller_runtime_reconcile_errors_total'),
      value('controller_runtime_terminal_reconcile_errors_total'), value('controller_runtime_reconcile_panics_total') })
    assert.are.equal(9, value('controller_runtime_reconcile_time_seconds', nil,
      'controller_runtime_reconcile_time_seconds_count'))
    assert.matches('status 0', prometheus.check(out))
  end)
end)
