-- Where session activities ran (worker_id on their completions, ctx:session_worker) and the
-- opt-in move signal: schedule_activity_on_session(..., { on_moved = "fail" }).
local duroxide = require("duroxide")
local testing = require("duroxide.testing")

local APP = "spec/testing_apps/session_moved.lua"

-- Run `script` in a fresh lua5.4 process on this build; returns its stdout and exit status.
local function lua_process(script)
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  -- the child loads the same build as this run (busted --cpath: build/ or build-asan/)
  f:write(string.format("package.cpath = %q\n", package.cpath), script)
  f:close()
  local p = io.popen("lua5.4 " .. path .. " 2>&1")
  local out = p:read("a")
  local ok, _, code = p:close()
  os.remove(path)
  return out, ok and 0 or code
end

describe("session moves", function()
  local env
  before_each(function() env = testing.env({ app = APP }) end)
  after_each(function() env:close() end)

  it("records the worker that ran each session activity in history", function()
    env:start("m0", "Mover", { sid = "s0" })
    env:run_until_idle()
    env:raise_event("m0", "go")
    local st = env:run_until_complete("m0")
    assert.are.equal("Completed", st.status, st.error and st.error.message)
    -- nothing moved: both activities ran on w1, and ctx saw it after each
    assert.are.same({ { ran = "w1", seen = "w1" }, { ran = "w1", seen = "w1" } }, st.output)
    local done = 0
    for _, e in ipairs(env:history("m0")) do
      if e.type == "ActivityCompleted" then
        assert.are.equal("w1", e.worker_id)
        done = done + 1
      end
    end
    assert.are.equal(2, done)
  end)

  it("fails SessionMoved without running the activity when the owner changed", function()
    env:add_worker("w2")
    local id = env:start("m1", "Mover", { sid = "s1" })
    env:run_until_idle()
    local owner = env:sessions()[1].worker_id
    local other = owner == "w1" and "w2" or "w1"
    env:crash_worker(owner)
    env:raise_event(id, "go")
    local st = env:run_until_complete(id)
    assert.are.equal("Completed", st.status, st.error and st.error.message)
    local t = st.output
    assert.are.same({ ran = owner, seen = owner }, t[1])
    assert.are.equal("SessionMoved", t[2].kind)
    assert.are.equal("application", t[2].category)
    assert.are.equal(("session 's1' moved from worker '%s' to worker '%s': activity Step was "
                      .. "not run"):format(owner, other), t[2].message)
    assert.are.equal(other, t[2].seen) -- the refusal records the new owner
    assert.are.same({ ran = other, seen = other }, t[3])
    -- Step 2 never ran: only steps 1 and 3 reached the activity
    local inputs = {}
    for _, c in ipairs(env:calls("Step")) do inputs[#inputs + 1] = c.input end
    assert.are.same({ 1, 3 }, inputs)
  end)

  it("replays the move deterministically in a new process", function()
    env:add_worker("w2")
    local id = env:start("m2", "Mover", { sid = "s2" })
    env:run_until_idle()
    env:crash_worker(env:sessions()[1].worker_id)
    env:raise_event(id, "go")
    assert.are.equal("Completed", env:run_until_complete(id).status)
    local h = env:history(id)
    local path = os.tmpname()
    local f = assert(io.open(path, "w"))
    local json, jerr = duroxide.json_encode({ events = { table.unpack(h) }, id = h.instance_id,
                                              exec = h.execution_id })
    assert.is_string(json, jerr)
    f:write(json)
    f:close()
    local out, code = lua_process(([[
      local duroxide = require("duroxide")
      local testing = require("duroxide.testing")
      local rec = duroxide.json_decode(io.open(%q):read("a"))
      local ok, err, how = testing.check_replay(rec.events, %q,
                                                { instance_id = rec.id, execution_id = rec.exec })
      print(tostring(ok), tostring(err), tostring(how))
    ]]):format(path, APP))
    os.remove(path)
    assert.are.equal(0, code, out)
    assert.matches("\ntrue\tnil\tCompleted\n$", "\n" .. out)
  end)

  it("runs on the new owner by default (on_moved = \"run\")", function()
    env:register_orchestration("Plain", function(ctx, sid)
      local a = assert(ctx:schedule_activity_on_session("Step", 1, sid):await())
      ctx:schedule_wait("go"):await()
      local b = assert(ctx:schedule_activity_on_session("Step", 2, sid, { on_moved = "run" })
        :await())
      return { a.worker, b.worker }
    end)
    env:add_worker("w2")
    local id = env:start("m3", "Plain", "s3")
    env:run_until_idle()
    local owner = env:sessions()[1].worker_id
    env:crash_worker(owner)
    env:raise_event(id, "go")
    local st = env:run_until_complete(id)
    assert.are.equal("Completed", st.status, st.error and st.error.message)
    assert.are.equal(owner, st.output[1])
    assert.are_not.equal(owner, st.output[2])
  end)

  it("refuses bad options at the call", function()
    env:register_orchestration("Bad", function(ctx, opts)
      local ok, err = pcall(ctx.schedule_activity_on_session, ctx, "Step", 1, "s", opts)
      return tostring(err)
    end)
    local function run(id, opts)
      return env:run_until_complete(env:start(id, "Bad", opts)).output
    end
    assert.matches('on_moved must be "fail" or "run", got later', run("b1", { on_moved = "later" }),
                   nil, true)
    assert.matches("unknown activity option 'onmoved' (expected tag, on_moved)",
                   run("b2", { onmoved = "fail" }),
                   nil, true)
    assert.matches("options must be a table, got string", run("b3", "fail"), nil, true)
  end)
end)
