-- scripts/build/check-layers keeps src/ layered by pipeline stage (docs/architecture.md):
-- base < conn < wire < cache < lua < cli, each folder including only its own stage's
-- headers and those below, each #include naming its stage.
local K = require('support.klua')

local root = os.getenv('KLUA_ROOT') or '.'

-- Runs the check on a tree; returns what it printed and its exit status.
local function check(tree)
  local p = io.popen('python3 ' .. K.quote(root .. '/scripts/build/check-layers') .. ' '
    .. K.quote(tree) .. ' 2>&1; echo "rc=$?"')
  local out = p:read('a')
  p:close()
  local body, rc = out:match('^(.-)rc=(%d+)\n$')
  return body, tonumber(rc)
end

-- A tree holding files (path = text) under a temporary root.
local function tree(files)
  local dir = K.tmpdir()
  for path, text in pairs(files) do
    os.execute('mkdir -p ' .. K.quote(dir .. '/' .. path:match('^(.*)/')))
    K.write_file(dir .. '/' .. path, text)
  end
  return dir
end

describe('the layers of src/', function()
  it('hold in klua itself', function()
    assert.same({ '', 0 }, { check(root) })
  end)

  it('let a stage include its own headers and those of the stages below', function()
    assert.same({ '', 0 }, { check(tree{
      ['src/base/log.h'] = '',
      ['src/wire/obj.h'] = '#include "base/log.h"\n#include "wire/obj.h"\n',
    }) })
  end)

  it('refuse a header from a stage above, naming the file, the line and the order', function()
    local out, rc = check(tree{
      ['src/wire/obj.c'] = '#include <stdio.h>\n#include "cache/store.h"\n',
    })
    assert.equals(1, rc)
    assert.equals('src/wire/obj.c:2: #include "cache/store.h": cache is above wire '
      .. '(base < conn < wire < cache < lua < cli); move the code, or invert the call\n', out)
  end)

  it('refuse an include that does not name its stage, as test/c headers would be', function()
    local out, rc = check(tree{ ['src/lua/task.c'] = '#include "testing.h"\n' })
    assert.equals(1, rc)
    assert.matches('src/lua/task.c:1: #include "testing.h" does not name its stage', out, 1, true)
  end)

  it('refuse a file outside every stage and a folder that is not one', function()
    local out, rc = check(tree{ ['src/stray.c'] = '', ['src/extra/x.c'] = '' })
    assert.equals(1, rc)
    assert.matches('src/extra: not a stage', out, 1, true)
    assert.matches('src/stray.c: outside every stage', out, 1, true)
  end)
end)
