-- duroxide.session_handler: open once per claim on a worker (may wait), state handed to every
-- activity of the session as actx.session_state, close on every release with its reason.
local duroxide = require("duroxide")
local testing = require("duroxide.testing")
local uv = require("luv")

-- Park the calling activity for ms on a real timer (so other activities run meanwhile).
local function pause(ms)
  duroxide.wait(function(done)
    local t = uv.new_timer()
    t:start(ms, 0, function() t:close(); done() end)
  end)
end

describe("duroxide.session_handler", function()
  local env, log
  before_each(function()
    log = {}
    env = testing.env()
    duroxide.session_handler({
      open = function(sid, how)
        log[#log + 1] = { "open", sid, how }
        pause(5) -- a handler may wait (spawn, load); other activities run meanwhile
        return { sid = sid, n = #log, uses = 0 }
      end,
      close = function(sid, state, reason)
        log[#log + 1] = { "close", sid, reason, state and state.n }
      end,
    })
    env:register_activity("Use", function(actx, _)
      local st = actx.session_state
      st.uses = st.uses + 1
      return { n = st.n, uses = st.uses, worker = actx.worker_id }
    end)
    env:register_activity("Plain", function(actx) return actx.session_state == nil end)
    env:register_orchestration("UseN", function(ctx, input)
      local out = {}
      for i = 1, input.n do
        if input.pause and i == input.pause + 1 then ctx:schedule_wait("go"):await() end
        out[i] = assert(ctx:schedule_activity_on_session("Use", i, input.sid):await())
      end
      if input.close then ctx:close_session(input.sid) end
      return out
    end)
  end)
  after_each(function() env:close() end)

  local function count(kind, sid)
    local n = 0
    for _, e in ipairs(log) do if e[1] == kind and e[2] == sid then n = n + 1 end end
    return n
  end

  it("opens once per claim and hands the same state to every activity", function()
    local st = env:run_until_complete(env:start("h1", "UseN", { n = 4, sid = "s1", close = true }))
    env:run_until_idle()
    assert.are.equal("Completed", st.status, st.error and st.error.message)
    for i, out in ipairs(st.output) do
      assert.are.equal(1, out.n)       -- the state of the single open
      assert.are.equal(i, out.uses)    -- the same table, mutated by each activity
    end
    assert.are.same({ { "open", "s1", "new" }, { "close", "s1", "closed", 1 } }, log)
  end)

  it("does not touch activities without a session", function()
    env:register_orchestration("P", function(ctx) return ctx:schedule_activity("Plain"):await() end)
    local st = env:run_until_complete(env:start("p1", "P"))
    assert.are.equal(true, st.output)
    assert.are.same({}, log)
  end)

  it("opens once for activities of the session that start together", function()
    env:register_orchestration("Fan", function(ctx)
      local fs = {}
      for i = 1, 5 do fs[i] = ctx:schedule_activity_on_session("Use", i, "fan") end
      local outs = ctx:join(fs)
      return outs
    end)
    local st = env:run_until_complete(env:start("f1", "Fan"))
    assert.are.equal("Completed", st.status, st.error and st.error.message)
    assert.are.equal(1, count("open", "fan"))
    local uses = {}
    for _, out in ipairs(st.output) do
      assert.are.equal(1, out.n)
      uses[#uses + 1] = out.uses
    end
    table.sort(uses)
    assert.are.same({ 1, 2, 3, 4, 5 }, uses)
  end)

  it("closes with the release reason and opens again on the next claim", function()
    env:add_worker("w2")
    local id = env:start("h2", "UseN", { n = 4, sid = "s2", pause = 2 })
    env:run_until_idle()
    local owner = env:sessions()[1].worker_id
    env:shutdown_worker(owner)              -- release "shutdown" -> close
    env:raise_event(id, "go")
    local st = env:run_until_complete(id)
    assert.are.equal("Completed", st.status, st.error and st.error.message)
    assert.are.equal(owner, st.output[2].worker)
    assert.are_not.equal(owner, st.output[3].worker)
    assert.are.equal(2, st.output[2].uses)
    assert.are.equal(1, st.output[3].uses)  -- a fresh state on the new owner
    assert.are.equal(2, count("open", "s2"))
    assert.are.same({ "close", "s2", "shutdown", 1 }, log[2])
  end)

  it("counts opens and closes across migrations (lost lease, crash, restart)", function()
    env:add_worker("w2")
    local id = env:start("h3", "UseN", { n = 6, sid = "s3", pause = 1, close = true })
    env:run_until_idle()
    local first = env:sessions()[1].worker_id
    env:expire_session("s3")                -- first owner: "lost" -> close
    assert.are.equal(1, count("close", "s3"))
    assert.are.same({ "close", "s3", "lost", 1 }, log[#log])
    env:raise_event(id, "go")
    local st = env:run_until_complete(id)
    env:run_until_idle()
    assert.are.equal("Completed", st.status, st.error and st.error.message)
    -- claimed twice (the expired session is claimed again by whoever fetches first)
    assert.are.equal(2, count("open", "s3"))
    assert.are.equal(2, count("close", "s3"))
    assert.are.same({ "close", "s3", "closed", log[#log][4] }, log[#log])
    assert.are.equal(first, st.output[1].worker)
  end)

  it("fails the activity when open fails, and opens again for the next one", function()
    local fail = true
    duroxide.session_handler({
      open = function(sid, how)
        log[#log + 1] = { "open", sid, how }
        if fail then fail = false; error("model file missing", 0) end
        return { n = 7, uses = 0 }
      end,
    })
    env:register_orchestration("Twice", function(ctx)
      local _, err = ctx:schedule_activity_on_session("Use", 1, "sf"):await()
      local out = assert(ctx:schedule_activity_on_session("Use", 2, "sf"):await())
      return { err = err and err.message, n = out.n }
    end)
    local st = env:run_until_complete(env:start("h4", "Twice"))
    assert.are.equal("Completed", st.status, st.error and st.error.message)
    assert.are.equal("session handler open failed for session sf: model file missing",
                     st.output.err)
    assert.are.equal(7, st.output.n)
    assert.are.equal(2, count("open", "sf"))
  end)

  it("hands activities that waited for an open the opened state when the session was "
     .. "released meanwhile", function()
    local pending, run_once, hold = nil, duroxide._run_once, true
    duroxide.session_handler({
      open = function(sid, how)
        log[#log + 1] = { "open", sid, how }
        if hold then duroxide.wait(function(done) pending = done end) end -- until the spec says
        return { n = #log, uses = 0 }
      end,
      close = function(sid, state, reason) log[#log + 1] = { "close", sid, reason, state.n } end,
    })
    duroxide.on_session_released(function(sid, reason) log[#log + 1] = { "released", sid } end)
    env:register_orchestration("Pair", function(ctx)
      return ctx:join({ ctx:schedule_activity_on_session("Use", 1, "race"),
                        ctx:schedule_activity_on_session("Use", 2, "race") })
    end)
    env:start("r1", "Pair")
    for _ = 1, 5000 do
      local s = env:sessions()[1]
      if pending and s and s.running == 2 then break end
      run_once(2)
    end
    assert.is_function(pending)
    assert.are.equal(2, env:sessions()[1].running) -- both activities are here, one opening
    -- the lease lapses while open waits: the session is released ("lost")
    assert(env.store:expire_session("race", duroxide._clock_now()))
    for _ = 1, 5000 do
      if count("released", "race") == 1 then break end
      -- a renewal after the expiry tells (one already out when the claim was handed over,
      -- before its commit, leaves a hold that began meanwhile alone; a call while one is out
      -- does nothing)
      env.workers.w1.rt:_renew_sessions()
      run_once(2)
    end
    assert.are.equal(1, count("released", "race"))
    assert.are.equal(0, count("close", "race")) -- not before open returns
    hold = false
    pending()
    -- Both activities ran under the lost hold: they are fenced (results not recorded) and run
    -- again once the worker claims the session anew, which opens one new state for both.
    local st = env:run_until_complete("r1")
    assert.are.equal("Completed", st.status, st.error and st.error.message)
    assert.are.equal(2, count("open", "race"))     -- one per claim: the waiter opened none
    assert.are.same({ "close", "race", "lost", 2 }, log[3]) -- n: #log when open returned
    assert.are.equal(st.output[1].n, st.output[2].n)        -- both ran with the new state
    local uses = { st.output[1].uses, st.output[2].uses }
    table.sort(uses)
    assert.are.same({ 1, 2 }, uses)                          -- one state, used twice
  end)

  it("refuses bad registrations with a clear error", function()
    assert.has_error(function() duroxide.session_handler(42) end)
    assert.has_error(function() duroxide.session_handler({}) end,
                     "duroxide.session_handler: give open, close or both")
    assert.has_error(function() duroxide.session_handler({ open = 1 }) end,
                     "duroxide.session_handler: open must be a function, got number")
    assert.has_error(function() duroxide.session_handler({ opne = function() end }) end,
                     "duroxide.session_handler: unknown field opne (expected open, close)")
  end)
end)
