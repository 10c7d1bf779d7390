-- spec/examples/order_spec.lua: examples/order.lua (an event queue feeding key-value state).
local testing = require("duroxide.testing")

describe("examples/order.lua", function()
  local env
  before_each(function() env = testing.env({ app = "examples/order.lua" }) end)
  after_each(function() env:close() end)

  it("keeps items sent before the order waits, and exposes the running total", function()
    local id = env:start("order-1", "Order", { customer = "ann" })
    -- both items are queued before the first turn has run: none is lost
    env:enqueue_event(id, "items", { sku = "pen", qty = 2, price = 150 })
    env:enqueue_event(id, "items", { sku = "pad", qty = 1, price = 300 })
    env:run_until_idle()
    assert.are.equal("Running", env:status(id).status)
    assert.are.same({ total = 600, count = 2, last_sku = "pad" }, env:kv(id))
    assert.are.equal(600, env.client:get_kv_value(id, "total"))
    assert.are.equal("collecting", env:status(id).custom_status)

    env:enqueue_event(id, "items", { sku = "ink", qty = 3, price = 25 })
    env:run_until_idle()
    assert.are.equal(675, env.client:get_kv_value(id, "total"))

    env:enqueue_event(id, "items", "checkout")
    local st = env:run_until_complete(id)
    assert.are.equal("Completed", st.status)
    assert.are.same({ customer = "ann", total = 675, count = 3, charge = "ch-ann-675" }, st.output)
    assert.are.equal("charged", st.custom_status)
    assert.are.same({ { customer = "ann", amount = 675 } },
                    (function()
                      local out = {}
                      for i, c in ipairs(env:calls("ChargeCard")) do out[i] = c.input end
                      return out
                    end)())
    -- the key-value state outlives the execution
    assert.are.same({ total = 675, count = 3, last_sku = "ink" }, env:kv(id))
  end)

  it("ignores a malformed item and keeps collecting", function()
    local id = env:start("order-2", "Order", {})
    env:enqueue_event(id, "items", { sku = "pen" })
    env:enqueue_event(id, "items", { sku = "pen", qty = 1, price = 100 })
    env:enqueue_event(id, "items", "checkout")
    local st = env:run_until_complete(id)
    assert.are.same({ customer = "guest", total = 100, count = 1, charge = "ch-guest-100" },
                    st.output)
  end)

  it("replays its history deterministically (read-modify-write of KV)", function()
    local id = env:start("order-3", "Order", { customer = "bob" })
    for i = 1, 3 do env:enqueue_event(id, "items", { sku = "s" .. i, qty = i, price = 10 }) end
    env:enqueue_event(id, "items", "checkout")
    assert.are.equal("Completed", env:run_until_complete(id).status)
    local ok, err = testing.check_replay(env:history(id), "examples/order.lua")
    assert.is_true(ok, tostring(err))
  end)
end)
