-- spec/app_spec.lua: app.lua under duroxide.testing (run `busted` in this folder).
local testing = require("duroxide.testing")

describe("PlaceOrder", function()
  local env
  before_each(function() env = testing.env({ app = "app.lua" }) end)
  after_each(function() env:close() end)

  it("reserves and charges", function()
    local st = env:run_until_complete(env:start("o1", "PlaceOrder", { item = "book", qty = 2 }))
    assert.are.equal("Completed", st.status)
    assert.are.same({ ok = true, reservation = "r-book", charged = 10 }, st.output)
  end)

  it("releases the reservation when the charge fails", function()
    local st = env:run_until_complete(env:start("o2", "PlaceOrder", { item = "pen", qty = 50 }))
    assert.are.equal("Completed", st.status)
    assert.is_false(st.output.ok)
    assert.matches("card declined", st.output.reason, 1, true)
    assert.are.equal("r-pen", env:calls("Release")[1].input)
  end)

  it("uses a mocked activity", function()
    env:mock_activity("Charge", function() return { charged = 0 } end)
    local st = env:run_until_complete(env:start(nil, "PlaceOrder", { item = "cup", qty = 1 }))
    assert.are.equal(0, st.output.charged)
  end)
end)
