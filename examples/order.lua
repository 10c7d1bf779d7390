-- examples/order.lua: an order that collects line items from an event queue and exposes its
-- running total through key-value state. Items are enqueued with client:enqueue_event (or
-- `duroxide-lua enqueue`); items sent before the order is ready to take them are kept in the
-- queue, never dropped. Every item updates the keys "total", "count" and "last_sku", which a
-- client reads at any time with client:get_kv_value / `duroxide-lua kv`. A "checkout" message
-- ends the collection: the card is charged for the total and the order completes.
--
--   export DUROXIDE_STORE=order-store; rm -rf order-store
--   duroxide-lua examples/order.lua &
--   duroxide-lua start Order '{"customer":"ann"}' --id order-1
--   duroxide-lua enqueue order-1 items '{"sku":"pen","qty":2,"price":150}'
--   duroxide-lua enqueue order-1 items '{"sku":"pad","qty":1,"price":300}'
--   until [ "$(duroxide-lua kv order-1 count 2>/dev/null)" = 2 ]; do sleep 0.2; done
--   duroxide-lua kv order-1                    # {"count":2,"last_sku":"pad","total":600}
--   duroxide-lua enqueue order-1 items '"checkout"'
--   duroxide-lua wait order-1                  # ...,"output":{"charge":"ch-ann-600",...}
--   kill $!
local duroxide = require("duroxide")

-- Stands in for a payment service.
duroxide.activity("ChargeCard", function(actx, req)
  return "ch-" .. req.customer .. "-" .. req.amount
end)

local function check_item(item)
  if type(item) ~= "table" or type(item.sku) ~= "string" or math.type(item.qty) ~= "integer"
      or item.qty < 1 or math.type(item.price) ~= "integer" or item.price < 0 then
    return nil, "a line item is {sku = string, qty = integer >= 1, price = integer >= 0 (cents)}"
  end
  return item
end

duroxide.orchestration("Order", function(ctx, input)
  local customer = (input or {}).customer or "guest"
  ctx:set_custom_status("collecting")
  -- Read-modify-write of KV is deterministic on replay: the reads see the values this code
  -- wrote earlier in the execution.
  if ctx:get_kv_value("total") == nil then
    ctx:set_kv_value("total", 0)
    ctx:set_kv_value("count", 0)
  end
  while true do
    local msg = assert(ctx:dequeue_event("items"):await())
    if msg == "checkout" then break end
    local item, why = check_item(msg)
    if item then
      ctx:set_kv_value("total", ctx:get_kv_value("total") + item.qty * item.price)
      ctx:set_kv_value("count", ctx:get_kv_value("count") + 1)
      ctx:set_kv_value("last_sku", item.sku)
    else
      ctx:trace_warn("ignored a bad line item: " .. why)
    end
  end
  local total = ctx:get_kv_value("total")
  ctx:set_custom_status("charging")
  local charge = assert(ctx:schedule_activity("ChargeCard", { customer = customer, amount = total })
                          :await())
  ctx:set_custom_status("charged")
  return { customer = customer, total = total, count = ctx:get_kv_value("count"), charge = charge }
end)
