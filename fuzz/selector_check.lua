-- What fuzz_selector does with an input, and what
-- spec/unit/fuzz_regressions_spec.lua replays: klua.selector's promises.
--
--   check(data, selector, fail)
--
-- data is the selector text, then optionally a NUL and labels as
-- NUL-separated "key=value" words (a word without "=" is a key with the
-- value ""). selector is the klua.selector module, fail a function that
-- reports a broken promise and does not return. The promises: parse never
-- raises, answering a selector or nil and a message; a selector's
-- canonical form (tostring) parses to a selector with the same canonical
-- form; both match the labels alike, given as a table or as an object's
-- metadata.labels, with a boolean; a selector without requirements
-- matches every set of labels.
return function(data, selector, fail)
  local text, rest = data:match('^([^%z]*)%z(.*)$')
  if not text then text, rest = data, '' end
  local labels = {}
  for word in (rest .. '\0'):gmatch('([^%z]*)%z') do
    local k, v = word:match('^([^=]*)=(.*)$')
    labels[k or word] = v or ''
  end

  local ok, sel, err = pcall(selector.parse, text)
  if not ok then fail('parse raised: ' .. tostring(sel)) end
  if not sel then
    if type(err) ~= 'string' or err == '' then fail('parse refused without a message') end
    return
  end
  local canon = tostring(sel)
  local again, err2 = selector.parse(canon)
  if not again then fail(('the canonical form %q does not parse: %s'):format(canon, err2)) end
  if tostring(again) ~= canon then
    fail(('the canonical form %q parses to %q'):format(canon, tostring(again)))
  end
  local m = sel:matches(labels)
  if type(m) ~= 'boolean' then fail('matches gave a ' .. type(m)) end
  if again:matches(labels) ~= m then fail(('%q and its canonical form %q disagree'):format(text, canon)) end
  if sel:matches({ metadata = { labels = labels } }) ~= m then fail('an object and its labels disagree') end
  if sel:empty() and not m then fail('a selector without requirements refused labels') end
end
