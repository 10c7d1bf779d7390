-- An activity's coroutine kept and closed by its code (coroutine.running, coroutine.close).
-- activity.c reuses a finished activity's coroutine for the next activity, but not one the
-- code got from coroutine.running: a later activity never waits on a coroutine that code kept.
-- An activity whose coroutine is closed while it waits fails with a message saying so instead
-- of hanging, and its run never writes into a handle the collector freed (checked under
-- scripts/test --asan, whose busted preloads libasan).
local duroxide = require("duroxide")
local H = require("helpers")
local uv = require("luv")

describe("an activity coroutine closed by other code", function()
  local env
  before_each(function() env = H.env() end)
  after_each(function() env:close() end)

  it("does not run a later activity on the coroutine an activity kept", function()
    local saved, b_waits, closed, b_co = nil, false, false, nil
    local a = env:activity("KeepsCo", function()
      saved = coroutine.running()
      local t = uv.new_timer()
      t:start(1, 1, function() -- once B waits, close the kept coroutine
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
      b_co = coroutine.running()
      b_waits = true
      actx:sleep(50)
      return "b"
    end)
    local orch = env:orchestration("AB", function(ctx)
      ctx:schedule_activity(a):await()
      local v, err = ctx:schedule_activity(b):await()
      return v or err.message
    end)
    local st = env:run(orch)
    assert.is_true(closed)
    assert.are_not.equal(saved, b_co)
    assert.are.equal("Completed", st.status)
    assert.are.equal("b", st.output)
  end)

  -- An activity whose own luv timer closes its coroutine while it waits (sleep_ms; nil: a
  -- wait whose done is never called), then collects garbage.
  local function closes_itself(sleep_ms)
    local closed = false
    local act = env:activity("ClosesItself", function(actx)
      local co = coroutine.running()
      local t = uv.new_timer()
      t:start(20, 0, function()
        t:close()
        coroutine.close(co)
        collectgarbage("collect")
        collectgarbage("collect")
        closed = true
      end)
      if sleep_ms then actx:sleep(sleep_ms)
      else
        actx = nil -- luacheck: ignore
        duroxide.wait(function() end)
      end
      return "unreachable"
    end)
    local orch = env:orchestration("Closes", function(ctx)
      local v, err = ctx:schedule_activity(act):await()
      return v or err.message
    end)
    local id = env:start(orch)
    env:run_until(function() return closed end, 5000, "the close")
    return id
  end

  it("fails an activity whose coroutine was closed while it waited when its done fires", function()
    local st = env:wait(closes_itself(100), 5000)
    assert.are.equal("Completed", st.status)
    assert.matches("coroutine was closed while it waited", st.output, 1, true)
    -- the worker still runs activities
    local c = env:activity("After", function() return "still alive" end)
    local orch = env:orchestration("After", function(ctx) return ctx:schedule_activity(c):await() end)
    assert.are.equal("still alive", env:run(orch).output)
  end)

  it("hands back at shutdown a waiting activity whose coroutine was closed", function()
    local id = closes_itself(60000)
    env.rt:stop() -- the grace (1 s) runs out: the runtime aborts the activity, hands it back
    local hist = env.client:history(id)
    assert.are.equal(1, #H.events_of(hist, "ActivityScheduled"))
    assert.are.equal(0, #H.events_of(hist, "ActivityCompleted") + #H.events_of(hist, "ActivityFailed"))
  end)

  it("lets a crashing worker drop a waiting activity whose coroutine was closed", function()
    local id = closes_itself(60000)
    env.rt:crash() -- aborts the activity at once (its row stays locked)
    local hist = env.client:history(id)
    assert.are.equal(0, #H.events_of(hist, "ActivityCompleted") + #H.events_of(hist, "ActivityFailed"))
  end)

  it("hands back at shutdown an activity whose coroutine was closed while its done never fires", function()
    closes_itself(nil)
    env:close()
  end)
end)
