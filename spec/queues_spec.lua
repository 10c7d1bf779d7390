-- Persistent event queues (issue 11 item 2) and custom status versions (item 5):
-- ctx:dequeue_event, client:enqueue_event, carry-over at continue-as-new,
-- ctx:get_custom_status, custom_status_version, client:wait_for_status_change.
local testing = require("duroxide.testing")

describe("event queues", function()
  local env
  before_each(function() env = testing.env({}) end)
  after_each(function() env:close() end)

  it("keeps messages enqueued before anyone waits and hands them out FIFO", function()
    env:register_orchestration("Collect", function(ctx, n)
      local got = {}
      ctx:schedule_timer(1000):await() -- nobody waits while the messages arrive
      for i = 1, n do got[i] = ctx:dequeue_event("q"):await() end
      return got
    end)
    local id = env:start("q-1", "Collect", 4)
    env:run_until_idle()
    env:enqueue_event(id, "q", "a")
    env:enqueue_event(id, "other", "not mine")
    env:enqueue_event(id, "q", { b = 2 })
    env:run_until_idle()
    env:enqueue_event(id, "q", 3)
    env:enqueue_event(id, "q", false)
    local st = env:run_until_complete(id)
    assert.are.equal("Completed", st.status)
    assert.are.same({ "a", { b = 2 }, 3, false }, st.output)
  end)

  it("a dequeue that loses a select leaves the message for the next one", function()
    env:register_orchestration("Race", function(ctx)
      local i = ctx:select({ ctx:dequeue_event("q"), ctx:schedule_timer(1000) })
      local later = assert(ctx:dequeue_event("q"):await())
      return { first = i, later = later }
    end)
    local id = env:start("q-2", "Race")
    env:advance(1000)
    env:enqueue_event(id, "q", "m")
    local st = env:run_until_complete(id)
    assert.are.same({ first = 2, later = "m" }, st.output)
    local ok, err = testing.check_replay(env:history(id))
    assert.is_true(ok, tostring(err))
  end)

  it("carries messages nobody dequeued across continue_as_new, oldest first", function()
    env:register_orchestration("Batches", function(ctx, round)
      local m = assert(ctx:dequeue_event("q"):await())
      if round == 1 then ctx:continue_as_new(2) end
      return { m, assert(ctx:dequeue_event("q"):await()) }
    end)
    local id = env:start("q-3", "Batches", 1)
    for i = 1, 3 do env:enqueue_event(id, "q", i) end
    local st = env:run_until_complete(id)
    assert.are.equal(2, st.execution_id)
    assert.are.same({ 2, 3 }, st.output)
  end)

  it("carries at most 20 messages (the oldest) across continue_as_new", function()
    env:register_orchestration("Drop", function(ctx, round)
      if round == 1 then
        ctx:schedule_wait("go"):await()
        ctx:continue_as_new(2)
      end
      local got = {}
      for i = 1, 20 do got[i] = assert(ctx:dequeue_event("q"):await()) end
      local _, late = ctx:select({ ctx:dequeue_event("q"), ctx:schedule_timer(1000) })
      got[21] = late or "none"
      return got
    end)
    local id = env:start("q-4", "Drop", 1)
    env:run_until_idle()
    for i = 1, 25 do env:enqueue_event(id, "q", i) end
    env:run_until_idle()
    env:raise_event(id, "go", true)
    local st = env:run_until_complete(id)
    local want = {}
    for i = 1, 20 do want[i] = i end
    want[21] = "none"
    assert.are.same(want, st.output)
  end)

  it("enqueue_event returns true, or nil, err for unknown instances and bad arguments", function()
    env:register_orchestration("Idle", function(ctx) ctx:schedule_wait("never"):await() end)
    env:start("q-5", "Idle")
    env:run_until_idle()
    assert.is_true(env.client:enqueue_event("q-5", "q", { x = 1 }))
    local ok, err = env.client:enqueue_event("nobody", "q", 1)
    assert.is_nil(ok)
    assert.matches("unknown instance 'nobody'", err.message)
    ok, err = env.client:enqueue_event("q-5", string.rep("n", 401), 1)
    assert.is_nil(ok)
    assert.matches("queue name is 401 bytes; the limit is 400 bytes", err.message)
    ok, err = env.client:enqueue_event("q-5", "q", string.rep("x", 300 * 1024))
    assert.is_nil(ok)
    assert.is_not_nil(err)
    assert.has_error(function() env.client:enqueue_event("q-5", "q", print) end)
    assert.has_error(function() env.client:enqueue_event("q-5", nil, 1) end)
    assert.has_error(function() env:enqueue_event("nobody", "q", 1) end)
  end)

  it("dequeue_event names a bad queue name; a changed queue is nondeterminism", function()
    env:register_orchestration("BadQ", function(ctx) ctx:dequeue_event("") end)
    local st = env:run_until_complete(env:start(nil, "BadQ"))
    assert.are.equal("Failed", st.status)
    assert.matches("queue name must be a non%-empty string", st.error.message)

    env:register_orchestration("Q", function(ctx) return ctx:dequeue_event("a"):await() end)
    local id = env:start("q-6", "Q")
    env:enqueue_event(id, "a", 1)
    env:run_until_complete(id)
    local ok, err = testing.check_replay(env:history(id), function(d)
      d.orchestration("Q", function(ctx) return ctx:dequeue_event("b"):await() end)
    end)
    assert.is_false(ok)
    assert.matches("event queue wait at event %d+ was 'a' in history but the code now uses 'b'",
                   err)
  end)
end)

