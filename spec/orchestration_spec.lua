-- Orchestration context (ctx): activities, errors, join/select, timers, events,
-- sub-orchestrations, continue-as-new, deterministic helpers, custom status, retries.
local duroxide = require("duroxide")
local H = require("helpers")

local function count(history, type_) return #H.events_of(history, type_) end

describe("ctx", function()
  local env
  before_each(function() env = H.env() end)
  after_each(function() env:close() end)

  describe("schedule_activity", function()
    it("returns the activity output", function()
      local greet = env:activity("Greet", function(actx, name) return "Hello, " .. name .. "!" end)
      local orch = env:orchestration("Hello", function(ctx, name)
        local greeting, err = ctx:schedule_activity(greet, name):await()
        if not greeting then error(err) end
        return greeting
      end)
      local st = env:run(orch, "Lua")
      assert.are.equal("Completed", st.status)
      assert.are.equal("Hello, Lua!", st.output)
      local h = env.client:history(st.instance_id)
      assert.are.equal(1, count(h, "ActivityScheduled"))
      assert.are.equal(1, count(h, "ActivityCompleted"))
    end)

    it("returns nil, err when the activity raises a string", function()
      local boom = env:activity("Boom", function() error("boom: disk full", 0) end)
      local orch = env:orchestration("Catch", function(ctx)
        local v, err = ctx:schedule_activity(boom):await()
        return { got_nil = v == nil, message = err.message, category = err.category,
                 text = tostring(err) }
      end)
      local st = env:run(orch)
      assert.are.equal("Completed", st.status)
      assert.are.same({ got_nil = true, message = "boom: disk full", category = "application",
                        text = "boom: disk full" }, st.output)
    end)

    it("uses the message of a table raised by the activity", function()
      local boom = env:activity("BoomTable", function() error({ message = "quota exceeded", code = 7 }) end)
      local orch = env:orchestration("CatchTable", function(ctx)
        local _, err = ctx:schedule_activity(boom):await()
        return { message = err.message, category = err.category }
      end)
      local st = env:run(orch)
      assert.are.same({ message = "quota exceeded", category = "application" }, st.output)
    end)

    it("re-raises the error through assert(f:await())", function()
      local boom = env:activity("Boom", function() error("payment declined", 0) end)
      local orch = env:orchestration("AssertAwait", function(ctx)
        return assert(ctx:schedule_activity(boom, 1):await())
      end)
      local st = env:run(orch)
      assert.are.equal("Failed", st.status)
      assert.are.equal("application", st.error.category)
      assert.matches("payment declined", st.error.message, 1, true)
    end)

    it("fails the orchestration with error(err) carrying the activity's message", function()
      local boom = env:activity("Boom", function() error("no such customer", 0) end)
      local orch = env:orchestration("Rethrow", function(ctx)
        local v, err = ctx:schedule_activity(boom):await()
        if not v then error(err) end
      end)
      local st = env:run(orch)
      assert.are.equal("Failed", st.status)
      assert.are.equal("no such customer", st.error.message)
    end)
  end)

  describe("join", function()
    it("returns values in argument order and nil errors when all succeed", function()
      local log = {}
      local slow = env:activity("Slow", function(actx, v)
        actx:sleep(30)
        log[#log + 1] = v
        return v
      end)
      local fast = env:activity("Fast", function(actx, v)
        log[#log + 1] = v
        return v
      end)
      local orch = env:orchestration("JoinAll", function(ctx)
        local values, errors = ctx:join({ ctx:schedule_activity(slow, "first"),
                                          ctx:schedule_activity(fast, "second"),
                                          ctx:schedule_activity(fast, 3) })
        return { values = values, errors_nil = errors == nil }
      end)
      local st = env:run(orch)
      assert.are.equal("Completed", st.status)
      assert.are.same({ values = { "first", "second", 3 }, errors_nil = true }, st.output)
      -- the slow one finished last, yet its value is first
      assert.are.equal("first", log[3])
    end)

    it("puts failures at their positions in the errors array", function()
      local ok = env:activity("Ok", function(actx, v) return v end)
      local bad = env:activity("Bad", function(actx, v) error("bad " .. v, 0) end)
      local orch = env:orchestration("JoinSome", function(ctx)
        local values, errors = ctx:join({ ctx:schedule_activity(ok, "a"),
                                          ctx:schedule_activity(bad, "b"),
                                          ctx:schedule_activity(ok, "c"),
                                          ctx:schedule_activity(bad, "d") })
        return {
          v1 = values[1], v2_nil = values[2] == nil, v3 = values[3], v4_nil = values[4] == nil,
          e1_nil = errors[1] == nil, e2 = errors[2].message, e3_nil = errors[3] == nil,
          e4 = errors[4].message, e4_category = errors[4].category,
        }
      end)
      local st = env:run(orch)
      assert.are.equal("Completed", st.status)
      assert.are.same({ v1 = "a", v2_nil = true, v3 = "c", v4_nil = true, e1_nil = true,
                        e2 = "bad b", e3_nil = true, e4 = "bad d", e4_category = "application" },
                      st.output)
    end)
  end)

  -- A wait tells the engine which futures it waits for (orch.c park_from_yield): the code is
  -- not resumed by completions that leave one of them pending. What the code sees is the same.
  describe("waits parked on their futures", function()
    it("join still returns a cancelled future's error, a retry future's value and a timer",
       function()
      local calls = 0
      local ok = env:activity("PJOk", function(actx, v) return v end)
      local flaky = env:activity("PJFlaky", function(actx, v)
        calls = calls + 1
        if calls < 2 then error("flaky " .. calls, 0) end
        return v
      end)
      local orch = env:orchestration("ParkedJoin", function(ctx)
        local gone = ctx:schedule_activity(ok, "gone")
        local withdrawn = gone:cancel()
        local values, errors = ctx:join({
          ctx:schedule_activity(ok, "a"), gone,
          ctx:schedule_activity_with_retry(flaky, "r", { max_attempts = 3, backoff = "fixed",
                                                         initial_ms = 10 }),
          ctx:schedule_timer(20), ctx:schedule_activity(ok, "z") })
        return { withdrawn = withdrawn, v1 = values[1], e2 = errors[2].kind, v3 = values[3],
                 e3_nil = errors[3] == nil, v5 = values[5] }
      end)
      local st = env:run(orch)
      assert.are.equal("Completed", st.status, st.error and st.error.message)
      assert.are.same({ withdrawn = true, v1 = "a", e2 = "Cancelled", v3 = "r", e3_nil = true,
                        v5 = "z" }, st.output)
    end)

    it("an await on an event is resumed by the event, not by activities done before it",
       function()
      local ok = env:activity("PWOk", function(actx, v) return v end)
      local orch = env:orchestration("ParkedWait", function(ctx)
        local w = ctx:schedule_wait("go")
        local fs = { ctx:schedule_activity(ok, 1), ctx:schedule_activity(ok, 2) }
        local ev = w:await()
        local replaying = ctx:is_replaying()
        local values = ctx:join(fs)
        return { ev = ev, replaying = replaying, values = values }
      end)
      local id = env:start(orch)
      -- both activities complete before the event is raised
      env:run_until(function()
        return #H.events_of(env.client:history(id), "ActivityCompleted") == 2
      end, 10000, "both activities")
      assert.is_true(env.client:raise_event(id, "go", "now"))
      local st = env:wait(id)
      assert.are.equal("Completed", st.status, st.error and st.error.message)
      assert.are.same({ ev = "now", replaying = false, values = { 1, 2 } }, st.output)
    end)
  end)

  describe("select", function()
    it("returns the first to complete and cancels the losing activity", function()
      local state = {}
      local long = env:activity("Long", function(actx)
        state.long_started = true
        for _ = 1, 500 do -- up to ~5s, but stops as soon as it is withdrawn
          if actx:is_cancelled() then
            state.long_cancelled = true
            return "cancelled"
          end
          actx:sleep(10)
        end
        state.long_finished = true
        return "long"
      end)
      local short = env:activity("Short", function(actx)
        actx:sleep(20)
        return "short"
      end)
      local orch = env:orchestration("Race", function(ctx)
        local idx, value, err = ctx:select({ ctx:schedule_activity(long),
                                             ctx:schedule_activity(short) })
        return { idx = idx, value = value, err_nil = err == nil }
      end)
      local st = env:run(orch)
      assert.are.equal("Completed", st.status)
      assert.are.same({ idx = 2, value = "short", err_nil = true }, st.output)
      -- the orchestration did not wait for the long activity
      assert.is_true(state.long_started)
      assert.is_nil(state.long_finished)
      -- and the loser is withdrawn: the running activity sees is_cancelled()
      env:run_until(function() return state.long_cancelled end, 5000, "loser cancellation")
      assert.is_nil(state.long_finished)
      assert.are.equal(1, count(env.client:history(st.instance_id), "ActivityCancelRequested"))
    end)

    it("lets a timer win over a wait that never arrives", function()
      local orch = env:orchestration("TimerWins", function(ctx)
        local idx, value = ctx:select({ ctx:schedule_timer(50), ctx:schedule_wait("never") })
        return { idx = idx, value_nil = value == nil }
      end)
      local st = env:run(orch)
      assert.are.equal("Completed", st.status)
      assert.are.same({ idx = 1, value_nil = true }, st.output)
    end)

    it("lets an event win over a long timer", function()
      local orch = env:orchestration("EventWins", function(ctx)
        local idx, value = ctx:select({ ctx:schedule_timer(60 * 60 * 1000),
                                        ctx:schedule_wait("approve") })
        return { idx = idx, value = value }
      end)
      local id = env:start(orch)
      env:await_event(id, "ExternalSubscribed")
      assert.is_true(env.client:raise_event(id, "approve", { by = "ann" }))
      local st = env:wait(id)
      assert.are.equal("Completed", st.status)
      assert.are.same({ idx = 2, value = { by = "ann" } }, st.output)
    end)

    it("treats a math.maxinteger timer as never (its deadline saturates, no wrap-around)", function()
      local orch = env:orchestration("NeverTimer", function(ctx)
        local idx = ctx:select({ ctx:schedule_timer(math.maxinteger),
                                 ctx:schedule_wait("approve") })
        return idx
      end)
      local id = env:start(orch)
      env:await_event(id, "ExternalSubscribed")
      local created
      for _, e in ipairs(env.client:history(id)) do
        if e.type == "TimerCreated" then created = e end
      end
      assert.are.equal(math.maxinteger, created.fire_at_ms)
      assert.are.equal("Running", env.client:status(id).status)
      assert.is_true(env.client:raise_event(id, "approve", true))
      assert.are.equal(2, env:wait(id).output)
    end)

    it("reports the error of a failed winner", function()
      local bad = env:activity("Bad", function() error("first and failed", 0) end)
      local orch = env:orchestration("FailedWinner", function(ctx)
        local idx, value, err = ctx:select({ ctx:schedule_timer(60 * 60 * 1000),
                                             ctx:schedule_activity(bad) })
        return { idx = idx, value_nil = value == nil, message = err.message }
      end)
      local st = env:run(orch)
      assert.are.same({ idx = 2, value_nil = true, message = "first and failed" }, st.output)
    end)
  end)

  describe("schedule_timer", function()
    it("completes a 50ms timer with nil", function()
      local orch = env:orchestration("Timer", function(ctx)
        local v, err = ctx:schedule_timer(50):await()
        return { v_nil = v == nil, err_nil = err == nil }
      end)
      local st = env:run(orch)
      assert.are.equal("Completed", st.status)
      assert.are.same({ v_nil = true, err_nil = true }, st.output)
      local h = env.client:history(st.instance_id)
      assert.are.equal(1, count(h, "TimerCreated"))
      assert.are.equal(1, count(h, "TimerFired"))
    end)

    it("rejects a negative duration", function()
      local orch = env:orchestration("BadTimer", function(ctx) ctx:schedule_timer(-1) end)
      local st = env:run(orch)
      assert.are.equal("Failed", st.status)
      assert.matches("non-negative number of milliseconds", st.error.message, 1, true)
    end)
  end)

  describe("schedule_wait", function()
    it("delivers the raised event's data", function()
      local orch = env:orchestration("Approval", function(ctx, order)
        local decision = ctx:schedule_wait("approved"):await()
        return { order = order, decision = decision }
      end)
      local id = env:start(orch, "order-42")
      env:await_event(id, "ExternalSubscribed")
      assert.are.equal("Running", env.client:status(id).status)
      assert.is_true(env.client:raise_event(id, "approved", { by = "ann", amount = 12.5, n = 3 }))
      local st = env:wait(id)
      assert.are.equal("Completed", st.status)
      assert.are.same({ order = "order-42", decision = { by = "ann", amount = 12.5, n = 3 } }, st.output)
      assert.are.equal("float", math.type(st.output.decision.amount))
      assert.are.equal(1, count(env.client:history(id), "ExternalEvent"))
    end)
  end)

  describe("sub-orchestrations", function()
    it("returns the child's output", function()
      local child = env:orchestration("Child", function(ctx, n) return { doubled = n * 2, parent_ok = true } end)
      local parent = env:orchestration("Parent", function(ctx, n)
        local out, err = ctx:schedule_sub_orchestration(child, n):await()
        if err then error(err) end
        return out
      end)
      local st, id = env:run(parent, 21)
      assert.are.equal("Completed", st.status)
      assert.are.same({ doubled = 42, parent_ok = true }, st.output)
      local h = env.client:history(id)
      assert.are.equal(1, count(h, "SubOrchestrationScheduled"))
      assert.are.equal(1, count(h, "SubOrchestrationCompleted"))
    end)

    it("returns nil, err when the child fails", function()
      local child = env:orchestration("BadChild", function() error("child broke", 0) end)
      local parent = env:orchestration("Parent", function(ctx)
        local out, err = ctx:schedule_sub_orchestration(child, "x"):await()
        return { out_nil = out == nil, message = err.message, category = err.category }
      end)
      local st = env:run(parent)
      assert.are.equal("Completed", st.status)
      assert.is_true(st.output.out_nil)
      assert.matches("child broke", st.output.message, 1, true)
      assert.are.equal("application", st.output.category)
    end)

    it("runs the child under an explicit instance id", function()
      local child_id = H.unique("child")
      local child = env:orchestration("Child", function(ctx, v)
        return { me = ctx.instance_id, v = v }
      end)
      local parent = env:orchestration("Parent", function(ctx)
        return assert(ctx:schedule_sub_orchestration(child, "hi", child_id):await())
      end)
      local st = env:run(parent)
      assert.are.equal("Completed", st.status)
      assert.are.same({ me = child_id, v = "hi" }, st.output)
      local cst = env.client:status(child_id)
      assert.are.equal("Completed", cst.status)
      assert.are.same({ me = child_id, v = "hi" }, cst.output)
    end)
  end)

  describe("start_orchestration", function()
    it("starts another instance fire-and-forget", function()
      local other_id = H.unique("detached")
      local other = env:orchestration("Other", function(ctx, v)
        ctx:schedule_timer(20):await()
        return "other got " .. v
      end)
      local starter = env:orchestration("Starter", function(ctx)
        local r = ctx:start_orchestration(other, other_id, "ping")
        return { returned_nil = r == nil }
      end)
      local st = env:run(starter)
      assert.are.equal("Completed", st.status)
      assert.are.same({ returned_nil = true }, st.output)
      local ost = env:wait(other_id)
      assert.are.equal("Completed", ost.status)
      assert.are.equal("other got ping", ost.output)
      assert.are.equal(1, count(env.client:history(st.instance_id), "OrchestrationChained"))
    end)
  end)

  describe("continue_as_new", function()
    it("continues a counter loop three times and shows the final execution", function()
      local step = env:activity("Step", function(actx, n) return n + 1 end)
      local orch = env:orchestration("Counter", function(ctx, n)
        local next_n = assert(ctx:schedule_activity(step, n):await())
        if n < 3 then ctx:continue_as_new(next_n) end
        return { n = n, execution_id = ctx.execution_id }
      end)
      local st, id = env:run(orch, 0)
      assert.are.equal("Completed", st.status)
      assert.are.same({ n = 3, execution_id = 4 }, st.output)
      assert.are.equal(4, st.execution_id)
      local status = env.client:status(id)
      assert.are.equal(4, status.execution_id)
      assert.are.same({ n = 3, execution_id = 4 }, status.output)
      local first = env.client:history(id, 1)
      assert.are.equal(1, count(first, "OrchestrationContinuedAsNew"))
      assert.are.equal(0, first[1].data)
      local last = env.client:history(id)
      assert.are.equal(3, last[1].data)
      assert.are.equal(1, count(last, "OrchestrationCompleted"))
    end)
  end)

  describe("deterministic helpers", function()
    it("new_guid, utc_now and random return the recorded values on replay", function()
      env:close()
      env = H.env({ orchestration_cache_size = 0 }) -- every turn replays
      local captured, turns = nil, {}
      local capture = env:activity("Capture", function(actx, rec)
        captured = rec
        return true
      end)
      local step = env:activity("Step", function() return "ok" end)
      local orch = env:orchestration("Det", function(ctx)
        turns[#turns + 1] = ctx:is_replaying()
        local rec = { guid = ctx:new_guid(), now = ctx:utc_now(), rnd = ctx:random() }
        assert(ctx:schedule_activity(capture, rec):await())
        assert(ctx:schedule_activity(step):await())
        return rec
      end)
      local before = os.time() * 1000
      local st = env:run(orch)
      assert.are.equal("Completed", st.status, st.error and st.error.message)
      assert.are.same(captured, st.output)
      assert.matches("^%x+%-%x+%-%x+%-%x+%-%x+$", st.output.guid)
      assert.are.equal("integer", math.type(st.output.now))
      assert.is_true(st.output.now >= before - 1000)
      assert.is_true(st.output.rnd >= 0 and st.output.rnd < 1)
      -- the code ran again (replayed) after each activity completed
      assert.is_true(#turns >= 3)
      assert.is_false(turns[1])
    end)

    it("gives different guids within one execution", function()
      local orch = env:orchestration("Guids", function(ctx)
        return { ctx:new_guid(), ctx:new_guid() }
      end)
      local st = env:run(orch)
      assert.are_not.equal(st.output[1], st.output[2])
    end)
  end)

  describe("metadata and status", function()
    it("exposes instance_id, execution_id and is_replaying; trace does not fail", function()
      local orch = env:orchestration("Meta", function(ctx)
        ctx:trace_info("starting")
        ctx:trace_warn("a warning")
        ctx:trace_debug("debug")
        ctx:trace("info", { not_a_string = true })
        return { id = ctx.instance_id, exec = ctx.execution_id, replaying = ctx:is_replaying() }
      end)
      local id = env:start(orch, nil, "meta-instance")
      local st = env:wait(id)
      assert.are.equal("Completed", st.status, st.error and st.error.message)
      assert.are.same({ id = "meta-instance", exec = 1, replaying = false }, st.output)
    end)

    it("rejects an unknown trace level", function()
      local orch = env:orchestration("BadTrace", function(ctx) ctx:trace("loud", "x") end)
      local st = env:run(orch)
      assert.are.equal("Failed", st.status)
      assert.matches("trace level must be", st.error.message, 1, true)
    end)

    it("makes set_custom_status visible in client:status", function()
      local orch = env:orchestration("Progress", function(ctx)
        ctx:set_custom_status({ stage = "waiting", progress = 0.5 })
        local v = ctx:schedule_wait("go"):await()
        ctx:set_custom_status("done")
        return v
      end)
      local id = env:start(orch)
      env:await_event(id, "ExternalSubscribed")
      local running = env.client:status(id)
      assert.are.equal("Running", running.status)
      assert.are.same({ stage = "waiting", progress = 0.5 }, running.custom_status)
      env.client:raise_event(id, "go", 1)
      local st = env:wait(id)
      assert.are.equal("Completed", st.status)
      assert.are.equal(1, st.output)
      assert.are.equal("done", env.client:status(id).custom_status)
    end)
  end)

  describe("schedule_activity_with_retry", function()
    local function flaky_env(failures)
      local calls = { n = 0, attempts = {} }
      local flaky = env:activity("Flaky", function(actx, input)
        calls.n = calls.n + 1
        calls.input = input
        if calls.n <= failures then error("flaky failure " .. calls.n, 0) end
        return "ok after " .. calls.n
      end)
      return flaky, calls
    end

    it("succeeds after two failures with max_attempts = 3", function()
      local flaky, calls = flaky_env(2)
      local orch = env:orchestration("Retry3", function(ctx)
        local v, err = ctx:schedule_activity_with_retry(flaky, { x = 1 },
          { max_attempts = 3, backoff = "fixed", initial_ms = 10 }):await()
        return { v = v, err = err and err.message }
      end)
      local st = env:run(orch)
      assert.are.equal("Completed", st.status)
      assert.are.same({ v = "ok after 3" }, st.output)
      assert.are.equal(3, calls.n)
      assert.are.same({ x = 1 }, calls.input)
      local h = env.client:history(st.instance_id)
      assert.are.equal(3, count(h, "ActivityScheduled"))
      assert.are.equal(2, count(h, "ActivityFailed"))
      assert.are.equal(2, count(h, "TimerFired"))
    end)

    it("returns the last error when max_attempts = 2 is exhausted", function()
      local flaky, calls = flaky_env(2)
      local orch = env:orchestration("Retry2", function(ctx)
        local v, err = ctx:schedule_activity_with_retry(flaky, nil,
          { max_attempts = 2, backoff = "fixed", initial_ms = 10 }):await()
        return { v_nil = v == nil, err = err.message, category = err.category }
      end)
      local st = env:run(orch)
      assert.are.equal("Completed", st.status)
      assert.are.same({ v_nil = true, err = "flaky failure 2", category = "application" }, st.output)
      assert.are.equal(2, calls.n)
    end)

    it("fails an attempt that exceeds timeout_ms with a timed out error", function()
      local state = {}
      local stuck = env:activity("Stuck", function(actx)
        for _ = 1, 500 do
          if actx:is_cancelled() then
            state.cancelled = true
            return nil
          end
          actx:sleep(10)
        end
        return "too late"
      end)
      local orch = env:orchestration("RetryTimeout", function(ctx)
        local v, err = ctx:schedule_activity_with_retry(stuck, nil,
          { max_attempts = 3, backoff = "fixed", initial_ms = 10, timeout_ms = 50 }):await()
        return { v_nil = v == nil, err = err.message }
      end)
      local st = env:run(orch)
      assert.are.equal("Completed", st.status)
      assert.is_true(st.output.v_nil)
      assert.matches("timed out", st.output.err, 1, true)
      env:run_until(function() return state.cancelled end, 5000, "timed-out attempt cancelled")
    end)

    it("rejects an invalid policy", function()
      local orch = env:orchestration("BadPolicy", function(ctx)
        ctx:schedule_activity_with_retry("X", nil, { max_attempts = 0 })
      end)
      local st = env:run(orch)
      assert.are.equal("Failed", st.status)
      assert.matches("max_attempts must be an integer >= 1", st.error.message, 1, true)
    end)
  end)
end)
