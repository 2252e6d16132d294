--- Helpers for the pipeline specs: run spec/scripts/recorder.lua against a
-- sandbox, read what its handlers saw, and compare its cache with the
-- server's state.
local K = require('support.klua')
local testing = require('klua.testing')
local assert = require('luassert')

local M = {}

M.RECORDER = (os.getenv('KLUA_ROOT') or '.') .. '/spec/scripts/recorder.lua'

--- Starts the recorder on resource (flags: extra klua flags before `run`).
-- Waits for its sync unless opts.no_wait.
function M.start(sb, resource, opts)
  opts = opts or {}
  local dump = K.tmpdir() .. '/cache'
  local args = { '--kubeconfig', sb.kubeconfig }
  for _, f in ipairs(opts.flags or {}) do args[#args + 1] = f end
  for _, a in ipairs({ 'run', M.RECORDER, resource, dump, opts.namespace or '' }) do args[#args + 1] = a end
  local p = K.spawn(args, { env = opts.env })
  p.dump = dump
  if not opts.no_wait then
    assert(p:wait_for('synced', 15), 'the recorder did not sync: ' .. p:errors())
  end
  return p
end

--- The recorder's lines, each split into words.
function M.events(p, from)
  local evs = {}
  for line in p:output():gmatch('[^\n]+') do
    local w = {}
    for x in line:gmatch('%S+') do w[#w + 1] = x end
    evs[#evs + 1] = w
  end
  if from then
    local rest = {}
    for i = from + 1, #evs do rest[#rest + 1] = evs[i] end
    return rest
  end
  return evs
end

--- The handler calls only (no synced/dumped lines), as "add KEY RV INITIAL"
-- strings, after the first `from` lines.
function M.calls(p, from)
  local out = {}
  for _, w in ipairs(M.events(p, from)) do
    if w[1] == 'add' or w[1] == 'update' or w[1] == 'delete' then out[#out + 1] = table.concat(w, ' ') end
  end
  return out
end

--- Asks the recorder for its cache: "KEY RV" lines, sorted.
function M.cache(p)
  os.remove(p.dump)
  K.write_file(p.dump .. '.req', '')
  return testing.poll(function() return testing.read_file(p.dump) end, 10) or ''
end

--- The server's state of a collection path as "KEY RV" lines, sorted.
function M.server_state(sb, path)
  local status, list = sb:json('GET', path)
  assert(status == 200, 'cannot list ' .. path)
  local lines = {}
  for _, it in ipairs(list.items) do
    local md = it.metadata
    local key = md.namespace and (md.namespace .. '/' .. md.name) or md.name
    lines[#lines + 1] = key .. ' ' .. md.resourceVersion
  end
  table.sort(lines)
  return table.concat(lines, '\n') .. '\n'
end

--- Waits until the recorder's cache equals the server's state; returns
-- both as last seen.
function M.converge(sb, p, path, timeout)
  local cache, server
  testing.poll(function()
    server = M.server_state(sb, path)
    cache = M.cache(p)
    return cache == server
  end, timeout or 20, 0.2)
  return cache, server
end

--- Like converge, and fails unless the cache came to equal the server's state;
-- returns both.
function M.converged(sb, p, path, timeout)
  local cache, server = M.converge(sb, p, path, timeout)
  assert.equals(server, cache)
  return cache, server
end

--- Clears the faults, waits until the recorder p's cache equals the server's state
-- at path, checks that no handler saw a resourceVersion go back, and returns the
-- recorder's counters (M.stats).
function M.settle(sb, p, path)
  sb:reset_faults()
  local cache, server = M.converge(sb, p, path)
  assert.equals(server, cache)
  assert.equals(0, M.stale(p))
  return M.stats(p)
end

--- Counters from the recorder's last "dumped" line.
function M.stats(p)
  local s = {}
  for _, w in ipairs(M.events(p)) do
    if w[1] == 'dumped' then
      for i = 2, #w do
        local k, v = w[i]:match('(%w+)=(%d+)')
        s[k] = tonumber(v)
      end
    end
  end
  return s
end

--- Checks that no handler saw an older resourceVersion after a newer one
-- for the same key; returns the number of violations.
function M.stale(p)
  local last, bad = {}, 0
  for _, w in ipairs(M.events(p)) do
    local rv = (w[1] == 'update') and tonumber(w[4]) or ((w[1] == 'add' or w[1] == 'delete') and tonumber(w[3]))
    if rv then
      if last[w[2]] and rv < last[w[2]] then bad = bad + 1 end
      last[w[2]] = rv
    end
  end
  return bad
end

--- Creates a ConfigMap through the API; returns its resourceVersion.
function M.configmap(sb, name, data, ns)
  local status, obj = sb:json('POST', '/api/v1/namespaces/' .. (ns or 'default') .. '/configmaps',
    { metadata = { name = name }, data = data or { v = '1' } })
  assert(status == 201, 'cannot create configmap ' .. name .. ': ' .. tostring(status))
  return obj.metadata.resourceVersion
end

return M
