--- CBOR (RFC 8949) for the specs: what apimachinery's encoder writes for a JSON-ish Lua
-- value (runtime/serializer/cbor/internal/modes/encode.go): strings as byte strings, the
-- shortest integers, doubles, definite lengths. M.item(v) is self-described (tag 55799), as
-- every answer and watch event kube-apiserver writes in CBOR.
local M = {}

-- A CBOR header of major type mt with argument n, in its shortest form.
function M.head(mt, n)
  if n < 24 then return string.char(mt << 5 | n) end
  if n < 0x100 then return string.char(mt << 5 | 24, n) end
  if n < 0x10000 then return string.char(mt << 5 | 25) .. string.pack('>I2', n) end
  return string.char(mt << 5 | 26) .. string.pack('>I4', n)
end

-- The CBOR apimachinery writes for a JSON-ish Lua value: strings as byte
-- strings; a table with [1] an array, else a map with sorted keys.
function M.encode(v)
  local t = type(v)
  if t == 'string' then return M.head(2, #v) .. v end
  if math.type(v) == 'integer' then return v >= 0 and M.head(0, v) or M.head(1, -1 - v) end
  if t == 'number' then return '\xfb' .. string.pack('>d', v) end
  if t == 'boolean' then return v and '\xf5' or '\xf4' end
  if v == nil then return '\xf6' end
  if v[1] ~= nil then
    local parts = { M.head(4, #v) }
    for _, x in ipairs(v) do parts[#parts + 1] = M.encode(x) end
    return table.concat(parts)
  end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = k end
  table.sort(keys)
  local parts = { M.head(5, #keys) }
  for _, k in ipairs(keys) do parts[#parts + 1] = M.encode(k) .. M.encode(v[k]) end
  return table.concat(parts)
end

--- v as one self-described CBOR data item.
function M.item(v) return '\xd9\xd9\xf7' .. M.encode(v) end

return M
