-- `klua watch ARGS` prints what `kubectl get ARGS -w` prints. Each case runs
-- kubectl 1.32 and klua side by side on the same sandbox objects: the
-- initial list, then a pod created and its phase changed, and compares
-- their output row by row. One thing is normalised: an AGE cell (such as
-- "3s") and the padding after it, since the two may print a second apart.
-- The sandbox serves the Table form (scripts/sandbox/tables.py, the
-- columns of kube-apiserver's printers), which klua asks for as kubectl
-- does (spec/process/watch_table_spec.lua), so these cases check that klua
-- prints the server's rows as kubectl does. README ("klua watch") lists what
-- klua prints differently, and why.
local sandbox = require 'support.sandbox'
local K = require 'support.klua'
local fixtures = require 'support.fixtures'
local testing = require 'klua.testing'

-- An AGE cell ("12s", "3m20s") becomes <age>, and the spaces after it one space.
local function normalise(text)
  return (text:gsub('[^\n]+', function(line)
    return (line:gsub('(%S+)( *)', function(word, spaces)
      if word:match('^%d+s$') or word:match('^%d+m%d*s?$') then word = '<age>' end
      return word .. (spaces ~= '' and ' ' or '')
    end))
  end))
end

local function lines(text)
  local out = {}
  for line in text:gmatch('[^\n]*\n?') do if line ~= '' then out[#out + 1] = line end end
  return out
end

describe('klua watch speaks kubectl', function()
  local sb, ns
  local n = 0

  setup(function()
    sb = sandbox.start()
    ns = 'speaks'
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

  -- `kubectl get ARGS -w` in the background; returns its output file and pid file.
  local function kubectl_watch(args)
    local out = sb:tmpfile('kubectl-watch')
    os.execute(sb:kubectl_command('get ' .. args .. ' -w') .. ' > ' .. out .. ' 2> ' .. out .. '.err & echo $! > '
      .. out .. '.pid')
    return out
  end

  local function stop_kubectl(out)
    os.execute('kill $(cat ' .. out .. '.pid) 2>/dev/null')
  end

  -- Runs both on `words` (kubectl's, shell-quoted; klua's as a list) and
  -- creates a pod and sets its phase (unless opts.change is false); waits
  -- until opts.done(text, pod name, 1 for kubectl or 2 for klua) holds for
  -- both outputs (by default: the phase change shows) and they agree, then
  -- compares them.
  local function compare(kubectl_args, klua_args, opts)
    opts = opts or {}
    n = n + 1
    local file = kubectl_watch(kubectl_args)
    local full = { '--kubeconfig', sb.kubeconfig, 'watch' }
    for _, a in ipairs(klua_args) do full[#full + 1] = a end
    local p = K.spawn(full)
    local function kubectl_text() return K.read_file(file) or '' end
    local first = opts.first or 'webpod'
    local started = testing.eventually(function()
      return kubectl_text():find(first, 1, true) and p:output():find(first, 1, true)
    end, 15, { fail = false })
    local name = 'new' .. n .. 'p'
    local function settled(done)
      return testing.eventually(function()
        local a, b = kubectl_text(), p:output()
        return done(a, name, 1) and done(b, name, 2) and normalise(a) == normalise(b)
      end, 15, { fail = false })
    end
    local done = opts.done
    if opts.change ~= false then
      -- The pod's ADDED row first, then its phase: by default the two outputs
      -- are compared once each has one more "Running" than before the change,
      -- so that they cannot agree too early.
      assert(select(2, sb:try_kubectl(('run %s -n %s --image=nginx'):format(name, ns))))
      settled(function(t) return t:find(name, 1, true) end)
      local function running(t) return select(2, t:gsub('Running', '')) end
      local before = { running(kubectl_text()), running(p:output()) }
      assert(select(2, sb:try_kubectl(('patch pod %s -n %s --subresource=status --type=merge -p '
        .. '\'{"status":{"phase":"Running"}}\''):format(name, ns))))
      done = done or function(t, _, who) return running(t) > before[who] end
    end
    settled(done)
    stop_kubectl(file)
    local a, b, log = kubectl_text(), p:output(), p:errors()
    p:cleanup()
    assert.truthy(started, ('never started: kubectl:\n%s\nklua:\n%s\n%s'):format(a, b, log))
    assert.truthy(done(b, name, 2), 'klua never printed the change:\n' .. b)
    assert.same(lines(normalise(a)), lines(normalise(b)))
    return a, b
  end

  local function words(s)
    local out = {}
    for w in s:gmatch('%S+') do out[#out + 1] = w end
    return out
  end

  -- Both take the same words: `kubectl get WORDS -w` and `klua watch WORDS`.
  local function same(args, opts) return compare(args, words(args), opts) end

  it('by default: a header, then aligned rows, without the header for later ones', function()
    local out = same('pods -n speaks')
    assert.truthy(out:find('^NAME%s+READY%s+STATUS%s+RESTARTS%s+AGE\n'), out)
  end)

  it('with --output-watch-events: an EVENT column', function()
    local out = same('pods -n speaks --output-watch-events')
    assert.truthy(out:find('MODIFIED', 1, true), out)
  end)

  it('with --no-headers, -o wide, -L and --show-labels', function()
    same('pods -n speaks --no-headers')
    same('pods -n speaks -o wide')
    same('pods -n speaks -L app,run --show-labels')
  end)

  it('with -A: a NAMESPACE column', function()
    same('pods -A')
  end)

  it('with TYPE/NAME and TYPE NAME, one table for several names of one type', function()
    local done = function(t) return t:find('webpod') end
    same('pod/webpod -n speaks', { change = false, done = done })
    same('pods webpod -n speaks', { change = false, done = done })
    same('pod/webpod pod/dbpod -n speaks', { change = false, done = function(t) return t:find('dbpod') end })
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
    same('configmaps -n speaks', { first = 'settings', change = false, done = done })
    -- Without the server's Table: NAME and AGE.
    local plain = same('configmaps -n speaks --server-print=false', { first = 'settings', change = false, done = done })
    assert.truthy(plain:find('^NAME%s+AGE\nsettings%s'), plain)
    done = function(t) return t:find('plain') end
    local out = same('gizmos -n speaks', { first = 'cog', change = false, done = done })
    assert.truthy(out:find('^NAME%s+SIZE%s+AGE\ncog%s+3%s'), out)
    out = same('gizmos -n speaks -o wide', { first = 'cog', change = false, done = done })
    assert.truthy(out:find('^NAME%s+SIZE%s+COLOUR%s+AGE\n'), out)
  end)

  it('with -o name', function()
    same('pods -n speaks -o name', { done = function(t, name)
      return select(2, t:gsub('pod/' .. name .. '\n', '')) == 2
    end })
  end)

  it('with -o json: indented objects; with --output-watch-events one {"type":...,"object":...} a line', function()
    same('pods -n speaks -o json')
    same('pods -n speaks -o json --output-watch-events')
  end)

  it('with -o yaml: documents separated by ---', function()
    local out = same('pods -n speaks -o yaml')
    assert.truthy(out:find('\n---\napiVersion: v1\n', 1, true), out)
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
    local out = same('configmap tricky -n speaks -o yaml', { first = 'tricky', change = false,
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
    local out = same('configmap fields -n speaks -o yaml --show-managed-fields', { first = 'fields', change = false,
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
      compare('gizmos numbers -n speaks -o ' .. K.quote(format), { 'gizmos', 'numbers', '-n', 'speaks', '-o', format },
        { first = 'numbers', change = false, done = function(t) return t:find('numbers') end })
    end
    case('json')
    case('yaml')
    case('jsonpath={.metadata.name} {.spec.big} {.spec.beyond} {.spec.dec} {.spec.tiny} {.spec.small}|{.spec.list}{"\\n"}')
    case('custom-columns=NAME:.metadata.name,SPEC:.spec,BIG:.spec.big,DEC:.spec.dec,LIST:.spec.list[*],NOTHING:.spec.nothing')
    compare([[pods -n speaks -o 'custom-columns=NAME:.metadata.name,LABELS:.metadata.labels,TOLERATIONS:.spec.tolerations']],
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
    compare('pods webpod -n speaks -o ' .. K.quote(template), { 'pods', 'webpod', '-n', 'speaks', '-o', template },
      { change = false, done = function(t) return t:find('webpod') end })
  end)

  it('with -o jsonpath= and -o custom-columns=', function()
    compare([[pods -n speaks -o 'jsonpath={.metadata.name}={.status.phase}{"\n"}']],
      { 'pods', '-n', 'speaks', '-o', 'jsonpath={.metadata.name}={.status.phase}{"\\n"}' })
    compare([[pods -n speaks -o 'custom-columns=NAME:.metadata.name,PHASE:.status.phase,IMAGES:.spec.containers[*].image']],
      { 'pods', '-n', 'speaks', '-o', 'custom-columns=NAME:.metadata.name,PHASE:.status.phase,IMAGES:.spec.containers[*].image' })
  end)
end)
