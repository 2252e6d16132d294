-- Informer indexes (lua/klua/internal/index.lua), as client-go's Indexers: klua.informer{indexes =
-- {name = fn}} and inf:by_index(name, value), kept up to date with the cache on every add,
-- update, delete and relist; and inf:list{namespace=} answered from the store's namespace
-- index.
local testing = require('klua.testing')
local K = require('support.klua')

-- Prints the index's state each time it changes: "web=a,b db=c list=N" (list: how many
-- objects inf:list{namespace = 'default'} gives).
local WATCHER = [[
local cms = klua.informer { resource = 'configmaps', indexes = {
  by_app = function(cm) return cm.metadata.labels and cm.metadata.labels.app end,
  by_tier = function(cm)
    local t = cm.data and cm.data.tiers
    if t == 'boom' then error('cannot read tiers') end
    if t == 'number' then return 42 end
    if not t then return nil end
    local out = {}
    for w in t:gmatch('[^,]+') do out[#out + 1] = w end
    return out
  end,
} }
local last
klua.on_synced(function()
  klua.every(0.05, function()
    local line = ('web=%s db=%s front=%s back=%s list=%d errors=%d'):format(
      table.concat(cms:index_keys('by_app', 'web'), ','),
      table.concat(cms:index_keys('by_app', 'db'), ','),
      table.concat(cms:index_keys('by_tier', 'front'), ','),
      table.concat(cms:index_keys('by_tier', 'back'), ','),
      #cms:list { namespace = 'default' }, cms:stats().index_errors)
    if line ~= last then print(line); last = line end
  end)
end)
]]

describe('informer indexes', function()
  -- A server per spec, stopped after it with the klua it started (p).
  local sb = testing.with_sandbox { each = true }
  local p

  local function start(script)
    p = K.spawn({ '--kubeconfig', sb.kubeconfig, 'run', K.script(script) })
    return p
  end

  local function shows(line)
    testing.eventually(function() return p:output():find(line .. '\n', 1, true) end, 15 * K.slowdown,
      { what = 'the index showing ' .. line })
  end

  it('follow adds, updates that move an object to another value, and deletes', function()
    sb:kubectl('create configmap a')
    sb:kubectl('label configmap a app=web')
    start(WATCHER)
    shows('web=default/a db= front= back= list=1 errors=0')
    sb:kubectl('create configmap b')
    sb:kubectl('label configmap b app=web')
    shows('web=default/a,default/b db= front= back= list=2 errors=0')
    sb:kubectl('label --overwrite configmap a app=db')
    shows('web=default/b db=default/a front= back= list=2 errors=0')
    sb:kubectl('delete configmap b')
    shows('web= db=default/a front= back= list=1 errors=0')
  end)

  it('index an object under every value its function returns', function()
    start(WATCHER)
    shows('web= db= front= back= list=0 errors=0')
    sb:kubectl('create configmap t --from-literal=tiers=front,back')
    shows('web= db= front=default/t back=default/t list=1 errors=0')
    sb:kubectl([[patch configmap t --type=merge -p '{"data":{"tiers":"back"}}']])
    shows('web= db= front= back=default/t list=1 errors=0')
  end)

  it('follow a relist that finds objects deleted while the watch was down', function()
    sb:kubectl('create configmap gone')
    sb:kubectl('label configmap gone app=web')
    start(WATCHER)
    shows('web=default/gone db= front= back= list=1 errors=0')
    sb:fault { watch_drop_after = 0 }
    sb:kubectl('delete configmap gone')
    sb:fault { compact = true }
    sb:fault { expire_watches = true }
    sb:reset_faults()
    shows('web= db= front= back= list=0 errors=0')
  end)

  it('log and count an index function that fails, leave the object out, and keep the rest', function()
    sb:kubectl('create configmap t --from-literal=tiers=front')
    start(WATCHER)
    shows('web= db= front=default/t back= list=1 errors=0')
    sb:kubectl([[patch configmap t --type=merge -p '{"data":{"tiers":"boom"}}']])
    shows('web= db= front= back= list=1 errors=1')
    assert.matches('configmaps: index by_tier failed for default/t and leaves it out: .*cannot read '
      .. 'tiers %(return a string, a list of strings or nil%)', p:errors())
    sb:kubectl([[patch configmap t --type=merge -p '{"data":{"tiers":"number"}}']])
    shows('web= db= front= back= list=1 errors=2')
    assert.matches('index by_tier failed for default/t and leaves it out: returned a number', p:errors(),
      1, true)
    sb:kubectl([[patch configmap t --type=merge -p '{"data":{"tiers":"back"}}']])
    shows('web= db= front= back=default/t list=1 errors=2')
  end)

  it('refuse indexes that are not functions, and lookups of an index that does not exist', function()
    for _, case in ipairs({
      { "indexes = 'by_app'", 'indexes must be a table of index functions' },
      { 'indexes = { by_app = true }', 'indexes.by_app must be a function of the object' },
    }) do
      K.informer_refused(sb, case[1], case[2])
    end
    local out, err, code = K.run({ '--kubeconfig', sb.kubeconfig, 'run', K.script([[
      local cms = klua.informer { resource = 'configmaps', indexes = { by_app = function() end } }
      local plain = klua.informer { resource = 'pods' }
      klua.on_synced(function()
        print(select(2, pcall(cms.by_index, cms, 'by_ap', 'web')))
        print(select(2, pcall(cms.by_index, cms, 'by_app', 7)))
        print(select(2, pcall(plain.by_index, plain, 'by_app', 'web')))
        klua.stop()
      end)
    ]]) })
    assert.equals(0, code, err)
    local lines = {}
    for l in out:gmatch('[^\n]+') do lines[#lines + 1] = l:gsub('^.-:%d+: ', '') end
    assert.same({ 'configmaps has no index "by_ap" (its indexes: by_app)',
      'index values are strings, not number',
      'pods has no indexes: give klua.informer indexes = {...}' }, lines)
  end)
end)
