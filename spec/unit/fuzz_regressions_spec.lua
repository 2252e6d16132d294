-- The fuzz targets' inputs, replayed by the normal test run: every input
-- that once broke a target (fuzz/regressions/<target>/) and every seed
-- (fuzz/corpus/<target>/) goes through the same entry points as in the
-- fuzzer, and must keep the same promises (fuzz/README.md lists them).
-- A replay that raises is a failure; a decoder or parser that refuses an
-- input is not.
local testing = require('klua_testing')
local cli = require('klua_testing.cli')
local watch = require('klua.cmd.watch')
local K = require('support.klua')

local ROOT = os.getenv('KLUA_ROOT') or '.'
local walk = dofile(ROOT .. '/fuzz/view_walk.lua')
local json = testing.json

-- The files of a directory, sorted, as {name =, data =}; none if it is missing.
local function inputs(dir)
  local out = {}
  local p = io.popen('ls -1 ' .. K.quote(dir) .. ' 2>/dev/null')
  for name in p:lines() do out[#out + 1] = { name = name, data = K.read_file(dir .. '/' .. name) } end
  p:close()
  return out
end

local function is_object(text)
  local v = json.decode(text)
  return type(v) == 'table' and getmetatable(v) == nil
end

-- ---- fuzz_framer: byte 1 = max - 1, byte 2 seeds the read sizes --------

-- What the framer must emit for the whole stream, one byte at a time (the
-- rules atop src/wire/framer.c): frames and oversize reports in order, and the
-- bytes it holds at the end.
local function framer_model(s, max)
  local out, state, start, depth, in_string, escaped = {}, 'between', 1, 0, false, false
  local function frame(text, len)
    out[#out + 1] = len > max and { oversize = max } or text
  end
  for i = 1, #s do
    local c = s:sub(i, i)
    if state == 'between' and not c:find('^[ \t\r\n]') then
      start, depth, in_string, escaped = i, 0, false, false
      state = (c == '{' or c == '[') and 'value' or 'junk'
    end
    if state == 'junk' then
      if c == '\n' then
        frame((s:sub(start, i - 1):gsub('\r$', '')), i - start)
        state = 'between'
      end
    elseif state == 'value' then
      if escaped then
        escaped = false
      elseif c == '\\' then
        escaped = true
      elseif c == '"' then
        in_string = not in_string
      elseif not in_string and (c == '{' or c == '[') then
        depth = depth + 1
      elseif not in_string and (c == '}' or c == ']') then
        depth = depth - 1
        if depth == 0 then
          frame(s:sub(start, i), i - start + 1)
          state = 'between'
        end
      end
    end
  end
  if state == 'between' then return out, 0 end
  local rest = #s - start + 1
  if rest <= max then return out, rest end
  out[#out + 1] = { oversize = max }
  return out, 0
end

local function replay_framer_with(data, scanner)
  local max, state = data:byte(1) + 1, data:byte(2)
  local most, stream = 1 + state % 64, data:sub(3)
  local f, got, off = assert(testing.framer(max, scanner)), {}, 1
  while off <= #stream do
    state = (state * 1103515245 + 12345) & 0xffffffff
    local n = 1 + (state >> 16) % most
    for _, e in ipairs(f:feed(stream:sub(off, off + n - 1))) do
      if e.frame then
        assert(#e.frame <= max, 'a frame is too long')
        got[#got + 1] = e.frame
      else
        got[#got + 1] = { oversize = e.oversize }
      end
    end
    assert(f:pending() <= max, 'pending() exceeds max')
    off = off + n
  end
  local want, pending = framer_model(stream, max)
  assert.same(want, got)
  assert.equals(pending, f:pending())
end

local function replay_framer(data)
  if #data < 2 then return end
  replay_framer_with(data, nil)
  for _, scanner in ipairs { 'avx512', 'avx2', 'portable' } do
    if testing.framer(1, scanner) then replay_framer_with(data, scanner) end
  end
end

-- ---- fuzz_cbor: byte 1 = (max - 1) / 16, byte 2 seeds the read sizes ----

local function cbor_events(stream, max, seed)
  local f, got, off, state = testing.framer(max, nil, true), {}, 1, seed
  while off <= #stream do
    local n = #stream
    if seed then
      state = (state * 1103515245 + 12345) & 0xffffffff
      n = 1 + (state >> 16) % (1 + seed % 64)
    end
    for _, e in ipairs(f:feed(stream:sub(off, off + n - 1))) do
      if e.frame then assert(json.decode(e.frame) ~= nil, 'a frame is not JSON') end
      got[#got + 1] = e
    end
    assert(f:pending() <= max, 'pending() exceeds max')
    off = off + n
  end
  return got
end

-- The reads fuzz_cbor cuts a body into: one, or sizes drawn from seed.
local function cbor_reads(stream, seed)
  if not seed then return { stream } end
  local pieces, off, state = {}, 1, seed
  while off <= #stream do
    state = (state * 1103515245 + 12345) & 0xffffffff
    local n = 1 + (state >> 16) % (1 + seed % 64)
    pieces[#pieces + 1] = stream:sub(off, off + n - 1)
    off = off + n
  end
  return pieces
end

local function replay_cbor(data)
  if #data < 2 then return end
  local max, seed, stream = 1 + data:byte(1) * 16, data:byte(2), data:sub(3)
  local whole = testing.cbor_to_json(stream)
  if whole then assert(json.decode(whole) ~= nil, 'the JSON of an accepted item is not JSON') end
  local one = cbor_events(stream, max)
  assert.same(one, cbor_events(stream, max, seed))
  if whole and #stream <= max then assert.same({ { frame = whole } }, one) end
  -- the same body as a CBOR LIST, in one read and in several; against its JSON's
  local listed = testing.decode_list_stream(cbor_reads(stream), max, false, true)
  local split = testing.decode_list_stream(cbor_reads(stream, seed | 1), max, false, true)
  assert.equal(listed ~= nil, split ~= nil, 'the CBOR LIST reader accepts the body in one read or in several, not both')
  if listed then assert.same(listed, split) end
  local from_json = whole and testing.decode_list_stream({ whole })
  if from_json then
    assert.same(from_json, testing.decode_list_stream(cbor_reads(stream, seed | 1), nil, false, true))
  end
end

-- ---- fuzz_decode: one frame or body through every decoder --------------

local function replay_decode(data)
  for _, kind in ipairs { false, 'Pod' } do
    local ev, err = testing.decode_event(data, kind or nil)
    if not ev then
      assert.is_string(err)
    elseif ev.type ~= 'ERROR' then
      assert(is_object(ev.object_json), 'an event\'s object span is not a JSON object on its own')
      assert(ev.type == 'BOOKMARK' or ev.name ~= '', 'an object event has no name')
    end
  end
  local list, err = testing.decode_list(data)
  if not list then
    assert.is_string(err)
  else
    for _, item in ipairs(list.items) do
      assert(item.name ~= '' and is_object(item.json), 'a LIST item is not a named JSON object')
    end
  end
  testing.decode_status(data)
end

-- ---- fuzz_list_stream: the streaming LIST decoder against the whole one --

local function replay_list_stream(data)
  local whole = testing.decode_list(data)
  for _, most in ipairs { 0, 64 } do
    local chunks, state, off = {}, #data, 1
    while off <= #data do
      local n = #data
      if most > 0 then
        state = (state * 1103515245 + 12345) & 0xffffffff
        n = 1 + (state >> 16) % most
      end
      chunks[#chunks + 1] = data:sub(off, off + n - 1)
      off = off + n
    end
    local streamed, err = testing.decode_list_stream(chunks)
    if whole then
      assert(streamed, err)
      assert.same(whole, streamed)
    elseif not streamed then
      assert.is_string(err)
    end
  end
end

-- ---- fuzz_view: the views of the input, walked -------------------------

local function fail(msg) error(msg, 2) end

local function replay_view(data)
  walk(testing.view(data), testing, fail)
  local ev = testing.decode_event(data)
  if ev and ev.type ~= 'ERROR' then
    walk(testing.event_view(data), testing, fail)
    walk(testing.view(ev.object_json), testing, fail)
  end
end

-- ---- fuzz_kubeconfig: the input as a kubeconfig, loaded three ways ------

local TOKEN = 'fuzz-override-token-3c1f'

local function use(conn)
  local d = conn:describe()
  assert(d.server:lower():find('^https?://'), 'a connection\'s server is not an http(s) URL')
  assert(d.namespace ~= '' and d.context and d.source and d.auth and d.ca and d.client_cert,
    'a connection\'s description is incomplete')
  -- Preparing runs an exec plugin; the fuzzer never does, nor does its replay.
  if d.auth ~= 'exec' then
    conn:prepare()
    conn:unauthorized()
  end
end

local function replay_kubeconfig(data)
  local dir = K.tmpdir()
  local path = dir .. '/config'
  K.write_file(path, data)
  local ways = {
    { kubeconfig = path, env = {} },
    { env = { KUBECONFIG = path .. ':' .. dir .. '/missing' } },
    { env = { KUBECONFIG = path }, server = 'https://override.test:6443', token = TOKEN, insecure = true },
  }
  local ok, err = pcall(function()
    for _, opts in ipairs(ways) do
      local conn, why = testing.load_config(opts)
      if conn then
        use(conn)
      else
        assert(why ~= '', 'a failed load gives no message')
        assert(data:find(TOKEN, 1, true) or not why:find(TOKEN, 1, true), 'an error quotes the --token value')
      end
    end
  end)
  os.remove(path)
  os.remove(dir)
  assert(ok, err)
end

-- ---- fuzz_cli: NUL-separated words through both flag parsers -----------

local function words(data)
  local out, start = {}, 1
  while #out < 64 do
    local z = data:find('\0', start, true)
    out[#out + 1] = data:sub(start, (z or #data + 1) - 1)
    if not z then break end
    start = z + 1
  end
  return out
end

local function check_cli_options(o, args)
  local seen = {}
  for _, a in ipairs(args) do seen[a] = true end
  assert(o.command == nil or o.command == 'help' or o.command == 'version' or seen[o.command],
    'the command is not a word of the line')
  assert(o.script == nil or (o.command == 'run' and seen[o.script]), 'a script outside `run SCRIPT`')
  for _, a in ipairs(o.args) do assert(seen[a], 'an argument that is not a word of the line') end
  for _, k in ipairs { 'verbosity', 'instruction_budget', 'memory_limit', 'idle_timeout', 'page_size',
    'watch_list_deadline' } do
    assert(o[k] >= 0, k .. ' is negative')
  end
  assert(o.watch_timeout_min == 0 or o.watch_timeout_max > o.watch_timeout_min, '--watch-timeout gives an empty range')
end

local function replay_cli(data)
  local args = words(data)
  local o, err = cli.parse(args)
  if o then check_cli_options(o, args) else assert.matches('^klua: ', err) end
  local w, why, suggestion = watch.parse(args, cli.suggest)
  if not w then
    assert.is_string(why)
    assert(suggestion == nil or suggestion:match('^%-'), 'a suggestion that is not a flag')
  elseif w.help then
    assert.is_true(w.help)
  else
    assert(#w.targets > 0, 'options without a resource')
    for _, t in ipairs(w.targets) do
      assert.is_string(t.resource)
      assert(t.name == nil or type(t.name) == 'string', 'a name that is not a string')
    end
    local formats = { table = true, wide = true, name = true, json = true, ndjson = true, yaml = true, line = true }
    assert(formats[w.output] or (w.output == 'jsonpath' and w.template) or (w.output == 'custom-columns' and w.columns),
      'an output that is not one of the formats, or without its template')
    assert(not (w.all_namespaces and w.namespace), 'both -n and -A')
  end
end

-- ---- fuzz_selector: a label selector and labels --------------------------

local selector_check = dofile(ROOT .. '/fuzz/selector_check.lua')
local selector = require('klua.selector')

local function replay_selector(data)
  selector_check(data, selector, function(msg) error(msg, 2) end)
end

-- ---- fuzz_jsonpath: a JSONPath template ------------------------------------

local jsonpath_check = dofile(ROOT .. '/fuzz/jsonpath_check.lua')
local jsonpath = require('klua.cmd.jsonpath')

local function replay_jsonpath(data)
  jsonpath_check(data, jsonpath, function(msg) error(msg, 2) end)
end

local targets = {
  { 'fuzz_framer', replay_framer },
  { 'fuzz_cbor', replay_cbor },
  { 'fuzz_decode', replay_decode },
  { 'fuzz_list_stream', replay_list_stream },
  { 'fuzz_view', replay_view },
  { 'fuzz_kubeconfig', replay_kubeconfig },
  { 'fuzz_cli', replay_cli },
  { 'fuzz_selector', replay_selector },
  { 'fuzz_jsonpath', replay_jsonpath },
}

for _, t in ipairs(targets) do
  local target, replay = t[1], t[2]
  describe(target, function()
    for _, kind in ipairs { 'regressions', 'corpus' } do
      local files = inputs(ROOT .. '/fuzz/' .. kind .. '/' .. target)
      if kind == 'corpus' then
        it('has seed inputs to start from', function() assert.is_true(#files > 0) end)
      end
      for _, input in ipairs(files) do
        local what = kind == 'corpus' and 'seed' or 'regression'
        it('keeps its promises on ' .. what .. ' ' .. input.name, function() replay(input.data) end)
      end
    end
  end)
end

describe('the command line', function()
  it('refuses numbers a setting cannot hold instead of converting them', function()
    for _, args in ipairs {
      { '-v', 'inf' }, { '--page-size', '1e300' }, { '--memory-limit', '1e30' }, { '--watch-timeout', 'nan' },
      { '--watch-timeout', '5:inf' }, { '--watch-idle-timeout', 'inf' }, { '--instruction-budget', 'nan' },
    } do
      local o, err = cli.parse(args)
      assert.is_nil(o)
      assert.matches('needs a number of at', err)
    end
    local _, err = cli.parse { '-v', 'inf' }
    assert.equals('klua: -v needs a number of at most 2147483647, not "inf"', err)
  end)

  it('still takes any large instruction budget as the largest it can run', function()
    assert.equals(2147483647, assert(cli.parse { '--instruction-budget', '1e12', 'version' }).instruction_budget)
    assert.equals(2147483647, assert(cli.parse { '--instruction-budget=inf', 'version' }).instruction_budget)
  end)
end)
