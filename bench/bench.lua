-- bench/bench.lua: workloads measured the way ../shared/peers/duroxide-node measures the Rust
-- duroxide: 5 warm-up orchestrations, then all N started at once; orch_per_s = N / time from
-- the first start to the last completion commit; latency per instance = its start to its
-- completion commit (p50_ms/p95_ms with 0.01 ms precision). hello starts one at a time and its
-- latency is what the caller sees: the monotonic time from before client:start to the return
-- of client:wait. Prints one JSON line (with "store":"lmdb"|"postgres"). See bench/run for the
-- options.
local duroxide = require("duroxide")
local uv = require("luv")

local here = arg[0]:match("^(.*)/[^/]*$") or "."
dofile(here .. "/workloads.lua")

local function usage(msg)
  io.stderr:write("bench: " .. msg .. "\n")
  os.exit(2)
end

-- Options: name -> { field, kind }. Every value is checked here, before anything runs.
local OPTIONS = {
  ["--workload"] = { "workload", "string" }, ["--n"] = { "n", "count" },
  ["--store"] = { "store", "string" }, ["--workers"] = { "workers", "count" },
  ["--signal"] = { "signal", "string" }, ["--max-sessions"] = { "max_sessions", "count" },
  ["--steps"] = { "steps", "count" }, ["--kib"] = { "kib", "count" },
  ["--cache"] = { "cache", "string" }, ["--prefill"] = { "prefill", "count" },
  ["--settle"] = { "settle", "string" },
}
local opts = { workload = "fanout", workers = 0, signal = "KILL", cache = "on", prefill = 0 }
local i = 1
while i <= #arg do
  local a, v = arg[i], arg[i + 1]
  local o = OPTIONS[a]
  if not o then usage("unknown argument " .. a) end
  if v == nil then usage(a .. " needs a value") end
  if o[2] == "count" then
    local x = tonumber(v)
    if not x or x ~= math.floor(x) or x < 0 then
      usage(string.format("%s expects a whole number of 0 or more, got '%s'", a, v))
    end
    v = math.tointeger(x)
  end
  opts[o[1]] = v
  i = i + 2
end
if opts.settle ~= nil and opts.settle ~= "0" and opts.settle ~= "1" then
  usage("--settle expects 0 or 1, got '" .. opts.settle .. "'")
end
opts.no_settle = opts.settle == "0"
if opts.cache ~= "on" and opts.cache ~= "off" then
  usage("--cache expects on or off, got '" .. opts.cache .. "'")
