-- scripts/bench, `make bench`'s harness (docs/benchmarks.md): scenarios are chosen by
-- name or by the letter earlier reports used, and a peer that cannot be had on this
-- machine is reported as not measured while the run goes on. These runs are tiny and
-- check what the report says, never how fast anything is.
local K = require('support.klua')

local ROOT = os.getenv('KLUA_ROOT') or '.'
local BENCH = 'python3 ' .. K.quote(ROOT .. '/scripts/bench')

-- Runs the bench with args (and env, a prefix of VAR=value words); its output and exit status.
local function bench(args, env)
  local out = os.tmpname()
  local ok, _, status = os.execute(('%s %s %s > %s 2>&1'):format(env or '', BENCH, args, out))
  local text = K.read_file(out)
  os.remove(out)
  return text, ok and 0 or status
end

-- The env of a bench on a machine without network: npm pointed at a closed loopback port, with
-- an empty cache in dir.
local function offline_npm(dir)
  return ('npm_config_registry=http://127.0.0.1:9/ npm_config_fetch_retries=0 npm_config_cache=%s')
    :format(K.quote(dir .. '/npm-cache'))
end

describe('scripts/bench', function()
  it('takes scenarios by name or by their old letter, and lists them in the order they run', function()
    local by_letter, status = bench('--list --only d,a,handler-copy')
    assert.equals(0, status, by_letter)
    local names = {}
    for name in by_letter:gmatch('([%w-]+ %(%a%))%s') do names[#names + 1] = name end
    assert.same({ 'watch-names (d)', 'handler-3-fields (a)', 'handler-copy (b)' }, names)
    assert.equals(bench('--list --only a'), bench('--list --only handler-3-fields'))
    assert.equals(bench('--list --only g,h'), bench('--list --only many-informers,slow-handler'))
  end)

  it('refuses an unknown scenario, naming the names and the letters', function()
    local out, status = bench('--list --only a,nope')
    assert.equals(2, status, out)
    assert.matches('unknown scenario nope; choose among server,ref,peers,limit,watch%-names,handler%-3%-fields', out)
    assert.matches("or the letters a,b,c,d,e,e',f,g,h", out)
  end)

  it('rates the lines of a printer that wrote them all in one read from the printer\'s start', function()
    -- Three lines read at once, 2 s after the process started: 1.5 lines a second,
    -- not a rate of 0 that would leave klua's rows without their "vs kubectl".
    local program = 'from benchlib.scenarios import LinesRun\n'
      .. 'run = LinesRun(3, 10.0)\n'
      .. 'run.feed(12.0, b"a\\nb\\nc\\n")\n'
      .. 'print(run.rate)'
    assert.equals('1.5', K.run_command(('cd %s/scripts && python3 -c %s'):format(K.quote(ROOT), K.quote(program))))
  end)

  it('says how late a printer\'s last read came, and the rate up to the read before it', function()
    -- klua watch flushes a partial buffer every 50 ms, so its last lines can come that much after
    -- the others: the report shows it next to the rate, which counts it.
    local program = 'from benchlib.scenarios import LinesRun\n'
      .. 'run = LinesRun(5, 10.0)\n'
      .. 'run.feed(11.0, b"a\\n")\n'
      .. 'run.feed(11.5, b"b\\nc\\n")\n'
      .. 'run.feed(11.55, b"d\\ne\\nf\\n")\n'
      .. 'print(run.last_read_text())\n'
      .. 'one = LinesRun(3, 10.0)\n'
      .. 'one.feed(12.0, b"a\\nb\\nc\\n")\n'
      .. 'print(one.last_read_text())'
    assert.equals('the last 2 lines came 50.0 ms after the read before them; 4 lines/s up to that read\nNone',
      K.run_command(('cd %s/scripts && python3 -c %s'):format(K.quote(ROOT), K.quote(program))))
  end)

  it('reports a peer it cannot install or find as not measured, and still succeeds', function()
    local dir = K.tmpdir()
    local env = offline_npm(dir)
    local out, status = bench(('--only peers,a --events 50 --pods 10 --watch-pods 10 --repeat 1 --timeout 60 '
      .. '--klua %s --peers-dir %s --python /bin/false'):format(K.quote(K.bin), K.quote(dir .. '/peers')), env)
    os.execute('rm -rf ' .. K.quote(dir))
    assert.equals(0, status, out)
    assert.matches('\n| peer client%-node: @kubernetes/client%-node [%d.]+ informer[^|]*| not measured +|', out)
    assert.matches('\n| peer python: kubernetes Watch[^|]*| not measured +|', out)
    assert.matches('\n%- peer: client%-node: not measured: npm ci could not install @kubernetes/client%-node', out)
    assert.matches('\n%- peer: python: not measured: no interpreter imports kubernetes %(/bin/false', out)
    assert.matches('python3%-kubernetes', out)
    -- The peer that is there is measured, and klua's rows are compared with it alone.
    assert.matches('\n| peer kubectl: kubectl get pods %-A %-%-watch%-only %-o name +| [%d,]+ ev/s', out)
    local row = out:match('\n(| handler%-3%-fields %(a%): [^\n]*)')
    assert.is_truthy(row, out)
    assert.matches('| [%d.]+× kubectl +|$', row)
    assert.is_nil(row:match('[^|]*|$'):find('client-node', 1, true), row)
    -- Its target's part against the missing peer is not measured: a pass it is not.
    assert.matches('| ≥ 50%% of the limit, ≥ 30× kubectl, ≥ 5× client%-node +| ', row)
    assert.is_nil(row:find('| pass ', 1, true), row)
    assert.matches('client%-node not measured %(npm ci could not install', out)
  end)

  -- Sizes so small that only the shape of the report means anything.
  local TINY = '--events 2 --pods 10 --watch-pods 10 --informer-events 20 --repeat 1 --timeout 60 --klua '

  -- Runs the bench with args at those sizes against this build's klua; its output, once it succeeded.
  local function tiny(args)
    local out, status = bench(args .. ' ' .. TINY .. K.quote(K.bin))
    assert.equals(0, status, out)
    return out
  end

  it('measures many informers on one HTTP/2 connection and a slow handler next to fast ones', function()
    local out = tiny('--only g,h')
    assert.matches('\n| many%-informers %(g%): 10 informers, one HTTP/2 connection +| [%d,]+ ev/s in all; '
      .. 'per informer [%d,]+–[%d,]+ ev/s', out)
    assert.matches('\n  %- updates handled: team%-00 20, team%-01 20,[^\n]* team%-09 20\n', out)
    assert.matches('\n  %- TCP connections from klua to nghttpx [^\n]* samples', out)
    assert.matches('\n%- proxy %(g%): nghttpx ', out)
    assert.matches('\n| slow%-handler %(h%): 4 informers, 1 waiting 1 ms per update: the others\' rate +| '
      .. '[%d,]+ ev/s vs [%d,]+ ev/s alone %([%d.]+×%)', out)
    assert.matches('\n| slow%-handler %(h%): [^|]*klua\'s peak RSS +| [%d.,]+ MB vs [%d.,]+ MB alone', out)
    assert.matches('calls klua%.sleep%(0%.001%): a handler that waits', out)
  end)

  it('measures the sync of --large-pods Pods per Pod against that of --pods Pods', function()
    local out = tiny('--only "e\'" --large-pods 50')
    assert.matches('\n| large%-sync %(e\'%): initial sync of 50 Pods %(resourceVersion=0, one page%) +| '
      .. '[%d.]+ s %([%d,]+ obj/s%); per Pod [%d.]+ µs and [%d,]+ B, [%d.]+× and [%d.]+× 10 Pods\' +| '
      .. 'per Pod flat %(≤ 1%.25×%) +|', out)
    assert.matches('\n  %- 50 cached; peak RSS', out)
  end)

  it('passes its self-test, which checks the server\'s watch-list against its LIST', function()
    local out, status = bench('--self-test')
    assert.equals(0, status, out)
    assert.matches('test_a_watch_list_sends_every_pod_as_added_then_the_initial_events_end_bookmark', out)
    assert.matches('\nOK\n', out)
  end)

  it('syncs by LIST and by WatchList in the same run, the WatchList run without any LIST', function()
    local out = tiny('--only watchlist-sync')
    assert.matches('\n| watchlist%-sync: initial sync of 10 Pods, WatchList against LIST +| [%d.]+ s vs [%d.]+ s '
      .. '%([%d.]+×%); peak RSS [%d.,]+ MB vs [%d.,]+ MB %([%d.]+×%) +| time ≤ 1%.5×, peak RSS ≤ 1%.1× LIST\'s', out)
    assert.matches('\n  %- the WatchList runs made 0 LIST requests and got 10 initial events for 10 Pods; '
      .. 'the LIST runs made 1\n', out)
  end)

  it('compares CBOR with JSON: bytes, CPU per event, memory per Pod and the sync\'s peak RSS', function()
    local out = tiny('--only cbor')
    assert.matches('\n| cbor: memory per cached Pod %(10 Pods%) +| [%d,-]+ B %([%d.-]+× JSON\'s [%d,-]+ B%)', out)
    assert.matches('\n| cbor: peak RSS at sync %(10 Pods, one LIST%) +| [%d.,]+ MB %([%d.]+× JSON\'s [%d.,]+ MB%) +| '
      .. '≤ 1%.1× JSON\'s +|', out)
    assert.matches('\n  %- the cache holds the JSON text of each object either way; 10 of 10 Pods cached from CBOR', out)
  end)

  it('times a validating webhook over HTTPS, every answer checked', function()
    local out = tiny('--only webhook --webhook-requests 40 --webhook-concurrency 4')
    assert.matches('\n| webhook: validating, 40 requests on 4 connections +| [%d,]+ req/s; p50 [%d.]+ ms, '
      .. 'p99 [%d.]+ ms; klua [%d.]+ µs CPU a request %([%d.]+× the client\'s%) +| all allowed; CPU a request ≤ 1× '
      .. 'the client\'s; p99 < 100 ms', out)
    assert.matches('each answer checked: HTTP 200, the request\'s uid, allowed', out)
    assert.matches('; 40 answered in ', out)
  end)

  it('measures the limit in the same run and gives klua\'s event rates as a fraction of it', function()
    local out = tiny('--only limit,d,a,b,c')
    assert.matches('\n| limit: simdjson alone on the same 2 event lines, the 3 fields read +| '
      .. '[%d,]+ ev/s %([%d,]+ MB/s%) +| %- +| %- +| bench%-limit [%d.]+ s, no server +|', out)
    for _, name in ipairs { 'watch%-names %(d%)', 'handler%-3%-fields %(a%)', 'controller%-enqueue %(c%)' } do
      local row = out:match('\n(| ' .. name .. ': [^\n]*)')
      assert.is_truthy(row, name .. '\n' .. out)
      assert.matches('| [%d,]+ ev/s = [%d]+%% of the limit +| '
        .. '≥ 50%% of the limit, ≥ 30× kubectl, ≥ 5× client%-node +|', row)
      -- Beside klua's CPU, the server's: who was measured.
      assert.matches('| klua [%d.]+ s · server [%d.]+ s +|', row)
    end
    assert.matches('\n| handler%-copy %(b%): [^|]+| [%d,]+ ev/s = [%d]+%% of %(a%), [%d]+%% of the limit +| '
      .. '≥ 50%% of handler%-3%-fields %(a%)\'s rate +|', out)
    assert.matches('kubectl not measured %(the peers scenario did not run%)', out)
  end)

  -- A ratio's two rates must come from the same minutes: this machine's speed moves by tens of
  -- percent within one, and best-of-3 groups run one after the other compared two moments.
  it('measures the rates a ratio compares in rounds, each once a round', function()
    local out, status = bench(('--only limit,a,c --events 2 --pods 10 --watch-pods 10 --repeat 2 --timeout 60 --klua %s')
      :format(K.quote(K.bin)))
    assert.equals(0, status, out)
    local rounds = {}
    for i, what in out:gmatch('\n  round (%d) of 2: ([^\n]*)') do rounds[tonumber(i)] = what end
    local each = 'bench%-limit, events%.lua read, events%.lua enqueue'
    assert.matches('^' .. each .. '$', rounds[1] or '', 1, false, out)
    assert.matches('^' .. each .. '$', rounds[2] or '', 1, false, out)
    -- The limit's rounds are those of both processes.
    assert.matches('the fastest of 6 rounds %(2 processes of 3, one with each round of the event rates%)', out)
  end)

  it('gives what a reconcile\'s write costs through klua.edit and through klua.copy, against (a)', function()
    local out = tiny('--only handler-edit')
    for _, how in ipairs({ 'klua%.edit%(new%)', 'klua%.copy%(new%)' }) do
      assert.matches('\n| handler%-edit: handler sets a label through ' .. how .. ' and encodes it +| '
        .. '[%d,]+ ev/s = [%d]+%% of %(a%) +| %- +| %- +| klua [%d.]+ s · server [%d.]+ s', out)
    end
  end)

  it('judges a rate by ratios to the same run: a miss fails, a peer that did not run is not measured', function()
    -- A stand-in for a run: the limit at 100 events/s, kubectl at 1 and client-node absent.
    local program = 'from benchlib import scenarios\n'
      .. 'from benchlib.report import Row\n'
      .. 'class B:\n'
      .. '    peers, peer_rates = [], {"kubectl": 1.0}\n'
      .. '    def limit_run(self):\n'
      .. '        return scenarios.LimitRun(100, 100, 1.0, 1.0, 1000, 3)\n'
      .. 'for rate, correct in ((60.0, True), (40.0, True), (60.0, False), (20.0, True)):\n'
      .. '    row = Row("x", "r", rate=rate)\n'
      .. '    scenarios._judge_rate(B(), row, correct)\n'
      .. '    print(row.verdict, "|", row.result)'
    assert.equals(table.concat({
      'not measured: client-node | r = 60% of the limit', -- 60% and 60x kubectl met; client-node not run
      'FAIL | r = 40% of the limit',                       -- under half the limit
      'FAIL | r = 60% of the limit',                       -- what the row checks besides went wrong
      'FAIL | r = 20% of the limit',                       -- under 30x kubectl, and the limit
    }, '\n'), K.run_command(('cd %s/scripts && python3 -c %s'):format(K.quote(ROOT), K.quote(program))))
  end)

  it('times a change from the server\'s write to the reconcile that sees it', function()
    local dir = K.tmpdir()
    local env = offline_npm(dir)
    local out, status = bench(('--only latency --quick --timeout 60 --klua %s --peers-dir %s')
      :format(K.quote(K.bin), K.quote(dir .. '/peers')), env)
    os.execute('rm -rf ' .. K.quote(dir))
    assert.equals(0, status, out)
    assert.matches('\n| latency: 1,000 changes/s for 2 s on 1,000 cached Pods: klua%.controller, 1 worker: write → '
      .. 'reconcile +| p50 [%d.]+ ms, p99 [%d.]+ ms +| p99 ≤ 1× client%-node\'s +| not measured: client%-node +| '
      .. 'klua [%d.]+ s · server [%d.]+ s', out)
    -- Every change sent was seen by a reconcile.
    assert.matches('\n  %- latency: min [^\n]*; 2,000 changes seen of 2,000 sent; 1,000 reconciles of unchanged', out)
    assert.matches('\n| latency: [^|]*client%-node informer: write → update handler +| not measured', out)
  end)

  -- Issue targets, as ratios to the full informer's sync in the same run.
  it('judges the sync of each informer that caches less against the full informer\'s', function()
    local out, status = bench(('--only cache-less --quick --timeout 60 --klua %s'):format(K.quote(K.bin)))
    assert.equals(0, status, out)
    assert.matches('\n| cache%-less: sync and memory per Pod, full informer %(2,000 Pods%) +| [^|]+| %- +| %- +|', out)
    for _, case in ipairs({ { "klua%.drop_fields%('metadata%.managedFields'%)", '1%.1' },
      { 'a Lua function transform dropping metadata%.managedFields', '2%.0' }, { 'metadata%-only', '1%.0' } }) do
      assert.matches('\n| cache%-less: sync and memory per Pod, ' .. case[1] .. ' %(2,000 Pods%) +| [^|]+| sync ≤ '
        .. case[2] .. '× the full informer\'s +| %a+ +|', out)
    end
    -- The function written with klua.copy, beside the one that changes the Pod it is given.
    assert.matches('\n| cache%-less: sync and memory per Pod, a Lua function transform returning klua%.copy%(pod%) '
      .. 'without metadata%.managedFields %(2,000 Pods%) +| [^|]+| %- +| %- +|', out)
  end)

  it('reports many-informers as not measured without nghttpx, naming the package', function()
    local out = tiny('--only g --nghttpx /nonexistent/nghttpx')
    assert.matches('\n| many%-informers %(g%): [^|]*| not measured +|', out)
    assert.matches('\n  %- /nonexistent/nghttpx is not installed: sh scripts/build/bootstrap bench installs '
      .. 'nghttp2%-proxy', out)
  end)
end)
