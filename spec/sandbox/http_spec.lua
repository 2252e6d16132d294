-- List, watch and write semantics of the sandbox API server over plain HTTP, as the real
-- kube-apiserver defines them: resourceVersion matching, paging, replay, compaction,
-- bookmarks, initial events, selectors on watches, conflicts and Status errors.
local cjson = require('cjson')
local testing = require('klua.testing')
local sandbox = require('support.sandbox')

local function decode_lines(body)
  local out = {}
  for line in body:gmatch('[^\n]+') do out[#out + 1] = cjson.decode(line) end
  return out
end

local function summary(events)
  local out = {}
  for _, e in ipairs(events) do
    out[#out + 1] = e.type .. ' ' .. (e.object.metadata.name or e.object.metadata.resourceVersion)
  end
  return out
end

describe('sandbox API server over HTTP', function()
  local sb = testing.with_sandbox { bookmark_interval = 0.3 }
  -- A fresh namespace per spec keeps specs independent of each other.
  local namespace = sandbox.namespaces(sb, 'http')

  local function create(ns, name, labels, data)
    return sandbox.create_configmap(sb, ns, name, { labels = labels }, data)
  end

  -- A new namespace holding the ConfigMaps PREFIX-1 ... PREFIX-n.
  local function namespace_with(prefix, n)
    local ns = namespace()
    for i = 1, n do create(ns, prefix .. '-' .. i) end
    return ns
  end

  -- The decoded answer to a LIST of the ConfigMaps of ns, with the query given (?...).
  local function list_of(ns, query)
    return select(2, sb:json('GET', sandbox.configmap_path(ns) .. (query or '')))
  end

  local function current_rv()
    return tonumber(sb:stats().resourceVersion)
  end

  describe('list', function()
    it('answers a List kind with the current resourceVersion and items in key order', function()
      local ns = namespace()
      create(ns, 'b'); create(ns, 'a')
      local status, list = sb:json('GET', sandbox.configmap_path(ns))
      assert.equals(200, status)
      assert.equals('ConfigMapList', list.kind)
      assert.equals('v1', list.apiVersion)
      assert.equals(tostring(current_rv()), list.metadata.resourceVersion)
      assert.same({ 'a', 'b' }, { list.items[1].metadata.name, list.items[2].metadata.name })
    end)

    it('pages with limit and continue, counting the remaining items', function()
      local ns = namespace_with('item', 5)
      local page1 = list_of(ns, '?limit=2')
      assert.equals(2, #page1.items)
      assert.equals(3, page1.metadata.remainingItemCount)
      create(ns, 'item-9')
      local page2 = list_of(ns, '?limit=2&continue=' .. page1.metadata.continue)
      assert.same({ 'item-3', 'item-4' },
        { page2.items[1].metadata.name, page2.items[2].metadata.name })
      assert.equals(page1.metadata.resourceVersion, page2.metadata.resourceVersion,
        'every page is a snapshot at the first page\'s resourceVersion')
      local page3 = list_of(ns, '?limit=2&continue=' .. page2.metadata.continue)
      assert.same({ 'item-5' }, { page3.items[1].metadata.name })
      assert.is_nil(page3.metadata.continue)
    end)

    it('serves resourceVersion=0 from the watch cache, ignoring limit', function()
      local ns = namespace_with('any', 4)
      local list = list_of(ns, '?resourceVersion=0&limit=2')
      assert.equals(4, #list.items)
      assert.is_nil(list.metadata.continue)
    end)

    it('serves an Exact list as the objects were at that resourceVersion', function()
      local ns = namespace()
      local old = create(ns, 'exact', nil, { v = 'old' })
      local updated = cjson.decode(cjson.encode(old))
      updated.data.v = 'new'
      assert.equals(200, (sb:json('PUT', sandbox.configmap_path(ns, 'exact'), updated)))
      create(ns, 'later')
      local list = list_of(ns, '?resourceVersionMatch=Exact&resourceVersion=' .. old.metadata.resourceVersion)
      assert.equals(old.metadata.resourceVersion, list.metadata.resourceVersion)
      assert.equals(1, #list.items)
      assert.equals('old', list.items[1].data.v)
    end)

    it('writes the items of a built-in list without kind and apiVersion, as kube-apiserver does', function()
      local ns = namespace()
      create(ns, 'typeless')
      local list = list_of(ns)
      assert.equals('ConfigMapList', list.kind)
      assert.is_nil(list.items[1].kind)
      assert.is_nil(list.items[1].apiVersion)
      local _, obj = sb:json('GET', sandbox.configmap_path(ns, 'typeless'))
      assert.equals('ConfigMap', obj.kind, 'a GET carries them')
      local _, body = sb:request('GET', sandbox.configmap_path(ns) .. '?watch=1&timeoutSeconds=1&resourceVersion=0')
      local event = decode_lines(body)[1]
      assert.equals('ConfigMap', event.object.kind, 'a watch event carries them')
      assert.equals('v1', event.object.apiVersion)
    end)

    it('keeps kind and apiVersion on the items of a custom resource list (unstructured)', function()
      local crd = { apiVersion = 'apiextensions.k8s.io/v1', kind = 'CustomResourceDefinition',
        metadata = { name = 'typed.example.com' },
        spec = { group = 'example.com', scope = 'Namespaced',
          names = { plural = 'typed', singular = 'typed', kind = 'Typed' },
          versions = { { name = 'v1', served = true, storage = true,
            schema = { openAPIV3Schema = { type = 'object' } } } } } }
      assert.equals(201, (sb:json('POST', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions', crd)))
      local path = '/apis/example.com/v1/namespaces/default/typed'
      -- A new resource's watch cache fills first: kube-apiserver answers what it would
      -- serve from it with 429 "storage is (re)initializing" and Retry-After: 1.
      local status, body, headers = sb:request('GET', path .. '?watch=1')
      assert.equals(429, status)
      assert.equals('storage is (re)initializing', cjson.decode(body).message)
      assert.equals('1', headers['retry-after'])
      assert.equals(201, (sb:json('POST', path, { apiVersion = 'example.com/v1', kind = 'Typed',
        metadata = { name = 'one' } })))
      assert.equals(200, (sb:json('GET', path .. '?limit=10')), 'storage serves a paged list meanwhile')
      local list = testing.poll(function()
        local code, l = sb:json('GET', path)
        return code == 200 and l
      end, 10)
      assert.equals('TypedList', list.kind)
      assert.equals('Typed', list.items[1].kind)
      assert.equals('example.com/v1', list.items[1].apiVersion)
      local _, crds = sb:json('GET', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions')
      assert.is_nil(crds.items[1].kind, 'CRDs themselves are a built-in kind')
    end)

    it('answers 504 Timeout for a resourceVersion the server has not reached', function()
      local future = current_rv() + 100
      local status, body = sb:json('GET', sandbox.configmap_path('default') .. '?resourceVersion=' .. future)
      sandbox.failed(status, body, 504, 'Timeout')
      assert.matches('^Timeout: Too large resource version: ' .. future, body.message)
      assert.equals('ResourceVersionTooLarge', body.details.causes[1].reason)
    end)

    it('refuses resourceVersionMatch without a resourceVersion with 422 Invalid', function()
      local status, body = sb:json('GET', sandbox.configmap_path('default') .. '?resourceVersionMatch=NotOlderThan')
      sandbox.failed(status, body, 422, 'Invalid')
      assert.equals('resourceVersionMatch', body.details.causes[1].field)
    end)
  end)

  describe('watch', function()
    it('replays every event after a resourceVersion in order, then ends at timeoutSeconds', function()
      local ns = namespace()
      local start = current_rv()
      local obj = create(ns, 'replayed')
      obj.data = { k = 'v' }
      sb:json('PUT', sandbox.configmap_path(ns, 'replayed'), obj)
      sb:request('DELETE', sandbox.configmap_path(ns, 'replayed'))
      local status, body, headers = sb:request('GET', sandbox.configmap_path(ns)
        .. '?watch=true&timeoutSeconds=1&resourceVersion=' .. start)
      assert.equals(200, status)
      assert.equals('chunked', headers['transfer-encoding'])
      local events = decode_lines(body)
      assert.same({ 'ADDED replayed', 'MODIFIED replayed', 'DELETED replayed' }, summary(events))
      for i = 2, 3 do
        assert.is_true(tonumber(events[i].object.metadata.resourceVersion)
          > tonumber(events[i - 1].object.metadata.resourceVersion))
      end
    end)

    it('starts with the current state as ADDED events when watching from resourceVersion 0', function()
      local ns = namespace()
      create(ns, 'present')
      local w = sb:watch(sandbox.configmap_path(ns) .. '?watch=1&resourceVersion=0')
      create(ns, 'arriving')
      assert.truthy(w.wait_for(function(ev) return #ev >= 2 end))
      w.stop()
      assert.same({ 'ADDED present', 'ADDED arriving' }, summary(w.events()))
    end)

    it('ends cleanly at timeoutSeconds', function()
      local w = sb:watch(sandbox.configmap_path('default') .. '?watch=1&timeoutSeconds=1&resourceVersion='
        .. current_rv())
      assert.equals(0, w.finished(5), 'curl saw a complete chunked response')
    end)

    it('sends periodic bookmarks carrying the current resourceVersion when allowed', function()
      local rv = current_rv()
      local _, body = sb:request('GET', sandbox.configmap_path('default')
        .. '?watch=1&allowWatchBookmarks=true&timeoutSeconds=1&resourceVersion=' .. rv)
      local events = decode_lines(body)
      assert.is_true(#events >= 2)
      for _, e in ipairs(events) do
        assert.equals('BOOKMARK', e.type)
        assert.equals('ConfigMap', e.object.kind)
        assert.equals(tostring(rv), e.object.metadata.resourceVersion)
      end
      _, body = sb:request('GET', sandbox.configmap_path('default')
        .. '?watch=1&timeoutSeconds=1&resourceVersion=' .. rv)
      assert.equals('', body, 'no bookmarks unless allowWatchBookmarks=true')
    end)

    it('sends initial events, then a bookmark marking their end, then live events', function()
      local ns = namespace()
      create(ns, 'first'); create(ns, 'second')
      local w = sb:watch(sandbox.configmap_path(ns) .. '?watch=1&sendInitialEvents=true'
        .. '&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true')
      create(ns, 'third')
      assert.truthy(w.wait_for(function(ev) return #ev >= 4 end))
      w.stop()
      local events = w.events()
      assert.same({ 'ADDED first', 'ADDED second' }, summary({ events[1], events[2] }))
      assert.equals('BOOKMARK', events[3].type)
      assert.equals('true', events[3].object.metadata.annotations['k8s.io/initial-events-end'])
      assert.same({ 'ADDED third' }, summary({ events[4] }))
    end)

    it('refuses sendInitialEvents without resourceVersionMatch=NotOlderThan with 422', function()
      local status, body = sb:json('GET', sandbox.configmap_path('default') .. '?watch=1&sendInitialEvents=true')
      assert.equals(422, status)
      assert.matches('sendInitialEvents requires setting resourceVersionMatch to NotOlderThan',
        body.message, 1, true)
    end)

    it('filters by label, sending DELETED when an object stops matching', function()
      local ns = namespace()
      local w = sb:watch(sandbox.configmap_path(ns) .. '?watch=1&labelSelector=app%3Dweb&resourceVersion='
        .. current_rv())
      create(ns, 'match', { app = 'web' })
      create(ns, 'other', { app = 'db' })
      local patch = { ['Content-Type'] = 'application/merge-patch+json' }
      sb:json('PATCH', sandbox.configmap_path(ns, 'match'), { metadata = { labels = { app = 'db' } } }, patch)
      sb:json('PATCH', sandbox.configmap_path(ns, 'other'), { metadata = { labels = { app = 'web' } } }, patch)
      assert.truthy(w.wait_for(function(ev) return #ev >= 3 end))
      w.stop()
      local events = w.events()
      assert.same({ 'ADDED match', 'DELETED match', 'ADDED other' }, summary(events))
      assert.equals('web', events[2].object.metadata.labels.app,
        'the DELETED event carries the last state that matched')
    end)

    it('reads boolean parameters as apimachinery does: present and not false or 0 is true', function()
      for _, q in ipairs({ 'watch=', 'watch=True', 'watch=yes' }) do
        local _, body = sb:request('GET', sandbox.configmap_path('default') .. '?' .. q .. '&timeoutSeconds=1&resourceVersion=0')
        assert.is_nil(body:match('"kind":"ConfigMapList"'), q .. ' watches')
      end
      for _, q in ipairs({ 'watch=false', 'watch=0', 'watch=FALSE' }) do
        local _, body = sb:request('GET', sandbox.configmap_path('default') .. '?' .. q)
        assert.truthy(body:match('"kind":"ConfigMapList"'), q .. ' lists')
      end
    end)

    it('forgets a watch whose client hung up', function()
      -- Secrets, which no other spec here watches: the configmap watches the specs before
      -- stopped may still be open until the server notices that their clients went away.
      local function open() return sb:stats().watches.secrets or 0 end
      testing.eventually(function() return open() == 0 end, 5)
      local w = sb:watch('/api/v1/namespaces/default/secrets?watch=1&resourceVersion='
        .. current_rv())
      testing.eventually(function() return open() == 1 end, 5)
      w.stop()
      testing.eventually(function() return open() == 0 end, 5)
    end)

    it('filters by field selector, as kubectl get NAME -w does', function()
      local ns = namespace()
      local w = sb:watch(sandbox.configmap_path(ns)
        .. '?watch=1&fieldSelector=metadata.name%3Dpicked&resourceVersion=' .. current_rv())
      create(ns, 'ignored'); create(ns, 'picked')
      assert.truthy(w.wait_for(function(ev) return #ev >= 1 end))
      w.stop()
      assert.same({ 'ADDED picked' }, summary(w.events()))
    end)
  end)

  describe('history window', function()
    local small = testing.with_sandbox { history = 3, storage_history = 3 }


    it('expires a watch from before the window with one ERROR 410 event', function()
      local start = tonumber(small:stats().resourceVersion)
      for i = 1, 5 do small:json('POST', sandbox.configmap_path('default'), { metadata = { name = 'h' .. i } }) end
      local status, body = small:request('GET', sandbox.configmap_path('default')
        .. '?watch=1&resourceVersion=' .. start)
      assert.equals(200, status)
      local events = decode_lines(body)
      assert.equals(1, #events)
      assert.equals('ERROR', events[1].type)
      assert.equals('Status', events[1].object.kind)
      assert.equals(410, events[1].object.code)
      assert.equals('Expired', events[1].object.reason)
      local oldest = small:stats().watchCacheResourceVersion
      assert.equals(('too old resource version: %d (%s)'):format(start, oldest),
        events[1].object.message)
    end)

    it('still replays from inside the window', function()
      local rv = tonumber(small:stats().resourceVersion)
      small:json('POST', sandbox.configmap_path('default'), { metadata = { name = 'inside' } })
      local _, body = small:request('GET', sandbox.configmap_path('default')
        .. '?watch=1&timeoutSeconds=1&resourceVersion=' .. rv)
      assert.same({ 'ADDED inside' }, summary(decode_lines(body)))
    end)

    it('expires Exact lists and continue tokens from before storage\'s history with 410', function()
      for i = 1, 3 do
        small:json('POST', sandbox.configmap_path('kube-public'), { metadata = { name = 'p' .. i } })
      end
      local _, page = small:json('GET', sandbox.configmap_path('kube-public') .. '?limit=1')
      for i = 1, 4 do small:json('POST', sandbox.configmap_path('default'), { metadata = { name = 'x' .. i } }) end
      local status, body = small:json('GET', sandbox.configmap_path('kube-public')
        .. '?limit=1&continue=' .. page.metadata.continue)
      sandbox.failed(status, body, 410, 'Expired',
        'The provided continue parameter is too old to display a consistent list result. '
        .. 'You can start a new list without the continue parameter.')
      status, body = small:json('GET', sandbox.configmap_path('kube-public')
        .. '?resourceVersionMatch=Exact&resourceVersion=' .. page.metadata.resourceVersion)
      assert.equals(410, status)
      assert.matches('^too old resource version', body.message)
    end)
  end)

  -- kube-apiserver keeps two histories: etcd's, until compaction (every few minutes), and
  -- the watch cache's, a window of recent events that a restart empties. Unpaged lists
  -- at a resourceVersion come from the watch cache "not older than" it; Exact lists,
  -- lists with a limit at a resourceVersion other than 0, and continue tokens come from
  -- etcd as the snapshot at that revision (cacher.go shouldDelegateList, 1.32).
  describe('watch cache and storage', function()
    local two = testing.with_sandbox { each = true, history = 2 }

    local function put(name, v)
      local path = sandbox.configmap_path('default') .. '/' .. name
      local status, obj = two:json('GET', path)
      if status == 404 then
        status, obj = two:json('POST', sandbox.configmap_path('default'), { metadata = { name = name }, data = { v = v } })
        assert.equals(201, status)
        return obj.metadata.resourceVersion
      end
      obj.data = { v = v }
      status, obj = two:json('PUT', path, obj)
      assert.equals(200, status)
      return obj.metadata.resourceVersion
    end

    local function values(list)
      local out = {}
      for _, item in ipairs(list.items) do out[#out + 1] = item.metadata.name .. '=' .. item.data.v end
      return table.concat(out, ' ')
    end

    it('serves Exact and paged lists from storage once the watch cache has moved on', function()
      local old = put('a', 'old')
      for i = 1, 4 do put('b' .. i, 'x') end
      put('a', 'new')
      local _, body = two:request('GET', sandbox.configmap_path('default') .. '?watch=1&resourceVersion=' .. old)
      assert.equals(410, decode_lines(body)[1].object.code, 'the watch cache no longer holds it')
      local _, exact = two:json('GET', sandbox.configmap_path('default') .. '?resourceVersionMatch=Exact&resourceVersion=' .. old)
      assert.equals('a=old', values(exact))
      local _, paged = two:json('GET', sandbox.configmap_path('default') .. '?limit=500&resourceVersion=' .. old)
      assert.equals('a=old', values(paged))
      assert.equals(old, paged.metadata.resourceVersion)
      local _, unpaged = two:json('GET', sandbox.configmap_path('default') .. '?resourceVersion=' .. old)
      assert.equals('a=new b1=x b2=x b3=x b4=x', values(unpaged), 'not older than: the current state')
      assert.equals(two:stats().resourceVersion, unpaged.metadata.resourceVersion)
    end)

    it('empties the watch cache on a restart and keeps storage\'s history', function()
      local old = put('a', 'old')
      put('a', 'new')
      two:restart()
      local _, body = two:request('GET', sandbox.configmap_path('default') .. '?watch=1&resourceVersion=' .. old)
      assert.equals(410, decode_lines(body)[1].object.code)
      local _, paged = two:json('GET', sandbox.configmap_path('default') .. '?limit=500&resourceVersion=' .. old)
      assert.equals('a=old', values(paged), 'etcd still has the revision')
      local _, unpaged = two:json('GET', sandbox.configmap_path('default') .. '?resourceVersion=' .. old)
      assert.equals('a=new', values(unpaged))
      local now = two:stats().resourceVersion
      assert.equals(now, two:stats().watchCacheResourceVersion)
      local w = two:watch(sandbox.configmap_path('default') .. '?watch=1&resourceVersion=' .. now)
      put('c', 'after')
      assert.truthy(w.wait_for(function(ev) return #ev >= 1 end))
      w.stop()
      assert.same({ 'ADDED c' }, summary(w.events()), 'a watch from the restart on works')
    end)
  end)

  describe('writes', function()
    -- sigs.k8s.io/json decodes a number into an int64 when it fits, else a
    -- float64; a custom resource keeps them so and encoding/json writes the
    -- float64 back (docs/sandbox.md), whether it came as JSON, as an apply
    -- patch's YAML or in a merge patch.
    it('keeps a custom resource\'s numbers as int64 or float64 and writes them as Go does', function()
      local crd = { apiVersion = 'apiextensions.k8s.io/v1', kind = 'CustomResourceDefinition',
        metadata = { name = 'numbered.example.com' },
        spec = { group = 'example.com', scope = 'Namespaced',
          names = { plural = 'numbered', singular = 'numbered', kind = 'Numbered' },
          versions = { { name = 'v1', served = true, storage = true, schema = { openAPIV3Schema = {
            type = 'object', ['x-kubernetes-preserve-unknown-fields'] = true } } } } } }
      assert.equals(201, (sb:json('POST', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions', crd)))
      local path = '/apis/example.com/v1/namespaces/default/numbered'
      local status, text = sb:request('POST', path, '{"apiVersion":"example.com/v1","kind":"Numbered",'
        .. '"metadata":{"name":"n"},"spec":{"big":12345678901234567890,"beyond":18446744073709551615,'
        .. '"under":-9223372036854775809,"max":9223372036854775807,"dec":123456789.123,"one":1.0,"e3":1e3,'
        .. '"tiny":1e-07,"small":1.5e-05,"huge":1e21,"hundred":1e20,"wide":123456789012345678901234567890}}')
      assert.equals(201, status, text)
      local want = '"spec":{"big":12345678901234567000,"beyond":18446744073709552000,"under":-9223372036854776000,'
        .. '"max":9223372036854775807,"dec":123456789.123,"one":1,"e3":1000,"tiny":1e-7,"small":0.000015,'
        .. '"huge":1e+21,"hundred":100000000000000000000,"wide":1.2345678901234568e+29}'
      assert.truthy(text:find(want, 1, true), text)
      status, text = sb:request('GET', path .. '/n')
      assert.truthy(text:find(want, 1, true), text)
      status, text = sb:request('PATCH', path .. '/n', '{"spec":{"patched":2.50,"whole":4.0}}',
        { ['Content-Type'] = 'application/merge-patch+json' })
      assert.equals(200, status, text)
      assert.truthy(text:find('"patched":2.5,"whole":4}', 1, true), text)
      status, text = sb:request('PATCH', path .. '/a?fieldManager=m',
        'apiVersion: example.com/v1\nkind: Numbered\nmetadata: {name: a}\nspec: {big: 12345678901234567890, one: 1.0}\n',
        { ['Content-Type'] = 'application/apply-patch+yaml' })
      assert.equals(201, status, text)
      assert.truthy(text:find('"spec":{"big":12345678901234567000,"one":1}', 1, true), text)
    end)

    it('answers a stale update with 409 Conflict', function()
      local ns = namespace()
      local obj = create(ns, 'contended')
      local fresh = cjson.decode(cjson.encode(obj))
      fresh.data = { winner = 'first' }
      assert.equals(200, (sb:json('PUT', sandbox.configmap_path(ns, 'contended'), fresh)))
      obj.data = { winner = 'second' }
      local status, body = sb:json('PUT', sandbox.configmap_path(ns, 'contended'), obj)
      assert.equals(409, status)
      assert.same({ kind = 'Status', apiVersion = 'v1', metadata = {}, status = 'Failure',
        message = 'Operation cannot be fulfilled on configmaps "contended": the object has been '
          .. 'modified; please apply your changes to the latest version and try again',
        reason = 'Conflict', details = { name = 'contended', kind = 'configmaps' }, code = 409 }, body)
    end)

    it('bumps generation only when the spec changes', function()
      local ns = namespace()
      local path = '/apis/apps/v1/namespaces/' .. ns .. '/deployments'
      local status, d = sb:json('POST', path, { metadata = { name = 'gen' },
        spec = { selector = { matchLabels = { a = 'b' } },
          template = { metadata = { labels = { a = 'b' } },
            spec = { containers = { { name = 'web', image = 'nginx' } } } } } })
      assert.equals(201, status)
      assert.equals(1, d.metadata.generation)
      d.metadata.labels = { touched = 'yes' }
      _, d = sb:json('PUT', path .. '/gen', d)
      assert.equals(1, d.metadata.generation)
      d.spec.replicas = 4
      _, d = sb:json('PUT', path .. '/gen', d)
      assert.equals(2, d.metadata.generation)
    end)

    it('names a generated object from generateName', function()
      local status, obj = sb:json('POST', sandbox.configmap_path('default'),
        { metadata = { generateName = 'gen-' } })
      assert.equals(201, status)
      assert.matches('^gen%-%w%w%w%w%w$', obj.metadata.name)
    end)

    it('checks delete preconditions and answers 404 for what is missing', function()
      local ns = namespace()
      create(ns, 'precious')
      local status, body = sb:json('DELETE', sandbox.configmap_path(ns, 'precious'),
        { preconditions = { resourceVersion = '1' } })
      assert.equals(409, status)
      assert.matches('Precondition failed', body.message)
      status, body = sb:json('DELETE', sandbox.configmap_path(ns, 'precious'),
        { propagationPolicy = 'Background' })
      assert.equals(200, status)
      assert.equals('Success', body.status)
      status, body = sb:json('DELETE', sandbox.configmap_path(ns, 'precious'))
      assert.equals(404, status)
      assert.same({ name = 'precious', kind = 'configmaps' }, body.details)
      assert.equals('configmaps "precious" not found', body.message)
    end)

    it('refuses an invalid name with 422 Invalid and its field cause', function()
      local status, body = sb:json('POST', sandbox.configmap_path('default'), { metadata = { name = 'Not_Valid' } })
      sandbox.failed(status, body, 422, 'Invalid')
      assert.equals('ConfigMap', body.details.kind)
      assert.equals('metadata.name', body.details.causes[1].field)
      assert.matches('^ConfigMap "Not_Valid" is invalid: metadata.name: Invalid value', body.message)
    end)

    it('answers 400 BadRequest for a namespace that contradicts the URL', function()
      local status, body = sb:json('POST', sandbox.configmap_path('default'),
        { metadata = { name = 'x', namespace = 'kube-system' } })
      sandbox.failed(status, body, 400, 'BadRequest',
        'the namespace of the provided object does not match the namespace sent on '
        .. 'the request')
    end)

    it('answers 405 MethodNotAllowed for a verb the path does not serve', function()
      local status, body = sb:json('POST', sandbox.configmap_path('default', 'named'), {})
      sandbox.failed(status, body, 405, 'MethodNotAllowed')
    end)

    it('answers 415 for a patch type the resource does not accept', function()
      local status, body = sb:json('PATCH', sandbox.configmap_path('default', 'any'), {},
        { ['Content-Type'] = 'application/x-yaml' })
      sandbox.failed(status, body, 415, 'UnsupportedMediaType')
    end)

    it('keeps the default namespace from being deleted', function()
      local status, body = sb:json('DELETE', '/api/v1/namespaces/default')
      assert.equals(403, status)
      assert.equals('namespaces "default" is forbidden: this namespace may not be deleted',
        body.message)
    end)

    -- pkg/registry/core/namespace/storage Delete marks the namespace Terminating and answers
    -- with it; the namespace controller then deletes its objects and finalizes it.
    it('deletes the objects of a namespace, then the namespace, Terminating meanwhile', function()
      local ns = namespace()
      create(ns, 'doomed')
      local status, body = sb:json('DELETE', '/api/v1/namespaces/' .. ns)
      assert.equals(200, status)
      assert.equals('Namespace', body.kind)
      assert.equals('Terminating', body.status.phase)
      assert.truthy(body.metadata.deletionTimestamp)
      assert.truthy(testing.poll(function()
        return sb:json('GET', '/api/v1/namespaces/' .. ns) == 404
      end))
      assert.equals(404, (sb:json('GET', sandbox.configmap_path(ns, 'doomed'))))
    end)
  end)
  describe('compression and warnings', function()
    it('gzips an answer over 128 KiB when the request accepts gzip, as kube-apiserver', function()
      local ns = namespace()
      create(ns, 'small', nil, { a = 'b' })
      create(ns, 'big', nil, { blob = ('x'):rep(130 * 1024) })
      local gzip = { ['Accept-Encoding'] = 'deflate, gzip;q=1.0' }
      local before = sb:stats().encodings.gzip or 0
      local status, _, headers = sb:request('GET', sandbox.configmap_path(ns, 'small'), nil, gzip)
      assert.equals(200, status)
      assert.is_nil(headers['content-encoding'])
      status, _, headers = sb:request('GET', sandbox.configmap_path(ns, 'big'))
      assert.equals(200, status)
      assert.is_nil(headers['content-encoding'])
      local body
      status, body, headers = sb:request('GET', sandbox.configmap_path(ns, 'big'), nil, gzip)
      assert.equals(200, status)
      assert.equals('gzip', headers['content-encoding'])
      assert.equals('\31\139', body:sub(1, 2))
      assert.equals(before + 1, sb:stats().encodings.gzip)
    end)

    it("warns on every request to a deprecated CRD version, with apiextensions-apiserver's text", function()
      local function crd(plural, kind, versions)
        return { apiVersion = 'apiextensions.k8s.io/v1', kind = 'CustomResourceDefinition',
          metadata = { name = plural .. '.example.com' },
          spec = { group = 'example.com', scope = 'Namespaced',
            names = { plural = plural, singular = kind:lower(), kind = kind }, versions = versions } }
      end
      local schema = { openAPIV3Schema = { type = 'object', ['x-kubernetes-preserve-unknown-fields'] = true } }
      local function version(name, extra)
        local v = { name = name, served = true, storage = name == 'v1', schema = schema }
        for k, x in pairs(extra or {}) do v[k] = x end
        return v
      end
      assert.equals(201, (sb:json('POST', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions',
        crd('olds', 'Old', { version('v1alpha1', { deprecated = true }), version('v1beta1', { deprecated = true,
          deprecationWarning = 'use v1, really' }), version('v1') }))))
      local ns = namespace()
      local path = '/apis/example.com/%s/namespaces/' .. ns .. '/olds'
      testing.eventually(function() return sb:request('GET', path:format('v1alpha1')) == 200 end, 10,
        { what = 'the CRD served' })
      local status, _, headers = sb:request('GET', path:format('v1alpha1'))
      assert.equals(200, status)
      assert.equals('299 - "example.com/v1alpha1 Old is deprecated; use example.com/v1 Old"', headers.warning)
      status, _, headers = sb:request('GET', path:format('v1alpha1') .. '/missing')
      assert.equals(404, status)
      assert.equals('299 - "example.com/v1alpha1 Old is deprecated; use example.com/v1 Old"', headers.warning)
      status, _, headers = sb:request('GET', path:format('v1beta1') .. '?watch=1&timeoutSeconds=1')
      assert.equals(200, status)
      assert.equals('299 - "use v1, really"', headers.warning)
      status, _, headers = sb:request('GET', path:format('v1'))
      assert.equals(200, status)
      assert.is_nil(headers.warning)
    end)
  end)
end)
