-- `klua watch --diff`: a MODIFIED event printed as what changed, as dotted
-- paths with old -> new values, or, with -o json, ndjson or yaml, as an
-- RFC 6902 JSON Patch from the old object to the new. kubectl has no such
-- output; what it has is `kubectl patch --type=json`, so the patches are
-- checked by having kubectl apply them (--local) to the object kubectl get
-- printed before the change: the result must be what kubectl get prints
-- after it. The diff itself is in spec/unit/watch_diff_spec.lua.
local cjson = require('cjson')
local K = require('support.klua')
local sandbox = require('support.sandbox')
local testing = require('klua.testing')

describe('klua watch --diff', function()
  local sb, watcher = K.watched_sandbox()
  local watch = watcher.watch
  local namespace = sandbox.namespaces(sb, 'diff')

  local function set_phase(ns, name, phase)
    sb:kubectl(('patch pod %s -n %s --subresource=status --type=merge -p \'{"status":{"phase":"%s"}}\'')
      :format(name, ns, phase))
  end

  local function expect(p, text)
    testing.eventually(function() return p:output():find(text, 1, true) end, 15,
      { what = ('klua watch to print %q; it printed:\n%s\n%s'):format(text, p:output(), p:errors()) })
  end

  it('prints a MODIFIED event as the paths that changed, the other events as without --diff', function()
    local ns = namespace()
    sb:kubectl('run web -n ' .. ns .. ' --image=nginx -l app.kubernetes.io/name=web')
    local p = watch({ 'pods', '-n', ns, '--diff', '-o', 'line' })
    expect(p, 'ADDED     ' .. ns .. '/web  Pending\n')
    sb:kubectl('label pod web -n ' .. ns .. ' tier=front app.kubernetes.io/name=shop --overwrite')
    set_phase(ns, 'web', 'Running')
    sb:kubectl('delete pod web --wait=false -n ' .. ns)
    expect(p, 'DELETED')
    assert.equals(table.concat({
      'ADDED     ' .. ns .. '/web  Pending\n',
      'MODIFIED pod/web -n ' .. ns .. '\n',
      '  metadata.labels["app.kubernetes.io/name"]: "web" -> "shop"\n',
      '  metadata.labels.tier: (none) -> "front"\n',
      'MODIFIED pod/web -n ' .. ns .. '\n',
      '  status.phase: "Pending" -> "Running"\n',
      'DELETED   ' .. ns .. '/web  Running\n',
    }), p:output())
  end)

  it('in the table formats: the rows, and the diff for each change', function()
    local ns = namespace()
    sb:kubectl('run web -n ' .. ns .. ' --image=nginx')
    local p = watch({ 'pods', '-n', ns, '--diff' })
    expect(p, 'web ')
    set_phase(ns, 'web', 'Running')
    expect(p, 'MODIFIED pod/web -n ' .. ns .. '\n  status.phase: "Pending" -> "Running"\n')
    local lines = K.lines(p:output())
    assert.truthy(lines[1]:find('^NAME%s+READY%s+STATUS'), lines[1])
    assert.truthy(lines[2]:find('^web%s+0/1%s+Pending'), lines[2])
    assert.equals(4, #lines)
  end)

  -- JSON as kubectl reads it: its --patch-file is read as YAML, which has no "\/".
  local function json(v) return (cjson.encode(v):gsub('\\/', '/')) end

  -- kubectl patch --local applies a JSON Patch to a file, with no server.
  local function kubectl_applies(old, patch)
    local file, pfile = sb:tmpfile('old') .. '.json', sb:tmpfile('patch')
    K.write_file(file, json(old))
    K.write_file(pfile, patch)
    return cjson.decode(sb:kubectl(('patch --local -f %s --type=json --patch-file %s -o json --show-managed-fields')
      :format(file, pfile)))
  end

  it('with -o ndjson, --diff-all: a JSON Patch that kubectl patch turns the old object into the new one with', function()
    local ns = namespace()
    sb:kubectl('run web -n ' .. ns .. ' --image=nginx')
    local old = sb:kubectl_json('get pod web --show-managed-fields -n ' .. ns)
    local p = watch({ 'pods', '-n', ns, '--diff-all', '-o', 'ndjson' })
    expect(p, '"name":"web"')
    sb:kubectl('label pod web -n ' .. ns .. ' tier=front')
    expect(p, '"op":')
    local new = sb:kubectl_json('get pod web --show-managed-fields -n ' .. ns)
    local lines = K.lines(p:output())
    assert.equals(2, #lines)
    local patch = lines[2]
    assert.truthy(patch:find('{"op":"add","path":"/metadata/labels/tier","value":"front"}', 1, true), patch)
    assert.truthy(patch:find('"path":"/metadata/resourceVersion"', 1, true), patch)
    assert.same(new, kubectl_applies(old, patch))
  end)

  it('with -o json --output-watch-events: the event with the object\'s name and the patch, without resourceVersion', function()
    local ns = namespace()
    sb:kubectl('run web -n ' .. ns .. ' --image=nginx')
    local old = sb:kubectl_json('get pod web --show-managed-fields -n ' .. ns)
    local p = watch({ 'pods', '-n', ns, '--diff', '-o', 'json', '--output-watch-events' })
    expect(p, '"ADDED"')
    set_phase(ns, 'web', 'Running')
    expect(p, '"MODIFIED"')
    local new = sb:kubectl_json('get pod web --show-managed-fields -n ' .. ns)
    local event = cjson.decode(K.lines(p:output())[2])
    assert.same({ type = 'MODIFIED', object = { apiVersion = 'v1', kind = 'Pod', metadata = { name = 'web',
      namespace = ns, resourceVersion = new.metadata.resourceVersion } },
      patch = { { op = 'replace', path = '/status/phase', value = 'Running' } } }, event)
    -- Without --diff-all the patch leaves resourceVersion (and managedFields) as they were.
    local patched = kubectl_applies(old, json(event.patch))
    assert.equals(old.metadata.resourceVersion, patched.metadata.resourceVersion)
    patched.metadata.resourceVersion = new.metadata.resourceVersion
    patched.metadata.managedFields = new.metadata.managedFields
    assert.same(new, patched)
  end)

  it('with -o yaml: the JSON Patch as a YAML document', function()
    local ns = namespace()
    sb:kubectl('run web -n ' .. ns .. ' --image=nginx')
    local p = watcher.watching(sb, { 'pod/web', '-n', ns, '--diff', '-o', 'yaml', '--watch-only' })
    sb:kubectl('label pod web tier=front -n ' .. ns)
    expect(p, 'value: front\n')
    assert.equals('- op: add\n  path: /metadata/labels/tier\n  value: front\n', p:output())
  end)

  it('leaves out metadata.generation and resourceVersion unless --diff-all', function()
    local ns = namespace()
    sb:kubectl('create deployment front --image=nginx -n ' .. ns)
    local some = watch({ 'deployments', '-n', ns, '--diff', '-o', 'name' })
    local all = watch({ 'deployments', '-n', ns, '--diff-all', '-o', 'name' })
    expect(some, 'deployment.apps/front\n')
    expect(all, 'deployment.apps/front\n')
    sb:kubectl('scale deployment front --replicas=3 -n ' .. ns)
    local change = '  spec.replicas: 1 -> 3\n'
    expect(some, change)
    expect(all, change)
    assert.falsy(some:output():find('metadata.', 1, true), some:output())
    assert.truthy(all:output():find('  metadata.generation: 1 -> 2\n', 1, true), all:output())
    assert.truthy(all:output():find('  metadata.resourceVersion: "', 1, true), all:output())
  end)

  it('with -e: the expression chooses the events (old in scope), true printing the diff', function()
    local ns = namespace()
    sb:kubectl('run web -n ' .. ns .. ' --image=nginx')
    local p = watcher.watching(sb, { 'pods', '-n', ns, '--diff', '--watch-only',
      '-e', 'old and old.status.phase ~= obj.status.phase' })
    sb:kubectl('label pod web tier=front -n ' .. ns)
    set_phase(ns, 'web', 'Running')
    expect(p, 'Running')
    assert.equals('MODIFIED pod/web -n ' .. ns .. '\n  status.phase: "Pending" -> "Running"\n', p:output())
  end)
end)
