-- tests/e2e/apps/logs.lua: the app of e2e_edges.sh's JSON log scenario -- hostile text
-- (quotes, backslashes, a newline followed by a forged record, CR, tab, control bytes and
-- invalid UTF-8) reaching the log through a trace, a session id, activity names and errors.
local duroxide = require("duroxide")

-- Bytes that are not UTF-8 go into free text only (traces, error messages): ids and names must
-- be valid UTF-8 (refused at the call on every store), so `id()` leaves them out.
local NOT_UTF8 = string.char(255, 254)

local function hostile()
  return 'q"b\\s\n2026-01-01T00:00:00.000Z error FORGED\r\t' .. string.char(1, 127) .. NOT_UTF8 ..
         ' end'
end

local function id() return (hostile():gsub(NOT_UTF8, "")) end

duroxide.activity("Echo", function(actx, x) return x end)
duroxide.activity("Boom", function(actx)
  actx:trace_warn("atrace " .. hostile())
  error(hostile(), 0)
end)

duroxide.orchestration("Hostile", function(ctx)
  local h = hostile()
  ctx:trace_info("trace " .. h)
  assert(ctx:schedule_activity_on_session("Echo", 1, "s" .. id()):await())
  ctx:schedule_activity("Boom"):await()                   -- an application error
  return ctx:schedule_activity("A" .. id()):await()       -- not registered: retried, logged
end)

duroxide.orchestration("Fails", function() error(hostile(), 0) end)

-- Fails with bytes that are not UTF-8 in its message, on any store.
duroxide.orchestration("FailsNotUtf8", function() error("bad " .. string.char(255), 0) end)

-- Schedules an activity whose name is not UTF-8: refused at the call (the instance fails).
duroxide.orchestration("NameNotUtf8", function(ctx)
  return ctx:schedule_activity("Echo" .. string.char(255)):await()
end)
