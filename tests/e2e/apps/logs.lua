-- tests/e2e/apps/logs.lua: the app of e2e_edges.sh's JSON log scenario -- hostile text
-- (quotes, backslashes, a newline followed by a forged record, CR, tab, control bytes and
-- invalid UTF-8) reaching the log through a trace, a session id, activity names and errors.
local duroxide = require("duroxide")

-- Bytes that are not UTF-8, except on PostgreSQL, whose text columns refuse them (the run
-- there checks the rest; e2e_edges.sh shows that case as a TODO with FailsNotUtf8).
local NOT_UTF8 = os.getenv("DX_E2E_STORE") == "pg" and "" or string.char(255, 254)

local function hostile()
  return 'q"b\\s\n2026-01-01T00:00:00.000Z error FORGED\r\t' .. string.char(1, 127) .. NOT_UTF8 ..
         ' end'
end

duroxide.activity("Echo", function(actx, x) return x end)
duroxide.activity("Boom", function(actx)
  actx:trace_warn("atrace " .. hostile())
  error(hostile(), 0)
end)

duroxide.orchestration("Hostile", function(ctx)
  local h = hostile()
  ctx:trace_info("trace " .. h)
  assert(ctx:schedule_activity_on_session("Echo", 1, "s" .. h):await())
  ctx:schedule_activity("Boom"):await()                   -- an application error
  return ctx:schedule_activity("A" .. h):await()          -- not registered: retried, logged
end)

duroxide.orchestration("Fails", function() error(hostile(), 0) end)

-- Fails with bytes that are not UTF-8 in its message, on any store.
duroxide.orchestration("FailsNotUtf8", function() error("bad " .. string.char(255), 0) end)
