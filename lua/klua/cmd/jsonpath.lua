--- kubectl's JSONPath templates (k8s.io/client-go/util/jsonpath), as
-- `kubectl get -o jsonpath=...` and `-o custom-columns=...` read them.
--
--   local jsonpath = require('klua.cmd.jsonpath')
--   local t = assert(jsonpath.parse('{range .items[*]}{.metadata.name}{"\n"}{end}'))
--   io.write(assert(t:render(list)))
--
-- A template is text with actions in braces: a path (`.a.b`, `$.a`, `@.a`,
-- `..name` at any depth, `.*` and `[*]`, `[n]`, `[-n]`, `[a:b:c]`, unions
-- `[0,2]` and `['a','b']`, filters `[?(@.x == "y")]` with == != < > <= >=
-- or `[?(@.x)]`), a string literal (`{"\n"}`), or `{range PATH}...{end}`,
-- which renders its body once per value PATH gives, with `@` that value.
-- The values of one action are joined by one space; strings print as they
-- are, numbers as Go's fmt prints them (1e+06 for a float), objects and
-- arrays as JSON with sorted keys (Go's json.Marshal, the way kubectl prints
-- them). A missing field gives nothing, as kubectl
-- (which allows missing keys) prints it; an index out of range is an error.
--
-- One difference: `.*` on an object gives its values in key order, where
-- kubectl's order is Go's map order, which varies from run to run.
--
-- Values are what klua.json.decode and klua.copy return: an array is a table
-- with klua.json.array_mt (or keys 1..n), JSON null is klua.json.null, and
-- klua.json.encode writes numbers. A state without klua passes those
-- (array_mt, null, encode) as `render`'s options.
local M = {}

local Template = {}
Template.__index = Template

-- ---- parsing ---------------------------------------------------------------

local NAME_CHAR = '[%w_%-/]'

-- A parse failure, worded as client-go's parser words it.
local function perr(msg) error({ jsonpath = msg }, 0) end

-- A byte that starts no valid UTF-8 character reads as U+FFFD, as Go's lexer reads it.
local function char_error(c)
  local ok, cp = pcall(utf8.codepoint, c)
  if not ok then cp, c = 0xFFFD, '\u{FFFD}' end
  perr(('unrecognized character in action: U+%04X \'%s\''):format(cp, c))
end

-- A parser over the text of one template: s, and the position i.
local P = {}
P.__index = P

function P:peek(n) return self.s:sub(self.i, self.i + (n or 1) - 1) end
function P:skip_space() self.i = self.s:find('[^ \t\r\n]', self.i) or #self.s + 1 end

function P:next_char()
  if self.i > #self.s then perr('unclosed action') end
  local c = self.s:match('^[%z\1-\127\194-\244][\128-\191]*', self.i) or self.s:sub(self.i, self.i)
  return c
end

