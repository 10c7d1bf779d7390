-- bench/workloads.lua: the benchmark orchestrations and activities. Loaded by bench.lua for an
-- in-process worker, and run directly as an app by external workers:
--   duroxide-lua bench/workloads.lua --store DIR
local duroxide = require("duroxide")

duroxide.activity("Echo", function(actx, x) return x end)
duroxide.activity("Inc", function(actx, x) return x + 1 end)

-- Records which worker ran it: {value + 1, worker_id}.
duroxide.activity("IncWhere", function(actx, x) return { x[1] + 1, actx.worker_id } end)

-- CPU-bound: busy for `ms` of CPU time on the worker's loop (no yield); reports the worker.
duroxide.activity("Burn", function(actx, ms)
  local t = os.clock()
  while os.clock() - t < ms / 1000 do end
  return actx.worker_id
end)

-- Handoff probe: sleeps a little, reports worker and wall time.
duroxide.activity("Tick", function(actx, n)
  actx:sleep(50)
  local uv = require("luv")
  local s, us = uv.gettimeofday()
  return { n = n, worker = actx.worker_id, at = s * 1000 + us // 1000 }
end)

duroxide.orchestration("Fanout", function(ctx, input)
  local fs = {}
  for k = 1, 5 do fs[k] = ctx:schedule_activity("Echo", input + k) end
  local vals = ctx:join(fs)
  local sum = 0
  for k = 1, 5 do sum = sum + vals[k] end
  return sum
end)

duroxide.orchestration("Chain", function(ctx, input)
  local x = input
  for _ = 1, 10 do x = assert(ctx:schedule_activity("Inc", x):await()) end
  return x
end)

-- The cpu workload: one CPU-bound activity of 50 ms; returns the worker that ran it.
duroxide.orchestration("Cpu", function(ctx, input)
  return assert(ctx:schedule_activity("Burn", 50):await())
end)

-- One turn, no activity: fills a store quickly (the list workload, --prefill).
duroxide.orchestration("Quick", function(ctx, input) return input end)

-- The long workload: one orchestration of `steps` sequential activities; its history grows by
-- two events a step, so a late step replays (without the cache) far more than an early one.
duroxide.orchestration("Long", function(ctx, steps)
  local x = 0
  for _ = 1, steps do x = assert(ctx:schedule_activity("Inc", x):await()) end
  return x
end)

-- The payload workload: a payload of `kib` KiB made in the orchestration and passed through
-- `steps` sequential activities (each step's input and result are in the history).
duroxide.orchestration("Payload", function(ctx, input)
  local p = string.rep("x", input.kib * 1024)
  for _ = 1, input.steps do p = assert(ctx:schedule_activity("Echo", p):await()) end
  return #p
end)

-- The idle workload: one turn, then waits for an event (a cached idle instance).
duroxide.orchestration("Idle", function(ctx, input)
  return ctx:schedule_wait("go"):await()
end)

duroxide.orchestration("Hello", function(ctx, name)
  return assert(ctx:schedule_activity("Echo", "Hello, " .. name):await())
end)

-- 10 sequential activities on the orchestration's own session; returns the workers seen.
duroxide.orchestration("Session", function(ctx, input)
  local sid = "s-" .. ctx.instance_id
  local x, seen, workers = { 0 }, {}, {}
  for _ = 1, 10 do
    local out = assert(ctx:schedule_activity_on_session("IncWhere", x, sid):await())
    x = { out[1] }
    if not seen[out[2]] then seen[out[2]] = true; workers[#workers + 1] = out[2] end
  end
  -- Done with the session: free the worker's slot now instead of after the idle timeout.
  ctx:close_session(sid)
  return { value = x[1], workers = workers }
end)

-- Runs Tick on one session until stopped by an event; the ticks show when the session moved.
duroxide.orchestration("Ticker", function(ctx, input)
  local ticks = {}
  for n = 1, input.max do
    ticks[#ticks + 1] = assert(ctx:schedule_activity_on_session("Tick", n, input.session):await())
    ctx:set_custom_status({ last = ticks[#ticks] })
  end
  return ticks
end)
