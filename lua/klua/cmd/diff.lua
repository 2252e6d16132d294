--- What changed between two versions of an object, for `klua watch --diff`:
-- a list of changes, each printed as a dotted path with its old and new
-- value (`status.phase: "Pending" -> "Running"`) or as an RFC 6902 JSON
-- Patch operation ({"op":"replace","path":"/status/phase","value":"Running"}).
--
--   local diff = require('klua.cmd.diff')
--   local changes = diff.changes(klua.copy(old), klua.copy(new))
--   io.write(diff.text(changes))
--
-- Objects are compared member by member and arrays element by element (by
-- index: an element inserted in the middle shows as every later one
-- replaced, and elements past the end of the shorter one as added or
-- removed). A value whose JSON type differs is replaced whole.
--
-- Values are what klua.copy and klua.json.decode return: an array is a
-- table with klua.json.array_mt (or keys 1..n), JSON null is klua.json.null.
-- A state without klua passes those as opts ({array_mt=, null=}).
local jsonpath = require('klua.cmd.jsonpath')

local M = {}

local kinds, is_array, sorted_keys = jsonpath.kinds, jsonpath.is_array, jsonpath.sorted_keys

-- The JSON type of v: 'object', 'array' or 'scalar' (null included).
local function shape(v, array_mt)
  if type(v) ~= 'table' then return 'scalar' end
  return is_array(v, array_mt) and 'array' or 'object'
end

local function same_scalar(a, b)
  if type(a) == 'number' and type(b) == 'number' then return a == b and math.type(a) == math.type(b) end
  return a == b
end

local function with(path, step)
  local p = { table.unpack(path) }
  p[#p + 1] = step
  return p
end

local function walk(a, b, path, out, array_mt)
  local sa, sb = shape(a, array_mt), shape(b, array_mt)
  if sa ~= sb or sa == 'scalar' then
    if sa ~= sb or not same_scalar(a, b) then out[#out + 1] = { path = path, old = a, new = b, op = 'replace' } end
    return
  end
  if sa == 'array' then
    local na, nb = #a, #b
    for i = 1, math.min(na, nb) do walk(a[i], b[i], with(path, i - 1), out, array_mt) end
    for i = na + 1, nb do out[#out + 1] = { path = with(path, i - 1), new = b[i], op = 'add' } end
    -- From the end, so that the operations apply one after the other.
    for i = na, nb + 1, -1 do out[#out + 1] = { path = with(path, i - 1), old = a[i], op = 'remove' } end
    return
  end
  local keys, seen = sorted_keys(a), {}
  for _, k in ipairs(sorted_keys(b)) do
    if not seen[k] and a[k] == nil then keys[#keys + 1] = k end
    seen[k] = true
  end
  table.sort(keys)
  for _, k in ipairs(keys) do
    local x, y = a[k], b[k]
    if x == nil then
      out[#out + 1] = { path = with(path, k), new = y, op = 'add' }
    elseif y == nil then
      out[#out + 1] = { path = with(path, k), old = x, op = 'remove' }
    else
      walk(x, y, with(path, k), out, array_mt)
    end
  end
end

-- The fields that change on every write or hold the writers' bookkeeping:
-- left out of the comparison unless all is asked for.
local NOISE = { 'resourceVersion', 'managedFields', 'generation' }

--- The changes from old to new, two decoded objects (klua.copy's), in path
-- order: a list of { op = 'add'|'remove'|'replace', path = {step, ...},
-- old =, new = }, a step being a member name or a 0-based array index.
-- Unless opts.all, metadata.resourceVersion, metadata.managedFields and
-- metadata.generation are not compared (old and new are changed: those
-- members are removed). opts.array_mt, opts.null: as klua.json's.
function M.changes(old, new, opts)
  local array_mt = kinds(opts)
  if not (opts and opts.all) then
    for _, obj in ipairs({ old, new }) do
      local meta = type(obj) == 'table' and obj.metadata
      if type(meta) == 'table' then
        for _, k in ipairs(NOISE) do meta[k] = nil end
      end
    end
  end
  local out = {}
  walk(old, new, {}, out, array_mt)
  return out
end

--- A path as a dotted path: `.name` for a member whose name is a word,
-- `["app.kubernetes.io/name"]` for another, `[0]` for an index; without the
-- leading dot.
function M.dotted(path)
  local parts = {}
  for _, step in ipairs(path) do
    if type(step) == 'number' then
      parts[#parts + 1] = '[' .. step .. ']'
    elseif step:match('^[%a_][%w_]*$') then
      parts[#parts + 1] = '.' .. step
    else
      parts[#parts + 1] = '[' .. jsonpath.json(step) .. ']'
    end
  end
  return (table.concat(parts):gsub('^%.', ''))
end

--- A path as an RFC 6901 JSON Pointer ("/metadata/labels/app.kubernetes.io~1name").
function M.pointer(path)
  local parts = {}
  for i, step in ipairs(path) do
    parts[i] = '/' .. (type(step) == 'number' and tostring(step) or step:gsub('~', '~0'):gsub('/', '~1'))
  end
  return table.concat(parts)
end

--- The changes one a line, indented by two spaces: `path: old -> new`, each
-- value as JSON on one line, (none) for a member or element that is not there.
function M.text(changes, opts)
  local lines = {}
  local function value(v, present)
    if not present then return '(none)' end
    return jsonpath.json(v, nil, opts)
  end
  for i, c in ipairs(changes) do
    lines[i] = ('  %s: %s -> %s\n'):format(M.dotted(c.path), value(c.old, c.op ~= 'add'), value(c.new, c.op ~= 'remove'))
  end
  return table.concat(lines)
end

--- The changes as an RFC 6902 JSON Patch: a list of {op=, path=, value=}
-- (no value for remove), for klua.json or jsonpath.json to write.
function M.patch(changes, opts)
  local _, null = kinds(opts)
  local ops = {}
  for i, c in ipairs(changes) do
    local op = { op = c.op, path = M.pointer(c.path) }
    if c.op ~= 'remove' then
      op.value = c.new
      if op.value == nil then op.value = null end
    end
    ops[i] = op
  end
  return ops
end

return M
