-- The session history in the store (`duroxide-lua sessions --history`): claims, moves,
-- releases and their reasons, recorded by the workers as they happen.
local testing = require("duroxide.testing")

describe("session history", function()
  local env
  before_each(function()
    env = testing.env()
    env:register_activity("Step", function(actx, n) return actx.worker_id end)
    env:register_orchestration("Steps", function(ctx, input)
      local out = {}
      for i = 1, input.n do
        if input.pause and i == input.pause + 1 then ctx:schedule_wait("go"):await() end
        out[i] = assert(ctx:schedule_activity_on_session("Step", i, input.sid):await())
      end
      if input.close then ctx:close_session(input.sid) end
      return out
    end)
  end)
  after_each(function() env:close() end)

  -- "event worker detail from" of each entry
  local function lines(sid)
    local out = {}
    for _, e in ipairs(env:session_history(sid)) do
      out[#out + 1] = table.concat({ e.event, e.worker_id, e.detail or "-", e.from or "-" }, " ")
    end
    return out
  end

  it("records a claim and the release with its reason", function()
    env:run_until_complete(env:start("h1", "Steps", { n = 2, sid = "s1", close = true }))
    env:run_until_idle()
    assert.are.same({ "claimed w1 new -", "released w1 closed -" }, lines("s1"))
    local h = env:session_history("s1")
    assert.is_true(h[1].at <= h[2].at)
  end)

  it("records a move after the owner crashed, naming the old owner", function()
    env:add_worker("w2")
    local id = env:start("h2", "Steps", { n = 2, sid = "s2", pause = 1, close = true })
    env:run_until_idle()
    local owner = env:sessions()[1].worker_id
    local other = owner == "w1" and "w2" or "w1"
    env:crash_worker(owner)
    env:raise_event(id, "go")
    env:run_until_complete(id)
    env:run_until_idle()
    -- the crashed owner recorded nothing more; the new owner's claim is a move from it
    assert.are.same({ "claimed " .. owner .. " new -", "moved " .. other .. " new " .. owner,
                      "released " .. other .. " closed -" }, lines("s2"))
  end)

  it("records a lost lease and the reclaim by the restarted worker", function()
    local id = env:start("h3", "Steps", { n = 3, sid = "s3", pause = 1 })
    env:run_until_idle()
    env:expire_session("s3")           -- w1's lease lapsed: "lost"
    env:shutdown_worker("w1")          -- owns nothing now: no "shutdown" release
    env:restart_worker("w1")
    env:raise_event(id, "go")
    env:run_until_complete(id)
    local l = lines("s3")
    assert.are.equal("claimed w1 new -", l[1])
    assert.are.equal("released w1 lost -", l[2])
    assert.are.equal("claimed w1 reclaim w1", l[3]) -- taken again by the same worker id
    assert.are.equal(3, #l)
  end)

  it("is empty for a session never claimed", function()
    assert.are.same({}, env:session_history("never"))
  end)
end)
