-- client:workers() and client:session_history() (issue 10): the live workers of the store and
-- where a session has been, from any client.
local duroxide = require("duroxide")
local testing = require("duroxide.testing")

describe("client:workers()", function()
  local env
  after_each(function() if env then env:close() end end)

  local function ids(list)
    local out = {}
    for _, w in ipairs(list) do out[#out + 1] = w.worker_id end
    return out
  end

  it("lists each running worker with host, pid and start time; a killed one leaves", function()
    env = testing.env({ workers = { "w1", "w2" } })
    local list = assert(env.client:workers())
    assert.are.same({ "w1", "w2" }, ids(list))
    for _, w in ipairs(list) do
      assert.is_string(w.host)
      assert.is_true(w.pid > 0)
      assert.is_true(w.started_at_ms > 0)
      assert.are.equal(0, w.running_turns)
      assert.are.same({}, w.sessions)
    end
    env:kill_worker("w2") -- as SIGKILL: no unregistration runs, the liveness lock goes
    assert.are.same({ "w1" }, ids(assert(env.client:workers())))
    env:add_worker("w3")
    assert.are.same({ "w1", "w3" }, ids(assert(env.client:workers())))
  end)

  it("shows the sessions a worker owns, and the session's stored history", function()
    env = testing.env({ options = { session_idle_timeout = 0 } })
    env:register_activity("Note", function(actx, x) return x end)
    env:register_orchestration("UseSession", function(ctx, sid)
      assert(ctx:schedule_activity_on_session("Note", 1, sid):await())
      return ctx:schedule_wait("done"):await()
    end)
    local id = env:start("u1", "UseSession", "s-ops")
    env:run_until_idle()
    local w = assert(env.client:workers())[1]
    assert.are.equal("w1", w.worker_id)
    assert.are.same({ "s-ops" }, w.sessions)
    assert.is_true(w.lease_until_ms > 0)
    local events = assert(env.client:session_history("s-ops"))
    assert.are.equal("claimed", events[1].event)
    assert.are.equal("w1", events[1].worker_id)
    assert.are.equal("new", events[1].detail)
    assert.are.same({}, assert(env.client:session_history("never-used")))
    local r, err = env.client:session_history("")
    assert.is_nil(r)
    assert.matches("session id is empty", err.message, 1, true)
    r, err = env.client:session_history(42)
    assert.is_nil(r)
    assert.matches("session id must be a string", err.message, 1, true)
    env.client:raise_event(id, "done", 1)
    env:run_until_complete(id)
  end)
end)
