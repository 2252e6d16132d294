--- Label selectors, parsed and matched on the client as apimachinery's
-- labels.Parse does: the same syntax, the same validation of keys and
-- values, the same meaning.
--
--   local sel, err = klua.labels.parse('app=web,tier in (front,back),!legacy')
--   sel:matches(pod)              -- an object (its metadata.labels) ...
--   sel:matches({ app = 'web' })  -- ... or a table of labels
--   tostring(sel)                 -- the canonical form: requirements by key
--
-- Requirements are separated by commas and all must hold:
--   key, !key                      the label exists / does not
--   key=v, key==v, key!=v          equals / does not (also true when absent)
--   key in (a,b), key notin (a,b)  one of / none of (notin: also when absent)
--   key>n, key<n                   the label is an integer above / below n
local util = require('klua.internal.objutil')

local M = {}

local Selector = {}
Selector.__index = Selector

-- ---- lexer -------------------------------------------------------------

local SYMBOLS = { '!=', '==', '=', '!', '(', ')', ',', '>', '<' }
local SPECIAL = '[%s=!(),><]'

-- Splits text into tokens {kind, text}: kinds are the symbols themselves,
-- 'id' for identifiers (including the words in and notin) and 'end'.
local function lex(text)
  local tokens, i = {}, 1
  while true do
    i = text:find('%S', i)
    if not i then break end
    local symbol
    for _, s in ipairs(SYMBOLS) do
      if text:sub(i, i + #s - 1) == s then
        symbol = s
        break
      end
    end
    if symbol then
      tokens[#tokens + 1] = { kind = symbol, text = symbol }
      i = i + #symbol
    else
      local j = text:find(SPECIAL, i) or #text + 1
      tokens[#tokens + 1] = { kind = 'id', text = text:sub(i, j - 1) }
      i = j
    end
  end
  tokens[#tokens + 1] = { kind = 'end', text = '' }
  return tokens
end

-- ---- validation (apimachinery's qualified names and label values) -------

local function valid_name(s)
  return #s <= 63 and (s:find('^%w$') or s:find('^%w[%w%-_.]*%w$')) ~= nil
end

local function valid_dns_subdomain(s)
  if #s == 0 or #s > 253 then return false end
  for label in (s .. '.'):gmatch('([^.]*)%.') do
    if not (label:find('^[a-z0-9]$') or label:find('^[a-z0-9][a-z0-9%-]*[a-z0-9]$')) then return false end
  end
  return true
end

local function check_key(key)
  local prefix, name = key:match('^([^/]*)/(.*)$')
  if not prefix then name = key end
  if prefix and not valid_dns_subdomain(prefix) then
    return ('key "%s": the prefix must be a DNS subdomain (lowercase letters, digits, "-" and ".")'):format(key)
  end
  if not valid_name(name) then
    return ('key "%s": a name must be at most 63 characters, letters, digits, "-", "_" or ".", ' ..
      'starting and ending with a letter or digit'):format(key)
  end
end

local function check_value(key, value)
  if value ~= '' and not valid_name(value) then
    return ('value "%s" of %s: a label value must be empty or at most 63 characters, letters, digits, ' ..
      '"-", "_" or ".", starting and ending with a letter or digit'):format(value, key)
  end
end

-- ---- parser --------------------------------------------------------------

local Parser = {}
Parser.__index = Parser

function Parser:peek() return self.tokens[self.pos] end

function Parser:take()
  local t = self.tokens[self.pos]
  if t.kind ~= 'end' then self.pos = self.pos + 1 end
  return t
end

local function found(t, expected)
  local what = t.kind == 'end' and 'the end' or ("'" .. t.text .. "'")
  error({ msg = ('found %s, expected %s'):format(what, expected) })
end

-- ( v1, v2, ... ): empty items stand for the empty value, as in apimachinery.
function Parser:values()
  local t = self:take()
  if t.kind ~= '(' then found(t, "'('") end
  local set, expect_value = {}, true
  while true do
    t = self:take()
    if t.kind == 'id' and expect_value then
      set[t.text] = true
      expect_value = false
    elseif t.kind == ',' then
      if expect_value then set[''] = true end
      expect_value = true
    elseif t.kind == ')' then
      if expect_value then set[''] = true end
      return util.sorted_keys(set) -- the set's values, each once
    else
      found(t, expect_value and "a value, ',' or ')'" or "',' or ')'")
    end
  end
end

-- The value after =, ==, !=, > or <; nothing before ',' or the end is "".
function Parser:exact_value()
  local t = self:peek()
  if t.kind == ',' or t.kind == 'end' then return { '' } end
  t = self:take()
  if t.kind ~= 'id' then found(t, 'a value') end
  return { t.text }
end

local OPERATORS = { ['='] = true, ['=='] = true, ['!='] = true, ['>'] = true, ['<'] = true }

local function integer(s)
  return s:find('^%d+$') and math.tointeger(tonumber(s))
end

function Parser:requirement()
  local t, op = self:take(), nil
  if t.kind == '!' then
    op = '!'
    t = self:take()
  end
  if t.kind ~= 'id' then found(t, 'a label key') end
  local key = t.text
  local bad = check_key(key)
  if bad then error({ msg = bad }) end
  local next_kind = self:peek().kind
  if op == '!' or next_kind == ',' or next_kind == 'end' then
    return { key = key, op = op or 'exists', values = {} }
  end
  t = self:take()
  local values
  if t.kind == 'id' and (t.text == 'in' or t.text == 'notin') then
    op, values = t.text, self:values()
  elseif OPERATORS[t.kind] then
    op, values = t.kind, self:exact_value()
  else
    found(t, 'an operator: =, ==, !=, in, notin, > or <')
  end
  for _, v in ipairs(values) do
    bad = check_value(key, v)
    if bad then error({ msg = bad }) end
  end
  if (op == '>' or op == '<') and not integer(values[1]) then
    error({ msg = ("'%s' needs an integer, not \"%s\""):format(op, values[1]) })
  end
  return { key = key, op = op, values = values }
end

-- A requirement as the canonical form writes it.
local function requirement_text(r)
  if r.op == 'exists' then return r.key end
  if r.op == '!' then return '!' .. r.key end
  if r.op == 'in' or r.op == 'notin' then
    return ('%s %s (%s)'):format(r.key, r.op, table.concat(r.values, ','))
  end
  return r.key .. r.op .. r.values[1]
end

function Parser:selector()
  local reqs = {}
  if self:peek().kind == 'end' then return reqs end
  while true do
    reqs[#reqs + 1] = self:requirement()
    local t = self:take()
    if t.kind == 'end' then break end
    if t.kind ~= ',' then found(t, "',' or the end") end
    local k = self:peek().kind
    if k ~= 'id' and k ~= '!' then found(self:peek(), "a requirement after ','") end
  end
  for _, r in ipairs(reqs) do r.text = requirement_text(r) end
  table.sort(reqs, function(a, b)
    if a.key ~= b.key then return a.key < b.key end
    return a.text < b.text
  end)
  return reqs
end

--- Parses a label selector. Returns the selector, or nil and a message
-- naming what is wrong. "" (or nil) selects everything.
function M.parse(text)
  if text == nil then text = '' end
  if type(text) ~= 'string' then return nil, 'a label selector is a string, such as "app=web"' end
  local p = setmetatable({ tokens = lex(text), pos = 1 }, Parser)
  local ok, reqs = pcall(p.selector, p)
  if not ok then
    if type(reqs) ~= 'table' then error(reqs, 0) end
    return nil, ('label selector "%s": %s'):format(text, reqs.msg)
  end
  return setmetatable({ requirements = reqs }, Selector)
end

--- A selector from a selector or a string to parse. Returns the selector,
-- or nil and a message.
function M.of(value)
  if getmetatable(value) == Selector then return value end
  return M.parse(value)
end

-- ---- matching ------------------------------------------------------------

local function contains(list, v)
  for _, x in ipairs(list) do if x == v then return true end end
  return false
end

local function holds(r, labels)
  local v = labels[r.key]
  if r.op == 'exists' then return v ~= nil end
  if r.op == '!' then return v == nil end
  if r.op == '=' or r.op == '==' or r.op == 'in' then return v ~= nil and contains(r.values, v) end
  if r.op == '!=' or r.op == 'notin' then return v == nil or not contains(r.values, v) end
  local n = type(v) == 'string' and integer(v)
  if not n then return false end
  if r.op == '>' then return n > integer(r.values[1]) end
  return n < integer(r.values[1])
end

--- Whether the labels hold every requirement. labels: a table of labels,
-- or an object (its metadata.labels; an object without labels has none).
-- @param labels a table of labels or an object (view or table)
-- @return true or false
-- @usage
-- local sel = assert(klua.labels.parse('app=web,tier!=db'))
-- print(sel:matches { app = 'web', tier = 'cache' }) --> true
function Selector:matches(labels)
  if labels == nil then labels = {} end
  local md = labels.metadata
  if md ~= nil and type(md) ~= 'string' then labels = md.labels or {} end
  for _, r in ipairs(self.requirements) do
    if not holds(r, labels) then return false end
  end
  return true
end

--- Whether the selector selects everything (it has no requirement).
-- @return true or false
-- @usage
-- print(assert(klua.labels.parse('')):empty()) --> true
function Selector:empty() return #self.requirements == 0 end

--- The canonical form: the requirements sorted by key, values sorted.
function Selector:__tostring()
  local parts = {}
  for i, r in ipairs(self.requirements) do parts[i] = r.text end
  return table.concat(parts, ',')
end

return M
