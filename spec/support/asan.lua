-- Loaded by scripts/build/run-specs under `make test-asan` (busted --helper).
-- The interpreter runs with the sanitizer runtime preloaded so that the
-- instrumented spec module can load; the servers, tools and klua processes
-- that specs start must not inherit that preload (klua links its own), and
-- they take the children's sanitizer options: leak checking on, reports
-- into the directory that run-specs inspects at the end. Every command
-- starts by setting both in the shell's environment, which keeps the shell
-- itself (and so $PPID) as it was.
if os.getenv('LD_PRELOAD') then
  local prefix = ("unset LD_PRELOAD; export ASAN_OPTIONS='%s' UBSAN_OPTIONS='%s'; ")
    :format(os.getenv('KLUA_CHILD_ASAN_OPTIONS'), os.getenv('KLUA_CHILD_UBSAN_OPTIONS'))
  local popen, execute = io.popen, os.execute
  io.popen = function(cmd, mode) return popen(prefix .. cmd, mode) end
  os.execute = function(cmd)
    if cmd == nil then return execute() end
    return execute(prefix .. cmd)
  end
end