function P:expect(text)
  if self.s:sub(self.i, self.i + #text - 1) ~= text then
    if self.i > #self.s then perr('unclosed action') end
    char_error(self:next_char())
  end
  self.i = self.i + #text
end

-- A quoted string at i ('...' or "..."), with Go's escapes \n \t \\ \" \'.
function P:quoted()
  local q = self:peek()
  local out, i = {}, self.i + 1
  while true do
    local c = self.s:sub(i, i)
    if c == '' then perr('unterminated quoted string') end
    if c == q then break end
    if c == '\\' then
      local e = self.s:sub(i + 1, i + 1)
      local map = { n = '\n', t = '\t', r = '\r', ['\\'] = '\\', ['"'] = '"', ["'"] = "'" }
      if not map[e] then perr('unterminated quoted string') end
      out[#out + 1] = map[e]
      i = i + 2
    else
      out[#out + 1] = c
      i = i + 1
    end
  end
  self.i = i + 1
  return table.concat(out)
end

-- A field name: letters, digits, _ - /, and any character after a backslash
-- (`kubectl\.kubernetes\.io/x`).
function P:field_name()
  local out = {}
  while true do
    local c = self:peek()
    if c == '\\' and self.i < #self.s then
      out[#out + 1] = self.s:sub(self.i + 1, self.i + 1)
      self.i = self.i + 2
    elseif c ~= '' and c:match(NAME_CHAR) then
      out[#out + 1] = c
      self.i = self.i + 1
    else
      break
    end
  end
  return table.concat(out)
end

function P:integer()
  local text = self.s:match('^%-?%d+', self.i)
  if not text then return nil end
  self.i = self.i + #text
  return math.tointeger(tonumber(text)) or perr(('invalid array index %s'):format(text))
end

-- A filter operand: a path from @ or $, or a literal.
function P:operand()
  self:skip_space()
  local c = self:peek()
  if c == '@' or c == '$' then return { path = self:path() } end
  if c == "'" or c == '"' then return { value = self:quoted() } end
  local num = self.s:match('^%-?%d+%.?%d*', self.i)
  if num then
    self.i = self.i + #num
    return { value = tonumber(num) }
  end
  for word, v in pairs({ ['true'] = true, ['false'] = false }) do
    if self.s:sub(self.i, self.i + #word - 1) == word then
      self.i = self.i + #word
      return { value = v }
    end
  end
  char_error(self:next_char())
end

local OPS = { '==', '!=', '<=', '>=', '<', '>' }

-- Filters nest (@[?(@.a[?(...)])]); past this depth a template is refused.
local MAX_FILTER_DEPTH = 32

function P:filter()
  self.depth = (self.depth or 0) + 1
  if self.depth > MAX_FILTER_DEPTH then perr('filters nested too deeply') end
  local left = self:operand()
  self:skip_space()
  for _, op in ipairs(OPS) do
    if self.s:sub(self.i, self.i + #op - 1) == op then
      self.i = self.i + #op
      local right = self:operand()
      self:skip_space()
      self:expect(')')
      self.depth = self.depth - 1
      return { kind = 'filter', left = left, op = op, right = right }
    end
  end
  self:expect(')')
  self.depth = self.depth - 1
  return { kind = 'filter', left = left }
end

-- The inside of [...], after the [.
function P:bracket()
  self:skip_space()
  local c = self:peek()
  local step
  if c == '*' then
    self.i = self.i + 1
    step = { kind = 'wildcard' }
  elseif c == '?' then
    self.i = self.i + 1
    self:expect('(')
    step = self:filter()
  elseif c == "'" then
    local keys = { self:quoted() }
    while self:peek() == ',' do
      self.i = self.i + 1
      self:skip_space()
      if self:peek() ~= "'" then char_error(self:next_char()) end
      keys[#keys + 1] = self:quoted()
    end
    step = { kind = 'keys', keys = keys }
  else
    local parts = {}
    repeat
      if parts[1] then self.i = self.i + 1 end
      local a = self:integer()
      if self:peek() == ':' then
        self.i = self.i + 1
        local b = self:integer()
        local st
        if self:peek() == ':' then
          self.i = self.i + 1
          st = self:integer()
        end
        parts[#parts + 1] = { from = a, to = b, step = st }
      elseif a then
        parts[#parts + 1] = { index = a }
      else
        local bad = self.s:match('^[^%]]*', self.i)
        perr(('invalid array index %s'):format(bad))
      end
    until self:peek() ~= ','
    step = { kind = 'indices', parts = parts }
  end
  self:skip_space()
  self:expect(']')
  return step
end

-- A path: [$|@] then steps. Returns { root = bool, steps = {...} }.
function P:path()
  local p = { steps = {} }
  local c = self:peek()
  if c == '$' then
    p.root = true
    self.i = self.i + 1
  elseif c == '@' then
    self.i = self.i + 1
  end
  while true do
    c = self:peek()
    if c == '.' then
      self.i = self.i + 1
      local recursive = self:peek() == '.'
      if recursive then self.i = self.i + 1 end
      if self:peek() == '*' then
        self.i = self.i + 1
        p.steps[#p.steps + 1] = { kind = recursive and 'recursive_all' or 'wildcard' }
      elseif self:peek() == '[' then
        if recursive then p.steps[#p.steps + 1] = { kind = 'recursive_all' } end
      else
        local name = self:field_name()
        if name == '' then
          if recursive or self.i > #self.s then
            perr(self.i > #self.s and 'unclosed action' or 'invalid field name')
          end
          -- "{.}" is the current value itself.
          if self:peek() ~= '}' then char_error(self:next_char()) end
        else
          p.steps[#p.steps + 1] = { kind = recursive and 'recursive' or 'field', name = name }
        end
      end
    elseif c == '[' then
      self.i = self.i + 1
      p.steps[#p.steps + 1] = self:bracket()
    else
      return p
    end
  end
end

-- One action, after its {. Returns a node, or 'end'.
function P:action()
  self:skip_space()
  local node
  if self.s:find('^range[ \t]', self.i) then
    self.i = self.i + 5
    self:skip_space()
    node = { range = self:path() }
  elseif self.s:find('^end[ \t}]', self.i) then
    self.i = self.i + 3
    node = 'end'
  elseif self:peek() == '"' or self:peek() == "'" then
    node = { text = self:quoted() }
  elseif self.s:find('^[.$@%[]', self.i) then
    node = { path = self:path() }
  elseif self.i > #self.s then
    perr('unclosed action')
  elseif self:peek() ~= '}' then
    local word = self.s:match('^%a+', self.i)
    if word then perr(('unrecognized identifier %s'):format(word)) end
    char_error(self:next_char())
  end
  self:skip_space()
  self:expect('}')
  return node
end

--- Parses a template. Returns it, or nil and a message as kubectl words it
-- ("error parsing jsonpath {.a, unclosed action").
function M.parse(text)
  if type(text) ~= 'string' then return nil, 'a JSONPath template is a string' end
  local p = setmetatable({ s = text, i = 1 }, P)
  local ok, res = pcall(function()
    local top = {}
    local stack = { top }
    while p.i <= #text do
      local open = text:find('{', p.i, true)
      local body = stack[#stack]
      if not open then
        body[#body + 1] = { text = text:sub(p.i) }
        break
      end
      if open > p.i then body[#body + 1] = { text = text:sub(p.i, open - 1) } end
      p.i = open + 1
      local node = p:action()
      if node == 'end' then
        if #stack == 1 then perr('not in range, nothing to end') end
        stack[#stack] = nil
      elseif node then
        body[#body + 1] = node
        if node.range then
          node.body = {}
          stack[#stack + 1] = node.body
        end
      end
    end
    if #stack > 1 then perr('unclosed range') end
    return top
  end)
  if not ok then
    if type(res) == 'table' and res.jsonpath then
      return nil, ('error parsing jsonpath %s, %s'):format(text, res.jsonpath)
    end
    error(res, 0)
  end
  return setmetatable({ nodes = res, source = text }, Template)
end

-- ---- values ----------------------------------------------------------------

-- How values are told apart and numbers written: opts.array_mt marks arrays,
-- opts.null is null, opts.encode writes a number as JSON (klua.json's, which
-- writes floats as Go's encoding/json does).
local function kinds(opts)
  local json = opts or (rawget(_G, 'klua') and klua.json) or {}
  return json.array_mt, json.null, json.encode
end
M.kinds = kinds

local function context(opts)
  local array_mt, null, encode = kinds(opts)
  return { array_mt = array_mt, null = null, encode = encode, opts = opts }
end

-- An object's member names, sorted (keys that are not strings left out).
local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do if type(k) == 'string' then keys[#keys + 1] = k end end
  table.sort(keys)
  return keys
end
M.sorted_keys = sorted_keys

-- Whether v is a JSON array: a table with array_mt, or whose keys are 1..n.
local function is_array(v, array_mt)
  if type(v) ~= 'table' then return false end
  if array_mt and getmetatable(v) == array_mt then return true end
  local n = #v
  if n == 0 then return false end
  local count = 0
  for _ in pairs(v) do count = count + 1 end
  return count == n
end
M.is_array = is_array

-- Go's json.Marshal escapes: control characters, quote, backslash, and
-- <, >, & (HTML-safe), U+2028 and U+2029.
local ESCAPES = { ['"'] = '\\"', ['\\'] = '\\\\', ['\n'] = '\\n', ['\r'] = '\\r', ['\t'] = '\\t',
  ['<'] = '\\u003c', ['>'] = '\\u003e', ['&'] = '\\u0026' }

local function quote(s)
  s = s:gsub('[%c"\\<>&]', function(c) return ESCAPES[c] or ('\\u%04x'):format(c:byte()) end)
  s = s:gsub('\226\128\168', '\\u2028'):gsub('\226\128\169', '\\u2029')
  return '"' .. s .. '"'
end

local function number_json(v, encode)
  if v ~= v or v == math.huge or v == -math.huge then return 'null' end
  return encode(v)
end

-- A number as Go's fmt prints the int64 or float64 kubectl holds it as (%v):
-- an integer as it is, a float with strconv's 'g' (1e+06, 1.23456789123e+08,
-- 0.1, 1e-07), made from the float's encoding/json text, whose digits are the
-- same shortest ones.
local function number_go(v, encode)
  if math.type(v) == 'integer' then return tostring(v) end
  local sign, int, frac, exp = encode(v):match('^(%-?)(%d+)%.?(%d*)e?([-+]?%d*)$')
  local digits = int .. frac
  local lead = #digits:match('^0*')
  local dp = #int + (tonumber(exp) or 0) - lead
  digits = digits:sub(lead + 1):gsub('0+$', '')
  if digits == '' then return sign .. '0' end
  local x = dp - 1
  if x < -4 or x >= 6 then
    local rest = #digits > 1 and ('.' .. digits:sub(2)) or ''
    return ('%s%s%se%s%02d'):format(sign, digits:sub(1, 1), rest, x < 0 and '-' or '+', math.abs(x))
  end
  if dp <= 0 then return sign .. '0.' .. ('0'):rep(-dp) .. digits end
  if dp >= #digits then return sign .. digits .. ('0'):rep(dp - #digits) end
  return sign .. digits:sub(1, dp) .. '.' .. digits:sub(dp + 1)
end

--- A value as JSON with sorted keys, as Go's encoding/json writes it: on one
-- line, or, with indent (a string), one member a line (json.MarshalIndent).
function M.json(v, indent, opts)
  local array_mt, null, encode = kinds(opts)
  local out = {}
  local function put(x, depth)
    local t = type(x)
    if x == nil or (null ~= nil and x == null) then
      out[#out + 1] = 'null'
    elseif t == 'string' then
      out[#out + 1] = quote(x)
    elseif t == 'number' then
      out[#out + 1] = number_json(x, encode)
    elseif t == 'boolean' then
      out[#out + 1] = tostring(x)
    elseif t == 'table' then
      local arr = is_array(x, array_mt)
      local items = arr and x or sorted_keys(x)
      local n = #items
      if n == 0 then
        out[#out + 1] = arr and '[]' or '{}'
        return
      end
      out[#out + 1] = arr and '[' or '{'
      local pad = indent and ('\n' .. indent:rep(depth + 1)) or ''
      for i = 1, n do
        if i > 1 then out[#out + 1] = ',' end
        out[#out + 1] = pad
        if arr then
          put(x[i], depth + 1)
        else
          out[#out + 1] = quote(items[i]) .. (indent and ': ' or ':')
          put(x[items[i]], depth + 1)
        end
      end
      out[#out + 1] = (indent and ('\n' .. indent:rep(depth)) or '') .. (arr and ']' or '}')
    else
      out[#out + 1] = quote(tostring(x))
    end
  end
  put(v, 0)
  return table.concat(out)
end

-- ---- evaluation ------------------------------------------------------------

local function xerr(msg) error({ jsonpath = msg }, 0) end

local eval_path

local function descend_all(v, array_mt, out)
  out[#out + 1] = v
  if type(v) ~= 'table' then return end
  if is_array(v, array_mt) then
    for _, e in ipairs(v) do descend_all(e, array_mt, out) end
  else
    for _, k in ipairs(sorted_keys(v)) do descend_all(v[k], array_mt, out) end
  end
end

local function compare(a, op, b)
  if type(a) ~= type(b) or (type(a) ~= 'number' and type(a) ~= 'string' and op ~= '==' and op ~= '!=') then
    if op == '==' then return false end
    if op == '!=' then return true end
    xerr('incompatible types for comparison')
  end
  if op == '==' then return a == b
  elseif op == '!=' then return a ~= b
  elseif op == '<' then return a < b
  elseif op == '>' then return a > b
  elseif op == '<=' then return a <= b
  end
  return a >= b
end

local function operand_values(o, cur, root, ctx)
  if o.path then return eval_path(o.path, cur, root, ctx) end
  return { o.value }
end

local function passes(f, e, root, ctx)
  local left = operand_values(f.left, e, root, ctx)
  if not f.op then return #left > 0 and left[1] ~= false end
  local right = operand_values(f.right, e, root, ctx)
  if #left == 0 or #right == 0 then return false end
  return compare(left[1], f.op, right[1])
end

local function slice(arr, part, out)
  local n = #arr
  local step = part.step or 1
  if step <= 0 then xerr('step must be > 0') end
  local from, to = part.from or 0, part.to or n
  if from < 0 then from = from + n end
  if to < 0 then to = to + n end
  from = math.max(0, math.min(from, n))
  to = math.max(0, math.min(to, n))
  for i = from, to - 1, step do out[#out + 1] = arr[i + 1] end
end

local function step_values(step, values, root, ctx)
  local array_mt = ctx.array_mt
  local out = {}
  local kind = step.kind
  if kind == 'field' or kind == 'recursive' then
    local from = values
    if kind == 'recursive' then
      from = {}
      for _, v in ipairs(values) do descend_all(v, array_mt, from) end
    end
    for _, v in ipairs(from) do
      if type(v) == 'table' and not is_array(v, array_mt) then
        local x = v[step.name]
        if x ~= nil then out[#out + 1] = x end
      end
    end
  elseif kind == 'recursive_all' then
    for _, v in ipairs(values) do descend_all(v, array_mt, out) end
  elseif kind == 'wildcard' then
    for _, v in ipairs(values) do
      if is_array(v, array_mt) then
        for _, e in ipairs(v) do out[#out + 1] = e end
      elseif type(v) == 'table' then
        for _, k in ipairs(sorted_keys(v)) do out[#out + 1] = v[k] end
      end
    end
  elseif kind == 'keys' then
    for _, key in ipairs(step.keys) do
      for _, v in ipairs(values) do
        if is_array(v, array_mt) then
          for _, e in ipairs(v) do
            if type(e) == 'table' and e[key] ~= nil then out[#out + 1] = e[key] end
          end
        elseif type(v) == 'table' and v[key] ~= nil then
          out[#out + 1] = v[key]
        end
      end
    end
  elseif kind == 'indices' then
    for _, v in ipairs(values) do
      if is_array(v, array_mt) or (type(v) == 'table' and next(v) == nil) then
        for _, part in ipairs(step.parts) do
          if part.index then
            local i = part.index < 0 and part.index + #v or part.index
            if i < 0 or i >= #v then
              xerr(('array index out of bounds: index %d, length %d'):format(part.index, #v))
            end
            out[#out + 1] = v[i + 1]
          else
            slice(v, part, out)
          end
        end
      end
    end
  elseif kind == 'filter' then
    for _, v in ipairs(values) do
      if is_array(v, array_mt) then
        for _, e in ipairs(v) do
          if passes(step, e, root, ctx) then out[#out + 1] = e end
        end
      end
    end
  end
  return out
end

eval_path = function(path, cur, root, ctx)
  local values = { path.root and root or cur }
  for _, step in ipairs(path.steps) do
    values = step_values(step, values, root, ctx)
    if #values == 0 then break end
  end
  return values
end

local function text_of(v, ctx)
  if type(v) == 'string' then return v end
  if type(v) == 'number' then return number_go(v, ctx.encode) end
  if type(v) == 'boolean' then return tostring(v) end
  return M.json(v, nil, ctx.opts)
end

local function render_nodes(nodes, cur, root, ctx, out)
  for _, node in ipairs(nodes) do
    if node.text then
      out[#out + 1] = node.text
    elseif node.range then
      for _, v in ipairs(eval_path(node.range, cur, root, ctx)) do
        render_nodes(node.body, v, root, ctx, out)
      end
    else
      local parts = {}
      for i, v in ipairs(eval_path(node.path, cur, root, ctx)) do parts[i] = text_of(v, ctx) end
      out[#out + 1] = table.concat(parts, ' ')
    end
  end
end

--- Renders the template over a value. Returns the text, or nil and a message
-- ("array index out of bounds: index 5, length 2"). opts: `array_mt` and
-- `null` (klua.json's by default).
function Template:render(value, opts)
  local ctx = context(opts)
  local out = {}
  local ok, err = pcall(render_nodes, self.nodes, value, value, ctx, out)
  if not ok then
    if type(err) == 'table' and err.jsonpath then return nil, err.jsonpath end
    error(err, 0)
  end
  return table.concat(out)
end

--- The values a template's single path gives (for custom-columns, whose
-- cells print values joined by commas). Returns a list, or nil and a message.
function Template:values(value, opts)
  local node = self.nodes[1]
  if #self.nodes ~= 1 or not node.path then return nil, 'a column is one path, such as .metadata.name' end
  local ctx = context(opts)
  local ok, res = pcall(eval_path, node.path, value, value, ctx)
  if not ok then
    if type(res) == 'table' and res.jsonpath then return nil, res.jsonpath end
    error(res, 0)
  end
  return res
end

--- A value's text as a template prints it (strings as they are, numbers as
-- Go's fmt prints them, objects and arrays as JSON with sorted keys).
function M.text(v, opts) return text_of(v, context(opts)) end

local function sprint(v, ctx)
  if v == nil or v == ctx.null then return '<nil>' end
  local t = type(v)
  if t == 'string' then return v end
  if t == 'number' then return number_go(v, ctx.encode) end
  if t ~= 'table' then return tostring(v) end
  local parts = {}
  if is_array(v, ctx.array_mt) then
    for i, e in ipairs(v) do parts[i] = sprint(e, ctx) end
    return '[' .. table.concat(parts, ' ') .. ']'
  end
  for i, k in ipairs(sorted_keys(v)) do parts[i] = k .. ':' .. sprint(v[k], ctx) end
  return 'map[' .. table.concat(parts, ' ') .. ']'
end

--- A value as Go's fmt.Sprint prints what kubectl decodes it into, as
-- custom-columns and table cells print it: strings as they are, numbers as
-- the int64 or float64 they are (1e+06), null as <nil>, arrays as [a b] and
-- objects as map[k:v ...] with sorted keys, nested alike.
function M.sprint(v, opts) return sprint(v, context(opts)) end

return M
