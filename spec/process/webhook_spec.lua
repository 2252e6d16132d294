-- klua.webhook served by `klua run --webhook-bind-address`: HTTPS POSTs of
-- AdmissionReview v1 and ConversionReview v1 bodies as kube-apiserver
-- sends them (apiserver's pkg/admission/plugin/webhook/request/
-- admissionreview.go, apiextensions-apiserver's pkg/apiserver/conversion/
-- webhook_converter.go), answered as they expect them; a handler's
-- failure answered 500 before the `timeout` the API server appends to the
-- URL, so that its failurePolicy decides (docs/webhooks.md); TLS 1.2 and
-- up only; a certificate pair replaced on disk served without a restart;
-- controller-runtime's webhook metrics.
local testing = require('klua.testing')
local cjson = require('cjson')
local K = require('support.klua')
local lyaml = require('lyaml')
local webhook = require('support.webhook')

local SCRIPT = [[
klua.webhook.validating { path = '/validate', resources = { 'v1/configmaps' }, handler = function(req)
  local o = req.object
  if o.data and o.data.verdict == 'deny' then return false, 'verdict is deny', { 'look at data' } end
  if o.data and o.data.verdict == 'warn' then return true, { 'only a warning' } end
  if o.data and o.data.verdict == 'error' then error('the handler broke') end
  if o.data and o.data.verdict == 'spin' then while true do end end
  if o.data and o.data.verdict == 'sleep' then klua.log.info('the handler sleeps') klua.sleep(60) end
  if o.data and o.data.verdict == 'write' then o.data.verdict = 'x' end
  if o.data and o.data.verdict == 'echo' then
    return false, klua.json.encode {
      operation = req.operation, user = req.user_info.username, dry_run = req.dry_run,
      namespace = req.namespace, name = req.name, kind = req.kind.kind, resource = req.resource.resource,
      old = req.old_object and req.old_object.data.verdict or 'none', sub = req.sub_resource or 'none' }
  end
  return true
end }
klua.webhook.mutating { path = '/mutate', resources = { 'v1/configmaps' }, handler = function(req)
  local o = req.object
  if o.data and o.data.verdict == 'same' then return klua.copy(o) end
  if o.data and o.data.verdict == 'keep' then return nil end
  if o.data and o.data.verdict == 'deny' then return false, 'no mutation for you' end
  local c = klua.copy(o)
  c.metadata.labels = c.metadata.labels or {}
  c.metadata.labels['example.com/owner~team'] = 'lua'
  c.data.verdict = nil
  c.data.added = 'yes'
  return c, { 'mutated' }
end }
klua.webhook.conversion { path = '/convert', crd = 'widgets.example.com', convert = function(obj, desired)
  local c = klua.copy(obj)
  if c.spec and c.spec.broken then error('cannot convert ' .. c.metadata.name) end
  if c.spec and c.spec.stay then return c end
  c.apiVersion = desired
  if desired == 'example.com/v2' then c.spec.size = { value = c.spec.size } else c.spec.size = c.spec.size.value end
  return c
end }
]]

-- An AdmissionReview v1 as kube-apiserver sends it for a ConfigMap.
local function admission_review(opts)
  local object = opts.object
  return {
    apiVersion = 'admission.k8s.io/v1', kind = 'AdmissionReview',
    request = {
      uid = opts.uid or '0df28fbd-5f5f-11e8-bc74-36e6bb280816',
      kind = { group = '', version = 'v1', kind = 'ConfigMap' },
      resource = { group = '', version = 'v1', resource = 'configmaps' },
      requestKind = { group = '', version = 'v1', kind = 'ConfigMap' },
      requestResource = { group = '', version = 'v1', resource = 'configmaps' },
      name = object and object.metadata.name or 'gone', namespace = 'default',
      operation = opts.operation or 'CREATE',
      userInfo = { username = 'kubernetes-admin', groups = { 'system:masters', 'system:authenticated' } },
      object = object or cjson.null, oldObject = opts.old or cjson.null,
      dryRun = opts.dry_run or false,
      options = { apiVersion = 'meta.k8s.io/v1', kind = 'CreateOptions' },
    },
  }
end

local function configmap(verdict, extra)
  local cm = { apiVersion = 'v1', kind = 'ConfigMap', metadata = { name = 'cm-1', namespace = 'default' },
    data = { verdict = verdict } }
  for k, v in pairs(extra or {}) do cm[k] = v end
  return cm
