--- Runs the klua binary from specs: to completion, or in the background with its output
-- captured to files that the spec can poll. The processes, temporary directories and
-- polling are the harness's (lua/klua/testing.lua, docs/testing.md); this adds what only
-- klua's own specs need.
local testing = require('klua.testing')

local M = {}

M.bin = testing.bin

--- Under make test-asan klua runs several times slower and its allocator
-- holds redzones and a quarantine: waits and memory bounds scale by this.
M.slowdown = os.getenv('KLUA_ASAN') and 3 or 1

M.quote = testing.quote
M.tmpdir = testing.tmpdir
M.write_file = testing.write_file

--- The contents of the file at path; '' when it cannot be read.
function M.read_file(path)
  return testing.read_file(path) or ''
end

--- Runs a shell command; returns its stdout without the final newline.
function M.run_command(cmd)
  local p = io.popen(cmd)
  local out = p:read('a')
  p:close()
  return (out:gsub('\n$', ''))
end

--- Starts `python3 SCRIPT ARGS...` in the background, its stdout and stderr in dir,
-- and waits (10 s at most) until it prints "listening on URL"; it ends with the
-- busted process (--owner-pid). Returns its pid and URL.
function M.start_server(dir, script, args)
  local words = { 'python3', script, '--owner-pid', M.run_command('echo $PPID') }
  for _, a in ipairs(args or {}) do words[#words + 1] = a end
  local quoted = {}
  for i, a in ipairs(words) do quoted[i] = M.quote(a) end
  local pid = tonumber(M.run_command(('%s > %s/stdout 2> %s/stderr & echo $!'):format(
    table.concat(quoted, ' '), M.quote(dir), M.quote(dir))))
  local url = testing.poll(function() return M.read_file(dir .. '/stdout'):match('listening on (%S+)') end, 10, 0.1)
  assert(url, script:match('[^/]+$') .. ' did not start: ' .. M.read_file(dir .. '/stderr'))
  return pid, url
end

--- GETs url with curl (10 s at most); returns the HTTP status (nil when
-- there was no answer) and the body.
function M.curl(url)
  local out = M.run_command(('curl -s --max-time 10 -w "\\n%%{http_code}" %s'):format(M.quote(url)))
  local body, code = out:match('^(.*)\n(%d+)$')
  return tonumber(code), body
end

--- text with the position ("CHUNK:LINE: ") dropped from each error message that
-- follows a tab, as a script prints pcall's error after a name.
function M.unplaced(text) return (text:gsub('\t[^\t\n]-:%d+: ', '\t')) end

--- How many times pattern (a Lua pattern) occurs in text.
function M.count(text, pattern)
  return select(2, text:gsub(pattern, ''))
end

--- The lines of text, without the empty ones.
function M.lines(text)
  local out = {}
  for line in text:gmatch('[^\n]+') do out[#out + 1] = line end
  return out
end

--- The lines of text (without the empty ones), each as its words with one space
-- between them: the rows of a table printed in columns, as kubectl prints them.
function M.rows(text)
  local out = {}
  for line in text:gmatch('[^\n]+') do
    local words = {}
    for w in line:gmatch('%S+') do words[#words + 1] = w end
    out[#out + 1] = table.concat(words, ' ')
  end
  return out
end

--- s cut into pieces of size bytes (the last one shorter), as a stream may
-- deliver it.
function M.chunks(s, size)
  local out = {}
  for i = 1, #s, size do out[#out + 1] = s:sub(i, i + size - 1) end
  return out
end

--- FNV-1a, 32 bits, of s: the hash of --shards, as docs/scale.md documents
-- it (a key's shard is M.fnv1a(key) % N).
function M.fnv1a(s)
  local h = 0x811c9dc5
  for i = 1, #s do h = ((h ~ s:byte(i)) * 0x01000193) & 0xffffffff end
  return h
end

--- FNV-1a, 64 bits, of s, as kube-apiserver's shardRange hashes a uid
-- (KEP-5866); the bits of the unsigned value in a Lua integer.
function M.fnv1a64(s)
  local h = 0xcbf29ce484222325
  for i = 1, #s do h = (h ~ s:byte(i)) * 0x100000001b3 end
  return h
end

--- The width of each of n (>= 2) shard ranges: floor((2^64 - 1) / n) + 1, by long
-- division bit by bit.
function M.shard_width(n)
  local w, rem = 0, 0
  for bit = 63, 0, -1 do
    rem = (rem << 1) | 1
    if rem >= n then rem, w = rem - n, w | (1 << bit) end
  end
  return w + 1
end

--- The shard of n whose range [i * w, (i + 1) * w) holds the hash of uid: the last i
-- whose start is not above it.
function M.uid_shard(uid, n)
  if n == 1 then return 0 end
  local h, w = M.fnv1a64(uid), M.shard_width(n)
  local i = 0
  while i + 1 < n and not math.ult(h, (i + 1) * w) do i = i + 1 end
  return i
end

--- A Lua pattern that matches s literally.
function M.literally(s) return (s:gsub('%p', '%%%0')) end

--- The value of one sample in a Prometheus exposition, e.g.
-- K.sample(text, 'klua_lua_memory_bytes'), or nil when it is not there.
function M.sample(text, series)
  return tonumber(text:match('\n' .. M.literally(series) .. ' ([^\n]+)'))
end

--- Writes a Lua script into a fresh temp directory and returns its path.
function M.script(text)
  local path = testing.tmpdir() .. '/script.lua'
  testing.write_file(path, text)
  return path
end

--- For the describe block it is called in: a function that takes a process (from
-- M.spawn), returns it, and has it cleaned up after the spec that started it, so that
-- the next spec starts among none of them.
--
--   local track = K.per_spec()
--   local p = track(K.spawn({ ... }))
function M.per_spec()
  local procs = {}
  require('busted').after_each(function()
    for _, p in ipairs(procs) do p:cleanup() end
    procs = {}
  end)
  return function(p)
    procs[#procs + 1] = p
    return p
  end
end

--- Runs klua with args until it exits or `timeout` seconds pass (then it is
-- sent SIGTERM, and SIGKILL 5 s later if it is still running). Returns
-- stdout, stderr, exit code (124 on timeout, 137 when it had to be killed).
-- opts: env (variables to add), timeout, bin (another klua binary, or a
-- command that runs one), cwd (the directory to run it in), stdout (a path
-- such as /dev/full for klua to write to; the stdout returned is then
-- empty), pipe (a shell command such as "head -1" klua writes into; the
-- stdout returned is what the command printed).
function M.run(args, opts)
  opts = opts or {}
  return testing.run(args, { env = opts.env, bin = opts.bin, cwd = opts.cwd, stdout = opts.stdout,
    pipe = opts.pipe, timeout = opts.timeout or 20 * M.slowdown })
end

--- Writes text as a script and runs `klua [--kubeconfig K] [flags] run SCRIPT [args]` to
-- completion (M.run). opts: kubeconfig, flags (before run), args (after the script),
-- env, timeout. Returns stdout, stderr, the exit code and the script's path.
function M.run_script(text, opts)
  opts = opts or {}
  local path = M.script(text)
  local args = {}
  if opts.kubeconfig then
    args[1], args[2] = '--kubeconfig', opts.kubeconfig
  end
  for _, f in ipairs(opts.flags or {}) do args[#args + 1] = f end
  args[#args + 1] = 'run'
  args[#args + 1] = path
  for _, a in ipairs(opts.args or {}) do args[#args + 1] = a end
  local out, err, code = M.run(args, { env = opts.env, timeout = opts.timeout })
  return out, err, code, path
end

--- The words of `klua --server http://127.0.0.1:1 [flags] run SCRIPT` for a
-- script text that needs no API server (it only runs timers): for M.run and
-- M.spawn.
function M.offline_args(text, flags)
  local args = { '--server', 'http://127.0.0.1:1' }
  for _, f in ipairs(flags or {}) do args[#args + 1] = f end
  args[#args + 1] = 'run'
  args[#args + 1] = M.script(text)
  return args
end

--- Like run_script, and fails unless the script exited 0 (saying its output); returns
-- stdout and stderr.
function M.run_script_ok(text, opts)
  local out, err, code = M.run_script(text, opts)
  assert(code == 0, ('the script exited %s\nstdout:\n%s\nstderr:\n%s'):format(tostring(code), out, err))
  return out, err
end

--- Like run_script, and fails unless the script exited 1 with message (plain text) on
-- stderr, as klua refuses a mistake in a call; returns stderr.
function M.run_script_refused(text, opts, message)
  local _, err, code = M.run_script(text, opts)
  assert(code == 1, ('the script exited %s, not 1\nstderr:\n%s'):format(tostring(code), err))
  assert(err:find(message, 1, true), ('stderr does not say %q:\n%s'):format(message, err))
  return err
end

--- Runs klua ARGS (M.run, with opts) and fails unless it exits with status code, its
-- stderr matching pattern (a Lua pattern); returns its stdout and stderr.
function M.run_fails(args, code, pattern, opts)
  local out, err, got = M.run(args, opts)
  assert(got == code, ('klua %s exited %s, not %d\nstderr:\n%s'):format(table.concat(args, ' '), tostring(got), code,
    err))
  assert(err:find(pattern), ('stderr does not match %q:\n%s'):format(pattern, err))
  return out, err
end

--- Like run_script_refused for a script that only starts
-- klua.informer { resource = 'configmaps', OPTIONS } against the sandbox sb, OPTIONS
-- the text of more fields; returns stderr.
function M.informer_refused(sb, options, message)
  return M.run_script_refused("klua.informer { resource = 'configmaps', " .. options .. ' }',
    { kubeconfig = sb.kubeconfig }, message)
end

--- Starts klua in the background (testing.spawn). Returns a process with :output(),
-- :errors(), :wait_for(pattern, timeout, where), :signal(sig), :stop(), :wait(timeout),
-- :cleanup().
M.spawn = testing.spawn

--- Waits until no signal is pending for process p (/proc/PID/status): the one
-- sent has reached its handler, so that a second one sent now is not merged
-- into it. Returns whether that happened within timeout seconds (default 10).
function M.signal_delivered(p, timeout)
  return testing.poll(function()
    local status = testing.read_file('/proc/' .. p.pid .. '/status')
    if not status then return true end
    return not status:find('\nSigPnd:%s*0*[1-9a-f]') and not status:find('\nShdPnd:%s*0*[1-9a-f]')
  end, timeout or 10) == true
end

--- Waits until p, a candidate in a leader election that prints "leading ID" once it
-- leads, has printed it for id; returns p.
function M.leading(p, id)
  assert(p:wait_for('leading ' .. id, 20 * M.slowdown), ('%s never led:\n%s'):format(id, p:errors()))
  return p
end

--- Starts `klua watch` processes for a spec file and stops them all at once:
-- w.watch(args, kubeconfig) runs `klua --kubeconfig K watch ARGS...` (flags
-- first), K the kubeconfig given or else default(); w.track(p) adds a process
-- started otherwise; w.watching(sb, args, kubeconfig) starts one like w.watch
-- and returns it once the sandbox sb has had its WATCH request (sent from the
-- resourceVersion of its LIST), so that a change made then reaches it;
-- w.cleanup() (for after_each) stops every one.
function M.watcher(default)
  local procs, w = {}, {}
  function w.track(p)
    procs[#procs + 1] = p
    return p
  end
  function w.watch(args, kubeconfig)
    local full = { '--kubeconfig', kubeconfig or default(), 'watch' }
    for _, a in ipairs(args) do full[#full + 1] = a end
    return w.track(M.spawn(full))
  end
  function w.watching(sb, args, kubeconfig)
    local function watches() return sb:stats().requests.watch or 0 end
    local before = watches()
    local p = w.watch(args, kubeconfig)
    testing.eventually(function() return watches() > before end, 15, { what = 'klua watch to send its WATCH request' })
    return p
  end
  function w.cleanup()
    for _, p in ipairs(procs) do p:cleanup() end
    procs = {}
  end
  return w
end

--- For a describe block of `klua watch` specs: a sandbox shared by its specs
-- (testing.with_sandbox(opts)) and a watcher of it (M.watcher) whose processes
-- are stopped after each spec. Returns the sandbox and the watcher.
function M.watched_sandbox(opts)
  local sb = testing.with_sandbox(opts)
  local w = M.watcher(function() return sb.kubeconfig end)
  require('busted').after_each(w.cleanup)
  return sb, w
end

return M
