-- What fuzz_jsonpath does with an input, and what
-- spec/unit/fuzz_regressions_spec.lua replays: klua.cmd.jsonpath's promises.
--
--   check(data, jsonpath, fail)
--
-- data is a template (as -o jsonpath= takes it). jsonpath is the
-- klua.cmd.jsonpath module, fail a function that reports a broken promise and
-- does not return. The promises: parse never raises, answering a template
-- or nil and kubectl's "error parsing jsonpath DATA, ..."; a template
-- renders over a pod-shaped object, over an empty object and over a list
-- without raising, to text or nil and a message, the same text each time;
-- a template of one path gives its values without raising, and each has a
-- text (jsonpath.text) and a custom-columns text (jsonpath.sprint).
local ARRAY = {}
local NULL = {}
-- klua.json.encode's stand-in for numbers: this state has no klua.
local function encode(n) return math.type(n) == 'integer' and tostring(n) or ('%.17g'):format(n) end
local OPTS = { array_mt = ARRAY, null = NULL, encode = encode }

local function array(t) return setmetatable(t, ARRAY) end

local POD = {
  apiVersion = 'v1', kind = 'Pod',
  metadata = { name = 'web', namespace = 'default', labels = { app = 'web', ['app.kubernetes.io/name'] = 'x' },
    annotations = {}, finalizers = array {}, ownerReferences = array { { kind = 'ReplicaSet', name = 'web-1' } } },
  spec = { containers = array { { name = 'a', image = 'nginx', ports = array { { containerPort = 80 } } },
    { name = 'b', image = 'busybox', args = array { 'sleep', '10' } } }, priority = 0, nodeName = NULL },
  status = { phase = 'Running', ready = true, score = 0.5, conditions = array {
    { type = 'Ready', status = 'True' }, { type = 'PodScheduled', status = 'False' } } },
}

local VALUES = { POD, {}, { kind = 'List', items = array { POD, POD } }, array { 1, 'two', false, NULL } }

return function(data, jsonpath, fail)
  local ok, t, err = pcall(jsonpath.parse, data)
  if not ok then fail('parse raised: ' .. tostring(t)) end
  if not t then
    if type(err) ~= 'string' or err:sub(1, #'error parsing jsonpath ') ~= 'error parsing jsonpath ' then
      fail('parse refused without kubectl\'s words: ' .. tostring(err))
    end
    return
  end
  for _, v in ipairs(VALUES) do
    local ok1, text, rerr = pcall(t.render, t, v, OPTS)
    if not ok1 then fail('render raised: ' .. tostring(text)) end
    if text == nil and type(rerr) ~= 'string' then fail('render failed without a message') end
    if text ~= nil and type(text) ~= 'string' then fail('render gave a ' .. type(text)) end
    local again = t:render(v, OPTS)
    if again ~= text then fail(('render is not repeatable: %q then %q'):format(tostring(text), tostring(again))) end
    local ok2, values = pcall(t.values, t, v, OPTS)
    if not ok2 then fail('values raised: ' .. tostring(values)) end
    for _, x in ipairs(values or {}) do
      local ok3, s = pcall(jsonpath.text, x, OPTS)
      if not ok3 or type(s) ~= 'string' then fail('text of a value raised: ' .. tostring(s)) end
      local ok4, g = pcall(jsonpath.sprint, x, OPTS)
      if not ok4 or type(g) ~= 'string' then fail('sprint of a value raised: ' .. tostring(g)) end
    end
  end
end
