-- tests/e2e/apps/nondet_v1.lua: schedules A, then waits for "go".
local duroxide = require("duroxide")
duroxide.activity("A", function(actx, input) return "a" end)
duroxide.activity("B", function(actx, input) return "b" end)
duroxide.orchestration("Versioned", function(ctx, input)
  local a = assert(ctx:schedule_activity("A", input):await())
  local ev = ctx:schedule_wait("go"):await()
  return a .. tostring(ev)
end)
