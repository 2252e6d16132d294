--- `klua watch --until`, `--for`, `--fail-if`, `--any` and `--timeout`: a
-- scriptable `kubectl wait` over the objects klua watch selects, which
-- waits for objects that do not exist yet.
--
-- --for takes kubectl wait's spellings, read and compared as kubectl 1.32
-- reads them (staging/src/k8s.io/kubectl/pkg/cmd/wait: wait.go's
-- conditionFuncFor and processJSONPathInput, condition.go's checkCondition,
-- json.go's checkCondition and compareResults, create.go, delete.go):
--   delete                    the object is gone
--   create                    the object exists
--   condition=NAME[=VALUE]    status.conditions has type NAME (compared
--                             ignoring case) with status VALUE (default
--                             true, ignoring case), unless the condition's
--                             observedGeneration, or else status's, is lower
--                             than metadata.generation
--   jsonpath=PATH[=VALUE]     PATH (kubectl's relaxed JSONPath: {.a.b} or
--                             .a.b) gives one value, and it is a string or
--                             number that reads as VALUE (Go's %v, both
--                             sides trimmed); without VALUE, any value
-- A PATH that gives several values, or an object or array to compare with
-- a VALUE, ends the wait with kubectl's words and status 1.
--
-- An object meets the wait when any --until expression or --for condition
-- holds for it. The wait is over, with status 0, when every selected object
-- meets it: each object named (TYPE/NAME) exists and meets it, and a
-- selection (TYPE, -l, --field-selector) has at least one object and all of
-- them meet it, since `kubectl wait` ends on a selection with no objects
-- ("no matching resources found") where this waits for them to appear.
-- With --for=delete, or an --until that held for a DELETED event, an object
-- gone meets it, and a selection with none left, or a name that does not
-- exist, is met. --any: the wait is over when one object meets it.
-- --fail-if: status 1 as soon as it holds for an event. --timeout: status 1,
-- as kubectl wait's "timed out waiting for the condition on pods/x".
local jsonpath = require('klua.cmd.jsonpath')
local util = require('klua.internal.objutil')

local M = {}

-- ---- reading the flags -----------------------------------------------------

local UNITS = { ns = 1e-9, us = 1e-6, ['µs'] = 1e-6, ['μs'] = 1e-6, ms = 1e-3, s = 1, m = 60, h = 3600 }

--- Seconds in a duration as Go's time.ParseDuration reads it (kubectl's
-- --timeout): "30s", "1m30s", "1.5h", "500ms", "0", with an optional sign.
-- Returns the seconds, or nil and Go's words.
function M.duration(text)
  local bad = ('time: invalid duration %q'):format(text)
  local sign, rest = text:match('^([-+]?)(.*)$')
  if rest == '0' then return 0 end
  if rest == '' then return nil, bad end
  local total, i = 0, 1
  while i <= #rest do
    local number, after = rest:match('^(%d*%.?%d*)()', i)
    if number == '' or number == '.' then return nil, bad end
    local unit, next_i = rest:match('^([^%d.]*)()', after)
    if unit == '' then return nil, ('time: missing unit in duration %q'):format(text) end
    local scale = UNITS[unit]
    if not scale then return nil, ('time: unknown unit %q in duration %q'):format(unit, text) end
    total = total + tonumber(number) * scale
    i = next_i
  end
  return sign == '-' and -total or total
end

