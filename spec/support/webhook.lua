--- Webhooks in specs: spec/support/webhook_server.py, an HTTPS admission and conversion
-- webhook whose paths each behave one way (its docstring lists them), and klua serving a
-- script's webhooks to a sandbox with the configuration `klua webhook-config` prints;
-- their certificates made by the openssl CLI.
--
--   local webhook = require('support.webhook')
--   local w = webhook.start()
--   w:client('/deny')          -- a clientConfig: {url = ..., caBundle = ...}
--   w:requests('/deny')        -- the AdmissionReviews sent there, oldest first
--
--   local p = webhook.serve(sb, script)  -- klua run SCRIPT, serving on p.url with p.certs
--   webhook.configure(sb, script, p)     -- its webhook-config, applied to sb
local cjson = require('cjson')
local testing = require('klua.testing')
local K = require('support.klua')

local M = {}

local Server = {}
Server.__index = Server

--- A CA made in dir: NAME.crt and NAME.key (EC P-256, a day long). Returns the path of
-- NAME.crt.
function M.ca(dir, name)
  local cmd = ('cd %s && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 '
    .. '-subj /CN=%s -keyout %s.key -out %s.crt 2>/dev/null'):format(K.quote(dir), name, name, name)
  assert(os.execute(cmd), 'openssl made no CA')
  return dir .. '/' .. name .. '.crt'
end

--- A serving pair for 127.0.0.1 and localhost, signed by the CA NAME made in dir by M.ca,
-- written as into/tls.crt and into/tls.key: the names klua's --webhook-cert-dir (and
-- controller-runtime's) reads.
function M.pair(dir, ca, into)
  local cmd = ('cd %s && openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=localhost '
    .. '-keyout %s/tls.key -out leaf.csr 2>/dev/null && printf "subjectAltName=IP:127.0.0.1,DNS:localhost\\n" > ext '
    .. '&& openssl x509 -req -in leaf.csr -CA %s.crt -CAkey %s.key -CAcreateserial -days 1 -extfile ext '
    .. '-out %s/tls.crt 2>/dev/null'):format(K.quote(dir), K.quote(into), ca, ca, K.quote(into))
  assert(os.execute(cmd), 'openssl made no pair')
end

--- Makes the certificates, starts the server and waits until it listens. Its directory
-- goes with the describe block that started it; s:stop() ends it (it also exits with the
-- busted process).
function M.start()
  local s = setmetatable({ dir = K.tmpdir() }, Server)
  M.ca(s.dir, 'ca')
  M.pair(s.dir, 'ca', s.dir)
  s.ca_bundle = K.run_command('base64 -w0 ' .. K.quote(s.dir .. '/ca.crt'))
  s.log = s.dir .. '/requests.jsonl'
  s.pid, s.url = K.start_server(s.dir, testing.root .. '/spec/support/webhook_server.py',
    { '--cert', s.dir .. '/tls.crt', '--key', s.dir .. '/tls.key', '--log', s.log })
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

--- Starts `klua run SCRIPT` against the sandbox cluster (cluster:run, which opts go to),
-- serving its webhooks on a free port of 127.0.0.1 with a pair made for it, and waits until
-- it listens. The process returned also has port, url (https://127.0.0.1:PORT), certs
-- (the --webhook-cert-dir, with the CA ca.crt and ca.key that signed its tls.crt) and ca
-- (the path of ca.crt).
function M.serve(cluster, script, opts)
  opts = opts or {}
  local certs = K.tmpdir()
  M.ca(certs, 'ca')
  M.pair(certs, 'ca', certs)
  local flags = { '--webhook-bind-address', '127.0.0.1:0', '--webhook-cert-dir', certs }
  for _, f in ipairs(opts.flags or {}) do flags[#flags + 1] = f end
  local p = cluster:run(script, { flags = flags, args = opts.args })
  local pattern = 'webhooks over HTTPS on [^\n]*%(port (%d+)%)'
  assert(p:wait_for(pattern, 20 * K.slowdown, 'err'), 'klua did not serve its webhooks: ' .. p:errors())
  p.port = tonumber(p:errors():match(pattern))
  p.url = 'https://127.0.0.1:' .. p.port
  p.certs, p.ca = certs, certs .. '/ca.crt'
  return p
end

--- What `klua webhook-config SCRIPT --url P.URL --ca-bundle CA` prints for the klua p
-- (M.serve) serving script; ca defaults to p.ca.
function M.config(script, p, ca)
  local out, err, code = K.run { 'webhook-config', script, '--url', p.url, '--ca-bundle', ca or p.ca }
  assert(code == 0, 'klua webhook-config failed: ' .. err)
  return out
end

--- Registers the webhooks of script, served by p, with the sandbox cluster as a user
-- would: applies the configurations `klua webhook-config` prints (M.config) and merges
-- each conversion stanza it prints as comments into its CRD with `kubectl patch`.
-- Returns what webhook-config printed.
function M.configure(cluster, script, p, ca)
  local out = M.config(script, p, ca)
  if out:find('\nkind: ') then cluster:apply(out) end
  local stanzas, crd = {}, nil
  for line in out:gmatch('[^\n]+') do
    local name = line:match('^# The conversion webhook %S+ of CustomResourceDefinition (%S+):')
    if name then
      crd = { name = name, lines = {} }
      stanzas[#stanzas + 1] = crd
    elseif crd and line:match('^#   ') then
      crd.lines[#crd.lines + 1] = line:sub(5)
    end
  end
  for _, s in ipairs(stanzas) do
    local file = K.tmpdir() .. '/conversion.yaml'
    K.write_file(file, table.concat(s.lines, '\n') .. '\n')
    cluster:kubectl(('patch customresourcedefinition %s --type merge --patch-file %s'):format(s.name,
      K.quote(file)))
  end
  return out
end

return M
