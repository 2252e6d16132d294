-- One minute of the chaos soak (scripts/soak; `make soak` runs the long one):
-- a controller that writes, a mutator making random changes over 300
-- ConfigMaps in four namespaces, and every fault the sandbox can inject, at
-- random (going on past the minute until each kind has been applied).
-- Afterwards klua's caches, the handlers' view and the controller's owned
-- copies must all match the server.
local K = require('support.klua')
local cjson = require('cjson')

local ROOT = os.getenv('KLUA_ROOT') or '.'

-- Every kind of fault the soak injects, as /sandbox/v1/stats counts them.
local FAULT_KINDS = { 'watch_drop', 'expire_watches', 'compact', 'fail_500', 'fail_503', 'fail_429',
  'watch_stall', 'delay', 'restart', 'malformed_line', 'unknown_event' }

describe('klua under a minute of chaos', function()
  local dir, figures, output

  setup(function()
    dir = K.tmpdir()
    -- A minute under the sanitizers too: what they slow down is klua's
    -- convergence afterwards, which the soak waits for.
    local cmd = ('python3 %s/scripts/soak --duration 60 --every-fault --json %s/figures.json --klua %s > %s/out 2>&1')
      :format(K.quote(ROOT), K.quote(dir), K.quote(K.bin), K.quote(dir))
    os.execute(cmd)
    output = K.read_file(dir .. '/out')
    local text = K.read_file(dir .. '/figures.json')
    figures = text ~= '' and cjson.decode(text) or { failures = { 'no figures: ' .. output } }
    -- A run that failed early has no figures for its later stages.
    for _, part in ipairs({ 'changes', 'faults', 'informers', 'owned' }) do figures[part] = figures[part] or {} end
  end)

  teardown(function() os.execute('rm -rf ' .. K.quote(dir)) end)

  it('passes every check of the soak and prints its seed and verdict', function()
    assert.same({}, figures.failures, output)
    assert.equals('PASS', figures.verdict, output)
    assert.truthy(output:find(('rerun with --seed %d'):format(figures.seed), 1, true))
    assert.truthy(output:find('verdict: PASS', 1, true))
  end)

  it('made hundreds of random changes over at least 300 objects in several namespaces', function()
    assert.is_true(figures.changes.initial >= 300, output)
    assert.is_true(figures.changes.total >= 500, output)
    for _, kind in ipairs({ 'create', 'patch', 'put', 'delete', 'relabel', 'recreate' }) do
      assert.is_true(figures.changes[kind] > 0, kind .. ' never happened: ' .. output)
    end
  end)

  it('injected every kind of fault, and the informers relisted and re-watched', function()
    for _, kind in ipairs(FAULT_KINDS) do
      assert.is_true((figures.faults[kind] or 0) > 0, kind .. ' was never injected: ' .. output)
    end
    local relists, rewatches, idle = 0, 0, 0
    for _, s in pairs(figures.informers) do
      relists, rewatches, idle = relists + s.relists, rewatches + s.rewatches, idle + s.idle_restarts
    end
    assert.is_true(relists > 0 and rewatches > 0 and idle > 0, output)
  end)

  it('ends with each cache equal to the server, no event lost, none stale, none out of sequence', function()
    assert.equals(0, figures.lost, output)
    assert.equals(0, figures.stale, output)
    assert.equals(0, figures.sequence_errors, output)
    assert.is_true(figures.events_delivered > figures.changes.total, output)
    assert.equals(0, figures.task_errors, output)
  end)

  it('converges the owned copies: one per source, with its data, none left over', function()
    local o = figures.owned
    assert.is_true(o.sources > 0, output)
    assert.same({ matching = o.sources, missing = 0, different = 0, orphans = 0, copies = o.sources },
      { matching = o.matching, missing = o.missing, different = o.different, orphans = o.orphans, copies = o.copies })
  end)

  it('keeps klua\'s peak memory bounded (under 128 MiB)', function()
    assert.is_true(figures.peak_rss_kib ~= nil and figures.peak_rss_kib < 128 * 1024 * K.slowdown, output)
  end)
end)
