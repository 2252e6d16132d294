-- --serialization cbor: informers ask for CBOR (KEP-4222: application/cbor for a LIST,
-- a CBOR Sequence, application/cbor-seq, for a watch) and get exactly what JSON gives:
-- the same handler calls with the same objects, the same cache, across a 410 that
-- arrives as a CBOR ERROR event. The sandbox serves CBOR as kube-apiserver with
-- CBORServingAndStorage does (scripts/sandbox/cbor.py).
local testing = require('klua.testing')
local fixtures = require('support.fixtures')
local K = require('support.klua')
local I = require('support.informer')

local WIDGETS = '/apis/example.com/v1/namespaces/default/widgets'
local CM = '/api/v1/namespaces/default/configmaps'

-- Prints each handler call of two informers as "RESOURCE CALL JSON", and, when
-- the widget "last" is deleted, each cached object as "RESOURCE cache JSON".
local SCRIPT = [[
local function watch(name, inf)
  local function say(how, obj) print(name .. ' ' .. how .. ' ' .. klua.json.encode(obj)) end
  inf:on('add', function(obj, initial) say('add ' .. tostring(initial), obj) end)
  inf:on('update', function(old, new) say('update-old', old); say('update', new) end)
  inf:on('delete', function(obj) say('delete', obj) end)
end
local cms = klua.informer { resource = 'configmaps', namespace = 'default' }
local wds = klua.informer { resource = 'widgets.example.com', namespace = 'default' }
watch('cm', cms)
watch('wd', wds)
klua.on_synced(function() print('synced') end)
wds:on('delete', function(obj)
  if obj.metadata.name ~= 'last' then return end
  for name, inf in pairs { cm = cms, wd = wds } do
    local lines = {}
    for _, o in ipairs(inf:list()) do lines[#lines + 1] = name .. ' cache ' .. klua.json.encode(o) end
    table.sort(lines)
    print(table.concat(lines, '\n'))
  end
  print('done')
end)
]]

-- A widget whose spec holds each kind of JSON value, numbers of each form among them.
local function widget(name, extra)
  return ([[{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"%s","labels":{"app":"web"}},
    "spec":{"count":3,"size":1.5,"ratio":1e-7,"huge":1e21,"neg":-42,"whole":2.0,"big":9007199254740993,
    "on":true,"off":false,"none":null,"list":[1,"two",{"three":3.25}],"empty":{},"nothing":[],
    "text":"\u00e9 \u2713 \"q\" \\ \n\t\u0001 <&>"%s}}]]):format(name, extra or '')
end

-- The lines of p's output, by resource: interleaving between informers is free.
local function by_resource(p)
  local out = { cm = {}, wd = {} }
  for line in p:output():gmatch('[^\n]+') do
    local r = line:match('^(%a+) ')
    if out[r] then table.insert(out[r], line) end
  end
  return out
end

