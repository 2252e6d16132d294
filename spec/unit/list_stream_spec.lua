-- A LIST response is decoded as it arrives: each item is copied once into
-- its own buffer and decoded alone, whatever the chunking, so a huge list
-- never sits in memory twice.
local testing = require('klua_testing')
local chunks = require('support.klua').chunks

local BODY = '{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"42",' ..
  '"continue":"tok","remainingItemCount":3},"items":[' ..
  '{"metadata":{"name":"a","namespace":"ns","resourceVersion":"7"},"data":{"x":"[{\\"}]"}},\n' ..
  ' {"metadata":{"name":"b","namespace":"ns","resourceVersion":"8"},"data":{"items":"]"}}' ..
  ']}'

describe('the streaming LIST decoder', function()
  it('gives the same result as decoding the whole body, for every chunk size', function()
    local whole = assert(testing.decode_list(BODY))
    for size = 1, #BODY do
      local got = assert(testing.decode_list_stream(chunks(BODY, size)))
      assert.same(whole, got)
    end
  end)

  -- kube-apiserver leaves kind and apiVersion out of the items of built-in lists; they
  -- are filled in from the list, as apimachinery's UnstructuredList does, so that an
  -- object from a LIST reads like the same object from a watch event.
  it('keeps each item as the server sent it, after the list\'s kind and apiVersion', function()
    local got = assert(testing.decode_list_stream({ BODY }))
    assert.equals('{"kind":"ConfigMap","apiVersion":"v1",'
      .. '"metadata":{"name":"a","namespace":"ns","resourceVersion":"7"},"data":{"x":"[{\\"}]"}}', got.items[1].json)
    assert.equals('b', got.items[2].name)
    assert.equals('8', got.items[2].rv)
    assert.equals('42', got.rv)
    assert.equals('tok', got.continue)
    assert.equals(3, got.remaining)
  end)

  -- klua.drop_fields: each item is pruned as soon as it is decoded, so a large LIST never
  -- holds every unpruned item at once; what is cached is what pruning the whole list gives.
  it('drops a member from each item as it is decoded, whatever the chunking', function()
    for size = 1, #BODY do
      local got = assert(testing.decode_list_stream(chunks(BODY, size), nil, nil, nil, nil, 'data.x'))
      assert.equals('{"kind":"ConfigMap","apiVersion":"v1",'
        .. '"metadata":{"name":"a","namespace":"ns","resourceVersion":"7"},"data":{}}', got.items[1].json)
      assert.equals('{"kind":"ConfigMap","apiVersion":"v1",'
        .. '"metadata":{"name":"b","namespace":"ns","resourceVersion":"8"},"data":{"items":"]"}}', got.items[2].json)
      assert.same({ 'a', '7', 'b', '8' }, { got.items[1].name, got.items[1].rv, got.items[2].name, got.items[2].rv })
    end
  end)

  -- Items are pruned before they are parsed, so a dropped member is never parsed: an item
  -- that spans reads must give what one within a read gives, or a LIST would succeed or
  -- fail by where the network split it.
  it('gives the same answer for a pruned item however the reads split it', function()
    local body = '{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"42"},"items":['
      .. '{"metadata":{"name":"a","namespace":"ns","resourceVersion":"7"},"data":{"x":[1 2 tru],"y":"k"}}]}'
    local whole = { testing.decode_list_stream({ body }, nil, nil, nil, nil, 'data.x') }
    assert.equals('{"kind":"ConfigMap","apiVersion":"v1",'
      .. '"metadata":{"name":"a","namespace":"ns","resourceVersion":"7"},"data":{"y":"k"}}', whole[1].items[1].json)
    for size = 1, #body do
      assert.same(whole, { testing.decode_list_stream(chunks(body, size), nil, nil, nil, nil, 'data.x') }, size)
    end
  end)

  it('types the items from a kind and apiVersion that come after them', function()
    for size = 1, 40 do
      local got = assert(testing.decode_list_stream(chunks('{"items":[{"metadata":{"name":"z"}}],'
        .. '"apiVersion":"apps/v1","kind":"DeploymentList","metadata":{"resourceVersion":"9"}}', size)))
      assert.equals('{"kind":"Deployment","apiVersion":"apps/v1","metadata":{"name":"z"}}', got.items[1].json)
    end
  end)

  it('leaves an item that has a kind or an apiVersion of its own as it is (custom resources)', function()
    local own = '{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"}}'
    local half = '{"apiVersion":"example.com/v1","metadata":{"name":"h"}}'
    local got = assert(testing.decode_list_stream({ '{"kind":"WidgetList","apiVersion":"example.com/v1",'
      .. '"metadata":{"resourceVersion":"3"},"items":[' .. own .. ',' .. half .. ']}' }))
    assert.equals(own, got.items[1].json)
    assert.equals(half, got.items[2].json)
  end)

  it('leaves the items untyped when the list says nothing of its kind', function()
    local got = assert(testing.decode_list_stream({ '{"apiVersion":"v1","items":[{"metadata":{"name":"a"}}]}' }))
    assert.equals('{"metadata":{"name":"a"}}', got.items[1].json)
  end)

  it('decodes a list whose metadata follows its items', function()
    local got = assert(testing.decode_list_stream({ '{"items":[{"metadata":{"name":"z"}}],"metadata":{"resourceVersion":"9"}}' }))
    assert.equals(1, #got.items)
    assert.equals('9', got.rv)
  end)

  it('reads the items member as Go\'s decoder does: the last of duplicates, escapes decoded', function()
    for _, body in ipairs({
      '{"items":[],"items":[1]}',
      '{"items":[{"metadata":{"name":"a"}}],"items":[{"metadata":{"name":"b"}}]}',
      '{"it\\u0065ms":[{"metadata":{"name":"a"}}]}',
      '{"items":null,"items":[{"metadata":{"name":"a"}}]}',
    }) do
      local whole, werr = testing.decode_list(body)
      local streamed, serr = testing.decode_list_stream({ body })
      assert.same(whole, streamed, body)
      assert.equals(werr, serr, body)
    end
  end)

  it('decodes an empty list and a list without items', function()
    assert.equals(0, #assert(testing.decode_list_stream({ '{"metadata":{"resourceVersion":"1"},"items":[]}' })).items)
    assert.equals(0, #assert(testing.decode_list_stream({ '{"metadata":{"resourceVersion":"1"},"items":null}' })).items)
  end)

  -- The error of body decoded in one chunk (items of limit bytes at most, if given).
  local function error_of(body, limit)
    return select(2, testing.decode_list_stream({ body }, limit))
  end

  it('refuses an item that is not an object, or has no name, naming the item', function()
    assert.matches('LIST item 2 is not an object', error_of('{"items":[{"metadata":{"name":"a"}},42]}'))
    assert.matches('LIST item 1: no metadata.name', error_of('{"items":[{"metadata":{}}]}'))
  end)

  it('refuses an item larger than its limit without holding more of it', function()
    assert.matches('LIST item 1 is larger than 64 bytes',
      error_of('{"items":[{"metadata":{"name":"' .. string.rep('x', 100) .. '"}}]}', 64))
  end)

  it('reports a body that ends early or is not JSON', function()
    assert.matches('ended early', error_of('{"items":[{"metadata":{"name":"a"}}'))
    assert.matches('not valid JSON', error_of('}}'))
    assert.is_string(error_of('{"items":[{"metadata":{"name":"a"}}],"metadata":{"resourceVersion":}'))
  end)

  it('reports an item nested deeper than the parser allows', function()
    local deep = string.rep('[', 10000) .. string.rep(']', 10000)
    assert.matches('LIST item 1', error_of('{"items":[{"metadata":{"name":"a"},"x":' .. deep .. '}]}'))
  end)
end)
