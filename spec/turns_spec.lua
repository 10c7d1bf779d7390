-- Messages and turns (issue 7 items 1-5): versions named in errors, refused bad versions.
local H = require("helpers")
local duroxide = require("duroxide")

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

  it("parks a continue-as-new to a version no worker has until one registers it", function()
    -- rolling deployments: a worker fetches only what it can run, so the new execution waits
    -- for a worker with 9.9.9 instead of failing on this one
    local name
    name = env:orchestration("Upgrade", function(ctx, input)
      if input == 1 then return ctx:continue_as_new(2, { version = "9.9.9" }) end
      return input
    end)
    local id = env:start(name, 1)
    local st = env.client:wait(id, 300)
    assert.is_nil(st) -- still waiting (not failed, not run by 1.0.0)
    local h1 = env.client:history(id, 1)
    assert.are.equal("OrchestrationContinuedAsNew", h1[#h1].type)
    duroxide.orchestration(name, function(ctx, input) return "v9:" .. input end,
                           { version = "9.9.9" })
    st = env:wait(id)
    assert.are.equal("Completed", st.status)
    assert.are.equal("v9:2", st.output)
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
