-- tests/e2e/apps/nondet_v2.lua: same orchestration name, but schedules B first (a breaking
-- change that replay of a v1 history must detect).
local duroxide = require("duroxide")
duroxide.activity("A", function(actx, input) return "a" end)
duroxide.activity("B", function(actx, input) return "b" end)
duroxide.orchestration("Versioned", function(ctx, input)
  local b = assert(ctx:schedule_activity("B", input):await())
  local ev = ctx:schedule_wait("go"):await()
  return b .. tostring(ev)
end)
