-- The sandbox API server's command line: how scripts learn it is ready, what it logs, and
-- how it goes away with the process that started it.
local sandbox = require('support.sandbox')
local testing = require('klua.testing')

local function read(path)
  local f = io.open(path)
  if not f then return nil end
  local text = f:read('a')
  f:close()
  return text
end

local function run(cmd)
  local p = io.popen(cmd)
  local out = p:read('a')
  local ok, _, code = p:close()
  return out, ok and 0 or code
end

describe('sandbox command line', function()
  it('writes --ready-file and, with -v, logs each request without credentials', function()
    local ready = os.tmpname()
    local sb = sandbox.start{ auth = 'token', args = { '--ready-file', ready, '-v' } }
    finally(function() sb:stop(); os.remove(ready) end)
    assert.equals(sb.url .. '\n', read(ready))
    assert.equals(200, (sb:request('GET', '/api/v1/namespaces?limit=1')))
    testing.eventually(function()
      return sb:log():find('GET /api/v1/namespaces?limit=1 -> 200', 1, true)
    end, 5)
    assert.is_nil(sb:log():find(sb.token, 1, true))
  end)

  it('exits once the process named by --owner-pid is gone', function()
    local owner = tonumber((run('sleep 60 > /dev/null 2>&1 & echo $!')))
    local sb = sandbox.start{ args = { '--owner-pid', tostring(owner) } }
    finally(function() sb:stop() end)
    assert.is_true(sb:alive())
    os.execute('kill ' .. owner)
    testing.eventually(function() return not sb:alive() end, 5)
  end)

  it('says why it cannot listen on a port that is taken', function()
    local sb = sandbox.start{}
    finally(function() sb:stop() end)
    local out, code = run(os.getenv('KLUA_ROOT') .. '/scripts/sandbox-apiserver --port '
      .. sb.port .. ' 2>&1')
    assert.equals(1, code)
    assert.matches('Address already in use', out)
  end)
end)