end

local function base64_decode(s)
  local f = K.tmpdir() .. '/b64'
  K.write_file(f, s)
  return K.run_command('base64 -d ' .. K.quote(f))
end

describe('klua.webhook', function()
  local track = K.per_spec()
  local dir, ca

  setup(function()
    dir = K.tmpdir()
    ca = webhook.ca(dir, 'ca')
    webhook.pair(dir, 'ca', dir)
  end)

  -- klua run serving the webhooks of text (SCRIPT by default) with the
  -- certificate pair of cert_dir (the spec file's by default).
  local function start(text, flags, cert_dir)
    local all = { '--webhook-bind-address', '127.0.0.1:0', '--webhook-cert-dir', cert_dir or dir }
    for _, f in ipairs(flags or {}) do all[#all + 1] = f end
    local p = track(K.spawn(K.offline_args(text or SCRIPT, all)))
    assert.truthy(p:wait_for('webhooks over HTTPS on [^\n]*%(port %d+%)', 20 * K.slowdown, 'err'), p:errors())
    p.port = tonumber(p:errors():match('webhooks over HTTPS on [^\n]*%(port (%d+)%)'))
    return p
  end

  -- POSTs body (a table, sent as JSON) to path; returns the HTTP status
  -- (0 when no answer came) and the body.
  local function post(p, path, body, opts)
    opts = opts or {}
    local file = K.tmpdir() .. '/body.json'
    K.write_file(file, type(body) == 'string' and body or cjson.encode(body))
    local out = K.run_command(('curl -s --max-time %g --cacert %s -X POST -H "Content-Type: application/json" '
      .. '--data-binary @%s -w "\\n%%{http_code}" %s'):format(opts.max_time or 20 * K.slowdown,
      K.quote(opts.ca or ca), K.quote(file), K.quote(('https://127.0.0.1:%d%s'):format(p.port, path))))
    local text, code = out:match('^(.*)\n(%d+)$')
    return tonumber(code), text
  end

  local function review(p, path, body, opts)
    local code, text = post(p, path, body, opts)
    assert.are.equal(200, code, text)
    local r = cjson.decode(text)
    return r.response, r
  end

  describe('validating', function()
    it('answers an AdmissionReview v1 with the request\'s uid, allowed or denied with a message', function()
      local p = start()
      local resp, whole = review(p, '/validate', admission_review { object = configmap('fine'), uid = 'u-1' })
      assert.are.equal('admission.k8s.io/v1', whole.apiVersion)
      assert.are.equal('AdmissionReview', whole.kind)
      assert.are.same({ uid = 'u-1', allowed = true }, resp)
      resp = review(p, '/validate', admission_review { object = configmap('deny'), uid = 'u-2' })
      assert.are.same({ uid = 'u-2', allowed = false, warnings = { 'look at data' },
        status = { code = 403, reason = 'Forbidden', message = 'verdict is deny' } }, resp)
      resp = review(p, '/validate', admission_review { object = configmap('warn') })
      assert.is_true(resp.allowed)
      assert.are.same({ 'only a warning' }, resp.warnings)
    end)

    it('hands the handler the request\'s fields, the objects as read-only views', function()
      local p = start()
      local resp = review(p, '/validate', admission_review { object = configmap('echo'), operation = 'UPDATE',
        old = configmap('before'), dry_run = true })
      assert.are.same({ operation = 'UPDATE', user = 'kubernetes-admin', dry_run = true, namespace = 'default',
        name = 'cm-1', kind = 'ConfigMap', resource = 'configmaps', old = 'before', sub = 'none' },
        cjson.decode(resp.status.message))
      resp = review(p, '/validate', admission_review { object = configmap('echo') })
      assert.are.equal('none', cjson.decode(resp.status.message).old)
      local code, text = post(p, '/validate', admission_review { object = configmap('write') })
      assert.are.equal(500, code)
      assert.matches('read%-only', text)
    end)
  end)

  describe('mutating', function()
    it('answers the changes as a base64 JSONPatch that turns the object sent into the one returned', function()
      local p = start()
      local resp = review(p, '/mutate', admission_review { object = configmap('change'), uid = 'm-1' })
      assert.are.equal('m-1', resp.uid)
      assert.is_true(resp.allowed)
      assert.are.equal('JSONPatch', resp.patchType)
      assert.are.same({ 'mutated' }, resp.warnings)
      local ops = cjson.decode(base64_decode(resp.patch))
      table.sort(ops, function(a, b) return a.path < b.path end)
      assert.are.same({
        { op = 'add', path = '/data/added', value = 'yes' },
        { op = 'remove', path = '/data/verdict' },
        { op = 'add', path = '/metadata/labels', value = { ['example.com/owner~team'] = 'lua' } },
      }, ops)
    end)

    it('sends no patch when the object did not change, and denies with a message', function()
      local p = start()
      for _, verdict in ipairs { 'same', 'keep' } do
        local resp = review(p, '/mutate', admission_review { object = configmap(verdict) })
        assert.are.same({ uid = '0df28fbd-5f5f-11e8-bc74-36e6bb280816', allowed = true }, resp)
      end
      local resp = review(p, '/mutate', admission_review { object = configmap('deny') })
      assert.is_false(resp.allowed)
      assert.are.equal('no mutation for you', resp.status.message)
    end)
  end)

  describe('conversion', function()
    local function conversion_review(objects, desired)
      return { apiVersion = 'apiextensions.k8s.io/v1', kind = 'ConversionReview',
        request = { uid = 'c-1', desiredAPIVersion = desired, objects = objects } }
    end
    local function widget(name, version, spec)
      return { apiVersion = 'example.com/' .. version, kind = 'Widget',
        metadata = { name = name, namespace = 'default', uid = 'w-' .. name }, spec = spec }
    end

    it('answers a ConversionReview v1 with every object converted, in order', function()
      local p = start()
      local resp, whole = review(p, '/convert', conversion_review({ widget('a', 'v1', { size = 3 }),
        widget('b', 'v1', { size = 5 }) }, 'example.com/v2'))
      assert.are.equal('apiextensions.k8s.io/v1', whole.apiVersion)
      assert.are.equal('ConversionReview', whole.kind)
      assert.are.equal('c-1', resp.uid)
      assert.are.same({ status = 'Success' }, resp.result)
      assert.are.same({ widget('a', 'v2', { size = { value = 3 } }), widget('b', 'v2', { size = { value = 5 } }) },
        resp.convertedObjects)
    end)

    it('fails the whole request with a message when convert fails or leaves the apiVersion', function()
      local p = start()
      local resp = review(p, '/convert', conversion_review({ widget('a', 'v1', { size = 1 }),
        widget('b', 'v1', { broken = true }) }, 'example.com/v2'))
      assert.are.equal('Failure', resp.result.status)
      assert.matches('cannot convert b', resp.result.message)
      assert.is_nil(resp.convertedObjects)
      resp = review(p, '/convert', conversion_review({ widget('a', 'v1', { stay = true }) }, 'example.com/v2'))
      assert.are.equal('Failure', resp.result.status)
      assert.matches('apiVersion example.com/v1 for a, where example.com/v2 was asked', resp.result.message)
    end)
  end)

  describe('failures', function()
    it('answer 500, so that the API server applies the failurePolicy: an error, the budget', function()
      local p = start(nil, { '--instruction-budget', '1000000' })
      local code, text = post(p, '/validate', admission_review { object = configmap('error') })
      assert.are.equal(500, code)
      -- One line, which the API server's error quotes whole; the traceback is logged.
      assert.matches('^klua: the call to /validate failed: [^\n]*script%.lua:%d+: the handler broke\n$', text)
      p:wait_log('stack traceback', 20 * K.slowdown)
      code, text = post(p, '/validate', admission_review { object = configmap('spin') })
      assert.are.equal(500, code)
      assert.matches('instruction%-budget', text)
      -- The server goes on answering.
      assert.is_true(review(p, '/validate', admission_review { object = configmap('fine') }).allowed)
    end)

    it('answer 500 when the handler runs past --memory-limit, and the next call is served', function()
      local p = start([[
klua.webhook.validating { path = '/hog', resources = { 'v1/configmaps' }, handler = function(req)
  if req.object.data.verdict == 'hog' then
    local t = {}
    for i = 1, 1e9 do t[i] = ('x'):rep(64) .. i end
  end
  return true
end }
]], { '--memory-limit', '64' })
      local code, text = post(p, '/hog', admission_review { object = configmap('hog') })
      assert.are.equal(500, code)
      assert.matches('memory', text)
      assert.is_true(review(p, '/hog', admission_review { object = configmap('fine') }).allowed)
    end)

    it('answer 500 before the timeout kube-apiserver appends to the URL', function()
      local p = start()
      -- The API server gives up at timeout=2s: klua's answer must come first, also from a
      -- handler suspended on a wait (the connection resumed at once, not at the next tick).
      local code, text = post(p, '/validate?timeout=2s', admission_review { object = configmap('sleep') },
        { max_time = 2 })
      assert.are.equal(500, code)
      assert.matches('not answered in time', text)
    end)

    it('refuse what is not a review for the path, and paths no webhook has', function()
      local p = start()
      local code, text = post(p, '/validate', '{"kind":')
      assert.are.equal(400, code)
      assert.matches('not JSON', text)
      code, text = post(p, '/validate', { apiVersion = 'admission.k8s.io/v1beta1', kind = 'AdmissionReview',
        request = { uid = 'x' } })
      assert.are.equal(400, code)
      assert.matches('admissionReviewVersions', text)
      code = post(p, '/nowhere', admission_review { object = configmap('fine') })
      assert.are.equal(404, code)
      -- An UPDATE of a ConfigMap near its 1 MiB limit carries it twice; the
      -- body comes in many reads, each after the last was handed over.
      local large = admission_review { object = configmap('fine', { binaryData = { b = ('A'):rep(1400000) } }),
        old = configmap('fine', { binaryData = { b = ('B'):rep(1400000) } }), operation = 'UPDATE' }
      assert.is_true(review(p, '/validate', large).allowed)
      -- Past 8 MiB, the body is read to its end and dropped.
      local big = admission_review { object = configmap(('x'):rep(9 * 1024 * 1024)) }
      code, text = post(p, '/validate', big)
      assert.are.equal(413, code)
      assert.matches('too large', text)
      assert.is_true(review(p, '/validate', admission_review { object = configmap('fine') }).allowed)
    end)
  end)

  it('counts each call in controller-runtime\'s webhook metrics', function()
    local p = start(nil, { '--metrics-bind-address', '127.0.0.1:0' })
    local mport = tonumber(p:errors():match('/metrics[^\n]*%(port (%d+)%)'))
    review(p, '/validate', admission_review { object = configmap('fine') })
    review(p, '/validate', admission_review { object = configmap('deny') })
    post(p, '/validate', admission_review { object = configmap('error') })
    local text = K.run_command(('curl -s http://127.0.0.1:%d/metrics'):format(mport))
    assert.matches('\ncontroller_runtime_webhook_requests_total{code="200",webhook="/validate"} 2\n', text, 1, true)
    assert.matches('\ncontroller_runtime_webhook_requests_total{code="500",webhook="/validate"} 1\n', text, 1, true)
    assert.matches('\ncontroller_runtime_webhook_requests_in_flight{webhook="/validate"} 0\n', text, 1, true)
    assert.matches('\ncontroller_runtime_webhook_latency_seconds_count{code="200",webhook="/validate"} 2\n', text, 1,
      true)
    assert.matches('\ncontroller_runtime_webhook_requests_in_flight{webhook="/mutate"} 0\n', text, 1, true)
  end)

  describe('serving', function()
    -- A certificate directory serving the pair of CA "first"; CA "second",
    -- for the pair that replaces it, is made beside.
    local function rotating_dir()
      local own = K.tmpdir()
      webhook.ca(own, 'first')
      webhook.ca(own, 'second')
      webhook.pair(own, 'first', own)
      return own
    end

    it('speaks TLS 1.2 and 1.3 only, and no plain HTTP', function()
      local p = start()
      local function handshake(version)
        local out = K.run_command(('echo | timeout 10 openssl s_client -connect 127.0.0.1:%d -%s '
          .. '-cipher DEFAULT@SECLEVEL=0 2>&1'):format(p.port, version))
        return out:match('Cipher is ([%w_-]+)')
      end
      assert.is_nil(handshake('tls1_1'))
      assert.truthy(handshake('tls1_2'))
      assert.truthy(handshake('tls1_3'))
      local out = K.run_command(('curl -s -o /dev/null -w "%%{http_code}" --max-time 10 http://127.0.0.1:%d/validate')
        :format(p.port))
      assert.are.equal('000', out)
    end)

    it('serves a new certificate pair put in the directory, without a restart', function()
      local own = rotating_dir()
      local p = start(nil, nil, own)
      local body = admission_review { object = configmap('fine') }
      assert.are.equal(200, (post(p, '/validate', body, { ca = own .. '/first.crt' })))
      -- A pair whose key is not the certificate's is refused, the old one kept.
      local bad = K.tmpdir()
      webhook.pair(own, 'second', bad)
      assert(os.execute(('cp %s/tls.key %s/tls.key.new && mv %s/tls.key.new %s/tls.key'):format(bad, own, own, own)))
      p:wait_log('the certificate served so far is kept', 20 * K.slowdown)
      assert.are.equal(200, (post(p, '/validate', body, { ca = own .. '/first.crt' })))
      -- The new pair, swapped in as a kubelet updates a mounted Secret: a rename.
      assert(os.execute(('cp %s/tls.crt %s/tls.crt.new && mv %s/tls.crt.new %s/tls.crt'):format(bad, own, own, own)))
      p:wait_log('serving the new certificate', 20 * K.slowdown)
      assert.are.equal(200, (post(p, '/validate', body, { ca = own .. '/second.crt' })))
      assert.are.equal(0, (post(p, '/validate', body, { ca = own .. '/first.crt' })))
      assert.is_nil(p:exit_code())
    end)

    it('serves a pair a kubelet swaps in: ..data, a symbolic link to the pair, renamed', function()
      -- A mounted Secret as kubelet's AtomicWriter (pkg/volume/util/atomic_writer.go) makes
      -- it: tls.crt -> ..data/tls.crt, ..data -> a directory per version; an update writes
      -- a new directory and renames a new ..data link over the old one.
      local own = K.tmpdir()
      webhook.ca(own, 'first')
      webhook.ca(own, 'second')
      assert(os.execute(('cd %s && mkdir ..v1 ..v2'):format(K.quote(own))))
      webhook.pair(own, 'first', own .. '/..v1')
      webhook.pair(own, 'second', own .. '/..v2')
      assert(os.execute(('cd %s && ln -s ..v1 ..data && ln -s ..data/tls.crt tls.crt && ln -s ..data/tls.key tls.key')
        :format(K.quote(own))))
      local p = start(nil, nil, own)
      local body = admission_review { object = configmap('fine') }
      assert.are.equal(200, (post(p, '/validate', body, { ca = own .. '/first.crt' })))
      assert(os.execute(('cd %s && ln -s ..v2 ..data_tmp && mv -T ..data_tmp ..data'):format(K.quote(own))))
      p:wait_log('serving the new certificate', 20 * K.slowdown)
      assert.are.equal(200, (post(p, '/validate', body, { ca = own .. '/second.crt' })))
      assert.are.equal(0, (post(p, '/validate', body, { ca = own .. '/first.crt' })))
      assert.is_nil(p:errors():find('kept'))
    end)

    it('keeps serving a connection opened before the pair was replaced, to its end', function()
      local own = rotating_dir()
      local next_pair = K.tmpdir()
      webhook.pair(own, 'second', next_pair)
      local p = start(nil, nil, own)
      local port = p.port
      local body = K.tmpdir() .. '/body.json'
      K.write_file(body, cjson.encode(admission_review { object = configmap('fine') }))
      local script = K.tmpdir() .. '/client.py'
      K.write_file(script, ([[
import http.client, os, ssl, sys, time
ctx = ssl.create_default_context(cafile=sys.argv[1])
c = http.client.HTTPSConnection('127.0.0.1', %d, context=ctx, timeout=30)
body = open(sys.argv[2], 'rb').read()
def call():
    try:
        c.request('POST', '/validate', body, {'Content-Type': 'application/json'})
        r = c.getresponse()
        r.read()
        return r.status
    except OSError as e:
        return repr(e)
first = call()
open(sys.argv[3] + '/ready', 'w').close()
while not os.path.exists(sys.argv[3] + '/go'):
    time.sleep(0.05)
print(first, call(), flush=True)
]]):format(port))
      -- A keep-alive connection: a call, then (once told) another on it; in dir.
      local function client(ca_name)
        local dir = K.tmpdir()
        os.execute(('python3 %s %s %s %s > %s/result 2>&1 &'):format(K.quote(script),
          K.quote(own .. '/' .. ca_name .. '.crt'), K.quote(body), K.quote(dir), K.quote(dir)))
        -- testing.read_file: nil while the file is absent, where K.read_file's '' would
        -- end the wait at once.
        testing.eventually(function() return testing.read_file(dir .. '/ready') end, 20 * K.slowdown)
        return dir
      end
      local function finish(dir)
        K.write_file(dir .. '/go', '')
        return testing.eventually(function()
          local r = K.read_file(dir .. '/result')
          return r and r:find('\n') and r
        end, 20 * K.slowdown)
      end
      local before = client('first')
      assert(os.execute(('cp %s/tls.key %s/k && cp %s/tls.crt %s/c && mv %s/k %s/tls.key && mv %s/c %s/tls.crt')
        :format(next_pair, own, next_pair, own, own, own, own, own)))
      p:wait_log('serving the new certificate', 20 * K.slowdown)
      -- A connection to the new pair, open while the replaced one still serves `before`:
      -- the replaced one's end (once `before` closes) must leave it alone.
      local after = client('second')
      assert.are.equal('200 200\n', finish(before))
      -- New connections get the new pair; once this one is answered, klua has seen
      -- `before` close and ended the replaced pair's server.
      assert.are.equal(200, (post({ port = port }, '/validate', admission_review { object = configmap('fine') },
        { ca = own .. '/second.crt' })))
      assert.are.equal('200 200\n', finish(after))
      assert.is_nil(p:exit_code())
    end)

    it('answers 503 to a call still waiting when klua stops', function()
      local p = start()
      local file = K.tmpdir() .. '/body.json'
      K.write_file(file, cjson.encode(admission_review { object = configmap('sleep') }))
      local out = K.tmpdir() .. '/out'
      os.execute(('curl -s --max-time 30 --cacert %s -X POST --data-binary @%s -w "\\n%%{http_code}" '
        .. '"https://127.0.0.1:%d/validate?timeout=30s" > %s 2>&1 &'):format(K.quote(ca), K.quote(file), p.port,
        K.quote(out)))
      p:wait_log('the handler sleeps', 20 * K.slowdown)
      p:signal('TERM')
      local text = testing.eventually(function()
        local t = K.read_file(out)
        return t and t:match('\n%d+$') and t
      end, 20 * K.slowdown)
      assert.matches('klua is stopping\n\n503$', text)
    end)

    it('refuses to start without the certificate pair, webhooks without the server, two of one name', function()
      K.run_fails(K.offline_args('', { '--webhook-bind-address', '127.0.0.1:0', '--webhook-cert-dir', K.tmpdir() }), 2,
        'tls.crt')
      K.run_fails(K.offline_args(SCRIPT), 1, 'klua serves webhooks with %-%-webhook%-bind%-address')
      K.run_fails(K.offline_args([[
klua.webhook.validating { path = '/a', name = 'same.example.com', resources = { 'v1/pods' }, handler = print }
klua.webhook.validating { path = '/b', name = 'same.example.com', resources = { 'v1/pods' }, handler = print }
]], { '--webhook-bind-address', '127.0.0.1:0', '--webhook-cert-dir', dir }), 1,
        'name "same.example.com" is taken by the webhook at /a')
    end)
  end)

  describe('klua webhook-config', function()
    local function config(args)
      local script = K.script(SCRIPT)
      local full = { 'webhook-config', script }
      for _, a in ipairs(args) do full[#full + 1] = a end
      local out, err, code = K.run(full)
      assert.are.equal(0, code, err)
      local docs = {}
      for _, d in ipairs(lyaml.load(out, { all = true })) do docs[d.kind] = d end
      return docs, out, script
    end

    it('prints the configurations of the webhooks the script declares, for the Service in front of klua', function()
      local docs, out = config { '--service', 'hooks/klua-webhook', '--ca-bundle', ca, '--name', 'cms' }
      local v, m = docs.ValidatingWebhookConfiguration, docs.MutatingWebhookConfiguration
      assert.are.equal('admissionregistration.k8s.io/v1', v.apiVersion)
      assert.are.equal('cms', v.metadata.name)
      assert.are.equal(1, #v.webhooks)
      local w = v.webhooks[1]
      assert.are.same({ namespace = 'hooks', name = 'klua-webhook', path = '/validate', port = 443 },
        w.clientConfig.service)
      -- (run_command drops the output's last newline)
      assert.are.equal((K.read_file(ca):gsub('\n$', '')), base64_decode(w.clientConfig.caBundle))
      assert.are.same({ 'v1' }, w.admissionReviewVersions)
      assert.are.same({ { apiGroups = { '' }, apiVersions = { 'v1' }, resources = { 'configmaps' },
        operations = { 'CREATE', 'UPDATE' }, scope = '*' } }, w.rules)
      assert.are.equal('Fail', w.failurePolicy)
      assert.are.equal('None', w.sideEffects)
      assert.are.equal(10, w.timeoutSeconds)
      assert.are.equal('validate.webhook.klua.dev', w.name)
      assert.are.equal('/mutate', m.webhooks[1].clientConfig.service.path)
      assert.are.equal('Never', m.webhooks[1].reinvocationPolicy)
      -- The conversion stanza, as comments kubectl apply skips.
      assert.truthy(out:find('# The conversion webhook /convert of CustomResourceDefinition widgets.example.com', 1,
        true), out)
      local stanza = lyaml.load((out:match('\n(#   spec:.*)$'):gsub('#   ', '')))
      assert.are.equal('Webhook', stanza.spec.conversion.strategy)
      assert.are.same({ 'v1' }, stanza.spec.conversion.webhook.conversionReviewVersions)
      assert.are.equal('/convert', stanza.spec.conversion.webhook.clientConfig.service.path)
    end)

    it('prints paths the server answers: the configuration and the script cannot disagree', function()
      local docs = config { '--url', 'https://127.0.0.1:1', '--inject-ca-from', 'hooks/klua-cert' }
      assert.are.equal('hooks/klua-cert',
        docs.ValidatingWebhookConfiguration.metadata.annotations['cert-manager.io/inject-ca-from'])
      local p = start()
      local body = admission_review { object = configmap('fine') }
      for _, kind in ipairs { 'ValidatingWebhookConfiguration', 'MutatingWebhookConfiguration' } do
        for _, w in ipairs(docs[kind].webhooks) do
          assert.is_nil(w.clientConfig.caBundle)
          local path = w.clientConfig.url:match('^https://127%.0%.0%.1:1(/.*)$')
          assert.truthy(path, w.clientConfig.url)
          assert.are.equal(200, (post(p, path, body)), path)
        end
      end
    end)

    it('refuses a call without a Service or a URL, and a script without webhooks', function()
      K.run_fails({ 'webhook-config', K.script(SCRIPT) }, 2, 'give %-%-service NS/NAME')
      K.run_fails({ 'webhook-config', K.script('local x = 1'), '--service', 'a/b' }, 1, 'declares no webhook')
    end)
  end)

  describe('beside informers', function()
    local sb = testing.with_sandbox()

    it('reads the cache of an informer of the same process, and a controller runs on', function()
      sb:kubectl('create configmap quota --from-literal=max=2')
      local text = [[
local cms = klua.informer { resource = 'configmaps', namespace = 'default' }
local reconciled = 0
klua.controller { name = 'cms', watches = { cms }, reconcile = function() reconciled = reconciled + 1 end }
klua.webhook.validating { path = '/quota', resources = { 'v1/configmaps' }, handler = function(req)
  local quota = cms:get('default/quota')
  if not quota then return false, 'no quota yet' end
  local n = 0
  for k in pairs(req.object.data or {}) do n = n + 1 end
  if n > tonumber(quota.data.max) then
    return false, ('%d keys, the quota is %s (%d ConfigMaps reconciled)'):format(n, quota.data.max, reconciled)
  end
  return true
end }
]]
      local args = { '--kubeconfig', sb.kubeconfig, '--webhook-bind-address', '127.0.0.1:0', '--webhook-cert-dir', dir,
        'run', K.script(text) }
      local p = track(K.spawn(args))
      assert.truthy(p:wait_for('%(port %d+%)', 20 * K.slowdown, 'err'), p:errors())
      p.port = tonumber(p:errors():match('%(port (%d+)%)'))
      local cm = configmap('x', { data = { a = '1', b = '2', c = '3' } })
      local resp = testing.eventually(function()
        local r = review(p, '/quota', admission_review { object = cm })
        return r.status and r.status.message ~= 'no quota yet' and r
      end, 20 * K.slowdown)
      assert.is_false(resp.allowed)
      assert.matches('^3 keys, the quota is 2 %(%d+ ConfigMaps reconciled%)$', resp.status.message)
      cm.data.c = nil
      assert.is_true(review(p, '/quota', admission_review { object = cm }).allowed)
    end)
  end)

  describe('deploy/webhook.yaml and examples/pod-policy-webhook.lua', function()
    local sb = testing.with_sandbox()
    local root = os.getenv('KLUA_ROOT') or '.'

    it('agree: the Service reaches the port klua serves, the Secret cert-manager fills is the cert dir', function()
      local objs = {}
      for _, d in ipairs(lyaml.load(K.read_file(root .. '/deploy/webhook.yaml'), { all = true })) do
        objs[d.kind] = d
      end
      local pod = objs.Deployment.spec.template.spec
      local c = pod.containers[1]
      local flags = {}
      for _, a in ipairs(c.args) do
        local k, v = a:match('^(%-%-[%w-]+)=(.*)$')
        if k then flags[k] = v end
      end
      local port
      for _, p in ipairs(c.ports) do
        if p.name == objs.Service.spec.ports[1].targetPort then port = p.containerPort end
      end
      assert.are.equal(':' .. port, flags['--webhook-bind-address'])
      local certs
      for _, m in ipairs(c.volumeMounts) do
        if m.mountPath == flags['--webhook-cert-dir'] then certs = m.name end
      end
      local secret
      for _, v in ipairs(pod.volumes) do
        if v.name == certs then secret = v.secret.secretName end
      end
      assert.are.equal(objs.Certificate.spec.secretName, secret)
      local svc = objs.Service.metadata
      assert.truthy(objs.Certificate.spec.dnsNames[1] == ('%s.%s.svc'):format(svc.name, svc.namespace))
    end)

    it('serve with the pair scripts/webhook-certs makes, for the name the API server calls', function()
      local certs = K.tmpdir() .. '/certs'
      K.run_command(('%s/scripts/webhook-certs klua-system pod-policy-webhook %s'):format(root, K.quote(certs)))
      sb:kubectl('create namespace shop')
      sb:kubectl('label namespace shop example.com/team=payments')
      local p = track(K.spawn { '--kubeconfig', sb.kubeconfig, '--webhook-bind-address', '127.0.0.1:0',
        '--webhook-cert-dir', certs, 'run', root .. '/examples/pod-policy-webhook.lua' })
      assert.truthy(p:wait_for('%(port %d+%)', 20 * K.slowdown, 'err'), p:errors())
      p.port = tonumber(p:errors():match('%(port (%d+)%)'))
      local host = 'pod-policy-webhook.klua-system.svc'
      local function call(path, pod)
        local file = K.tmpdir() .. '/review.json'
        local r = admission_review { object = pod }
        r.request.namespace = 'shop'
        K.write_file(file, cjson.encode(r))
        local out = K.run_command(('curl -s --max-time 20 --cacert %s/ca.crt --resolve %s:%d:127.0.0.1 -X POST '
          .. '--data-binary @%s https://%s:%d%s'):format(K.quote(certs), host, p.port, K.quote(file), host, p.port,
          path))
        return cjson.decode(out).response
      end
      local function pod(spec)
        return { apiVersion = 'v1', kind = 'Pod', metadata = { name = 'web', namespace = 'shop' }, spec = spec }
      end
      local limited = { { name = 'app', image = 'nginx', resources = { limits = { memory = '64Mi' } } } }
      local resp = call('/validate-pods', pod { hostNetwork = true, containers = limited })
      assert.is_false(resp.allowed)
      assert.matches('hostNetwork', resp.status.message)
      resp = call('/validate-pods', pod { containers = { { name = 'app', image = 'nginx' } } })
      assert.matches('container app has no memory limit', resp.status.message)
      assert.is_true(call('/validate-pods', pod { containers = limited }).allowed)
      resp = testing.eventually(function()
        local r = call('/label-pods', pod { containers = limited })
        return r.patch and r
      end, 20 * K.slowdown)
      assert.are.same({ { op = 'add', path = '/metadata/labels', value = { ['example.com/team'] = 'payments' } } },
        cjson.decode(base64_decode(resp.patch)))
      -- The configuration names the same paths, with the CA that signed the pair.
      local out = K.run { 'webhook-config', root .. '/examples/pod-policy-webhook.lua', '--service',
        'klua-system/pod-policy-webhook', '--ca-bundle', certs .. '/ca.crt' }
      local paths = {}
      for _, d in ipairs(lyaml.load(out, { all = true })) do
        for _, w in ipairs(d.webhooks) do paths[#paths + 1] = w.name .. ' ' .. w.clientConfig.service.path end
      end
      table.sort(paths)
      assert.are.same({ 'pod-policy.example.com /validate-pods', 'pod-team.example.com /label-pods' }, paths)
    end)
  end)
end)
