-- spec/testing_apps/flow_changed.lua: an incompatible change of flow_v1.lua (another activity
-- where the history has Reserve): replaying old histories is nondeterministic.
local duroxide = require("duroxide")

duroxide.activity("Hold", function(actx, item) return "held " .. item end)

duroxide.orchestration("Order", function(ctx, item)
  local r = assert(ctx:schedule_activity("Hold", item):await())
  ctx:schedule_timer(60 * 60 * 1000):await()
  return r
end)
