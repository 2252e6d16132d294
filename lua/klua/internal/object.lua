--- The objects klua hands to scripts whose state is all Lua's: controllers,
-- elections, metrics. Each is a klua.<kind> userdata, as informers, queues
-- and timers are (src/lua/object.h), in front of its module's own table,
-- so that a script reaches its methods and nothing else: no field to read,
-- overwrite or collide with (docs/architecture.md, "The Lua layer").
local core = require('klua.core')

local M = {}

--- Makes the methods of klua.<kind>'s objects: each of names calls the
-- method of that name of Class on the object's table, as a tail call, so
-- that the errors it raises at level 2 name the script's line.
-- tostring(obj) is describe(table). Returns the methods table, to add
-- methods of the object's own to, and the function that makes an object
-- in front of a table.
function M.class(kind, Class, names, describe)
  local methods = core.class(kind, { __tostring = function(obj) return describe(core.state(obj)) end })
  for _, name in ipairs(names) do
    local method = Class[name]
    methods[name] = function(obj, ...)
      if not core.is(obj, kind) then error(('call it as %s:%s(...), with a colon'):format(kind, name), 2) end
      return method(core.state(obj), ...)
    end
  end
  return methods, function(t) return core.new(kind, t) end
end

return M
