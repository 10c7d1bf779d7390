-- bench/bench.lua: workloads measured the way ../shared/peers/duroxide-node measures the Rust
-- duroxide: 5 warm-up orchestrations, then all N started at once; orch_per_s = N / time from
-- the first start to the last completion commit; latency per instance = its start to its
-- completion commit. Prints one JSON line (with "store":"lmdb"|"postgres"). See bench/run for
-- the options.
local duroxide = require("duroxide")
local uv = require("luv")

local here = arg[0]:match("^(.*)/[^/]*$") or "."
dofile(here .. "/workloads.lua")

local opts = { workload = "fanout", workers = 0, signal = "KILL" }
local i = 1
while i <= #arg do
  local a, v = arg[i], arg[i + 1]
  if a == "--workload" then opts.workload = v
  elseif a == "--n" then opts.n = tonumber(v)
  elseif a == "--store" then opts.store = v
  elseif a == "--workers" then opts.workers = tonumber(v)
  elseif a == "--signal" then opts.signal = v
  elseif a == "--max-sessions" then opts.max_sessions = tonumber(v)
  else io.stderr:write("bench: unknown argument " .. a .. "\n"); os.exit(2) end
  i = i + 2
end

local workloads = {
  fanout = { n = 200, acts = 5, orch = "Fanout" },
  chain = { n = 200, acts = 10, orch = "Chain" },
  hello = { n = 20, acts = 1, orch = "Hello", serial = true },
  session = { n = 200, acts = 10, orch = "Session" },
  handoff = { n = 1, acts = 0, orch = "Ticker", workers = 2 },
}
local w = workloads[opts.workload]
if not w then io.stderr:write("bench: unknown workload " .. tostring(opts.workload) .. "\n"); os.exit(2) end
local n = opts.n or w.n
local external = opts.workers > 0 and opts.workers or (w.workers or 0)

local function wall_ms()
  local s, us = uv.gettimeofday()
  return s * 1000 + us // 1000
end

local function sleep_ms(ms) uv.sleep(ms) end

-- A directory store is made fresh (and removed at the end); a postgres:// URL gets a fresh
-- schema of its own unless it names one (?schema=), and is left in place.
local store = opts.store or (os.tmpname() .. ".dxbench")
local store_kind = (store:match("^postgres://") or store:match("^postgresql://")) and "postgres"
  or "lmdb"
if store_kind == "postgres" then
  if not store:find("[?&]schema=") then
    store = store .. (store:find("?", 1, true) and "&" or "?") ..
      string.format("schema=bench_%d_%d", os.time(), math.random(1, 999999))
  end
else
  os.execute("rm -rf '" .. store .. "' && mkdir -p '" .. store .. "'")
end
local client = duroxide.client({ store = store })

-- {===== workers =====}

