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
  elseif a == "--settle" then opts.no_settle = v == "0"
  else io.stderr:write("bench: unknown argument " .. a .. "\n"); os.exit(2) end
  i = i + 2
end

local workloads = {
  fanout = { n = 200, acts = 5, orch = "Fanout" },
  chain = { n = 200, acts = 10, orch = "Chain" },
  hello = { n = 20, acts = 1, orch = "Hello", serial = true },
  session = { n = 200, acts = 10, orch = "Session" },
  cpu = { n = 200, acts = 1, orch = "Cpu" },
  handoff = { n = 1, acts = 0, orch = "Ticker", workers = 2 },
  list = { n = 100000, acts = 0, orch = "Quick" },
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

local per_worker = {} -- cpu: activities each worker ran (measured batch only)

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
    if opts.workload == "cpu" and prefix == "b-" and fin.data then
      per_worker[fin.data] = (per_worker[fin.data] or 0) + 1
    end
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
  elseif opts.workload == "cpu" then
    -- activities per worker, the biggest share, and the load average (the machine may be busy)
    local names, parts, most = {}, {}, 0
    for id in pairs(per_worker) do names[#names + 1] = id end
    table.sort(names)
    for _, id in ipairs(names) do
      parts[#parts + 1] = string.format('"%s":%d', id, per_worker[id])
      if per_worker[id] > most then most = per_worker[id] end
    end
    local f = io.open("/proc/loadavg")
    local load = f and f:read("n") or -1
    if f then f:close() end
    extra = string.format(',"activity_ms":50,"per_worker":{%s},"max_share":%.2f,"loadavg":%.2f',
                          table.concat(parts, ","), most / n, load)
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

-- {===== management: list on a full store =====}

-- Fill the store with n instances (start_many in chunks of 2000, each one durable commit, run
-- to completion by the worker), then time `list --limit 50`: the client call (30 runs) and the
-- CLI command (10 runs, process start included), plus filters that match nothing (status,
-- name: the worst case of a filtered page) and a status filter that matches every instance,
-- describe of one instance, pages with a backlog of n/5 never-run starts, and a purge of the
-- whole store.
local function list_bench()
  local t0, chunk = wall_ms(), 2000
  for base = 0, n - 1, chunk do
    local batch, last = {}, nil
    for k = base + 1, math.min(n, base + chunk) do
      last = "l-" .. k
      batch[#batch + 1] = { last, "Quick", k }
    end
    assert(client:start_many(batch))
    wait_all({ last }, 600000)
  end
  -- every instance has run (a queued start shows as Pending, a started one as Running)
  while #client:list { status = "Running", limit = 1 } > 0
    or #client:list { status = "Pending", limit = 1 } > 0 do pump(5) end
  local fill_s = (wall_ms() - t0) / 1000
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
  local backlog, queued, pending = n // 5, {}, {}
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

local ok, line = pcall(opts.workload == "handoff" and handoff
                       or opts.workload == "list" and list_bench or throughput)
if rt then rt:stop() end
stop_external()
client:close()
if store_kind == "lmdb" then os.execute("rm -rf '" .. store .. "'") end
if not ok then io.stderr:write("bench: " .. tostring(line) .. "\n"); os.exit(1) end
-- every line names the store it measured
print((line:gsub('^{"engine":"duroxide%-lua",', '{"engine":"duroxide-lua","store":"' .. store_kind .. '",')))
