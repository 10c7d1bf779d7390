-- tests/chaos/app.lua -- the worker app of the chaos campaign (tests/chaos/chaos.sh).
--
-- Orchestrations mix chains, fan-outs, session activities (session ids shared by instances),
-- timers, sub-orchestrations, external events and continue-as-new; plan.lua computes the
-- output each must end with, independently of this file.
--
-- Every activity run appends to $CHAOS_LOG/act.<pid>.log, flushed per line, so the driver can
-- tell which process ran what and when (wall-clock ms):
--   S <ms> <pid> <worker_id> <sid or -> <instance> <execution> <activity_id> <attempt> <name>
--   E <ms> <pid> <worker_id> <sid or -> <instance> <execution> <activity_id> <attempt> <name>
--   C (same fields): the run found itself cancelled and stopped without doing its work
-- and the session hooks append
--   H <ms> <pid> <worker_id> <sid> claimed|released <how or reason>
local duroxide = require("duroxide")
local uv = require("luv")

local PID = math.tointeger(uv.os_getpid())
local LOG = assert(io.open(assert(os.getenv("CHAOS_LOG"), "CHAOS_LOG not set")
                           .. "/act." .. PID .. ".log", "a"))

local function now_ms()
  local s, us = uv.gettimeofday()
  return s * 1000 + us // 1000
end

local function log(fmt, ...)
  LOG:write(fmt:format(...), "\n")
  LOG:flush()   -- a kill -9 must not lose what was written
end

local function logrun(mark, actx)
  log("%s %d %d %s %s %s %d %d %d %s", mark, now_ms(), PID, actx.worker_id,
      actx.session_id or "-", actx.instance_id, actx.execution_id, actx.activity_id,
      actx.attempt, actx.name)
end

-- Runs fn between an S and an E record; the sleep makes kills land inside activities. A run
-- that finds itself cancelled after the sleep (its lock, or for a session activity its
-- session, was lost meanwhile: the process stalled past its lease) does no more work: it
-- records C and fails (the runtime does not record the result of a fenced run).
local function timed(name, fn)
  duroxide.activity(name, function(actx, input)
    logrun("S", actx)
    if (input.ms or 0) > 0 then actx:sleep(input.ms) end
    if actx:is_cancelled() then
      logrun("C", actx)
      error("cancelled")
    end
    local out = fn(input)
    logrun("E", actx)
    return out
  end)
end

timed("Step", function(input) return (input.x * 7 + 3) % 1000003 end)
timed("SessStep", function(input) return input.x + 1 end)

duroxide.on_session_claimed(function(sid, how, wid)
  log("H %d %d %s %s claimed %s", now_ms(), PID, wid or "?", sid, how)
end)
duroxide.on_session_released(function(sid, reason, wid)
  log("H %d %d %s %s released %s", now_ms(), PID, wid or "?", sid, reason)
end)

local function step(ctx, x, ms)
  return assert(ctx:schedule_activity("Step", { x = x, ms = ms }):await())
end

local function chain(ctx, x, n, ms)
  for _ = 1, n do x = step(ctx, x, ms) end
  return x
end

local function sess(ctx, x, sid, ms)
  return ctx:schedule_activity_on_session("SessStep", { x = x, ms = ms }, sid)
end

-- { x, n, ms }: n Steps one after the other.
duroxide.orchestration("Chain", function(ctx, input)
  return chain(ctx, input.x, input.n, input.ms)
end)

-- { x, n, ms }: Step(x + j) for j = 1..n at once, summed.
duroxide.orchestration("Fan", function(ctx, input)
  local fs = {}
  for j = 1, input.n do fs[j] = ctx:schedule_activity("Step", { x = input.x + j, ms = input.ms }) end
  local vs, errs = ctx:join(fs)
  assert(not errs, "a fanned-out Step failed")
  local sum = 0
  for _, v in ipairs(vs) do sum = sum + v end
  return sum
end)

-- { x, n, par, sid, ms, close }: n SessSteps in a row on the session, then `par` at once on the
-- same value (summed); then maybe close the session (other instances share it).
duroxide.orchestration("Sess", function(ctx, input)
  local v = input.x
  for _ = 1, input.n do v = assert(sess(ctx, v, input.sid, input.ms):await()) end
  if input.par > 0 then
    local fs = {}
    for j = 1, input.par do fs[j] = sess(ctx, v, input.sid, input.ms) end
    local vs, errs = ctx:join(fs)
    assert(not errs, "a parallel SessStep failed")
    v = 0
    for _, w in ipairs(vs) do v = v + w end
  end
  if input.close then ctx:close_session(input.sid) end
  return v
end)

-- { x, t }: a timer, then one Step.
duroxide.orchestration("Timer", function(ctx, input)
  ctx:schedule_timer(input.t):await()
  return step(ctx, input.x)
end)

-- { x, n, ms }: a Chain as a sub-orchestration, plus one.
duroxide.orchestration("Sub", function(ctx, input)
  return assert(ctx:schedule_sub_orchestration("Chain", input):await()) + 1
end)

-- { x }: subscribe to "go" (custom status "waiting" tells the driver to raise it), then Step.
duroxide.orchestration("Event", function(ctx, input)
  local go = ctx:schedule_wait("go")
  ctx:set_custom_status("waiting")
  local data = go:await()
  ctx:set_custom_status("got")
  return data.v + step(ctx, input.x)
end)

-- { x, sid, ms, t }: Step, SessStep, timer, sub-orchestration Chain, fan-out of two Steps.
duroxide.orchestration("Mix", function(ctx, input)
  local a = step(ctx, input.x, input.ms)
  local b = assert(sess(ctx, a, input.sid, input.ms):await())
  ctx:schedule_timer(input.t):await()
  local c = assert(ctx:schedule_sub_orchestration("Chain", { x = b, n = 2, ms = input.ms }):await())
  local vs, errs = ctx:join({ ctx:schedule_activity("Step", { x = c + 1, ms = input.ms }),
                              ctx:schedule_activity("Step", { x = c + 2, ms = input.ms }) })
  assert(not errs, "a fanned-out Step failed")
  return vs[1] + vs[2]
end)

-- { x, round, rounds, ms }: one Step per execution, continue-as-new until `rounds` ran.
duroxide.orchestration("Loop", function(ctx, input)
  local x = step(ctx, input.x, input.ms)
  if input.round < input.rounds then
    ctx:continue_as_new({ x = x, round = input.round + 1, rounds = input.rounds, ms = input.ms })
  end
  return x
end)
