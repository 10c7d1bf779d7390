-- bench/bench.lua: workloads measured the way ../shared/peers/duroxide-node measures the Rust
-- duroxide: 5 warm-up orchestrations, then all N started at once; orch_per_s = N / time from
-- the first start to the last completion; latency per instance = start -> completion commit.
local duroxide = require("duroxide")

local opts = { workload = "fanout", n = nil, store = nil, no_sync = false }
local i = 1
while i <= #arg do
  local a = arg[i]
  if a == "--workload" then opts.workload = arg[i + 1]; i = i + 1
  elseif a == "--n" then opts.n = tonumber(arg[i + 1]); i = i + 1
  elseif a == "--store" then opts.store = arg[i + 1]; i = i + 1
  else io.stderr:write("bench: unknown argument " .. a .. "\n"); os.exit(2) end
  i = i + 1
end

local workloads = {
  fanout = { n = 200, acts = 5 },
  chain = { n = 200, acts = 10 },
  hello = { n = 20, acts = 1, serial = true },
}
local w = workloads[opts.workload]
if not w then io.stderr:write("bench: unknown workload " .. tostring(opts.workload) .. "\n"); os.exit(2) end
local n = opts.n or w.n

local store = opts.store or (os.tmpname() .. ".dxbench")
os.remove(store)
os.execute("rm -rf '" .. store .. "' && mkdir -p '" .. store .. "'")

duroxide.activity("Echo", function(actx, x) return x end)
duroxide.activity("Inc", function(actx, x) return x + 1 end)
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
duroxide.orchestration("Hello", function(ctx, name)
  return assert(ctx:schedule_activity("Echo", "Hello, " .. name):await())
end)

local orch = ({ fanout = "Fanout", chain = "Chain", hello = "Hello" })[opts.workload]
local input_of = function(k) return opts.workload == "hello" and ("n" .. k) or 0 end

local rt = duroxide.runtime({ store = store, log_level = "warn" })
rt:start()
local client = duroxide.client({ store = store })

local function now_ms()
  local uv = require("luv")
  uv.update_time()
  return uv.now() -- monotonic ms; converted below via an offset to wall time
end

local function run_batch(prefix, count, serial)
  local starts, ids = {}, {}
  local uv = require("luv")
  for k = 1, count do
    local id = prefix .. k
    ids[k] = id
    starts[k] = duroxide.json_decode(tostring(os.time())) -- placeholder, replaced below
  end
  local t0
  local wall0 = nil
  local function wall_ms()
    -- wall clock ms with sub-second precision from luv
    local s, us = uv.gettimeofday()
    return s * 1000 + us // 1000
  end
  wall0 = wall_ms()
  t0 = wall0
  if serial then
    for k = 1, count do
      starts[k] = wall_ms()
      assert(client:start(ids[k], orch, input_of(k)))
      local st = assert(client:wait(ids[k], 30000))
      assert(st.status == "Completed", "instance failed: " .. tostring(st.error and st.error.message))
    end
  else
    -- "all N started at once": one durable commit for the whole burst
    local list = {}
    for k = 1, count do list[k] = { ids[k], orch, input_of(k) } end
    local t = wall_ms()
    for k = 1, count do starts[k] = t end
    assert(client:start_many(list))
  end
  if not serial then
    local pending = count
    local done = {}
    local ok = rt:run_until(function()
      for k = 1, count do
        if not done[k] then
          local st = client:status(ids[k])
          if st.status == "Completed" or st.status == "Failed" then
            done[k] = true
            pending = pending - 1
          else
            return false
          end
        end
      end
      return pending == 0
    end, 300000)
    assert(ok, "timed out")
  end
  -- completion commit times from history
  local lat, last, failed = {}, 0, 0
  for k = 1, count do
    local h = client:history(ids[k])
    local fin = h[#h]
    if fin.type ~= "OrchestrationCompleted" then failed = failed + 1 end
    lat[k] = fin.timestamp_ms - starts[k]
    if fin.timestamp_ms > last then last = fin.timestamp_ms end
  end
  return t0, last, lat, failed
end

run_batch("warm-", 5, w.serial)
local t0, last, lat, failed = run_batch("b-", n, w.serial)
table.sort(lat)
local function pct(p) return lat[math.max(1, math.ceil(#lat * p))] end
local makespan = math.max(1, last - t0)
local stats = rt:stats()
rt:stop()
client:close()
os.execute("rm -rf '" .. store .. "'")
-- Formatted by hand so rates print with one decimal (the canonical encoder keeps 17 digits).
local function rate(x) return w.serial and "null" or string.format("%.1f", x) end
print(string.format('{"engine":"duroxide-lua","workload":"%s","n":%d,"orch_per_s":%s,' ..
  '"act_per_s":%s,"p50_ms":%d,"p95_ms":%d,"makespan_ms":%d,"failed":%d,"commits":%d,' ..
  '"durable":true,"worker":"same process","start":"%s"}',
  opts.workload, n, rate(n / makespan * 1000), rate(n * w.acts / makespan * 1000),
  pct(0.5), pct(0.95), makespan, failed, stats.commits,
  w.serial and "one at a time" or "one batch commit"))
