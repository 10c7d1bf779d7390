-- Activity tags, version policies and pinned versions, future:cancel() (issue 11 items 3, 4,
-- 6): routing between simulated workers, the errors bad options get, and what replay checks.
local duroxide = require("duroxide")
local testing = require("duroxide.testing")

local function types_of(history)
  local out = {}
  for _, e in ipairs(history) do out[#out + 1] = e.type end
  return out
end

local function count(history, type_)
  local n = 0
  for _, e in ipairs(history) do
    if e.type == type_ then n = n + 1 end
  end
  return n
end

describe("activity tags", function()
  local env
  before_each(function()
    env = testing.env()
    env:register_activity("Work", function(actx, input)
      return { input = input, tag = actx.tag, worker = actx.worker_id }
    end)
  end)
  after_each(function() env:close() end)

  it("runs a tagged activity only on a worker that takes the tag; untagged work stays default",
     function()
    env:register_orchestration("Mixed", function(ctx)
      local gpu = ctx:schedule_activity("Work", 1, { tag = "gpu" })
      local plain = ctx:schedule_activity("Work", 2)
      local named_default = ctx:schedule_activity("Work", 3, { tag = "default" })
      local values = ctx:join({ gpu, plain, named_default })
      return values
    end)
    local id = env:start("m1", "Mixed")
    env:run_until_idle()
    -- w1 takes only untagged work: the gpu activity waits for a gpu worker
    assert.are.equal("Running", env:status(id).status)
    assert.are.equal(2, #env:calls("Work"))
    env:add_worker("gpu1", { tags = { "gpu" } })
    local st = env:run_until_complete(id)
    assert.are.equal("Completed", st.status)
    assert.are.same({ { input = 1, tag = "gpu", worker = "gpu1" },
                      { input = 2, worker = "w1" }, { input = 3, worker = "w1" } }, st.output)
    local sched = {}
    for _, e in ipairs(env:history(id)) do
      if e.type == "ActivityScheduled" then sched[#sched + 1] = e.tag or "-" end
    end
    assert.are.same({ "gpu", "-", "-" }, sched)
  end)

  it("a worker with tags and default takes both", function()
    env:shutdown_worker("w1")
    env:add_worker("both", { tags = "gpu,default" })
    env:register_orchestration("Two", function(ctx)
      return ctx:join({ ctx:schedule_activity("Work", 1, { tag = "gpu" }),
                        ctx:schedule_activity("Work", 2) })
    end)
    local st = env:run_until_complete(env:start(nil, "Two"))
    assert.are.equal("Completed", st.status)
    assert.are.equal("both", st.output[1].worker)
    assert.are.equal("both", st.output[2].worker)
  end)

  it("keeps the tag on every retry attempt and on session activities", function()
    local attempts = 0
    env:register_activity("Flaky", function(actx)
      attempts = attempts + 1
      if attempts < 2 then error("not yet") end
      return actx.tag .. "/" .. tostring(actx.session_id)
    end)
    env:add_worker("gpu1", { tags = { "gpu" } })
    env:register_orchestration("Retry", function(ctx)
      local a = assert(ctx:schedule_activity_with_retry("Flaky", nil,
        { max_attempts = 3, backoff = "none" }, { tag = "gpu" }):await())
      local b = assert(ctx:schedule_activity_with_retry("Flaky", nil,
        { max_attempts = 3, backoff = "none" }, "s1", { tag = "gpu" }):await())
      local c = assert(ctx:schedule_activity_on_session("Work", 7, "s1", { tag = "gpu" }):await())
      local d = assert(ctx:schedule_activity("Work", 8, { session_id = "s1", tag = "gpu" }):await())
      return { a, b, c.tag, c.worker, d.tag }
    end)
    local st = env:run_until_complete(env:start(nil, "Retry"))
    assert.are.equal("Completed", st.status)
    assert.are.same({ "gpu/nil", "gpu/s1", "gpu", "gpu1", "gpu" }, st.output)
    assert.are.equal("s1", env:calls("Work")[2].session_id) -- { session_id = } is a session
    for _, call in ipairs(env:calls("Flaky")) do assert.are.equal("gpu1", call.worker_id) end
  end)

  it("fails the orchestration at the call for a bad tag or an unknown option", function()
    local cases = {
      { { tag = "" }, "activity tag must be a non-empty string, got an empty string" },
      { { tag = 5 }, "activity tag must be a non-empty string, got number" },
      { { tag = string.rep("t", 257) }, "activity tag is 257 bytes; the limit is 256 bytes" },
      { { tga = "gpu" }, "unknown activity option 'tga'" },
      { "gpu", "activity options must be a table, got string" },
    }
    for i, case in ipairs(cases) do
      local name = "BadTag" .. i
      env:register_orchestration(name, function(ctx)
        return ctx:schedule_activity("Work", 1, case[1]):await()
      end)
      local st = env:run_until_complete(env:start(nil, name))
      assert.are.equal("Failed", st.status)
      assert.matches(case[2], st.error.message, 1, true)
    end
    assert.are.equal(0, #env:calls("Work")) -- nothing was scheduled
  end)

  it("refuses bad worker tags when the worker is configured", function()
    local cases = {
      { {}, "an empty list" },
      { { "a", "b", "c", "d", "e", "f" }, "at most 5 tags" },
      { { "a,b" }, "contains a comma" },
      { { 1 }, "element 1 is a number" },
      { "gpu,,io", "an empty tag" },
      { { string.rep("t", 257) }, "longer than 256 bytes" },
      { true, "expected a list of tag names, got boolean" },
    }
    for _, case in ipairs(cases) do
      local ok, err = pcall(duroxide.configure, { tags = case[1] })
      assert.is_false(ok)
      assert.matches(case[2], tostring(err), 1, true)
    end
  end)

  it("changing an activity's tag is nondeterministic", function()
    env:register_orchestration("Tagged", function(ctx)
      return ctx:schedule_activity("Work", 1, { tag = "gpu" }):await()
    end)
    env:add_worker("gpu1", { tags = { "gpu" } })
    local id = env:start(nil, "Tagged")
    assert.are.equal("Completed", env:run_until_complete(id).status)
    local ok, err = testing.check_replay(env:history(id), function(d)
      d.orchestration("Tagged", function(ctx)
        return ctx:schedule_activity("Work", 1, { tag = "cpu" }):await()
      end)
    end)
    assert.is_false(ok)
    assert.matches("had tag 'gpu' in history but the code now schedules it with tag 'cpu'", err,
                   1, true)
    assert.is_true((testing.check_replay(env:history(id), function(d)
      d.orchestration("Tagged", function(ctx)
        return ctx:schedule_activity("Work", 1, { tag = "gpu" }):await()
      end)
    end)))
  end)
end)

describe("versions", function()
  local env
  before_each(function() env = testing.env() end)
  after_each(function() env:close() end)

  local function two_versions(name)
    env:register_orchestration(name, function() return "v1" end, { version = "1.0.0" })
    env:register_orchestration(name, function() return "v2" end, { version = "2.0.0" })
  end

  it("version_policy picks the version a start without one runs", function()
    two_versions("Pol")
    assert.are.equal("v2", env:run_until_complete(env:start(nil, "Pol")).output) -- latest
    duroxide.version_policy("Pol", "exact:1.0.0")
    assert.are.equal("v1", env:run_until_complete(env:start(nil, "Pol")).output)
    assert.are.equal("v2", env:run_until_complete(env:start(nil, "Pol", nil, "2.0.0")).output)
    duroxide.version_policy("Pol", "latest")
    assert.are.equal("v2", env:run_until_complete(env:start(nil, "Pol")).output)
  end)

  it("version_policy refuses bad policies, naming them", function()
    two_versions("Pol2")
    local cases = {
      { "Nope", "latest", "orchestration 'Nope' is not registered" },
      { "Pol2", "exact:3.0.0", "has no version 3.0.0 registered" },
      { "Pol2", "exact:1.0", "policy must be \"latest\" or \"exact:X.Y.Z\", got 'exact:1.0'" },
      { "Pol2", "newest", "got 'newest'" },
    }
    for _, case in ipairs(cases) do
      local ok, err = pcall(duroxide.version_policy, case[1], case[2])
      assert.is_false(ok)
      assert.matches(case[3], tostring(err), 1, true)
    end
    assert.are.equal("v2", env:run_until_complete(env:start(nil, "Pol2")).output) -- unchanged
  end)

  it("pins a sub-orchestration's version and id; continue_as_new can upgrade", function()
    two_versions("Kid")
    env:register_orchestration("Parent", function(ctx)
      local a = assert(ctx:schedule_sub_orchestration("Kid", nil,
        { version = "1.0.0", instance_id = "kid-1" }):await())
      local b = assert(ctx:schedule_sub_orchestration("Kid", nil):await())
      return a .. "," .. b
    end)
    local st = env:run_until_complete(env:start("p", "Parent"))
    assert.are.equal("v1,v2", st.output)
    assert.are.equal("Completed", env:status("kid-1").status)
    env:register_orchestration("Loop", function(ctx, n)
      if n == 0 then return ctx:continue_as_new(1, { version = "2.0.0" }) end
      return "ran 2.0.0 with " .. n
    end, { version = "1.0.0" })
    env:register_orchestration("Loop", function(ctx, n) return "v2 got " .. n end,
                               { version = "2.0.0" })
    assert.are.equal("v2 got 1",
                     env:run_until_complete(env:start(nil, "Loop", 0, "1.0.0")).output)
  end)

  it("refuses bad version options at the call", function()
    local cases = {
      { function(ctx) return ctx:schedule_sub_orchestration("K", nil, { version = "2" }) end,
        "version must look like \"1.2.3\", got '2'" },
      { function(ctx) return ctx:schedule_sub_orchestration("K", nil, { versoin = "1.0.0" }) end,
        "unknown sub-orchestration option 'versoin'" },
      { function(ctx) return ctx:continue_as_new(1, { version = 2 }) end,
        "version must look like \"1.2.3\", got number" },
      { function(ctx) return ctx:continue_as_new(1, { v = "1.0.0" }) end,
        "unknown continue_as_new option 'v'" },
    }
    for i, case in ipairs(cases) do
      env:register_orchestration("BadV" .. i, case[1])
      local st = env:run_until_complete(env:start(nil, "BadV" .. i))
      assert.are.equal("Failed", st.status)
      assert.matches(case[2], st.error.message, 1, true)
    end
  end)

  it("changing a pinned child version is nondeterministic", function()
    two_versions("Kid2")
    env:register_orchestration("P2", function(ctx)
      return ctx:schedule_sub_orchestration("Kid2", nil, { version = "1.0.0" }):await()
    end)
    local id = env:start(nil, "P2")
    assert.are.equal("Completed", env:run_until_complete(id).status)
    local ok, err = testing.check_replay(env:history(id), function(d)
      d.orchestration("P2", function(ctx)
        return ctx:schedule_sub_orchestration("Kid2", nil, { version = "2.0.0" }):await()
      end)
    end)
    assert.is_false(ok)
    assert.matches("asked for version 1.0.0 in history but the code now asks for version 2.0.0",
                   err, 1, true)
  end)
end)

describe("future:cancel()", function()
  local env
  before_each(function() env = testing.env() end)
  after_each(function() env:close() end)

  it("withdraws a running activity: its worker sees is_cancelled()", function()
    local seen
    env:close()
    -- the worker learns of the withdrawal when it next renews the activity's lock
    env = testing.env({ options = { worker_lock_timeout = "1s" } })
    env:register_activity("Long", function(actx)
      while not actx:is_cancelled() do actx:sleep(20) end
      seen = "cancelled"
      return "stopped"
    end)
    env:register_orchestration("CancelAct", function(ctx)
      local f = ctx:schedule_activity("Long")
      ctx:schedule_timer(100):await()
      local first = f:cancel()
      local again = f:cancel()
      local v, err = f:await()
      ctx:schedule_wait("done"):await()
      return { first = first, again = again, v_nil = v == nil, kind = err.kind,
               msg = err.message, ready = f:is_ready() }
    end)
    local id = env:start(nil, "CancelAct")
    env:run_until_idle()
    env:advance(100)
    for _ = 1, 200 do -- the lock renewal (on the wall clock) fails: the row was withdrawn
      if seen then break end
      env:advance(50)
    end
    assert.are.equal("cancelled", seen)
    env:raise_event(id, "done")
    local st = env:run_until_complete(id)
    assert.are.same({ first = true, again = true, v_nil = true, kind = "Cancelled",
                      ready = true, msg = "cancelled: the orchestration cancelled this future" },
                    st.output)
    local h = env:history(id)
    assert.are.equal(1, count(h, "ActivityCancelRequested"))
  end)

  it("cancels a timer, a wait and a sub-orchestration; completed futures keep their value",
     function()
    env:register_orchestration("Child", function(ctx) return ctx:schedule_wait("never"):await() end)
    env:register_activity("Quick", function() return "q" end)
    env:register_orchestration("CancelAll", function(ctx)
      local t = ctx:schedule_timer(60 * 60 * 1000)
      local w = ctx:schedule_wait("go")
      local kid = ctx:schedule_sub_orchestration("Child", nil, { instance_id = "child-1" })
      local q = ctx:schedule_activity("Quick")
      local qv = q:await()
      ctx:schedule_timer(10):await() -- the child has started by now
      local r = { t:cancel(), w:cancel(), kid:cancel(), q:cancel() }
      local _, terr = t:await()
      local _, werr = w:await()
      local _, kerr = kid:await()
      local idx, _, serr = ctx:select({ ctx:schedule_timer(5000), w })
      local w2 = ctx:schedule_wait("go") -- a fresh wait gets the event
      return { r = r, q = q:await(), qv = qv, t = terr.kind, w = werr.kind, k = kerr.kind,
               sel = idx, sel_err = serr.kind, go = w2:await() }
    end)
    local id = env:start(nil, "CancelAll")
    env:run_until_idle()
    env:advance(10)
    env:raise_event(id, "go", "yes")
    local st = env:run_until_complete(id)
    assert.are.equal("Completed", st.status)
    assert.are.same({ r = { true, true, true, false }, q = "q", qv = "q", t = "Cancelled",
                      w = "Cancelled", k = "Cancelled", sel = 2, sel_err = "Cancelled",
                      go = "yes" }, st.output)
    local h = env:history(id)
    assert.are.equal(1, count(h, "SubOrchestrationCancelRequested"))
    assert.are.equal(1, count(h, "ExternalSubscribedCancelled"))
    -- only the 10 ms timer fired: a cancelled timer (and the select's loser) is never enqueued
    assert.are.equal(1, count(h, "TimerFired"))
    env:run_until_idle()
    local child = env:status("child-1")
    assert.are.equal("Failed", child.status)
    assert.matches("parent dropped sub-orchestration future", child.error.message, 1, true)
  end)

  it("replays a cancel deterministically", function()
    env:register_orchestration("Twice", function(ctx)
      local w = ctx:schedule_wait("x")
      w:cancel()
      ctx:schedule_timer(10):await()
      return { ready = w:is_ready() }
    end)
    local id = env:start(nil, "Twice")
    env:run_until_idle()
    env:advance(10)
    assert.are.equal("Completed", env:run_until_complete(id).status)
    assert.is_true((testing.check_replay(env:history(id))))
    assert.are.same({ "OrchestrationStarted", "ExternalSubscribed", "ExternalSubscribedCancelled",
                      "TimerCreated", "TimerFired", "OrchestrationCompleted" },
                    types_of(env:history(id)))
  end)

  -- code of the instance "Waiter" that cancels its wait for "x" (or not) after a timer
  local function waiter(cancel)
    return function(d)
      d.orchestration("Waiter", function(ctx)
        local w = ctx:schedule_wait("x")
        ctx:schedule_timer(10):await()
        if cancel then w:cancel() end
        return ctx:schedule_wait("go"):await()
      end)
    end
  end

  -- run Waiter (cancelling or not) up to its wait for "go"; its history, not terminal
  local function waiting_history(cancel)
    waiter(cancel)({ orchestration = function(name, fn) env:register_orchestration(name, fn) end })
    local id = env:start(nil, "Waiter")
    env:run_until_idle()
    env:advance(10)
    env:run_until_idle()
    assert.are.equal("Running", env:status(id).status)
    return env:history(id)
  end

  it("a cancel the code no longer makes is nondeterminism naming the future", function()
    local h = waiting_history(true)
    assert.are.equal(1, count(h, "ExternalSubscribedCancelled"))
    assert.is_true((testing.check_replay(h, waiter(true))))
    local ok, err = testing.check_replay(h, waiter(false))
    assert.is_false(ok)
    assert.matches("nondeterministic: event wait x at event 2 was cancelled in history but the " ..
                   "code no longer cancels it", err, 1, true)
  end)

  it("a cancel the code newly makes on replay is nondeterminism naming the future", function()
    local h = waiting_history(false)
    assert.are.equal(0, count(h, "ExternalSubscribedCancelled"))
    assert.is_true((testing.check_replay(h, waiter(false))))
    local ok, err = testing.check_replay(h, waiter(true))
    assert.is_false(ok)
    assert.matches("nondeterministic: event wait x at event 2 was not cancelled in history but " ..
                   "the code now cancels it", err, 1, true)
  end)
end)
