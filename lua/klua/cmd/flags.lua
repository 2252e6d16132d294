--- The command lines of the klua subcommands written in Lua that take
-- plain flags and one argument (klua record, klua webhook-config): a flag is
-- `--name value`, `--name=value` or, for a switch, `--name` alone
-- (`--name=true|false` too); any other word starting with "-" is refused.
local M = {}

--- Reads args: flags maps each spelling of a flag ('-n', '--namespace') to
-- its option's name, switches the names of the options that take no value.
-- Returns the options and the other words in order, or nil and a message.
function M.parse(args, flags, switches)
  local o, positional, i = {}, {}, 1
  while i <= #args do
    local a = args[i]
    local name, value = a:match('^(%-%-[^=]+)=(.*)$')
    name = name or a
    local key = flags[name]
    if key and switches and switches[key] then
      if value and value ~= 'true' and value ~= 'false' then
        return nil, ('%s is a switch: true or false, not "%s"'):format(name, value)
      end
      o[key] = value ~= 'false' or nil
    elseif key then
      if not value then
        i = i + 1
        value = args[i]
        if value == nil then return nil, ('flag %s needs a value'):format(name) end
      end
      o[key] = value
    elseif a:match('^%-.') then
      return nil, ('unknown flag: %s'):format(name)
    else
      positional[#positional + 1] = a
    end
    i = i + 1
  end
  return o, positional
end

--- The one argument among positional, or nil and a message: missing, the
-- one to show when there is none; else the first word too many.
function M.one(positional, missing)
  if #positional == 1 then return positional[1] end
  return nil, #positional == 0 and missing or ('unexpected argument "%s"'):format(positional[2])
end

return M