describe("custom status versions", function()
  local env
  before_each(function() env = testing.env({}) end)
  after_each(function() env:close() end)

  it("every status carries custom_status_version; it grows once per turn that sets it", function()
    env:register_orchestration("Phases", function(ctx)
      local seen = { ctx:get_custom_status() }
      ctx:set_custom_status("one")
      seen[#seen + 1] = ctx:get_custom_status()
      ctx:schedule_wait("next"):await()
      ctx:set_custom_status({ phase = 2 })
      ctx:set_custom_status({ phase = 3 })
      seen[#seen + 1] = ctx:get_custom_status()
      ctx:schedule_wait("next"):await()
      return seen
    end)
    local id = env:start("cs-1", "Phases")
    env:run_until_idle()
    local st = env:status(id)
    assert.are.equal("one", st.custom_status)
    assert.are.equal(1, st.custom_status_version)
    env:raise_event(id, "next", true)
    env:run_until_idle()
    st = env:status(id)
    assert.are.same({ phase = 3 }, st.custom_status)
    assert.are.equal(2, st.custom_status_version)
    env:raise_event(id, "next", true)
    st = env:run_until_complete(id)
    assert.are.same({ "one", { phase = 3 } }, st.output) -- nil first: no status yet
    assert.are.equal(2, st.custom_status_version) -- replayed sets do not count
    assert.is_nil(env:status("nobody").custom_status_version)
  end)

  it("get_custom_status continues across continue_as_new", function()
    env:register_orchestration("Carry", function(ctx, n)
      local before = ctx:get_custom_status()
      if n == 1 then
        ctx:set_custom_status("from 1")
        ctx:continue_as_new(2)
      end
      return before
    end)
    local st = env:run_until_complete(env:start("cs-2", "Carry", 1))
    assert.are.equal("from 1", st.output)
    assert.are.equal("from 1", st.custom_status)
  end)

  it("wait_for_status_change returns when the version grows or the instance ends", function()
    env:register_orchestration("Steps", function(ctx)
      ctx:schedule_wait("go"):await()
      ctx:set_custom_status("stepped")
      ctx:schedule_wait("go"):await()
      return "done"
    end)
    local id = env:start("cs-3", "Steps")
    env:run_until_idle()
    local st, err, last = env.client:wait_for_status_change(id, 0, 50)
    assert.is_nil(st)
    assert.are.equal("DX_ETIMEDOUT", err.kind)
    assert.are.equal(0, last.custom_status_version)
    env:raise_event(id, "go", true)
    st = env.client:wait_for_status_change(id, 0, 10000)
    assert.are.equal("stepped", st.custom_status)
    assert.are.equal(1, st.custom_status_version)
    env:raise_event(id, "go", true)
    st = env.client:wait_for_status_change(id, 1, 10000)
    assert.are.equal("Completed", st.status)
    assert.are.equal(1, st.custom_status_version)
    local ok, e2 = env.client:wait_for_status_change("", 0, 10)
    assert.is_nil(ok)
    assert.is_not_nil(e2)
    assert.has_error(function() env.client:wait_for_status_change(id, "x", 10) end)
  end)
end)
