-- Table output: kubectl get asks for Accept: application/json;as=Table;g=meta.k8s.io;v=v1
-- and prints the server's columns (pkg/printers/internalversion/printers.go for built-in
-- kinds, a CRD's additionalPrinterColumns for custom resources), so plain `kubectl get`
-- and `kubectl get -w` against the sandbox look as they do against a cluster.
local testing = require('klua.testing')
local fixtures = require('support.fixtures')
local K = require('support.klua')
local sandbox = require('support.sandbox')

local TABLE = 'application/json;as=Table;v=v1;g=meta.k8s.io,application/json'

-- Its table columns are Size and, with -o wide, Colour.
local CRD = fixtures.GADGETS_CRD

describe('sandbox Table output', function()
  local sb = testing.with_sandbox { args = { '--nodes', '1' } }

  setup(function()
    local _, ok, err = sb:try_kubectl('run web --image=nginx')
    assert(ok, err)
    _, ok, err = sb:try_kubectl('create configmap settings --from-literal=a=1 --from-literal=b=2')
    assert(ok, err)
    assert(testing.poll(function()
      return sb:kubectl_json('get pod web').status.phase == 'Running'
    end, 10))
  end)

  it('answers a list with a meta.k8s.io/v1 Table whose rows carry PartialObjectMetadata', function()
    local status, body = sb:json('GET', '/api/v1/namespaces/default/configmaps', nil, { Accept = TABLE })
    assert.equals(200, status)
    assert.same({ 'Table', 'meta.k8s.io/v1' }, { body.kind, body.apiVersion })
    local names = {}
    for i, c in ipairs(body.columnDefinitions) do names[i] = c.name end
    assert.same({ 'Name', 'Data', 'Age' }, names)
    assert.same({ 'settings', 2 }, { body.rows[1].cells[1], body.rows[1].cells[2] })
    assert.equals('PartialObjectMetadata', body.rows[1].object.kind)
    assert.equals('settings', body.rows[1].object.metadata.name)
  end)

  it('carries the whole object, with kind and apiVersion, in rows asked for with includeObject=Object', function()
    -- kube-apiserver's asTable converts each row's object to the request's version, so it
    -- has its type even though a built-in list's items do not: kubectl --sort-by decodes it.
    local status, body = sb:json('GET', '/api/v1/namespaces/default/configmaps?includeObject=Object',
      nil, { Accept = TABLE })
    assert.equals(200, status)
    local obj = body.rows[1].object
    assert.same({ 'ConfigMap', 'v1', 'settings', '1' }, { obj.kind, obj.apiVersion, obj.metadata.name, obj.data.a })
    sb:kubectl('create configmap aaa-first')
    local out = K.rows(sb:kubectl('get configmaps --sort-by=.metadata.name'))
    sb:kubectl('delete configmap aaa-first')
    assert.equals('NAME DATA AGE', out[1])
    assert.matches('^aaa%-first 0 %d+s$', out[2])
  end)

  -- kubectl ARGS prints the header (its words) and a first row that matches row.
  local function prints(args, header, row)
    local out = K.rows(assert(sb:try_kubectl(args)))
    assert.equals(header, out[1])
    assert.matches(row, out[2])
  end

  it('prints pods with READY STATUS RESTARTS AGE, and the wide columns', function()
    prints('get pods', 'NAME READY STATUS RESTARTS AGE', '^web 1/1 Running 0 %d+s$')
    prints('get pods -o wide', 'NAME READY STATUS RESTARTS AGE IP NODE NOMINATED NODE READINESS GATES',
      '^web 1/1 Running 0 %d+s 10%.244%.%d+%.%d+ sandbox%-node%-1 <none> <none>$')
  end)

  it('prints configmaps with NAME DATA AGE', function()
    prints('get configmap settings', 'NAME DATA AGE', '^settings 2 %d+s$')
  end)

  it('prints deployments and services with their printers\' columns', function()
    assert(select(2, sb:try_kubectl('create deployment front --image=nginx:1.27 --replicas=2')))
    assert(select(2, sb:try_kubectl('create service clusterip front --tcp=80:8080')))
    prints('get deployment front -o wide', 'NAME READY UP-TO-DATE AVAILABLE AGE CONTAINERS IMAGES SELECTOR',
      '^front 0/2 0 0 %d+s nginx nginx:1%.27 app=front$')
    prints('get service front', 'NAME TYPE CLUSTER-IP EXTERNAL-IP PORT(S) AGE',
      '^front ClusterIP 10%.96%.%d+%.%d+ <none> 80/TCP %d+s$')
  end)

  it('prints a custom resource with its additionalPrinterColumns', function()
    local _, ok, err = sb:try_kubectl('apply -f -', CRD)
    assert(ok, err)
    assert(testing.poll(function() return select(2, sb:try_kubectl('get gadgets')) end, 10))
    _, ok, err = sb:try_kubectl('apply -f -', 'apiVersion: example.com/v1\nkind: Gadget\n'
      .. 'metadata: {name: g1}\nspec: {size: 3, colour: red}\n')
    assert(ok, err)
    assert.same({ 'NAME SIZE', 'g1 3' }, K.rows(assert(sb:try_kubectl('get gadgets'))))
    assert.same({ 'NAME SIZE COLOUR', 'g1 3 red' }, K.rows(assert(sb:try_kubectl('get gadgets -o wide'))))
  end)

  -- kube-apiserver 1.32 and 1.33 negotiate a watch-list request's Accept header with
  -- watchListEndpointRestrictions (endpoints/handlers/get.go), which refuses the Table
  -- form: the next clause wins (plain objects), or, with none, 406.
  it('refuses the Table form to a watch-list request: plain objects, or 406 without another form', function()
    local path = '/api/v1/namespaces/default/configmaps?watch=1&sendInitialEvents=true'
      .. '&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&fieldSelector=metadata.name%3Dsettings'
    local status, st = sb:json('GET', path, nil, { Accept = 'application/json;as=Table;v=v1;g=meta.k8s.io' })
    sandbox.failed(status, st, 406, 'NotAcceptable',
      'only the following media types are accepted: application/json, application/yaml, '
      .. 'application/vnd.kubernetes.protobuf')
    local w = sb:watch(path, { headers = { Accept = TABLE } })
    assert.truthy(w.wait_for(function(ev) return #ev >= 2 end))
    w.stop()
    local events = w.events()
    assert.same({ 'ADDED', 'ConfigMap', 'settings' },
      { events[1].type, events[1].object.kind, events[1].object.metadata.name })
    assert.same({ 'BOOKMARK', 'ConfigMap', 'true' }, { events[2].type, events[2].object.kind,
      events[2].object.metadata.annotations['k8s.io/initial-events-end'] })
    -- Without sendInitialEvents it is a watch like any other, in the Table form.
    w = sb:watch('/api/v1/namespaces/default/configmaps?watch=1&fieldSelector=metadata.name%3Dsettings',
      { headers = { Accept = TABLE } })
    assert.truthy(w.wait_for(function(ev) return #ev >= 1 end))
    w.stop()
    assert.equals('Table', w.events()[1].object.kind)
  end)

  it('streams Table rows to kubectl get -w', function()
    local out = sb:tmpfile('watch')
    os.execute(sb:kubectl_command('get configmaps -w') .. ' > ' .. out .. ' 2>&1 & echo $! > ' .. out .. '.pid')
    local function text()
      local f = io.open(out, 'rb'); local t = f and f:read('a') or ''; if f then f:close() end
      return t
    end
    assert.truthy(testing.poll(function() return text():find('settings') end, 10))
    assert(select(2, sb:try_kubectl('create configmap later --from-literal=x=1')))
    assert.truthy(testing.poll(function() return text():find('later') end, 10))
    local f = io.open(out .. '.pid'); os.execute('kill ' .. f:read('a')); f:close()
    local rows = K.rows(text())
    assert.equals('NAME DATA AGE', rows[1])
    assert.matches('^later 1 %d+s$', rows[#rows])
  end)
end)
