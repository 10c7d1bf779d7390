-- tests/e2e/apps/sessions.lua: the worker app of tests/e2e_sessions.sh (activity sessions).
--
-- Environment of the worker process:
--   E2E_HOOKS   file the session hooks append to: "claimed <sid> <how> <worker>" and
--               "released <sid> <reason> <worker>"
--   E2E_WORKER  the name written as <worker> by the hooks (the scripts pass the same value as
--               --worker-node-id, so it matches actx.worker_id)
--   E2E_NEW_CODE set: this worker runs the "new" app version, which also has activity Work2
--               (a rolling upgrade: workers without it hand Work2's session on)
-- Every activity appends "<worker_id> <session_id or -> <tag>" to input.log when it starts, so
-- the script can tell where (and how often) each activity ran.
local duroxide = require("duroxide")
local uv = require("luv")

local HOOKS = os.getenv("E2E_HOOKS")
local ME = os.getenv("E2E_WORKER") or "?"

local function append(path, line)
  local f = assert(io.open(path, "a"))
  f:write(line, "\n")
  f:close()
end

duroxide.on_session_claimed(function(sid, how)
  if HOOKS then append(HOOKS, ("claimed %s %s %s"):format(sid, how, ME)) end
end)

duroxide.on_session_released(function(sid, reason)
  if HOOKS then append(HOOKS, ("released %s %s %s"):format(sid, reason, ME)) end
end)

-- input = { log = path, tag = string, ms = sleep before returning }; returns the worker id.
duroxide.activity("Work", function(actx, input)
  append(input.log, ("%s %s %s"):format(actx.worker_id, actx.session_id or "-", input.tag or ""))
  if input.ms and input.ms > 0 then actx:sleep(input.ms) end
  return actx.worker_id
end)

-- Only in the new version of the app (E2E_NEW_CODE): like Work.
if os.getenv("E2E_NEW_CODE") then
  duroxide.activity("Work2", function(actx, input)
    append(input.log, ("%s %s %s"):format(actx.worker_id, actx.session_id or "-", input.tag or ""))
    return actx.worker_id
  end)
end

local function now_ms()
  local sec, usec = uv.gettimeofday()
  return sec * 1000 + usec // 1000
end

-- input = { runs = path, tag, steps, ms }: a session activity that works in steps, each one
-- recorded in input.runs with the wall-clock time ("S|P|C|E <ms> <worker> <tag> [step]"):
-- S at the start, P before each step's work, E at the end. Before each step it checks
-- actx:is_cancelled() and stops (C) when the worker no longer holds the session: a stalled
-- owner must stop before doing more (issue 9 item 3). Returns the worker id, or "stale@<id>"
-- when cancelled (a result the runtime must not record).
duroxide.activity("Steps", function(actx, input)
  local function rec(mark, extra)
    append(input.runs, ("%s %d %s %s%s"):format(mark, now_ms(), actx.worker_id, input.tag,
                                               extra or ""))
  end
  rec("S")
  for i = 1, input.steps do
    if actx:is_cancelled() then
      rec("C")
      return "stale@" .. actx.worker_id
    end
    rec("P", " " .. i)
    actx:sleep(input.ms)
  end
  rec("E")
  return actx.worker_id
end)

-- input = { sid, runs, tag, steps, ms }: one Steps activity on the session.
duroxide.orchestration("SessSteps", function(ctx, input)
  return assert(ctx:schedule_activity_on_session("Steps", input, input.sid):await())
end)

-- input = { log, tag }: a session activity whose first attempt finds its state broken and
-- aborts the session (issue 9 item 8); a later attempt returns "<worker>#<attempt>".
duroxide.activity("Fragile", function(actx, input)
  append(input.log, ("%s %s %s#%d"):format(actx.worker_id, actx.session_id or "-", input.tag,
                                            actx.attempt))
  if actx.attempt == 1 then
    actx:abort_session("state corrupt (test)")
    return "bad state" -- discarded: the aborted session's work runs again elsewhere
  end
  return ("%s#%d"):format(actx.worker_id, actx.attempt)
end)

-- input = { sid, log, tag }: Fragile on the session, then one Work on it; returns both.
duroxide.orchestration("SessAbort", function(ctx, input)
  local a = assert(ctx:schedule_activity_on_session("Fragile", input, input.sid):await())
  local b = assert(ctx:schedule_activity_on_session("Work", { log = input.log, tag = input.tag
                                                              .. "-after" }, input.sid):await())
  return a .. " " .. b
end)

local function work(ctx, input, tag, sid, ms)
  local arg = { log = input.log, tag = tag, ms = ms or input.ms }
  if sid then return ctx:schedule_activity_on_session("Work", arg, sid) end
  return ctx:schedule_activity("Work", arg)
end

-- Phase of `n` activities on input.sid, one after the other; returns the worker ids. The first
-- one sleeps input.ms_first when given (a long activity followed at once by short ones).
local function run_on_session(ctx, input, n, phase)
  local who = {}
  for i = 1, n do
    who[#who + 1] = assert(work(ctx, input, ("%s-%s%d"):format(input.tag, phase, i),
                                input.sid, i == 1 and input.ms_first or nil):await())
  end
  return who
