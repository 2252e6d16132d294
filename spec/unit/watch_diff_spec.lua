-- klua.cmd.diff, what `klua watch --diff` prints for a MODIFIED event: the
-- changes between two decoded objects as dotted paths with old -> new values
-- or as an RFC 6902 JSON Patch; and klua.cmd.waiter's reading of --timeout
-- (Go's time.ParseDuration, as kubectl wait reads it) and of kubectl wait's
-- --for spellings (staging/src/k8s.io/kubectl/pkg/cmd/wait). The process
-- specs (spec/process/watch_diff_spec.lua, watch_until_spec.lua) run them
-- in klua watch against the sandbox and kubectl.
local diff = require('klua.cmd.diff')
local waiter = require('klua.cmd.waiter')

local array_mt, null = {}, setmetatable({}, { __name = 'null' })
local opts = { array_mt = array_mt, null = null }
local function arr(t) return setmetatable(t, array_mt) end

-- The changes with their paths dotted, as {op, path, old, new}.
local function flat(changes)
  local out = {}
  for i, c in ipairs(changes) do out[i] = { c.op, diff.dotted(c.path), c.old, c.new } end
  return out
end

describe('klua.cmd.diff', function()
  it('finds changed, added and removed members at any depth, in path order', function()
    local old = { metadata = { name = 'web', labels = { app = 'web', gone = 'x' } }, status = { phase = 'Pending' } }
    local new = { metadata = { name = 'web', labels = { app = 'web', tier = 'front' } }, status = { phase = 'Running' } }
    assert.same({
      { 'remove', 'metadata.labels.gone', 'x', nil },
      { 'add', 'metadata.labels.tier', nil, 'front' },
      { 'replace', 'status.phase', 'Pending', 'Running' },
    }, flat(diff.changes(old, new, opts)))
  end)

  it('compares arrays by index: elements past the shorter end are added, or removed from the end', function()
    local old = { spec = { ports = arr { { port = 80 }, { port = 81 }, { port = 82 } } } }
    local new = { spec = { ports = arr { { port = 8080 } } } }
    assert.same({
      { 'replace', 'spec.ports[0].port', 80, 8080 },
      { 'remove', 'spec.ports[2]', { port = 82 }, nil },
      { 'remove', 'spec.ports[1]', { port = 81 }, nil },
    }, flat(diff.changes(old, new, opts)))
    assert.same({ { 'add', 'spec.ports[1]', nil, { port = 81 } } },
      flat(diff.changes({ spec = { ports = arr { { port = 80 } } } },
        { spec = { ports = arr { { port = 80 }, { port = 81 } } } }, opts)))
  end)

  it('replaces a value whole when its JSON type changes, and tells an integer from a float and null from absent', function()
    assert.same({
      { 'replace', 'a', arr {}, {} },
      { 'replace', 'b', 1, 1.0 },
      { 'replace', 'c', null, 'x' },
    }, flat(diff.changes({ a = arr {}, b = 1, c = null, d = 2 }, { a = {}, b = 1.0, c = 'x', d = 2 }, opts)))
  end)

  it('leaves out resourceVersion, managedFields and generation unless asked for all, and finds nothing else', function()
    local function pair()
      return { metadata = { name = 'web', resourceVersion = '1', generation = 1, managedFields = arr { { manager = 'a' } } } },
        { metadata = { name = 'web', resourceVersion = '2', generation = 2, managedFields = arr { { manager = 'b' } } } }
    end
    assert.same({}, diff.changes(pair()))
    local old, new = pair()
    assert.same({
      { 'replace', 'metadata.generation', 1, 2 },
      { 'replace', 'metadata.managedFields[0].manager', 'a', 'b' },
      { 'replace', 'metadata.resourceVersion', '1', '2' },
    }, flat(diff.changes(old, new, { all = true, array_mt = array_mt, null = null })))
  end)

  it('writes a path as a dotted path, a member that is not a word in brackets', function()
    assert.equals('metadata.labels["app.kubernetes.io/name"]', diff.dotted({ 'metadata', 'labels', 'app.kubernetes.io/name' }))
    assert.equals('spec.containers[0].image', diff.dotted({ 'spec', 'containers', 0, 'image' }))
    assert.equals('["a b"].c_d', diff.dotted({ 'a b', 'c_d' }))
  end)

  it('prints a change a line: path: old -> new, values as JSON, (none) for what is not there', function()
    local changes = diff.changes({ status = { phase = 'Pending' }, spec = { n = 1 } },
      { status = { phase = 'Running' }, spec = { n = 1, tags = arr { 'a' } } }, opts)
    assert.equals('  spec.tags: (none) -> ["a"]\n  status.phase: "Pending" -> "Running"\n', diff.text(changes, opts))
  end)

  it('writes an RFC 6902 JSON Patch, its paths RFC 6901 JSON Pointers (~0 for ~, ~1 for /)', function()
    local changes = diff.changes({ metadata = { labels = { ['app.kubernetes.io/name'] = 'a', ['x~y'] = 'b' } } },
      { metadata = { labels = { ['app.kubernetes.io/name'] = 'c' } }, status = { at = null } }, opts)
    assert.same({
      { op = 'replace', path = '/metadata/labels/app.kubernetes.io~1name', value = 'c' },
      { op = 'remove', path = '/metadata/labels/x~0y' },
      { op = 'add', path = '/status', value = { at = null } },
    }, diff.patch(changes, opts))
  end)
end)

describe('klua.cmd.waiter', function()
  it('reads --timeout as Go reads a duration, with its words for a bad one', function()
    assert.equals(30, waiter.duration('30s'))
    assert.equals(90, waiter.duration('1m30s'))
    assert.equals(5400, waiter.duration('1.5h'))
    assert.equals(0.5, waiter.duration('500ms'))
    assert.equals(0, waiter.duration('0'))
    assert.equals(-1, waiter.duration('-1s'))
    assert.same({ nil, 'time: missing unit in duration "30"' }, { waiter.duration('30') })
    assert.same({ nil, 'time: unknown unit "d" in duration "2d"' }, { waiter.duration('2d') })
    assert.same({ nil, 'time: invalid duration "soon"' }, { waiter.duration('soon') })
  end)

  local function holds(spec, obj)
    local c = assert(waiter.condition(spec))
    return c.check(obj)
  end

  it('reads --for=condition=NAME[=VALUE] as kubectl: case-insensitive, True by default, stale generations ignored', function()
    local pod = { status = { conditions = { { type = 'Ready', status = 'True' }, { type = 'Scheduled', status = 'False' } } } }
    assert.is_true(holds('condition=Ready', pod))
    assert.is_true(holds('condition=ready=TRUE', pod))
    assert.is_true(holds('condition=Scheduled=false', pod))
    assert.is_false(holds('condition=Scheduled', pod))
    assert.is_false(holds('condition=Missing', pod))
    local stale = { metadata = { generation = 3 }, status = { observedGeneration = 2,
      conditions = { { type = 'Available', status = 'True' } } } }
    assert.is_false(holds('condition=Available', stale))
    stale.status.conditions[1].observedGeneration = 3
    assert.is_true(holds('condition=Available', stale))
  end)

  it('reads --for=jsonpath=PATH[=VALUE] as kubectl: relaxed paths, values printed as Go does, refusals in its words', function()
    local pod = { status = { phase = 'Running', replicas = 3 }, spec = { containers = { { name = 'a' }, { name = 'b' } } } }
    assert.is_true(holds('jsonpath={.status.phase}=Running', pod))
    assert.is_true(holds("jsonpath=.status.phase='Running'", pod))
    assert.is_true(holds('jsonpath={.status.replicas}=3', pod))
    assert.is_true(holds('jsonpath={.status.phase}', pod))
    assert.is_false(holds('jsonpath={.status.missing}', pod))
    assert.is_false(holds('jsonpath={.status.phase}=Pending', pod))
    assert.is_true(holds('jsonpath={.spec.containers[?(@.name=="b")].name}=b', pod))
    assert.same({ false, 'given jsonpath expression matches more than one value' },
      { holds('jsonpath={.spec.containers[*].name}=a', pod) })
    assert.same({ false, 'jsonpath leads to a nested object or list which is not supported' },
      { holds('jsonpath={.status}=x', pod) })
    assert.same({ nil, "jsonpath wait has to have a value after equal sign, like --for=jsonpath='{.status.readyReplicas}'=3" },
      { waiter.condition('jsonpath={.status.phase}=') })
    assert.same({ nil, 'unrecognized condition: "ready"' }, { waiter.condition('ready') })
    assert.is_true(waiter.condition('Delete').gone)
    assert.is_true(holds('create', pod))
  end)
end)