end
-- A build without the orchestration cache has no option to turn it off: its lines say
-- "cache":"absent" (the option is in the worker's --help when the cache is there).
local function build_has_cache()
  local bin = os.getenv("DUROXIDE_LUA") or usage("DUROXIDE_LUA is not set (run bench/run)")
  local pipe = io.popen("'" .. bin .. "' --help 2>&1")
  local help = pipe:read("a")
  pipe:close()
  return help:find("--orchestration-cache-size", 1, true) ~= nil
end
if not build_has_cache() then
  if opts.cache == "off" then usage("--cache off: this build has no orchestration cache") end
  opts.cache = "absent"
end
if opts.signal ~= "KILL" and opts.signal ~= "TERM" then
  usage("--signal expects KILL or TERM, got '" .. opts.signal .. "'")
end

-- The workloads. `input(k)` is instance k's input; `kind` picks the function that runs it
-- (throughput by default). `steps`/`kib` give long/payload their sizes.
local steps = opts.steps or 10
local kib = opts.kib or 100
local workloads = {
  fanout = { n = 200, acts = 5, orch = "Fanout" },
  chain = { n = 200, acts = 10, orch = "Chain" },
  hello = { n = 20, acts = 1, orch = "Hello", serial = true,
            input = function(k) return "n" .. k end },
  session = { n = 200, acts = 10, orch = "Session" },
  cpu = { n = 200, acts = 1, orch = "Cpu" },
  payload = { n = 20, acts = steps, orch = "Payload",
              input = function() return { kib = kib, steps = steps } end },
  long = { n = 1, orch = "Long", kind = "long" },
  idle = { n = 10000, orch = "Idle", kind = "idle", workers = 1 },
  handoff = { n = 1, acts = 0, orch = "Ticker", workers = 2, kind = "handoff" },
  list = { n = 100000, acts = 0, orch = "Quick", kind = "list" },
}
local w = workloads[opts.workload]
if not w then usage("unknown workload " .. tostring(opts.workload)) end
if opts.steps and opts.workload ~= "long" and opts.workload ~= "payload" then
  usage("--steps applies to the long and payload workloads")
end
if opts.kib and opts.workload ~= "payload" then usage("--kib applies to the payload workload") end
if opts.prefill > 0 and opts.workload == "list" then usage("--prefill does not apply to list") end
if opts.workload == "idle" and opts.workers > 1 then
  usage("idle measures one worker process (--workers 1)")
end
if opts.workload == "long" then opts.steps = opts.steps or 5000 end
if (opts.steps and opts.steps < 1) or (opts.kib and opts.kib < 1) or (opts.n and opts.n < 1) then
  usage("--n, --steps and --kib must be at least 1")
end
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
      -- the process id: math.random's seed repeats when ASLR is off (as under ASan), and
      -- two runs in one second then shared a schema
      string.format("schema=bench_%d_%d_%d", os.time(), uv.os_getpid(), math.random(1, 999999))
  end
else
  os.execute("rm -rf '" .. store .. "' && mkdir -p '" .. store .. "'")
end
local client = duroxide.client({ store = store })

-- {===== workers =====}

-- --cache off: the orchestration cache is off in every worker (in-process and external).
local CACHE_OPTION = "orchestration-cache-size"
-- The cache's figures on a worker's /metrics (idle workload); absent before the cache lands.
local CACHE_BYTES_METRIC = "duroxide_orchestration_cache_bytes"
local CACHE_ENTRIES_METRIC = "duroxide_orchestration_cache_entries"

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
  if opts.cache == "off" then
    args[#args + 1] = "--" .. CACHE_OPTION
    args[#args + 1] = "0"
  end
  for _, x in ipairs(extra or {}) do args[#args + 1] = x end
  local p = { id = "w" .. k }
  p.handle, p.pid = uv.spawn(bin, { args = args, stdio = { nil, nil, 2 } },
                             function(code) p.alive, p.code = false, code end)
  assert(p.handle, "cannot start worker " .. tostring(p.pid))
  procs[k] = p
end

local function stop_external()
  for _, p in pairs(procs) do
    if p.alive ~= false then pcall(uv.kill, p.pid, "sigterm") end
  end
  -- wait (bounded) for them to exit, so no worker outlives the benchmark
  local deadline = wall_ms() + 30000
  for _, p in pairs(procs) do
    while p.alive ~= false and wall_ms() < deadline do uv.run("once") end
  end
end

local function runtime_opts(extra)
  local o = { store = store, log_level = "warn", max_sessions_per_worker = opts.max_sessions }
  if opts.cache == "off" then o[(CACHE_OPTION:gsub("%-", "_"))] = 0 end
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end

-- Drive the in-process runtime, or just wait while external workers run (and notice one
-- that died: its exit code, instead of a timeout later).
local function pump(ms)
  if rt then rt:run_for(ms) else
    sleep_ms(ms)
    uv.run("nowait")
    for _, p in pairs(procs) do
      if p.alive == false and not p.expected then
        error(string.format("worker %s exited (code %s)", p.id, tostring(p.code)))
      end
    end
  end
end

-- CPU seconds (user + system) the worker(s) used so far: the in-process runtime shares this
-- process with the client; external workers are read from /proc.
local function worker_cpu_s()
  if rt then return os.clock() end
  local sum = 0
  for _, p in pairs(procs) do
    local f = io.open("/proc/" .. p.pid .. "/stat")
    if f then
      local txt = f:read("a")
      f:close()
      -- fields after the command name "(...)": state is 3rd; utime, stime are 14th, 15th
      local rest = txt:match("%) (.*)$")
      local fields = {}
      for x in rest:gmatch("%S+") do fields[#fields + 1] = x end
      sum = sum + (tonumber(fields[12]) + tonumber(fields[13])) / 100
    end
  end
  return sum
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

-- Every instance the store holds has run (a queued start shows as Pending, a started one as
-- Running until it ends).
local function wait_store_settled(timeout_ms)
  local deadline = wall_ms() + timeout_ms
  while #client:list { status = "Running", limit = 1 } > 0
    or #client:list { status = "Pending", limit = 1 } > 0 do
    assert(wall_ms() < deadline, "timed out waiting for the store's instances to finish")
    pump(5)
  end
end

-- Every started instance has run its first turn and nothing waits in the orchestrator queue
-- (instances that wait for an event stay Running).
local function wait_store_settled_idle(timeout_ms)
  local deadline = wall_ms() + timeout_ms
  while #client:list { status = "Pending", limit = 1 } > 0
    or client:stats().orchestrator_queue > 0 do
    assert(wall_ms() < deadline, "timed out waiting for the instances' first turns")
    pump(5)
  end
end

-- Start `count` instances of `orch` (ids prefix..k, input k) with start_many in chunks of
-- 2000 (one commit each), keeping at most two chunks ahead of the workers, then wait until
-- each has run (`idle`: its first turn, it waits for an event; else it finished): every id by
-- a status lookup, then one check over the whole store (a status filter reads every
-- instance, so it is not polled). Returns the seconds it took.
local function has_run(id) return client:status(id).status ~= "Pending" end

local function fill(prefix, count, orch, idle)
  local t0, chunk = wall_ms(), 2000
  local ran = idle and has_run or finished
  local deadline = wall_ms() + 600000
  local function wait_for(k)
    while not ran(prefix .. k) do
      assert(wall_ms() < deadline, "timed out waiting for " .. prefix .. k)
      pump(5)
    end
  end
  local waited = 0 -- instances 1..waited have run
  for base = 0, count - 1, chunk do
    local batch = {}
    for k = base + 1, math.min(count, base + chunk) do batch[#batch + 1] = { prefix .. k, orch, k } end
    assert(client:start_many(batch))
    while waited < base - chunk do waited = waited + 1; wait_for(waited) end
  end
  while waited < count do waited = waited + 1; wait_for(waited) end
  local settled = idle and wait_store_settled_idle or wait_store_settled
  settled(600000)
  return (wall_ms() - t0) / 1000
end

-- --prefill N: the store holds N completed instances before the workload starts. A runtime of
-- its own fills it before the measured workers start, without fsync (the fill is not what is
-- measured): one-turn orchestrations, started in batches.
local prefill_s = 0
local function setup()
  -- Dirty pages left by whatever ran before (the peer's SQLite does not fsync its commits) are
  -- flushed first, not written back during this run's fsyncs.
  os.execute("sync")
  if opts.prefill > 0 then
    rt = duroxide.runtime(runtime_opts({ no_sync = true }))
    rt:start()
    prefill_s = fill("p-", opts.prefill, "Quick")
    local held = client:stats().instances
    assert(held >= opts.prefill, string.format("prefill: the store holds %d instances, not %d",
                                               held, opts.prefill))
    rt:stop()
    rt = nil
    -- The fill's unsynced pages would otherwise be flushed by the measured workload's first
    -- durable commit (LMDB: fdatasync of the whole file).
    os.execute("sync")
  end
  if external > 0 then
    for k = 1, external do
      local extra
      if w.kind == "idle" then -- the worker serves /metrics on a port picked here
        math.randomseed(os.time() + uv.os_getpid())
        -- (no heap prefault: its touched pages would hold the first instances' memory, and
        -- the growth per instance would look smaller than it is)
        extra = { "--metrics-listen", "127.0.0.1:" .. math.random(20000, 60000),
                  "--heap-prefault", "0" }
      end
      start_external(k, extra)
      if extra then procs[k].metrics_port = tonumber(extra[2]:match(":(%d+)$")) end
    end
  else
    rt = duroxide.runtime(runtime_opts())
    rt:start()
  end
end

-- {===== throughput workloads =====}

local function worker_label()
  if external == 0 then return "same process" end
  return external .. (external == 1 and " separate process" or " separate processes")
end

local function input_of(k) return w.input and w.input(k) or 0 end

local per_worker = {} -- cpu: activities each worker ran (measured batch only)

-- In-process, every status lookup is a read transaction on the loop thread the workload runs
-- on: first wait until the worker has run the batch's activities (a counter read), then check
-- each instance (its last turn follows its last activity). A batch that makes no progress for
-- a second goes on to the checks (which fail or time out as before).
local function wait_activities(target)
  local seen, at = -1, wall_ms()
  while true do
    local a = rt:stats().activities
    if a >= target then return end
    if a ~= seen then seen, at = a, wall_ms()
    elseif wall_ms() - at > 1000 then return end
    pump(2)
  end
end

local function run_batch(prefix, count)
  local ids, starts = {}, {}
  for k = 1, count do ids[k] = prefix .. k end
  local seen -- serial: each instance's latency as the caller sees it (ms, monotonic clock)
  if w.serial then
    seen = {}
    for k = 1, count do
      starts[k] = wall_ms()
      local t0 = uv.hrtime()
      assert(client:start(ids[k], w.orch, input_of(k)))
      assert(client:wait(ids[k], 30000))
      seen[k] = (uv.hrtime() - t0) / 1e6
    end
  else
    -- "all N started at once": one durable commit for the whole burst
    local list = {}
    for k = 1, count do list[k] = { ids[k], w.orch, input_of(k) } end
    local target = rt and (w.acts or 0) > 0 and rt:stats().activities + count * w.acts
    local t = wall_ms()
    for k = 1, count do starts[k] = t end
    assert(client:start_many(list))
    if target then wait_activities(target) end
    wait_all(ids, 600000)
  end
  -- the worker's CPU and store cycles end here: the history reads below are the bench's own
  local cpu_end, st_end = worker_cpu_s(), rt and rt:stats()
  local lat, first, last, failed, workers_per = {}, starts[1], 0, 0, {}
  for k = 1, count do
    local h = client:history(ids[k])
    local fin = h[#h]
    if fin.type ~= "OrchestrationCompleted" then failed = failed + 1 end
    lat[k] = seen and seen[k] or fin.timestamp_ms - starts[k]
    if fin.timestamp_ms > last then last = fin.timestamp_ms end
    if opts.workload == "session" and fin.data then workers_per[#workers_per + 1] = #fin.data.workers end
    if opts.workload == "cpu" and prefix == "b-" and fin.data then
      per_worker[fin.data] = (per_worker[fin.data] or 0) + 1
    end
  end
  return first, last, lat, failed, workers_per, cpu_end, st_end
end

local function throughput()
  run_batch("warm-", 5)
  local cpu0 = worker_cpu_s()
  local st0 = rt and rt:stats()
  local t0, last, lat, failed, workers_per, cpu1, st1 = run_batch("b-", n)
  local cpu_ms = (cpu1 - cpu0) * 1000 / n
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
  elseif opts.workload == "cpu" then
    -- activities per worker, the biggest share, and the load average (the machine may be busy)
    local names, parts, most = {}, {}, 0
    for id in pairs(per_worker) do names[#names + 1] = id end
    table.sort(names)
    for _, id in ipairs(names) do
      parts[#parts + 1] = string.format('"%s":%d', id, per_worker[id])
      if per_worker[id] > most then most = per_worker[id] end
    end
    extra = string.format(',"activity_ms":50,"per_worker":{%s},"max_share":%.2f',
                          table.concat(parts, ","), most / n)
  elseif opts.workload == "payload" then
    -- payload bytes carried through activity steps per second (one direction)
    extra = string.format(',"kib":%d,"steps":%d,"bytes_per_s":%.0f', kib, steps,
                          n * steps * kib * 1024 / makespan * 1000)
  end
  if opts.prefill > 0 then
    extra = extra .. string.format(',"prefill":%d,"prefill_s":%.1f', opts.prefill, prefill_s)
  end
  if st0 then -- the in-process worker's store cycles and commits (each cycle commits once)
    extra = extra .. string.format(',"store_cycles_per_orch":%.2f',
                                   (st1.fetch_cycles - st0.fetch_cycles) / n)
  end
  return string.format('{"engine":"duroxide-lua","workload":"%s","n":%d,"orch_per_s":%s,' ..
    '"act_per_s":%s,"p50_ms":%.2f,"p95_ms":%.2f,"makespan_ms":%d,"failed":%d%s,' ..
    '"worker_cpu_ms_per_orch":%.2f,"durable":true,"worker":"%s","start":"%s"}',
    opts.workload, n, rate(n / makespan * 1000), rate(n * w.acts / makespan * 1000),
    pct(0.5), pct(0.95), makespan, failed, extra, cpu_ms,
    worker_label(),
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
  victim.expected = true
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

-- {===== long: one orchestration of many sequential steps =====}

-- Step k ends when its ActivityCompleted is committed; a step's time is the gap to the one
-- before (step 1: from the instance's first event). Reports the mean step time over the first
-- and the last 10% of the steps and their ratio (null when the first is below the history's
-- millisecond resolution), and the CPU time of the worker(s).
local function long_bench()
  local id, K = "long-1", opts.steps
  local cpu0 = worker_cpu_s()
  local t0 = wall_ms()
  assert(client:start(id, "Long", K))
  wait_all({ id }, 3600000)
  local total_s = (wall_ms() - t0) / 1000
  local cpu_s = worker_cpu_s() - cpu0
  local h = client:history(id)
  assert(h[#h].type == "OrchestrationCompleted", "long: the orchestration did not complete")
  local ends = { [0] = h[1].timestamp_ms }
  for _, e in ipairs(h) do
    if e.type == "ActivityCompleted" then ends[#ends + 1] = e.timestamp_ms end
  end
  assert(#ends == K, string.format("long: %d of %d steps completed", #ends, K))
  local m = math.max(1, K // 10)
  local first = (ends[m] - ends[0]) / m
  local last = (ends[K] - ends[K - m]) / m
  return string.format('{"engine":"duroxide-lua","workload":"long","n":1,"steps":%d,' ..
    '"first10_step_ms":%.3f,"last10_step_ms":%.3f,"last_over_first":%s,"total_s":%.2f,' ..
    '"worker_cpu_s":%.2f,"durable":true,"worker":"%s"}',
    K, first, last, first > 0 and string.format("%.2f", last / first) or "null", total_s, cpu_s,
    worker_label())
end

-- {===== idle: memory per cached idle instance =====}

-- One external worker. n instances each run one turn and wait for an event; once every one
-- has run and the worker is idle, the growth of the worker's resident memory per instance,
-- and the orchestration cache's own figures from the worker's /metrics when it reports them.
-- Anonymous resident memory (heap, Lua states): the store's memory-mapped file pages (LMDB)
-- are left out, they are the page cache's.
local function rss_kib(pid)
  local f = io.open("/proc/" .. pid .. "/status")
  if not f then return nil end
  local txt = f:read("a")
  f:close()
  return tonumber(txt:match("RssAnon:%s*(%d+)"))
end

-- GET /metrics from the worker (luv, no child process), at most 5 s; nil when it fails.
local function scrape_metrics()
  local port = procs[1].metrics_port
  if not port then return nil end
  local tcp, timer, chunks, done, ok = uv.new_tcp(), uv.new_timer(), {}, false, false
  timer:start(5000, 0, function() done = true end)
  tcp:connect("127.0.0.1", port, function(err)
    if err then done = true; return end
    tcp:write("GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
    tcp:read_start(function(rerr, data)
      if rerr then done = true
      elseif data then chunks[#chunks + 1] = data
      else ok, done = true, true end
    end)
  end)
  while not done do uv.run("once") end
  timer:close()
  tcp:close()
  uv.run("nowait")
  local txt = table.concat(chunks)
  if not ok or not txt:match("^HTTP/1%.%d 200") then return nil end
  return txt:match("\r\n\r\n(.*)$")
end

-- The sum of a Prometheus metric's samples (all label sets); nil when absent.
local function metric_sum(txt, name)
  local sum
  for line in (txt or ""):gmatch("[^\n]+") do
    local mname, v = line:match("^([%w_:]+)[^%s]*%s+([%d%.eE+-]+)")
    if mname == name then sum = (sum or 0) + tonumber(v) end
  end
  return sum
end

local function idle_bench()
  local pid = procs[1].pid
  fill("warm-", 5, "Fanout") -- loads the app's code paths; these complete
  fill("iw-", 100, "Idle", true) -- and a first few idle instances
  sleep_ms(500)
  local rss0 = assert(rss_kib(pid), "cannot read the worker's memory")
  local m0 = scrape_metrics()
  local fill_s = fill("i-", n, "Idle", true)
  sleep_ms(1000) -- let the worker go idle
  local rss1 = rss_kib(pid)
  local m1 = scrape_metrics()
  local cache = "null"
  local b0, b1 = metric_sum(m0, CACHE_BYTES_METRIC), metric_sum(m1, CACHE_BYTES_METRIC)
  if b0 and b1 then cache = string.format("%.0f", (b1 - b0) / n) end
  local entries = metric_sum(m1, CACHE_ENTRIES_METRIC)
  return string.format('{"engine":"duroxide-lua","workload":"idle","n":%d,"fill_s":%.1f,' ..
    '"rss_anon_before_kib":%d,"rss_anon_after_kib":%d,"rss_bytes_per_instance":%.0f,' ..
    '"cache_bytes_per_instance":%s,"cache_entries":%s,"heap_prefault":0,"durable":true,' ..
    '"worker":"1 separate process"}',
    n, fill_s, rss0, rss1, (rss1 - rss0) * 1024 / n, cache,
    entries and string.format("%.0f", entries) or "null")
end

-- {===== management: list on a full store =====}

-- Fill the store with n instances (start_many in chunks of 2000, each one durable commit, run
-- to completion by the worker), then time `list --limit 50`: the client call (30 runs) and the
-- CLI command (10 runs, process start included), plus filters that match nothing (status,
-- name: the worst case of a filtered page) and a status filter that matches every instance,
-- describe of one instance, pages with a backlog of n/5 never-run starts, and a purge of the
-- whole store.
local function list_bench()
  local fill_s = fill("l-", n, "Quick")
  -- PostgreSQL plans by table statistics, which autovacuum refreshes within a minute of a bulk
  -- change (as on any store that has been running): measure the store as it is then, not in
  -- the minute after a bulk fill nobody has analyzed yet (opts.no_settle: measure at once)
  local function settle()
    if store_kind == "postgres" and not opts.no_settle then sleep_ms(65000) end
  end
  settle()
  local function p(xs, q)
    table.sort(xs)
    return xs[math.max(1, math.ceil(#xs * q))]
  end
  local function time_us(fn)
    local a = uv.hrtime()
    fn()
    return (uv.hrtime() - a) / 1e6
  end
  local calls, filtered, cli = {}, {}, {}
  for k = 1, 30 do
    calls[k] = time_us(function()
      local rows = assert(client:list { limit = 50 })
      assert(#rows == 50)
    end)
  end
  local by_name, completed = {}, {}
  for k = 1, 5 do
    filtered[k] = time_us(function() assert(#client:list { status = "Failed", limit = 50 } == 0) end)
    by_name[k] = time_us(function() assert(#client:list { name = "Nope", limit = 50 } == 0) end)
    completed[k] = time_us(function()
      assert(#client:list { status = "Completed", limit = 50 } == 50)
    end)
  end
  local bin = os.getenv("DUROXIDE_LUA")
  for k = 1, 10 do
    cli[k] = time_us(function()
      assert(os.execute(string.format("'%s' list --limit 50 --store '%s' >/dev/null", bin, store)))
    end)
  end
  local describe_ms = time_us(function() assert(client:describe("l-" .. n)) end)
  -- a backlog of starts no worker has run yet (n/5; the worker is stopped first, so nothing
  -- fetches them meanwhile): the first page and the Pending filter read only a page of it
  if rt then rt:stop(); rt = nil end
  local backlog, queued, pending, chunk = n // 5, {}, {}, 2000
  for base = 0, backlog - 1, chunk do
    local batch = {}
    for k = base + 1, math.min(backlog, base + chunk) do batch[#batch + 1] = { "q-" .. k, "Quick", k } end
    assert(client:start_many(batch))
  end
  settle()
  for k = 1, 10 do
    queued[k] = time_us(function() assert(#client:list { limit = 50 } == 50) end)
    pending[k] = time_us(function() assert(#client:list { status = "Pending", limit = 50 } == 50) end)
  end
  -- then the whole store goes, in batches (every instance is finished)
  local purged
  local purge_s = time_us(function()
    purged = assert(client:purge { completed_before = os.time() * 1000 + 3600000 })
  end) / 1000
  assert(purged.deleted == n, "purge deleted " .. purged.deleted)
  return string.format('{"engine":"duroxide-lua","workload":"list","n":%d,"fill_s":%.1f,' ..
    '"list_limit50_p50_ms":%.2f,"list_limit50_p95_ms":%.2f,"cli_list_limit50_p50_ms":%.1f,' ..
    '"list_status_filter_no_match_p50_ms":%.1f,"list_name_filter_no_match_p50_ms":%.1f,' ..
    '"list_status_completed_p50_ms":%.2f,"backlog":%d,"list_limit50_backlog_p50_ms":%.2f,' ..
    '"list_pending_backlog_p50_ms":%.2f,"describe_ms":%.1f,"purge_all_s":%.1f,' ..
    '"durable":true,"fill":"start_many + one run","settled_s":%d}',
    n, fill_s, p(calls, 0.5), p(calls, 0.95), p(cli, 0.5), p(filtered, 0.5), p(by_name, 0.5),
    p(completed, 0.5), backlog, p(queued, 0.5), p(pending, 0.5), describe_ms, purge_s,
    (store_kind == "postgres" and not opts.no_settle) and 65 or 0)
end

local RUN = { throughput = throughput, long = long_bench, idle = idle_bench, handoff = handoff,
              list = list_bench }
local ok, line = pcall(function()
  setup()
  return RUN[w.kind or "throughput"]()
end)
if rt then rt:stop() end
stop_external()
client:close()
if store_kind == "lmdb" then os.execute("rm -rf '" .. store .. "'") end
if not ok then io.stderr:write("bench: " .. tostring(line) .. "\n"); os.exit(1) end
-- Every line names the store it measured, whether the orchestration cache was on, and the
-- machine's 1-minute load average at the end (the machine may be busy with other work).
local f = io.open("/proc/loadavg")
local load = f and f:read("n") or -1
if f then f:close() end
line = line:gsub('^{"engine":"duroxide%-lua",', string.format(
  '{"engine":"duroxide-lua","store":"%s","cache":"%s",', store_kind, opts.cache))
print((line:gsub("}$", string.format(',"loadavg":%.2f}', load))))
