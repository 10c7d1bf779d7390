-- spec/testing_apps/flow_compatible.lua: a compatible change of flow_v1.lua: a new activity
-- implementation and an extra trace; the schedule is the same.
local duroxide = require("duroxide")

duroxide.activity("Reserve", function(actx, item) return "RESERVED " .. item:upper() end)

duroxide.orchestration("Order", function(ctx, item)
  ctx:trace_info("ordering " .. item)
  local r = assert(ctx:schedule_activity("Reserve", item):await())
  ctx:schedule_timer(60 * 60 * 1000):await()
  return r
end)
