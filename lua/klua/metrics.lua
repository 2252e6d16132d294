--- `klua.metrics`: counters, gauges and histograms in the Prometheus text
-- exposition format (version 0.0.4), served on `/metrics` by
-- `--metrics-bind-address`.
--
--   local handled = klua.metrics.counter {
--     name = 'podset_pods_created_total', help = 'Pods created.', labels = { 'namespace' },
--   }
--   handled:inc { namespace = 'default' }
--
-- Names are checked when a metric is declared, as Prometheus would reject
-- them: a metric name matches [a-zA-Z_:][a-zA-Z0-9_:]*, a label name
-- [a-zA-Z_][a-zA-Z0-9_]* and may not start with "__" nor be "le" on a
-- histogram; a counter's name ends in "_total", as promtool asks. Every
-- sample of a metric carries exactly its declared labels.
local object = require('klua.internal.object')

local M = {}

-- Prometheus's default buckets (client_golang's DefBuckets), in seconds.
M.default_buckets = { 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10 }

local families = {}   -- declared metrics, in declaration order
local by_name = {}
local collectors = {} -- functions adding the runtime's own families at scrape time

local function check_name(name)
  if type(name) ~= 'string' or not name:match('^[a-zA-Z_:][a-zA-Z0-9_:]*$') then
    error(('metric name %q is not valid in Prometheus: use letters, digits, "_" and ":", not starting with a digit')
      :format(tostring(name)), 4)
  end
end

local function check_labels(labels, kind)
  local seen = {}
  for i, l in ipairs(labels) do
    if type(l) ~= 'string' or not l:match('^[a-zA-Z_][a-zA-Z0-9_]*$') or l:sub(1, 2) == '__' then
      error(('label name %q is not valid in Prometheus: use letters, digits and "_", not starting with a digit or "__"')
        :format(tostring(l)), 4)
    end
    if kind == 'histogram' and l == 'le' then error('a histogram may not have a label named "le"', 4) end
    if seen[l] then error(('label %q is declared twice'):format(l), 4) end
    seen[l] = true
    labels[i] = l
  end
end

local function escape_label(v)
  return (tostring(v):gsub('[\\\n"]', { ['\\'] = '\\\\', ['\n'] = '\\n', ['"'] = '\\"' }))
end

local function escape_help(v)
  return (v:gsub('[\\\n]', { ['\\'] = '\\\\', ['\n'] = '\\n' }))
end

-- Formats a sample value as Prometheus reads floats: integers without a
-- fraction, +Inf, -Inf and NaN by name, and other numbers in the fewest
-- digits that read back the same, as client_golang writes them (Go's
-- strconv 'g' with precision -1): a bucket's `le` label is then the same
-- string as controller-runtime's.
local function number(v)
  if v ~= v then return 'NaN' end
  if v == math.huge then return '+Inf' end
  if v == -math.huge then return '-Inf' end
  if math.type(v) == 'integer' or (v == math.floor(v) and math.abs(v) < 2 ^ 53) then
    return string.format('%d', v)
  end
  for digits = 15, 16 do
    local short = string.format('%.' .. digits .. 'g', v)
    if tonumber(short) == v then return short end
  end
  return string.format('%.17g', v)
end

local Metric = {}
Metric.__index = Metric

