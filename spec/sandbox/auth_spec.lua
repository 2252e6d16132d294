-- The sandbox API server serves HTTPS with a CA it makes at start, authenticates bearer
-- tokens or client certificates, and writes a kubeconfig that kubectl uses as it is.
local sandbox = require('support.sandbox')
local testing = require('klua.testing')
local K = require('support.klua')

-- What curl ARGS prints, trusting the CA of sb.
local function curl(sb, args)
  return K.run_command('curl -s --cacert ' .. sb.dir .. '/ca.crt ' .. args)
end

describe('sandbox authentication', function()
  describe('with a bearer token over TLS', function()
    local sb = testing.with_sandbox { tls = true, auth = 'token', args = { '--tls-san', 'sandbox.test' } }


    it('serves https with its own CA', function()
      assert.matches('^https://127%.0%.0%.1:%d+$', sb.url)
      assert.equals(200, (sb:request('GET', '/api/v1/namespaces')))
    end)

    it('names 127.0.0.1, localhost and each --tls-san in the server certificate', function()
      local cmd = 'openssl x509 -noout -ext subjectAltName -in ' .. sb.dir .. '/server.crt'
      local text = K.run_command(cmd)
      assert.matches('IP Address:127.0.0.1', text, 1, true)
      assert.matches('DNS:localhost', text, 1, true)
      assert.matches('DNS:sandbox.test', text, 1, true)
    end)

    it('answers 401 Unauthorized without the token or with a wrong one', function()
      for _, header in ipairs({ '', "-H 'Authorization: Bearer wrong' " }) do
        local body = curl(sb, header .. sb.url .. '/api/v1/namespaces')
        assert.equals('{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
          .. '"message":"Unauthorized","reason":"Unauthorized","code":401}', body)
      end
    end)

    it('writes a kubeconfig that kubectl uses as it is', function()
      local kc = K.read_file(sb.kubeconfig)
      assert.matches('current-context: sandbox', kc, 1, true)
      assert.matches('certificate-authority-data: ', kc, 1, true)
      assert.matches('token: ' .. sb.token, kc, 1, true)
      local out, ok, err = sb:try_kubectl('get namespace default -o name')
      assert(ok, err)
      assert.equals('namespace/default\n', out)
    end)

    it('serves the control endpoint without credentials', function()
      assert.matches('"open_watches"', curl(sb, sb.url .. '/sandbox/v1/stats'))
    end)
  end)

  describe('with client certificates', function()
    local sb = testing.with_sandbox { tls = true, auth = 'cert' }

    it('accepts a client certificate signed by its CA, naming the user by CN', function()
      assert.equals(200, (sb:request('GET', '/api/v1/namespaces/default/configmaps')))
      sb:fault{ forbid = { 'configmaps' } }
      local _, body = sb:json('GET', '/api/v1/namespaces/default/configmaps')
      sb:reset_faults()
      assert.matches('User "sandbox-admin"', body.message, 1, true)
    end)

    it('answers 401 when no certificate is presented', function()
      assert.equals('401', curl(sb, '-o /dev/null -w %{http_code} ' .. sb.url .. '/api/v1/namespaces'))
    end)

    it('refuses the TLS handshake for a certificate from another CA', function()
      local other = sandbox.start{ tls = true }
      local code = curl(sb, '-o /dev/null -w %{http_code} --cert ' .. other.dir .. '/client.crt --key '
        .. other.dir .. '/client.key ' .. sb.url .. '/api')
      other:stop()
      assert.equals('000', code)
    end)

    it('writes the client certificate into the kubeconfig for kubectl', function()
      local kc = K.read_file(sb.kubeconfig)
      assert.matches('client-certificate-data: ', kc, 1, true)
      assert.matches('client-key-data: ', kc, 1, true)
      local out, ok, err = sb:try_kubectl('get namespaces -o name')
      assert(ok, err)
      assert.matches('namespace/kube%-system', out)
    end)
  end)
end)
