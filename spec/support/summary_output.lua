-- busted output handler: one line per spec, failures with their location and
-- message, and a closing `N passed, N failed` line that CI reads.
return function(options)
  local busted = require 'busted'
  local pretty = require 'pl.pretty'
  local handler = require 'busted.outputHandlers.base'()

  local function out(s) io.write(s, '\n'); io.flush() end

  local function show_failure(t, label)
    local msg = t.message
    if msg == nil then msg = 'nil error' elseif type(msg) ~= 'string' then msg = pretty.write(msg) end
    local where = t.element.trace and (t.element.trace.short_src .. ':' .. t.element.trace.currentline) or '?'
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

  handler.suiteEnd = function()
    local failed = #handler.failures + #handler.errors
    local line = ('%d passed, %d failed'):format(#handler.successes, failed)
    if #handler.pendings > 0 then line = line .. (', %d skipped'):format(#handler.pendings) end
    out(line)
    return nil, true
  end

  busted.subscribe({ 'test', 'end' }, handler.testEnd, { predicate = handler.cancelOnPending })
  busted.subscribe({ 'error' }, handler.error)
  busted.subscribe({ 'suite', 'end' }, handler.suiteEnd)
  return handler
end
