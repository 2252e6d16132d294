--- kubectl's human-readable output for `klua watch`: the columns of the
-- server's Table form as kubectl get prints them (headers in capitals,
-- those of priority > 0 only with -o wide, cells as its table printer
-- writes them), NAME and AGE for objects the server gives no Table for (AGE
-- as kubectl words a duration), custom-columns, and the tab writer that
-- aligns them (kubectl's: cells padded by 3 spaces to at least 6 columns,
-- widths remembered from one flush to the next, so later rows line up with
-- the first ones).
--
-- The cells come from the server (kube-apiserver's table convertors, a
-- CRD's additionalPrinterColumns): `klua watch` lists and watches the Table
-- form with whole objects (includeObject=Object), so that -e, -L and
-- --sort-by read the objects the rows carry.
local jsonpath = require('klua.cmd.jsonpath')

local M = {}

-- ---- values ------------------------------------------------------------------

local function get(obj, ...)
  local v = obj
  for i = 1, select('#', ...) do
    local k = select(i, ...)
    local t = type(v)
    if t ~= 'table' and t ~= 'userdata' then return nil end
    v = klua.get(v, k)
    if v == nil or v == klua.null then return nil end
  end
  return v
end
-- Seconds since 1970 of an RFC 3339 time in UTC ("2026-12-01T13:19:21Z"),
-- or nil (days from the civil date, so that the local time zone plays no part).
function M.epoch(stamp)
  if type(stamp) ~= 'string' then return nil end
  local y, mo, d, h, mi, s = stamp:match('^(%d%d%d%d)%-(%d%d)%-(%d%d)T(%d%d):(%d%d):(%d%d)')
  if not y then return nil end
  y, mo, d = tonumber(y), tonumber(mo), tonumber(d)
  y = mo <= 2 and y - 1 or y
  local era = y // 400
  local yoe = y - era * 400
  local doy = (153 * (mo + (mo > 2 and -3 or 9)) + 2) // 5 + d - 1
  local doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
  local days = era * 146097 + doe - 719468
  return days * 86400 + tonumber(h) * 3600 + tonumber(mi) * 60 + tonumber(s)
end

-- n of a unit and the rest in the next smaller one, the rest left out when 0.
local function two_units(n, unit, rest, rest_unit)
  return rest == 0 and (n .. unit) or (n .. unit .. rest .. rest_unit)
end

--- A duration in seconds as kubectl prints an age (apimachinery's
-- duration.HumanDuration): 45s, 3m20s, 2h5m, 3d4h, 2y.
function M.human_duration(seconds)
  if seconds < -1 then return '<invalid>' end
  seconds = math.max(math.floor(seconds), 0)
  if seconds < 120 then return seconds .. 's' end
  local minutes = seconds // 60
  if minutes < 10 then return two_units(minutes, 'm', seconds % 60, 's') end
  if minutes < 180 then return minutes .. 'm' end
  local hours = minutes // 60
  if hours < 8 then return two_units(hours, 'h', minutes % 60, 'm') end
  if hours < 48 then return hours .. 'h' end
  if hours < 192 then return two_units(hours // 24, 'd', hours % 24, 'h') end
  if hours < 24 * 365 * 2 then return (hours // 24) .. 'd' end
  return (hours // (24 * 365)) .. 'y'
end

--- The age of a timestamp now, or "<unknown>".
function M.age(stamp, now)
  local t = M.epoch(stamp)
  if not t then return '<unknown>' end
  return M.human_duration((now or os.time()) - t)
end

local function age_of(obj, now) return M.age(get(obj, 'metadata', 'creationTimestamp'), now) end

local function sorted_pairs_text(t)
  if not t then return nil end
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys)
  for i, k in ipairs(keys) do keys[i] = k .. '=' .. tostring(t[k]) end
  return #keys > 0 and table.concat(keys, ',') or nil
end

-- ---- columns -----------------------------------------------------------------

--- A Table cell as kubectl's table printer writes it: a string up to its
-- first line break (then "..."), nothing for null, anything else as Go's
-- fmt.Sprint prints it (1e+06, map[k:v]).
function M.cell_text(v)
  if v == nil or v == klua.null then return '' end
  if type(v) == 'string' then
    local cut = v:find('[\f\n\r]')
    return cut and (v:sub(1, cut - 1) .. '...') or v
  end
  return jsonpath.sprint(type(v) == 'userdata' and klua.copy(v) or v)
end

--- The columns of a Table (its columnDefinitions) as kubectl get prints
-- them: each name in capitals, the columns of priority > 0 only when wide.
-- Returns { headers = {...}, cells = function(obj, row) -> {...} }, row
-- being the cells the server sent for obj (NAME alone, then blanks, when
-- it sent none).
function M.server_columns(definitions, wide)
  local headers, keep = {}, {}
  for i, c in ipairs(definitions) do
    if wide or (tonumber(get(c, 'priority')) or 0) == 0 then
      headers[#headers + 1] = tostring(get(c, 'name') or ''):upper()
      keep[#keep + 1] = i
    end
  end
  return { headers = headers, cells = function(obj, row)
    local out = {}
    for i, k in ipairs(keep) do out[i] = row and M.cell_text(row[k]) or '' end
    if not row then out[1] = get(obj, 'metadata', 'name') or '' end
    return out
  end }
end

--- NAME and AGE: what kubectl prints for objects the server gives no Table
-- for (its default handler). Returns { headers, cells = function(obj, row, now) }.
function M.default_columns()
  return { headers = { 'NAME', 'AGE' }, cells = function(obj, _, now)
    return { get(obj, 'metadata', 'name') or '', age_of(obj, now) }
  end }
end

--- kubectl's LABELS cell: key=value by key, comma-separated, or <none>.
function M.labels_text(obj)
  local labels = get(obj, 'metadata', 'labels')
  return sorted_pairs_text(labels and klua.copy(labels)) or '<none>'
end

--- The header of a -L column: the key's last path segment, in capitals.
function M.label_header(key) return (key:match('[^/]*$')):upper() end

-- ---- custom columns ------------------------------------------------------------

-- kubectl's relaxed JSONPath: ".a.b", "a.b" and "{.a.b}" name the same path.
local function relaxed(path)
  local inner = path:match('^{(.*)}$') or path
  if inner:sub(1, 1) ~= '.' and inner:sub(1, 1) ~= '$' and inner:sub(1, 1) ~= '@' then inner = '.' .. inner end
  return '{' .. inner .. '}'
end

--- Parses -o custom-columns=SPEC ("NAME:.metadata.name,PHASE:.status.phase").
-- Returns { headers, templates }, or nil and a message as kubectl words it.
function M.custom_columns(spec)
  if spec == nil or spec == '' then return nil, 'custom-columns format specified but no custom columns given' end
  local headers, templates = {}, {}
  for part in (spec .. ','):gmatch('([^,]*),') do
    local header, path = part:match('^([^:]*):(.+)$')
    if not header then
      return nil, ('unexpected custom-columns spec: %s, expected <header>:<json-path-expr>'):format(part)
    end
    local t, err = jsonpath.parse(relaxed(path))
    if not t then return nil, err end
    headers[#headers + 1] = header
    templates[#templates + 1] = t
  end
  return { headers = headers, templates = templates }
end

--- A custom-columns row: each path's values joined by commas, or <none>;
-- each value as kubectl's custom-columns printer writes it, with Go's %v
-- (map[app:web], [a b], <nil>, 1e+06).
function M.custom_cells(columns, value)
  local out = {}
  for i, t in ipairs(columns.templates) do
    local values = t:values(value)
    local texts = {}
    for j, v in ipairs(values or {}) do texts[j] = jsonpath.sprint(v) end
    out[i] = #texts > 0 and table.concat(texts, ',') or '<none>'
  end
  return out
end

-- ---- the tab writer ----------------------------------------------------------------

local Tabs = {}
Tabs.__index = Tabs

--- A tab writer as kubectl's: every cell but a row's last padded to its
-- column's width, the widest cell plus 3 spaces and at least 6; a width
-- once reached is kept for later rows (kubectl's RememberWidths).
function M.tabs() return setmetatable({ widths = {} }, Tabs) end

--- The rows (lists of cell texts) as aligned lines, widths grown to fit them.
function Tabs:format(rows)
  local widths = self.widths
  for _, row in ipairs(rows) do
    for i = 1, #row - 1 do
      local w = (utf8.len(row[i]) or #row[i]) + 3
      if w < 6 then w = 6 end
      if not widths[i] or w > widths[i] then widths[i] = w end
    end
  end
  local lines = {}
  for n, row in ipairs(rows) do
    local parts = {}
    for i = 1, #row - 1 do
      parts[i] = row[i] .. (' '):rep(widths[i] - (utf8.len(row[i]) or #row[i]))
    end
    parts[#row] = row[#row]
    lines[n] = table.concat(parts)
  end
  return lines
end

return M
