-- app.lua: a standalone duroxide-lua project (copy this folder anywhere). An order is
-- reserved, then charged; a failed charge releases the reservation.
--   duroxide-lua app.lua &                                          # a worker
--   duroxide-lua start PlaceOrder '{"item":"book","qty":2}' --id order-1 --wait 10s
--   busted                                                          # spec/app_spec.lua
local duroxide = require("duroxide")

duroxide.activity("Reserve", function(actx, order)
  return { item = order.item, qty = order.qty, reservation = "r-" .. order.item }
end)

duroxide.activity("Charge", function(actx, order)
  if order.qty > 10 then error("card declined: " .. order.qty .. " is too many", 0) end
  return { charged = order.qty * 5 }
end)

duroxide.activity("Release", function(actx, reservation)
  return "released " .. reservation
end)

duroxide.orchestration("PlaceOrder", function(ctx, order)
  local r = assert(ctx:schedule_activity("Reserve", order):await())
  local paid, err = ctx:schedule_activity("Charge", order):await()
  if not paid then
    ctx:schedule_activity("Release", r.reservation):await()
    return { ok = false, reason = err.message }
  end
  return { ok = true, reservation = r.reservation, charged = paid.charged }
end)
