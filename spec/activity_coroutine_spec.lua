-- An activity's coroutine closed by code that kept it (coroutine.running, coroutine.close):
-- activity.c reuses a finished activity's coroutine for the next activity, so code of one
-- activity that kept its coroutine can close another's while it waits. The waiting activity
-- fails with a message saying so instead of hanging, and its run never writes into a handle
-- the collector freed (checked under scripts/test --asan, whose busted preloads libasan).
local duroxide = require("duroxide")
local H = require("helpers")
local uv = require("luv")

describe("an activity coroutine closed by other code", function()
  local env
  before_each(function() env = H.env() end)
  after_each(function() env:close() end)

  -- A keeps its coroutine and returns; B runs on that coroutine next (a kept one) and waits
  -- (sleep_ms); A's timer closes the coroutine once B waits, and collects garbage.
  local function a_closes_b(sleep_ms)
    local saved, b_waits, closed, same = nil, false, false, nil
    local a = env:activity("KeepsCo", function()
      saved = coroutine.running()
      local t = uv.new_timer()
      t:start(1, 1, function()
        if not b_waits then return end
        t:close()
        coroutine.close(saved)
        collectgarbage("collect")
        collectgarbage("collect")
        closed = true
      end)
      return "a"
    end)
    local b = env:activity("Waits", function(actx)
      same = coroutine.running() == saved
      b_waits = true
      actx:sleep(sleep_ms)
      return "b"
    end)
    local orch = env:orchestration("AB", function(ctx)
      ctx:schedule_activity(a):await()
      local v, err = ctx:schedule_activity(b):await()
      return v or err.message
    end)
    local id = env:start(orch)
    env:run_until(function() return closed end, 5000, "the close")
    return id, function() return same end
  end

  it("fails the waiting activity instead of hanging when its done fires", function()
    local id, same = a_closes_b(50)
    local st = env:wait(id, 5000)
    assert.is_true(same()) -- B ran on A's coroutine
    assert.are.equal("Completed", st.status)
    assert.matches("coroutine was closed while it waited", st.output, 1, true)
    -- the worker still runs activities, on a fresh coroutine
    local c = env:activity("After", function() return "still alive" end)
    local orch = env:orchestration("After", function(ctx) return ctx:schedule_activity(c):await() end)
    assert.are.equal("still alive", env:run(orch).output)
  end)

  it("hands the waiting activity back at shutdown without touching its freed handle", function()
    local id, same = a_closes_b(60000)
    assert.is_true(same())
    env.rt:stop() -- the grace (1 s) runs out: the runtime aborts the activity, hands it back
    local hist = env.client:history(id)
    assert.are.equal(2, #H.events_of(hist, "ActivityScheduled"))
    assert.are.equal(1, #H.events_of(hist, "ActivityCompleted")) -- A's only
  end)

  it("lets a crashing worker drop the waiting activity without touching its freed handle", function()
    local id, same = a_closes_b(60000)
    assert.is_true(same())
    env.rt:crash() -- aborts the activity at once (its row stays locked)
    local hist = env.client:history(id)
    assert.are.equal(1, #H.events_of(hist, "ActivityCompleted")) -- A's only
  end)

  it("hands back at shutdown an activity whose own timer closed its coroutine", function()
    local closed = false
    local act = env:activity("SelfKept", function(actx)
      local co = coroutine.running()
      actx = nil -- luacheck: ignore
      local t = uv.new_timer()
      t:start(20, 0, function()
        t:close()
        coroutine.close(co)
        collectgarbage("collect")
        collectgarbage("collect")
        closed = true
      end)
      duroxide.wait(function() end) -- never done
      return "unreachable"
    end)
    local orch = env:orchestration("Self", function(ctx) return ctx:schedule_activity(act):await() end)
    env:start(orch)
    env:run_until(function() return closed end, 5000, "the close")
    env:close()
  end)
end)
