-- tests/e2e/apps/rolling.lua: the app of tests/e2e_rolling.sh, in two releases. APP_VERSION=1
-- (the default) is the old release; APP_VERSION=2 keeps Order 1.0.0 (running instances replay
-- on it), adds Order 2.0.0 (a tagged "label" step), the Audit orchestration and the
-- version-pinned continue-as-new target of Loop.
local duroxide = require("duroxide")
local V2 = os.getenv("APP_VERSION") == "2"

duroxide.activity("Charge", function(actx, order)
  actx:sleep(50)
  return { order = order, by = actx.worker_id }
end)

duroxide.orchestration("Order", function(ctx, order)
  local paid = assert(ctx:schedule_activity("Charge", order):await())
  ctx:schedule_timer(300):await()
  local again = assert(ctx:schedule_activity("Charge", order):await())
  return { v = "1.0.0", order = order, by = { paid.by, again.by } }
end, { version = "1.0.0" })

-- Counts to input.n, one execution per step: a long-lived loop that upgrades itself when it
-- continues on a worker of the new release (no version: the policy, i.e. the latest).
duroxide.orchestration("Loop", function(ctx, s)
  if s.i >= s.n then return { v = "1.0.0", i = s.i } end
  ctx:schedule_timer(100):await()
  ctx:continue_as_new({ i = s.i + 1, n = s.n })
end, { version = "1.0.0" })

if V2 then
  duroxide.activity("Label", function(actx, order)
    return { order = order, tag = actx.tag, by = actx.worker_id }
  end)
  duroxide.orchestration("Order", function(ctx, order)
    local paid = assert(ctx:schedule_activity("Charge", order):await())
    local label = assert(ctx:schedule_activity("Label", order, { tag = "printer" }):await())
    return { v = "2.0.0", order = order, by = { paid.by, label.by }, tag = label.tag }
  end, { version = "2.0.0" })
  duroxide.orchestration("Loop", function(ctx, s)
    if s.i >= s.n then return { v = "2.0.0", i = s.i } end
    ctx:schedule_timer(100):await()
    ctx:continue_as_new({ i = s.i + 1, n = s.n })
  end, { version = "2.0.0" })
  duroxide.orchestration("Audit", function(ctx, what)
    return assert(ctx:schedule_activity("Charge", what):await()).by
  end)
end
