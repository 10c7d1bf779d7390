-- Messages and turns (issue 7 items 1-5): versions named in errors, refused bad versions.
local H = require("helpers")

describe("turns", function()
  local env
  before_each(function() env = H.env() end)
  after_each(function() env:close() end)

  it("refuses a start whose version is not MAJOR.MINOR.PATCH, naming it", function()
    local echo = env:orchestration("Echo", function(ctx, input) return input end)
    for _, bad in ipairs({ "1.x", "1.2", "1.2.3.4", " 1.2.3", "1.2.3-rc", "" }) do
      local ok, err = env.client:start(H.unique("v"), echo, 1, bad)
      assert.is_nil(ok)
      assert.matches("version '" .. bad .. "' is not a version", err.message, 1, true)
    end
    assert.are.same({}, env.client:list())
    local id = env.client:start("good", echo, 1, "1.0.0")
    assert.are.equal("Completed", env:wait(id).status)
  end)

  it("fails a continue-as-new to an unregistered version, naming the version", function()
    env:close()
    env = H.env({ max_attempts = 1 }) -- give up at once instead of backing off
    local name
    name = env:orchestration("Upgrade", function(ctx, input)
      if input == 1 then return ctx:continue_as_new(2, "9.9.9") end
      return input
    end)
    local id = env:start(name, 1)
    local st = env:wait(id, 60)
    assert.are.equal("Failed", st.status)
    assert.matches("orchestration '" .. name .. "' version 9.9.9 is not registered",
                   st.error.message, 1, true)
  end)

  it("applies the runtime's own turn_instruction_budget (not only configure's)", function()
    env:close()
    env = H.env({ turn_instruction_budget = 1000 })
    local spin = env:orchestration("Spin", function(ctx, n)
      local x = 0
      for i = 1, n do x = x + i end
      return x
    end)
    local st = env:run(spin, 100000)
    assert.are.equal("Failed", st.status)
    assert.matches("instruction budget exceeded", st.error.message, 1, true)
  end)

  it("refuses duroxide.configure while a worker runs in the state", function()
    local duroxide = require("duroxide")
    local ok, err = pcall(duroxide.configure, { max_attempts = 3 })
    assert.is_false(ok)
    assert.matches("options are fixed when it starts", err, 1, true)
  end)
end)
