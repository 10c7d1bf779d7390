-- duroxide.testing: the harness itself (envs, mocks, the virtual clock, simulated workers,
-- session hooks, replay checks). Fast by design: hours of virtual time pass in milliseconds.
local duroxide = require("duroxide")
local testing = require("duroxide.testing")

local HOUR = 60 * 60 * 1000

local function events_of(history, type_)
  local out = {}
  for _, e in ipairs(history) do
    if e.type == type_ then out[#out + 1] = e end
  end
  return out
end

describe("duroxide.testing, a first spec", function()
  local env
  before_each(function() env = testing.env({ app = "examples/hello.lua" }) end)
  after_each(function() env:close() end)

  it("runs the app with a mocked activity and records the call", function()
    env:mock_activity("Greet", function(actx, name) return "Hi " .. name end)
    local id = env:start("t1", "HelloWorld", "Lua")
    local st = env:run_until_complete(id)
    assert.are.equal("Completed", st.status)
    assert.are.equal("Hi Lua", st.output)
    assert.are.same({ { name = "Greet", input = "Lua", worker_id = "w1", instance_id = "t1",
                        attempt = 1 } }, env:calls("Greet"))
  end)

  it("skips a three-hour timer", function()
    env:mock_activity("Greet", function(actx, name) return "Good morning, " .. name end)
    env:register_orchestration("GreetTomorrow", function(ctx, name)
      ctx:schedule_timer(3 * HOUR):await()
      return assert(ctx:schedule_activity("Greet", name):await())
    end)
    local id = env:start(nil, "GreetTomorrow", "Ann")
    local st = env:run_until_complete(id)
    assert.are.equal("Completed", st.status)
    assert.are.equal("Good morning, Ann", st.output)
    assert.are.equal(1, #env:calls("Greet"))
    assert.are.equal("Ann", env:calls("Greet")[1].input)
    -- the timer fired in virtual time, three hours after the instance started
    local h = env:history(id)
    local fired = events_of(h, "TimerFired")[1]
    assert.is_truthy(fired)
    assert.is_true(fired.timestamp_ms - h[1].timestamp_ms >= 3 * HOUR)
  end)

  it("loads the app again for every env; mocks end with their env", function()
    env:mock_activity("Greet", function() return "mocked" end)
    env:close()
    env = testing.env({ app = "examples/hello.lua" })
    local st = env:run_until_complete(env:start(nil, "HelloWorld", "Lua"))
    assert.are.equal("Hello, Lua!", st.output)
  end)

  it("run_until_idle runs what is runnable without moving the clock; advance moves it", function()
    env:register_orchestration("Later", function(ctx, name)
      local g = assert(ctx:schedule_activity("Greet", name):await())
      ctx:schedule_timer(HOUR):await()
      return g
    end)
    local id = env:start(nil, "Later", "Bo")
    env:run_until_idle()
    assert.are.equal(1, #env:calls("Greet"))
    assert.are.equal("Running", env:status(id).status)
    env:advance(HOUR)
    assert.are.equal("Completed", env:status(id).status)
  end)

  it("reports an instance that waits for an event, then runs it once raised", function()
    env:register_orchestration("Approve", function(ctx)
      local by = ctx:schedule_wait("approved"):await()
      return "approved by " .. by.by
    end)
    local id = env:start("a1", "Approve")
    local st, err, last = env:run_until_complete(id)
    assert.is_nil(st)
    assert.are.equal("Stuck", err.kind)
    assert.are.equal("Running", last.status)
    env:raise_event(id, "approved", { by = "ann" })
    st = env:run_until_complete(id)
    assert.are.equal("approved by ann", st.output)
  end)

  it("lists every call in order without a name", function()
    env:register_activity("Shout", function(actx, s) return s:upper() end)
    env:register_orchestration("Both", function(ctx, name)
      local g = assert(ctx:schedule_activity("Greet", name):await())
      return assert(ctx:schedule_activity("Shout", g):await())
    end)
    local st = env:run_until_complete(env:start(nil, "Both", "x"))
    assert.are.equal("HELLO, X!", st.output)
    local names = {}
    for i, c in ipairs(env:calls()) do names[i] = c.name end
    assert.are.same({ "Greet", "Shout" }, names)
    assert.are.same({}, env:calls("Unknown"))
  end)
end)

describe("duroxide.testing, registrations per env", function()
  -- the worker keeps the activity function it looked up last: an env's end (its registrations
  -- restored) and its call recorders must not leave that function in use for the next env
  local function call_b(ctx, x) return ctx:schedule_activity("KeptB", x):await() end

  it("records each env's own calls of an activity registered once for all", function()
    duroxide.activity("KeptB", function(_, x) return x end)
    duroxide.orchestration("CallKeptB", call_b)
    for i = 1, 2 do
      local env = testing.env({})
      local st = env:run_until_complete(env:start(nil, "CallKeptB", "v" .. i))
      assert.are.equal("v" .. i, st.output)
      assert.are.equal(1, #env:calls("KeptB"), "env " .. i)
      env:close()
    end
  end)

  it("does not run an activity that only an earlier env registered", function()
    local env = testing.env({})
    env:register_orchestration("CallOnlyB", function(ctx, x)
      return ctx:schedule_activity("OnlyB", x):await()
    end)
    env:register_activity("OnlyB", function(_, x) return "env1:" .. x end)
    assert.are.equal("env1:v", env:run_until_complete(env:start(nil, "CallOnlyB", "v")).output)
    env:close()
    env = testing.env({})
    env:register_orchestration("CallOnlyB", function(ctx, x)
      return ctx:schedule_activity("OnlyB", x):await()
    end)
    local st = env:run_until_complete(env:start(nil, "CallOnlyB", "v"))
    env:close()
    assert.are_not.equal("env1:v", st.output)
    assert.matches("OnlyB", tostring(st.error and (st.error.message or st.error)))
  end)
end)

describe("duroxide.testing, simulated workers and sessions", function()
  local env, hooks

  -- Hook calls as "hook session how/reason worker".
  local function hook_log()
    local out = {}
    for i, h in ipairs(hooks) do out[i] = table.concat(h, " ") end
    return out
  end

  before_each(function()
    env = testing.env()
    hooks = {}
    duroxide.on_session_claimed(function(sid, how, worker)
      hooks[#hooks + 1] = { "claimed", sid, how, worker }
    end)
    duroxide.on_session_released(function(sid, reason, worker)
      hooks[#hooks + 1] = { "released", sid, reason, worker }
    end)
    env:register_activity("Turn", function(actx, n) return n * 10 end)
    -- Two turns on one session with a wait in between (the moment to crash or stop a worker).
    env:register_orchestration("Chat", function(ctx, sid)
      local a = assert(ctx:schedule_activity_on_session("Turn", 1, sid):await())
      ctx:schedule_wait("next"):await()
      local b = assert(ctx:schedule_activity_on_session("Turn", 2, sid):await())
      return a + b
    end)
    env:register_orchestration("OneTurn", function(ctx, sid)
      return assert(ctx:schedule_activity_on_session("Turn", 1, sid):await())
    end)
  end)
  after_each(function() env:close() end)

  local function workers_of(calls)
    local out = {}
    for i, c in ipairs(calls) do out[i] = c.worker_id end
    return out
  end

  it("moves a session to another worker after its owner crashes and the lease lapses", function()
    local id = env:start("chat-1", "Chat", "s1")
    env:run_until_idle()
    assert.are.same({ "claimed s1 new w1" }, hook_log())
    env:add_worker("w2")
    env:crash_worker("w1")
    env:raise_event(id, "next", true)
    local st = env:run_until_complete(id) -- w1 is seen dead at once (liveness): w2 claims
    assert.are.equal("Completed", st.status)
    assert.are.equal(30, st.output)
    assert.are.same({ "w1", "w2" }, workers_of(env:calls("Turn")))
    assert.are.same({ "s1", "s1" }, { env:calls("Turn")[1].session_id,
                                      env:calls("Turn")[2].session_id })
    -- w2 claims it; w1 never hears of it again (it crashed: no released hook)
    assert.are.same({ "claimed s1 new w1", "claimed s1 new w2" }, hook_log())
  end)

  it("lets a restarted worker reclaim its sessions at once", function()
    local id = env:start("chat-2", "Chat", "s2")
    env:run_until_idle()
    env:crash_worker("w1")
    env:restart_worker("w1")
    env:raise_event(id, "next", true)
    assert.are.equal("Completed", env:run_until_complete(id).status)
    assert.are.same({ "w1", "w1" }, workers_of(env:calls("Turn")))
    assert.are.same({ "claimed s2 new w1", "claimed s2 reclaim w1" }, hook_log())
  end)

  it("fires shutdown on a graceful stop, and the session moves on at once", function()
    local id = env:start("chat-3", "Chat", "s3")
    env:run_until_idle()
    env:add_worker("w2")
    env:shutdown_worker("w1")
    assert.are.same({ "claimed s3 new w1", "released s3 shutdown w1" }, hook_log())
    env:raise_event(id, "next", true)
    assert.are.equal("Completed", env:run_until_complete(id).status)
    assert.are.same({ "w1", "w2" }, workers_of(env:calls("Turn")))
    assert.are.equal("claimed s3 new w2", hook_log()[3])
  end)

  it("fires closed on ctx:close_session", function()
    env:register_orchestration("Close", function(ctx, sid)
      local a = assert(ctx:schedule_activity_on_session("Turn", 1, sid):await())
      ctx:close_session(sid)
      return a
    end)
    local st = env:run_until_complete(env:start(nil, "Close", "s4"))
    assert.are.equal("Completed", st.status)
    env:run_until_idle()
    assert.are.same({ "claimed s4 new w1", "released s4 closed w1" }, hook_log())
  end)

  it("ctx:close_session waits for the session's running activities before closed", function()
    local go = false
    env:register_activity("Slow", function(actx, n)
      while not go do actx:sleep(5) end -- runs until the test lets it finish
      return n
    end)
    env:register_orchestration("SlowTurn", function(ctx, sid)
      return assert(ctx:schedule_activity_on_session("Slow", 7, sid):await())
    end)
    env:register_orchestration("Close", function(ctx, sid)
      local a = assert(ctx:schedule_activity_on_session("Turn", 1, sid):await())
      ctx:close_session(sid)
      return a
    end)
    local slow = env:start("slow-7", "SlowTurn", "s7")
    local st = env:run_until_complete(env:start("close-7", "Close", "s7"))
    assert.are.equal("Completed", st.status)
    assert.are.equal("Running", env:status(slow).status)
    -- the close reached the owner, but Slow still runs there: the session stays held
    assert.are.same({ "claimed s7 new w1" }, hook_log())
    assert.are.equal("w1", env:sessions()[1].worker_id)
    go = true
    assert.are.equal(7, env:run_until_complete(slow).output)
    env:run_until_idle()
    assert.are.same({ "claimed s7 new w1", "released s7 closed w1" }, hook_log())
  end)

  it("fires idle once the session has been idle for session_idle_timeout", function()
    env:start(nil, "Chat", "s5") -- waits for "next" after its first turn: still uses s5
    env:run_until_idle()
    env:advance(4 * 60 * 1000) -- idle timeout is 5 minutes: still pinned, lease renewed
    assert.are.same({ "claimed s5 new w1" }, hook_log())
    env:advance(2 * 60 * 1000)
    assert.are.same({ "claimed s5 new w1", "released s5 idle w1" }, hook_log())
  end)

  it("expire_session makes the owner's lease lapse: the owner sees lost", function()
    local id = env:start("chat-6", "Chat", "s6")
    env:run_until_idle()
    env:add_worker("w2")
    env:expire_session("s6")
    assert.are.same({ "claimed s6 new w1", "released s6 lost w1" }, hook_log())
    env:raise_event(id, "next", true)
    assert.are.equal("Completed", env:run_until_complete(id).status)
    -- whichever worker fetched the second turn first claimed the session
    local last = hooks[3]
    assert.are.equal("claimed", last[1])
    assert.are.equal(last[4] == "w1" and "reclaim" or "new", last[3])
    assert.are.equal(last[4], env:calls("Turn")[2].worker_id)
  end)

  it("keeps a clear error for a second plain runtime in the same Lua state", function()
    local rt = duroxide.runtime({ store = env.dir, log_level = "error" })
    assert.has_error(function() rt:start() end,
      "another runtime is already running in this Lua state (stop it first; duroxide.testing " ..
      "runs several simulated workers with {shared = true})")
  end)
end)

describe("duroxide.testing.check_replay", function()
  local env
  before_each(function() env = testing.env({ app = "spec/testing_apps/flow_v1.lua" }) end)
  after_each(function() env:close() end)

  it("reports nondeterminism when the code schedules another activity", function()
    local id = env:start("o1", "Order", "book")
    assert.are.equal("Completed", env:run_until_complete(id).status)
    local ok, err = testing.check_replay(env:history(id), "spec/testing_apps/flow_changed.lua")
    assert.is_false(ok)
    assert.are.equal("nondeterministic", err:sub(1, 16))
    assert.matches("Reserve", err, 1, true)
  end)

  it("accepts a compatible change (activity implementation, an extra trace)", function()
    local id = env:start("o2", "Order", "book")
    env:run_until_complete(id)
    local ok, err, outcome = testing.check_replay(env:history(id),
                                                  "spec/testing_apps/flow_compatible.lua")
    assert.is_true(ok, err)
    assert.is_nil(err)
    assert.are.equal("Completed", outcome)
    assert.is_true((testing.check_replay(env:history(id), "spec/testing_apps/flow_v1.lua")))
  end)

  it("checks an instance still in flight, and restores the env's code afterwards", function()
    local id = env:start("o3", "Order", "pen")
    env:run_until_idle() -- the activity ran; the one-hour timer is pending
    local h = env:history(id)
    assert.are.equal("TimerCreated", h[#h].type)
    local ok, err = testing.check_replay(h, "spec/testing_apps/flow_changed.lua")
    assert.is_false(ok)
    assert.matches("^nondeterministic", err)
    local ok2, _, outcome = testing.check_replay(h, "spec/testing_apps/flow_compatible.lua")
    assert.is_true(ok2)
    assert.are.equal("Running", outcome)
    -- flow_v1's registrations are back: the instance finishes with the deployed code
    local st = env:run_until_complete(id)
    assert.are.equal("reserved pen", st.output)
    assert.are.same({ "pen" }, { env:calls("Reserve")[1].input })
    assert.are.same({}, env:calls("Hold"))
  end)
end)
