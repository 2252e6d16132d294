--- Prometheus's own tools for the metrics specs, and a reader of the text
-- exposition format.
local K = require('support.klua')

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

-- {name = value} of a sample's label text, and the label names in order.
local function labels(text)
  local got, names, pos = {}, {}, 1
  text = text or ''
  while pos <= #text do
    local name, after = text:match('^([%w_]+)="()', pos)
    assert(name, 'not a label at: ' .. text:sub(pos))
    local value, i = {}, after
    while i <= #text and text:sub(i, i) ~= '"' do
      local c = text:sub(i, i)
      if c == '\\' then
        i = i + 1
        c = ({ n = '\n' })[text:sub(i, i)] or text:sub(i, i)
      end
      value[#value + 1] = c
      i = i + 1
    end
    got[name] = table.concat(value)
    names[#names + 1] = name
    pos = text:sub(i + 1, i + 1) == ',' and i + 2 or i + 1
  end
  return got, names
end

--- The families of an exposition text: name -> {type =, help =, samples =
-- {{name =, labels = {name = value}, label_names = {...}, value =}}}, a
-- histogram's _bucket, _sum and _count samples under its own name.
function M.parse(text)
  local families, current = {}, nil
  local function family(name)
    families[name] = families[name] or { samples = {} }
    return families[name]
  end
  for line in text:gmatch('[^\n]+') do
    local kind, name, rest = line:match('^# (%u+) ([%w_:]+) ?(.*)$')
    if kind == 'HELP' then
      family(name).help = rest:gsub('\\(.)', { n = '\n', ['\\'] = '\\' })
    elseif kind == 'TYPE' then
      current = name
      family(name).type = rest
    elseif not kind then
      local sample, label_text, value = line:match('^([%w_:]+){(.*)} (%S+)$')
      if not sample then sample, value = line:match('^([%w_:]+) (%S+)$') end
      local got, names = labels(label_text)
      local owner = families[sample] and sample or current
      table.insert(family(owner).samples, { name = sample, labels = got, label_names = names,
        value = tonumber(value) or value })
    end
  end
  return families
end

return M
