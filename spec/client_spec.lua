-- Client API: start, status, wait, raise_event, raise_many, cancel, history, list.
local duroxide = require("duroxide")
local H = require("helpers")

describe("client", function()
  local env, echo, waiter
  before_each(function()
    env = H.env()
    echo = env:orchestration("Echo", function(ctx, input) return input end)
    waiter = env:orchestration("Waiter", function(ctx)
      return ctx:schedule_wait("go"):await()
    end)
  end)
  after_each(function() env:close() end)

  it("starts an instance and returns its id", function()
    assert.are.equal("c-1", env.client:start("c-1", echo, { a = 1 }))
    local st = env:wait("c-1")
    assert.are.equal("Completed", st.status)
    assert.are.equal("c-1", st.instance_id)
    assert.are.equal(echo, st.orchestration)
    assert.are.same({ a = 1 }, st.output)
  end)

  it("refuses to start the same id twice", function()
    assert.truthy(env.client:start("dup", echo, 1))
    assert.are.equal(1, env:wait("dup").output)
    local ok, err = env.client:start("dup", echo, 2)
    assert.is_nil(ok)
    assert.matches("already exists", err.message, 1, true)
    assert.matches("already exists", tostring(err), 1, true)
    assert.are.equal("client", err.category)
    -- the first instance is untouched
    assert.are.equal(1, env:wait("dup").output)
    -- a running instance is protected the same way
    local id = env:start(waiter)
    env:await_event(id, "ExternalSubscribed")
    ok, err = env.client:start(id, echo, 3)
    assert.is_nil(ok)
    assert.matches("already exists", err.message, 1, true)
  end)

  it("refuses a second start of the same id before the runtime has picked up the first", function()
    -- start_many queues the start (client:start would hand it to this state's runtime, which
    -- runs its first turn at once: eager_start_spec)
    assert.are.equal(1, env.client:start_many({ { "quick-dup", echo, "first" } }))
    assert.are.equal("Running", env.client:status("quick-dup").status)
    local ok, err = env.client:start("quick-dup", echo, "second")
    assert.is_nil(ok)
    assert.matches("already exists", err.message, 1, true)
    assert.are.equal("first", env:wait("quick-dup").output)
  end)

  it("reports NotFound for an unknown instance", function()
    local st = env.client:status("no-such-instance")
    assert.are.equal("NotFound", st.status)
    assert.are.equal("no-such-instance", st.instance_id)
  end)

  it("reports Running while an instance waits", function()
    local id = env:start(waiter)
    env:await_event(id, "ExternalSubscribed")
    local st = env.client:status(id)
    assert.are.equal("Running", st.status)
    assert.are.equal(waiter, st.orchestration)
    assert.are.equal(1, st.execution_id)
    assert.is_nil(st.output)
  end)

  it("wait returns nil, err (and the last status) on timeout", function()
    local id = env:start(waiter)
    local st, err, last = env.client:wait(id, 50)
    assert.is_nil(st)
    assert.matches("timed out", err.message, 1, true)
    assert.are.equal("Running", last.status)
  end)

  it("raise_event delivers data to a waiting instance", function()
    local id = env:start(waiter)
    env:await_event(id, "ExternalSubscribed")
    assert.is_true(env.client:raise_event(id, "go", { "a", duroxide.null, 2.0 }))
    local st = env:wait(id)
    assert.are.equal("Completed", st.status)
    assert.are.same({ "a", duroxide.null, 2.0 }, st.output)
    assert.are.equal("float", math.type(st.output[3]))
  end)

  it("raise_event to an unknown instance returns nil, err", function()
    local ok, err = env.client:raise_event("nobody-home", "go", 1)
    assert.is_nil(ok)
    assert.is_string(err.message)
    assert.is_true(#err.message > 0)
  end)

  it("raise_many raises every event in one call, in order, and returns the count", function()
    local pair = env:orchestration("Pair", function(ctx)
      local a = ctx:schedule_wait("go"):await()
      local b = ctx:schedule_wait("go"):await()
      return { a, b == nil and "null" or b }
    end)
    local p1, p2 = env:start(pair), env:start(pair)
    env:await_event(p1, "ExternalSubscribed")
    env:await_event(p2, "ExternalSubscribed")
    assert.are.equal(4, env.client:raise_many({ { p1, "go", "a1" }, { p2, "go", { n = 2 } },
                                                { p1, "go", "a2" }, { p2, "go" } }))
    assert.are.same({ "a1", "a2" }, env:wait(p1).output)
    local out = env:wait(p2).output
    assert.are.same({ n = 2 }, out[1])
    assert.are.equal("null", out[2]) -- absent data is null
    assert.are.equal(0, env.client:raise_many({}))
  end)

  it("raise_many: a bad entry returns nil, err naming it and raises nothing", function()
    local id = env:start(waiter)
    env:await_event(id, "ExternalSubscribed")
    local ok, err = env.client:raise_many({ { id, "go", 1 }, { "nobody-home", "go", 2 } })
    assert.is_nil(ok)
    assert.are.equal("client", err.category)
    assert.matches("entry 2: unknown instance 'nobody-home'", err.message, 1, true)
    ok, err = env.client:raise_many({ { id, "go", 1 }, { id, string.rep("e", 401), 2 } })
    assert.is_nil(ok)
    assert.matches("entry 2: event name is 401 bytes", err.message, 1, true)
    ok, err = env.client:raise_many({ { id, "go", "{" }, { id, "go", string.rep("x", 300000) } })
    assert.is_nil(ok)
    assert.matches("entry 2: event data: payload is", err.message, 1, true)
    -- nothing reached the instance: the next single raise is the first event it sees
    assert.is_true(env.client:raise_event(id, "go", "only"))
    assert.are.equal("only", env:wait(id).output)
    local events = 0
    for _, e in ipairs(env.client:history(id)) do
      if e.type == "ExternalEvent" then events = events + 1 end
    end
    assert.are.equal(1, events)
  end)

  it("raise_many raises on a malformed argument, naming the entry", function()
    local id = env:start(waiter)
    local cases = {
      { { { id, "go" }, "x" }, "raise_many: entry 2 must be {id, name [, data]}" },
      { { { id } }, "raise_many: entry 1 must be {id, name [, data]}" },
      { { { id, 7 } }, "raise_many: entry 1 must be {id, name [, data]}" },
      { { { id, "g\0o" } }, "raise_many: entry 1: event name must not contain a NUL byte" },
      { { { id, "go", function() end } }, "raise_many: entry 1: data" },
    }
    for _, case in ipairs(cases) do
      local ok, err = pcall(env.client.raise_many, env.client, case[1])
      assert.is_false(ok)
      assert.matches(case[2], tostring(err), 1, true)
    end
    assert.has_error(function() env.client:raise_many("x") end)
    assert.is_true(env.client:raise_event(id, "go", "after"))
    assert.are.equal("after", env:wait(id).output)
  end)

  it("cancel fails a running instance with a canceled error", function()
    local id = env:start(waiter)
    env:await_event(id, "ExternalSubscribed")
    assert.is_true(env.client:cancel(id, "no longer needed"))
    local st = env:wait(id)
    assert.are.equal("Failed", st.status)
    assert.matches("cancel", st.error.message:lower(), 1, true)
    assert.matches("canceled", st.error.message, 1, true)
    local h = env.client:history(id)
    assert.are.equal(1, #H.events_of(h, "OrchestrationCancelRequested"))
    assert.are.equal("OrchestrationFailed", h[#h].type)
  end)

  it("cancel of an unknown instance returns nil, err", function()
    local ok, err = env.client:cancel("nobody-home", "why")
    assert.is_nil(ok)
    assert.is_string(err.message)
  end)

  it("history returns the events with their types in order", function()
    local act = env:activity("Step", function(actx, v) return v end)
    local orch = env:orchestration("WithStep", function(ctx, v)
      return assert(ctx:schedule_activity(act, v):await())
    end)
    local st, id = env:run(orch, "v")
    assert.are.equal("Completed", st.status)
    local h = env.client:history(id)
    local types = {}
    for i, e in ipairs(h) do
      types[i] = e.type
      assert.are.equal(i, e.event_id)
      assert.are.equal("integer", math.type(e.timestamp_ms))
    end
    assert.are.same({ "OrchestrationStarted", "ActivityScheduled", "ActivityCompleted",
                      "OrchestrationCompleted" }, types)
    assert.are.equal(orch, h[1].name)
    assert.are.equal("v", h[1].data)
    assert.are.equal(act, h[2].name)
    assert.are.equal(2, h[3].source_event_id)
  end)

  it("history of an unknown instance is empty", function()
    local h = env.client:history("nobody-home")
    assert.are.same({}, h or {})
  end)

  it("list includes the started instances", function()
    local ids = { env:start(echo, 1), env:start(echo, 2), env:start(waiter) }
    -- list shows instances once their first turn has been recorded
    env:run_until(function()
      for _, id in ipairs(ids) do
        if #(env.client:history(id) or {}) == 0 then return false end
      end
      return true
    end)
    local listed = {}
    for _, row in ipairs(env.client:list()) do listed[row.instance_id] = true end
    for _, id in ipairs(ids) do assert.is_true(listed[id], id) end
  end)

  it("a second client on the same store sees the same instances", function()
    local st, id = env:run(echo, "shared")
    local other = duroxide.client(env.dir)
    assert.are.same(st, other:status(id))
    other:close()
    assert.has_error(function() other:status(id) end, "client is closed")
  end)
end)