end

-- input = { sid, log, tag, n, ms, ms_first, plain = number of plain activities (fanned out) }
duroxide.orchestration("SessRun", function(ctx, input)
  local who = run_on_session(ctx, input, input.n, "s")
  if (input.plain or 0) > 0 then
    local fs = {}
    for i = 1, input.plain do fs[i] = work(ctx, input, ("%s-p%d"):format(input.tag, i)) end
    local _, errs = ctx:join(fs)
    assert(not errs, "a plain activity failed")
  end
  return duroxide.array(who)
end)

-- input = { sid, log, tag, n1, n2, ms, close = bool, close_end = bool }: n1 activities on the
-- session, then (optionally ctx:close_session) wait for event "go", then n2 more on the same
-- session (then optionally close it).
duroxide.orchestration("SessWaitRun", function(ctx, input)
  local who = run_on_session(ctx, input, input.n1 or 1, "a")
  if input.close then ctx:close_session(input.sid) end
  ctx:schedule_wait("go"):await()
  for _, w in ipairs(run_on_session(ctx, input, input.n2 or 1, "b")) do who[#who + 1] = w end
  if input.close_end then ctx:close_session(input.sid) end
  return duroxide.array(who)
end)

-- input = { sid, log, tag, n, ms }: n activities on the session at once (they race for a
-- session nobody owns yet), then two more one after the other.
duroxide.orchestration("SessFan", function(ctx, input)
  local fs = {}
  for i = 1, input.n do fs[i] = work(ctx, input, ("%s-f%d"):format(input.tag, i), input.sid) end
  local who, errs = ctx:join(fs)
  assert(not errs, "a session activity failed")
  for _, w in ipairs(run_on_session(ctx, input, 2, "s")) do who[#who + 1] = w end
  return duroxide.array(who)
end)

-- input = { sid, log, tag }: Work on the session, wait for "go", then Work2 (new code only) on
-- the same session. Returns the two worker ids.
duroxide.orchestration("SessUpgrade", function(ctx, input)
  local a = assert(work(ctx, input, input.tag .. "-old", input.sid):await())
  ctx:schedule_wait("go"):await()
  local b = assert(ctx:schedule_activity_on_session("Work2",
    { log = input.log, tag = input.tag .. "-new" }, input.sid):await())
  return duroxide.array({ a, b })
end)

-- input = { sid, log, tag, round, rounds }: one activity on the session per execution, then
-- continue-as-new with the same session id until `rounds` executions ran.
duroxide.orchestration("SessCan", function(ctx, input)
  local round = input.round or 1
  local who = assert(work(ctx, input, ("%s-r%d"):format(input.tag, round), input.sid):await())
  if round < input.rounds then
    ctx:continue_as_new({ sid = input.sid, log = input.log, tag = input.tag, round = round + 1,
                          rounds = input.rounds })
  end
  return who
end)
