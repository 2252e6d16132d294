-- The transition tables of klua's state machines (the reflector's, the
-- runtime's phases, the Lua collector's modes), as their C header and
-- docs/architecture.md print them:
-- the specs compare both copies with what the code declares.
local assert = require('luassert')

local M = {}

local ROOT = os.getenv('KLUA_ROOT') or '.'

local function read(path)
  local f = assert(io.open(ROOT .. '/' .. path))
  local s = f:read('a')
  f:close()
  return s
end

--- rows ({from=, to=, ['then']=, [when]=}) as one line each: the state
-- named once, in a column `states` wide (10 unless given), the cause in
-- one `width` wide.
function M.render(rows, when, width, states)
  states = states or 10
  local fmt = '%-' .. states .. 's %-' .. width .. 's -> %-' .. states .. 's %s'
  local out, last = {}, nil
  for _, t in ipairs(rows) do
    local from = t.from ~= last and t.from or ''
    last = t.from
    out[#out + 1] = (string.format(fmt, from, t[when], t.to, t['then']):gsub('%s+$', ''))
  end
  return table.concat(out, '\n')
end

--- The block of a C header's comment between ` * BEGIN` and ` * END`
-- lines, without the comment's margin; nil without one.
function M.header(path, begin, finish)
  local block = read(path):match('\n %* ' .. begin .. '\n(.-)\n %* ' .. finish .. '\n')
  if not block then return nil end
  local lines = {}
  for line in (block .. '\n'):gmatch('(.-)\n') do lines[#lines + 1] = (line:gsub('^ %* ?', '')) end
  return table.concat(lines, '\n')
end

--- The code block of docs/architecture.md under the comment that starts
-- with `marker`; nil without one.
function M.doc(marker)
  return read('docs/architecture.md'):match('<!%-%- ' .. marker .. '.-%-%->\n```\n(.-)\n```\n')
end

--- The two checks that the table rows (printed as render(rows, t.when, t.width, t.states))
-- stands as the code declares it in the C header t.header, between its t.begin
-- and t.finish lines, and in docs/architecture.md under the comment t.doc: a list
-- of { name = a spec's name, check = its function }.
function M.printed_as_declared(rows, t)
  local name = t.header:match('[^/]+$')
  return {
    { name = 'is printed in ' .. name .. ' as the code declares it', check = function()
      local block = M.header(t.header, t.begin, t.finish)
      assert.truthy(block, name .. ' has no ' .. t.begin .. ' block')
      assert.equals(M.render(rows, t.when, t.width, t.states), block)
    end },
    { name = 'is printed in docs/architecture.md as the code declares it', check = function()
      local block = M.doc(t.doc)
      assert.truthy(block, 'docs/architecture.md has no ' .. t.doc .. ' block')
      assert.equals(M.render(rows, t.when, t.width, t.states), block)
    end },
  }
end

--- Checks that every row of rows leads from and to a state of `states` (a
-- list of names), and that no state has two rows for one event (`when`).
function M.assert_known(rows, states, when)
  local known, seen = {}, {}
  for _, name in ipairs(states) do known[name] = true end
  for _, t in ipairs(rows) do
    assert.truthy(known[t.from], t.from)
    assert.truthy(known[t.to], t.to)
    local key = t.from .. ' / ' .. t[when]
    assert.is_nil(seen[key], 'two rows for ' .. key)
    seen[key] = true
  end
end

--- Checks that rows reach every state of `states` from `start`, and `goal`
-- from each state of `from` (lists of names).
function M.assert_reached(rows, states, start, goal, from)
  local reach = { [start] = true }
  repeat
    local grew = false
    for _, t in ipairs(rows) do
      if reach[t.from] and not reach[t.to] then
        reach[t.to], grew = true, true
      end
    end
  until not grew
  for _, name in ipairs(states) do assert.truthy(reach[name], name .. ' is never reached') end
  local leads = {}
  for _, t in ipairs(rows) do
    if t.to == goal then leads[t.from] = true end
  end
  for _, name in ipairs(from) do assert.truthy(leads[name], name .. ' never leads to ' .. goal) end
end

return M
