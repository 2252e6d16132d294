-- What -v 3 and -v 5 narrate: the controller half (each handler call, each
-- enqueue with its key, the informer and event that caused it and whether
-- it was deduplicated, each reconcile's start and end with its result and
-- duration) and the wire beneath the reflector (each read's size, each
-- frame's size, each decoded event's type, key and resourceVersion), so
-- that one change can be followed from the HTTP chunk to the reconcile.
local testing = require('klua.testing')
local K = require('support.klua')

-- Two informers over the same ConfigMaps feed one controller, so the
-- initial list enqueues each key twice before the workers start. Its
-- reconciles of default/told fail once, requeue once, then change the
-- ConfigMap, whose MODIFIED event is reconciled last; stdout says that
-- change's resourceVersion.
local SCRIPT = [[
  local narr = klua.informer { resource = 'configmaps', namespace = 'default', label_selector = 'narr=1' }
  local any = klua.informer { resource = 'configmaps', namespace = 'default', label_selector = 'narr' }
  local n = 0
  klua.controller { name = 'narrator', watches = { narr, any }, reconcile = function(key)
    n = n + 1
    if n == 1 then return nil, 'not yet' end
    if n == 2 then return klua.requeue_after(0.05) end
    if n == 3 then
      local cm = klua.copy(narr:get(key))
      cm.data = { step = 'changed' }
      local got = assert(klua.api.update('configmaps', cm))
      print(got.metadata.resourceVersion)
      return
    end
    if narr:get(key).data.step == 'changed' then klua.after(0, function() klua.stop() end) end
  end }
]]

-- Runs SCRIPT at verbosity v; returns its stderr and the rv of the change.
local function narrate(sb, v)
  local out, err = K.run_script_ok(SCRIPT, { kubeconfig = sb.kubeconfig, flags = { '-v', tostring(v) } })
  return err, out:match('^(%d+)\n$')
end

-- The position in text of each pattern, each found after the one before;
-- fails naming the first that is missing.
local function in_order(text, patterns)
  local at = 1
  for _, p in ipairs(patterns) do
    local s, e = text:find(p, at)
    assert(s, ('no line matching %q after position %d in:\n%s'):format(p, at, text))
    at = e + 1
  end
end

describe('klua -v', function()
  local sb = testing.with_sandbox { each = true }

  before_each(function()
    local status = sb:json('POST', '/api/v1/namespaces/default/configmaps',
      { metadata = { name = 'told', labels = { narr = '1' } }, data = { step = 'first' } })
    assert.equals(201, status)
  end)

  it('3 names each handler call, each enqueue with its cause and dedup, each reconcile start and end', function()
    local err, rv = narrate(sb, 3)
    assert.truthy(rv, err)
    local A, B = '%[configmaps %-n default %-l narr=1%] ', '%[configmaps %-n default %-l narr%] '
    -- The initial list: one add handler call of each informer, two enqueues
    -- of one key, the second merged into the first.
    assert.truthy(err:find(A .. 'add handler 1 of 1: default/told at resourceVersion %d+ %(in the initial list%)'), err)
    assert.truthy(err:find(B .. 'add handler 1 of 1: default/told at resourceVersion %d+ %(in the initial list%)'), err)
    local enq = 'narrator: enqueue default/told %(configmaps %-n default %-l narr[=1]* add%): '
    in_order(err, { enq .. 'queued\n', enq .. 'deduplicated, already queued\n',
      'narrator: reconcile default/told started %(attempt 1%)\n',
      'narrator: reconcile default/told ended in [%d.]+ ms: error, again after a backoff of 0%.005 s\n',
      'narrator: reconcile default/told started %(attempt 2%)\n',
      'narrator: reconcile default/told ended in [%d.]+ ms: requeue_after, again in 0%.05 s\n',
      'narrator: reconcile default/told started %(attempt 1%)\n',
      -- The change made by that reconcile, back through the watch (while
      -- the reconcile waits for the server's answer, or after it ended),
      -- and the reconcile it queued.
      'update handler 1 of 1: default/told at resourceVersion ' .. rv .. '\n',
      'narrator: enqueue default/told %(configmaps %-n default %-l narr[=1]* update%): queued',
      'narrator: reconcile default/told ended in [%d.]+ ms: success\n' })
    -- The wire is -v 5's.
    assert.is_nil(err:find('frame of', 1, true), err)
    assert.is_nil(err:find('decoded MODIFIED', 1, true), err)
  end)

  it('5 adds each read, each frame and each decoded event, ahead of the handler call they lead to', function()
    local err, rv = narrate(sb, 5)
    assert.truthy(rv, err)
    -- Either informer's: the first to see the change may end the run.
    local A = '%[configmaps %-n default %-l narr[=1]*%] '
    local read = '%[http%] GET /api/v1/namespaces/default/configmaps%?[^\n]*watch=true[^\n]*: read (%d+) bytes\n'
    in_order(err, { read, A .. 'frame of %d+ bytes\n', A .. 'decoded MODIFIED default/told at resourceVersion ' .. rv .. '\n',
      A .. 'update handler 1 of 1: default/told at resourceVersion ' .. rv .. '\n',
      'narrator: enqueue default/told', 'narrator: reconcile default/told started' })
    -- A frame is no longer than the read that brought it (a newline ends
    -- each event on the wire); reads of the watch-list and of discovery are told too.
    local frame = tonumber(err:match(A .. 'frame of (%d+) bytes'))
    local longest = 0
    for n in err:gmatch('watch=true[^\n]*: read (%d+) bytes') do longest = math.max(longest, tonumber(n)) end
    assert.truthy(frame <= longest, err)
    assert.truthy(err:find('%[http%] GET /api/v1/namespaces/default/configmaps%?[^\n]*sendInitialEvents=true[^\n]*: read %d+ bytes'), err)
    assert.truthy(err:find('%[http%] GET /api/v1: read %d+ bytes'), err)
  end)

  it('2 tells neither the controller half nor the wire', function()
    local err = narrate(sb, 2)
    assert.truthy(err:find('WATCH with initial events', 1, true), err)
    for _, said in ipairs({ 'handler 1 of 1', 'enqueue', 'reconcile default/told started', 'ended in', 'frame of', 'read ', 'decoded' }) do
      assert.is_nil(err:find(said, 1, true), said .. ' at -v 2:\n' .. err)
    end
  end)
end)
