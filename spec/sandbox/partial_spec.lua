-- Metadata-only answers, as client-go's metadata client and metadata informers ask for them
-- (Accept: application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1 for a list,
-- as=PartialObjectMetadata for a get or a watch): kube-apiserver's
-- endpoints/handlers/response.go keeps each object's whole ObjectMeta and drops the rest.
local sandbox = require('support.sandbox')

local CM = '/api/v1/namespaces/%s/configmaps'
local LIST = 'application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1'
local ONE = 'application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1'

describe('sandbox metadata-only answers', function()
  local sb, ns

  setup(function()
    sb = sandbox.start{ bookmark_interval = 0.5 }
    ns = 'partial'
    sb:kubectl('create namespace ' .. ns)
    for _, name in ipairs({ 'a', 'b' }) do
      assert.equals(201, (sb:json('POST', CM:format(ns), { metadata = { name = name,
        labels = { app = name }, annotations = { note = 'n-' .. name } },
        data = { big = ('x'):rep(1000) } })))
    end
  end)
  teardown(function() sb:stop() end)

  -- A watch of the ConfigMaps of ns from the resourceVersion of their metadata-only
  -- list, sent Accept: accept and the query parameters more, if any (&name=value...);
  -- once it runs, the ConfigMap name (data k=v) is created.
  local function watch_creation(name, accept, more)
    local status, list = sb:json('GET', CM:format(ns), nil, { Accept = LIST })
    assert.equals(200, status)
    local w = sb:watch(CM:format(ns) .. '?watch=1' .. (more or '') .. '&resourceVersion='
      .. list.metadata.resourceVersion, { headers = { Accept = accept } })
    sandbox.create_configmap(sb, ns, name, nil, { k = 'v' })
    return w
  end

  it('lists PartialObjectMetadata items with every metadata field and no data', function()
    local status, list = sb:json('GET', CM:format(ns) .. '?limit=1', nil, { Accept = LIST })
    assert.equals(200, status)
    assert.equals('PartialObjectMetadataList', list.kind)
    assert.equals('meta.k8s.io/v1', list.apiVersion)
    assert.truthy(list.metadata.resourceVersion)
    assert.truthy(list.metadata['continue'], 'paging still works')
    assert.equals(1, list.metadata.remainingItemCount)
    assert.equals(1, #list.items)
    local item = list.items[1]
    assert.same({ 'apiVersion', 'kind', 'metadata' }, (function()
      local keys = {}
      for k in pairs(item) do keys[#keys + 1] = k end
      table.sort(keys)
      return keys
    end)())
    assert.equals('PartialObjectMetadata', item.kind)
    assert.equals('a', item.metadata.name)
    assert.same({ app = 'a' }, item.metadata.labels)
    assert.same({ note = 'n-a' }, item.metadata.annotations)
    assert.truthy(item.metadata.uid and item.metadata.creationTimestamp)
  end)

  it('gets one object as PartialObjectMetadata', function()
    local status, obj = sb:json('GET', CM:format(ns) .. '/b', nil, { Accept = ONE })
    assert.equals(200, status)
    assert.equals('PartialObjectMetadata', obj.kind)
    assert.equals('b', obj.metadata.name)
    assert.is_nil(obj.data)
  end)

  it('refuses the wrong form with 406 NotAcceptable, as kube-apiserver words it', function()
    local status, st = sb:json('GET', CM:format(ns), nil, { Accept = ONE })
    sandbox.failed(status, st, 406, 'NotAcceptable',
      'you requested PartialObjectMetadata, but the requested object is a list '
      .. '(*core.ConfigMapList)')
    status, st = sb:json('GET', CM:format(ns) .. '/a', nil, { Accept = LIST })
    assert.equals(406, status)
    assert.matches('but the requested object is not a list', st.message, 1, true)
    status, st = sb:json('GET', CM:format(ns), nil,
      { Accept = 'application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v2' })
    assert.equals(406, status)
    assert.equals('no PartialObjectMetadataList exists in group version meta.k8s.io/v2', st.message)
  end)

  it('converts every watch event, bookmarks too, and keeps an ERROR Status', function()
    local w = watch_creation('c', ONE, '&allowWatchBookmarks=true')
    local function has(events, etype)
      for _, ev in ipairs(events) do if ev.type == etype then return true end end
    end
    assert.truthy(w.wait_for(function(ev) return has(ev, 'BOOKMARK') end))
    sb:fault{ expire_watches = true }
    assert.truthy(w.wait_for(function(ev) return has(ev, 'ERROR') end))
    w.stop()
    local events = w.events()
    assert.equals('ADDED', events[1].type)
    assert.same({ kind = 'PartialObjectMetadata', apiVersion = 'meta.k8s.io/v1' },
      { kind = events[1].object.kind, apiVersion = events[1].object.apiVersion })
    assert.equals('c', events[1].object.metadata.name)
    assert.is_nil(events[1].object.data)
    assert.equals('BOOKMARK', events[2].type)
    assert.equals('PartialObjectMetadata', events[2].object.kind)
    assert.equals('ERROR', events[#events].type)
    assert.equals('Status', events[#events].object.kind)
    assert.equals(410, events[#events].object.code)
  end)

  it('sends whole objects to a watch that asked for the List form, which it cannot convert',
    function()
      local w = watch_creation('d', LIST)
      assert.truthy(w.wait_for(function(ev) return #ev >= 1 end))
      w.stop()
      local ev = w.events()[1]
      assert.equals('ConfigMap', ev.object.kind)
      assert.same({ k = 'v' }, ev.object.data)
    end)
end)
