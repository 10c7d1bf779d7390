-- tests/e2e/apps/turns.lua: the app of tests/e2e_turns.sh (messages and turns, graceful stop,
-- clocks, options). TURNS_NEW=1 in the environment registers the "new release" parts a
-- rolling deploy brings (WaitGo, WaitCancel, Versioned 2.0.0): a worker without it plays the
-- old release.
local duroxide = require("duroxide")
local NEW = os.getenv("TURNS_NEW") == "1"

-- 1.0.0 hands over to 2.0.0, which only the new release has.
duroxide.orchestration("Versioned", function(ctx, input)
  return ctx:continue_as_new(input, "2.0.0")
end, { version = "1.0.0" })

if NEW then
  duroxide.orchestration("Versioned", function(ctx, input)
    return { input = input, ev = ctx:schedule_wait("go"):await() }
  end, { version = "2.0.0" })
  duroxide.orchestration("WaitGo", function(ctx)
    return ctx:schedule_wait("go"):await()
  end)
  duroxide.orchestration("WaitCancel", function(ctx)
    return ctx:schedule_wait("never"):await()
  end)
end

-- Append one line to a file (markers show how often and where an activity ran).
local function append(path, line)
  local f = assert(io.open(path, "a"))
  f:write(line, "\n")
  f:close()
end

-- input = { marker = path, ms = sleep }: marks start/end (or "cancelled") with the worker id.
duroxide.activity("Slow", function(actx, input)
  append(input.marker, "start " .. actx.worker_id)
  local slept = 0
  while slept < input.ms do
    actx:sleep(100)
    slept = slept + 100
    if actx:is_cancelled() then
      append(input.marker, "cancelled " .. actx.worker_id)
      return nil
    end
  end
  append(input.marker, "end " .. actx.worker_id)
  return actx.worker_id
end)

duroxide.orchestration("SlowOnce", function(ctx, input)
  local opts = input.session and { session_id = input.session } or nil
  return assert(ctx:schedule_activity("Slow", input, opts):await())
end)

-- One long turn: pure computation for input iterations (long turns, lock renewal).
-- (and time: under ASan the long turn of t3 may outlast the default 30s turn time limit)
duroxide.configure({ turn_instruction_budget = 1000000000, turn_time_limit = "10m" })
duroxide.orchestration("Busy", function(ctx, n)
  local x = 0
  for i = 1, n do x = (x + i) % 1000003 end
  return x
end)
duroxide.orchestration("Quick", function(ctx, input) return input end)

-- One long sleep in a single call (graceful stop): marks start/end with the worker id. Only
-- the first run sleeps input.ms; a rerun (the marker exists) sleeps 100ms.
duroxide.activity("Sleepy", function(actx, input)
  local seen = io.open(input.marker, "r")
  if seen then seen:close() end
  append(input.marker, "start " .. actx.worker_id)
  actx:sleep(seen and 100 or input.ms)
  append(input.marker, "end " .. actx.worker_id)
  return actx.worker_id
end)
duroxide.orchestration("SleepyOnce", function(ctx, input)
  local opts = input.session and { session_id = input.session } or nil
  return assert(ctx:schedule_activity("Sleepy", input, opts):await())
end)

-- Computes for input.ms without yielding (it blocks the loop), then marks its run.
duroxide.activity("Hog", function(actx, input)
  local t0 = os.clock()
  while (os.clock() - t0) * 1000 < input.ms do end
  append(input.marker, (input.tag or "hog") .. " " .. actx.worker_id)
  return actx.worker_id
end)

-- Two session activities in one turn (one hogs the loop), then a third in the same session.
duroxide.orchestration("HogPair", function(ctx, input)
  local o = { session_id = input.session }
  local a = ctx:schedule_activity("Hog", { marker = input.marker, ms = input.ms, tag = "a1" }, o)
  local b = ctx:schedule_activity("Hog", { marker = input.marker, ms = 0, tag = "a2" }, o)
  local r = { ctx:join({ a, b }) }
  local c = ctx:schedule_activity("Hog", { marker = input.marker, ms = 0, tag = "a3" }, o)
  return { r[1][1], r[1][2], assert(c:await()) }
end)

-- input = { marker = path, crash = bool }: marks each run; with crash, the first run kills its
-- own worker (SIGKILL, at once: within the store's hold), as a power cut would, after its side
-- effect (on a directory store inside the transaction of the turn that scheduled it,
-- store_rounds.c); later runs return "done".
local uv = require("luv") -- (loaded here: the kill must come within the hold)
duroxide.activity("CrashOnce", function(actx, input)
  append(input.marker, "run " .. actx.worker_id)
  local seen = io.open(input.marker .. ".crashed")
  if not input.crash or seen then
    if seen then seen:close() end
    return "done"
  end
  assert(io.open(input.marker .. ".crashed", "w")):close()
  uv.kill(uv.os_getpid(), "sigkill")
  error("still alive after SIGKILL")
end)

duroxide.orchestration("CrashOnceOrch", function(ctx, input)
  return ctx:schedule_activity("CrashOnce", input):await()
end)
