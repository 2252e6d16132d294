-- docs/img/reflector.svg, runtime.svg and pipeline.svg are drawn by
-- scripts/build/gen-diagrams (`make docs`) from the transition tables that
-- docs/architecture.md prints (spec/unit/reflector_spec.lua and
-- runtime_phases_spec.lua check those against the code): the committed
-- pictures must be the ones drawn now, so a changed table without
-- `make docs` fails here.
local K = require('support.klua')

local root = os.getenv('KLUA_ROOT') or '.'
local NAMES = { 'reflector.svg', 'runtime.svg', 'pipeline.svg' }

-- Draws the pictures of the tree at src into a new directory; returns it.
local function draw(src)
  local out = K.tmpdir()
  K.run_command(('python3 %s/scripts/build/gen-diagrams %s %s 2>&1'):format(K.quote(root), K.quote(src),
    K.quote(out)))
  return out
end

describe('the diagrams of docs/img', function()
  it('are what make docs draws from the tables: run make docs after changing a table', function()
    local out = draw(root)
    for _, name in ipairs(NAMES) do
      local drawn = K.read_file(out .. '/' .. name)
      assert.truthy(drawn, 'gen-diagrams drew no ' .. name)
      assert.truthy(drawn == K.read_file(root .. '/docs/img/' .. name),
        'docs/img/' .. name .. ' is not what gen-diagrams draws: run make docs')
    end
  end)

  it('change when a transition of the table does', function()
    -- A copy of the tree's docs whose reflector table has one cause renamed.
    local tree = K.tmpdir()
    local abs = K.run_command('cd ' .. K.quote(root) .. ' && pwd'):gsub('\n$', '')
    K.run_command(('mkdir -p %s/docs && ln -s %s/src %s/lua %s/'):format(K.quote(tree), K.quote(abs), K.quote(abs),
      K.quote(tree)))
    local doc = K.read_file(root .. '/docs/architecture.md')
    local changed, n = doc:gsub('silent past the idle limit', 'silent past the idle deadline')
    assert.equals(1, n)
    K.write_file(tree .. '/docs/architecture.md', changed)
    local drawn = K.read_file(draw(tree) .. '/reflector.svg')
    assert.truthy(drawn and drawn:find('silent past the idle deadline', 1, true), drawn)
    assert.falsy(drawn == K.read_file(root .. '/docs/img/reflector.svg'))
  end)
end)
