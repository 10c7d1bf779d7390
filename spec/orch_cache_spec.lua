-- The orchestration cache (issue 12 item 1): a worker keeps an instance's coroutine between
-- turns and feeds it only the new messages. What the store records must not depend on it:
-- the same workloads write the same histories with the cache off (every turn replays), on
-- (turns resume the cached code), and when turns alternate between hits and misses (another
-- worker turned the instance, the worker restarted, the entry was evicted).
local testing = require("duroxide.testing")
local duroxide = require("duroxide")
local function enc(v) return (assert(duroxide.json_encode(v))) end

local CACHE_ON = { orchestration_cache_size = "16m" }
local CACHE_OFF = { orchestration_cache_size = 0 }

-- Registrations of every workload (orchestrations and activities), done in each env.
local function register(env)
  env:register_activity("Add", function(actx, n) return n + 1 end)
  env:register_activity("Fail", function(actx, n)
    if n < 2 then error("fail " .. n, 0) end
    return n
  end)
  env:register_orchestration("Chain", function(ctx, n)
    local v = n
    for _ = 1, 6 do v = assert(ctx:schedule_activity("Add", v):await()) end
    return v
  end)
  env:register_orchestration("Fan", function(ctx, n)
    local fs = {}
    for i = 1, n do fs[i] = ctx:schedule_activity("Add", i) end
    local values = ctx:join(fs)
    local sum = 0
    for _, v in ipairs(values) do sum = sum + v end
    return sum
  end)
  env:register_orchestration("Race", function(ctx)
    -- the timer wins against an event that never comes: the wait is cancelled
    local i = ctx:select({ ctx:schedule_wait("never"), ctx:schedule_timer(50) })
    local j, v = ctx:select({ ctx:schedule_wait("go"), ctx:schedule_timer(60000) })
    return { i, j, v }
  end)
  env:register_orchestration("Events", function(ctx)
    local got = {}
    for k = 1, 3 do
      got[k] = ctx:schedule_wait("step"):await()
      ctx:set_custom_status({ seen = k })
      ctx:set_kv_value("k" .. k, got[k])
    end
    ctx:clear_kv_value("k1")
    return { got = got, status = ctx:get_custom_status(), n = ctx:get_kv_length() }
  end)
  env:register_orchestration("Queue", function(ctx)
    local a = ctx:dequeue_event("q"):await()
    local b = ctx:dequeue_event("q"):await()
    return { a, b }
  end)
  env:register_orchestration("Child", function(ctx, n)
    ctx:schedule_timer(10):await()
    return assert(ctx:schedule_activity("Add", n):await())
  end)
  env:register_orchestration("Parent", function(ctx, n)
    local a = assert(ctx:schedule_sub_orchestration("Child", n):await())
    local b = assert(ctx:schedule_sub_orchestration("Child", a, ctx.instance_id .. "-c2"):await())
    return a + b
  end)
  env:register_orchestration("Retry", function(ctx)
    local out, err = ctx:schedule_activity("Fail", 0):await()
    local out2 = ctx:schedule_activity("Fail", 5):await()
    return { out = out, err = err and err.message, out2 = out2 }
  end)
  env:register_orchestration("Again", function(ctx, n)
    ctx:schedule_activity("Add", n):await()
    if n < 3 then return ctx:continue_as_new(n + 1) end
    return n
  end)
  env:register_orchestration("Helpers", function(ctx)
    local g = ctx:new_guid()
    ctx:schedule_timer(5):await()
    return { g = type(g), r = ctx:random() < 1, t = math.type(ctx:utc_now()) }
  end)
  env:register_orchestration("Waits", function(ctx)
    ctx:schedule_wait("go"):await()
    return ctx:schedule_wait("go"):await()
  end)
end

