-- Bad input at the Lua API's edges: text with NUL bytes is refused (C would cut it at the
-- NUL and act on another id or name), a store that is not a path is refused, and a huge
-- timeout waits instead of wrapping around.
local duroxide = require("duroxide")
local H = require("helpers")

local function refused(pattern, fn, ...)
  local ok, err = pcall(fn, ...)
  assert.is_false(ok, "expected an error matching " .. pattern)
  assert.matches(pattern, tostring(err), 1, true)
end

describe("NUL bytes in ids and names", function()
  local env, echo
  before_each(function()
    env = H.env()
    echo = env:orchestration("Echo", function(ctx, input) return input end)
  end)
  after_each(function() env:close() end)

  it("are refused by client:start and nothing is started", function()
    refused("instance id must not contain a NUL byte", env.client.start, env.client, "a\0b", echo, 1)
    assert.are.equal("NotFound", env.client:status("a").status)
    refused("orchestration name must not contain a NUL byte", env.client.start, env.client, "n1",
            echo .. "\0junk", 1)
    assert.are.equal("NotFound", env.client:status("n1").status)
    refused("version must not contain a NUL byte", env.client.start, env.client, "n2", echo, 1,
            "1.0.0\0x")
    assert.are.equal("NotFound", env.client:status("n2").status)
    assert.are.same({}, env.client:list())
  end)

  it("are refused by start_many, naming the entry, and nothing is started", function()
    refused("start_many: entry 2: instance id must not contain a NUL byte", env.client.start_many,
            env.client, { { "m1", echo, 1 }, { "m2\0x", echo, 2 } })
    assert.are.same({}, env.client:list())
  end)

  it("are refused by raise_event, cancel, status, wait and history", function()
    local waiter = env:orchestration("Waiter", function(ctx)
      return ctx:schedule_wait("go"):await()
    end)
    local id = env:start(waiter)
    env:await_event(id, "ExternalSubscribed")
    refused("event name must not contain a NUL byte", env.client.raise_event, env.client, id,
            "go\0x", 1)
    refused("instance id must not contain a NUL byte", env.client.raise_event, env.client,
            id .. "\0x", "go", 1)
    refused("cancel reason must not contain a NUL byte", env.client.cancel, env.client, id, "r\0x")
    refused("instance id must not contain a NUL byte", env.client.cancel, env.client, id .. "\0x")
    refused("instance id must not contain a NUL byte", env.client.status, env.client, id .. "\0x")
    refused("instance id must not contain a NUL byte", env.client.wait, env.client, id .. "\0x", 10)
    refused("instance id must not contain a NUL byte", env.client.history, env.client, id .. "\0x")
    -- none of them reached the instance: it still waits, then completes with the real event
    assert.are.equal(0, #H.events_of(env.client:history(id), "ExternalEvent"))
    assert.truthy(env.client:raise_event(id, "go", "ok"))
    assert.are.equal("ok", env:wait(id).output)
  end)

  it("are refused in registrations", function()
    refused("activity name must not contain a NUL byte", duroxide.activity, "A\0B", function() end)
    refused("orchestration name must not contain a NUL byte", duroxide.orchestration, "O\0P",
            function() end)
    refused("version must not contain a NUL byte", duroxide.orchestration, H.unique("V"),
            function() end, { version = "1.0.0\0x" })
  end)

  it("fail the orchestration that passes them to ctx calls, naming the argument", function()
    local act = env:activity("Act", function() return 1 end)
    local cases = {
      function(ctx) return ctx:schedule_activity(act .. "\0x", 1):await() end,
      function(ctx) return ctx:schedule_wait("ev\0x"):await() end,
      function(ctx) return ctx:schedule_sub_orchestration(echo, 1, "child\0x"):await() end,
      function(ctx) return ctx:schedule_activity_on_session(act, 1, "s\0x"):await() end,
    }
    local want = { "name must not contain a NUL byte", "name must not contain a NUL byte",
                   "instance id must not contain a NUL byte",
                   "session id must not contain a NUL byte" }
    for i, fn in ipairs(cases) do
      local st = env:run(env:orchestration("Nul", fn))
      assert.are.equal("Failed", st.status)
      assert.matches(want[i], st.error.message, 1, true)
    end
  end)

  it("in option values are refused", function()
    refused("worker_node_id must not contain a NUL byte", duroxide.runtime,
            { store = env.dir, worker_node_id = "w\0x" })
  end)
end)

describe("store that is not a directory path", function()
  it("is refused by duroxide.client, duroxide.runtime and duroxide.configure", function()
    refused("store (a directory path) must be a string, got table", duroxide.client, { store = {} })
    refused("store (a directory path) must be a string, got boolean", duroxide.client,
            { store = true })
    refused("store (a directory path) must not contain a NUL byte", duroxide.client,
            { store = "/tmp/x\0y" })
    refused("store (a directory path) must be a string, got table", duroxide.runtime, { store = {} })
    refused("store (a directory path) must be a string, got table", duroxide.configure,
            { store = {} })
  end)
end)

describe("client:wait timeouts", function()
  it("waits with math.maxinteger instead of wrapping around to an immediate timeout", function()
    H.with_env(function(env)
      local slow = env:activity("Slow", function(actx)
        actx:sleep(200)
        return "done"
      end)
      local orch = env:orchestration("Slow", function(ctx)
        return ctx:schedule_activity(slow):await()
      end)
      local id = env:start(orch)
      local st, err = env.client:wait(id, math.maxinteger)
      assert.is_nil(err)
      assert.are.equal("Completed", st.status)
      assert.are.equal("done", st.output)
    end)
  end)

  it("refuses a negative timeout or execution id", function()
    H.with_env(function(env)
      refused("timeout must be >= 0 ms", env.client.wait, env.client, "x", -1)
      refused("execution_id must be >= 0", env.client.history, env.client, "x", -1)
    end)
  end)
end)

describe("the runtime from inside its own activities", function()
  it("refuses rt:stop() there (it would re-enter the running loop) and keeps serving", function()
    H.with_env(function(env)
      local act = env:activity("StopMe", function()
        local ok, err = pcall(env.rt.stop, env.rt)
        return { ok = ok, err = tostring(err) }
      end)
      local orch = env:orchestration("StopMe", function(ctx)
        return ctx:schedule_activity(act):await()
      end)
      local st = env:run(orch)
      assert.are.equal("Completed", st.status)
      assert.is_false(st.output.ok)
      assert.matches("cannot stop a runtime from inside a callback or activity", st.output.err,
                     1, true)
      local echo = env:orchestration("Echo", function(ctx, input) return input end)
      assert.are.equal("after", env:run(echo, "after").output)
    end)
  end)
end)
