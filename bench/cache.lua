-- bench/cache.lua WORKLOAD N CACHE -- the orchestration cache, in process (duroxide.so on
-- LUA_CPATH; a durable store in a temp dir). chain: N instances of 10 steps; long: one
-- instance of N steps (prints the step time of the first and last 10% of steps, from history
-- timestamps). CACHE: an orchestration_cache_size (0 = off) or "base" (a build without the
-- option). STORE (optional, 4th): a store to use instead of a temp dir (a postgres:// URL). One JSON line with wall time and the process's CPU time (os.clock: every thread).
--   LUA_CPATH="build/bindings/?.so;;" lua5.4 bench/cache.lua long 5000 64m
local duroxide = require("duroxide")
local uv = require("luv")
local workload, N, cache = arg[1], tonumber(arg[2]), arg[3]
local store = arg[4] or (os.tmpname() .. ".cb") -- a postgres:// URL: a fresh schema please
duroxide.activity("Inc", function(actx, v) return v + 1 end)
duroxide.orchestration("Chain", function(ctx, steps)
  local v = 0
  for _ = 1, steps do v = assert(ctx:schedule_activity("Inc", v):await()) end
  return v
end)
local rt = duroxide.runtime({ store = store, log_level = "warn", orchestration_cache_size = cache ~= "base" and cache or nil })
rt:start()
local client = duroxide.client({ store = store })
local ids, steps = {}, workload == "chain" and 10 or N
local count = workload == "chain" and N or 1
local c0, t0 = os.clock(), uv.hrtime()
for i = 1, count do ids[i] = "i" .. i; assert(client:start(ids[i], "Chain", steps)) end

local left = count
while left > 0 do
  rt:run_for(20)
  left = 0
  for _, id in ipairs(ids) do
    local st = client:status(id)
    if st.status ~= "Completed" then left = left + 1 end
  end
end
local cpu, wall = os.clock() - c0, (uv.hrtime() - t0) / 1e6
local extra = ""
if workload == "long" then
  local h = client:history(ids[1])
  local ts = {}
  for _, e in ipairs(h) do if e.type == "ActivityCompleted" then ts[#ts + 1] = e.timestamp_ms end end
  local k = math.max(2, #ts // 10)
  local first = (ts[k] - ts[1]) / (k - 1)
  local last = (ts[#ts] - ts[#ts - k + 1]) / (k - 1)
  extra = string.format(',"first10_step_ms":%.3f,"last10_step_ms":%.3f', first, last)
end
local m = rt:metrics()
local function sum(name) local s = 0; if not m[name] then return -1 end; for _, x in ipairs(m[name].series) do s = s + (x.value or x.count) end; return s end
print(string.format('{"workload":"%s","n":%d,"cache":"%s","wall_ms":%.0f,"cpu_s":%.3f,"cpu_ms_per_orch":%.3f,"hits":%d,"replays":%d%s}',
  workload, N, cache, wall, cpu, cpu * 1000 / count, sum("duroxide_orchestration_cache_hits_total"),
  sum("duroxide_orchestration_replays_total"), extra))
rt:stop()
if not arg[4] then os.execute("rm -rf " .. store) end
