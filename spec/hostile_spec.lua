-- Hostile orchestration code (issue 7, items 6-9 and 20): every attack fails its own instance
-- cleanly, and the worker keeps serving others with unchanged results. The same attacks run
-- against a real worker process (and SIGTERM) in tests/e2e_hostile.sh.
local duroxide = require("duroxide")
local H = require("helpers")

describe("hostile orchestration code", function()
  local env
  -- a small budget keeps the runaway cases short (the turns read duroxide.configure's value)
  before_each(function()
    duroxide.configure({ turn_instruction_budget = 2000000 })
    env = H.env({ turn_instruction_budget = 2000000 })
  end)
  after_each(function()
    env:close()
    duroxide.configure({ turn_instruction_budget = 50000000 })
  end)

  -- An innocent orchestration, run after each attack: its result must not have changed.
  local function check_innocent()
    local act = env:activity("Echo", function(_, v) return v end)
    local orch = env:orchestration("Innocent", function(ctx, v)
      local got = assert(ctx:schedule_activity(act, v):await())
      return {
        rep = string.rep("ab", 2), upper = ("x"):upper(), fmt = string.format("%d", 7),
        floor = math.floor(2.5), concat = table.concat({ "a", "b" }), got = got,
        global = rawequal(shared_global, nil), -- luacheck: ignore
        timer_type = type(ctx.schedule_timer),
      }
    end)
    local st = env:run(orch, "v")
    assert.are.equal("Completed", st.status, st.error and st.error.message)
    assert.are.same({ rep = "abab", upper = "X", fmt = "7", floor = 2, concat = "ab", got = "v",
                      global = true, timer_type = "function" }, st.output)
    -- and outside orchestrations, too
    assert.are.equal("abab", string.rep("ab", 2))
    assert.are.equal("X", ("x"):upper())
  end

  local function run_attack(base, fn)
    local orch = env:orchestration(base, fn)
    return env:run(orch, nil, 120000)
  end

  describe("isolation (item 6)", function()
    it("gives each instance its own globals", function()
      local orch = env:orchestration("Globals", function(ctx)
        counter = (counter or 0) + 1 -- luacheck: ignore
        _G.other = (_G.other or 0) + 1
        local f = load("seen = (seen or 0) + 1; return seen")
        return { counter = counter, other = other, loaded = f() } -- luacheck: ignore
      end)
      local a, b = env:run(orch), env:run(orch)
      assert.are.same({ counter = 1, other = 1, loaded = 1 }, a.output)
      assert.are.same({ counter = 1, other = 1, loaded = 1 }, b.output)
      assert.is_nil(rawget(_G, "counter"))
      assert.is_nil(rawget(_G, "other"))
    end)

    local writes = {
      { "string.rep", function() string.rep = function() return "evil" end end },
      { "table.concat", function() table.concat = function() return "evil" end end },
      { "math.floor", function() math.floor = function() return 42 end end },
      { "the string metatable", function() getmetatable("").__index = { upper = function() return "evil" end } end },
      { "a method through the string metatable", function() getmetatable("").__index.upper = function() return "evil" end end },
      { "the ctx metatable", function(ctx) getmetatable(ctx).x = 1 end },
      { "a ctx method", function(ctx) getmetatable(ctx).__index.schedule_timer = 1 end },
      { "a global library table", function() _G.string.format = nil end },
      { "rawset on a library view", function() rawset(string, "rep", function() return "evil" end) end },
      { "the globals metatable", function() setmetatable(_G, nil) end },
      { "debug.setmetatable", function() debug.setmetatable("", {}) end },
      { "a nested view", function() getmetatable("").__index.rep = nil end },
      { "the state of pairs(string)", function()
        local _, state = pairs(string)
        if type(state) == "table" then rawset(state, "rep", function() return "evil" end) end
        state.rep = function() return "evil" end
      end },
    }
    for _, case in ipairs(writes) do
      it("refuses a write to " .. case[1] .. " and others keep their results", function()
        local st = run_attack("Write", case[2])
        assert.are.equal("Failed", st.status)
        assert.are.equal("application", st.error.category)
        check_innocent()
      end)
    end

    it("names the read-only table in the error", function()
      local st = run_attack("WriteRep", function() string.rep = nil end)
      assert.are.equal("Failed", st.status)
      assert.matches("cannot assign string.rep: string is read-only in orchestrations",
                     st.error.message, 1, true)
    end)

    it("refuses writes made by a helper defined outside the orchestration", function()
      local function helper() string.rep = nil end
      local st = run_attack("HelperWrite", function() helper() end)
      assert.are.equal("Failed", st.status)
      assert.matches("string is read-only in orchestrations", st.error.message, 1, true)
      check_innocent()
    end)

    it("still lets orchestration code read and iterate the libraries", function()
      local st = run_attack("Reads", function(ctx)
        local n = 0
        for k, v in pairs(string) do if type(v) == "function" then n = n + 1 end end
        return { n = n > 10, pi = math.pi, mt = getmetatable("").__index.rep("a", 2),
                 same = getmetatable(ctx) == getmetatable(ctx) }
      end)
      assert.are.equal("Completed", st.status, st.error and st.error.message)
      assert.are.same({ n = true, pi = math.pi, mt = "aa", same = true }, st.output)
    end)
  end)

  describe("unreachable (item 7)", function()
    local cases = {
      { "binary chunks (mode b)", function() return load(string.dump(function() return 1 end), "x", "b") end,
        "binary chunks are not available" },
      { "package", function() return package.loaded end, "attempt to index a nil value" },
      { "package.loadlib", function() return package.loadlib("x", "y") end, "attempt to index a nil value" },
      { "require", function() return require("luv") end, "require is not available in orchestrations" },
      { "luv", function() return luv.now() end, "attempt to index a nil value" },
      { "duroxide.client", function() return duroxide.client({ store = "/tmp/x" }) end,
        "duroxide.client is not available in orchestrations" },
      { "duroxide.runtime", function() return duroxide.runtime({}) end,
        "duroxide.runtime is not available in orchestrations" },
      { "duroxide.orchestration", function() return duroxide.orchestration("X", function() end) end,
        "duroxide.orchestration is not available in orchestrations" },
      { "duroxide.configure", function() return duroxide.configure({}) end,
        "duroxide.configure is not available in orchestrations" },
      { "collectgarbage(\"stop\")", function() return collectgarbage("stop") end,
        "collectgarbage(\"stop\") is not available in orchestrations" },
      { "collectgarbage(\"incremental\")", function() return collectgarbage("incremental", 1000) end,
        "is not available in orchestrations" },
      { "os.exit", function() return os.exit(1) end, "os.exit is not available in orchestrations" },
      { "io.stdout", function() return io.stdout:write("x") end, "file:write is not available in orchestrations" },
      { "a __gc finalizer", function() return setmetatable({}, { __gc = function() end }) end,
        "finalizers (__gc) are not available in orchestrations" },
      { "the finalizer of io.stderr", function() return getmetatable(io.stderr).__gc(io.stderr) end,
        "attempt to call a nil value (field '__gc')" },
      { "the closer of io.stderr", function() return getmetatable(io.stderr).__close(io.stderr) end,
        "attempt to call a nil value (field '__close')" },
    }
    for _, case in ipairs(cases) do
      it("fails an orchestration that reaches " .. case[1], function()
        local st = run_attack("Reach", case[2])
        assert.are.equal("Failed", st.status)
        assert.matches(case[3], st.error.message, 1, true)
        check_innocent()
      end)
    end

    it("refuses a binary string given to load in text mode", function()
      local st = run_attack("LoadText", function()
        local f, err = load(string.dump(function() return 1 end), "x", "t")
        local g, err2 = load(string.dump(function() return 1 end))
        return { f = f == nil, err = err, g = g == nil, err2 = err2 }
      end)
      assert.are.equal("Completed", st.status, st.error and st.error.message)
      assert.is_true(st.output.f)
      assert.is_true(st.output.g)
      assert.matches("binary chunk", st.output.err, 1, true)
      assert.matches("binary chunk", st.output.err2, 1, true)
    end)

    it("refuses a luv module captured at load time", function()
      local uv = require("luv")
      local st = run_attack("CapturedLuv", function() return uv.now() end)
      assert.are.equal("Failed", st.status)
      assert.matches("luv.now is not available in orchestrations", st.error.message, 1, true)
      assert.is_number(uv.now()) -- unchanged outside
    end)

    it("refuses a client captured at load time", function()
      local client = env.client
      local st = run_attack("CapturedClient", function()
        return client:start("sneaky", "Anything", nil)
      end)
      assert.are.equal("Failed", st.status)
      assert.matches("client:start is not available in orchestrations", st.error.message, 1, true)
      assert.are.equal("NotFound", env.client:status("sneaky").status)
    end)

    it("still lets xpcall wrap an await (orchestrations and activities)", function()
      local act = env:activity("SleepyEcho", function(actx, v)
        local ok, r = xpcall(function() actx:sleep(5); return v end, debug.traceback)
        return ok and r
      end)
      local st = run_attack("XpcallAwait", function(ctx)
        local ok, v = xpcall(function() return assert(ctx:schedule_activity(act, 7):await()) end,
                             debug.traceback)
        return { ok = ok, v = v }
      end)
      assert.are.equal("Completed", st.status, st.error and st.error.message)
      assert.are.same({ ok = true, v = 7 }, st.output)
    end)

    it("allows collectgarbage(\"count\")", function()
      local st = run_attack("GcCount", function() return math.type(collectgarbage("count")) end)
      assert.are.equal("Completed", st.status, st.error and st.error.message)
      assert.are.equal("float", st.output)
    end)
  end)

  -- An instance's coroutine belongs to the engine: another instance that reaches it (a ctx or
  -- coroutine.running() stashed in a module-level local: upvalues are shared by every
  -- instance) can neither resume nor close it. Resuming it ran A's code in B's turn; A then
  -- failed "cannot resume dead coroutine" with the cache on, where a replay completed it.
  describe("another instance's coroutine", function()
    local modes = { { "on", "16m" }, { "off", 0 } }
    local REFUSED = "this thread is an orchestration instance's own coroutine: only the engine "
                    .. "resumes or closes it"
    local attacks = {
      { "resumes", function(co) return coroutine.resume(co) end, REFUSED },
      { "closes", function(co) return coroutine.close(co) end, REFUSED },
      { "resumes from inside coroutine.wrap", function(co)
        return coroutine.wrap(function() return coroutine.resume(co) end)()
      end, REFUSED },
      { "wraps", function(co) return coroutine.wrap(co)() end,
        "bad argument #1 to 'coroutine.wrap' (function expected, got thread)" },
    }
    -- what B reaches: the thread A stashed, or any thread among the fields of A's ctx
    local reaches = {
      { "coroutine.running()", function(stash) return stash.co end },
      { "its ctx", function(stash)
        -- a ctx is a userdata (next refuses it); its fields are in its metatable's __index
        if pcall(next, stash.ctx) then
          for _, v in pairs(stash.ctx) do if type(v) == "thread" then return v end end
        end
        for _, v in pairs(getmetatable(stash.ctx).__index) do
          if type(v) == "thread" then return v end
        end
        error("no coroutine reachable through the stashed ctx")
      end, "no coroutine reachable through the stashed ctx" },
    }
    for _, mode in ipairs(modes) do
      for _, reach in ipairs(reaches) do
        for _, attack in ipairs(attacks) do
          it("refuses B that " .. attack[1] .. " A's coroutine reached through " .. reach[1] ..
             " (cache " .. mode[1] .. "); A completes", function()
            env:close()
            env = H.env({ turn_instruction_budget = 2000000, orchestration_cache_size = mode[2] })
            local stash = {}
            local echo = env:activity("Echo", function(_, v) return v end)
            local a = env:orchestration("StashA", function(ctx)
              stash.ctx, stash.co = ctx, coroutine.running()
              -- its own coroutine, from a coroutine it resumes, is not suspended: refused
              local main = stash.co
              local nested = { coroutine.wrap(function() return coroutine.resume(main) end)() }
              local closed = { pcall(coroutine.wrap(function() return coroutine.close(main) end)) }
              local got = ctx:schedule_wait("go"):await()
              return { got = got, echo = assert(ctx:schedule_activity(echo, "a"):await()),
                       nested = nested[2], closed = closed[1] }
            end)
            local b = env:orchestration("StashB", function()
              return attack[2](reach[2](stash))
            end)
            local id = env:start(a)
            env:await_event(id, "ExternalSubscribed")
            local sb = env:run(b)
            assert(env.client:raise_event(id, "go", 7))
            local sa = env:wait(id)
            assert.are.equal("Completed", sa.status, sa.error and sa.error.message)
            assert.are.same({ got = 7, echo = "a", nested = "cannot resume non-suspended coroutine",
                              closed = false }, sa.output)
            assert.are.equal("Failed", sb.status)
            assert.matches(reach[3] or attack[3], sb.error.message, 1, true)
            check_innocent()
          end)
        end
      end
    end
  end)

  -- Nothing another instance holds of A (its ctx or a future, stashed in a module-level local:
  -- upvalues are shared by every instance) lets it change A. With the cache on, A's kept
  -- coroutine goes on with the ctx and futures B reached, where a replay makes fresh ones:
  -- a write B made to them changed A's result (the cache and a replay disagreed).
  describe("another instance's ctx and futures", function()
    local modes = { { "on", "16m" }, { "off", 0 } }
    local attacks = {
      { "overwrites a ctx method", function(s) s.ctx.schedule_activity = function() end end,
        "ctx is read-only: cannot assign ctx.schedule_activity" },
      { "overwrites a ctx field", function(s) s.ctx.instance_id = "evil" end,
        "ctx is read-only: cannot assign ctx.instance_id" },
      { "overwrites the private box", function(s) s.ctx._box = false end,
        "ctx is read-only: cannot assign ctx._box" },
      { "rawsets a ctx method", function(s) rawset(s.ctx, "schedule_activity", print) end,
        "a duroxide.Context is read-only" },
      { "replaces the ctx metatable", function(s) setmetatable(s.ctx, nil) end,
        "a duroxide.Context is read-only" },
      { "writes a field through the ctx metatable", function(s)
        getmetatable(s.ctx).__index.instance_id = "evil"
      end, "is read-only in orchestrations" },
      { "writes a method through ctx.__index", function(s)
        s.ctx.__index.schedule_activity = function() end
      end, "attempt to index a nil value" },
      { "schedules on A's ctx", function(s) s.ctx:schedule_activity("Echo", "b") end,
        "this ctx belongs to a finished orchestration turn or to another instance" },
      { "overwrites a future's token", function(s) s.f.token = 2 end,
        "a future is read-only: cannot assign future.token" },
      { "overwrites a future's ctx", function(s) s.f.ctx = false end,
        "a future is read-only: cannot assign future.ctx" },
      { "overwrites a future method", function(s) s.f.await = function() return "evil" end end,
        "a future is read-only: cannot assign future.await" },
      { "rawsets a future's token", function(s) rawset(s.f, "token", 2) end,
        "a duroxide.Future is read-only" },
      { "replaces a future's metatable", function(s) setmetatable(s.f, nil) end,
        "a duroxide.Future is read-only" },
      { "writes a method through the future metatable", function(s)
        getmetatable(s.f).__index.await = function() return "evil" end
      end, "is read-only in orchestrations" },
      { "writes a method through future.__index", function(s)
        s.f.__index.await = function() return "evil" end
      end, "attempt to index a nil value" },
      { "awaits A's future", function(s) return s.g:await() end,
        "this future belongs to a finished orchestration turn or to another instance" },
      { "joins A's futures", function(s) return s.ctx:join({ s.f, s.g }) end,
        "this future belongs to a finished orchestration turn or to another instance" },
      { "cancels A's future", function(s) return s.f:cancel() end,
        "this future belongs to a finished orchestration turn or to another instance" },
      -- a retry's future: its state is context.lua's (B once marked it cancelled before the
      -- ownership check refused B, and A's kept coroutine then got "Cancelled")
      { "cancels A's retry future", function(s) return s.r:cancel() end,
        "this future belongs to a finished orchestration turn or to another instance" },
      { "awaits A's retry future", function(s) return s.r:await() end,
        "this future belongs to a finished orchestration turn or to another instance" },
      { "asks whether A's retry future is ready", function(s) return s.r:is_ready() end,
        "this future belongs to a finished orchestration turn or to another instance" },
    }
    for _, mode in ipairs(modes) do
      for _, attack in ipairs(attacks) do
        it("refuses B that " .. attack[1] .. " (cache " .. mode[1] .. "); A completes", function()
          env:close()
          env = H.env({ turn_instruction_budget = 2000000, orchestration_cache_size = mode[2] })
          local stash = {}
          local echo = env:activity("Echo", function(_, v) return v end)
          local a = env:orchestration("StashCtxA", function(ctx)
            local f, g = ctx:schedule_activity(echo, "f"), ctx:schedule_timer(1)
            local r = ctx:schedule_activity_with_retry(echo, "r", { max_attempts = 2 })
            stash.ctx, stash.f, stash.g, stash.r = ctx, f, g, r -- A itself uses its locals
            local got = ctx:schedule_wait("go"):await()
            return { got = got, id = ctx.instance_id, exec = ctx.execution_id,
                     echo = assert(ctx:schedule_activity(echo, "a"):await()),
                     f = assert(f:await()), g = g:await() == nil, r = assert(r:await()) }
          end)
          local b = env:orchestration("StashCtxB", function() return attack[2](stash) end)
          local id = env:start(a)
          env:await_event(id, "ExternalSubscribed")
          local sb = env:run(b)
          assert(env.client:raise_event(id, "go", 7))
          local sa = env:wait(id)
          assert.are.equal("Completed", sa.status, sa.error and sa.error.message)
          assert.are.same({ got = 7, id = id, exec = 1, echo = "a", f = "f", g = true, r = "r" },
                          sa.output)
          assert.are.equal("Failed", sb.status)
          assert.matches(attack[3], sb.error.message, 1, true)
          check_innocent()
        end)
      end
    end
  end)

  describe("sizes checked at the call (item 9)", function()
    local big = ("x"):rep(300000)
    local cases = {
      { "session id", function(ctx) ctx:schedule_activity_on_session("A", nil, ("s"):rep(201)) end,
        "session id is 201 bytes; the limit is 200 bytes" },
      { "closed session id", function(ctx) ctx:close_session(("s"):rep(201)) end,
        "session id is 201 bytes; the limit is 200 bytes" },
      { "sub-orchestration instance id", function(ctx) ctx:schedule_sub_orchestration("O", nil, ("i"):rep(401)) end,
        "instance id is 401 bytes; the limit is 400 bytes" },
      { "started instance id", function(ctx) ctx:start_orchestration("O", ("i"):rep(401), nil) end,
        "instance id is 401 bytes; the limit is 400 bytes" },
      { "activity name", function(ctx) ctx:schedule_activity(("n"):rep(201)) end,
        "activity name is 201 bytes; the limit is 200 bytes" },
      { "orchestration name", function(ctx) ctx:schedule_sub_orchestration(("n"):rep(201)) end,
        "orchestration name is 201 bytes; the limit is 200 bytes" },
      { "event name", function(ctx) ctx:schedule_wait(("n"):rep(401)) end,
        "event name is 401 bytes; the limit is 400 bytes" },
      { "activity input", function(ctx) ctx:schedule_activity("A", big) end,
        "activity input is 300002 bytes; the limit is 262144 bytes" },
      { "sub-orchestration input", function(ctx) ctx:schedule_sub_orchestration("O", big) end,
        "sub-orchestration input is 300002 bytes; the limit is 262144 bytes" },
      { "continue_as_new input", function(ctx) ctx:continue_as_new(big) end,
        "continue_as_new input is 300002 bytes; the limit is 262144 bytes" },
      { "name with a NUL byte", function(ctx) ctx:schedule_activity("A\0B") end,
        "activity name must not contain a NUL byte" },
    }
    for _, case in ipairs(cases) do
      it("refuses an oversized " .. case[1] .. " at the call, naming the limit", function()
        local orch = env:orchestration("Size", function(ctx)
          local ok, err = pcall(case[2], ctx)
          return { ok = ok, err = tostring(err) }
        end)
        local st = env:run(orch)
        assert.are.equal("Completed", st.status, st.error and st.error.message)
        assert.is_false(st.output.ok)
        assert.matches(case[3], st.output.err, 1, true)
      end)
    end

    it("checks every activity name, also right after a name that passed", function()
      -- C.emit keeps the name it checked last (orch.c activity_name): others are checked
      local act = env:activity("Named", function() return 1 end)
      local orch = env:orchestration("NameRun", function(ctx)
        local errs = {}
        for _, name in ipairs({ ("n"):rep(201), "A\0B", "bad\xff", act .. "\0" }) do
          assert(ctx:schedule_activity(act):await())
          local ok, err = pcall(ctx.schedule_activity, ctx, name)
          errs[#errs + 1] = ok and "accepted" or tostring(err)
        end
        return errs
      end)
      local st = env:run(orch)
      assert.are.equal("Completed", st.status, st.error and st.error.message)
      assert.matches("activity name is 201 bytes; the limit is 200 bytes", st.output[1], 1, true)
      assert.matches("activity name must not contain a NUL byte", st.output[2], 1, true)
      assert.matches("activity name", st.output[3], 1, true)
      assert.matches("UTF-8", st.output[3], 1, true)
      assert.matches("activity name must not contain a NUL byte", st.output[4], 1, true)
    end)

    it("refuses a missing, empty or non-string activity name, before and after a good one",
       function()
      -- ctx:schedule_activity's fast path remembers the name it let through last
      local act = env:activity("Named2", function() return 1 end)
      local orch = env:orchestration("NameKinds", function(ctx)
        local errs = {}
        for round = 1, 2 do
          for _, name in ipairs({ "nil", "", 5, false }) do
            if name == "nil" then name = nil end
            local ok, err = pcall(ctx.schedule_activity, ctx, name)
            errs[#errs + 1] = ok and "accepted" or tostring(err)
          end
          if round == 1 then assert(ctx:schedule_activity(act):await()) end
        end
        return errs
      end)
      local st = env:run(orch)
      assert.are.equal("Completed", st.status, st.error and st.error.message)
      assert.are.equal(8, #st.output)
      for i, got in ipairs({ "nil", "string", "number", "boolean" }) do
        for _, k in ipairs({ i, i + 4 }) do
          assert.matches("activity name must be a non-empty string, got " .. got, st.output[k],
                         1, true)
        end
      end
    end)

    it("refuses bad names and session ids on a session, before and after good ones", function()
      -- schedule_activity_on_session's common path checks both in one primitive (C.texts);
      -- anything it does not pass gets check_name's words
      local act = env:activity("OnSess", function() return 1 end)
      local orch = env:orchestration("SessNameKinds", function(ctx)
        local errs = {}
        for round = 1, 2 do
          for _, bad in ipairs({ "nil", "", 5, false }) do
            if bad == "nil" then bad = nil end
            local ok, err = pcall(ctx.schedule_activity_on_session, ctx, bad, nil, "s1")
            errs[#errs + 1] = ok and "accepted" or tostring(err)
            ok, err = pcall(ctx.schedule_activity_on_session, ctx, act, nil, bad)
            errs[#errs + 1] = ok and "accepted" or tostring(err)
          end
          if round == 1 then assert(ctx:schedule_activity_on_session(act, nil, "s1"):await()) end
        end
        return errs
      end)
      local st = env:run(orch)
      assert.are.equal("Completed", st.status, st.error and st.error.message)
      assert.are.equal(16, #st.output)
      for i, got in ipairs({ "nil", "string", "number", "boolean" }) do
        for _, base in ipairs({ 0, 8 }) do
          local k = base + 2 * i - 1
          assert.matches("activity name must be a non-empty string, got " .. got, st.output[k],
                         1, true)
          assert.matches("session id must be a non-empty string, got " .. got,
                         st.output[k + 1], 1, true)
        end
      end
    end)

    it("fails the instance at once when the error is not caught", function()
      local orch = env:orchestration("SizeUncaught", function(ctx)
        ctx:schedule_activity_on_session("A", nil, ("s"):rep(201))
      end)
      local st = env:run(orch)
      assert.are.equal("Failed", st.status)
      assert.are.equal("application", st.error.category)
      assert.matches("session id is 201 bytes; the limit is 200 bytes", st.error.message, 1, true)
    end)

    it("refuses oversized cancel reasons, event names and event data at the client", function()
      local orch = env:orchestration("SizeWait", function(ctx) return ctx:schedule_wait("e"):await() end)
      local id = env:start(orch)
      local ok, err = env.client:cancel(id, ("r"):rep(1001))
      assert.is_nil(ok)
      assert.matches("cancel reason is 1001 bytes; the limit is 1000 bytes", tostring(err), 1, true)
      ok, err = env.client:raise_event(id, ("e"):rep(401), 1)
      assert.is_nil(ok)
      assert.matches("event name is 401 bytes; the limit is 400 bytes", tostring(err), 1, true)
      ok, err = env.client:raise_event(id, "e", big)
      assert.is_nil(ok)
      assert.matches("the limit is 262144 bytes", tostring(err), 1, true)
      ok, err = env.client:start(H.unique("i"), ("n"):rep(201))
      assert.is_nil(ok)
      assert.matches("orchestration name is 201 bytes; the limit is 200 bytes", tostring(err), 1, true)
      assert(env.client:raise_event(id, "e", "fine"))
      local st = env:wait(id)
      assert.are.equal("Completed", st.status)
      assert.are.equal("fine", st.output)
    end)
  end)

  describe("the budget (item 8)", function()
    local loops = {
      { "pcall(table.sort) with a looping comparator", function()
        local t = { 3, 2, 1 }
        while true do pcall(table.sort, t, function() while true do end end) end
      end },
      { "pcall(string.gsub) with a looping callback", function()
        while true do pcall(string.gsub, "abc", ".", function() while true do end end) end
      end },
      { "pcall(tostring) with a looping __tostring", function()
        local o = setmetatable({}, { __tostring = function() while true do end end })
        while true do pcall(tostring, o) end
      end },
      { "a looping __index caught by pcall", function()
        local o = setmetatable({}, { __index = function() while true do end end })
        while true do pcall(function() return o.x end) end
      end },
      { "nested pcalls inside a C callback", function()
        while true do
          pcall(table.sort, { 2, 1 }, function()
            while true do pcall(function() while true do end end) end
          end)
        end
      end },
      { "an error handler that loops", function()
        while true do xpcall(error, function() while true do end end) end
      end },
      { "a loop inside a coroutine", function()
        while true do pcall(coroutine.wrap(function() while true do end end)) end
      end },
      -- the count hook of a resume is armed by the watchdog a few ms in (budget.c): a
      -- coroutine made and started before that has none until it is resumed again
      { "a loop in a coroutine started before the count hook was armed", function()
        local co = coroutine.wrap(function() coroutine.yield(); while true do end end)
        co()
        local s = string.rep("a", 4 * 1024 * 1024)
        for _ = 1, 20 do utf8.len(s) end -- some 20 ms in C, counted as 20 instructions
        co()
      end },
      { "repeated large allocations", function()
        while true do local s = string.rep("x", 8 * 1024 * 1024) end
      end },
      -- pattern matching runs in C, where the count hook never fires: the sandbox's matcher
      -- charges its steps to the budget (bindings/lua/pattern.c)
      { "a backtracking pattern (a?^30 a^30)", function()
        return ("a"):rep(30):match(("a?"):rep(30) .. ("a"):rep(30))
      end },
      { "a backtracking find caught by pcall", function()
        while true do pcall(string.find, string.rep("a", 1e5), ".-.-.-.-b") end
      end },
      { "a backtracking gmatch", function()
        for _ in string.rep("a", 1e5):gmatch(".-.-.-.-b") do end
      end },
      { "a backtracking gsub", function()
        return (string.rep("a", 1e5):gsub(".-.-.-.-b", "x"))
      end },
      { "a quadratic %b scan", function()
        return string.rep("(", 1e5):find("%b()")
      end },
      { "a quadratic plain find", function()
        return string.rep("a", 1e6):find(string.rep("a", 5e5) .. "b", 1, true)
      end },
      -- one call that loops in C without allocating (bindings/lua/charged.c)
      { "table.move over a huge range", function() return table.move({}, 1, 1e12, 2) end },
      { "string.rep of an empty string", function() return string.rep("", 1e15) end },
      { "string.rep of empty strings with a separator, under pcall", function()
        while true do pcall(string.rep, "", 1e15, "") end
      end },
    }
    for _, case in ipairs(loops) do
      it("fails " .. case[1] .. ", and the worker serves others", function()
        local st = run_attack("Loop", case[2])
        assert.are.equal("Failed", st.status)
        assert.matches("budget exceeded", st.error.message, 1, true)
        check_innocent()
      end)
    end

    it("still runs ordinary table.move and string.rep calls, and their errors", function()
      local st = run_attack("Charged", function()
        local ok, err = pcall(table.move, {}, 1, 2, "x")
        return { moved = table.move({ 1, 2, 3 }, 1, 3, 2), rep = string.rep("ab", 3, ","),
                 empty = string.rep("", 5), none = string.rep("x", 0), err = err, ok = ok }
      end)
      assert.are.equal("Completed", st.status, st.error and st.error.message)
      assert.are.same({ moved = { 1, 1, 2, 3 }, rep = "ab,ab,ab", empty = "", none = "",
                        ok = false, err = select(2, pcall(table.move, {}, 1, 2, "x")) }, st.output)
    end)

    it("bounds a looping __tostring on the error object", function()
      local st = run_attack("ErrTostring", function()
        error(setmetatable({}, { __tostring = function() while true do end end }))
      end)
      assert.are.equal("Failed", st.status)
      assert.matches("instruction budget", st.error.message, 1, true)
      check_innocent()
    end)

    it("runs an error object's __tostring inside the sandbox", function()
      local st = run_attack("ErrTostringIo", function()
        error(setmetatable({}, { __tostring = function() return tostring(os.getenv("HOME")) end }))
      end)
      assert.are.equal("Failed", st.status)
      assert.matches("__tostring failed", st.error.message, 1, true)
    end)

    it("bounds pending __close handlers run when the turn ends", function()
      local orch = env:orchestration("Close", function(ctx)
        local guard <close> = setmetatable({}, { __close = function() while true do end end })
        ctx:schedule_timer(60000):await()
      end)
      local id = env:start(orch)
      -- the instance waits for its timer; the worker is not stuck in the handler
      env:await_event(id, "TimerCreated")
      check_innocent()
    end)

    it("runs a completed orchestration's __close handlers once, as it returns", function()
      local closed = 0
      local orch = env:orchestration("CloseDone", function(ctx)
        local guard <close> = setmetatable({}, { __close = function() closed = closed + 1 end })
        return closed -- one turn: no replay runs it again
      end)
      local st = env:run(orch)
      assert.are.equal("Completed", st.status, st.error and st.error.message)
      assert.are.equal(0, st.output) -- not yet closed when the value was returned
      assert.are.equal(1, closed)     -- closed at the return, not again when the code was freed
      check_innocent()
    end)

    -- a coroutine that died in an error still holds its <close> variables (Lua closes them
    -- only on coroutine.close): freeing the instance must close them, once
    for _, mode in ipairs({ { "on", "16m" }, { "off", 0 } }) do
      it("closes a <close> variable once when the code raises (cache " .. mode[1] .. ")", function()
        env:close()
        env = H.env({ turn_instruction_budget = 2000000, orchestration_cache_size = mode[2] })
        local closed = 0
        local st = run_attack("CloseErr", function()
          local guard <close> = setmetatable({}, { __close = function() closed = closed + 1 end })
          error("boom")
        end)
        assert.are.equal("Failed", st.status)
        assert.matches("boom", st.error.message, 1, true)
        assert.are.equal(1, closed)
        check_innocent()
      end)
    end

    it("bounds a looping __close that error() runs under pcall, with the budget message", function()
      local st = run_attack("CloseLoopPcall", function()
        return pcall(function()
          local guard <close> = setmetatable({}, { __close = function() while true do end end })
          error("boom")
        end)
      end)
      assert.are.equal("Failed", st.status)
      assert.are.equal("BudgetExceeded", st.error.kind)
      assert.matches("instruction budget exceeded", st.error.message, 1, true)
      check_innocent()
    end)

    -- uncaught, the error ends the turn first: the handler runs when the instance is freed,
    -- under a budget of its own, and the instance keeps its own error
    it("bounds a looping __close left by an uncaught error, which the instance reports", function()
      local st = run_attack("CloseLoopErr", function()
        local guard <close> = setmetatable({}, { __close = function() while true do end end })
        error("boom")
      end)
      assert.are.equal("Failed", st.status)
      assert.are.equal("OrchestrationFailed", st.error.kind)
      assert.matches("boom", st.error.message, 1, true)
      check_innocent()
    end)

    it("fails string.rep(\"x\", 1e9) with a clear memory message", function()
      local st = run_attack("Rep", function() return #string.rep("x", 1e9) end)
      assert.are.equal("Failed", st.status)
      assert.are.equal("MemoryLimitExceeded", st.error.kind)
      assert.matches("memory limit exceeded", st.error.message, 1, true)
      check_innocent()
    end)

    it("fails a table that grows without end", function()
      local st = run_attack("Grow", function()
        local t = {}
        for i = 1, math.maxinteger do t[i] = ("x"):rep(4096) .. i end
      end)
      assert.are.equal("Failed", st.status)
      assert.matches("exceeded", st.error.message, 1, true)
      check_innocent()
    end)
  end)
  -- Single C calls that take long (bounded only by the heap) count as one instruction each:
  -- repeated in a loop they would hold the worker for hours within the budget. The watchdog
  -- thread ends the turn at the turn time limit (1s here); the budget is the default 50M.
  describe("the turn time limit (items 8, 20)", function()
    before_each(function()
      env:close()
      env = H.env({ turn_instruction_budget = 50000000, turn_time_limit = 1000 })
    end)

    local function big_table(n)
      local t = {}
      for i = 1, n or 1e6 do t[i] = (i * 7919) % 1000003 end
      return t
    end
    local slow = {
      { "table.sort of a million entries", function()
        local t = big_table()
        while true do table.sort(t) end
      end },
      { "table.insert(t, 1, v) / table.remove(t, 1) on a million entries", function()
        local t = big_table()
        while true do table.insert(t, 1, 0); table.remove(t, 1) end
      end },
      { "utf8.len of 16 MB", function()
        local s = string.rep("a", 16 * 1024 * 1024)
        while true do utf8.len(s) end
      end },
      { "== between two 10 MB strings that differ at the end", function()
        local a, b = string.rep("a", 1e7) .. "b", string.rep("a", 1e7) .. "c"
        local n = 0
        while true do if a == b then n = n + 1 end end
      end },
      { "table.sort under pcall", function()
        local t = big_table()
        while true do pcall(table.sort, t) end
      end },
      { "== inside a sort comparator", function()
        local a, b = string.rep("a", 1e7) .. "b", string.rep("a", 1e7) .. "c"
        while true do pcall(table.sort, { 1, 2, 3 }, function(x, y)
          while true do local _ = a == b end
        end) end
      end },
      -- inside coroutines the code made: the alarm arms every coroutine on the resume chain
      -- (without that, their own hook would fire after 10,000 instructions: 2,500 sorts of 4M)
      { "table.sort inside coroutine.wrap", function()
        local t = big_table(4e6)
        coroutine.wrap(function() while true do table.sort(t) end end)()
      end },
      { "== inside coroutine.resume, two levels down", function()
        local a, b = string.rep("a", 1e7) .. "b", string.rep("a", 1e7) .. "c"
        local inner = coroutine.create(function() while true do local _ = a == b end end)
        local outer = coroutine.create(function() return coroutine.resume(inner) end)
        while true do coroutine.resume(outer) end
      end },
      { "table.sort in a coroutine made before the limit, resumed after it", function()
        local t = big_table(4e6)
        local co = coroutine.wrap(function()
          while true do coroutine.yield(); for _ = 1, 1000 do table.sort(t) end end
        end)
        co() -- made and started early: it fires the hook only every 10,000 instructions
        while true do co() end
      end },
    }
    for _, case in ipairs(slow) do
      it("fails " .. case[1] .. " in a loop, and the worker serves others", function()
        local st = run_attack("Slow", case[2])
        assert.are.equal("Failed", st.status)
        assert.are.equal("TimeLimitExceeded", st.error.kind)
        assert.are.equal("application", st.error.category)
        assert.matches("turn ran longer than the turn time limit (1s)", st.error.message, 1, true)
        check_innocent()
      end)
    end

    it("leaves a long turn alone when the turn time limit is 0 (off)", function()
      env:close()
      env = H.env({ turn_instruction_budget = 50000000, turn_time_limit = 0 })
      local st = run_attack("LongNoLimit", function()
        local s = string.rep("a", 4 * 1024 * 1024)
        for _ = 1, 60 do utf8.len(s) end -- about half a second in C
        return "done"
      end)
      assert.are.equal("Completed", st.status, st.error and st.error.message)
      assert.are.equal("done", st.output)
    end)

    it("bounds an error object's __tostring that loops over slow calls", function()
      -- its own budget (1M instructions, 16 MiB) allows some 50,000 scans of 4 MB: a minute
      local st = run_attack("ErrSlow", function()
        error(setmetatable({}, { __tostring = function()
          local s = string.rep("a", 4e6)
          while true do utf8.len(s) end
        end }))
      end)
      assert.are.equal("Failed", st.status)
      assert.are.equal("error object is a table value (its __tostring ran longer than the turn "
                       .. "time limit)", st.error.message)
      check_innocent()
    end)

    -- coroutine.resume and coroutine.wrap are wrapped (charged.c): same results and errors
    local function coroutine_uses()
      local gen = coroutine.wrap(function(a) local b = coroutine.yield(a + 1); return b * 2 end)
      local co = coroutine.create(function(x) coroutine.yield(x); error("inner") end)
      local r = { gen(1), gen(5) }
      r[#r + 1] = select("#", coroutine.resume(co, 7))
      r[#r + 1] = table.concat({ tostring(select(2, coroutine.resume(co))) })
      r[#r + 1] = select(2, pcall(gen)) -- dead coroutine
      r[#r + 1] = select(2, pcall(coroutine.wrap(function() error("boom") end)))
      r[#r + 1] = select(2, pcall(coroutine.wrap(function() error({}) end))) and "table"
      r[#r + 1] = select(2, pcall(coroutine.resume, 42))
      r[#r + 1] = select(2, coroutine.resume(coroutine.running()))
      return r
    end

    it("does not touch a turn that ends in time, ordinary sorts or coroutines", function()
      local st = run_attack("Quick", function(ctx)
        local t = { 3, 1, 2 }
        table.sort(t)
        ctx:schedule_timer(10):await()
        return { t = t, co = coroutine_uses() }
      end)
      assert.are.equal("Completed", st.status, st.error and st.error.message)
      assert.are.same({ t = { 1, 2, 3 }, co = coroutine_uses() }, st.output)
      -- the wrapper's argument errors still name the function
      assert.are.equal("bad argument #1 to 'coroutine.resume' (thread expected, got number)",
                       st.output.co[8])
    end)
  end)
end)
