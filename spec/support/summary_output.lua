-- busted output handler: one line per spec, failures with their location and
-- message, the spec files that took longest (where a slow CI run spent its
-- time; left out with -Xoutput no-slowest, as scripts/build/run-specs runs
-- each job, listing the slowest jobs itself), and a closing
-- `N passed, N failed` line that CI reads.
return function(options)
  local busted = require('busted')
  local pretty = require('pl.pretty')
  local handler = require('busted.outputHandlers.base')()

  local function out(s) io.write(s, '\n'); io.flush() end

  local function show_failure(t, label)
    local msg = t.message
    if msg == nil then msg = 'nil error' elseif type(msg) ~= 'string' then msg = pretty.write(msg) end
    local trace = t.element.trace
    -- A file that does not load has a trace without a line.
    local where = trace and trace.short_src and (trace.short_src .. ':' .. tostring(trace.currentline or '?')) or '?'
    out(('%s %s\n    at %s\n    %s'):format(label, t.name, where, (msg:gsub('\n', '\n    '))))
    if options.verbose and t.trace and t.trace.traceback then out(t.trace.traceback) end
  end

  handler.testEnd = function(element, parent, status)
    if status == 'success' then
      out('ok   ' .. handler.getFullName(element))
    elseif status == 'pending' then
      out('SKIP ' .. handler.getFullName(element))
    elseif status == 'failure' then
      show_failure(handler.failures[#handler.failures], 'FAIL')
    elseif status == 'error' then
      show_failure(handler.errors[#handler.errors], 'ERR ')
    end
    return nil, true
  end

  handler.error = function(element)
    if element.descriptor ~= 'it' then show_failure(handler.errors[#handler.errors], 'ERR ') end
    return nil, true
  end

  local files = {}
  handler.fileEnd = function(element)
    if element.duration then files[#files + 1] = { name = element.name, seconds = element.duration } end
    return nil, true
  end

  local SLOWEST = 8
  local function show_slowest()
    table.sort(files, function(a, b) return a.seconds > b.seconds end)
    local total = 0
    for _, f in ipairs(files) do total = total + f.seconds end
    out(('spec files: %d in %.0f s; the slowest:'):format(#files, total))
    for i = 1, math.min(SLOWEST, #files) do out(('  %6.1f s  %s'):format(files[i].seconds, files[i].name)) end
  end

  local slowest = true
  for _, a in ipairs(options.arguments or {}) do
    if a == 'no-slowest' then slowest = false end
  end

  handler.suiteEnd = function()
    if slowest then show_slowest() end
    local failed = #handler.failures + #handler.errors
    local line = ('%d passed, %d failed'):format(#handler.successes, failed)
    if #handler.pendings > 0 then line = line .. (', %d skipped'):format(#handler.pendings) end
    out(line)
    return nil, true
  end

  busted.subscribe({ 'test', 'end' }, handler.testEnd, { predicate = handler.cancelOnPending })
  busted.subscribe({ 'error' }, handler.error)
  busted.subscribe({ 'file', 'end' }, handler.fileEnd)
  busted.subscribe({ 'suite', 'end' }, handler.suiteEnd)
  return handler
end
