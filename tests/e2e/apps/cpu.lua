-- tests/e2e/apps/cpu.lua: the app of e2e.sh's s10_cpu_split -- CPU-bound Lua activities that
-- never yield, so a worker that took them all would run them one after another on its loop.
local duroxide = require("duroxide")

-- Busy for `ms` of CPU time, then names the worker that ran it.
duroxide.activity("Burn", function(actx, ms)
  local t = os.clock()
  while os.clock() - t < ms / 1000 do end
  return actx.worker_id
end)

-- One turn schedules all n activities at once (one commit queues them all); returns how many
-- each worker ran: { [worker_id] = count }.
duroxide.orchestration("CpuFan", function(ctx, input)
  local fs = {}
  for k = 1, input.n do fs[k] = ctx:schedule_activity("Burn", input.ms) end
  local per = {}
  for _, w in ipairs(ctx:join(fs)) do per[w] = (per[w] or 0) + 1 end
  return per
end)