local rt
local procs = {}
local function start_external(k, extra)
  local bin = os.getenv("DUROXIDE_LUA")
  local args = { here .. "/workloads.lua", "--store", store, "--log-level", "warn",
                 "--worker-node-id", "w" .. k }
  if opts.max_sessions then
    args[#args + 1] = "--max-sessions-per-worker"
    args[#args + 1] = tostring(opts.max_sessions)
  end
  for _, x in ipairs(extra or {}) do args[#args + 1] = x end
  local handle, pid = uv.spawn(bin, { args = args, stdio = { nil, nil, 2 } }, function() end)
  assert(handle, "cannot start worker " .. tostring(pid))
  procs[k] = { handle = handle, pid = pid, id = "w" .. k }
end

local function stop_external()
  for _, p in pairs(procs) do
    if p.alive ~= false then pcall(uv.kill, p.pid, "sigterm") end
  end
  uv.run("nowait")
end

if external > 0 then
  for k = 1, external do start_external(k) end
else
  rt = duroxide.runtime({ store = store, log_level = "warn",
                          max_sessions_per_worker = opts.max_sessions })
  rt:start()
end

-- Drive the in-process runtime, or just wait while external workers run.
local function pump(ms)
  if rt then rt:run_for(ms) else sleep_ms(ms) end
end

local function finished(id)
  local st = client:status(id)
  return st.status == "Completed" or st.status == "Failed"
end

local function wait_all(ids, timeout_ms)
  local deadline, k = wall_ms() + timeout_ms, 1
  while k <= #ids do
    if finished(ids[k]) then k = k + 1
    else
      assert(wall_ms() < deadline, "timed out waiting for " .. ids[k])
      pump(2)
    end
  end
end

-- {===== throughput workloads =====}

local function input_of(k) return opts.workload == "hello" and ("n" .. k) or 0 end

local function run_batch(prefix, count)
  local ids, starts = {}, {}
  for k = 1, count do ids[k] = prefix .. k end
  if w.serial then
    for k = 1, count do
      starts[k] = wall_ms()
      assert(client:start(ids[k], w.orch, input_of(k)))
      wait_all({ ids[k] }, 30000)
    end
  else
    -- "all N started at once": one durable commit for the whole burst
    local list = {}
    for k = 1, count do list[k] = { ids[k], w.orch, input_of(k) } end
    local t = wall_ms()
    for k = 1, count do starts[k] = t end
    assert(client:start_many(list))
    wait_all(ids, 600000)
  end
  local lat, first, last, failed, workers_per = {}, starts[1], 0, 0, {}
  for k = 1, count do
    local h = client:history(ids[k])
    local fin = h[#h]
    if fin.type ~= "OrchestrationCompleted" then failed = failed + 1 end
    lat[k] = fin.timestamp_ms - starts[k]
    if fin.timestamp_ms > last then last = fin.timestamp_ms end
    if opts.workload == "session" and fin.data then workers_per[#workers_per + 1] = #fin.data.workers end
  end
  return first, last, lat, failed, workers_per
end

local function throughput()
  run_batch("warm-", 5)
  local t0, last, lat, failed, workers_per = run_batch("b-", n)
  table.sort(lat)
  local function pct(p) return lat[math.max(1, math.ceil(#lat * p))] end
  local makespan = math.max(1, last - t0)
  local affinity = true
  for _, c in ipairs(workers_per) do if c ~= 1 then affinity = false end end
  local function rate(x) return w.serial and "null" or string.format("%.1f", x) end
  local extra = ""
  if opts.workload == "session" then
    extra = string.format(',"affinity_ok":%s,"max_sessions_per_worker":%d', tostring(affinity),
                          opts.max_sessions or 10)
  end
  return string.format('{"engine":"duroxide-lua","workload":"%s","n":%d,"orch_per_s":%s,' ..
    '"act_per_s":%s,"p50_ms":%d,"p95_ms":%d,"makespan_ms":%d,"failed":%d%s,' ..
    '"durable":true,"worker":"%s","start":"%s"}',
    opts.workload, n, rate(n / makespan * 1000), rate(n * w.acts / makespan * 1000),
    pct(0.5), pct(0.95), makespan, failed, extra,
    external > 0 and (external .. " separate processes") or "same process",
    w.serial and "one at a time" or "one batch commit")
end

-- {===== session handoff =====}

-- Time from killing (or stopping) a session's owner to the first activity of that session on
-- the other worker, with default options (30 s session lease, 30 s activity lock).
local function handoff()
  local id = "handoff-1"
  assert(client:start(id, "Ticker", { max = 100000, session = "h" }))
  local function last_tick()
    local st = client:status(id)
    return st.custom_status and st.custom_status.last
  end
  local deadline = wall_ms() + 30000
  while not (last_tick() and last_tick().n >= 3) do
    assert(wall_ms() < deadline, "no ticks")
    sleep_ms(10)
  end
  local owner = last_tick().worker
  local victim
  for _, p in pairs(procs) do if p.id == owner then victim = p end end
  local t_kill = wall_ms()
  uv.kill(victim.pid, opts.signal == "TERM" and "sigterm" or "sigkill")
  victim.alive = false
  deadline = wall_ms() + 120000
  local moved
  repeat
    sleep_ms(5)
    local t = last_tick()
    if t and t.worker ~= owner then moved = t end
    assert(wall_ms() < deadline, "session did not move")
  until moved
  client:cancel(id, "benchmark done")
  -- `moved.at` is when the first tick on the new owner finished; it slept 50 ms.
  return string.format('{"engine":"duroxide-lua","workload":"handoff","signal":"SIG%s",' ..
    '"handoff_ms":%d,"from":"%s","to":"%s","session_lock_timeout_ms":30000,' ..
    '"worker_lock_timeout_ms":30000,"durable":true,"worker":"2 separate processes"}',
    opts.signal, moved.at - 50 - t_kill, owner, moved.worker)
end

local ok, line = pcall(opts.workload == "handoff" and handoff or throughput)
if rt then rt:stop() end
stop_external()
client:close()
if store_kind == "lmdb" then os.execute("rm -rf '" .. store .. "'") end
if not ok then io.stderr:write("bench: " .. tostring(line) .. "\n"); os.exit(1) end
-- every line names the store it measured
print((line:gsub('^{"engine":"duroxide%-lua",', '{"engine":"duroxide-lua","store":"' .. store_kind .. '",')))
