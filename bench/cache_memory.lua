-- bench/cache_memory.lua N CACHE -- RSS and Lua heap growth per idle instance (each waits for an
-- event) with orchestration_cache_size CACHE, in process (duroxide.so on LUA_CPATH). One JSON line.
local duroxide = require("duroxide")
local N, cache = tonumber(arg[1]), arg[2]
local store = os.tmpname() .. ".cm"
local function rss_kib()
  for line in io.lines("/proc/self/status") do
    local v = line:match("^VmRSS:%s+(%d+)") if v then return tonumber(v) end
  end
end
duroxide.orchestration("Waits", function(ctx)
  local a = ctx:schedule_wait("go"):await()
  return a
end)
-- (no heap prefault: its touched pages would hold the first instances and flatter the growth)
local rt = duroxide.runtime({ store = store, log_level = "warn", orchestration_cache_size = cache,
                             no_sync = true, heap_prefault = 0 })
rt:start()
local client = duroxide.client({ store = store })
-- warm up: the first instances grow pools that are not per instance
for i = 1, 200 do assert(client:start("warm" .. i, "Waits")) end
rt:run_for(500)
collectgarbage() collectgarbage()
local r0 = rss_kib()
local heap0 = collectgarbage("count")
local ids = {}
for i = 1, N do ids[#ids + 1] = "i" .. i end
for i = 1, N, 500 do
  local batch = {}
  for j = i, math.min(N, i + 499) do batch[#batch + 1] = { ids[j], "Waits", 0 } end
  assert(client:start_many(batch))
end
local idle = 0
while true do
  rt:run_for(200)
  local m = rt:metrics()
  local turns = 0
  for _, s in ipairs(m.duroxide_orchestration_turns_total.series) do turns = turns + s.value end
  if turns >= N + 200 then break end
end
rt:run_for(300)
collectgarbage() collectgarbage()
local m = rt:metrics()
local function g(name) local s = 0; for _, x in ipairs(m[name] and m[name].series or {}) do s = s + x.value end; return s end
print(string.format('{"instances":%d,"cache":"%s","entries":%d,"charged_bytes_per_entry":%.0f,"rss_kib_per_instance":%.2f,"lua_heap_kib_per_instance":%.2f}',
  N, cache, g("duroxide_orchestration_cache_entries"),
  g("duroxide_orchestration_cache_bytes") / math.max(1, g("duroxide_orchestration_cache_entries")),
  (rss_kib() - r0) / N, (collectgarbage("count") - heap0) / N))
rt:stop()
os.execute("rm -rf " .. store)
