--- Starts spec/support/webhook_server.py, an HTTPS admission and conversion webhook whose
-- paths each behave one way (its docstring lists them), with a CA and a server certificate
-- for 127.0.0.1 made by the openssl CLI, and reads the requests it got.
--
--   local webhook = require 'support.webhook'
--   local w = webhook.start()
--   w:client('/deny')          -- a clientConfig: {url = ..., caBundle = ...}
--   w:requests('/deny')        -- the AdmissionReviews sent there, oldest first
local cjson = require('cjson')
local testing = require('klua.testing')
local K = require('support.klua')

local M = {}

local Server = {}
Server.__index = Server

local CERTS = [[
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 1 -subj /CN=webhook-ca &&
openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=127.0.0.1 &&
printf 'subjectAltName=IP:127.0.0.1\n' > san &&
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 1 -extfile san
]]

--- Makes the certificates, starts the server and waits until it listens. Its directory
-- goes with the describe block that started it; s:stop() ends it (it also exits with the
-- busted process).
function M.start()
  local s = setmetatable({ dir = K.tmpdir() }, Server)
  local made = os.execute(('cd %s && { %s; } > openssl.log 2>&1'):format(K.quote(s.dir), (CERTS:gsub('%s+$', ''))))
  assert(made, 'openssl could not make the certificates: ' .. K.read_file(s.dir .. '/openssl.log'))
  s.ca_bundle = K.run_command('base64 -w0 ' .. K.quote(s.dir .. '/ca.crt'))
  s.log = s.dir .. '/requests.jsonl'
  local args = { 'python3', testing.root .. '/spec/support/webhook_server.py', '--cert', s.dir .. '/server.crt',
    '--key', s.dir .. '/server.key', '--log', s.log, '--owner-pid', K.run_command('echo $PPID') }
  local quoted = {}
  for i, a in ipairs(args) do quoted[i] = K.quote(a) end
  s.pid = tonumber(K.run_command(('%s > %s/stdout 2> %s/stderr & echo $!'):format(
    table.concat(quoted, ' '), K.quote(s.dir), K.quote(s.dir))))
  s.url = testing.poll(function() return K.read_file(s.dir .. '/stdout'):match('listening on (%S+)') end, 10, 0.1)
  assert(s.url, 'webhook_server.py did not start: ' .. K.read_file(s.dir .. '/stderr'))
  return s
end

--- A webhook clientConfig for path: its URL and the CA that signed the server.
function Server:client(path)
  return { url = self.url .. path, caBundle = self.ca_bundle }
end

--- The requests made to path, oldest first: {path =, query =, body = the review sent}.
function Server:requests(path)
  local out = {}
  for line in K.read_file(self.log):gmatch('[^\n]+') do
    local r = cjson.decode(line)
    if r.path == path then out[#out + 1] = r end
  end
  return out
end

function Server:stop()
  os.execute('kill ' .. self.pid .. ' 2>/dev/null')
end

return M
