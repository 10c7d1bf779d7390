-- Metrics: a worker's counters (rt:metrics(), env:metrics) move with what it does, and the
-- store-wide figures (client:stats() / client:metrics()) count the store. Values, not timing.
local duroxide = require("duroxide")
local testing = require("duroxide.testing")

describe("worker metrics", function()
  local env
  -- options: worker options (the replay counters need the orchestration cache off)
  local function setup(options)
    env = testing.env({ options = options })
    env:register_activity("Double", function(actx, n) return n * 2 end)
    env:register_activity("Boom", function(actx) error("boom") end)
    env:register_orchestration("Calc", function(ctx, n)
      return assert(ctx:schedule_activity("Double", n):await()) + 1
    end)
    env:register_orchestration("Fails", function(ctx)
      local _, err = ctx:schedule_activity("Boom"):await()
      error("gave up: " .. err.message)
    end)
    env:register_orchestration("Loop", function(ctx, n)
      if n > 0 then return ctx:continue_as_new(n - 1) end
      return "done"
    end)
  end
  before_each(function() setup() end)
  after_each(function() env:close() end)
  local function replaying()
    env:close()
    setup({ orchestration_cache_size = 0 })
  end

  local function m(name, labels) return env:metrics("w1", name, labels) end

  it("counts starts, completions, turns, replays and activity outcomes", function()
    replaying()
    assert.are.equal(0, m("duroxide_orchestration_starts_total"))
    for i = 1, 3 do
      assert.are.equal("Completed", env:run_until_complete(env:start("c" .. i, "Calc", i)).status)
    end
    assert.are.equal(3, m("duroxide_orchestration_starts_total",
                          { orchestration_name = "Calc", initiated_by = "client" }))
    assert.are.equal(3, m("duroxide_orchestration_completions_total",
                          { orchestration_name = "Calc", status = "success" }))
    assert.are.equal(0, m("duroxide_orchestration_failures_total"))
    assert.are.equal(3, m("duroxide_activity_executions_total",
                          { activity_name = "Double", outcome = "success" }))
    assert.are.equal(3, m("duroxide_activity_duration_seconds", { activity_name = "Double" }))
    -- two turns each (schedule, then complete); the second replays the first's history
    assert.are.equal(6, m("duroxide_orchestration_turns_total", { outcome = "committed" }))
    assert.are.equal(6, m("duroxide_orchestration_turn_duration_seconds"))
    assert.are.equal(3, m("duroxide_orchestration_replays_total"))
    assert.is_true(m("duroxide_orchestration_replayed_events_total") >= 6)
    assert.are.equal(3, m("duroxide_orchestration_duration_seconds",
                          { orchestration_name = "Calc", status = "success" }))
    assert.are.equal(0, m("duroxide_activities_running"))
    -- the store thread: every cycle committed, the acks of 6 turns and 3 activities applied
    assert.is_true(m("duroxide_store_cycles_total", { result = "ok" }) > 0)
    assert.are.equal(0, m("duroxide_store_cycles_total", { result = "failed" }))
    assert.are.equal(6, m("duroxide_store_operations_total",
                          { operation = "ack_orchestration", result = "ok" }))
    assert.are.equal(3, m("duroxide_store_operations_total",
                          { operation = "ack_work", result = "ok" }))
    assert.are.equal(3, m("duroxide_store_fetched_items_total", { queue = "worker" }))
    assert.is_true(m("duroxide_store_commit_duration_seconds", { sync = "true" }) > 0)
    assert.is_true(m("duroxide_store_fetch_duration_seconds") > 0)
    assert.are.equal(1, m("duroxide_worker_info", { worker_id = "w1" }))
  end)

  it("counts failures by category and application errors of activities", function()
    local st = env:run_until_complete(env:start("f1", "Fails"))
    assert.are.equal("Failed", st.status)
    assert.are.equal(1, m("duroxide_activity_executions_total",
                          { activity_name = "Boom", outcome = "app_error" }))
    assert.are.equal(1, m("duroxide_orchestration_completions_total",
                          { orchestration_name = "Fails", status = "failed" }))
    assert.are.equal(1, m("duroxide_orchestration_failures_total",
                          { orchestration_name = "Fails", category = "application" }))
    assert.are.equal(0, m("duroxide_orchestration_failures_total", { category = "configuration" }))
  end)

  it("counts a nondeterministic replay as a configuration failure", function()
    replaying() -- a cached instance is not replayed: nothing to compare
    local v = 1
    env:register_activity("Step", function() return true end)
    env:register_orchestration("Shifty", function(ctx)
      ctx:schedule_activity("Step" .. (v == 1 and "" or "X")):await()
      v = 2
      ctx:schedule_wait("go"):await()
      return "ok"
    end)
    local id = env:start("n1", "Shifty")
    env:run_until_idle()
    env:raise_event(id, "go", true) -- the replay now schedules StepX where history has Step
    assert.are.equal("Failed", env:run_until_complete(id).status)
    assert.are.equal(1, m("duroxide_orchestration_failures_total",
                          { orchestration_name = "Shifty", category = "configuration" }))
  end)

  it("counts continue-as-new as an end and a start of the next execution", function()
    assert.are.equal("Completed", env:run_until_complete(env:start("l1", "Loop", 2)).status)
    assert.are.equal(1, m("duroxide_orchestration_starts_total",
                          { orchestration_name = "Loop", initiated_by = "client" }))
    assert.are.equal(2, m("duroxide_orchestration_starts_total",
                          { orchestration_name = "Loop", initiated_by = "continueAsNew" }))
    assert.are.equal(2, m("duroxide_orchestration_completions_total",
                          { orchestration_name = "Loop", status = "continuedAsNew" }))
    assert.are.equal(1, m("duroxide_orchestration_completions_total",
                          { orchestration_name = "Loop", status = "success" }))
  end)

  it("counts sub-orchestrations and their starts by a parent", function()
    env:register_orchestration("Parent", function(ctx, n)
      return assert(ctx:schedule_sub_orchestration("Calc", n):await())
    end)
    assert.are.equal("Completed", env:run_until_complete(env:start("p1", "Parent", 4)).status)
    assert.are.equal(1, m("duroxide_suborchestration_calls_total", { orchestration_name = "Calc" }))
    assert.are.equal(1, m("duroxide_orchestration_starts_total",
                          { orchestration_name = "Calc", initiated_by = "suborchestration" }))
    assert.are.equal(1, m("duroxide_orchestration_starts_total",
                          { orchestration_name = "Parent", initiated_by = "client" }))
  end)

  it("counts unregistered activities handed back for a retry", function()
    env:register_orchestration("Missing", function(ctx)
      return ctx:schedule_activity("NotThere"):await()
    end)
    env:start("u1", "Missing")
    env:run_until_idle()
    assert.are.equal(1, m("duroxide_activity_executions_total",
                          { activity_name = "NotThere", outcome = "retry_unregistered" }))
  end)
end)

