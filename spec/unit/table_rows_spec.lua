-- The Table form, as `klua watch` asks for it (Accept:
-- application/json;as=Table;g=meta.k8s.io;v=v1, includeObject=Object): a LIST
-- answers a meta.k8s.io Table whose rows carry cells and the whole object,
-- and each watch event's object is a Table of one row (kube-apiserver's
-- endpoints/handlers transform every event's object, bookmarks included;
-- an ERROR's Status is left alone). The decoder unwraps each row's object,
-- which is what the cache holds, and the row stays around it in the blob,
-- where the printer reads its cells.
local testing = require('klua_testing')
local chunks = require('support.klua').chunks

local POD = '{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web","namespace":"ns","resourceVersion":"12"},'
  .. '"spec":{"nodeName":"n1"}}'

local function table_of(rows, columns)
  return '{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"12"},'
    .. '"columnDefinitions":' .. (columns or 'null') .. ',"rows":[' .. table.concat(rows, ',') .. ']}'
end

local function row(cells, object)
  return '{"cells":' .. cells .. ',"object":' .. object .. '}'
end

local function event(type_, object) return '{"type":"' .. type_ .. '","object":' .. object .. '}\n' end

describe('a Table watch event', function()
  it('gives the object of its one row, with its identity and exact bytes', function()
    local ev = assert(testing.decode_event(event('MODIFIED', table_of { row('["web","1/1",3]', POD) }), 'Pod', true))
    assert.same({ 'MODIFIED', 'ns', 'web', '12', POD },
      { ev.type, ev.ns, ev.name, ev.rv, ev.object_json })
  end)

  it('keeps the row\'s cells for the printer, and the view reads the plain object', function()
    local v = assert(testing.event_view(event('ADDED', table_of({ row('["web",null,3,"5m"]', POD) },
      '[{"name":"Name"}]')), 'Pod', true))
    assert.equal('n1', v.spec.nodeName)
    assert.is_nil(v.cells)
    assert.same({ 'web', testing.null, 3, '5m' }, testing.table_cells(v))
  end)

  it('reads a BOOKMARK whose object is a Table, its resourceVersion and mark from the row\'s object', function()
    local mark = '{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"99",'
      .. '"annotations":{"k8s.io/initial-events-end":"true"}}}'
    local ev = assert(testing.decode_event(event('BOOKMARK', table_of { row('["","0/0"]', mark) }), 'Pod', true))
    assert.same({ 'BOOKMARK', '99', true }, { ev.type, ev.rv, ev.initial_events_end })
  end)

  it('reads an ERROR\'s Status, which the server does not turn into a Table', function()
    local ev = assert(testing.decode_event(event('ERROR',
      '{"kind":"Status","apiVersion":"v1","code":410,"reason":"Expired","message":"too old"}'), 'Pod', true))
    assert.same({ 'ERROR', 410 }, { ev.type, ev.code })
  end)

  it('reads a plain object as ever, from a server that cannot make a Table; it has no cells', function()
    local ev = assert(testing.decode_event(event('ADDED', POD), 'Pod', true))
    assert.equal(POD, ev.object_json)
    assert.is_nil(testing.table_cells(assert(testing.event_view(event('ADDED', POD), 'Pod', true))))
  end)

  it('is a Table to the plain decoder, whose kind is not the resource\'s', function()
    local _, err = testing.decode_event(event('ADDED', table_of { row('["web"]', POD) }), 'Pod')
    assert.equal('watch event object is a Table, expected Pod', err)
  end)

  describe('is refused', function()
    it('with no row or several, naming what it expected', function()
      for _, rows in ipairs { {}, { row('["a"]', POD), row('["b"]', POD) } } do
        local _, err = testing.decode_event(event('ADDED', table_of(rows)), 'Pod', true)
        assert.equal('watch event Table has not exactly one row', err)
      end
    end)

    it('when its row has no object (includeObject=None) or the object is of another kind', function()
      local _, err = testing.decode_event(event('ADDED', table_of { '{"cells":["web"]}' }), 'Pod', true)
      assert.equal('watch event Table row has no object (includeObject=Object was not honoured)', err)
      _, err = testing.decode_event(event('ADDED',
        table_of { row('["web"]', '{"kind":"Secret","metadata":{"name":"s"}}') }), 'Pod', true)
      assert.equal('watch event object is a Secret, expected Pod', err)
    end)
  end)
end)

describe('a Table LIST', function()
  local BODY = table_of({ row('["a",1]', '{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a",'
      .. '"namespace":"ns","resourceVersion":"7"},"data":{"rows":"]"}}'),
    row('["b",0]', '{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"b","namespace":"ns",'
      .. '"resourceVersion":"8"}}') }, '[{"name":"Name","type":"string"},{"name":"Data","type":"integer"}]')

  it('gives each row\'s object as an item, with the Table\'s resourceVersion, for every chunk size', function()
    local want = assert(testing.decode_list_stream({ BODY }, nil, true))
    assert.same({ 'a', 'b' }, { want.items[1].name, want.items[2].name })
    assert.equal('{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"b","namespace":"ns",'
      .. '"resourceVersion":"8"}}', want.items[2].json)
    assert.equal('12', want.rv)
    for size = 1, #BODY, 7 do assert.same(want, assert(testing.decode_list_stream(chunks(BODY, size), nil, true))) end
  end)

  it('drops a member from each row\'s object, not from the row, for every chunk size', function()
    for size = 1, #BODY, 7 do
      local got = assert(testing.decode_list_stream(chunks(BODY, size), nil, true, nil, nil, 'data.rows'))
      assert.equal('{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a",'
        .. '"namespace":"ns","resourceVersion":"7"},"data":{}}', got.items[1].json)
      assert.equal('b', got.items[2].name)
    end
  end)

  it('reads a plain list as ever, from a server that cannot make a Table', function()
    local plain = '{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"3"},'
      .. '"items":[{"metadata":{"name":"a","resourceVersion":"2"}}],"rows":[{"x":1}]}'
    local got = assert(testing.decode_list_stream({ plain }, nil, true))
    assert.equal('{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","resourceVersion":"2"}}',
      got.items[1].json)
    assert.equal(1, #got.items)
  end)

  it('is not read as rows unless asked: a plain LIST decoder sees no items in a Table', function()
    assert.same({}, assert(testing.decode_list_stream({ BODY })).items)
  end)

  it('keeps each row around its object, for its cells', function()
    local v = assert(testing.row_view(row('["a",1,"3d"]', '{"metadata":{"name":"a"},"data":{"k":"v"}}')))
    assert.equal('v', v.data.k)
    assert.same({ 'a', 1, '3d' }, testing.table_cells(v))
    assert.is_nil(testing.table_cells(testing.view('{"metadata":{"name":"a"}}')))
  end)

  it('refuses a row without an object, naming includeObject', function()
    local _, err = testing.row_view('{"cells":["a"]}')
    assert.equal('Table row has no object (includeObject=Object was not honoured)', err)
    _, err = testing.decode_list_stream({ table_of { '{"cells":["a"]}' } }, nil, true)
    assert.equal('LIST item 1: Table row has no object (includeObject=Object was not honoured)', err)
  end)
end)
