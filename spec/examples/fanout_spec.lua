-- spec/examples/fanout_spec.lua: examples/fanout.lua (fan-out, join, partial failures).
local testing = require("duroxide.testing")

describe("examples/fanout.lua", function()
  local env
  before_each(function() env = testing.env({ app = "examples/fanout.lua" }) end)
  after_each(function() env:close() end)

  it("squares every item and sums them", function()
    local st = env:run_until_complete(env:start("f1", "FanOut", { items = { 1, 2, 3, 4 } }))
    assert.are.equal("Completed", st.status)
    assert.are.same({ 1, 4, 9, 16 }, st.output.results)
    assert.are.equal(30, st.output.total)
    assert.are.equal(4, st.output.ok)
    assert.are.same({}, st.output.failed)
    assert.are.equal(4, #env:calls("Square"))
  end)

  it("defaults to the items 1..10", function()
    local st = env:run_until_complete(env:start("f2", "FanOut", nil))
    assert.are.equal(385, st.output.total)
    assert.are.equal(10, #env:calls("Square"))
  end)

  it("reports failed items and aggregates the rest", function()
    local st = env:run_until_complete(env:start("f3", "FanOut",
      { items = { 1, 2, 3, 4, 5, 6, 7, 8 }, fail = { 3, 7 } }))
    assert.are.equal("Completed", st.status)
    local out = st.output
    assert.are.equal(6, out.ok)
    assert.are.equal(146, out.total)
    assert.are.equal(8, #out.results)
    assert.are.equal(4, out.results[2])
    assert.are.equal(64, out.results[8])
    -- failed positions are JSON null
    assert.are.equal(require("duroxide").null, out.results[3])
    assert.are.same({ { item = 3, error = "item 3 failed" }, { item = 7, error = "item 7 failed" } },
                    out.failed)
    -- every item ran once, failures included
    assert.are.equal(8, #env:calls("Square"))
  end)

  it("survives every item failing", function()
    env:mock_activity("Square", function(actx, req) error("down", 0) end)
    local st = env:run_until_complete(env:start("f4", "FanOut", { items = { 5, 6 } }))
    assert.are.equal("Completed", st.status)
    assert.are.equal(0, st.output.ok)
    assert.are.equal(0, st.output.total)
    assert.are.same({ { item = 5, error = "down" }, { item = 6, error = "down" } }, st.output.failed)
  end)

  it("replays its history deterministically", function()
    local id = env:start("f5", "FanOut", { items = { 1, 2, 3 }, fail = { 2 } })
    env:run_until_complete(id)
    local ok, err = testing.check_replay(env:history(id), "examples/fanout.lua")
    assert.is_true(ok, err)
  end)
end)
