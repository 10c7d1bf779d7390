-- The orchestration sandbox, the per-turn instruction budget and stale ctx handles.
local duroxide = require("duroxide")
local H = require("helpers")

describe("sandbox", function()
  local env
  before_each(function() env = H.env({ turn_instruction_budget = 2000000 }) end)
  after_each(function() env:close() end)

  local forbidden = {
    { "os.time", function() return os.time() end, "ctx:utc_now()" },
    { "os.clock", function() return os.clock() end, "ctx:utc_now()" },
    { "os.date", function() return os.date("%Y") end, "ctx:utc_now()" },
    { "math.random", function() return math.random(10) end, "ctx:random()" },
    { "math.randomseed", function() math.randomseed(1) end, "ctx:random()" },
    { "io.open", function() return io.open("/etc/hostname") end, "in an activity" },
    { "io.write", function() io.write("") end, "in an activity" },
    { "os.getenv", function() return os.getenv("HOME") end, "in an activity" },
    { "os.execute", function() return os.execute("true") end, "in an activity" },
    { "os.remove", function() return os.remove("/nonexistent-file") end, "in an activity" },
    { "dofile", function() return dofile("/nonexistent.lua") end, "outside the orchestration" },
    { "loadfile", function() return loadfile("/nonexistent.lua") end, "outside the orchestration" },
    { "require", function() return require("string") end, "outside the orchestration" },
    { "os.date", function() return os.date("%Y", 0) end, "os.date(\"!\" .. format" },
    { "os.setlocale", function() return os.setlocale("C") end, "outside the orchestration" },
    { "debug.getupvalue", function() return debug.getupvalue(os.time, 1) end, "debug library" },
    { "debug.sethook", function() debug.sethook() end, "debug library" },
  }

  it("fails, without crashing the worker, on error objects whose metamethods raise", function()
    local bad_tostring = env:orchestration("BadErr1", function(ctx)
      error(setmetatable({}, { __tostring = function() return {} end }))
    end)
    local bad_index = env:orchestration("BadErr2", function(ctx)
      error(setmetatable({}, { __index = function() error("boom") end }))
    end)
    local act = env:activity("BadErrAct", function(actx)
      error(setmetatable({}, { __tostring = function() error("no") end }))
    end)
    local bad_act = env:orchestration("BadErr3", function(ctx)
      local _, err = ctx:schedule_activity(act):await()
      return err.message
    end)
    local st1, st2, st3 = env:run(bad_tostring), env:run(bad_index), env:run(bad_act)
    assert.are.equal("Failed", st1.status)
    assert.matches("__tostring failed", st1.error.message, 1, true)
    assert.are.equal("Failed", st2.status)
    assert.matches("error object is a table value", st2.error.message, 1, true)
    assert.are.equal("Completed", st3.status)
    assert.matches("__tostring failed", st3.output, 1, true)
  end)

  it("allows os.date with an explicit time in UTC (a \"!\" format)", function()
    local orch = env:orchestration("UtcDate", function(ctx) return os.date("!%Y-%m-%d", 0) end)
    local st = env:run(orch)
    assert.are.equal("Completed", st.status)
    assert.are.equal("1970-01-01", st.output)
  end)

  it("refuses to await a durable future inside coroutine.wrap", function()
    local act = env:activity("Later", function(actx) actx:sleep(20); return 1 end)
    local orch = env:orchestration("WrapAwait", function(ctx)
      return coroutine.wrap(function() return ctx:schedule_activity(act):await() end)()
    end)
    local st = env:run(orch)
    assert.are.equal("Failed", st.status)
    assert.matches("awaited on the orchestration's coroutine", st.error.message, 1, true)
  end)

  it("refuses to join durable futures inside coroutine.wrap (join's inlined wait too)", function()
    local act = env:activity("LaterJ", function(actx) actx:sleep(20); return 1 end)
    local orch = env:orchestration("WrapJoin", function(ctx)
      local fs = { ctx:schedule_activity(act), ctx:schedule_activity(act) }
      return coroutine.wrap(function() return ctx:join(fs) end)()
    end)
    local st = env:run(orch)
    assert.are.equal("Failed", st.status)
    assert.matches("awaited on the orchestration's coroutine", st.error.message, 1, true)
  end)

  for _, case in ipairs(forbidden) do
    local what, call, instead = case[1], case[2], case[3]

    it("fails an orchestration that calls " .. what .. ", naming the replacement", function()
      local orch = env:orchestration("Sandboxed", function(ctx)
        call()
        return "should not get here"
      end)
      local st = env:run(orch)
      assert.are.equal("Failed", st.status)
      assert.are.equal("application", st.error.category)
      assert.matches(what .. " is not available in orchestrations", st.error.message, 1, true)
      assert.matches(instead, st.error.message, 1, true)
    end)

    it("lets an activity call " .. what, function()
      local act = env:activity("Free", function()
        local ok, err = pcall(call)
        return { ok = ok or not tostring(err):find("not available in orchestrations", 1, true) }
      end)
      local orch = env:orchestration("CallsFree", function(ctx)
        return assert(ctx:schedule_activity(act):await())
      end)
      local st = env:run(orch)
      assert.are.equal("Completed", st.status, st.error and st.error.message)
      assert.is_true(st.output.ok)
    end)
  end

  it("gives activities real values from os.time, math.random and os.getenv", function()
    local act = env:activity("Real", function()
      return { t = os.time(), r = math.random(5, 5), home = os.getenv("PATH") ~= nil }
    end)
    local orch = env:orchestration("RealOrch", function(ctx)
      return assert(ctx:schedule_activity(act):await())
    end)
    local st = env:run(orch)
    assert.are.equal("Completed", st.status)
    assert.are.equal("integer", math.type(st.output.t))
    assert.are.equal(5, st.output.r)
    assert.is_true(st.output.home)
  end)

  it("allows os.date with an explicit time in orchestrations", function()
    local orch = env:orchestration("Dates", function(ctx)
      return os.date("!%Y-%m-%d", 0)
    end)
    local st = env:run(orch)
    assert.are.equal("Completed", st.status, st.error and st.error.message)
    assert.are.equal("1970-01-01", st.output)
  end)

  it("leaves os.time usable outside orchestrations", function()
    assert.are.equal("integer", math.type(os.time()))
    assert.is_number(math.random())
  end)

  describe("instruction budget", function()
    it("fails an orchestration stuck in an infinite loop, and others still complete", function()
      local looping = env:orchestration("Loop", function(ctx)
        while true do end
      end)
      local st = env:run(looping)
      assert.are.equal("Failed", st.status)
      assert.matches("instruction budget exceeded", st.error.message, 1, true)
      local ok = env:orchestration("AfterLoop", function(ctx, v) return v end)
      local st2 = env:run(ok, "fine")
      assert.are.equal("Completed", st2.status)
      assert.are.equal("fine", st2.output)
    end)

    it("cannot be swallowed by pcall in a loop", function()
      local looping = env:orchestration("PcallForever", function(ctx)
        while true do pcall(function() while true do end end) end
      end)
      local st = env:run(looping)
      assert.are.equal("Failed", st.status)
      assert.matches("instruction budget exceeded", st.error.message, 1, true)
    end)

    it("cannot be swallowed by pcall", function()
      local looping = env:orchestration("PcallLoop", function(ctx)
        local ok = pcall(function() while true do end end)
        -- even the code after the pcall is charged again
        return { swallowed = not ok }
      end)
      local st = env:run(looping)
      assert.are.equal("Failed", st.status)
      assert.matches("instruction budget exceeded", st.error.message, 1, true)
    end)

    it("also stops an infinite loop inside a coroutine the orchestration created", function()
      local looping = env:orchestration("CoroutineLoop", function(ctx)
        coroutine.wrap(function() while true do end end)()
      end)
      local st = env:run(looping)
      assert.are.equal("Failed", st.status)
      assert.matches("instruction budget exceeded", st.error.message, 1, true)
    end)

    it("is counted per turn: a long orchestration with many turns completes", function()
      local step = env:activity("Step", function(actx, i) return i end)
      local orch = env:orchestration("ManyTurns", function(ctx)
        local sum = 0
        for i = 1, 5 do
          for _ = 1, 20000 do sum = sum + 1 end -- well under the budget each turn
          sum = sum + assert(ctx:schedule_activity(step, i):await())
        end
        return sum
      end)
      local st = env:run(orch)
      assert.are.equal("Completed", st.status, st.error and st.error.message)
      assert.are.equal(100015, st.output)
    end)
  end)

  describe("a ctx kept after its turn", function()
    it("raises a clear error when used from an activity", function()
      local kept
      local use_ctx = env:activity("UseCtx", function()
        local ok, err = pcall(function() return kept:schedule_timer(10) end)
        local ok2, err2 = pcall(function() return kept:is_replaying() end)
        return { ok = ok, err = tostring(err), ok2 = ok2, err2 = tostring(err2) }
      end)
      local orch = env:orchestration("KeepCtx", function(ctx)
        kept = ctx
        return assert(ctx:schedule_activity(use_ctx):await())
      end)
      local st = env:run(orch)
      assert.are.equal("Completed", st.status, st.error and st.error.message)
      assert.is_false(st.output.ok)
      assert.matches("this ctx belongs to a finished orchestration turn", st.output.err, 1, true)
      assert.is_false(st.output.ok2)
      assert.matches("finished orchestration turn", st.output.err2, 1, true)
    end)

    it("raises a clear error when used from the test after completion", function()
      local kept
      local orch = env:orchestration("KeepCtx2", function(ctx)
        kept = ctx
        return "done"
      end)
      local st = env:run(orch)
      assert.are.equal("Completed", st.status)
      assert.has_error(function() kept:new_guid() end)
      local ok, err = pcall(kept.set_custom_status, kept, "x")
      assert.is_false(ok)
      assert.matches("finished orchestration turn", err, 1, true)
      assert.are.equal("string", type(kept.instance_id))
    end)
  end)
end)
