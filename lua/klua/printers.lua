--- kubectl's human-readable output for `klua watch`: the columns kubectl get
-- prints for a kind (kube-apiserver's table convertors, pkg/printers/
-- internalversion/printers.go, and a CRD's additionalPrinterColumns), AGE
-- as kubectl words a duration, custom-columns, and the tab writer that
-- aligns them (kubectl's: cells padded by 3 spaces to at least 6 columns,
-- widths remembered from one flush to the next, so later rows line up with
-- the first ones).
--
-- The cells are computed here from the full object rather than read from
-- the server's Table form: `klua watch` keeps one informer of full objects,
-- which -e, -o json/yaml/jsonpath and --sort-by need, and a second watch in
-- Table form could not be ordered with it. README ("klua watch") lists the
-- kinds printed this way.
local jsonpath = require 'klua.jsonpath'

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
M.get = get

local function len_of(v)
  if v == nil then return 0 end
  local n = 0
  for _ in pairs(v) do n = n + 1 end
  return n
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

--- A duration in seconds as kubectl prints an age (apimachinery's
-- duration.HumanDuration): 45s, 3m20s, 2h5m, 3d4h, 2y.
function M.human_duration(seconds)
  if seconds < -1 then return '<invalid>' end
  seconds = math.max(math.floor(seconds), 0)
  if seconds < 120 then return seconds .. 's' end
  local minutes = seconds // 60
  if minutes < 10 then
    local s = seconds % 60
    return s == 0 and (minutes .. 'm') or (minutes .. 'm' .. s .. 's')
  end
  if minutes < 180 then return minutes .. 'm' end
  local hours = minutes // 60
  if hours < 8 then
    local m = minutes % 60
    return m == 0 and (hours .. 'h') or (hours .. 'h' .. m .. 'm')
  end
  if hours < 48 then return hours .. 'h' end
  if hours < 192 then
    local h = hours % 24
    return h == 0 and ((hours // 24) .. 'd') or ((hours // 24) .. 'd' .. h .. 'h')
  end
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

-- ---- kinds -------------------------------------------------------------------

local function pod_status(pod)
  local reason = get(pod, 'status', 'reason') or get(pod, 'status', 'phase') or ''
  local init_statuses = get(pod, 'status', 'initContainerStatuses')
  local n_init = len_of(get(pod, 'spec', 'initContainers'))
  local initializing = false
  if init_statuses then
    for i, cs in ipairs(init_statuses) do
      local term, waiting = get(cs, 'state', 'terminated'), get(cs, 'state', 'waiting')
      if term and get(term, 'exitCode') == 0 then
        -- this init container is done
      elseif term then
        local r = get(term, 'reason')
        if not r then
          r = get(term, 'signal') and ('Signal:' .. get(term, 'signal')) or ('ExitCode:' .. (get(term, 'exitCode') or 0))
        end
        reason, initializing = 'Init:' .. r, true
        break
      elseif waiting and get(waiting, 'reason') and get(waiting, 'reason') ~= 'PodInitializing' then
        reason, initializing = 'Init:' .. get(waiting, 'reason'), true
        break
      else
        reason, initializing = ('Init:%d/%d'):format(i - 1, n_init), true
        break
      end
    end
  end
  if not initializing then
    local running = false
    local statuses = get(pod, 'status', 'containerStatuses')
    local list = {}
    if statuses then for _, cs in ipairs(statuses) do list[#list + 1] = cs end end
    for i = #list, 1, -1 do
      local cs = list[i]
      local waiting, term = get(cs, 'state', 'waiting'), get(cs, 'state', 'terminated')
      if waiting and get(waiting, 'reason') then
        reason = get(waiting, 'reason')
      elseif term and get(term, 'reason') then
        reason = get(term, 'reason')
      elseif term then
        reason = get(term, 'signal') and ('Signal:' .. get(term, 'signal')) or ('ExitCode:' .. (get(term, 'exitCode') or 0))
      elseif get(cs, 'state', 'running') and get(cs, 'ready') then
        running = true
      end
    end
    if reason == 'Completed' and running then
      reason = 'NotReady'
      local conditions = get(pod, 'status', 'conditions')
      if conditions then
        for _, c in ipairs(conditions) do
          if get(c, 'type') == 'Ready' and get(c, 'status') == 'True' then reason = 'Running' end
        end
      end
    end
  end
  if get(pod, 'metadata', 'deletionTimestamp') then
    reason = get(pod, 'status', 'reason') == 'NodeLost' and 'Unknown' or 'Terminating'
  end
  return reason
end

local function pod_cells(pod, now)
  local statuses = get(pod, 'status', 'containerStatuses')
  local ready, restarts, last = 0, 0, nil
  if statuses then
    for _, cs in ipairs(statuses) do
      if get(cs, 'ready') then ready = ready + 1 end
      restarts = restarts + (get(cs, 'restartCount') or 0)
      local finished = get(cs, 'lastState', 'terminated', 'finishedAt')
      if finished and (not last or finished > last) then last = finished end
    end
  end
  local restarts_text = tostring(restarts)
  if last then restarts_text = ('%d (%s ago)'):format(restarts, M.age(last, now)) end
  local gates = get(pod, 'spec', 'readinessGates')
  local gate_text = '<none>'
  if gates and len_of(gates) > 0 then
    local true_conditions = {}
    for _, c in ipairs(get(pod, 'status', 'conditions') or {}) do
      if get(c, 'status') == 'True' then true_conditions[get(c, 'type') or ''] = true end
    end
    local met = 0
    for _, g in ipairs(gates) do if true_conditions[get(g, 'conditionType') or ''] then met = met + 1 end end
    gate_text = ('%d/%d'):format(met, len_of(gates))
  end
  return {
    ('%d/%d'):format(ready, len_of(get(pod, 'spec', 'containers'))), pod_status(pod), restarts_text, age_of(pod, now),
    get(pod, 'status', 'podIP') or '<none>', get(pod, 'spec', 'nodeName') or '<none>',
    get(pod, 'status', 'nominatedNodeName') or '<none>', gate_text,
  }
end

local function sorted_pairs_text(t)
  if not t then return nil end
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys)
  for i, k in ipairs(keys) do keys[i] = k .. '=' .. tostring(t[k]) end
  return #keys > 0 and table.concat(keys, ',') or nil
end

local function template_cells(obj)
  local names, images = {}, {}
  for _, c in ipairs(get(obj, 'spec', 'template', 'spec', 'containers') or {}) do
    names[#names + 1] = get(c, 'name') or ''
    images[#images + 1] = get(c, 'image') or ''
  end
  return table.concat(names, ','), table.concat(images, ','),
    sorted_pairs_text(get(obj, 'spec', 'selector', 'matchLabels')) or '<none>'
end

local function service_cells(obj, now)
  local kind = get(obj, 'spec', 'type') or 'ClusterIP'
  local external = table.concat(klua.copy(get(obj, 'spec', 'externalIPs') or {}), ',')
  if kind == 'ExternalName' then
    external = get(obj, 'spec', 'externalName') or ''
  elseif kind == 'LoadBalancer' then
    local ips = {}
    for _, i in ipairs(get(obj, 'status', 'loadBalancer', 'ingress') or {}) do
      ips[#ips + 1] = get(i, 'ip') or get(i, 'hostname') or ''
    end
    external = #ips > 0 and table.concat(ips, ',') or (external ~= '' and external or '<pending>')
  end
  local ports = {}
  for _, p in ipairs(get(obj, 'spec', 'ports') or {}) do
    local proto = get(p, 'protocol') or 'TCP'
    local node = get(p, 'nodePort')
    ports[#ports + 1] = node and ('%s:%s/%s'):format(get(p, 'port'), node, proto) or ('%s/%s'):format(get(p, 'port'), proto)
  end
  return { kind, get(obj, 'spec', 'clusterIP') or '<none>', external ~= '' and external or '<none>',
    #ports > 0 and table.concat(ports, ',') or '<none>', age_of(obj, now),
    sorted_pairs_text(get(obj, 'spec', 'selector')) or '<none>' }
end

local function wide(name) return { name = name, wide = true } end
local function col(name) return { name = name } end

-- Columns after NAME and the function giving their cells, by group/plural.
local KINDS = {
  ['/pods'] = { { col 'READY', col 'STATUS', col 'RESTARTS', col 'AGE', wide 'IP', wide 'NODE',
    wide 'NOMINATED NODE', wide 'READINESS GATES' }, pod_cells },
  ['/configmaps'] = { { col 'DATA', col 'AGE' }, function(o, now)
    return { len_of(get(o, 'data')) + len_of(get(o, 'binaryData')), age_of(o, now) }
  end },
  ['/secrets'] = { { col 'TYPE', col 'DATA', col 'AGE' }, function(o, now)
    return { get(o, 'type') or '', len_of(get(o, 'data')), age_of(o, now) }
  end },
  ['/namespaces'] = { { col 'STATUS', col 'AGE' }, function(o, now)
    return { get(o, 'status', 'phase') or '', age_of(o, now) }
  end },
  ['/services'] = { { col 'TYPE', col 'CLUSTER-IP', col 'EXTERNAL-IP', col 'PORT(S)', col 'AGE', wide 'SELECTOR' },
    service_cells },
  ['apps/deployments'] = { { col 'READY', col 'UP-TO-DATE', col 'AVAILABLE', col 'AGE', wide 'CONTAINERS',
    wide 'IMAGES', wide 'SELECTOR' }, function(o, now)
    local c, i, s = template_cells(o)
    return { ('%d/%d'):format(get(o, 'status', 'readyReplicas') or 0, get(o, 'spec', 'replicas') or 0),
      get(o, 'status', 'updatedReplicas') or 0, get(o, 'status', 'availableReplicas') or 0, age_of(o, now), c, i, s }
  end },
  ['apps/replicasets'] = { { col 'DESIRED', col 'CURRENT', col 'READY', col 'AGE', wide 'CONTAINERS', wide 'IMAGES',
    wide 'SELECTOR' }, function(o, now)
    local c, i, s = template_cells(o)
    return { get(o, 'spec', 'replicas') or 0, get(o, 'status', 'replicas') or 0, get(o, 'status', 'readyReplicas') or 0,
      age_of(o, now), c, i, s }
  end },
}

local function cell_text(v)
  if v == nil or v == klua.null then return '<none>' end
  if type(v) == 'string' then return v end
  return jsonpath.text(type(v) == 'userdata' and klua.copy(v) or v)
end

--- Whether the columns of this resource ({group=, resource=}) are known
-- here (otherwise they come from a CRD's additionalPrinterColumns or are
-- NAME and AGE).
function M.known(r) return KINDS[(r.group or '') .. '/' .. r.resource] ~= nil end

--- The columns of a resource as kubectl get prints them: NAME, then the
-- kind's own columns (the `wide` ones only with -o wide), or a CRD's
-- additionalPrinterColumns (`crd_columns`, as its version lists them), or
-- AGE. Returns { headers = {...}, cells = function(obj, now) -> {...} }.
function M.columns(r, opts)
  opts = opts or {}
  local names, cells = { 'NAME' }, nil
  local kind = KINDS[(r.group or '') .. '/' .. r.resource]
  local keep = {}
  if kind then
    for i, c in ipairs(kind[1]) do
      if opts.wide or not c.wide then
        names[#names + 1] = c.name
        keep[#keep + 1] = i
      end
    end
    cells = function(obj, now)
      local all, out = kind[2](obj, now), {}
      for i, k in ipairs(keep) do out[i] = all[k] end
      return out
    end
  elseif opts.crd_columns then
    local cols = {}
    for _, c in ipairs(opts.crd_columns) do
      if opts.wide or (get(c, 'priority') or 0) == 0 then
        local t = jsonpath.parse('{' .. (get(c, 'jsonPath') or '') .. '}')
        if t then
          cols[#cols + 1] = { template = t, type = get(c, 'type') }
          names[#names + 1] = tostring(get(c, 'name') or ''):upper()
        end
      end
    end
    cells = function(obj, now)
      local out, value = {}, nil
      for i, c in ipairs(cols) do
        local values = c.template:values(klua.copy(obj))
        value = values and values[1]
        if value ~= nil and c.type == 'date' and type(value) == 'string' then value = M.age(value, now) end
        out[i] = value
      end
      return out
    end
  else
    names[2] = 'AGE'
    cells = function(obj, now) return { age_of(obj, now) } end
  end
  return { headers = names, cells = function(obj, now)
    local out = cells(obj, now)
    for i = 1, #names - 1 do out[i] = cell_text(out[i]) end
    return out
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

--- A custom-columns row: each path's values joined by commas, or <none>.
function M.custom_cells(columns, value)
  local out = {}
  for i, t in ipairs(columns.templates) do
    local values = t:values(value)
    local texts = {}
    for j, v in ipairs(values or {}) do texts[j] = jsonpath.text(v) end
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
