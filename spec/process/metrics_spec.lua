-- klua.metrics: a script's own counters, gauges and histograms in the
-- Prometheus text format that promtool accepts; names Prometheus would
-- reject are refused when the script declares them.
local K = require 'support.klua'
local prometheus = require 'support.prometheus'

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
