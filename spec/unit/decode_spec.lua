-- The decoder turns each watch frame into an event with one parse: its
-- type, the object's identity, and the exact byte span of the object in the
-- frame, which the store keeps as the object's storage. LIST bodies become
-- items, each copied into its own buffer.
local testing = require('klua_testing')
local reference = require('fixtures.json.reference')

local function frame(type_, object) return '{"type":"' .. type_ .. '","object":' .. object .. '}' end

-- The event of a frame of type_ and object, decoded (as of kind, if given): it must decode.
local function event(type_, object, kind) return assert(testing.decode_event(frame(type_, object), kind)) end

local pod = reference.fixture('pod.json')

describe('decoding a watch event', function()
  for _, type_ in ipairs { 'ADDED', 'MODIFIED', 'DELETED' } do
    it('reads a ' .. type_ .. ' event: type, identity and the exact object bytes', function()
      local ev = event(type_, pod, 'Pod')
      assert.equals(type_, ev.type)
      assert.equals('default', ev.ns)
      assert.equals('auth-b4ec5339db-0cc23', ev.name)
      assert.equals('1000000', ev.rv)
      assert.equals(pod, ev.object_json)
    end)
  end

  it('gives a cluster-scoped object an empty namespace', function()
    local ev = event('ADDED', '{"kind":"Node","metadata":{"name":"n1","resourceVersion":"9"}}')
    assert.equals('', ev.ns)
    assert.equals('n1', ev.name)
    assert.equals('9', ev.rv)
  end)

  it('gives an empty resourceVersion when the object has none', function()
    local ev = event('ADDED', '{"metadata":{"name":"x"}}')
    assert.equals('', ev.rv)
  end)

  it('finds the object span wherever the object sits in the frame and whatever surrounds it', function()
    local obj = '{"metadata":{"name":"p","namespace":"d","annotations":{"tricky":"}\\"{ ]\\\\"}}}'
    for _, f in ipairs {
      '{"object":' .. obj .. ',"type":"ADDED"}',
      '{ "type" : "ADDED" , "object" : ' .. obj .. ' }',
      '{"type":"ADDED","object":' .. obj .. '}  ',
      '{"type":"ADDED","object":' .. obj .. ',"extra":[1,{"a":"}"}]}',
      '\t{"type":"ADDED",\n"object":\n' .. obj .. '\n}\n',
    } do
      local ev = assert(testing.decode_event(f))
      assert.equals(obj, ev.object_json)
      assert.equals('p', ev.name)
    end
  end)

  it('finds the object span of every fixture, escapes and big numbers included', function()
    for _, name in ipairs(reference.objects) do
      local text = reference.fixture(name)
      local ev = assert(testing.decode_event('{"type":"MODIFIED","object":' .. text .. ',"after":"}"}'))
      assert.equals(text, ev.object_json, name)
      ev = assert(testing.decode_event('{"type":"MODIFIED","object":' .. text .. '}'))
      assert.equals(text, ev.object_json, name)
    end
  end)

  it('reads a BOOKMARK: its resourceVersion and no initial-events-end mark', function()
    local ev = event('BOOKMARK', '{"kind":"Pod","metadata":{"resourceVersion":"12345"}}', 'Pod')
    assert.equals('BOOKMARK', ev.type)
    assert.equals('12345', ev.rv)
    assert.equals('', ev.name)
    assert.is_false(ev.initial_events_end)
  end)

  it('reads the initial-events-end annotation of a BOOKMARK', function()
    local obj = '{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"777",'
      .. '"annotations":{"k8s.io/initial-events-end":"true"}}}'
    local ev = event('BOOKMARK', obj, 'Pod')
    assert.equals('777', ev.rv)
    assert.is_true(ev.initial_events_end)
    local other = obj:gsub('"true"', '"false"')
    assert.is_false(event('BOOKMARK', other).initial_events_end)
  end)

  it('reads an ERROR event carrying a 410 Status', function()
    local status = '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
      .. '"message":"too old resource version: 123 (456)","reason":"Expired","code":410}'
    local ev = event('ERROR', status, 'Pod')
    assert.same({ 'ERROR', 410, 'Expired', 'too old resource version: 123 (456)' },
      { ev.type, ev.code, ev.reason, ev.message })
    assert.is_nil(ev.object_json)
  end)

  it('reads an ERROR event without code, reason or message', function()
    local ev = event('ERROR', '{"kind":"Status"}')
    assert.equals(0, ev.code)
    assert.is_nil(ev.reason)
    assert.is_nil(ev.message)
  end)

  describe('refuses', function()
    local function refuses(f, kind, message)
      local ev, err = testing.decode_event(f, kind)
      assert.is_nil(ev)
      assert.equals(message, err)
    end

    it('malformed JSON, saying where', function()
      refuses('{"type":"ADDED","object":{"metadata":{"name":"p"}}', nil,
        'watch event is not valid JSON at byte 50: expected \',\' or \'}\' after an object member')
      refuses('{"type":"ADDED","object":{"a":tru}}', nil, 'watch event is not valid JSON at byte 30: invalid literal')
      refuses('{"type":"ADDED","object":{"a":"\1"}}', nil,
        'watch event is not valid JSON at byte 31: control character in string (must be escaped)')
      refuses('{"type":"ADDED","object":{"a":"\xff"}}', nil, 'watch event is not valid JSON at byte 31: invalid UTF-8')
      refuses('{"type":"ADDED","object":{}} x', nil,
        'watch event is not valid JSON at byte 29: unexpected data after the JSON value')
      refuses('', nil, 'watch event is not valid JSON at byte 0: unexpected end of input')
    end)

    it('an unknown type', function()
      refuses(frame('FOO', pod), nil, 'watch event has unknown type "FOO"')
    end)

    it('a missing type', function()
      refuses('{"object":' .. pod .. '}', nil, 'watch event has no type')
    end)

    it('a missing object, or one that is not an object', function()
      refuses('{"type":"ADDED"}', nil, 'watch event has no object')
      refuses('{"type":"ADDED","object":[1]}', nil, 'watch event has no object')
      refuses('{"type":"ADDED","object":null}', nil, 'watch event has no object')
    end)

    it('a frame that is not an object', function()
      refuses('[1,2]', nil, 'watch event is not a JSON object')
    end)

    it('an object of another kind than expected', function()
      refuses(frame('ADDED', '{"kind":"Secret","metadata":{"name":"s"}}'), 'Pod',
        'watch event object is a Secret, expected Pod')
    end)

    it('an object without a name', function()
      refuses(frame('ADDED', '{"kind":"Pod","metadata":{"namespace":"d"}}'), 'Pod',
        'watch event object has no metadata.name')
    end)
  end)

  it('accepts an object without a kind whatever kind is expected', function()
    assert.equals('p', event('ADDED', '{"metadata":{"name":"p"}}', 'Pod').name)
  end)

  it('does not check the kind of the Status of an ERROR event', function()
    assert.equals(500, event('ERROR', '{"kind":"Status","code":500}', 'Pod').code)
  end)

  it('keeps its parse for the view compact: about twice the object, not a whole parser', function()
    local ev = event('MODIFIED', pod, 'Pod')
    assert.is_true(ev.parsed_bytes < 3 * #pod, ev.parsed_bytes)
    assert.is_nil(event('ERROR', '{"kind":"Status","code":410}').parsed_bytes)
  end)

  it('hands its parse to the view, which reads the same object', function()
    local f = '{"type":"ADDED","object":' .. pod .. '}'
    local v = assert(testing.event_view(f, 'Pod'))
    assert.equals(pod, tostring(v))
    assert.equals('auth-b4ec5339db-0cc23', v.metadata.name)
    assert.equals('Running', v.status.phase)
    assert.same(testing.copy(testing.view(pod)), testing.copy(v))
  end)
end)

describe('decoding a LIST response', function()
  local function list_body(items, metadata)
    return '{"kind":"PodList","apiVersion":"v1","metadata":' .. (metadata or '{"resourceVersion":"500"}')
      .. ',"items":[' .. table.concat(items, ',') .. ']}'
  end

  it('reads every item with its identity and exact bytes, and the list metadata', function()
    local items = {
      reference.fixture('pod.json'),
      reference.fixture('escapes.json'),
      reference.fixture('unicode.json'),
      reference.fixture('nulls-and-empties.json'),
    }
    local l = assert(testing.decode_list(list_body(items)))
    assert.equals(4, #l.items)
    for i, text in ipairs(items) do assert.equals(text, l.items[i].json) end
    assert.same({ ns = 'default', name = 'auth-b4ec5339db-0cc23', rv = '1000000', json = items[1] }, l.items[1])
    assert.equals('escapes', l.items[2].name)
    assert.equals('intl', l.items[3].ns)
    assert.equals('500', l.rv)
    assert.is_nil(l.continue)
    assert.equals(-1, l.remaining)
  end)

  it('reads the continue token and remainingItemCount of a page', function()
    local md = '{"resourceVersion":"42","continue":"eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ","remainingItemCount":1234}'
    local l = assert(testing.decode_list(list_body({ pod }, md)))
    assert.equals('42', l.rv)
    assert.equals('eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ', l.continue)
    assert.equals(1234, l.remaining)
  end)

  it('copes with whitespace around items and inside them', function()
    local indented = reference.fixture('pod-indented.json')
    local body = '{\n  "kind": "PodList",\n  "items": [\n    ' .. indented .. ' ,\n' .. pod .. '\n  ],\n'
      .. '  "metadata": {"resourceVersion": "7"}\n}\n'
    local l = assert(testing.decode_list(body))
    assert.equals(indented, l.items[1].json)
    assert.equals(pod, l.items[2].json)
    assert.equals('7', l.rv)
  end)

  it('reads an empty list, and one whose items are null or absent', function()
    assert.same({}, assert(testing.decode_list(list_body({}))).items)
    assert.same({}, assert(testing.decode_list('{"kind":"PodList","metadata":{"resourceVersion":"1"},"items":null}')).items)
    local l = assert(testing.decode_list('{"kind":"PodList"}'))
    assert.same({}, l.items)
    assert.equals('', l.rv)
  end)

  it('refuses malformed bodies and items without a name', function()
    local l, err = testing.decode_list('{"items":[{"metadata":{"name":"a"}},]}')
    assert.is_nil(l)
    assert.equals('LIST response is not valid JSON at byte 36: expected a value', err)
    l, err = testing.decode_list(list_body({ '{"metadata":{"name":"a"}}', '{"metadata":{}}' }))
    assert.is_nil(l)
    assert.equals('LIST item 2 has no metadata.name', err)
    l, err = testing.decode_list('{"items":{}}')
    assert.is_nil(l)
    assert.equals('LIST response items is not an array', err)
    l, err = testing.decode_list('[]')
    assert.is_nil(l)
    assert.equals('LIST response is not a JSON object', err)
  end)
end)

-- Kubernetes reads JSON with sigs.k8s.io/json, which decodes as Go's encoding/json does:
-- of duplicate keys the last wins (strict mode only warns of them). klua reads every member
-- it acts on the same way, so that it never takes a different event, object or identity
-- than client-go would from the same bytes.
describe('duplicate keys', function()
  it('take the last type of a watch event', function()
    assert.equals('DELETED', assert(testing.decode_event(
      '{"type":"ADDED","type":"DELETED","object":{"metadata":{"name":"a"}}}')).type)
    assert.equals('ADDED', assert(testing.decode_event(
      '{"type":"DELETED","object":{"metadata":{"name":"a"}},"type":"ADDED"}')).type)
  end)

  it('take the last object of a watch event, its bytes and its identity', function()
    local a, b = '{"metadata":{"name":"a","namespace":"x"}}', '{"metadata":{"name":"b"}}'
    for _, f in ipairs({
      '{"type":"ADDED","object":' .. a .. ',"object":' .. b .. '}',
      '{"type":"ADDED","object":' .. a .. ',"object":' .. b .. ',"after":1}',
    }) do
      local ev = assert(testing.decode_event(f))
      assert.equals(b, ev.object_json, f)
      assert.equals('b', ev.name)
      assert.equals('', ev.ns)
    end
  end)

  it('take the last name, namespace and resourceVersion, and the last metadata whole', function()
    local ev = event('ADDED', '{"metadata":{"name":"a","namespace":"x",'
      .. '"resourceVersion":"1","name":"b","namespace":"y","resourceVersion":"2"}}')
    assert.same({ 'b', 'y', '2' }, { ev.name, ev.ns, ev.rv })
    ev = event('ADDED', '{"metadata":{"name":"a","namespace":"x"},"metadata":{"name":"b"}}')
    assert.same({ 'b', '' }, { ev.name, ev.ns })
  end)

  it('take the last name, namespace or resourceVersion even when it is not a string, which leaves none', function()
    local ev, err = testing.decode_event(frame('ADDED', '{"metadata":{"name":"a","name":null}}'))
    assert.is_nil(ev)
    assert.equals('watch event object has no metadata.name', err)
    ev = event('ADDED', '{"metadata":{"namespace":"x","name":"a","resourceVersion":"1","namespace":1,'
      .. '"resourceVersion":{"v":"2"}}}')
    assert.same({ 'a', '', '' }, { ev.name, ev.ns, ev.rv })
  end)

  it('take the last kind, checked against the kind expected', function()
    assert.truthy(testing.decode_event(frame('ADDED', '{"kind":"Secret","kind":"Pod","metadata":{"name":"p"}}'), 'Pod'))
    local ev, err = testing.decode_event(frame('ADDED', '{"kind":"Pod","kind":"Secret","metadata":{"name":"p"}}'), 'Pod')
    assert.is_nil(ev)
    assert.equals('watch event object is a Secret, expected Pod', err)
  end)

  it('take the last code of an ERROR event\'s Status', function()
    assert.equals(410, event('ERROR', '{"kind":"Status","code":500,"code":410}').code)
  end)

  it('take the last member a view reads, as the identity the cache keys on', function()
    local v = assert(testing.event_view(frame('ADDED', '{"metadata":{"name":"a","uid":"1","name":"b","uid":"2"}}')))
    assert.equals('b', v.metadata.name)
    assert.equals('2', v.metadata.uid)
  end)

  it('take the last items, metadata.resourceVersion and kind of a LIST, whole or streamed', function()
    local body = '{"kind":"SecretList","kind":"PodList","metadata":{"resourceVersion":"1","resourceVersion":"2"},'
      .. '"items":[{"metadata":{"name":"a"}}],"items":[{"metadata":{"name":"b"}},{"metadata":{"name":"c"}}]}'
    for _, l in ipairs({ assert(testing.decode_list(body)), assert(testing.decode_list_stream({ body })) }) do
      assert.equals(2, #l.items)
      assert.equals('b', l.items[1].name)
      assert.equals('2', l.rv)
    end
    assert.truthy(testing.check_list(body, 'Pod'))
  end)
end)

describe('checking that a LIST body is the list asked for', function()
  local function refused(body, kind, message, table_)
    local ok, err = testing.check_list(body, kind, table_)
    assert.is_nil(ok, body)
    assert.equals(message, err)
  end

  it('passes a list of the kind, with items and a resourceVersion', function()
    assert.truthy(testing.check_list('{"kind":"PodList","metadata":{"resourceVersion":"1"},"items":[]}', 'Pod'))
    assert.truthy(testing.check_list('{"kind":"PodList","metadata":{"resourceVersion":"1"},"items":null}', 'Pod'))
    -- client-go's typed decoder takes the kind it decodes into when the body has none.
    assert.truthy(testing.check_list('{"metadata":{"resourceVersion":"1"},"items":[]}', 'Pod'))
  end)

  it('refuses {}, a list of another kind, one without items or without a resourceVersion', function()
    refused('{}', 'Pod', 'the response has no items')
    refused('{"kind":"SecretList","metadata":{"resourceVersion":"1"},"items":[]}', 'Pod',
      'the response is a SecretList, not a PodList')
    refused('{"kind":"Table","metadata":{"resourceVersion":"1"},"items":[]}', 'Pod',
      'the response is a Table, not a PodList')
    refused('{"kind":"PodList","metadata":{"resourceVersion":"1"}}', 'Pod', 'the response has no items')
    refused('{"kind":"PodList","metadata":{},"items":[]}', 'Pod', 'the response has no metadata.resourceVersion')
    refused('{"kind":"PodList","items":[]}', 'Pod', 'the response has no metadata.resourceVersion')
    refused('{"kind":"Status","code":410}', 'Pod', 'the response is a Status, not a PodList')
  end)

  it('takes a Table for a LIST that asked for one', function()
    refused('{"kind":"SecretList","metadata":{"resourceVersion":"1"},"items":[]}', 'Pod',
      'the response is a SecretList, not a PodList or a Table', true)
    local rows = '{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"1"},"rows":[]}'
    assert.truthy(testing.decode_list_stream({ rows }, nil, true).has_items)
  end)
end)

describe('decoding a Status body', function()
  it('reads code, reason and message', function()
    local s = testing.decode_status('{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
      .. '"message":"pods is forbidden: User \\"x\\" cannot list","reason":"Forbidden","code":403}')
    assert.same({ code = 403, reason = 'Forbidden', message = 'pods is forbidden: User "x" cannot list' }, s)
  end)

  it('refuses a body that is not a Status', function()
    assert.is_nil(testing.decode_status('{"kind":"Pod","code":403}'))
    assert.is_nil(testing.decode_status('<html>bad gateway</html>'))
    assert.is_nil(testing.decode_status(''))
  end)
end)
