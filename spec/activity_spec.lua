-- Activity context (actx), actx:sleep, duroxide.wait with luv, concurrency on the loop.
local duroxide = require("duroxide")
local H = require("helpers")

describe("activities", function()
  local env
  before_each(function() env = H.env() end)
  after_each(function() env:close() end)

  -- Runs one activity from a one-step orchestration; returns the final status.
  local function run_activity(fn, input)
    local act = env:activity("Act", fn)
    local orch = env:orchestration("RunAct", function(ctx, v)
      local out, err = ctx:schedule_activity(act, v):await()
      if err then error(err) end
      return out
    end)
    return env:run(orch, input)
  end

  it("exposes actx fields", function()
    local seen
    local act = env:activity("Fields", function(actx, input)
      seen = {
        instance_id = actx.instance_id, execution_id = actx.execution_id, name = actx.name,
        attempt = actx.attempt, worker_id = actx.worker_id, session_id = actx.session_id,
        activity_id_type = math.type(actx.activity_id), cancelled = actx:is_cancelled(),
        input = input,
      }
      actx:trace_info("fields read")
      actx:trace_debug("debug")
      actx:trace("info", "generic")
      return true
    end)
    local orch = env:orchestration("FieldsOrch", function(ctx)
      return assert(ctx:schedule_activity(act, "in"):await())
    end)
    local id = env:start(orch, nil, "fields-1")
    local st = env:wait(id)
    assert.are.equal("Completed", st.status, st.error and st.error.message)
    assert.are.same({
      instance_id = "fields-1", execution_id = 1, name = act, attempt = 1,
      worker_id = env.rt:worker_id(), activity_id_type = "integer", cancelled = false,
      input = "in",
    }, seen)
    assert.is_nil(seen.session_id)
    assert.is_string(env.rt:worker_id())
    assert.is_true(#env.rt:worker_id() > 0)
  end)

  it("keeps actx fields readable after the activity ended, and fields the code sets", function()
    -- actx reads its fields from the activity's handle (activity.c): they outlive the run
    local kept = {}
    local act = env:activity("Keep", function(actx, input)
      actx.mine = input
      actx.name_seen = actx.name
      kept[input] = actx
      return input
    end)
    local orch = env:orchestration("KeepOrch", function(ctx)
      return assert(ctx:join({ ctx:schedule_activity(act, 1), ctx:schedule_activity(act, 2) }))
    end)
    local st = env:wait(env:start(orch, nil, "keep-1"))
    assert.are.equal("Completed", st.status, st.error and st.error.message)
    for k = 1, 2 do
      local actx = kept[k]
      assert.are.equal("keep-1", actx.instance_id)
      assert.are.equal(1, actx.execution_id)
      assert.are.equal(act, actx.name)
      assert.are.equal(act, actx.name_seen)
      assert.are.equal(k, actx.mine)
      assert.are.equal(1, actx.attempt)
      assert.are.equal(env.rt:worker_id(), actx.worker_id)
      assert.is_nil(actx.session_id)
      assert.is_nil(actx.tag)
      assert.is_nil(actx.no_such_field)
      assert.is_true(actx:is_cancelled()) -- over: nothing to cancel any more
    end
    assert.are_not.equal(kept[1].activity_id, kept[2].activity_id)
    kept[1].name = "renamed" -- a field the code assigns shadows the activity's own
    assert.are.equal("renamed", kept[1].name)
    assert.are.equal(act, kept[2].name)
    assert.are.equal("duroxide.ActivityContext", getmetatable(kept[1]).__name)
  end)

  it("answers nil for fields of an actx whose handle was removed or replaced", function()
    -- the handle is checked by its metatable's address (activity.c test_handle); a removed
    -- _h must not recurse through __index, and a foreign one is refused
    local act = env:activity("Foreign", function(actx)
      local out = { before = actx.instance_id }
      actx._h = nil
      out.removed = actx.instance_id
      out.removed_h = actx._h
      actx._h = io.stdout -- a userdata of another kind
      out.foreign = actx.instance_id
      out.foreign_cancelled = actx:is_cancelled()
      actx._h = setmetatable({}, { __name = "duroxide.ActivityHandle" })
      out.table = actx.worker_id
      return out
    end)
    local orch = env:orchestration("ForeignOrch", function(ctx)
      return assert(ctx:schedule_activity(act):await())
    end)
    local st = env:wait(env:start(orch, nil, "foreign-1"))
    assert.are.equal("Completed", st.status, st.error and st.error.message)
    assert.are.same({ before = "foreign-1", foreign_cancelled = true }, st.output)
  end)

  it("gives each activity its own name and worker id when they change between starts", function()
    -- actx.name and actx.worker_id come from kept registry slots while they repeat
    local a = env:activity("NameA", function(actx) return { actx.name, actx.worker_id } end)
    local b = env:activity("NameB", function(actx) return { actx.name, actx.worker_id } end)
    local orch = env:orchestration("Names", function(ctx)
      local out = {}
      for _, act in ipairs({ a, a, b, a, b, b }) do
        out[#out + 1] = assert(ctx:schedule_activity(act):await())
      end
      return out
    end)
    local st = env:wait(env:start(orch, nil, "names-1"))
    assert.are.equal("Completed", st.status, st.error and st.error.message)
    local w = env.rt:worker_id()
    assert.are.same({ { a, w }, { a, w }, { b, w }, { a, w }, { b, w }, { b, w } }, st.output)
  end)

  it("reports the configured worker_node_id as actx.worker_id", function()
    env:close()
    env = H.env({ worker_node_id = "node-a" })
    local st = run_activity(function(actx) return actx.worker_id end)
    assert.are.equal("node-a", st.output)
    assert.are.equal("node-a", env.rt:worker_id())
  end)

  it("an activity registered again runs its new function from the next start on", function()
    -- the loop keeps the function it looked up last (activity.c): registering must reach it
    local act = env:activity("Swap", function() return "old" end)
    local other = env:activity("Other", function() return "other" end)
    local orch = env:orchestration("SwapOrch", function(ctx, name)
      return assert(ctx:schedule_activity(name, nil):await())
    end)
    assert.are.equal("old", env:run(orch, act).output)
    duroxide.activity(act, function() return "new" end)
    assert.are.equal("new", env:run(orch, act).output)
    assert.are.equal("other", env:run(orch, other).output)
    assert.are.equal("new", env:run(orch, act).output)
  end)

  it("completes with nil when the activity returns nothing", function()
    local act = env:activity("Nothing", function() end)
    local orch = env:orchestration("NothingOrch", function(ctx)
      local v, err = ctx:schedule_activity(act):await()
      return { v_nil = v == nil, err_nil = err == nil }
    end)
    local st = env:run(orch)
    assert.are.same({ v_nil = true, err_nil = true }, st.output)
  end)

  it("actx:sleep suspends the activity and resumes it", function()
    local st = run_activity(function(actx, ms)
      local before = actx:is_cancelled()
      actx:sleep(ms)
      return { slept = ms, cancelled = before }
    end, 30)
    assert.are.equal("Completed", st.status)
    assert.are.same({ slept = 30, cancelled = false }, st.output)
  end)

  it("keeps the run whole when the code drops its actx and collects garbage", function()
    -- the handle lives in the coroutine's bottom frame (activity.c boot), a parked coroutine
    -- in the runs table: neither depends on the actx the code may let go
    local uv = require("luv")
    local act = env:activity("DropActx", function(actx, mode)
      actx = nil -- luacheck: ignore
      collectgarbage("collect")
      if mode == "park" then
        duroxide.wait(function(done)
          local t = uv.new_timer()
          t:start(5, 0, function()
            t:close()
            collectgarbage("collect")
            done()
          end)
        end)
        collectgarbage("collect")
      elseif mode == "raise" then
        error("dropped and raised")
      end
      return mode
    end)
    local orch = env:orchestration("DropActxOrch", function(ctx)
      local out = {}
      for _, m in ipairs({ "return", "park", "raise" }) do
        local v, err = ctx:schedule_activity(act, m):await()
        out[m] = v or (err and err.message)
      end
      return out
    end)
    local st = env:run(orch)
    assert.are.equal("Completed", st.status, st.error and st.error.message)
    assert.are.equal("return", st.output["return"])
    assert.are.equal("park", st.output.park)
    assert.matches("dropped and raised", st.output.raise, 1, true)
  end)

  it("actx:sleep rejects a negative duration", function()
    local st = run_activity(function(actx) actx:sleep(-5) end)
    assert.are.equal("Failed", st.status)
    assert.matches("non-negative number of milliseconds", st.error.message, 1, true)
  end)

  it("duroxide.wait returns what done receives from a luv timer", function()
    local st = run_activity(function(actx, v)
      local uv = require("luv")
      local timer = uv.new_timer()
      local a, b = duroxide.wait(function(done)
        timer:start(10, 0, function()
          timer:close()
          done("x", v)
        end)
      end)
      return { a, b }
    end, 7)
    assert.are.equal("Completed", st.status, st.error and st.error.message)
    assert.are.same({ "x", 7 }, st.output)
  end)

  it("duroxide.wait returns at once when done is called synchronously", function()
    local st = run_activity(function()
      return duroxide.wait(function(done) done("now") end)
    end)
    assert.are.equal("now", st.output)
  end)

  it("duroxide.wait outside an activity raises", function()
    assert.has_error(function() duroxide.wait(function() end) end,
      "duroxide.wait must be called inside an activity")
    assert.has_error(function() duroxide.wait("not a function") end)
  end)

  it("duroxide.wait inside an orchestration fails the instance", function()
    local orch = env:orchestration("WaitInOrch", function(ctx)
      return duroxide.wait(function(done) done(1) end)
    end)
    local st = env:run(orch)
    assert.are.equal("Failed", st.status)
    assert.matches("duroxide.wait must be called inside an activity", st.error.message, 1, true)
  end)

  it("sets actx.session_id for activities scheduled on a session", function()
    local act = env:activity("OnSession", function(actx) return { actx.session_id, actx.worker_id } end)
    local orch = env:orchestration("OnSessionOrch", function(ctx)
      local a = assert(ctx:schedule_activity_on_session(act, nil, "sess-1"):await())
      local b = assert(ctx:schedule_activity_on_session(act, nil, "sess-1"):await())
      return { a, b }
    end)
    local st = env:run(orch)
    assert.are.equal("Completed", st.status, st.error and st.error.message)
    assert.are.same({ { "sess-1", env.rt:worker_id() }, { "sess-1", env.rt:worker_id() } },
                    st.output)
  end)

  it("keeps every actx field of a session activity readable after it ended", function()
    -- the handle copies the activity's fields at its start (activity.c new_handle); each is
    -- made a Lua value only when read, during the run or after it
    local kept = {}
    local act = env:activity("KeepOnSession", function(actx, k)
      kept[k] = actx
      return actx.session_id
    end)
    local orch = env:orchestration("KeepOnSessionOrch", function(ctx)
      local a = assert(ctx:schedule_activity_on_session(act, 1, "sess-keep"):await())
      local b = assert(ctx:schedule_activity_on_session(act, 2, "sess-keep-2"):await())
      return { a, b }
    end)
    local st = env:wait(env:start(orch, nil, "keep-session-1"))
    assert.are.equal("Completed", st.status, st.error and st.error.message)
    assert.are.same({ "sess-keep", "sess-keep-2" }, st.output)
    for k, sid in ipairs({ "sess-keep", "sess-keep-2" }) do
      local actx = kept[k]
      assert.are.equal("keep-session-1", actx.instance_id)
      assert.are.equal(1, actx.execution_id)
      assert.are.equal("integer", math.type(actx.activity_id))
      assert.are.equal(act, actx.name)
      assert.are.equal(1, actx.attempt)
      assert.are.equal(sid, actx.session_id)
      assert.is_nil(actx.tag)
      assert.are.equal(env.rt:worker_id(), actx.worker_id)
    end
    assert.is_true(kept[1].activity_id < kept[2].activity_id)
  end)

  it("runs activities concurrently on the loop (their steps interleave)", function()
    local log = {}
    local act = env:activity("Interleave", function(actx, tag)
      log[#log + 1] = tag .. ":start"
      actx:sleep(30)
      log[#log + 1] = tag .. ":middle"
      local uv = require("luv")
      duroxide.wait(function(done)
        local t = uv.new_timer()
        t:start(10, 0, function() t:close(); done() end)
      end)
      log[#log + 1] = tag .. ":end"
      return tag
    end)
    local orch = env:orchestration("Concurrent", function(ctx)
      local values = ctx:join({ ctx:schedule_activity(act, "A"), ctx:schedule_activity(act, "B") })
      return values
    end)
    local st = env:run(orch)
    assert.are.equal("Completed", st.status)
    assert.are.same({ "A", "B" }, st.output)
    local pos = {}
    for i, entry in ipairs(log) do pos[entry] = i end
    assert.are.equal(6, #log)
    -- both started before either got past its first suspension
    assert.is_true(pos["A:start"] < pos["B:middle"] and pos["B:start"] < pos["A:middle"])
  end)

  it("fails the activity when a luv callback raises, without stopping the worker", function()
    local st = run_activity(function()
      local uv = require("luv")
      local t = uv.new_timer()
      local r = duroxide.wait(function(done)
        t:start(5, 0, function()
          t:close()
          done("resumed")
          error("callback error after done")
        end)
      end)
      return r
    end)
    assert.are.equal("Completed", st.status)
    assert.are.equal("resumed", st.output)
    -- the runtime still runs work
    local st2 = run_activity(function() return "still alive" end)
    assert.are.equal("still alive", st2.output)
  end)

  it("keeps an unregistered activity pending (retried with backoff) instead of failing", function()
    local missing = H.unique("NoSuchActivity") -- outside: the helper uses debug.getregistry
    local orch = env:orchestration("Unregistered", function(ctx)
      return ctx:schedule_activity(missing):await()
    end)
    local id = env:start(orch)
    env:await_event(id, "ActivityScheduled")
    env.rt:run_for(100)
    assert.are.equal("Running", env.client:status(id).status)
  end)
end)
