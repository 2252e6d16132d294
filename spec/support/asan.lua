-- Loaded by scripts/run-specs under `make test-asan` (busted --helper).
-- The interpreter runs with the sanitizer runtime preloaded so that the
-- instrumented spec module can load; the servers, tools and klua processes
-- that specs start must not inherit that preload (klua links its own).
-- Every command starts by dropping it from the shell's environment, which
-- keeps the shell itself (and so $PPID) as it was.
if os.getenv('LD_PRELOAD') then
  local popen, execute = io.popen, os.execute
  io.popen = function(cmd, mode) return popen('unset LD_PRELOAD; ' .. cmd, mode) end
  os.execute = function(cmd)
    if cmd == nil then return execute() end
    return execute('unset LD_PRELOAD; ' .. cmd)
  end
end
