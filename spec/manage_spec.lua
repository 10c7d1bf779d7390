-- Management from Lua: client:list, describe, executions, history of any execution, delete,
-- purge, prune, terminate (issue 10). Bad input returns nil, err naming the problem.
local duroxide = require("duroxide")
local H = require("helpers")

local function ids_of(rows)
  local out = {}
  for _, r in ipairs(rows) do out[#out + 1] = r.instance_id end
  return out
end

local function find(rows, id)
  for _, r in ipairs(rows) do if r.instance_id == id then return r end end
end

describe("management", function()
  local env, echo, waiter, parent, looper, busy, timed, working
  before_each(function()
    env = H.env()
    echo = env:orchestration("Echo", function(ctx, input) return input end)
    waiter = env:orchestration("Waiter", function(ctx)
      return ctx:schedule_wait("go"):await()
    end)
    parent = env:orchestration("Parent", function(ctx, child_id)
      return ctx:schedule_sub_orchestration(waiter, nil, child_id):await()
    end)
    looper = env:orchestration("Looper", function(ctx, n)
      if n < 3 then ctx:continue_as_new(n + 1) end
      return n
    end)
    busy = env:activity("Busy", function(actx)
      while not actx:is_cancelled() do actx:sleep(20) end
      return "stopped"
    end)
    timed = env:orchestration("Timed", function(ctx)
      ctx:schedule_timer(3600000):await()
      return "late"
    end)
    working = env:orchestration("Working", function(ctx)
      return ctx:schedule_activity(busy, nil):await()
    end)
  end)
  after_each(function() env:close() end)

  describe("list", function()
    it("returns rows newest first with times, status, name, version and execution", function()
      local a = env:start(echo, 1)
      env:wait(a)
      local b = env:start(waiter)
      env:await_event(b, "ExternalSubscribed")
      local rows, nxt = env.client:list()
      assert.is_nil(nxt)
      assert.are.same({ b, a }, ids_of(rows))
      local ra, rb = find(rows, a), find(rows, b)
      assert.are.equal("Completed", ra.status)
      assert.are.equal(echo, ra.orchestration)
      assert.are.equal(1, ra.output)
      assert.are.equal(1, ra.execution_id)
      assert.is_true(ra.created_at_ms > 0 and ra.updated_at_ms >= ra.created_at_ms)
      assert.is_string(ra.version)
      assert.are.equal("Running", rb.status)
      assert.are.equal(waiter, rb.orchestration)
    end)

    it("filters by status and name and pages with a cursor", function()
      local done = {}
      for i = 1, 5 do done[i] = env:start(echo, i) end
      for i = 1, 5 do env:wait(done[i]) end
      local w = env:start(waiter)
      env:await_event(w, "ExternalSubscribed")
      assert.are.same({ w }, ids_of(env.client:list { status = "Running" }))
      assert.are.equal(5, #env.client:list { status = "Completed" })
      assert.are.equal(5, #env.client:list { name = echo })
      assert.are.same({}, env.client:list { name = "NoSuchName" })
      -- pages of two cover everything once, in order
      local seen, after, pages = {}, nil, 0
      repeat
        local rows, nxt = env.client:list { limit = 2, after = after }
        assert.is_true(#rows <= 2)
        for _, r in ipairs(rows) do
          assert.is_nil(seen[r.instance_id], r.instance_id)
          seen[#seen + 1] = r.instance_id
          seen[r.instance_id] = true
        end
        after, pages = nxt, pages + 1
      until not after
      assert.are.equal(6, #seen)
      assert.are.equal(3, pages)
      assert.are.same(ids_of(env.client:list { limit = 100 }), { table.unpack(seen) })
      -- a page asked for after the newest instance was created still continues where it was
      local first, nxt = env.client:list { limit = 3 }
      local late = env:start(echo, "late")
      env:wait(late)
      local rest = env.client:list { limit = 100, after = nxt }
      assert.are.equal(3, #rest)
      assert.is_nil(find(rest, late))
      assert.is_nil(find(rest, first[1].instance_id))
      -- created_after keeps only newer instances
      local cut = env.client:status(done[5]) and find(env.client:list { limit = 100 }, done[5]).created_at_ms
      local newer = env.client:list { created_after = cut, limit = 100 }
      assert.is_nil(find(newer, done[5]))
      assert.truthy(find(newer, late))
    end)

    it("includes instances queued but never run, as Pending", function()
      local dir = H.tmpdir()
      local c = duroxide.client(dir)  -- no worker runs on this store
      assert(c:start("q-1", "NotRegisteredHere", { x = 1 }))
      assert(c:start("q-2", "NotRegisteredHere", nil, "1.2.0"))
      local rows = c:list()
      assert.are.same({ "q-2", "q-1" }, ids_of(rows))
      assert.are.equal("Pending", rows[1].status)
      assert.are.equal("NotRegisteredHere", rows[1].orchestration)
      assert.are.equal("1.2.0", rows[1].version)
      assert.are.equal(0, rows[1].execution_id)
      assert.is_true(rows[1].created_at_ms > 0)
      assert.are.same({ "q-2", "q-1" }, ids_of(c:list { status = "Pending" }))
      assert.are.same({}, c:list { status = "Running" })
      local p1, nxt = c:list { limit = 1 }
      assert.are.same({ "q-2" }, ids_of(p1))
      assert.are.same({ "q-1" }, ids_of(c:list { limit = 1, after = nxt }))
      local d = c:describe("q-1")
      assert.are.equal("Pending", d.status)
      assert.are.same({}, d.executions)
      assert.are.equal("StartOrchestration", d.queued_messages[1].type)
      c:close()
      H.rmdir(dir)
    end)

    it("refuses bad filters with nil, err naming the problem", function()
      local cases = {
        { { status = "Bogus" }, "list status must be Pending, Running, Completed or Failed" },
        { { limit = 0 }, "list limit must be an integer from 1 to 1000" },
        { { limit = 1001 }, "list limit" },
        { { after = "garbage" }, "list cursor 'garbage' is not a cursor from a previous page" },
        { { created_after = "yesterday" }, "list created_after: 'yesterday' is not a time" },
        { "not a table", "list filter must be a table" },
      }
      for _, case in ipairs(cases) do
        local rows, err = env.client:list(case[1])
        assert.is_nil(rows)
        assert.matches(case[2], err.message, 1, true)
      end
    end)
  end)

  describe("describe", function()
    it("shows the pending timer, subscribed events, children and parent", function()
      local t = env:start(timed)
      env:await_event(t, "TimerCreated")
      local d = env.client:describe(t)
      assert.are.equal("Running", d.status)
      assert.are.equal(1, #d.pending_timers)
      assert.is_true(d.pending_timers[1].fire_at_ms > d.created_at_ms + 3000000)
      assert.are.equal(1, #d.executions)
      assert.are.equal("Running", d.executions[1].status)

      local child = H.unique("child")
      local p = env:start(parent, child)
      env:await_event(child, "ExternalSubscribed")
      local dp = env.client:describe(p)
      assert.are.same({ child }, dp.children)
      local dc = env.client:describe(child)
      assert.are.equal(p, dc.parent_instance)
      assert.are.same({ { name = "go", waiting = 1 } }, dc.subscribed_events)
    end)

    it("shows a running activity with its attempt and lock", function()
      local t = env:start(working)
      env:await_event(t, "ActivityScheduled")
      env:run_until(function()
        local d = env.client:describe(t)
        return #d.pending_activities == 1 and d.pending_activities[1].locked_until_ms ~= nil
      end)
      local a = env.client:describe(t).pending_activities[1]
      assert.are.equal(busy, a.name)
      assert.are.equal(1, a.attempt)
      assert.is_true(a.locked_until_ms > 0)
    end)

    it("shows a start waiting in unregistered backoff with the reason", function()
      assert(env.client:start("unreg-1", "NoSuchOrchestration", nil))
      env:run_until(function()
        return env.client:describe("unreg-1").start_backoff ~= nil
      end)
      local d = env.client:describe("unreg-1")
      assert.are.equal("Pending", d.status)
      assert.are.equal("NoSuchOrchestration", d.orchestration)
      assert.is_true(d.start_backoff.attempt >= 1)
      assert.matches("orchestration 'NoSuchOrchestration' was not registered", d.start_backoff.reason, 1, true)
    end)

    it("refuses unknown and bad ids", function()
      local d, err = env.client:describe("nobody")
      assert.is_nil(d)
      assert.matches("unknown instance 'nobody'", err.message, 1, true)
      d, err = env.client:describe("")
      assert.is_nil(d)
      assert.matches("instance id", err.message, 1, true)
      d, err = env.client:describe(42)
      assert.is_nil(d)
      assert.matches("instance id must be a string", err.message, 1, true)
    end)
  end)

  describe("executions, history and prune", function()
    it("lists every execution of a continue-as-new instance and reads any of them", function()
      local st, id = env:run(looper, 1)
      assert.are.equal(3, st.output)
      local ex = env.client:executions(id)
      assert.are.same({ 1, 2, 3 }, { ex[1].execution_id, ex[2].execution_id, ex[3].execution_id })
      assert.are.equal("ContinuedAsNew", ex[1].status)
      assert.are.equal("Completed", ex[3].status)
      assert.is_true(ex[1].event_count >= 2)
      local h1 = env.client:history(id, 1)
      assert.are.equal(1, h1[1].data)
      assert.are.equal("OrchestrationContinuedAsNew", h1[#h1].type)
      -- keep the newest one
      assert.are.equal(2, env.client:prune(id, 1))
      ex = env.client:executions(id)
      assert.are.equal(1, #ex)
      assert.are.equal(3, ex[1].execution_id)
      local h, err = env.client:history(id, 1)
      assert.is_nil(h)
      assert.matches("instance '" .. id .. "' has no execution 1", err.message, 1, true)
      assert.are.equal(3, env.client:status(id).output)
      assert.are.equal(0, env.client:prune(id, 1))
    end)

    it("refuses bad prune input", function()
      local _, id = env:run(looper, 1)
      local n, err = env.client:prune(id, 0)
      assert.is_nil(n)
      assert.matches("prune keep must be an integer of at least 1", err.message, 1, true)
      n, err = env.client:prune("nobody", 1)
      assert.is_nil(n)
      assert.matches("unknown instance 'nobody'", err.message, 1, true)
      n, err = env.client:executions("nobody")
      assert.is_nil(n)
      assert.matches("unknown instance 'nobody'", err.message, 1, true)
    end)
  end)

  describe("delete", function()
    it("refuses a running instance without force and a sub-orchestration on its own", function()
      local child = H.unique("child")
      local p = env:start(parent, child)
      env:await_event(child, "ExternalSubscribed")
      local n, err = env.client:delete(p)
      assert.is_nil(n)
      assert.matches("instance '" .. p .. "' is running; use force", err.message, 1, true)
      n, err = env.client:delete(child, { force = true })
      assert.is_nil(n)
      assert.matches("is a sub-orchestration of '" .. p .. "'; delete its root '" .. p .. "'",
        err.message, 1, true)
      -- nothing changed
      assert.are.equal("Running", env.client:status(child).status)
      assert.are.equal(2, env.client:delete(p, { force = true }))
      assert.are.equal("NotFound", env.client:status(p).status)
      assert.are.equal("NotFound", env.client:status(child).status)
      assert.are.same({}, env.client:list())
      -- the id can be used again
      env:start(echo, "again", p)
      assert.are.equal("again", env:wait(p).output)
    end)

    it("deletes a finished instance and says so for unknown ids", function()
      local _, id = env:run(echo, 1)
      assert.are.equal(1, env.client:delete(id))
      local n, err = env.client:delete(id)
      assert.is_nil(n)
      assert.matches("unknown instance '" .. id .. "'", err.message, 1, true)
      n, err = env.client:delete(id, "force")
      assert.is_nil(n)
      assert.matches("delete options must be a table", err.message, 1, true)
    end)
  end)

  describe("terminate", function()
    it("fails a running instance at once and its children too; the parent hears of a child", function()
      local child = H.unique("child")
      local p = env:start(parent, child)
      env:await_event(child, "ExternalSubscribed")
      assert.are.equal(2, env.client:terminate(p, "operator said so"))
      local st = env.client:status(p)
      assert.are.equal("Failed", st.status)
      assert.are.equal("Terminated", st.error.kind)
      assert.are.equal("terminated: operator said so", st.error.message)
      assert.are.equal("Failed", env.client:status(child).status)
      -- a second terminate is refused
      local n, err = env.client:terminate(p)
      assert.is_nil(n)
      assert.matches("is not running (Failed)", err.message, 1, true)

      -- terminating only a child fails it; its parent receives the failure and fails too
      local child2 = H.unique("child")
      local p2 = env:start(parent, child2)
      env:await_event(child2, "ExternalSubscribed")
      assert.are.equal(1, env.client:terminate(child2))
      env:await_event(p2, "SubOrchestrationFailed")
      local failed = H.events_of(env.client:history(p2), "SubOrchestrationFailed")[1]
      assert.are.equal("terminated: by operator", failed.error.message)
      assert.are.equal("Completed", env:wait(p2).status) -- its code saw nil, err and returned
    end)

    it("refuses unknown ids and bad reasons", function()
      local n, err = env.client:terminate("nobody")
      assert.is_nil(n)
      assert.matches("unknown instance 'nobody'", err.message, 1, true)
      n, err = env.client:terminate("x", {})
      assert.is_nil(n)
      assert.matches("terminate reason must be a string", err.message, 1, true)
    end)
  end)

  describe("purge", function()
    it("deletes finished instances before a time in batches, dry run first", function()
      local ids = {}
      for i = 1, 5 do ids[i] = env:start(echo, i) end
      for i = 1, 5 do env:wait(ids[i]) end
      local w = env:start(waiter)
      env:await_event(w, "ExternalSubscribed")
      -- the engine's clock (other specs in this process may have moved it forward)
      local r = env.client:purge { completed_before = duroxide._clock_now() + 60000, dry_run = true }
      assert.are.same({ matched = 5, deleted = 5, batches = 0 }, r)
      assert.are.equal(6, #env.client:list())
      r = env.client:purge { completed_before = duroxide._clock_now() + 60000, batch = 2 }
      assert.are.equal(5, r.matched)
      assert.are.equal(5, r.deleted)
      assert.are.equal(3, r.batches)
      assert.are.same({ w }, ids_of(env.client:list()))
      r = env.client:purge { completed_before = "0ms" }
      assert.are.same({ matched = 0, deleted = 0, batches = 0 }, r)
    end)

    it("refuses bad purge input", function()
      local cases = {
        { {}, "purge needs completed_before" },
        { { completed_before = "soon" }, "purge completed_before: 'soon' is not a time" },
        { { completed_before = "1h", status = "Running" }, "purge status must be Completed or Failed" },
        { { completed_before = "1h", batch = 5000 }, "purge batch" },
      }
      for _, case in ipairs(cases) do
        local r, err = env.client:purge(case[1])
        assert.is_nil(r)
        assert.matches(case[2], err.message, 1, true)
      end
    end)
  end)
end)
