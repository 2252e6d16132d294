-- What fuzz_view does with a view, and what spec/unit/fuzz_regressions_spec.lua
-- replays: every way a script can read a view, checked against klua.json.
--
--   walk(view, klua, fail)
--
-- view is a view over arbitrary bytes, klua a table with klua's functions
-- for objects (copy, get, type and json, the klua.json table), and fail a
-- function that reports a broken promise and does not return (the fuzzer
-- aborts, the spec raises). When the view's bytes are not JSON, reading it
-- must raise a Lua error and nothing worse. When they are, nothing may
-- raise, and these must agree: klua.copy(view), klua.json.decode of the
-- view's bytes (tostring), the members pairs() walks, indexing and
-- klua.get (whatever a member's name: views have no methods), klua.type,
-- #, and the klua.json.encode round trip of the copy.

-- Walking a huge or deep value costs a decode per sub-view: these bound a
-- fuzz input's time without narrowing what small inputs reach.
local MAX_VIEWS, MAX_DEPTH = 300, 48
local null -- klua.null, a light userdata like the views but not one
local copy, get, type_of -- klua.copy, klua.get, klua.type

local function is_view(v) return type(v) == 'userdata' and v ~= null end

-- strict: the same Lua types and number subtypes; otherwise numbers only
-- need ==, as after an encode/decode round trip (3.0 comes back as 3), or,
-- given text (klua.json.encode), the same text: a float is written as Go's
-- encoding/json writes it, so 456712345167390E3 goes out as
-- 456712345167390000 and reads back as that integer, not the double's exact
-- value, as it does in kube-apiserver (docs/json.md).
local function same(a, b, strict, text)
  if type(a) ~= type(b) then return false end
  if type(a) == 'number' then
    if strict then return a == b and math.type(a) == math.type(b) end
    return a == b or (text ~= nil and text(a) == text(b))
  end
  if type(a) ~= 'table' then return a == b end
  if getmetatable(a) ~= getmetatable(b) then return false end
  for k, v in pairs(a) do
    if not same(v, b[k], strict, text) then return false end
  end
  for k in pairs(b) do
    if a[k] == nil then return false end
  end
  return true
end

-- Reading a view over bytes that are not JSON must raise, not crash.
local function poke(view)
  local reads = {
    function() return view.metadata end,
    function() return view[1] end,
    function() return #view end,
    function() return copy(view) end,
    function() for _ in pairs(view) do end end,
    function() return get(view, 'x') end,
    function() return type_of(view) end,
  }
  for _, read in ipairs(reads) do pcall(read) end
  return tostring(view)
end

local function check_encode(view, c, json, fail, text)
  if json.encode(view) ~= text then fail('json.encode(view) is not the view\'s own bytes') end
  local ok, encoded = pcall(json.encode, c)
  if not ok then
    -- A copy nested past the encoder's limit is the one thing it refuses.
    if not tostring(encoded):find('nested deeper than', 1, true) then fail('json.encode(copy) failed: ' .. tostring(encoded)) end
    return
  end
  local back, err = json.decode(encoded)
  if back == nil then fail('json.decode(json.encode(copy)) failed: ' .. tostring(err)) end
  if not same(back, c, false, json.encode) then fail('the encode/decode round trip of a copy changed it') end
end

-- A member of the view (v, from pairs) against the decoded value: for
-- scalars the value itself, for views their copy.
local function check_member(v, want, fail)
  local got = copy(v)
  if not same(got, want, true) then fail('a member of a view disagrees with the decoded value') end
end

local function check_array(view, expect, walk_child, fail)
  local n, count = #view, 0
  if n ~= #expect then fail('#view disagrees with the decoded array') end
  for i, v in pairs(view) do
    count = count + 1
    if i ~= count then fail('pairs(view) of an array skipped or repeated an index') end
    if view[i] ~= v or get(view, i) ~= v then fail('view[i] disagrees with pairs(view)') end
    check_member(v, expect[i], fail)
    if is_view(v) then walk_child(v) end
  end
  if count ~= n then fail('pairs(view) of an array did not give #view elements') end
  for i in ipairs(view) do
    if i > n then fail('ipairs(view) went past #view') end
  end
end

local function check_object(view, expect, walk_child, fail)
  if #view ~= 0 then fail('#view of an object is not 0') end
  local members, seen = {}, {}
  for k, v in pairs(view) do
    if type(k) ~= 'string' or expect[k] == nil then fail('pairs(view) gave a key the decoded value lacks') end
    if view[k] == nil or get(view, k) == nil then fail('view[key] misses a member pairs(view) gave') end
    if type(view[k]) == 'function' then fail('view[key] gave a function, which JSON has not') end
    members[#members + 1] = { k, v }
    seen[k] = (seen[k] or 0) + 1
  end
  for _, m in ipairs(members) do
    -- With duplicate keys pairs gives every member while the decoded table
    -- keeps the last and view[key] the first: only unique keys compare.
    if seen[m[1]] == 1 then check_member(m[2], expect[m[1]], fail) end
    if is_view(m[2]) then walk_child(m[2]) end
  end
  for k in pairs(expect) do
    if not seen[k] then fail('pairs(view) missed a member of the decoded value') end
  end
end

return function(view, klua, fail)
  local json = klua.json
  null, copy, get, type_of = json.null, klua.copy, klua.get, klua.type
  local budget = MAX_VIEWS
  local text = tostring(view)
  local value = json.decode(text)
  if value == nil then
    poke(view)
    return
  end
  local function walk(v, depth)
    budget = budget - 1
    local bytes = tostring(v)
    local expect, err = json.decode(bytes)
    if expect == nil then fail('a view\'s bytes are not the JSON of its value: ' .. tostring(err)) end
    local c = copy(v)
    if not same(c, expect, true) then fail('klua.copy(view) differs from decoding the view\'s bytes') end
    if not same(copy(c), c, true) then fail('klua.copy of a copy differs from it') end
    if type_of(v) ~= type_of(expect) then fail('klua.type(view) differs from klua.type of its decoded value') end
    if get(v) ~= v then fail('klua.get(view) without keys is not the view') end
    if pcall(function() v.written = true end) then fail('writing to a view did not raise') end
    check_encode(v, c, json, fail, bytes)
    if type(expect) ~= 'table' then
      if #v ~= 0 or v[1] ~= nil or v.x ~= nil then fail('a scalar view has members') end
      for _ in pairs(v) do fail('pairs() of a scalar view gave a member') end
      return
    end
    local function walk_child(child)
      if budget > 0 and depth < MAX_DEPTH then walk(child, depth + 1) end
    end
    if getmetatable(expect) then
      check_array(v, expect, walk_child, fail)
    else
      check_object(v, expect, walk_child, fail)
    end
  end
  walk(view, 0)
end
