-- tests/chaos/ctl.lua -- the chaos driver's store side (lua5.4 with duroxide.so on LUA_CPATH):
-- starts the planned instances, raises their events, reports progress, and runs the final
-- checks. tests/chaos/chaos.sh runs the processes (workers, kills, restarts) and calls it:
--
--   lua5.4 ctl.lua start FROM TO   start planned instances FROM..TO in one commit
--   lua5.4 ctl.lua poll            raise "go" to instances waiting for it; print "DONE n" (ended)
--   lua5.4 ctl.lua selftest        the checkers on made-up histories and runs (PASS/FAIL lines)
--   lua5.4 ctl.lua overlaps        print "OVERLAP text" per pair of overlapping session runs
--   lua5.4 ctl.lua check           the final checks: lines "PASS|FAIL|TODOPASS|TODOFAIL name" and
--                                  "DIAG text"; writes the JSON summary to $CHAOS_SUMMARY
--
-- Environment: STORE (store directory or URL), CHAOS_N, CHAOS_SEED, CHAOS_SESSIONS,
-- CHAOS_CLOSE (1: Sess instances may close their session), CHAOS_LOG (the app's activity logs),
-- CHAOS_DEATHS (lines "<pid> <ms>": when each worker process died or was stopped), and for the
-- summary CHAOS_META (a JSON object merged into it).
local duroxide = require("duroxide")
package.path = (arg[0]:match("^(.*)/[^/]*$") or ".") .. "/?.lua;" .. package.path
local plan = require("plan")

local function env(name, default)
  local v = os.getenv(name)
  if v == nil or v == "" then
    if default == nil then error(name .. " is not set") end
    return default
  end
  return v
end

local cmd, PLAN, client = {}, nil, nil

-- The plan and the store client, for the commands that need them.
local function open()
  PLAN = plan.make({ n = tonumber(env("CHAOS_N")), seed = tonumber(env("CHAOS_SEED")),
                     sessions = tonumber(env("CHAOS_SESSIONS", "6")),
                     close = env("CHAOS_CLOSE", "1") == "1" })
  client = duroxide.client(env("STORE"))
end

function cmd.start(from, to)
  open()
  local batch = {}
  for i = tonumber(from), math.min(tonumber(to), #PLAN) do
    local e = PLAN[i]
    batch[#batch + 1] = { e.id, e.orch, e.input }
  end
  if #batch > 0 then assert(client:start_many(batch)) end
end

local function ended(st) return st.status == "Completed" or st.status == "Failed" end

function cmd.poll()
  open()
  local done = 0
  for _, e in ipairs(PLAN) do
    local st = assert(client:status(e.id))
    if ended(st) then
      done = done + 1
    elseif e.event and st.custom_status == "waiting" then
      -- Raised again on every poll while still waiting: a raise that lands after the
      -- subscription was consumed is dropped (positional delivery), so repeats are harmless.
      client:raise_event(e.id, "go", plan.event_data(e))
    end
  end
  print("DONE " .. done)
end

-- ---------------------------------------------------------------------------------------------
-- checks

local out = {}   -- the lines printed at the end
local function report(kind, name, diags)
  out[#out + 1] = kind .. " " .. name
  for i = 1, math.min(#diags, 20) do out[#out + 1] = "DIAG " .. diags[i] end
  if #diags > 20 then out[#out + 1] = ("DIAG ... and %d more"):format(#diags - 20) end
end
local function check(name, diags) report(#diags == 0 and "PASS" or "FAIL", name, diags) end
local function todo(name, diags) report(#diags == 0 and "TODOPASS" or "TODOFAIL", name, diags) end

local SCHED = { ActivityScheduled = true, TimerCreated = true, SubOrchestrationScheduled = true }
local DONE = { ActivityCompleted = true, ActivityFailed = true, TimerFired = true,
               SubOrchestrationCompleted = true, SubOrchestrationFailed = true }
local TERMINAL = { OrchestrationCompleted = true, OrchestrationFailed = true,
                   OrchestrationContinuedAsNew = true }

-- Problems of one execution's history: every scheduled activity, timer and sub-orchestration
-- completed exactly once, no completion without its schedule, exactly one terminal event and it
-- is the last one (ContinuedAsNew for an earlier execution). Adds child instance ids to `kids`.
-- `label` names the execution in the messages.
local function events_problems(h, label, last, kids, problems)
  local sched, done, terminals = {}, {}, 0
  for _, ev in ipairs(h) do
    if SCHED[ev.type] then sched[ev.event_id] = ev.type end
    if ev.type == "SubOrchestrationScheduled" and ev.instance then kids[#kids + 1] = ev.instance end
    if DONE[ev.type] then done[ev.source_event_id] = (done[ev.source_event_id] or 0) + 1 end
    if TERMINAL[ev.type] then terminals = terminals + 1 end
  end
  local function bad(fmt, ...) problems[#problems + 1] = ("%s: " .. fmt):format(label, ...) end
  for eid, t in pairs(sched) do
    if done[eid] ~= 1 then bad("%s %d completed %d times", t, eid, done[eid] or 0) end
  end
  for eid, n in pairs(done) do
    if not sched[eid] then bad("%d completion(s) of unscheduled event %d", n, eid) end
  end
  local tail = h[#h] and h[#h].type
  local want = last and "OrchestrationCompleted" or "OrchestrationContinuedAsNew"
  if terminals ~= 1 or tail ~= want then
    bad("%d terminal events, last event %s (want one, %s)", terminals, tostring(tail), want)
  end
end

local function history_problems(id, exec, last, kids, problems)
  local h, err = client:history(id, exec)
  if not h then problems[#problems + 1] = ("%s#%d: no history (%s)"):format(id, exec, err); return end
  events_problems(h, ("%s#%d"):format(id, exec), last, kids, problems)
end

-- Every instance (and sub-orchestration child) : all executions' histories.
local function check_histories(stats)
  local problems, queue, seen = {}, {}, {}
  for _, e in ipairs(PLAN) do queue[#queue + 1] = e.id end
  local i = 1
  while i <= #queue do
    local id = queue[i]
    i = i + 1
    if not seen[id] then
      seen[id] = true
      stats.instances_checked = stats.instances_checked + 1
      local st = assert(client:status(id))
      if st.status ~= "Completed" then
        problems[#problems + 1] = ("%s: %s"):format(id, st.status)
      else
        for exec = 1, st.execution_id do
          history_problems(id, exec, exec == st.execution_id, queue, problems)
        end
      end
    end
  end
  return problems
end

local function read_deaths()
  local deaths = {}
  local f = io.open(env("CHAOS_DEATHS"))
  if f then
    for line in f:lines() do
      local pid, ms = line:match("^(%d+) (%d+)")
      if pid then deaths[tonumber(pid)] = tonumber(ms) end
    end
    f:close()
  end
  return deaths
end

-- The activity runs from the app's logs: { pid, worker, sid, key, s, e (nil: never ended) }.
local function read_runs(stats)
  local runs, open, hooks = {}, {}, {}
  local p = io.popen("ls " .. env("CHAOS_LOG") .. "/act.*.log 2>/dev/null")
  for path in p:lines() do
    for line in io.lines(path) do
      local mark, ms, pid, wid, rest = line:match("^(%u) (%d+) (%d+) (%S+) (.*)$")
      if mark == "S" or mark == "E" or mark == "C" then
        local sid, inst, exec, aid, att, name = rest:match("^(%S+) (%S+) (%d+) (%d+) (%d+) (%S+)")
        local key = table.concat({ pid, inst, exec, aid, att }, " ")
        if mark == "S" then
          local r = { pid = tonumber(pid), worker = wid, sid = sid, key = key, name = name,
                      inst = inst, aid = aid, attempt = tonumber(att), s = tonumber(ms) }
          runs[#runs + 1] = r
          open[key] = r
        elseif open[key] then
          -- C: the run stopped at its cancellation check without working since S (a stalled
          -- owner that lost its session): its work ended where it began
          open[key].e = mark == "C" and open[key].s or tonumber(ms)
          open[key].cancelled = mark == "C" or nil
          open[key] = nil
        end
      elseif mark == "H" then
        hooks[#hooks + 1] = { ms = tonumber(ms), pid = tonumber(pid), worker = wid, text = rest }
      end
    end
  end
  p:close()
  stats.activity_runs = #runs
  for _, r in ipairs(runs) do
    if r.attempt > 1 then stats.activity_redeliveries = stats.activity_redeliveries + 1 end
    if not r.e then stats.activity_runs_cut = stats.activity_runs_cut + 1 end
  end
  return runs, hooks
end

-- Did process `pid` release session `sid` as "closed" between times a and b (hook records)?
local function closed_between(hooks, pid, sid, a, b)
  for _, h in ipairs(hooks) do
    if h.pid == pid and h.ms >= a and h.ms <= b and h.text == sid .. " released closed" then
      return true
    end
  end
  return false
end

-- Pairs of runs of one session on different processes whose [s, e] intervals overlap. A run
-- that never logged its end lasted until its process died (CHAOS_DEATHS). Each is tagged with
-- its likely cause: the earlier process released the session on a close_session while its run
-- was going on (issue 9 item 3(b)), or not (a lease taken over: item 3(a) or a stall).
local function session_overlaps(runs, deaths, stats, hooks)
  hooks = hooks or {}
  local by_sid = {}
  for _, r in ipairs(runs) do
    if r.sid ~= "-" then
      r.e = r.e or deaths[r.pid] or math.huge
      by_sid[r.sid] = by_sid[r.sid] or {}
      table.insert(by_sid[r.sid], r)
    end
  end
  local found = {}
  for sid, list in pairs(by_sid) do
    table.sort(list, function(a, b) return a.s < b.s end)
    for i = 1, #list do
      local a = list[i]
      for j = i + 1, #list do
        local b = list[j]
        if b.s >= a.e then break end
        if b.pid ~= a.pid then
          local ms = math.min(a.e, b.e) - b.s
          local closed = closed_between(hooks, a.pid, sid, a.s, b.s)
          local key = closed and "session_overlaps_after_close" or "session_overlaps_lease"
          stats.session_overlap_ms = stats.session_overlap_ms + ms
          stats[key] = (stats[key] or 0) + 1
          found[#found + 1] = ("session %s: pid %d (%s) ran %s %s#%s [%d, %s]; pid %d (%s) "
            .. "started %s %s#%s at %d, inside it (%d ms together) [%s]"):format(sid, a.pid,
            a.worker, a.name, a.inst, a.aid, a.s,
            a.e == math.huge and "never ended" or tostring(a.e), b.pid, b.worker, b.name, b.inst,
            b.aid, b.s, ms, closed and "closed by close_session meanwhile" or "no close: lease taken over")
        end
      end
    end
  end
  table.sort(found)
  return found
end

function cmd.check()
  open()
  local stats = { orchestrations = #PLAN, completed = 0, failed = 0, not_ended = 0,
                  wrong_output = 0, instances_checked = 0, history_problems = 0,
                  activity_runs = 0, activity_redeliveries = 0, activity_runs_cut = 0,
                  session_overlaps = 0, session_overlap_ms = 0, session_overlaps_after_close = 0,
                  session_overlaps_lease = 0 }
  -- 1. every instance ended Completed, with the output plan.lua computed
  local unfinished, wrong = {}, {}
  for _, e in ipairs(PLAN) do
    local st = assert(client:status(e.id))
    if st.status == "Completed" then
      stats.completed = stats.completed + 1
      if st.output ~= e.expected then
        stats.wrong_output = stats.wrong_output + 1
        wrong[#wrong + 1] = ("%s: output %s, expected %s"):format(e.id, tostring(st.output),
                                                                  tostring(e.expected))
      end
    else
      if st.status == "Failed" then stats.failed = stats.failed + 1
      else stats.not_ended = stats.not_ended + 1 end
      unfinished[#unfinished + 1] = ("%s: %s %s"):format(e.id, st.status,
        st.error and (st.error.kind .. ": " .. st.error.message) or "")
    end
  end
  check(("all %d instances completed"):format(#PLAN), unfinished)
  check("every output is the expected one", wrong)
  -- 2. histories: each completion exactly once, one terminal event (children included)
  local hp = check_histories(stats)
  stats.history_problems = #hp
  check("no duplicated or missing completion in any history, one terminal event each", hp)
  -- 3. no two processes ran activities of one session at the same time (issue 9 item 3)
  local runs, hooks = read_runs(stats)
  local ov = session_overlaps(runs, read_deaths(), stats, hooks)
  stats.session_overlaps = #ov
  stats.session_hook_events = #hooks
  check("no two workers ran activities of one session at the same time", ov)
  -- summary
  local meta = os.getenv("CHAOS_META")
  if meta and meta ~= "" then
    for k, v in pairs(duroxide.json_decode(meta)) do stats[k] = v end
  end
  local summary = duroxide.json_encode(stats)
  local path = os.getenv("CHAOS_SUMMARY")
  if path and path ~= "" then
    local f = assert(io.open(path, "w"))
    f:write(summary, "\n")
    f:close()
  end
  for _, l in ipairs(out) do print(l) end
end

-- The checkers themselves, on made-up histories and runs: each defect they exist to find is
-- found, and a sound input passes. Prints the check lines like `check`.
function cmd.selftest()
  local function ev(t, id, src) return { type = t, event_id = id, source_event_id = src } end
  local good = { ev("OrchestrationStarted", 1), ev("ActivityScheduled", 2), ev("TimerCreated", 3),
                 ev("SubOrchestrationScheduled", 4), ev("ActivityCompleted", 5, 2),
                 ev("TimerFired", 6, 3), ev("SubOrchestrationCompleted", 7, 4),
                 ev("OrchestrationCompleted", 8) }
  local function with(edit)
    local h = {}
    for i, e in ipairs(good) do h[i] = e end
    edit(h)
    return h
  end
  local cases = {
    { "sound history", good, true, 0 },
    { "duplicated activity completion",
      with(function(h) table.insert(h, 6, ev("ActivityCompleted", 9, 2)) end), true, 1 },
    { "duplicated timer", with(function(h) table.insert(h, 7, ev("TimerFired", 9, 3)) end), true, 1 },
    { "missing sub-orchestration completion", with(function(h) table.remove(h, 7) end), true, 1 },
    { "completion of nothing", with(function(h) table.insert(h, 5, ev("ActivityFailed", 9, 42)) end),
      true, 1 },
    { "two terminal events", with(function(h) h[#h + 1] = ev("OrchestrationFailed", 9) end), true, 1 },
    { "no terminal event", with(function(h) h[#h] = nil end), true, 1 },
    { "earlier execution not continued-as-new", good, false, 1 },
  }
  local wrong = {}
  for _, c in ipairs(cases) do
    local problems = {}
    events_problems(c[2], c[1], c[3], {}, problems)
    if #problems ~= c[4] then
      wrong[#wrong + 1] = ("%s: %d problems found, want %d (%s)"):format(c[1], #problems, c[4],
                                                                        table.concat(problems, "; "))
    end
  end
  check("the history checker finds each duplicated, missing or stray completion and terminal", wrong)
  local function run(pid, sid, s, e) return { pid = pid, worker = "w" .. pid, sid = sid, s = s, e = e,
                                              name = "SessStep", inst = "i", aid = "2" } end
  local stats = { session_overlap_ms = 0 }
  local ocases = {
    { "disjoint runs", { run(1, "s", 0, 10), run(2, "s", 10, 20) }, {}, 0 },
    { "one process, overlapping", { run(1, "s", 0, 10), run(1, "s", 5, 20) }, {}, 0 },
    { "other sessions", { run(1, "s", 0, 10), run(2, "t", 5, 20), run(2, "-", 5, 20) }, {}, 0 },
    { "two processes, one session", { run(1, "s", 0, 10), run(2, "s", 9, 20) }, {}, 1 },
    { "cut by a kill, before the other", { run(1, "s", 0, nil), run(2, "s", 30, 40) }, { [1] = 20 }, 0 },
    { "cut by a kill, after the other began", { run(1, "s", 0, nil), run(2, "s", 10, 40) },
      { [1] = 20 }, 1 },
    { "never ended, process never died", { run(1, "s", 0, nil), run(2, "s", 1000, 1001) }, {}, 1 },
    -- a stalled owner that found itself cancelled on resuming (C) did no work after its S
    { "stopped at its cancellation check", { run(1, "s", 0, 0), run(2, "s", 5, 20) }, {}, 0 },
  }
  wrong = {}
  for _, c in ipairs(ocases) do
    local n = #session_overlaps(c[2], c[3], stats)
    if n ~= c[4] then wrong[#wrong + 1] = ("%s: %d overlaps found, want %d"):format(c[1], n, c[4]) end
  end
  check("the overlap checker finds two processes in one session, and only that", wrong)
  for _, l in ipairs(out) do print(l) end
end

-- Only the session-overlap check, on the logs of CHAOS_LOG (the reproduction scenarios): prints
-- "OVERLAP text" lines.
function cmd.overlaps()
  local stats = { activity_runs = 0, activity_redeliveries = 0, activity_runs_cut = 0,
                  session_overlap_ms = 0 }
  local runs, hooks = read_runs(stats)
  for _, l in ipairs(session_overlaps(runs, read_deaths(), stats, hooks)) do
    print("OVERLAP " .. l)
  end
end

local name = arg[1]
if not cmd[name] then
  io.stderr:write("usage: lua5.4 ctl.lua start FROM TO | poll | overlaps | check | selftest\n")
  os.exit(2)
end
cmd[name](table.unpack(arg, 2))
if client then client:close() end