describe('--serialization cbor', function()
  local sb = testing.with_sandbox { each = true }
  local track = K.per_spec()

  local function start(flags)
    local args = { '--kubeconfig', sb.kubeconfig }
    for _, f in ipairs(flags) do args[#args + 1] = f end
    args[#args + 1] = 'run'
    args[#args + 1] = K.script(SCRIPT)
    local p = track(K.spawn(args))
    assert.truthy(p:wait_for('synced', 15 * K.slowdown), p:errors())
    return p
  end

  local function media_types() return sb:stats().media_types or {} end

  -- A configmaps informer of the default namespace asking for CBOR LISTs, with more flags.
  local function cbor_lister(...)
    local flags = { '--serialization', 'cbor', '--watch-list=false', ... }
    return track(I.start(sb, 'configmaps', { namespace = 'default', flags = flags }))
  end

  it('lists and watches in CBOR and hands handlers and the cache exactly what JSON does', function()
    sb:apply(fixtures.WIDGETS_CRD)
    testing.eventually(function() return (sb:request('GET', WIDGETS)) == 200 end, 10, { what = 'the CRD served' })
    sb:kubectl('create configmap listed --from-literal=a=1 --from-literal=b=é')
    assert.equal(201, (sb:request('POST', WIDGETS, widget('listed'))))

    -- LIST then WATCH; the next spec streams the initial state with WatchList.
    local json = start { '--watch-list=false' }
    assert.same({}, media_types(), 'JSON asks for JSON')
    local cbor = start { '--serialization', 'cbor', '--watch-list=false' }
    local served = media_types()
    assert.equal(2, served['application/cbor'], 'a CBOR LIST a resource')
    assert.equal(2, served['application/cbor-seq'], 'a CBOR watch a resource')

    sb:kubectl('create configmap watched --from-literal=c=3')
    assert.equal(201, (sb:request('POST', WIDGETS, widget('watched', ',"bytes":"aGk="'))))
    sb:kubectl('label configmap watched tier=front')
    sb:kubectl('label widget.example.com watched tier=back')
    sb:kubectl('delete configmap listed')
    assert.equal(201, (sb:request('POST', WIDGETS, widget('last'))))
    sb:kubectl('delete widget.example.com last')
    for _, p in ipairs { json, cbor } do assert.truthy(p:wait_for('done', 15 * K.slowdown), p:errors()) end

    local want, got = by_resource(json), by_resource(cbor)
    assert.equal(6, #want.cm, 'two adds, the label (old and new), the delete; and the cache')
    assert.same(want.cm, got.cm)
    assert.same(want.wd, got.wd)
    assert.truthy(got.wd[1]:find('"ratio":1e-07', 1, true) or got.wd[1]:find('"ratio":1e-7', 1, true), got.wd[1])
    assert.truthy(got.wd[1]:find('"size":1.5', 1, true), got.wd[1])
    assert.truthy(got.wd[1]:find('"count":3,', 1, true), got.wd[1])
  end)

  it('streams the initial state in CBOR, reads a 410 that arrives as a CBOR ERROR event, and relists', function()
    sb:kubectl('create configmap before --from-literal=a=1')
    sb:apply(fixtures.WIDGETS_CRD)
    testing.eventually(function() return (sb:request('GET', WIDGETS)) == 200 end, 10, { what = 'the CRD served' })
    local p = start { '--serialization', 'cbor', '-v', '2' }
    assert.equal(2, media_types()['application/cbor-seq'], 'the initial state streamed in CBOR')
    sb:fault { expire_watches = true }
    assert.truthy(p:wait_for('relisting', 10 * K.slowdown, 'err'), p:errors())
    assert.falsy(p:errors():find('not CBOR', 1, true), p:errors())
    sb:kubectl('create configmap after --from-literal=b=2')
    assert.truthy(p:wait_for('cm add false .*"name":"after"', 10 * K.slowdown), p:errors())
    assert.truthy(p:output():find('cm add true {"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"before"', 1, true)
      or p:output():find('"name":"before"', 1, true), p:output())
  end)

  -- A LIST body arrives 256 KiB a read (docs/architecture.md): this one's items are
  -- transcoded as each ends, however the reads cut them.
  it('reads a CBOR LIST larger than one read into the cache the server holds', function()
    local big = ('0123456789abcdef'):rep(700)
    for i = 1, 40 do I.configmap(sb, ('big-%02d'):format(i), { blob = big, n = tostring(i) }) end
    local p = cbor_lister('-v', '2')
    assert.truthy(p:wait_for('LIST page 0: 4%d objects', 10 * K.slowdown, 'err'), p:errors())
    assert.equal(1, media_types()['application/cbor'], 'one LIST, in CBOR')
    local cache, server = I.converge(sb, p, CM)
    assert.equal(server, cache)
  end)

  -- kube-apiserver writes the continue token in the list's metadata in CBOR as in JSON.
  it('pages a CBOR LIST by the continue token of each page', function()
    for i = 1, 7 do I.configmap(sb, 'paged-' .. i) end
    local p = cbor_lister('--page-size', '2', '-v', '2')
    -- The first LIST, at resourceVersion 0, is served whole; the relist after a 410 pages.
    sb:fault { expire_watches = true }
    assert.truthy(p:wait_for('LIST page 3: %d objects', 10 * K.slowdown, 'err'), p:errors())
    assert.truthy(p:errors():find('LIST page 2: 2 objects, resourceVersion %d+, more to come'), p:errors())
    assert.truthy(media_types()['application/cbor'] >= 5, 'each page in CBOR')
    I.configmap(sb, 'paged-after')
    local cache, server = I.converge(sb, p, CM)
    assert.equal(server, cache)
  end)

  it('refuses a CBOR LIST that ends early, naming what is missing, keeps its cache and lists again', function()
    for i = 1, 4 do I.configmap(sb, 'cut-' .. i) end
    local p = cbor_lister()
    sb:fault { list_cut = 1 }
    sb:fault { expire_watches = true }
    assert.truthy(p:wait_for('LIST failed: LIST response ended early: in item %d of its items; the cache is kept',
      10 * K.slowdown, 'err'), p:errors())
    I.configmap(sb, 'cut-after')
    local cache, server = I.converge(sb, p, CM)
    assert.equal(server, cache)
    assert.falsy(p:output():find('delete default/cut', 1, true), 'no object reached the handlers as deleted')
  end)

  it('asks an API server without CBOR for it, and reads the JSON it answers instead', function()
    sb:kubectl('create configmap plain --from-literal=a=1')
    sb:fault { cbor_disabled = true }
    local out = K.run_script_ok([[
      local inf = klua.informer { resource = 'configmaps', namespace = 'default' }
      klua.on_synced(function() print(inf:get('default/plain').data.a); klua.stop() end)
    ]], { kubeconfig = sb.kubeconfig, flags = { '--serialization', 'cbor' } })
    assert.equal('1\n', out)
    assert.same({}, sb:stats().media_types)
  end)

  it('applies to klua watch, whose -o json asks for the objects themselves', function()
    sb:kubectl('create configmap watched --from-literal=a=é')
    local out, err, code = K.run({ '--kubeconfig', sb.kubeconfig, '--serialization', 'cbor', 'watch', 'configmap',
      'watched', '-n', 'default', '-o', 'jsonpath={.data.a}', '--for=jsonpath={.data.a}=é', '--timeout', '20s' })
    assert.equal(0, code, err)
    assert.truthy(out:find('é', 1, true), out)
    assert.truthy((media_types()['application/cbor-seq'] or 0) + (media_types()['application/cbor'] or 0) > 0,
      'klua watch asked for CBOR')
  end)

  it('refuses a value other than json or cbor', function()
    local _, err, code = K.run({ '--serialization', 'yaml', 'version' })
    assert.equal(2, code)
    assert.matches('%-%-serialization must be json or cbor, not "yaml"', err)
  end)
end)
