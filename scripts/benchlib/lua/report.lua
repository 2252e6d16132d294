--- Output of the benchmark scripts: one line per milestone on stdout,
-- `bench NAME key=value ...`, which scripts/bench parses.
local M = {}

--- The kB fields of /proc/self/status (VmRSS, VmHWM, ...).
function M.memory()
  local out = {}
  local f = io.open('/proc/self/status')
  if not f then return out end
  for line in f:lines() do
    local key, kb = line:match('^(%w+):%s+(%d+) kB$')
    if key then out[key] = tonumber(kb) end
  end
  f:close()
  return out
end

--- Prints `bench name k=v ...` for the table of fields and flushes it.
function M.emit(name, fields)
  local parts = { 'bench', name }
  local keys = {}
  for k in pairs(fields) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do
    local v = fields[k]
    parts[#parts + 1] = k .. '=' .. (math.type(v) == 'float' and ('%.6f'):format(v) or tostring(v))
  end
  io.stdout:write(table.concat(parts, ' '), '\n')
  io.stdout:flush()
end

return M
