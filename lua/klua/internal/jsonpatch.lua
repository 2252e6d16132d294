--- JSON Patch (RFC 6902) from one JSON document to another, as a mutating
-- webhook's answer carries it (klua.internal.webhook): both documents are
-- plain values as klua.json.decode builds them (arrays marked with
-- klua.json.array_mt, null as klua.null).
--
-- Objects are compared member by member: a member gone is a "remove", a
-- new one an "add", a changed one a "replace" (or, for two objects, the
-- patch between them). Arrays are not diffed element by element: an array
-- that differs in any way is replaced whole, which is always correct
-- (RFC 6902's array indexes shift as operations apply, a source of wrong
-- patches) and costs only its size. Members are visited in sorted order,
-- so the same change gives the same patch. Paths are JSON Pointers (RFC
-- 6901): "~" is written "~0" and "/" "~1".
local core = require('klua.core')
local util = require('klua.internal.objutil')

local M = {}

--- A member's name as a JSON Pointer reference token (RFC 6901 section 3).
function M.token(name)
  return (tostring(name):gsub('~', '~0'):gsub('/', '~1'))
end

--- Whether two decoded JSON values are equal (objects whatever their
-- members' order, 1 and 1.0 alike, as JSON numbers are).
function M.equal(a, b)
  local ta, tb = core.type(a), core.type(b)
  if ta ~= tb then return false end
  if ta == 'object' then
    for k, v in pairs(a) do
      if b[k] == nil or not M.equal(v, b[k]) then return false end
    end
    for k in pairs(b) do
      if a[k] == nil then return false end
    end
    return true
  elseif ta == 'array' then
    if #a ~= #b then return false end
    for i = 1, #a do
      if not M.equal(a[i], b[i]) then return false end
    end
    return true
  end
  return a == b
end

local function diff(a, b, path, ops)
  if core.type(a) == 'object' and core.type(b) == 'object' then
    for _, k in ipairs(util.sorted_keys(a)) do
      if b[k] == nil then ops[#ops + 1] = { op = 'remove', path = path .. '/' .. M.token(k) } end
    end
    for _, k in ipairs(util.sorted_keys(b)) do
      local p = path .. '/' .. M.token(k)
      if a[k] == nil then
        ops[#ops + 1] = { op = 'add', path = p, value = b[k] }
      else
        diff(a[k], b[k], p, ops)
      end
    end
  elseif not M.equal(a, b) then
    ops[#ops + 1] = { op = 'replace', path = path, value = b }
  end
end

--- The operations that turn document `from` into document `to`, a list
-- (empty when they are equal) of {op =, path =, value =}.
function M.diff(from, to)
  local ops = setmetatable({}, core.json.array_mt)
  diff(from, to, '', ops)
  return ops
end

local alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'

--- s in standard base64 with padding (RFC 4648 section 4), as Go's
-- encoding/json writes a []byte such as AdmissionResponse.patch.
function M.base64(s)
  local out = {}
  for i = 1, #s, 3 do
    local a, b, c = s:byte(i, i + 2)
    local n = a * 65536 + (b or 0) * 256 + (c or 0)
    local q = {}
    for j = 1, 4 do
      local v = (n >> (6 * (4 - j))) & 63
      q[j] = alphabet:sub(v + 1, v + 1)
    end
    if not b then q[3] = '=' end
    if not c then q[4] = '=' end
    out[#out + 1] = table.concat(q)
  end
  return table.concat(out)
end

return M