-- The label values of a sample, in declared order, as one key.
function Metric:_series(values)
  values = values or {}
  if type(values) ~= 'table' then
    error(('%s: labels are given as a table such as {%s = "..."}'):format(self.name, self.labels[1] or 'name'), 3)
  end
  local parts = {}
  for i, l in ipairs(self.labels) do
    local v = values[l]
    if v == nil then error(('%s: label %q is missing'):format(self.name, l), 3) end
    parts[i] = tostring(v)
  end
  for k in pairs(values) do
    local known = false
    for _, l in ipairs(self.labels) do if l == k then known = true end end
    if not known then error(('%s has no label %q'):format(self.name, tostring(k)), 3) end
  end
  local key = table.concat(parts, '\0')
  local s = self.samples[key]
  if not s then
    s = { values = parts, value = 0 }
    if self.kind == 'histogram' then
      s.counts, s.sum, s.count = {}, 0, 0
      for i = 1, #self.buckets do s.counts[i] = 0 end
    end
    self.samples[key] = s
    self.order[#self.order + 1] = key
  end
  return s
end

local function amount(n, name)
  if n == nil then return 1 end
  if type(n) ~= 'number' then error(name .. ': the amount must be a number', 3) end
  return n
end

--- Adds 1 to a counter or gauge.
-- @param labels optional: the series' label values, {label = value}
-- @usage
-- reconciles:inc { result = 'ok' }
function Metric:inc(labels) self:add(1, labels) end
--- Adds n to a counter (n >= 0) or gauge.
-- @param n a number
-- @param labels optional: the series' label values
-- @raise when n is not a number, or negative for a counter
-- @usage
-- bytes:add(#body)
function Metric:add(n, labels)
  n = amount(n, self.name)
  if self.kind == 'counter' and n < 0 then error(self.name .. ': a counter only goes up', 2) end
  local s = self:_series(labels)
  s.value = s.value + n
end
--- Sets a gauge to v.
-- @param v a number
-- @param labels optional: the series' label values
-- @raise when the metric is not a gauge or v not a number
-- @usage
-- depth:set(q:len())
function Metric:set(v, labels)
  if self.kind ~= 'gauge' then error(self.name .. ': only a gauge can be set', 2) end
  self:_series(labels).value = amount(v, self.name)
end
--- Subtracts 1 from a gauge.
-- @param labels optional: the series' label values
-- @raise when the metric is not a gauge
-- @usage
-- in_flight:dec()
function Metric:dec(labels) self:sub(1, labels) end
--- Subtracts n from a gauge.
-- @param n a number
-- @param labels optional: the series' label values
-- @raise when the metric is not a gauge or n not a number
-- @usage
-- free:sub(used)
function Metric:sub(n, labels)
  if self.kind ~= 'gauge' then error(self.name .. ': only a gauge goes down', 2) end
  local s = self:_series(labels)
  s.value = s.value - amount(n, self.name)
end
--- Counts v in a histogram's buckets.
-- @param v a number
-- @param labels optional: the series' label values
-- @raise when the metric is not a histogram or v not a number
-- @usage
-- duration:observe(klua.stats().lua_memory)
function Metric:observe(v, labels)
  if self.kind ~= 'histogram' then error(self.name .. ': only a histogram observes', 2) end
  v = amount(v, self.name)
  local s = self:_series(labels)
  for i, le in ipairs(self.buckets) do
    if v <= le then s.counts[i] = s.counts[i] + 1 end
  end
  s.sum, s.count = s.sum + v, s.count + 1
end

-- What klua.metrics.counter/gauge/histogram return: klua.metric objects
-- in front of the family.
local _, handle = object.class('metric', Metric, { 'inc', 'add', 'set', 'dec', 'sub', 'observe' },
  function(m) return ('%s(%s)'):format(m.kind, m.name) end)

local function declare(kind, opts)
  if type(opts) ~= 'table' then error(('klua.metrics.%s takes a table such as {name = "...", help = "..."}'):format(kind), 3) end
  check_name(opts.name)
  if kind == 'counter' and not opts.name:match('_total$') then
    error(('counter %q: end its name in "_total", as Prometheus names counters'):format(opts.name), 3)
  end
  if type(opts.help) ~= 'string' or opts.help == '' then
    error(('metric %s needs help = "what it measures"'):format(opts.name), 3)
  end
  if by_name[opts.name] then error(('metric %s is declared already'):format(opts.name), 3) end
  local labels = {}
  for i, l in ipairs(opts.labels or {}) do labels[i] = l end
  check_labels(labels, kind)
  local m = setmetatable({ kind = kind, name = opts.name, help = opts.help, labels = labels,
    samples = {}, order = {} }, Metric)
  if kind == 'histogram' then
    m.buckets = {}
    local prev = -math.huge
    for i, b in ipairs(opts.buckets or M.default_buckets) do
      if type(b) ~= 'number' or b <= prev then
        error(('histogram %s: buckets must be increasing numbers'):format(opts.name), 3)
      end
      m.buckets[i], prev = b, b
    end
  end
  families[#families + 1] = m
  by_name[m.name] = m
  return handle(m)
end

--- Declares a counter: opts.name (ending in "_total"), opts.help,
-- opts.labels (a list of label names). Returns it (c:inc, c:add).
-- @param opts {name=, help=, labels=}
-- @return the counter
-- @raise when the name is not valid, taken, or lacks "_total", or help is missing
-- @usage
-- local reconciles = klua.metrics.counter { name = 'podset_reconciles_total', help = 'Reconciles.', labels = { 'result' } }
-- reconciles:inc { result = 'ok' }
function M.counter(opts) return declare('counter', opts) end
--- Declares a gauge (g:set, g:inc, g:dec, g:add, g:sub).
-- @param opts {name=, help=, labels=}
-- @return the gauge
-- @raise when the name is not valid or taken, or help is missing
-- @usage
-- local depth = klua.metrics.gauge { name = 'podset_pending', help = 'Pods not yet ready.' }
-- depth:set(3)
function M.gauge(opts) return declare('gauge', opts) end
--- Declares a histogram; opts.buckets: increasing upper bounds
-- (default: Prometheus's, 5 ms to 10 s). Returns it (h:observe).
-- @param opts {name=, help=, labels=, buckets=}
-- @return the histogram
-- @raise when the name is not valid or taken, help is missing, or buckets do not increase
-- @usage
-- local took = klua.metrics.histogram { name = 'podset_sync_seconds', help = 'Sync time.' }
-- took:observe(0.12)
function M.histogram(opts) return declare('histogram', opts) end

local function labels_text(names, values, extra_name, extra_value)
  local parts = {}
  for i, l in ipairs(names) do parts[#parts + 1] = ('%s="%s"'):format(l, escape_label(values[i])) end
  if extra_name then parts[#parts + 1] = ('%s="%s"'):format(extra_name, extra_value) end
  if #parts == 0 then return '' end
  return '{' .. table.concat(parts, ',') .. '}'
end

local function write_family(out, m)
  out[#out + 1] = ('# HELP %s %s'):format(m.name, escape_help(m.help))
  out[#out + 1] = ('# TYPE %s %s'):format(m.name, m.kind)
  for _, key in ipairs(m.order) do
    local s = m.samples[key]
    if m.kind == 'histogram' then
      for i, le in ipairs(m.buckets) do
        out[#out + 1] = ('%s_bucket%s %s'):format(m.name, labels_text(m.labels, s.values, 'le', number(le)), number(s.counts[i]))
      end
      out[#out + 1] = ('%s_bucket%s %s'):format(m.name, labels_text(m.labels, s.values, 'le', '+Inf'), number(s.count))
      out[#out + 1] = ('%s_sum%s %s'):format(m.name, labels_text(m.labels, s.values), number(s.sum))
      out[#out + 1] = ('%s_count%s %s'):format(m.name, labels_text(m.labels, s.values), number(s.count))
    else
      out[#out + 1] = ('%s%s %s'):format(m.name, labels_text(m.labels, s.values), number(s.value))
    end
  end
end

--- Registers fn(add) to run at every scrape: it adds families computed
-- then, each as add{name=, help=, kind=, labels=, samples = {{values, value}}}.
-- The runtime's informers, queues and controllers report this way.
-- @param fn function(add), called at every scrape
-- @usage
-- klua.metrics.collector(function(add)
--   add { name = 'podset_cached', help = 'Cached PodSets.', kind = 'gauge', samples = { { {}, #podsets:list() } } }
-- end)
function M.collector(fn) collectors[#collectors + 1] = fn end

--- The text of every metric, as `/metrics` serves it.
-- @return the exposition text
-- @usage
-- io.write(klua.metrics.expose())
function M.expose()
  local out = {}
  local seen = {}
  for _, m in ipairs(families) do
    write_family(out, m)
    seen[m.name] = true
  end
  for _, fn in ipairs(collectors) do
    fn(function(f)
      if seen[f.name] then return end
      seen[f.name] = true
      local m = setmetatable({ kind = f.kind, name = f.name, help = f.help, labels = f.labels or {},
        buckets = f.buckets, samples = {}, order = {} }, Metric)
      for i, s in ipairs(f.samples or {}) do
        local key = tostring(i)
        m.samples[key] = s
        m.order[#m.order + 1] = key
      end
      write_family(out, m)
    end)
  end
  out[#out + 1] = ''
  return table.concat(out, '\n')
end

return M
