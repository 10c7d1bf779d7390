-- tests/e2e/apps/console.lua: the worker behind the web console's tests (tests/e2e_console.sh,
-- tests/browser.sh): instances that stay running, complete, fail, have a child, and one that
-- keeps a session owned by this worker.
local duroxide = require("duroxide")

duroxide.activity("Greet", function(actx, name) return "Hello, " .. name .. "!" end)
duroxide.activity("Explode", function(actx, input) error("boom: " .. tostring(input)) end)
duroxide.activity("Remember", function(actx, input) return input end)

-- Completes at once through one activity.
duroxide.orchestration("Hello", function(ctx, name)
  return assert(ctx:schedule_activity("Greet", name):await())
end)

-- Fails: its activity raises, and the orchestration passes the error on.
duroxide.orchestration("Boom", function(ctx, input)
  local out, err = ctx:schedule_activity("Explode", input):await()
  if err then error(err.message) end
  return out
end)

-- Waits for the event "go" (the console raises it), then completes with the event's data.
duroxide.orchestration("Waiter", function(ctx, input)
  ctx:set_custom_status({ waiting_for = "go" })
  local data = ctx:schedule_wait("go"):await()
  return { got = data }
end)

-- Sleeps on a long timer until cancelled.
duroxide.orchestration("Sleeper", function(ctx, input)
  ctx:schedule_timer(3600 * 1000):await()
  return "woke"
end)

-- Starts Hello as a child and returns its output.
duroxide.orchestration("Parent", function(ctx, name)
  return assert(ctx:schedule_sub_orchestration("Hello", name, "child-of-parent"):await())
end)

-- Runs one activity on session input.session, then waits for "done": the session stays owned
-- by this worker while it lives (run it with --session-idle-timeout 0).
-- input.raw appends a byte that is not UTF-8 to the session id (ids are any bytes).
duroxide.orchestration("SessionUser", function(ctx, input)
  local sid = input.raw and (input.session .. "\255") or input.session
  local r = assert(ctx:schedule_activity_on_session("Remember", "x", sid):await())
  ctx:schedule_wait("done"):await()
  return r
end)

-- Continues as new until input reaches 3: three executions, the last one Completed.
duroxide.orchestration("Counter", function(ctx, n)
  if n < 3 then ctx:continue_as_new(n + 1) end
  return n
end)
