-- `make demo` (scripts/demo): the PodSet scenario from a fresh sandbox, as a
-- newcomer first sees klua. It must end 0, and the controller starts once
-- the sandbox serves PodSets from its watch cache, so its log opens with
-- its sync, not with the 429 a real API server (and the sandbox) gives
-- while a new resource's watch cache fills.
local K = require('support.klua')

local ROOT = os.getenv('KLUA_ROOT') or '.'

describe('make demo', function()
  it('ends 0, and the controller opens with its sync, not with a warning', function()
    local dir = K.tmpdir()
    local code = os.execute(('KLUA_BIN=%s sh %s/scripts/demo > %s/out 2>&1'):format(K.quote(K.bin), K.quote(ROOT),
      K.quote(dir)))
    local out = K.read_file(dir .. '/out')
    assert.truthy(code, out)
    local said = {}
    for line in out:gmatch('    controller ([^\n]*)') do said[#said + 1] = line end
    assert.truthy(said[1] and said[1]:find('^info: managing 0 PodSets with 0 pods'), out)
  end)
end)
