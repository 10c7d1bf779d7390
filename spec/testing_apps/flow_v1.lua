-- spec/testing_apps/flow_v1.lua: an app for testing_spec's replay checks (the deployed code).
local duroxide = require("duroxide")

duroxide.activity("Reserve", function(actx, item) return "reserved " .. item end)

duroxide.orchestration("Order", function(ctx, item)
  local r = assert(ctx:schedule_activity("Reserve", item):await())
  ctx:schedule_timer(60 * 60 * 1000):await()
  return r
end)