describe("session metrics", function()
  local env
  before_each(function()
    env = testing.env()
    env:register_activity("Turn", function(actx, n) return n end)
    env:register_orchestration("Chat", function(ctx, sid)
      local a = assert(ctx:schedule_activity_on_session("Turn", 1, sid):await())
      ctx:schedule_wait("next"):await()
      return a + assert(ctx:schedule_activity_on_session("Turn", 2, sid):await())
    end)
    env:register_orchestration("Close", function(ctx, sid)
      local a = assert(ctx:schedule_activity_on_session("Turn", 1, sid):await())
      ctx:close_session(sid)
      return a
    end)
  end)
  after_each(function() env:close() end)

  it("counts claims, the owned gauge and releases by reason", function()
    env:run_until_complete(env:start("a", "Close", "s1"))
    local id = env:start("b", "Chat", "s2")
    env:run_until_idle()
    assert.are.equal(2, env:metrics("w1", "duroxide_session_claims_total", { how = "new" }))
    assert.are.equal(0, env:metrics("w1", "duroxide_session_moves_total"))
    assert.are.equal(1, env:metrics("w1", "duroxide_session_releases_total", { reason = "closed" }))
    assert.are.equal(1, env:metrics("w1", "duroxide_sessions_owned")) -- s2 still pinned
    env:raise_event(id, "next", true)
    assert.are.equal("Completed", env:run_until_complete(id).status)
  end)

  it("counts a move when another worker claims a crashed owner's session", function()
    local id = env:start("c", "Chat", "s3")
    env:run_until_idle()
    env:add_worker("w2")
    assert.are.equal(1, env:metrics("w1", "duroxide_session_claims_total", { how = "new" }))
    env:crash_worker("w1")
    env:raise_event(id, "next", true)
    assert.are.equal("Completed", env:run_until_complete(id).status)
    assert.are.equal(1, env:metrics("w2", "duroxide_session_claims_total"))
    assert.are.equal(1, env:metrics("w2", "duroxide_session_moves_total"))
    assert.are.equal(1, env:metrics("w2", "duroxide_sessions_owned"))
  end)

  it("counts a restart's reclaim, which is no move", function()
    local id = env:start("d", "Chat", "s4")
    env:run_until_idle()
    env:crash_worker("w1")
    env:restart_worker("w1")
    env:raise_event(id, "next", true)
    assert.are.equal("Completed", env:run_until_complete(id).status)
    assert.are.equal(1, env:metrics("w1", "duroxide_session_claims_total", { how = "reclaim" }))
    assert.are.equal(0, env:metrics("w1", "duroxide_session_moves_total"))
  end)
end)

