-- The differential table: requests and the answers kube-apiserver 1.32 gives them, each row
-- naming the source it was written from (spec/fixtures/sandbox/differential.json). The
-- sandbox must answer every row the same way: status code, reason, message and the fields
-- a client reads.
local cjson = require('cjson')
local testing = require('klua.testing')

local ROOT = os.getenv('KLUA_ROOT') or '.'

local function load_table()
  local f = assert(io.open(ROOT .. '/spec/fixtures/sandbox/differential.json', 'rb'))
  local doc = cjson.decode(f:read('a'))
  f:close()
  return doc.rows
end

-- The value at a path such as details.causes[0].field (list indices from 0), or nil.
local function at(value, path)
  for part in path:gmatch('[^.]+') do
    local name, rest = part:match('^([^%[]*)(.*)$')
    if name ~= '' then value = type(value) == 'table' and value[name] or nil end
    for index in rest:gmatch('%[(%d+)%]') do
      value = type(value) == 'table' and value[tonumber(index) + 1] or nil
    end
  end
  if value == cjson.null then return nil end
  return value
end

local function expand(text, vars)
  return (text:gsub('{{(%w+)}}', function(name)
    return assert(vars[name], 'no saved value ' .. name)
  end))
end

local function expand_all(value, vars)
  if type(value) == 'string' then return expand(value, vars) end
  if type(value) ~= 'table' then return value end
  local out = {}
  for k, v in pairs(value) do out[k] = expand_all(v, vars) end
  return setmetatable(out, getmetatable(value))
end

local function headers_of(request)
  local out = {}
  for k, v in pairs(request.headers or {}) do out[k] = v end
  return out
end

local function send(sb, request, vars)
  local body = request.body ~= nil and expand_all(request.body, vars) or nil
  return sb:request(request.method, expand(request.path, vars), body, headers_of(request))
end

local function decoded(text, watch)
  if watch then text = text:match('^[^\n]*') end
  local ok, value = pcall(cjson.decode, text)
  return ok and value or nil
end

describe('sandbox answers as kube-apiserver does', function()
  local sb = testing.with_sandbox()
  local count = 0


  for _, row in ipairs(load_table()) do
    it(row.name .. ' [' .. row.source .. ']', function()
      count = count + 1
      local vars = { ns = 'diff-' .. count }
      assert.equals(201, (sb:json('POST', '/api/v1/namespaces', { metadata = { name = vars.ns } })))
      for _, step in ipairs(row.setup or {}) do
        local status, text = send(sb, step, vars)
        assert.is_true(status >= 200 and status < 300, 'setup ' .. step.method .. ' ' .. step.path
          .. ' answered ' .. status .. ': ' .. text)
        for name, path in pairs(step.save or {}) do vars[name] = at(decoded(text), path) end
      end
      local status, text, headers = send(sb, row.request, vars)
      local expect = row.expect
      assert.equals(expect.status, status, text)
      local body = decoded(text, row.request.watch)
      assert.is_table(body, 'the answer is JSON: ' .. text)
      for path, want in pairs(expect.fields or {}) do
        if want == cjson.null then
          assert.is_nil(at(body, path), path)
        else
          assert.same(want, at(body, path), path .. ' in ' .. text)
        end
      end
      if expect.message_starts then
        assert.equals(expect.message_starts, body.message:sub(1, #expect.message_starts))
      end
      for name, want in pairs(expect.headers or {}) do
        assert.equals(want, headers[name], name)
      end
      for name, want in pairs(expect.saved or {}) do
        assert.equals(want ~= cjson.null and want or nil, vars[name], name)
      end
    end)
  end
end)
