--- Informer indexes, as client-go's Indexers:
--
--   local pods = klua.informer { resource = 'pods',
--     indexes = { by_node = function(pod) return pod.spec.nodeName end } }
--   for _, pod in ipairs(pods:by_index('by_node', 'node-7')) do ... end
--
-- An index function takes a cached object and returns the values it is
-- found under: a string, a list of strings, or nil (not in the index).
-- The index follows the cache exactly: the store remembers every key it
-- changes (an add, an update, a delete, a relist) and a lookup first
-- brings the index up to date with those keys, so what by_index returns
-- agrees with inf:get at the same moment, handlers or not. A lookup costs
-- the keys changed since the last one, then one hash lookup.
--
-- An index function that raises or returns something else is logged and
-- counted in inf:stats().index_errors; the object is then left out of that
-- index (its old entries are gone), so a failing function never leaves
-- the index pointing at a state the object no longer has.
local core = require('klua.core')

local M = {}

local Indexes = {}
Indexes.__index = Indexes

--- Checks opts.indexes of klua.informer (before the informer starts);
-- returns the indexes, to attach to the informer, or nil without any.
function M.new(specs, informer_name)
  if specs == nil then return nil end
  if type(specs) ~= 'table' then
    error('indexes must be a table of index functions, such as {by_node = function(pod) ... end}', 3)
  end
  local fns, n = {}, 0
  for name, fn in pairs(specs) do
    if type(name) ~= 'string' or name == '' then
      error('indexes: each index needs a name, such as by_node = function(obj) ... end', 3)
    end
    if type(fn) ~= 'function' then
      error(('indexes.%s must be a function of the object that returns its index values'):format(name), 3)
    end
    fns[name], n = fn, n + 1
  end
  if n == 0 then return nil end
  local x = setmetatable({ name = informer_name, fns = fns, keys = {}, values = {},
    errors = 0 }, Indexes)
  for name in pairs(fns) do
    x.keys[name] = {}   -- value -> { key = true }
    x.values[name] = {} -- key -> { value, ... }
  end
  return x
end

--- Binds the indexes to the informer inf, whose store starts remembering
-- the keys it changes; it is still empty.
function Indexes:attach(inf)
  self.inf = inf
  core.informer_fns.track_changes(inf)
  return self
end

local function unindex(x, name, key)
  local old = x.values[name][key]
  if not old then return end
  local by_value = x.keys[name]
  for _, v in ipairs(old) do
    local set = by_value[v]
    set[key] = nil
    if next(set) == nil then by_value[v] = nil end
  end
  x.values[name][key] = nil
end

-- The values fn gives obj, as a list; nil and a message when it fails.
local function values_of(fn, obj)
  local ok, got = pcall(fn, obj)
  if not ok then return nil, tostring(got) end
  if got == nil then return {} end
  if type(got) == 'string' then return { got } end
  if type(got) == 'table' then
    local out = {}
    for i, v in ipairs(got) do
      if type(v) ~= 'string' then
        return nil, ('returned a list whose item %d is a %s'):format(i, type(v))
      end
      out[i] = v
    end
    return out
  end
  return nil, ('returned a %s'):format(type(got))
end

function Indexes:reindex(key)
  local obj = self.inf:get(key)
  for name, fn in pairs(self.fns) do
    unindex(self, name, key)
    if obj then
      local vals, err = values_of(fn, obj)
      if not vals then
        self.errors = self.errors + 1
        core.log('error', ('%s: index %s failed for %s and leaves it out: %s (return a string, a list of strings or nil)')
          :format(self.name, name, key, err))
      elseif #vals > 0 then
        local by_value = self.keys[name]
        for _, v in ipairs(vals) do
          local set = by_value[v]
          if not set then
            set = {}
            by_value[v] = set
          end
          set[key] = true
        end
        self.values[name][key] = vals
      end
    end
  end
end

function Indexes:refresh()
  for _, key in ipairs(core.informer_fns.changes(self.inf)) do self:reindex(key) end
end

--- The keys under value in index name, sorted.
function Indexes:lookup(name, value)
  if not self.fns[name] then
    local names = {}
    for n in pairs(self.fns) do names[#names + 1] = n end
    table.sort(names)
    error(('%s has no index "%s" (its indexes: %s)'):format(self.name, tostring(name),
      table.concat(names, ', ')), 3)
  end
  if type(value) ~= 'string' then
    error(('index values are strings, not %s'):format(type(value)), 3)
  end
  self:refresh()
  local out = {}
  for key in pairs(self.keys[name][value] or {}) do out[#out + 1] = key end
  table.sort(out)
  return out
end

return M