-- One history as text: every event as canonical JSON with its times made relative (a timer's
-- delay instead of its fire time; no timestamps) and recorded system-call values replaced.
local function canonical(h)
  local out = {}
  for _, e in ipairs(h) do
    local c = {}
    for k, v in pairs(e) do c[k] = v end
    if c.fire_at_ms then -- the delay asked for, from the creating event's time
      local created = e.source_event_id and h[e.source_event_id] or e
      c.fire_at_ms = c.fire_at_ms - created.timestamp_ms
    end
    c.timestamp_ms = nil
    if c.type == "SystemCall" then c.data = "(recorded)" end
    local keys = {}
    for k in pairs(c) do keys[#keys + 1] = k end
    table.sort(keys)
    local parts = {}
    for _, k in ipairs(keys) do parts[#parts + 1] = enc(k) .. ":" .. enc(c[k]) end
    out[#out + 1] = "{" .. table.concat(parts, ",") .. "}"
  end
  return table.concat(out, "\n")
end

-- Every execution of every instance, as text.
local function histories(env, ids)
  local all = {}
  for _, id in ipairs(ids) do
    local st = env:status(id)
    for x = 1, st.execution_id do all[id .. "#" .. x] = canonical(env:history(id, x)) end
  end
  return all
end

-- Run every workload to its end in a fresh env with `options`; the instances' histories and
-- the env's cache hits.
local function run_workloads(options)
  local env = testing.env({ options = options })
  register(env)
  local ids = {}
  local function start(id, name, input)
    env:start(id, name, input)
    ids[#ids + 1] = id
    return id
  end
  local ok, err = pcall(function()
    for _, w in ipairs({ { "chain", "Chain", 1 }, { "fan", "Fan", 4 }, { "parent", "Parent", 1 },
                         { "retry", "Retry" }, { "again", "Again", 1 }, { "helpers", "Helpers" } }) do
      assert(env:run_until_complete(start(w[1], w[2], w[3])).status == "Completed", w[1])
    end
    start("race", "Race")
    env:run_until_idle()
    env:advance(100)
    env:raise_event("race", "go", "went")
    assert(env:run_until_complete("race").status == "Completed")
    start("events", "Events")
    for k = 1, 3 do
      env:run_until_idle()
      env:raise_event("events", "step", k * 10)
    end
    assert(env:run_until_complete("events").status == "Completed")
    start("queue", "Queue")
    env:run_until_idle()
    env:enqueue_event("queue", "q", "a")
    env:run_until_idle()
    env:enqueue_event("queue", "q", "b")
    assert(env:run_until_complete("queue").status == "Completed")
    start("cancelled", "Waits")
    env:run_until_idle()
    env:raise_event("cancelled", "go", 1)
    env:run_until_idle()
    env:cancel("cancelled", "enough")
    assert(env:run_until_complete("cancelled").status == "Failed")
  end)
  local hist = ok and histories(env, ids)
  local hits = ok and env:metrics("w1", "duroxide_orchestration_cache_hits_total")
  local replays = ok and env:metrics("w1", "duroxide_orchestration_replays_total")
  env:close()
  if not ok then error(err, 0) end
  return hist, hits, replays
end

local function assert_same(want, got)
  for k, v in pairs(want) do assert.are.equal(v, got[k], "history of " .. k) end
  for k in pairs(got) do assert.is_not_nil(want[k], "unexpected history " .. k) end
end

describe("orchestration cache", function()
  it("writes the same histories as replaying every turn", function()
    local off, off_hits, off_replays = run_workloads(CACHE_OFF)
    local on, on_hits, on_replays = run_workloads(CACHE_ON)
    assert.are.equal(0, off_hits)
    assert.is_true(off_replays > 20)
    -- with the cache on no turn of a started execution replays: each one resumes the code
    assert.is_true(on_hits > 20)
    assert.are.equal(0, on_replays)
    assert_same(off, on)
  end)

  describe("hits and misses", function()
    local env
    before_each(function()
      env = testing.env({ options = CACHE_ON })
      register(env)
    end)
    after_each(function() env:close() end)

    local function m(w, name, labels) return env:metrics(w, name, labels) end

    -- Drive "Events" through its three events, calling between(k) before each raise.
    local function drive(id, between)
      env:start(id, "Events")
      for k = 1, 3 do
        env:run_until_idle()
        between(k)
        env:raise_event(id, "step", k * 10)
      end
      local st = env:run_until_complete(id)
      assert.are.equal("Completed", st.status, st.error and st.error.message)
      return canonical(env:history(id))
    end

    it("a hit and a miss continue the same way", function()
      local reference = drive("all-hits", function() end)
      assert.are.equal(3, m("w1", "duroxide_orchestration_cache_hits_total"))
      -- the worker restarts before the second event: that turn replays (absent), the last
      -- one resumes the code the replay rebuilt
      local mixed = drive("restarted", function(k)
        if k == 2 then env:restart_worker("w1") end
      end)
      assert.are.equal(reference:gsub("all%-hits", "restarted"), mixed)
      assert.are.equal(1, m("w1", "duroxide_orchestration_cache_misses_total", { reason = "absent" }))
      assert.are.equal(1, m("w1", "duroxide_orchestration_cache_hits_total"))
    end)

    it("another worker's turn makes the cached copy stale: it is dropped and replayed", function()
      local reference = drive("ref", function() end)
      local w1 = env.workers.w1.rt
      local mixed = drive("moved", function(k)
        if k == 2 then
          -- w1 holds the instance's code from its first turns; w2 takes the second event
          w1:_stall(true)
          env:add_worker("w2")
        elseif k == 3 then
          env:shutdown_worker("w2")
          w1:_stall(false)
        end
      end)
      assert.are.equal(reference:gsub("ref", "moved"), mixed)
      assert.are.equal(1, m("w1", "duroxide_orchestration_cache_misses_total", { reason = "stale" }))
      assert.are.equal(0, m("w1", "duroxide_orchestration_cache_misses_total", { reason = "absent" }))
    end)

    it("evicts the least recently used instances past the budget", function()
      env:close()
      env = testing.env({ options = { orchestration_cache_size = "24k" } })
      register(env)
      for i = 1, 12 do env:start("w" .. i, "Waits") end
      env:run_until_idle()
      local entries = m("w1", "duroxide_orchestration_cache_entries")
      assert.is_true(entries >= 1 and entries < 12, "entries " .. entries)
      assert.is_true(m("w1", "duroxide_orchestration_cache_bytes") <= 24 * 1024)
      assert.is_true(m("w1", "duroxide_orchestration_cache_evictions_total") >= 12 - entries)
      for i = 1, 12 do env:raise_event("w" .. i, "go", i) end
      env:run_until_idle()
      for i = 1, 12 do env:raise_event("w" .. i, "go", i * 2) end
      for i = 1, 12 do
        local st = env:run_until_complete("w" .. i)
        assert.are.equal("Completed", st.status)
        assert.are.equal(i * 2, st.output)
      end
      assert.is_true(m("w1", "duroxide_orchestration_cache_misses_total", { reason = "absent" }) > 0)
    end)

    it("an orchestration registered again runs its new code, as a replay would", function()
      local function register_waits(out)
        env:register_orchestration("Swapped", function(ctx)
          ctx:schedule_wait("go"):await()
          return out
        end)
      end
      register_waits("old")
      env:start("swap", "Swapped")
      env:run_until_idle()
      assert.are.equal(1, m("w1", "duroxide_orchestration_cache_entries"))
      register_waits("new")
      env:raise_event("swap", "go", 1)
      local st = env:run_until_complete("swap")
      assert.are.equal("new", st.output)
      assert.are.equal(1, m("w1", "duroxide_orchestration_cache_misses_total", { reason = "code" }))
    end)

    it("a store that sent only the last event of a history that is not the cached one: " ..
       "fetched again whole", function()
      env:register_orchestration("Twice", function(ctx)
        local a = ctx:schedule_wait("go"):await()
        return { a, ctx:schedule_wait("go"):await() }
      end)
      env:start("re", "Twice")
      env:run_until_idle() -- w1 holds "re": OrchestrationStarted, ExternalSubscribed
      local w1 = env.workers.w1.rt
      w1:_stall(true)
      env:add_worker("w2")
      assert(env.client:delete("re", { force = true }))
      env:advance(1000)
      env:start("re", "Twice") -- the same id again, as long a history, other events
      env:run_until_idle()
      env:shutdown_worker("w2")
      w1:_stall(false)
      env:raise_event("re", "go", 1)
      env:raise_event("re", "go", 2)
      local st = env:run_until_complete("re")
      assert.are.equal("Completed", st.status)
      assert.are.same({ 1, 2 }, st.output)
      -- the fetch sent the last event only (w1's hint matched the length); its copy differed
      assert.are.equal(1, m("w1", "duroxide_orchestration_cache_misses_total", { reason = "stale" }))
      assert.are.equal(1, m("w1", "duroxide_orchestration_cache_misses_total", { reason = "absent" }))
      assert.are.equal(1, m("w1", "duroxide_orchestration_turns_total", { outcome = "abandoned" }))
    end)

    it("refuses a bad size naming the option", function()
      local ok, err = pcall(testing.env, { options = { orchestration_cache_size = "lots" } })
      assert.is_false(ok)
      assert.matches("orchestration%-cache%-size", tostring(err))
    end)
  end)
end)
