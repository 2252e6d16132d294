--- Prometheus's own tools for the metrics specs.
local K = require 'support.klua'

local M = {}

--- `promtool check metrics` on an exposition text: its output and a last
-- line "status N" (0 when promtool accepts it).
function M.check(text)
  local path = os.tmpname()
  K.write_file(path, text)
  local out = K.run_command(('promtool check metrics < %s 2>&1; echo "status $?"'):format(K.quote(path)))
  os.remove(path)
  return out
end

return M