-- kubectl's splitJSONPathInput: splits on "=", not on "==".
local function split_equals(input)
  local out, cur, i = {}, {}, 1
  while i <= #input do
    local c = input:sub(i, i)
    if c == '=' and input:sub(i + 1, i + 1) == '=' then
      cur[#cur + 1] = '=='
      i = i + 2
    elseif c == '=' then
      out[#out + 1] = table.concat(cur)
      cur = {}
      i = i + 1
    else
      cur[#cur + 1] = c
      i = i + 1
    end
  end
  out[#out + 1] = table.concat(cur)
  return out
end

-- kubectl's RelaxedJSONPathExpression: "{.a.b}", ".a.b" and "a.b" name one path.
local function relaxed(path)
  local inner = path:match('^{(.*)}$') or path
  if inner:sub(1, 1) ~= '.' and inner:sub(1, 1) ~= '$' and inner:sub(1, 1) ~= '@' then inner = '.' .. inner end
  return '{' .. inner .. '}'
end

local function get(v, ...)
  for i = 1, select('#', ...) do
    if type(v) ~= 'table' then return nil end
    v = v[select(i, ...)]
  end
  return v
end

local function integer(v) return math.type(v) == 'integer' and v or nil end

-- condition.go's checkCondition, on a decoded object.
local function condition_holds(obj, name, status)
  local conditions = get(obj, 'status', 'conditions')
  if type(conditions) ~= 'table' then return false end
  name, status = name:lower(), status:lower()
  for _, c in ipairs(conditions) do
    if type(c) ~= 'table' then return false end
    if type(c.type) == 'string' and c.type:lower() == name and type(c.status) == 'string' then
      local generation = integer(get(obj, 'metadata', 'generation'))
      local observed = integer(c.observedGeneration) or integer(get(obj, 'status', 'observedGeneration'))
      if generation and observed and observed < generation then return false end
      return c.status:lower() == status
    end
  end
  return false
end

local function trim(s) return (s:gsub('^%s+', ''):gsub('%s+$', '')) end

--- Reads one --for (kubectl wait's spellings). Returns { gone = true } for
-- delete, or { check = function(obj) -> holds[, fatal error] } taking a
-- decoded object, or nil and kubectl's words.
function M.condition(text)
  if text:lower() == 'delete' then return { gone = true } end
  if text:lower() == 'create' then return { check = function() return true end } end
  local name = text:match('^condition=(.*)$')
  if name then
    local cname, value = name:match('^([^=]*)=(.*)$')
    cname, value = cname or name, value or 'true'
    return { check = function(obj) return condition_holds(obj, cname, value) end }
  end
  local input = text:match('^jsonpath=(.*)$')
  if input then
    local parts = split_equals(input)
    if #parts > 2 then
      return nil, "jsonpath wait format must be --for=jsonpath='{.status.readyReplicas}'=3 or "
        .. "--for=jsonpath='{.status.readyReplicas}'"
    end
    if parts[1] == '' then return nil, 'jsonpath expression cannot be empty' end
    local want = parts[2] and parts[2]:gsub('^[\'"]+', ''):gsub('[\'"]+$', '')
    if want == '' then
      return nil, "jsonpath wait has to have a value after equal sign, like --for=jsonpath='{.status.readyReplicas}'=3"
    end
    local t, err = jsonpath.parse(relaxed(parts[1]))
    if not t then return nil, err end
    return { check = function(obj)
      local values, verr = t:values(obj)
      if not values then return false, verr end
      if #values == 0 then return false end
      if #values > 1 then return false, 'given jsonpath expression matches more than one value' end
      if not want then return true end
      if type(values[1]) == 'table' then
        return false, 'jsonpath leads to a nested object or list which is not supported'
      end
      return trim(jsonpath.sprint(values[1])) == trim(want)
    end }
  end
  return nil, ('unrecognized condition: %q'):format(text)
end

-- ---- waiting -----------------------------------------------------------------

local Waiter = {}
Waiter.__index = Waiter

--- A wait over targets (klua watch's, each with prefix, the "pod/" of its
-- names, and plural, the "pods" of kubectl's timeout message, and name for
-- one object). opts: conditions ({gone=} or {check=} each, from
-- M.condition), untils and fail_ifs (compiled expressions: function(event,
-- obj, old)), any, until_failures and fail_failures (where an error of each
-- kind of expression is counted),
-- write(text), quiet (print the objects that met the wait when it is over),
-- stop(code, message).
function M.new(targets, opts)
  local w = setmetatable({ targets = targets, opts = opts, listed = false, done = false }, Waiter)
  w.gone_meets, w.checks = false, false
  for _, c in ipairs(opts.conditions) do
    if c.gone then w.gone_meets = true else w.checks = true end
  end
  for _, t in ipairs(targets) do
    t.wait = { objs = {}, present = 0, holding = 0, gone = {} }
  end
  return w
end

local function key_of(obj)
  local meta = klua.get(obj, 'metadata')
  local ns, name = meta and klua.get(meta, 'namespace'), meta and klua.get(meta, 'name')
  return util.key(type(ns) == 'string' and ns or nil, type(name) == 'string' and name or '?'),
    type(name) == 'string' and name or '?'
end

-- Whether any of fns holds for the event (an error counted, as -e's).
local function any_holds(fns, failures, event, obj, old)
  for _, fn in ipairs(fns) do
    local ok, res = pcall(fn, event, obj, old)
    if not ok then
      failures:add(tostring(res), event, obj)
    elseif res then
      return true
    end
  end
  return false
end

-- Whether obj, present, meets the wait; a fatal error ends it.
function Waiter:meets(event, obj, old)
  local o = self.opts
  if any_holds(o.untils, o.until_failures, event, obj, old) then return true end
  if not self.checks then return false end
  local copy = klua.copy(obj)
  for _, c in ipairs(o.conditions) do
    if c.check then
      local holds, err = c.check(copy)
      if err then return self:finish(1, err) end
      if holds then return true end
    end
  end
  return false
end

--- Takes an event of target's informer into account, and ends the wait
-- when it is over.
function Waiter:track(target, event, obj, old)
  if self.done then return end
  local o = self.opts
  if #o.fail_ifs > 0 and any_holds(o.fail_ifs, o.fail_failures, event, obj, old) then
    return self:finish(1, ('--fail-if held for %s%s on %s'):format(target.prefix, select(2, key_of(obj)), event))
  end
  local w, key, name = target.wait, key_of(obj)
  local was = w.objs[key]
  if was ~= nil then
    w.present = w.present - 1
    if was.holds then w.holding = w.holding - 1 end
    w.objs[key] = nil
  end
  if event == 'DELETED' then
    if self.gone_meets or any_holds(o.untils, o.until_failures, event, obj, old) then w.gone[key] = name end
  else
    w.gone[key] = nil
    local holds = self:meets(event, obj, old)
    if self.done then return end
    w.objs[key] = { holds = holds, name = name }
    w.present = w.present + 1
    if holds then w.holding = w.holding + 1 end
  end
  if self.listed then self:check() end
end

-- Whether target's objects meet the wait (all of them, or one with --any).
function Waiter:target_met(t)
  local w = t.wait
  if self.opts.any then return w.holding > 0 or next(w.gone) ~= nil or (w.present == 0 and self.gone_meets) end
  if w.present > 0 then return w.holding == w.present end
  return self.gone_meets or next(w.gone) ~= nil
end

function Waiter:over()
  local any = self.opts.any
  for _, t in ipairs(self.targets) do
    local met = self:target_met(t)
    if any and met then return true end
    if not any and not met then return false end
  end
  return not any
end

--- The initial lists are complete: from now on each event may end the wait.
-- A timeout of 0 ends it now, as kubectl wait --timeout=0 checks once.
function Waiter:synced(timeout)
  self.listed = true
  self:check()
  if not self.done and timeout == 0 then self:finish(1, 'condition not met for ' .. self:unmet()) end
end

function Waiter:check()
  if not self.done and self:over() then self:finish(0) end
end

-- The objects that do not meet the wait, as kubectl names them (pods/x).
function Waiter:unmet()
  local out = {}
  for _, t in ipairs(self.targets) do
    if not self:target_met(t) then
      local names = {}
      for _, e in pairs(t.wait.objs) do
        if not e.holds then names[#names + 1] = t.plural .. '/' .. e.name end
      end
      table.sort(names)
      if #names == 0 then
        names[1] = t.name and (t.plural .. '/' .. t.name) or (t.plural .. ' (none exist)')
      end
      for _, n in ipairs(names) do out[#out + 1] = n end
    end
  end
  return table.concat(out, ', ')
end

--- Time is up: status 1, with kubectl wait's words.
function Waiter:timeout()
  if self.done then return end
  self:finish(1, 'timed out waiting for the condition on ' .. self:unmet())
end

-- Ends the wait: with status 0, "pod/x condition met" for each object that
-- meets it (as kubectl wait prints them) unless the events were printed.
function Waiter:finish(code, message)
  self.done = true
  local o = self.opts
  if code == 0 and o.quiet then
    for _, t in ipairs(self.targets) do
      local names = {}
      for _, e in pairs(t.wait.objs) do if e.holds then names[#names + 1] = e.name end end
      for _, name in pairs(t.wait.gone) do names[#names + 1] = name end
      table.sort(names)
      for _, name in ipairs(names) do o.write(t.prefix .. name .. ' condition met\n') end
    end
  end
  o.stop(code, message)
end

return M
