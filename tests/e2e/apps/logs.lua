-- tests/e2e/apps/logs.lua: the app of e2e_edges.sh's JSON log scenario -- hostile text
-- (quotes, backslashes, a newline followed by a forged record, CR, tab, control bytes and
-- invalid UTF-8) reaching the log through a trace, a session id, activity names and errors.
local duroxide = require("duroxide")

local function hostile()
  return 'q"b\\s\n2026-01-01T00:00:00.000Z error FORGED\r\t' .. string.char(1, 127, 255, 254) ..
         ' end'
end

duroxide.activity("Echo", function(actx, x) return x end)
duroxide.activity("Boom", function() error(hostile(), 0) end)

duroxide.orchestration("Hostile", function(ctx)
  local h = hostile()
  ctx:trace_info("trace " .. h)
  assert(ctx:schedule_activity_on_session("Echo", 1, "s" .. h):await())
  ctx:schedule_activity("Boom"):await()                   -- an application error
  return ctx:schedule_activity("A" .. h):await()          -- not registered: retried, logged
end)

duroxide.orchestration("Fails", function() error(hostile(), 0) end)
