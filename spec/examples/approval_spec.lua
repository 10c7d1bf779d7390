-- spec/examples/approval_spec.lua: examples/approval.lua (event vs. timeout with select).
local testing = require("duroxide.testing")

local DAY = 24 * 3600 * 1000

describe("examples/approval.lua", function()
  local env
  before_each(function() env = testing.env({ app = "examples/approval.lua" }) end)
  after_each(function() env:close() end)

  it("waits for approval, then completes with the approver", function()
    local id = env:start("ap-1", "Approval", { request = "laptop", timeout_ms = DAY })
    env:run_until_idle()
    local st = env:status(id)
    assert.are.equal("Running", st.status)
    assert.are.same({ state = "waiting for approval", request = "laptop" }, st.custom_status)
    assert.are.same({ { input = { request = "laptop" }, worker_id = "w1" } },
                    (function()
                      local out = {}
                      for i, c in ipairs(env:calls("NotifyApprover")) do
                        out[i] = { input = c.input, worker_id = c.worker_id }
                      end
                      return out
                    end)())
    env:raise_event(id, "approved", { by = "ann" })
    st = env:run_until_complete(id)
    assert.are.equal("Completed", st.status)
    assert.are.same({ approved = true, by = "ann", request = "laptop" }, st.output)
    assert.are.same({ state = "approved", request = "laptop" }, st.custom_status)
  end)

  it("rejects when nobody approves within the timeout (24 h on the virtual clock)", function()
    local id = env:start("ap-2", "Approval", { request = "laptop" }) -- default timeout: 24 h
    local st = env:run_until_complete(id)
    assert.are.equal("Completed", st.status)
    assert.are.same({ approved = false, request = "laptop",
                      reason = "no approval within " .. DAY .. " ms" }, st.output)
    assert.are.equal("timed out", st.custom_status.state)
  end)

  it("does not time out before the timer is due", function()
    local id = env:start("ap-3", "Approval", { request = "car", timeout_ms = 60000 })
    env:run_until_idle()
    env:advance(59000)
    env:run_until_idle()
    assert.are.equal("Running", env:status(id).status)
    local st = env:run_until_complete(id)
    assert.are.equal(false, st.output.approved)
    assert.are.equal("no approval within 60000 ms", st.output.reason)
  end)

  it("keeps an approval raised right after the start (the wait is subscribed first)", function()
    local id = env:start("ap-4", "Approval", { timeout_ms = DAY })
    env:raise_event(id, "approved", { by = "bob" })
    local st = env:run_until_complete(id)
    assert.are.same({ approved = true, by = "bob", request = "request" }, st.output)
  end)

  it("replays both paths deterministically", function()
    local a = env:start("ap-5", "Approval", { timeout_ms = 1000 })
    env:run_until_complete(a)
    local b = env:start("ap-6", "Approval", { timeout_ms = DAY })
    env:run_until_idle()
    env:raise_event(b, "approved", { by = "ann" })
    env:run_until_complete(b)
    for _, id in ipairs({ a, b }) do
      local ok, err = testing.check_replay(env:history(id), "examples/approval.lua")
      assert.is_true(ok, err)
    end
  end)
end)
