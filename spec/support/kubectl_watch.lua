--- `klua watch ARGS` next to `kubectl get ARGS -w` on the same sandbox: runs both,
-- makes a change (a pod created and its phase set, by default), waits until both
-- outputs show it and agree, and compares them row by row. One thing is
-- normalised: an AGE cell (such as "3s") and the padding after it, since the two
-- may print a second apart.
--
--   local KW = require('support.kubectl_watch')
--   local cmp = KW.new(sb, 'speaks')
--   cmp:same('pods -n speaks -o wide')
--   cmp:same('configmaps -n speaks', { flags = { '--watch-list' }, change = false, ... })
local K = require('support.klua')
local testing = require('klua.testing')
local assert = require('luassert')

local M = {}

--- The text with each AGE cell ("12s", "3m20s") as <age>, and the spaces after it one space.
function M.normalise(text)
  return (text:gsub('[^\n]+', function(line)
    return (line:gsub('(%S+)( *)', function(word, spaces)
      if word:match('^%d+s$') or word:match('^%d+m%d*s?$') then word = '<age>' end
      return word .. (spaces ~= '' and ' ' or '')
    end))
  end))
end

--- The lines of text, each with its newline.
function M.lines(text)
  local out = {}
  for line in text:gmatch('[^\n]*\n?') do if line ~= '' then out[#out + 1] = line end end
  return out
end

local Comparer = {}
Comparer.__index = Comparer

--- A comparer on sandbox sb whose changes are made in namespace ns.
function M.new(sb, ns)
  return setmetatable({ sb = sb, ns = ns, n = 0 }, Comparer)
end

-- `kubectl get ARGS -w` in the background; returns its output file.
function Comparer:kubectl_watch(args)
  local out = self.sb:tmpfile('kubectl-watch')
  os.execute(self.sb:kubectl_command('get ' .. args .. ' -w') .. ' > ' .. out .. ' 2> ' .. out .. '.err & echo $! > '
    .. out .. '.pid')
  return out
end

--- Runs both on kubectl's words (shell-quoted) and klua's (a list), with klua's
-- global flags opts.flags before `watch`, and creates a pod in the namespace and
-- sets its phase (unless opts.change is false); waits until opts.done(text, pod
-- name, 1 for kubectl or 2 for klua) holds for both outputs (by default: the
-- phase change shows) and they agree, then asserts that they are the same.
-- opts.first: a word both print first (default "webpod"). Returns both outputs.
function Comparer:compare(kubectl_args, klua_args, opts)
  opts = opts or {}
  local sb, ns = self.sb, self.ns
  self.n = self.n + 1
  local file = self:kubectl_watch(kubectl_args)
  local full = { '--kubeconfig', sb.kubeconfig }
  for _, f in ipairs(opts.flags or {}) do full[#full + 1] = f end
  full[#full + 1] = 'watch'
  for _, a in ipairs(klua_args) do full[#full + 1] = a end
  local p = K.spawn(full)
  local function kubectl_text() return K.read_file(file) or '' end
  local first = opts.first or 'webpod'
  local started = testing.eventually(function()
    return kubectl_text():find(first, 1, true) and p:output():find(first, 1, true)
  end, 15, { fail = false })
  local name = 'new' .. self.n .. 'p'
  local function settled(done)
    return testing.eventually(function()
      local a, b = kubectl_text(), p:output()
      return done(a, name, 1) and done(b, name, 2) and M.normalise(a) == M.normalise(b)
    end, 15, { fail = false })
  end
  local done = opts.done
  if opts.change ~= false then
    -- The pod's ADDED row first, then its phase: by default the two outputs
    -- are compared once each has one more "Running" than before the change,
    -- so that they cannot agree too early.
    assert(select(2, sb:try_kubectl(('run %s -n %s --image=nginx'):format(name, ns))))
    settled(function(t) return t:find(name, 1, true) end)
    local function running(t) return select(2, t:gsub('Running', '')) end
    local before = { running(kubectl_text()), running(p:output()) }
    assert(select(2, sb:try_kubectl(('patch pod %s -n %s --subresource=status --type=merge -p '
      .. '\'{"status":{"phase":"Running"}}\''):format(name, ns))))
    done = done or function(t, _, who) return running(t) > before[who] end
  end
  settled(done)
  os.execute('kill $(cat ' .. file .. '.pid) 2>/dev/null')
  local a, b, log = kubectl_text(), p:output(), p:errors()
  p:cleanup()
  assert.truthy(started, ('never started: kubectl:\n%s\nklua:\n%s\n%s'):format(a, b, log))
  assert.truthy(done(b, name, 2), 'klua never printed the change:\n' .. b .. '\n' .. log)
  assert.same(M.lines(M.normalise(a)), M.lines(M.normalise(b)))
  return a, b
end

--- compare with the same words for both: `kubectl get ARGS -w` and `klua watch ARGS`.
function Comparer:same(args, opts)
  local words = {}
  for w in args:gmatch('%S+') do words[#words + 1] = w end
  return self:compare(args, words, opts)
end

return M
