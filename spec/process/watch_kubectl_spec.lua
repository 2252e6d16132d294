-- `klua watch ARGS` prints what `kubectl get ARGS -w` prints. Each case runs
-- kubectl 1.32 and klua side by side on the same sandbox objects: the
-- initial list, then a pod created and its phase changed, and compares
-- their output row by row (spec/support/kubectl_watch.lua).
-- The sandbox serves the Table form (scripts/sandbox/tables.py, the
-- columns of kube-apiserver's printers), which klua asks for as kubectl
-- does (spec/process/watch_table_spec.lua), so these cases check that klua
-- prints the server's rows as kubectl does. README ("klua watch") lists what
-- klua prints differently, and why.
local sandbox = require('support.sandbox')
local K = require('support.klua')
local fixtures = require('support.fixtures')
local testing = require('klua.testing')
local KW = require('support.kubectl_watch')

local normalise, lines = KW.normalise, KW.lines

describe('klua watch speaks kubectl', function()
  local sb, ns, cmp

  setup(function()
    sb = sandbox.start()
    ns = 'speaks'
    cmp = KW.new(sb, ns)
    assert(select(2, sb:try_kubectl('create namespace ' .. ns)))
    assert(select(2, sb:try_kubectl('run webpod -n ' .. ns .. ' --image=nginx -l app=web')))
    assert(select(2, sb:try_kubectl('run dbpod -n ' .. ns .. ' --image=nginx')))
    assert(select(2, sb:try_kubectl('create configmap settings -n ' .. ns .. ' --from-literal=a=1 --from-literal=b=2')))
    assert(select(2, sb:try_kubectl('apply -f -', fixtures.GIZMOS_CRD)))
    assert(testing.poll(function() return select(2, sb:try_kubectl('get gizmos -n ' .. ns)) end, 10))
    assert(select(2, sb:try_kubectl('apply -n ' .. ns .. ' -f -',
      'apiVersion: example.com/v1\nkind: Gizmo\nmetadata: {name: cog}\nspec: {size: 3, colour: red}\n')))
    -- Without the fields of its columns: the server sends null cells.
    assert(select(2, sb:try_kubectl('apply -n ' .. ns .. ' -f -',
      'apiVersion: example.com/v1\nkind: Gizmo\nmetadata: {name: plain}\nspec: {}\n')))
  end)
  teardown(function() sb:stop() end)

  -- Each prints what kubectl prints, which has the pattern shows.
  for _, case in ipairs {
    { name = 'by default: a header, then aligned rows, without the header for later ones', args = 'pods -n speaks',
      shows = '^NAME%s+READY%s+STATUS%s+RESTARTS%s+AGE\n' },
    { name = 'with --output-watch-events: an EVENT column', args = 'pods -n speaks --output-watch-events',
      shows = 'MODIFIED' },
    { name = 'with -o yaml: documents separated by ---', args = 'pods -n speaks -o yaml',
      shows = '\n%-%-%-\napiVersion: v1\n' },
  } do
    it(case.name, function()
      local out = cmp:same(case.args)
      assert.truthy(out:find(case.shows), out)
    end)
  end

  it('with --no-headers, -o wide, -L and --show-labels', function()
    cmp:same('pods -n speaks --no-headers')
    cmp:same('pods -n speaks -o wide')
    cmp:same('pods -n speaks -L app,run --show-labels')
  end)

  it('with -A: a NAMESPACE column', function()
    cmp:same('pods -A')
  end)

  it('with TYPE/NAME and TYPE NAME, one table for several names of one type', function()
    local done = function(t) return t:find('webpod') end
    cmp:same('pod/webpod -n speaks', { change = false, done = done })
    cmp:same('pods webpod -n speaks', { change = false, done = done })
    cmp:same('pod/webpod pod/dbpod -n speaks', { change = false, done = function(t) return t:find('dbpod') end })
  end)

  -- kubectl get -w takes one type only ("you may only specify a single resource
  -- type"); klua watch takes several, and prints each type's table as kubectl get
  -- does without -w (kind/NAME in the NAME column), one after the other.
  it('several types, as kubectl get prints them', function()
    local p = K.spawn({ '--kubeconfig', sb.kubeconfig, 'watch', 'pod/webpod', 'configmap/settings', '-n', 'speaks' })
    testing.eventually(function() return p:output():find('configmap/settings', 1, true) end, 15)
    local out = p:output()
    p:cleanup()
    local want = assert(sb:try_kubectl('get pod/webpod configmap/settings -n speaks'))
    assert.same(lines(normalise((want:gsub('\n\n', '\n')))), lines(normalise(out)))
    assert.truthy(out:find('\npod/webpod ', 1, true), out)
  end)

  it('configmaps with DATA and a custom resource with its additionalPrinterColumns', function()
    local done = function(t) return t:find('settings') end
    cmp:same('configmaps -n speaks', { first = 'settings', change = false, done = done })
    -- Without the server's Table: NAME and AGE.
    local plain = cmp:same('configmaps -n speaks --server-print=false', { first = 'settings', change = false, done = done })
    assert.truthy(plain:find('^NAME%s+AGE\nsettings%s'), plain)
    done = function(t) return t:find('plain') end
    local out = cmp:same('gizmos -n speaks', { first = 'cog', change = false, done = done })
    assert.truthy(out:find('^NAME%s+SIZE%s+AGE\ncog%s+3%s'), out)
    out = cmp:same('gizmos -n speaks -o wide', { first = 'cog', change = false, done = done })
    assert.truthy(out:find('^NAME%s+SIZE%s+COLOUR%s+AGE\n'), out)
  end)

  -- kube-apiserver 1.32 and 1.33 refuse the Table form to a WatchList request
  -- (watchListEndpointRestrictions; the sandbox too: docs/sandbox.md), and
  -- kubectl get -w lists and watches: so does klua watch's table, --watch-list or not.
  it('with --watch-list: the same rows, from a LIST and WATCH of the Table form', function()
    local done = function(t) return t:find('settings') end
    local out = cmp:same('configmaps -n speaks', { flags = { '--watch-list' }, first = 'settings', change = false,
      done = done })
    assert.truthy(out:find('\nsettings%s+2%s'), out)
    cmp:same('pods -n speaks -o wide', { flags = { '--watch-list' } })
  end)

  it('with -o name', function()
    cmp:same('pods -n speaks -o name', { done = function(t, name)
      return select(2, t:gsub('pod/' .. name .. '\n', '')) == 2
    end })
  end)

  it('with -o json: indented objects; with --output-watch-events one {"type":...,"object":...} a line', function()
    cmp:same('pods -n speaks -o json')
    cmp:same('pods -n speaks -o json --output-watch-events')
  end)

  -- go-yaml's choices, which klua.core.yaml makes too: keys x9 before x10,
  -- strings that would read as numbers, booleans or timestamps double-quoted,
  -- a line with a newline as a literal block, long lines folded at 80 columns.
  it('with -o yaml: strings quoted, folded and ordered as go-yaml writes them', function()
    local manifest = {
      'apiVersion: v1', 'kind: ConfigMap', 'metadata: {name: tricky}', 'data:',
      '  x9: "007"', '  x10: "yes"', '  x100: "1.5"', '  when: "2026-01-02T03:04:05Z"', '  colon: "a: b"',
      '  star: "*x"', '  empty: ""', '  multi: "one\\ntwo\\n"', '  long: "' .. ('abc def '):rep(30) .. '"',
      '  unicode: "héllo"', '  null-word: "null"', '  spaced: " lead"',
      -- What go-yaml's resolve() reads as a string stays plain, the rest is quoted.
      '  dot: "."', '  merge: "<<"', '  hexfloat: "0x1p-2"', '  no-date: "2026-02-30"', '  too-big: "1.5e999"',
      '  wide-hex: "0xFFFFFFFFFFFFFFFFFF"', '  digits: "1_000"', '  half: ".5"', '  octal: "0o17"', '  signed: "-_1"',
    }
    assert(select(2, sb:try_kubectl('apply -n speaks -f -', table.concat(manifest, '\n') .. '\n')))
    local out = cmp:same('configmap tricky -n speaks -o yaml', { first = 'tricky', change = false,
      done = function(t) return t:find('tricky') end })
    assert.truthy(out:find('  x9: "007"\n  x10: "yes"\n  x100: "1.5"\n', 1, true), out)
  end)

  -- kubectl writes YAML with go-yaml v2, which quotes only what it would read
  -- back as another type ("." stays plain) and sorts anything else before a
  -- letter (".": {} before f:f2, f2 before float1); an Update's managedFields
  -- have a "." for each map the manager set.
  it('with -o yaml --show-managed-fields: managedFields as kubectl writes them', function()
    assert(select(2, sb:try_kubectl('create -n speaks -f -',
      'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: fields, labels: {a.b: "1", ab: "2", a1: "3"}}\ndata: {f2: "1", float1: "2"}\n')))
    local out = cmp:same('configmap fields -n speaks -o yaml --show-managed-fields', { first = 'fields', change = false,
      done = function(t) return t:find('fields') end })
    assert.truthy(out:find('\n      f:data:\n        .: {}\n        f:f2: {}\n        f:float1: {}\n', 1, true), out)
  end)

  -- kube-apiserver holds a custom resource's numbers as int64 or float64
  -- (sigs.k8s.io/json) and writes them with encoding/json, as the sandbox
  -- does (docs/sandbox.md); kubectl prints them from those Go values: -o json
  -- as encoding/json, -o yaml through go-yaml (a float with strconv's 'g',
  -- an integer beyond int64 as go-yaml reads it), jsonpath and
  -- custom-columns with fmt's %v, maps and lists of custom-columns as Go's
  -- map[k:v] and [a b].
  it('numbers, maps and lists as kubectl prints them, in every format', function()
    assert(select(2, sb:try_kubectl('create -n speaks -f -', [==[{"apiVersion":"example.com/v1","kind":"Gizmo",
      "metadata":{"name":"numbers"},"spec":{"big":12345678901234567890,"beyond":18446744073709551615,
      "dec":123456789.123,"million":1000000.0,"tiny":1e-7,"small":0.000015,"huge":1e21,"whole":3,
      "list":[1,"two words",null,true,{"k":"v"},[]],"nothing":null,"empty":{}}}]==])))
    local function case(format)
      cmp:compare('gizmos numbers -n speaks -o ' .. K.quote(format), { 'gizmos', 'numbers', '-n', 'speaks', '-o', format },
        { first = 'numbers', change = false, done = function(t) return t:find('numbers') end })
    end
    case('json')
    case('yaml')
    case('jsonpath={.metadata.name} {.spec.big} {.spec.beyond} {.spec.dec} {.spec.tiny} {.spec.small}|{.spec.list}{"\\n"}')
    case('custom-columns=NAME:.metadata.name,SPEC:.spec,BIG:.spec.big,DEC:.spec.dec,LIST:.spec.list[*],NOTHING:.spec.nothing')
    cmp:compare([[pods -n speaks -o 'custom-columns=NAME:.metadata.name,LABELS:.metadata.labels,TOLERATIONS:.spec.tolerations']],
      { 'pods', '-n', 'speaks', '-o', 'custom-columns=NAME:.metadata.name,LABELS:.metadata.labels,TOLERATIONS:.spec.tolerations' },
      { change = false, done = function(t) return t:find('webpod') end })
  end)

  -- kubectl's dialect, value by value: fields, [*], unions, slices, filters,
  -- recursive descent, range/end, string literals, objects printed as JSON.
  it('with -o jsonpath=: kubectl\'s JSONPath dialect', function()
    local template = 'jsonpath={.metadata.labels}{"\\n"}{.spec.containers[*].name}|{.spec.containers}|{.spec.priority}|'
      .. '{.spec.enableServiceLinks}|{.nope}|{range .spec.tolerations[*]}[{.key}]{end}|'
      .. '{.spec.tolerations[?(@.tolerationSeconds>200)].key}|{..image}|{.spec.tolerations[-1:].key}|'
      .. "{.spec.tolerations[*]['key','effect']}|{$.kind}|{.metadata.labels.app}{\"-\"}x{.status.phase} "
      .. '{.spec.tolerations[0:1].operator}|{.spec.tolerations[?(@.key)].effect}|{@.kind}|'
      .. '{.spec.tolerations[?(@.key!="x")].operator}|{.spec.tolerations[0].tolerationSeconds}{.status}'
      .. '{"\\n"}'
    cmp:compare('pods webpod -n speaks -o ' .. K.quote(template), { 'pods', 'webpod', '-n', 'speaks', '-o', template },
      { change = false, done = function(t) return t:find('webpod') end })
  end)

  it('with -o jsonpath= and -o custom-columns=', function()
    cmp:compare([[pods -n speaks -o 'jsonpath={.metadata.name}={.status.phase}{"\n"}']],
      { 'pods', '-n', 'speaks', '-o', 'jsonpath={.metadata.name}={.status.phase}{"\\n"}' })
    cmp:compare([[pods -n speaks -o 'custom-columns=NAME:.metadata.name,PHASE:.status.phase,IMAGES:.spec.containers[*].image']],
      { 'pods', '-n', 'speaks', '-o', 'custom-columns=NAME:.metadata.name,PHASE:.status.phase,IMAGES:.spec.containers[*].image' })
  end)
end)
