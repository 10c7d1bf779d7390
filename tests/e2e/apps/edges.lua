-- tests/e2e/apps/edges.lua: the app of tests/e2e_edges.sh -- activities that misuse luv, and
-- code that blocks the loop.
local duroxide = require("duroxide")
local uv = require("luv")

-- uv.stop() ends one uv_run of the worker's loop.
duroxide.activity("UvStop", function() uv.stop(); return "stopped" end)

-- Close every handle uv.walk shows (the engine's own handles must not be among them).
duroxide.activity("UvWalk", function()
  local n = 0
  uv.walk(function(h)
    if not h:is_closing() then h:close(); n = n + 1 end
  end)
  return n
end)

-- Re-enter the running loop.
duroxide.activity("UvRun", function() uv.run("nowait"); return "ran" end)

-- Leak a repeating timer and a listening socket: they stay active after the activity.
duroxide.activity("UvLeak", function()
  local t = uv.new_timer()
  t:start(10, 10, function() end)
  local s = uv.new_tcp()
  assert(s:bind("127.0.0.1", 0))
  assert(s:listen(1, function() end))
  return "leaked"
end)

-- Hold the loop (CPU-bound) until the worker's log shows the blocked-loop warning, so the
-- test does not depend on timing; gives up after 30 s.
duroxide.activity("BlockUntilWarned", function(actx, log)
  local deadline = os.time() + 30
  while os.time() < deadline do
    local t0 = os.clock()
    while os.clock() - t0 < 0.05 do end
    local f = io.open(log)
    local text = f and f:read("a") or ""
    if f then f:close() end
    if text:find("loop blocked", 1, true) then return "warned" end
  end
  return "not warned"
end)

-- Run activity a.name with a.input.
duroxide.orchestration("Call", function(ctx, a)
  return assert(ctx:schedule_activity(a.name, a.input):await())
end)

-- A turn that runs until the instruction budget stops it.
duroxide.orchestration("Spin", function() while true do end end)

duroxide.orchestration("Quick", function(ctx, input) return input end)
