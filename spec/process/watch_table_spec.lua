-- `klua watch`'s table columns are the server's: it lists and watches the
-- Table form (Accept: application/json;as=Table;g=meta.k8s.io;v=v1, with
-- includeObject=Object), as kubectl get does, and prints the header from the
-- Table's columnDefinitions and each row's cells as the server sent them.
-- kube-apiserver serves that form for the lists and watches of every
-- resource (endpoints/handlers/response.go, asTable; a watch event's object
-- is a Table of one row, watch.go); a server that refuses it (406) or
-- answers the plain list instead gets NAME and AGE, kubectl's columns for
-- objects without a Table. The cases run without the right to read
-- CustomResourceDefinitions, which kubectl does not need either: only the
-- server knows a custom resource's columns.
local sandbox = require('support.sandbox')
local hostile = require('support.hostile')
local K = require('support.klua')
local fixtures = require('support.fixtures')
local testing = require('klua.testing')

describe('klua watch prints the server\'s Table', function()
  local sb, ns = nil, 'tables'
  local watcher = K.watcher(function() return sb.kubeconfig end)
  local watch = watcher.watch

  setup(function()
    sb = sandbox.start()
    assert(select(2, sb:try_kubectl('create namespace ' .. ns)))
    assert(select(2, sb:try_kubectl('apply -f -', fixtures.GIZMOS_CRD)))
    assert(testing.poll(function() return select(2, sb:try_kubectl('get gizmos -n ' .. ns)) end, 10))
    assert(select(2, sb:try_kubectl('apply -n ' .. ns .. ' -f -',
      'apiVersion: example.com/v1\nkind: Gizmo\nmetadata: {name: cog, labels: {tier: gold}}\n'
      .. 'spec: {size: 3, colour: red, owner: ana}\n')))
  end)
  teardown(function() sb:stop() end)

  before_each(function() sb:fault { forbid = { 'customresourcedefinitions' } } end)
  after_each(function()
    watcher.cleanup()
    sb:reset_faults()
  end)

  -- Waits until p has printed n lines; returns their words.
  local function lines_of(p, n)
    local ok = testing.poll(function() return #K.rows(p:output()) >= n end, 15)
    assert.truthy(ok, ('expected %d lines:\n%s\n%s'):format(n, p:output(), p:errors()))
    return K.rows(p:output())
  end

  -- Waits until p has printed its header and a first row: the header's words
  -- must be header, the row's match the pattern row.
  local function header_and_row(p, header, row)
    local got = lines_of(p, 2)
    assert.equal(header, got[1])
    assert.truthy(got[2]:match(row), got[2])
  end

  it('with -o wide, the columns of priority > 0 too', function()
    local p = watch { 'gizmos', '-n', ns, '-o', 'wide' }
    header_and_row(p, 'NAME SIZE COLOUR AGE', '^cog 3 red %S+$')
  end)

  it('a row for each change, with the cells the server sent for it; -e, -L and --sort-by read the whole object', function()
    local p = watch { 'gizmos', '-n', ns, '-L', 'tier', '--sort-by', '.spec.size',
      '-e', 'obj.spec.size > 2 and obj.spec.colour ~= nil' }
    header_and_row(p, 'NAME SIZE AGE TIER', '^cog 3 %S+ gold$')
    assert(select(2, sb:try_kubectl('patch gizmo cog -n ' .. ns .. ' --type=merge -p \'{"spec":{"size":7}}\'')))
    local got = lines_of(p, 3)
    assert.truthy(got[3]:match('^cog 7 %S+ gold$'), got[3])
    assert(select(2, sb:try_kubectl('patch gizmo cog -n ' .. ns .. ' --type=merge -p \'{"spec":{"size":3}}\'')))
    lines_of(p, 4)
  end)

  -- kube-apiserver 1.32 and 1.33 refuse the Table form to a watch-list request, as the
  -- sandbox does (docs/sandbox.md): the table is listed and watched, as by kubectl get -w.
  it('the same rows with --watch-list, from a LIST and a WATCH', function()
    local p = watcher.track(K.spawn { '--kubeconfig', sb.kubeconfig, '--watch-list', '-v', '2', 'watch', 'gizmos', '-n', ns })
    header_and_row(p, 'NAME SIZE AGE', '^cog 3 %S+$')
    assert.truthy(testing.poll(function() return p:errors():find('LIST -> WATCH', 1, true) end, 10), p:errors())
    assert.falsy(p:errors():find('WATCHLIST', 1, true), p:errors())
  end)

  it('the server\'s columns after its first LIST failed (503), asked again as the informer would', function()
    sb:fault { fail = { count = 2, code = 503, verbs = { 'list' }, path = 'includeObject=Object' } }
    local p = watch { 'gizmos', '-n', ns }
    header_and_row(p, 'NAME SIZE AGE', '^cog 3 %S+$')
    assert.equal(2, sb:stats().faults.fail_503)
    assert.truthy(p:errors():find('listing gizmos failed', 1, true), p:errors())
  end)

  it('NAME and AGE, with no error, from a server that refuses the Table form (406)', function()
    assert(select(2, sb:try_kubectl('create configmap plain -n ' .. ns .. ' --from-literal=a=1')))
    sb:fault { fail = { count = 1, code = 406, verbs = { 'list' }, path = 'includeObject=Object' } }
    local p = watch { 'configmaps', '-n', ns }
    header_and_row(p, 'NAME AGE', '^plain %d+s$')
    assert.equal(1, sb:stats().faults.fail_406)
    assert.equal('', p:errors())
  end)

  it('NAME and AGE, with no error, from a server that answers the plain list instead', function()
    local s = hostile.start { '--mode', 'good' }
    local p = watch({ 'configmaps', '-A' }, s:kubeconfig())
    header_and_row(p, 'NAMESPACE NAME AGE', '^default %S+ %S+$')
    assert.equal('', p:errors())
  end)
  it('the columns a custom resource\'s CRD names, following the CRD when its columns change', function()
    local p = watch { 'gizmos', '-n', ns }
    header_and_row(p, 'NAME SIZE AGE', '^cog 3 %S+$')
    p:cleanup()
    -- Last of the cases: the other ones print the CRD's first columns.
    sb:reset_faults()
    assert(select(2, sb:try_kubectl('apply -f -', fixtures.gizmos_crd {
      { name = 'Owner', type = 'string', jsonPath = '.spec.owner' },
      { name = 'Big', type = 'boolean', jsonPath = '.spec.big' },
    })))
    sb:fault { forbid = { 'customresourcedefinitions' } }
    p = watch { 'gizmos', '-n', ns }
    -- A cell the object lacks is empty, as kubectl prints a null cell.
    assert.same({ 'NAME OWNER BIG', 'cog ana' }, lines_of(p, 2))
  end)
end)
