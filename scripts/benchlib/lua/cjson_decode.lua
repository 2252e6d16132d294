--- Reference point: lua-cjson decoding the watch stream's lines in a plain
-- lua5.4 loop, reading the same three fields as scenario handler-3-fields (a).
--
--   lua5.4 cjson_decode.lua EVENTS.ndjson COUNT
local cjson = require('cjson')

local path, count = arg[1], tonumber(arg[2])
assert(path and count, 'usage: lua5.4 cjson_decode.lua EVENTS.ndjson COUNT')
local lines = {}
for line in io.lines(path) do
  lines[#lines + 1] = line
  if #lines == count then break end
end

local decode = cjson.decode
local started = os.clock()
for i = 1, #lines do
  local obj = decode(lines[i]).object
  local md = obj.metadata
  local _ = md.name, md.namespace, obj.status.phase
end
io.stdout:write(('bench done seen=%d cpu=%.6f\n'):format(#lines, os.clock() - started))
