--- Readers shared by the helper modules: each works alike on plain tables
-- and on read-only views (userdata with a metatable).
local M = {}

--- Whether v can be indexed as an object: a table or a view.
function M.indexable(v)
  local kind = type(v)
  return kind == 'table' or (kind == 'userdata' and getmetatable(v) ~= nil)
end

--- t[key] when t can be indexed, else nil.
function M.field(t, key)
  if M.indexable(t) then return t[key] end
end

--- Whether v is a string with at least one character.
function M.non_empty(v) return type(v) == 'string' and v ~= '' end

return M