describe("rt:metrics() and client:stats()", function()
  it("render every metric, and the store-wide figures count the store", function()
    local env = testing.env()
    env:register_activity("Turn", function(actx, n) return n end)
    env:register_orchestration("Hold", function(ctx, sid)
      assert(ctx:schedule_activity_on_session("Turn", 1, sid):await())
      return ctx:schedule_wait("never"):await()
    end)
    env:start("h1", "Hold", "sx")
    env:start("h2", "Hold", "sy")
    env:run_until_idle()
    local all = env:metrics("w1")
    assert.are.equal("counter", all.duroxide_orchestration_starts_total.type)
    assert.are.equal("histogram", all.duroxide_store_cycle_duration_seconds.type)
    assert.is_string(all.duroxide_session_moves_total.help)
    local st = env.client:stats()
    assert.are.same(st, (function()
      local s2 = env.client:metrics()
      s2.time_ms = st.time_ms
      return s2
    end)())
    assert.are.equal(2, st.instances)
    assert.are.equal(2, st.sessions.total)
    assert.are.equal(2, st.sessions.live)
    assert.are.equal(2, st.sessions.by_worker.w1)
    assert.are.equal(0, st.sessions.unowned)
    assert.is_true(st.orchestrator_queue >= 0 and st.worker_queue >= 0)
    env:close()
  end)

  it("docs/operations.md lists every metric with its type and labels", function()
    local env = testing.env()
    local f = assert(io.open("docs/operations.md"))
    local doc = f:read("a")
    f:close()
    local rows = {}
    for name, type_, labels in doc:gmatch("\n| `(duroxide_[%w_]+)` | (%w+) |([^|]*)|") do
      rows[name] = { type = type_, labels = labels }
    end
    local m, n = env:metrics("w1"), 0
    for name, fam in pairs(m) do
      n = n + 1
      assert.is_table(rows[name], name .. " is not in docs/operations.md")
      assert.are.equal(fam.type, rows[name].type, name)
    end
    for name in pairs(rows) do assert.is_table(m[name], name .. " is documented but not a metric") end
    assert.is_true(n > 20)
    -- the labels column names each label of a recorded series
    for _, s in ipairs(m.duroxide_worker_info.series) do
      for k in pairs(s.labels) do
        assert.is_truthy(rows.duroxide_worker_info.labels:find("`" .. k .. "`", 1, true), k)
      end
    end
    env:close()
  end)
end)
