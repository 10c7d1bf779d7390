-- spec/testing_apps/session_moved.lua: an orchestration that opts into the move signal
-- (on_moved = "fail") and rehydrates when its session moved (session_moved_spec.lua).
local duroxide = require("duroxide")

duroxide.activity("Step", function(actx, n)
  return { n = n, worker = actx.worker_id }
end)

duroxide.orchestration("Mover", function(ctx, input)
  local sid = input.sid
  local trail = {}
  local first = assert(ctx:schedule_activity_on_session("Step", 1, sid, { on_moved = "fail" })
    :await())
  trail[#trail + 1] = { ran = first.worker, seen = ctx:session_worker(sid) }
  ctx:schedule_wait("go"):await()
  local out, err = ctx:schedule_activity_on_session("Step", 2, sid, { on_moved = "fail" })
    :await()
  if err then
    trail[#trail + 1] = { kind = err.kind, category = err.category, message = err.message,
                          seen = ctx:session_worker(sid) }
    -- rehydrate (here: nothing to rebuild) and carry on, on the new owner
    out = assert(ctx:schedule_activity_on_session("Step", 3, sid, { on_moved = "fail" })
      :await())
  end
  trail[#trail + 1] = { ran = out.worker, seen = ctx:session_worker(sid) }
  return trail
end)
