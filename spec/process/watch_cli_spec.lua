-- `klua watch RESOURCE` prints one line per event, like `kubectl get -w`
-- with Lua filtering: the initial list as ADDED, then every change. These
-- specs run it against a sandbox while kubectl makes the changes. Each spec
-- works in namespaces of its own, so they share one server.
local cjson = require('cjson')
local sandbox = require('support.sandbox')
local K = require('support.klua')
local testing = require('klua.testing')
local fixtures = require('support.fixtures')

local CRD = fixtures.WIDGETS_CRD

local lines = K.lines

describe('klua watch', function()
  local sb, watcher = K.watched_sandbox()
  local watch = watcher.watch

  -- kubectl ARGS, which must succeed.
  local function kubectl(args, stdin) return sb:kubectl(args, stdin) end

  local function namespace(name)
    kubectl('create namespace ' .. name)
    return name
  end

  -- A pod; without labels kubectl gives it run=NAME, and annotations only
  -- when asked (so most pods have no metadata.annotations at all).
  local function pod(ns, name, labels, annotations)
    kubectl(('run %s -n %s --image=nginx%s%s'):format(name, ns, labels and (' -l ' .. labels) or '',
      annotations and (' --annotations=' .. annotations) or ''))
  end

  local function set_phase(ns, name, phase)
    kubectl(('patch pod %s -n %s --subresource=status --type=merge -p \'{"status":{"phase":"%s"}}\'')
      :format(name, ns, phase))
  end

  -- Waits until the watcher has printed a line containing text.
  local function expect(p, text)
    local found = testing.poll(function() return p:output():find(text, 1, true) end, 10)
    assert(found, ('klua watch never printed %q; stdout:\n%s\nstderr:\n%s'):format(text, p:output(), p:errors()))
  end

  -- The lines printed so far that mention one of the namespaces.
  local function lines_in(p, ...)
    local out = {}
    for _, line in ipairs(lines(p:output())) do
      for _, ns in ipairs({ ... }) do
        if line:find(' ' .. ns .. '/', 1, true) then out[#out + 1] = line end
      end
    end
    return out
  end

  -- Runs klua watch to completion with K.run's options (stdout, pipe).
  local function run_with(args, opts)
    local full = { '--kubeconfig', sb.kubeconfig, 'watch' }
    for _, a in ipairs(args) do full[#full + 1] = a end
    return K.run(full, opts)
  end

  -- Runs klua watch to completion (for the ones that fail at once).
  local function run(args) return run_with(args, { timeout = 10 }) end

  describe('prints', function()
    it('ADDED for every existing object from the initial list, then ADDED, MODIFIED and DELETED as they happen', function()
      local a, b = namespace('plain-a'), namespace('plain-b')
      pod(a, 'old')
      pod(b, 'other')
      local p = watch({ 'pods', '-A', '-o', 'line' })
      expect(p, 'plain-b/other')
      pod(a, 'web')
      expect(p, 'plain-a/web')
      set_phase(a, 'web', 'Running')
      expect(p, 'MODIFIED  plain-a/web  Running')
      kubectl('delete pod web -n ' .. a)
      expect(p, 'DELETED   plain-a/web')
      assert.same({
        'ADDED     plain-a/old  Pending',
        'ADDED     plain-b/other  Pending',
        'ADDED     plain-a/web  Pending',
        'MODIFIED  plain-a/web  Running',
        'DELETED   plain-a/web  Running',
      }, lines_in(p, a, b))
    end)

    it('pod/NAME per event with -o name, and KIND.GROUP/NAME for a resource in a group', function()
      local ns = namespace('oname')
      pod(ns, 'web')
      kubectl('create deployment front --image=nginx -n ' .. ns)
      local pods = watch({ 'pods', '-n', ns, '-o', 'name' })
      local deploys = watch({ 'deployments', '-n', ns, '-o', 'name' })
      expect(pods, 'pod/web')
      expect(deploys, 'deployment.apps/front')
      kubectl('label pod web -n ' .. ns .. ' tier=front')
      expect(pods, 'pod/web\npod/web\n')
      assert.equals('pod/web\npod/web\n', pods:output())
      assert.equals('deployment.apps/front\n', deploys:output())
    end)

    it('one JSON object {"type":...,"object":{...}} per line with -o json --output-watch-events, as kubectl, equal to the server\'s object', function()
      local ns = namespace('ojson')
      pod(ns, 'web', 'app=web')
      local p = watch({ 'pods', '-n', ns, '-o', 'json', '--output-watch-events' })
      expect(p, '"ADDED"')
      kubectl('label pod web -n ' .. ns .. ' tier=front')
      expect(p, '"MODIFIED"')
      -- kubectl get leaves managedFields out unless asked; a watch event, in both, has them.
      local server = sb:kubectl_json('get pod web --show-managed-fields -n ' .. ns)
      local out = lines(p:output())
      assert.equals(2, #out)
      local added, modified = cjson.decode(out[1]), cjson.decode(out[2])
      assert.equals('ADDED', added.type)
      assert.equals('MODIFIED', modified.type)
      assert.same({ 'object', 'type' }, (function()
        local keys = {}
        for k in pairs(modified) do keys[#keys + 1] = k end
        table.sort(keys)
        return keys
      end)())
      assert.same(server, modified.object)
      -- The ADDED line comes from the initial LIST, whose items the server writes
      -- without kind and apiVersion; klua prints the object as a watch event has it.
      assert.equals('Pod', added.object.kind)
      assert.equals('v1', added.object.apiVersion)
      assert.equals('front', modified.object.metadata.labels.tier)
      assert.is_nil(added.object.metadata.labels.tier)
      -- Integers are printed as integers, as the server wrote them (a Pod has no
      -- metadata.generation in kube-apiserver 1.32; terminationGracePeriodSeconds is defaulted).
      assert.truthy(out[2]:find('"terminationGracePeriodSeconds":30[,}]'))
    end)
  end)

  describe('prints as kubectl get -w', function()
    it('a table by default: the header, the initial list aligned, then a row per change', function()
      local ns = namespace('table-default')
      pod(ns, 'web')
      pod(ns, 'database')
      local p = watch({ 'pods', '-n', ns, '-w' })
      expect(p, 'web ')
      set_phase(ns, 'web', 'Running')
      expect(p, 'Running')
      local out = lines(p:output())
      assert.equals(4, #out, p:output())
      assert.equals('NAME       READY   STATUS    RESTARTS   AGE', out[1])
      assert.matches('^database   0/1     Pending   0          %d+s$', out[2])
      assert.matches('^web        0/1     Pending   0          %d+s$', out[3])
      assert.matches('^web        0/1     Running   0          %d+s$', out[4])
    end)

    it('"No resources found in NS namespace." on stderr when nothing exists yet', function()
      local ns = namespace('nothing-here')
      local p = watch({ 'pods', '-n', ns })
      assert.truthy(p:wait_for('No resources found', 10, 'err'), p:errors())
      assert.equals('No resources found in nothing-here namespace.\n', p:errors())
      pod(ns, 'late')
      expect(p, 'late')
      assert.equals('NAME', p:output():match('^%S+'))
      local all = watch({ 'pods', '-A', '-l', 'nobody=here' })
      assert.truthy(all:wait_for('No resources found', 10, 'err'), all:errors())
      assert.equals('No resources found\n', all:errors())
    end)

    it('the initial list in --sort-by order, and changes as they come', function()
      local ns = namespace('sorted')
      pod(ns, 'a', 'rank=3')
      pod(ns, 'b', 'rank=1')
      pod(ns, 'c', 'rank=2')
      local p = watch({ 'pods', '-n', ns, '-o', 'name', '--sort-by', '{.metadata.labels.rank}' })
      expect(p, 'pod/a')
      pod(ns, 'd', 'rank=0')
      expect(p, 'pod/d')
      assert.equals('pod/b\npod/c\npod/a\npod/d\n', p:output())
    end)

    it('metadata.managedFields in -o json, ndjson and yaml objects only with --show-managed-fields, as kubectl', function()
      local ns = namespace('managed')
      pod(ns, 'web')
      local plain = watch({ 'pods', '-n', ns, '-o', 'ndjson' })
      local shown = watch({ 'pods', '-n', ns, '-o', 'ndjson', '--show-managed-fields' })
      expect(plain, '\n')
      expect(shown, '\n')
      assert.is_nil(cjson.decode(lines(plain:output())[1]).metadata.managedFields)
      assert.same(sb:kubectl_json('get pod web --show-managed-fields -n ' .. ns).metadata.managedFields,
        cjson.decode(lines(shown:output())[1]).metadata.managedFields)
    end)

    it('one object a line with -o ndjson', function()
      local ns = namespace('ndjson')
      pod(ns, 'web')
      local p = watch({ 'pods', '-n', ns, '-o', 'ndjson' })
      expect(p, '\n')
      local obj = cjson.decode(lines(p:output())[1])
      assert.same(sb:kubectl_json('get pod web -n ' .. ns), obj)
    end)

    -- kubectl get -o jsonpath stops at such an error; klua watch goes on, as with -e.
    it('a JSONPath that fails on an object (an index out of range) reported once, then counted', function()
      local ns = namespace('jsonpath-error')
      pod(ns, 'web')
      local p = watch({ 'pods', '-n', ns, '-o', 'jsonpath={.spec.containers[3].name}' })
      assert.truthy(p:wait_for('not printed', 10, 'err'), p:errors())
      assert.equals('klua watch: -o jsonpath failed on ADDED jsonpath-error/web, which is not printed: array index out '
        .. 'of bounds: index 3, length 1 (further events failing the same way are counted)\n', p:errors())
      assert.equals('', p:output())
    end)

    it('with -e, what -e returns, true giving the table row', function()
      local ns = namespace('expr-table')
      pod(ns, 'web', 'app=web')
      pod(ns, 'db', 'app=db')
      local p = watch({ 'pods', '-n', ns, '-e', 'obj.spec.containers[1].image == "nginx" and obj.metadata.name == "web"' })
      local text = watch({ 'pods', '-n', ns, '-e', 'obj.metadata.name' })
      expect(p, 'web')
      expect(text, 'web')
      local out = lines(p:output())
      assert.equals('NAME   READY   STATUS    RESTARTS   AGE', out[1])
      assert.matches('^web    0/1     Pending   0          %d+s$', out[2])
      assert.equals('db\nweb\n', text:output())
    end)
  end)

  describe('chooses what to watch', function()
    it('with -n NS: only that namespace', function()
      local a, b = namespace('only-a'), namespace('only-b')
      local p = watch({ 'pods', '-n', a, '-o', 'line' })
      pod(b, 'elsewhere')
      pod(a, 'here')
      expect(p, 'only-a/here')
      -- The pod in only-b was created first, so it would have come first.
      assert.equals('ADDED     only-a/here  Pending\n', p:output())
    end)

    it('with its flags before watch and global flags after it, as kubectl -n NS get pods -w takes them', function()
      local a, b = namespace('before-a'), namespace('before-b')
      pod(b, 'elsewhere')
      pod(a, 'here', 'app=web')
      pod(a, 'other', 'app=db')
      local p = watcher.track(K.spawn({ '-n', a, '-l=app=web', '-o', 'line', 'watch', 'pods',
        '--kubeconfig', sb.kubeconfig }))
      expect(p, 'before-a/here')
      pod(a, 'later', 'app=web')
      expect(p, 'before-a/later')
      assert.equals('ADDED     before-a/here  Pending\nADDED     before-a/later  Pending\n', p:output())
    end)

    it("without -n or -A: the namespace of the kubeconfig's context", function()
      local ctx, other = namespace('ctx-ns'), namespace('ctx-other')
      pod(other, 'elsewhere')
      pod(ctx, 'here')
      local kc = sb:tmpfile('kubeconfig')
      K.write_file(kc, (K.read_file(sb.kubeconfig):gsub('namespace: default', 'namespace: ' .. ctx)))
      local p = watch({ 'pods', '-o', 'line' }, kc)
      expect(p, 'ctx-ns/here')
      pod(other, 'later')
      pod(ctx, 'later')
      expect(p, 'ctx-ns/later')
      assert.equals('ADDED     ctx-ns/here  Pending\nADDED     ctx-ns/later  Pending\n', p:output())
    end)

    it('with -A: every namespace', function()
      local a, b = namespace('all-a'), namespace('all-b')
      pod(a, 'one')
      local p = watch({ 'pods', '--all-namespaces', '-o', 'line' })
      expect(p, 'all-a/one')
      pod(b, 'two')
      expect(p, 'all-b/two')
      assert.same({ 'ADDED     all-a/one  Pending', 'ADDED     all-b/two  Pending' }, lines_in(p, a, b))
    end)

    it('with a NAME: only that object', function()
      local ns = namespace('by-name')
      pod(ns, 'one')
      pod(ns, 'two')
      local p = watch({ 'pods', 'one', '-n', ns, '-o', 'line' })
      expect(p, 'by-name/one')
      set_phase(ns, 'two', 'Running')
      set_phase(ns, 'one', 'Failed')
      expect(p, 'MODIFIED  by-name/one  Failed')
      assert.equals('ADDED     by-name/one  Pending\nMODIFIED  by-name/one  Failed\n', p:output())
    end)

    it('with -l SEL: only objects whose labels match, filtered by the server', function()
      local ns = namespace('by-label')
      pod(ns, 'web-1', 'app=web')
      pod(ns, 'db-1', 'app=db')
      local p = watch({ 'pods', '-n', ns, '-l', 'app=web', '-v', '6', '-o', 'line' })
      expect(p, 'by-label/web-1')
      pod(ns, 'db-2', 'app=db')
      pod(ns, 'web-2', 'app=web')
      expect(p, 'by-label/web-2')
      assert.equals('ADDED     by-label/web-1  Pending\nADDED     by-label/web-2  Pending\n', p:output())
      -- The watch-list that brings the initial state carries the selector to the server.
      assert.truthy(p:errors():find('GET /api/v1/namespaces/by%-label/pods%?watch=true[^\n]*sendInitialEvents=true'
        .. '[^\n]*&labelSelector=app%%3Dweb: read'), p:errors())
    end)

    it('with --field-selector SEL: only objects whose fields match, arriving as ADDED once they do', function()
      local ns = namespace('by-field')
      pod(ns, 'running')
      set_phase(ns, 'running', 'Running')
      pod(ns, 'pending')
      local p = watch({ 'pods', '-n', ns, '--field-selector', 'status.phase=Running', '-v', '6', '-o', 'line' })
      expect(p, 'by-field/running')
      set_phase(ns, 'pending', 'Running')
      expect(p, 'by-field/pending')
      assert.equals('ADDED     by-field/running  Running\nADDED     by-field/pending  Running\n', p:output())
      assert.truthy(p:errors():find('GET /api/v1/namespaces/by%-field/pods%?watch=true[^\n]*sendInitialEvents=true'
        .. '[^\n]*&fieldSelector=status%.phase%%3DRunning: read'), p:errors())
    end)

    it('with --watch-only: only changes, not the objects that already exist', function()
      local ns = namespace('watch-only')
      pod(ns, 'existing')
      local p = watch({ 'pods', '-n', ns, '--watch-only', '-v', '2', '-o', 'line' })
      assert.truthy(p:wait_for('synced', 10, 'err'), p:errors())
      pod(ns, 'new')
      expect(p, 'watch-only/new')
      assert.equals('ADDED     watch-only/new  Pending\n', p:output())
    end)
  end)

  describe('with -e', function()
    it('prints only the events for which an expression is true', function()
      local ns = namespace('expr-filter')
      pod(ns, 'web', 'app=web')
      pod(ns, 'db', 'app=db')
      pod(ns, 'web-2', 'app=web')
      local p = watch({ 'pods', '-n', ns, '-o', 'line', '-e', 'obj.metadata.labels.app == "web"' })
      expect(p, 'expr-filter/web-2')
      assert.equals('ADDED     expr-filter/web  Pending\nADDED     expr-filter/web-2  Pending\n', p:output())
    end)

    it('runs a chunk with return, printing a string as it is and a table as JSON', function()
      local ns = namespace('expr-chunk')
      pod(ns, 'web', 'app=web')
      local text = watch({ 'pods', '-n', ns, '-e',
        'local n = obj.metadata.name\nif event == "ADDED" then return "new " .. n:upper() end' })
      local tbl = watch({ 'pods', '-n', ns, '-e', '{name = obj.metadata.name, app = obj.metadata.labels.app, t = event}' })
      expect(text, 'new WEB')
      expect(tbl, '}')
      assert.equals('new WEB\n', text:output())
      assert.same({ name = 'web', app = 'web', t = 'ADDED' }, cjson.decode(tbl:output()))
    end)

    it('has event, obj and, on MODIFIED, old in scope', function()
      local ns = namespace('expr-old')
      kubectl('run web -n ' .. ns .. ' --image=nginx -l v=1')
      local p = watch({ 'pods', '-n', ns, '-e',
        'return event .. " " .. (old and (old.metadata.labels.v .. "->") or "") .. obj.metadata.labels.v' })
      expect(p, 'ADDED 1')
      kubectl('label pod web v=2 --overwrite -n ' .. ns)
      expect(p, 'MODIFIED 1->2')
      kubectl('delete pod web -n ' .. ns)
      expect(p, 'DELETED 2')
      assert.equals('ADDED 1\nMODIFIED 1->2\nDELETED 2\n', p:output())
    end)

    it('refuses an expression that does not compile with exit status 2, naming -e', function()
      local out, err, code = run({ 'pods', '-e', 'obj.metadata.name ==' })
      assert.equals(2, code)
      assert.equals('', out)
      local first = lines(err)[1]
      assert.truthy(first:find('klua watch: -e: ', 1, true), err)
      assert.truthy(first:find('(-e):1:', 1, true), err)
    end)

    it('keeps Lua\'s standard functions visible: type(obj) is "userdata" for a view, klua.type(obj) "object"', function()
      local ns = namespace('expr-type')
      pod(ns, 'web', 'app=web')
      local p = watch({ 'pods', '-n', ns, '-e',
        'return table.concat({type(obj), klua.type(obj), tostring(type(obj) == "table"), string.upper(event)}, " ")' })
      expect(p, 'userdata object false ADDED')
      assert.equals('userdata object false ADDED\n', p:output())
      assert.equals('', p:errors())
    end)

    it('reaches nested fields nil-safely with get, a missing step reading nil', function()
      local ns = namespace('expr-get')
      pod(ns, 'a-plain')
      pod(ns, 'b-annotated', nil, 'team=web')
      local p = watch({ 'pods', '-n', ns, '-o', 'line', '-e', 'get(obj, "metadata", "annotations", "team") == "web"' })
      pod(ns, 'c-annotated', nil, 'team=web')
      expect(p, 'expr-get/c-annotated')
      assert.equals('ADDED     expr-get/b-annotated  Pending\nADDED     expr-get/c-annotated  Pending\n', p:output())
      assert.equals('', p:errors())
    end)

    it('refuses an expression that uses type as the event type, as -e once had it, naming event', function()
      for _, expr in ipairs { 'type == "ADDED"', 'return type .. obj.metadata.name', '{t = type}' } do
        local out, err, code = run({ 'pods', '-e', expr })
        assert.equals(2, code)
        assert.equals('', out)
        assert.equals('klua watch: -e: `type` is Lua\'s type() here; the event type is `event`: write event == "ADDED"',
          lines(err)[1])
      end
    end)

    it('reports an expression that fails once per distinct error, then counts it, and goes on with the next events', function()
      local ns = namespace('expr-error')
      pod(ns, 'a-plain')
      pod(ns, 'b-annotated', nil, 'team=web')
      local p = watch({ 'pods', '-n', ns, '-o', 'line', '-e', 'obj.metadata.annotations.team == "web"' })
      expect(p, 'expr-error/b-annotated')
      pod(ns, 'c-plain')
      pod(ns, 'd-annotated', nil, 'team=web')
      expect(p, 'expr-error/d-annotated')
      assert.equals('ADDED     expr-error/b-annotated  Pending\nADDED     expr-error/d-annotated  Pending\n', p:output())
      local message = "(-e):1: attempt to index a nil value (field 'annotations')"
      local first = 'klua watch: -e failed on ADDED expr-error/a-plain, which is not printed: ' .. message
        .. ' (further events failing the same way are counted)\n'
      assert.equals(first, p:errors())
      -- The count, every 10 s while it grows...
      assert.truthy(p:wait_for('%-e error %(x2%)', 20, 'err'), p:errors())
      pod(ns, 'e-plain')
      pod(ns, 'f-annotated', nil, 'team=web')
      expect(p, 'expr-error/f-annotated')
      -- ... and at exit (SIGTERM: 143, as shell tools end).
      assert.equals(143, p:stop())
      assert.equals(first .. 'klua watch: -e error (x2): ' .. message .. '\n'
        .. 'klua watch: -e error (x3): ' .. message .. '\n', p:errors())
    end)

    it('describes -e in --help', function()
      local out, err, code = run({ '--help' })
      assert.equals(0, code)
      assert.equals('', err)
      assert.truthy(out:find('usage: klua [flags] watch TYPE[,TYPE...] [NAME] | TYPE/NAME...', 1, true), out)
      assert.truthy(out:find('event   "ADDED", "MODIFIED" or "DELETED"', 1, true), out)
      assert.truthy(out:find("get(obj, 'metadata', 'labels', 'app')", 1, true), out)
    end)
  end)

  describe('ends when its output does', function()
    -- kubectl get -w | head -1 ends once head has gone: Go's runtime lets
    -- SIGPIPE kill kubectl at its next write to stdout, which the shell shows
    -- as status 141 (128 + 13). klua ends with that status too, quietly, and
    -- without waiting for a next event: here none comes after the initial
    -- list, so only stdout itself can tell that its reader has gone.
    it('with status 141 and nothing on stderr when its reader goes away, as in klua watch pods | head -1', function()
      local ns = namespace('head-one')
      for i = 1, 5 do pod(ns, 'p' .. i) end
      local out, err, code = run_with({ 'pods', '-n', ns, '-o', 'line' }, { pipe = 'head -1' })
      assert.equals(141, code, err)
      assert.equals('', err)
      assert.matches('^ADDED     head%-one/p%d  Pending\n$', out)
    end)

    it('with status 1 and one line saying why when stdout cannot be written', function()
      local ns = namespace('full-disk')
      pod(ns, 'web')
      local _, err, code = run_with({ 'pods', '-n', ns }, { stdout = '/dev/full' })
      assert.equals(1, code, err)
      assert.equals('klua watch: cannot write to stdout: No space left on device\n', err)
    end)
  end)

  describe('refuses', function()
    local USAGE = "Run 'klua watch --help' for usage.\n"

    it('an unknown flag with exit status 2, the message and where to read the usage', function()
      local out, err, code = run({ 'pods', '--frobnicate' })
      assert.equals(2, code)
      assert.equals('', out)
      assert.equals('klua watch: unknown flag: --frobnicate\n' .. USAGE, err)
    end)

    it('a mistyped flag, its own or a global one, suggesting the nearest as kubectl does', function()
      for typed, meant in pairs({ ['--namspace'] = '--namespace', ['--watch-onyl'] = '--watch-only',
        ['--kubconfig'] = '--kubeconfig', ['--fieldselector'] = '--field-selector' }) do
        local _, err, code = run({ 'pods', typed, 'x' })
        assert.equals(2, code, typed)
        assert.equals('klua watch: unknown flag: ' .. typed .. '\n\nDid you mean this?\n\t' .. meant .. '\n\n'
          .. USAGE, err)
      end
    end)

    it('bad words before it connects, so that they need no kubeconfig', function()
      local home = K.tmpdir()
      local out, err, code = K.run({ 'watch', 'pods', '-o', 'yml' }, { env = { HOME = home, KUBECONFIG = '' } })
      os.execute('rm -rf ' .. K.quote(home))
      assert.equals(2, code)
      assert.equals('', out)
      assert.equals('klua watch: unable to match a printer suitable for the output format "yml", allowed formats are: '
        .. 'custom-columns,json,jsonpath,line,name,ndjson,wide,yaml\n' .. USAGE, err)
    end)

    it('-n together with -A', function()
      local _, err, code = run({ 'pods', '-n', 'default', '-A' })
      assert.equals(2, code)
      assert.equals('klua watch: -n and -A cannot be combined\n' .. USAGE, err)
    end)

    it('a label selector that does not parse, before asking the server', function()
      local _, err, code = run({ 'pods', '-l', 'app in web' })
      assert.equals(2, code)
      assert.equals([[klua watch: label selector "app in web": found 'web', expected '(']] .. '\n' .. USAGE, err)
    end)

    it('a missing resource', function()
      local _, err, code = run({})
      assert.equals(2, code)
      assert.equals('klua watch: a resource is needed, such as "pods"\n' .. USAGE, err)
    end)

    it('a resource the server does not have, as kubectl words it', function()
      local out, err, code = run({ 'podz' })
      assert.is_true(code ~= 0)
      assert.equals('', out)
      assert.equals('klua watch: the server doesn\'t have a resource type "podz"\n', err)
    end)

    -- kube-apiserver answers a field its conversion function does not know with
    -- 400 BadRequest "field label not supported: F" (pods, events, secrets...),
    -- or, for kinds without one, apimachinery's DefaultMetaV1FieldSelectorConversion
    -- words. Retrying cannot help: the first LIST's 400 ends klua watch at once.
    it('a field selector the server refuses, with the server\'s message and exit status 1', function()
      local out, err, code = run({ 'pods', '--field-selector', 'status.phse=Failed' })
      assert.equals(1, code)
      assert.equals('', out)
      assert.equals('klua watch: field label not supported: status.phse\n', err)
      _, err, code = run({ 'configmaps', '--field-selector', 'status.phase=Failed' })
      assert.equals(1, code)
      assert.equals('klua watch: "status.phase" is not a known field selector: only "metadata.name", '
        .. '"metadata.namespace"\n', err)
    end)

    it('a resource these credentials may not list (403), with the server\'s message and exit status 1', function()
      local strict = sandbox.start { args = { '--forbid', 'secrets:list' } }
      local out, err, code = K.run({ '--kubeconfig', strict.kubeconfig, 'watch', 'secrets' }, { timeout = 10 })
      strict:stop()
      assert.equals(1, code)
      assert.equals('', out)
      assert.matches('^klua watch: secrets is forbidden: .*cannot list resource "secrets"', err)
    end)

    -- kubectl words these the same (and exits 1; klua watch's usage errors all exit 2).
    it('an output format it does not have, a JSONPath that does not parse, custom-columns without a spec', function()
      for _, case in ipairs({
        { { '-o', 'table' }, 'unable to match a printer suitable for the output format "table", allowed formats are: '
          .. 'custom-columns,json,jsonpath,line,name,ndjson,wide,yaml' },
        -- The tail of a format's name is no format (fuzz_cli found "-o n" taken).
        { { '-o', 'n' }, 'unable to match a printer suitable for the output format "n", allowed formats are: '
          .. 'custom-columns,json,jsonpath,line,name,ndjson,wide,yaml' },
        { { '-o', 'son' }, 'unable to match a printer suitable for the output format "son", allowed formats are: '
          .. 'custom-columns,json,jsonpath,line,name,ndjson,wide,yaml' },
        { { '-o', 'jsonpath={.metadata.name' }, 'error parsing jsonpath {.metadata.name, unclosed action' },
        { { '-o', 'jsonpath=' }, 'template format specified but no template given' },
        { { '-ojsonpath={.a}{end}' }, 'error parsing jsonpath {.a}{end}, not in range, nothing to end' },
        { { '-o', 'custom-columns' }, 'custom-columns format specified but no custom columns given' },
        { { '-o=custom-columns=A' }, 'unexpected custom-columns spec: A, expected <header>:<json-path-expr>' },
        { { '--sort-by', '{.a' }, '--sort-by: error parsing jsonpath {.a, unclosed action' },
      }) do
        local args = { 'pods', table.unpack(case[1]) }
        local out, err, code = run(args)
        assert.equals(2, code, args[2])
        assert.equals('', out)
        assert.equals('klua watch: ' .. case[2] .. '\n' .. USAGE, err)
      end
    end)

    -- kubectl get -w prints each object on its own, so a template for a List
    -- finds no .items: kubectl 1.32 prints nothing for the first object and
    -- fails on the next with these words (its empty range leaves {end}
    -- unmatched), and prints nothing at all for a plain path.
    it('a JSONPath over .items, which no object printed on its own has, before any request', function()
      for _, template in ipairs({ '{range .items[*]}{.metadata.name}{"\\n"}{end}', '{.items[*].metadata.name}' }) do
        local _, err, code = K.run({ '--server', 'http://127.0.0.1:1', 'watch', 'pods', '-o', 'jsonpath=' .. template },
          { env = { HOME = K.tmpdir(), KUBECONFIG = '' } })
        assert.equals(2, code, err)
        assert.equals(('klua watch: error executing jsonpath %q: Error executing template: not in range, '
          .. 'nothing to end: klua watch, as kubectl get -w, prints each object on its own, which has no .items: '
          .. 'write the template for one object, such as {.metadata.name}{"\\n"}\n'):format(template) .. USAGE, err)
      end
    end)

    it('a JSONPath over .items with the words kubectl 1.32 fails with on the second object', function()
      local ns = namespace('items-kubectl')
      pod(ns, 'web')
      pod(ns, 'db')
      local template = '{range .items[*]}{.metadata.name}{"\\n"}{end}'
      local said = K.run_command('timeout 20 ' .. sb:kubectl_command(('get pods -w -n %s -o jsonpath=%s')
        :format(ns, K.quote(template))) .. ' 2>&1; echo "rc=$?"')
      local words = ('error executing jsonpath %q: Error executing template: not in range, nothing to end'):format(template)
      assert.truthy(said:find('error: unable to output the provided object: ' .. words, 1, true), said)
      assert.truthy(said:find('\nrc=1$'), said)
      local _, err, code = run({ 'pods', '-n', ns, '-o', 'jsonpath=' .. template })
      assert.equals(2, code, err)
      assert.truthy(err:find('klua watch: ' .. words .. ': ', 1, true), err)
    end)

    it('a TYPE/NAME after a TYPE, as kubectl does', function()
      local _, err, code = run({ 'pods', 'pod/web' })
      assert.equals(2, code)
      assert.equals('klua watch: a NAME has no "/": pod/web\n' .. USAGE, err)
    end)
  end)

  describe('stops as shell tools do', function()
    for sig, status in pairs({ INT = 130, TERM = 143 }) do
      it(('ending with status %d on SIG%s'):format(status, sig), function()
        local ns = namespace('watch-stop-' .. sig:lower())
        pod(ns, 'web')
        local p = watch({ 'pods', '-n', ns, '-o', 'line' })
        expect(p, ns .. '/web')
        assert.equals(status, p:stop(sig))
      end)
    end

    it('also while -e runs without end', function()
      local ns = namespace('watch-stop-spin')
      pod(ns, 'web')
      local p = watch({ 'pods', '-n', ns, '-e', 'io.stderr:write("evaluating\\n") while true do end' })
      assert.truthy(p:wait_for('evaluating', 10, 'err'), p:errors())
      assert.equals(130, p:stop('INT'), p:errors())
    end)
  end)

  describe('names resources as kubectl does', function()
    it('by short name, plural with group, and group/version/plural', function()
      local ns = namespace('names')
      pod(ns, 'web')
      kubectl('create deployment front --image=nginx -n ' .. ns)
      local cases = {
        { 'po', 'pod/web' },
        { 'deploy', 'deployment.apps/front' },
        { 'deployments.apps', 'deployment.apps/front' },
        { 'apps/v1/deployments', 'deployment.apps/front' },
      }
      local ps = {}
      for i, c in ipairs(cases) do ps[i] = watch({ c[1], '-n', ns, '-o', 'name' }) end
      for i, c in ipairs(cases) do
        expect(ps[i], c[2])
        assert.equals(c[2] .. '\n', ps[i]:output(), c[1])
      end
    end)

    it('a custom resource created with kubectl, by plural and by short name', function()
      local ns = namespace('crd')
      kubectl('apply -f -', CRD)
      kubectl('apply -n ' .. ns .. ' -f -', 'apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: gear}\nspec: {size: 3}\n')
      local plural = watch({ 'widgets', '-n', ns, '-o', 'line' })
      local short = watch({ 'wd', '-n', ns, '-o', 'name' })
      expect(plural, 'crd/gear')
      expect(short, 'widget.example.com/gear')
      assert.equals('ADDED     crd/gear\n', plural:output())
      assert.equals('widget.example.com/gear\n', short:output())
    end)
  end)
end)
