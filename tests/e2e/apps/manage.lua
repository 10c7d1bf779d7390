-- tests/e2e/apps/manage.lua: the app tests/e2e_manage.sh runs as a worker (management commands).
local duroxide = require("duroxide")

duroxide.orchestration("Done", function(ctx, input) return input end)

-- Waits for the event "go" and returns its data.
duroxide.orchestration("Hang", function(ctx)
  return ctx:schedule_wait("go"):await()
end)

-- Runs a Hang child with the id given as input.
duroxide.orchestration("Parent", function(ctx, child)
  local out, err = ctx:schedule_sub_orchestration("Hang", nil, child):await()
  if err then return { child_failed = err.message } end
  return out
end)

-- Continues as new until n reaches 3.
duroxide.orchestration("Looper", function(ctx, n)
  if n < 3 then ctx:continue_as_new(n + 1) end
  return n
end)
