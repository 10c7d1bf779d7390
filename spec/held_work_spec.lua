-- Held rounds on a local store (docs/store-thread.md "Turns and activities answered inside
-- their fetch's transaction"): a store cycle hands the activities its turns schedule to the
-- idle loop before it commits, applies their results and the turns they wake, and commits
-- once. The orchestration cache keeps each turn as soon as its ack is applied in the open
-- transaction, so the instance's next turn continues it. Counts commits and cache hits; no
-- timing is asserted (a long hold: the idle loop answers within it however loaded the machine).
local duroxide = require("duroxide")
local uv = require("luv")
local H = require("helpers")

-- Sum of a metric's series (rt:metrics()) whose labels include every pair in `labels`.
local function metric(rt, name, labels)
  local fam = rt:metrics()[name]
  local sum = 0
  for _, s in ipairs(fam and fam.series or {}) do
    local match = true
    for k, v in pairs(labels or {}) do match = match and s.labels[k] == v end
    if match then sum = sum + (s.value or s.count) end
  end
  return sum
end

-- Durable commits of the runtime so far (a cycle that found nothing to do commits unsynced).
local function durable(rt)
  return metric(rt, "duroxide_store_commit_duration_seconds", { sync = "true" })
end

describe("held rounds on a directory store", function()
  local dir, rt, client, steps, sess, spawner, child, gated, sgated, gate_runs
  before_each(function()
    dir = H.tmpdir()
    local inc = H.unique("HeldInc")
    duroxide.activity(inc, function(_, x) return x + 1 end)
    steps = H.unique("HeldSteps")
    duroxide.orchestration(steps, function(ctx, n)
      local x = 0
      for _ = 1, n do x = assert(ctx:schedule_activity(inc, x):await()) end
      return x
    end)
    sess = H.unique("HeldSession")
    duroxide.orchestration(sess, function(ctx)
      local sid, x = "s-" .. ctx.instance_id, 0
      for _ = 1, 10 do x = assert(ctx:schedule_activity_on_session(inc, x, sid):await()) end
      ctx:close_session(sid)
      return x
    end)
    -- an activity that answers only after 1.5 s (longer than the hold of the test using it)
    local gate = H.unique("HeldGate")
    gate_runs = 0
    duroxide.activity(gate, function(_, x)
      gate_runs = gate_runs + 1
      return duroxide.wait(function(done)
        local t = uv.new_timer()
        t:start(1500, 0, function() t:close(); done(x) end)
      end)
    end)
    gated = H.unique("HeldGated")
    duroxide.orchestration(gated, function(ctx, x)
      return assert(ctx:schedule_activity(gate, x):await())
    end)
    sgated = H.unique("HeldSessionGated")
    duroxide.orchestration(sgated, function(ctx, x)
      return assert(ctx:schedule_activity_on_session(gate, x, "sg-" .. ctx.instance_id):await())
    end)
    child = H.unique("HeldChild")
    duroxide.orchestration(child, function(ctx, x)
      return assert(ctx:schedule_activity(inc, x):await())
    end)
    -- an activity that uses a client on the same store while its fetch's transaction may
    -- still be open: it starts an orchestration and waits for its result
    spawner = H.unique("HeldSpawner")
    local spawn = H.unique("HeldSpawn")
    duroxide.activity(spawn, function(actx, x)
      local id = "child-" .. actx.instance_id
      assert(client:start(id, child, x))
      for _ = 1, 2000 do
        local st = client:status(id)
        if st.status == "Completed" then return st.output end
        actx:sleep(5)
      end
      error("child did not complete")
    end)
    duroxide.orchestration(spawner, function(ctx, x)
      return assert(ctx:schedule_activity(spawn, x):await())
    end)
  end)
  after_each(function()
    if rt then rt:stop() end
    if client then client:close() end
    rt, client = nil, nil
    H.rmdir(dir)
  end)

  -- cache: orchestration_cache_size (explicit: the cache-off run of the specs sets a default)
  local function start_runtime(hold_ms, cache)
    rt = duroxide.runtime({ store = dir, log_level = "error", orchestration_cache_size = cache or "16m" })
    rt:_turn_hold(hold_ms)
    rt:start()
    client = duroxide.client({ store = dir })
  end

  it("runs ten steps in the commit of their start, each turn continuing the kept one", function()
    start_runtime(10000)
    local c0, hits0 = durable(rt), metric(rt, "duroxide_orchestration_cache_hits_total")
    assert.truthy(client:start("t1", steps, 10))
    assert.are.equal(10, client:wait("t1", 5000).output)
    -- start, eleven turns and ten activities: one durable commit (eleven before: an activity
    -- waited for the commit of the turn that scheduled it)
    assert.are.equal(1, durable(rt) - c0, "commits " .. rt:stats().commits)
    -- turns 2..11 continued the turn kept when the previous ack was applied, uncommitted yet
    assert.are.equal(10, metric(rt, "duroxide_orchestration_cache_hits_total") - hits0)
    assert.are.equal(0, metric(rt, "duroxide_orchestration_replays_total"))
    assert.are.equal(10, #H.events_of(client:history("t1"), "ActivityCompleted"))
  end)

  it("fetches a long orchestration's turns with their last event only, across commits", function()
    -- a short hold: the rounds' budget runs out many times, so turns delivered with a commit
    -- and turns fetched before the loop kept the previous one both occur (before, those
    -- turns each brought the whole history: a step cost O(history))
    start_runtime(1)
    local f0 = metric(rt, "duroxide_orchestration_fetched_events_total")
    assert.truthy(client:start("t-long", steps, 200))
    assert.are.equal(200, client:wait("t-long", 20000).output)
    local fetched = metric(rt, "duroxide_orchestration_fetched_events_total") - f0
    -- 201 turns: the first brings the start, each later one its last event (or, rarely, the
    -- whole history after an eviction or a lost race: far below the ~40000 events of
    -- whole histories every turn)
    assert.is_true(fetched <= 3 * 201, "fetched events " .. fetched)
    assert.are.equal(200, #H.events_of(client:history("t-long"), "ActivityCompleted"))
  end)

  it("runs ten steps in one commit with the cache off too, each turn replaying", function()
    start_runtime(10000, 0)
    local c0 = durable(rt)
    assert.truthy(client:start("t2", steps, 10))
    assert.are.equal(10, client:wait("t2", 5000).output)
    assert.are.equal(1, durable(rt) - c0, "commits " .. rt:stats().commits)
    assert.are.equal(10, metric(rt, "duroxide_orchestration_replays_total"))
    assert.are.equal(10, #H.events_of(client:history("t2"), "ActivityCompleted"))
  end)

  it("leaves no turn of a lost transaction in the cache: it runs again from the history", function()
    -- the first turn is kept as soon as its ack is applied, the activity it scheduled goes to
    -- the loop, and the transaction commits without its result (the activity outlasts the
    -- hold); that commit is lost (rolled back, retried): the retried transaction's turn does
    -- not continue the kept one (found stale, dropped) and the activity runs again
    start_runtime(500)
    local stale0 = metric(rt, "duroxide_orchestration_cache_misses_total", { reason = "stale" })
    rt:_lose_commits(1)
    assert.truthy(client:start("g1", gated, 7))
    assert.are.equal(7, client:wait("g1", 20000).output)
    local h = client:history("g1")
    assert.are.equal(1, #H.events_of(h, "ActivityScheduled"))
    assert.are.equal(1, #H.events_of(h, "ActivityCompleted"))
    assert.are.equal(2, gate_runs) -- started in the lost transaction, then in the retried one
    assert.are.equal(1, metric(rt, "duroxide_orchestration_cache_misses_total",
                               { reason = "stale" }) - stale0)
  end)

  it("runs a session's ten steps and its close in one commit", function()
    start_runtime(10000)
    local c0 = durable(rt)
    assert.truthy(client:start("s1", sess))
    assert.are.equal(10, client:wait("s1", 5000).output)
    rt:run_for(50) -- the close's release
    -- the claim and its first activity, the other nine steps, the last turn, the close and
    -- its release (twelve commits at first; two while a claimed activity waited for its
    -- claim's commit)
    assert.are.equal(1, durable(rt) - c0, "commits " .. rt:stats().commits)
    assert.are.equal(0, metric(rt, "duroxide_orchestration_replays_total"))
  end)

  it("claims a session again when the transaction of its claim is lost: " ..
     "the first hold is given up, the history holds one result", function()
    -- the session's first activity goes round in the transaction whose fetch claimed the
    -- session and outlasts the hold; that commit is lost (rolled back, retried): the retried
    -- batch claims the session again, and the runtime gives up the hold it began on the lost
    -- claim ("lost": the run under it is fenced) before it begins the new one
    start_runtime(500)
    rt:_lose_commits(1)
    assert.truthy(client:start("sg1", sgated, 7))
    assert.are.equal(7, client:wait("sg1", 20000).output)
    local h = client:history("sg1")
    assert.are.equal(1, #H.events_of(h, "ActivityScheduled"))
    assert.are.equal(1, #H.events_of(h, "ActivityCompleted"))
    assert.are.equal(2, gate_runs) -- started in the lost transaction, then in the retried one
    assert.are.equal(2, metric(rt, "duroxide_session_claims_total"))
    assert.are.equal(1, metric(rt, "duroxide_session_releases_total", { reason = "lost" }))
  end)

  it("lets an activity use a client on the same store while it is held", function()
    -- the client's write waits for the store's open transaction, which waits for the
    -- activity at most the hold: then it commits without the result and the client goes on
    start_runtime(100)
    assert.truthy(client:start("p1", spawner, 41))
    local st = client:wait("p1", 20000)
    assert.are.equal("Completed", st.status)
    assert.are.equal(42, st.output)
  end)
end)
