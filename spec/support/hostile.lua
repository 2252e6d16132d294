--- Starts and reads scripts/hostile-server, the server that misbehaves on purpose (its
-- --help lists the modes): its history, the bad responses it served and the requests it
-- got.
local cjson = require('cjson')
local testing = require('klua.testing')
local K = require('support.klua')
local fixtures = require('support.fixtures')

local M = {}

local Server = {}
Server.__index = Server

--- Starts the server with flags (a list) and waits until it listens; returns a handle.
-- Its directory, s.dir, is removed with the describe block that started it.
function M.start(flags)
  local s = setmetatable({ dir = K.tmpdir() }, Server)
  s.pid, s.url = K.start_server(s.dir, testing.root .. '/scripts/hostile-server', flags)
  return s
end

function Server:get(path)
  local curl = io.popen(('curl -sk --max-time 10 %s'):format(K.quote(self.url .. path)))
  local body = curl:read('a')
  curl:close()
  return body
end

--- The final state the server serves once it behaves: "KEY RV" lines, sorted.
function Server:state() return self:get('/hostile/v1/state') end

--- {bad_served = n, requests = {{method, path, authorization, time}...}}.
function Server:stats() return cjson.decode(self:get('/hostile/v1/stats')) end

--- Writes s.dir/kubeconfig for the server (namespace default) and returns its path.
-- opts: ca (a CA file), token.
function Server:kubeconfig(opts)
  opts = opts or {}
  return fixtures.kubeconfig(self.dir .. '/kubeconfig', { server = self.url, ca = opts.ca,
    user = opts.token and ('{token: "' .. opts.token .. '"}'), namespace = 'default' })
end

function Server:stop()
  os.execute('kill ' .. self.pid .. ' 2>/dev/null')
  os.execute('rm -rf ' .. K.quote(self.dir))
end

return M
