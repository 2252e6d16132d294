-- klua.labels.parse: label selectors parsed and matched on the client with
-- apimachinery's syntax, validation and meaning (the same text kubectl -l
-- and the API server take).
local selector = require('klua.selector')

local function parse(text)
  local sel, err = selector.parse(text)
  assert(sel, err)
  return sel
end

local function refused(text)
  local sel, err = selector.parse(text)
  assert.is_nil(sel, 'parsed: ' .. text)
  return err
end

describe('a label selector', function()
  it('matches equality, inequality, set, existence and integer requirements', function()
    local labels = { app = 'web', tier = 'front', replicas = '5' }
    local cases = {
      { 'app=web', true }, { 'app==web', true }, { 'app=db', false },
      { 'app!=db', true }, { 'app!=web', false }, { 'missing!=x', true },
      { 'tier in (front,back)', true }, { 'tier in (back)', false }, { 'missing in (x)', false },
      { 'tier notin (back)', true }, { 'tier notin (front)', false }, { 'missing notin (x)', true },
      { 'app', true }, { 'missing', false }, { '!missing', true }, { '!app', false },
      { 'replicas>3', true }, { 'replicas>5', false }, { 'replicas<10', true }, { 'app>1', false },
      { 'app=web,tier=front', true }, { 'app=web,tier=back', false },
    }
    for _, c in ipairs(cases) do
      assert.equals(c[2], parse(c[1]):matches(labels), c[1])
    end
  end)

  it('selects everything when empty, and reads an object through its metadata.labels', function()
    assert.is_true(parse(''):empty())
    assert.is_true(parse('  '):matches({ anything = 'x' }))
    assert.is_true(parse(nil):matches(nil))
    local pod = { metadata = { name = 'a', labels = { app = 'web' } } }
    assert.is_true(parse('app=web'):matches(pod))
    assert.is_false(parse('app'):matches({ metadata = { name = 'bare' } }))
    -- A label named "metadata" is a label, not an object.
    assert.is_true(parse('metadata=x'):matches({ metadata = 'x' }))
  end)

  it('takes whitespace anywhere between tokens, and an empty value after = or in a set', function()
    assert.is_true(parse(' app = web ,  tier in ( front , back ) '):matches({ app = 'web', tier = 'back' }))
    assert.is_true(parse('app='):matches({ app = '' }))
    assert.is_true(parse('app in (,x)'):matches({ app = '' }))
    assert.is_true(parse('in in (in)'):matches({ ['in'] = 'in' }))
  end)

  it('writes a canonical form: requirements sorted by key, set values sorted', function()
    assert.equals('a!=2,b=1,tier in (a,b),!z', tostring(parse('!z, tier in (b,a,b), b=1, a!=2')))
    assert.equals('example.com/app=web', tostring(parse('example.com/app=web')))
  end)

  it('refuses bad syntax, saying what it found and what it expected', function()
    assert.equals([[label selector "a in b": found 'b', expected '(']], refused('a in b'))
    assert.equals([[label selector "a=b,": found the end, expected a requirement after ',']], refused('a=b,'))
    assert.equals([[label selector "a b": found 'b', expected an operator: =, ==, !=, in, notin, > or <]],
      refused('a b'))
    assert.equals([[label selector "a notin (x y)": found 'y', expected ',' or ')']], refused('a notin (x y)'))
    assert.equals([[label selector "!a=b": found '=', expected ',' or the end]], refused('!a=b'))
    assert.equals([[label selector ",a": found ',', expected a label key]], refused(',a'))
  end)

  it('refuses keys and values that cannot be labels, and > or < without an integer', function()
    assert.matches('key "Bad.Prefix/a": the prefix must be a DNS subdomain', refused('Bad.Prefix/a=b'), 1, true)
    assert.matches('key "a/b/c": a name must be', refused('a/b/c'), 1, true)
    assert.matches('key "' .. ('k'):rep(64) .. '"', refused(('k'):rep(64)), 1, true)
    assert.matches('value "-b" of a: a label value must be', refused('a=-b'), 1, true)
    assert.matches([['>' needs an integer, not "x"]], refused('a>x'), 1, true)
    assert.matches([['<' needs an integer, not "99999999999999999999"]], refused('a<99999999999999999999'), 1, true)
  end)

  it('refuses a selector that is not a string', function()
    assert.equals('a label selector is a string, such as "app=web"', refused(42))
  end)
end)
