-- duroxide/testing.lua: a synchronous test harness for busted specs (API.md §8).
--
--   local testing = require("duroxide.testing")
--   local env = testing.env({ app = "examples/hello.lua" })
--   env:mock_activity("Greet", function(actx, name) return "hi " .. name end)
--   local st = env:run_until_complete(env:start(nil, "HelloWorld", "Lua"))
--   env:close()
--
-- An env is a temporary store with simulated workers ("w1" from the start): each is a real
-- runtime with its own worker_node_id, all on this Lua state's loop. Busted has no async, so
-- the harness drives the loop itself until a condition holds, and moves the engine's virtual
-- clock (duroxide._clock_advance): whenever nothing can progress (no worker busy, nothing
-- fetchable now), the clock jumps to the next due timer, lock or lease expiry, so hours of
-- orchestration time pass in milliseconds. Session leases of live workers are renewed on the
-- way (as their renewal ticks would), so only idle sessions unpin and only crashed workers'
-- leases lapse. See docs/testing.md.
local duroxide = require("duroxide")
local uv = require("luv")

local M = {}

-- Worker options every env starts from (testing.env{options = ...} and add_worker override).
M.default_options = {
  log_level = "error",
  shutdown_grace = "2s",
  no_sync = true, -- the store is thrown away: skip fsync on commits
}

local OPEN_KEY = "duroxide.testing.open_env"
local WALL_DEFAULT_MS = 30000

local clock_now, clock_advance, run_once = duroxide._clock_now, duroxide._clock_advance,
  duroxide._run_once

local function wall_ms() return uv.hrtime() // 1000000 end

-- {===== helpers =====}

--- A fresh private temporary directory (removed by env:close / M.remove_tree), under
--- $TMPDIR when it is set (else the system's temporary directory).
function M.tmpdir()
  local base = os.getenv("TMPDIR")
  if base and base ~= "" then
    local path, err = uv.fs_mkdtemp(base:gsub("/+$", "") .. "/duroxide-XXXXXX")
    if not path then error("testing.tmpdir: cannot create a directory under $TMPDIR (" ..
                           base .. "): " .. tostring(err), 2) end
    return path
  end
  local path = os.tmpname()
  os.remove(path)
  assert(uv.fs_mkdir(path, tonumber("700", 8)))
  return path
end

--- Delete a directory tree (files and subdirectories).
function M.remove_tree(path)
  local st = uv.fs_lstat(path)
  if not st then return end
  if st.type == "directory" then
    local req = uv.fs_scandir(path)
    while req do
      local name = uv.fs_scandir_next(req)
      if not name then break end
      M.remove_tree(path .. "/" .. name)
    end
    uv.fs_rmdir(path)
  else
    uv.fs_unlink(path)
  end
end

local function deepcopy(v, seen)
  if type(v) ~= "table" then return v end
  seen = seen or {}
  if seen[v] then return seen[v] end
  local c = {}
  seen[v] = c
  for k, x in pairs(v) do c[deepcopy(k, seen)] = deepcopy(x, seen) end
  return setmetatable(c, getmetatable(v))
end

-- Registrations live in one table per Lua state; an env (and check_replay) snapshots it and
-- puts it back afterwards, so mocks and test registrations never leak into the next test.
local function snapshot(reg)
  local s = { orchestrations = {}, activities = {}, hooks = {} }
  for name, e in pairs(reg.orchestrations) do
    local versions = {}
    for v, fn in pairs(e.versions) do versions[v] = fn end
    s.orchestrations[name] = { versions = versions, latest = e.latest, policy = e.policy }
  end
  for k, v in pairs(reg.activities) do s.activities[k] = v end
  for k, v in pairs(reg.hooks) do s.hooks[k] = v end
  return s
end

local function restore(reg, s)
  local fresh = snapshot(s) -- a copy: the snapshot may be restored again
  reg.orchestrations, reg.activities, reg.hooks = fresh.orchestrations, fresh.activities,
    fresh.hooks
  duroxide._registry_changed() -- workers fetch by what is registered (rolling deployments)
end

local function check_string(v, what, level)
  if type(v) ~= "string" or v == "" then
    error(what .. " must be a non-empty string, got " .. type(v), (level or 2) + 1)
  end
end

-- {===== env =====}

local Env = {}
Env.__index = Env
Env.__name = "duroxide.testing.Env"

--- The workers that run now, in creation order.
function Env:_live()
  local out = {}
  for _, id in ipairs(self.order) do
    local w = self.workers[id]
    if w.alive and not w.stalled then out[#out + 1] = w end
  end
  return out
end

function Env:_probe_set()
  local set = {}
  for _, w in ipairs(self:_live()) do
    set[#set + 1] = { worker_id = w.id, session_lock_ms = w.config.session_lock_ms,
                      max_sessions = w.config.max_sessions, tags = w.tags }
  end
  return set
end

function Env:_idle()
  for _, w in ipairs(self:_live()) do
    if not w.rt:_idle() then return false end
  end
  return true
end

function Env:_poke_all()
  for _, w in ipairs(self:_live()) do w.rt:_poke() end
end

-- Settled: no worker is busy and no live worker could fetch anything at the current time.
function Env:_settled()
  if not self:_idle() then return false end
  if self.store:probe(clock_now(), self:_probe_set()) then
    self:_poke_all() -- work is waiting for a store thread's next poll: look now
    return false
  end
  return self:_idle()
end

-- Run the loop until every worker is idle again (store operations applied and delivered).
function Env:_wait_idle()
  local deadline = wall_ms() + WALL_DEFAULT_MS
  while not self:_idle() do
    run_once(1)
    if wall_ms() > deadline then error("duroxide.testing: workers stayed busy", 3) end
  end
end

-- Let the loop deliver what is ready (settlements queued by a resumed worker).
function Env:_wait_idle_once()
  for _ = 1, 20 do run_once(1) end
end

-- Every activity registered now records its calls (wrapping is idempotent).
function Env:_wrap(name, fn)
  local env = self
  local function recorder(actx, input)
    local rec = { name = name, input = deepcopy(input), session_id = actx.session_id,
                  worker_id = actx.worker_id, instance_id = actx.instance_id,
                  attempt = actx.attempt, tag = actx.tag }
    local list = env.calls_by_name[name]
    if not list then
      list = {}
      env.calls_by_name[name] = list
    end
    list[#list + 1] = rec
    env.all_calls[#env.all_calls + 1] = rec
    return fn(actx, input)
  end
  self.wrappers[recorder] = true
  return recorder
end

function Env:_wrap_all()
  local acts, wrapped = self.reg.activities, false
  for name, fn in pairs(acts) do
    if not self.wrappers[fn] then
      acts[name] = self:_wrap(name, fn)
      wrapped = true
    end
  end
  -- the worker may keep the function it ran last under that name: not the recorder's
  if wrapped then duroxide._registry_changed() end
end

-- Earliest virtual time at which some live worker could fetch something, or nil.
function Env:_next_wake(now)
  local set = self:_probe_set()
  if #set == 0 then return nil end
  local due = self.store:next_due(now)
  if not due then return nil end
  local lo = math.max(due, now + 1)
  if self.store:probe(lo, set) then return lo end
  -- The earliest queued row belongs to a session a crashed (or foreign) worker still holds:
  -- it becomes claimable when that lease lapses, and later timers hide behind it. Search the
  -- first fetchable time up to the last lease expiry (fetchability only grows with time).
  local hi = lo
  for _, s in ipairs(self.store:sessions()) do
    if s.locked_until > hi then hi = s.locked_until end
  end
  if hi <= lo or not self.store:probe(hi, set) then return nil end
  while hi - lo > 1 do
    local mid = (lo + hi) // 2
    if self.store:probe(mid, set) then hi = mid else lo = mid end
  end
  return hi
end

-- Sessions owned by live workers whose lease their owner would renew before it lapses:
-- {sid = latest time to renew}. A lease is renewed `margin` before it ends, while the session
-- has seen activity within session_idle_timeout (the provider's renewal rule).
function Env:_renewals(now, exclude)
  local out = {}
  for _, s in ipairs(self.store:sessions()) do
    local w = s.worker_id and self.workers[s.worker_id]
    if w and w.alive and not w.stalled and s.locked_until > now and not exclude[s.session_id] then
      local cfg = w.config
      -- renew before the owner's fence margin (at most a tenth of the lease, 500 ms) begins
      local margin = math.max(1, math.min(1000, cfg.session_lock_ms // 4))
      local at = s.locked_until - margin
      if cfg.session_idle_ms <= 0 or s.last_activity + cfg.session_idle_ms > at then
        out[s.session_id] = at
      end
    end
  end
  return out
end

function Env:_renew_all()
  local live = self:_live()
  for _, w in ipairs(live) do w.rt:_renew_sessions() end
  self:_wait_idle()
end

-- Move the clock forward by d ms, stopping just before live workers' leases lapse to let
-- their owners renew them (and notice idle ones), then let every owner run its renewal once
-- more. (Wall time passing meanwhile moves the clock too.)
function Env:_move(d)
  local exclude = {}
  while true do
    local now = clock_now()
    local renew, need = self:_renewals(now, exclude), false
    for _, at in pairs(renew) do
      if at <= now then need = true end
    end
    if need then
      self:_renew_all()
      now = clock_now()
      renew = self:_renewals(now, exclude)
      for sid, at in pairs(renew) do
        if at <= now then exclude[sid] = true end -- its owner does not renew it: let it lapse
      end
    end
    if d <= 0 then break end
    local step = d
    for sid, at in pairs(renew) do
      if not exclude[sid] and at - now < step then step = at - now end
    end
    clock_advance(step)
    d = d - step
  end
  self:_renew_all()
  self:_poke_all()
end

-- Drive until stop() returns a truthy value (returned), the clock has been moved by `budget`
-- ms with nothing left to run (false, "limit"), nothing can ever progress (false, "stuck") or
-- the wall-clock budget runs out (false, "timeout"). budget nil: move it as far as needed.
function Env:_drive(stop, budget, wall_budget)
  local deadline = wall_ms() + (wall_budget or WALL_DEFAULT_MS)
  self:_wrap_all()
  while true do
    local r = stop()
    if r then return r end
    if self:_settled() then
      r = stop()
      if r then return r end
      if budget and budget <= 0 then return false, "limit" end
      local now = clock_now()
      local wake = self:_next_wake(now)
      local d = wake and wake - now
      if budget and (not d or d > budget) then d = budget end
      if not d then return false, "stuck" end
      self:_move(d)
      if budget then budget = budget - d end
      self:_wrap_all()
    else
      run_once(2)
    end
    if wall_ms() > deadline then return false, "timeout" end
  end
end

local function never() return false end

-- {===== public methods =====}

--- Register an activity for this env (restored on close). Its calls are recorded.
function Env:register_activity(name, fn)
  check_string(name, "activity name")
  duroxide.activity(name, self:_wrap(name, fn))
end

--- Register an orchestration for this env (restored on close).
function Env:register_orchestration(name, fn, opts)
  duroxide.orchestration(name, fn, opts)
end

--- Replace activity `name` for this env only (the app's version comes back on close).
function Env:mock_activity(name, fn)
  check_string(name, "activity name")
  if type(fn) ~= "function" then error("mock_activity: fn must be a function", 2) end
  duroxide.activity(name, self:_wrap(name, fn))
end

--- Start an instance (id nil = generated). Returns the id; raises when the start is refused.
function Env:start(id, name, input, version)
  if id == nil then
    repeat
      self.seq = self.seq + 1
      id = "instance-" .. self.seq
    until self.client:status(id).status == "NotFound"
  end
  local ok, err = self.client:start(id, name, input, version)
  if not ok then error("start " .. tostring(id) .. ": " .. tostring(err), 2) end
  return id
end

function Env:status(id) return self.client:status(id) end

--- Drive workers and the virtual clock until the instance completes or fails. Returns the
--- status table (as client:wait); or nil, err, last status when it cannot finish: err.kind is
--- "Stuck" when nothing is due any more (waiting for an event?), "DX_ETIMEDOUT" when
--- timeout_ms of wall time (default 30000) passed.
function Env:run_until_complete(id, timeout_ms)
  local ok, why = self:_drive(function()
    local st = self.client:status(id)
    return (st.status == "Completed" or st.status == "Failed") and st
  end, nil, timeout_ms)
  if ok then return ok end
  local st = self.client:status(id)
  if why == "stuck" then
    return nil, duroxide.error("instance " .. id .. " is " .. tostring(st.status) ..
      " and nothing is due (waiting for an event?)", "client", "Stuck"), st
  end
  return nil, duroxide.error("instance " .. id .. " did not finish within " ..
    (timeout_ms or WALL_DEFAULT_MS) .. "ms of wall time", "client", "DX_ETIMEDOUT"), st
end

--- Run what is runnable now (turns, activities, their results) until nothing is, without
--- moving the virtual clock. Raises after timeout_ms of wall time (default 30000).
function Env:run_until_idle(timeout_ms)
  local deadline = wall_ms() + (timeout_ms or WALL_DEFAULT_MS)
  self:_wrap_all()
  while not self:_settled() do
    run_once(2)
    if wall_ms() > deadline then
      error("run_until_idle: workers still busy after " .. (timeout_ms or WALL_DEFAULT_MS) ..
            "ms (an activity that never finishes?)", 2)
    end
  end
end

--- Move the virtual clock forward by ms (beyond the wall time that passes meanwhile),
--- running everything that falls due on the way in time order: a timer set by a timer that
--- fired on the way fires too if it is due in time.
function Env:advance(ms, timeout_ms)
  if math.type(ms) == nil or ms < 0 then error("advance: ms must be a non-negative number", 2) end
  local ok, why = self:_drive(never, math.floor(ms), timeout_ms)
  if not ok and why == "timeout" then error("advance: did not settle in wall time", 2) end
end

function Env:raise_event(id, name, data)
  local ok, err = self.client:raise_event(id, name, data)
  if not ok then error("raise_event " .. tostring(id) .. ": " .. tostring(err), 2) end
end

--- Put `data` on event queue `queue` of instance `id` (raises when refused).
function Env:enqueue_event(id, queue, data)
  local ok, err = self.client:enqueue_event(id, queue, data)
  if not ok then error("enqueue_event " .. tostring(id) .. ": " .. tostring(err), 2) end
end

--- Cancel instance `id` (raises when refused); drive it with run_until_complete.
function Env:cancel(id, reason)
  local ok, err = self.client:cancel(id, reason)
  if not ok then error("cancel " .. tostring(id) .. ": " .. tostring(err), 2) end
end

--- The instance's live key-value state: { key = value, ... }.
function Env:kv(id)
  local all, err = self.client:get_kv_all_values(id)
  if not all then error("kv " .. tostring(id) .. ": " .. tostring(err), 2) end
  return all
end

--- Recorded calls of activity `name` in call order: { {input=, session_id=, worker_id=,
--- instance_id=, attempt=, name=}, ... }. Without a name: every call of every activity.
function Env:calls(name)
  local src = name and (self.calls_by_name[name] or {}) or self.all_calls
  local out = {}
  for i, c in ipairs(src) do out[i] = c end
  return out
end

--- History of execution `execution` of the instance (default: the latest), as
--- client:history, with .instance_id and .execution_id set so testing.check_replay can replay
--- it as that instance.
function Env:history(id, execution)
  if execution ~= nil and (math.type(execution) ~= "integer" or execution < 1) then
    error("history: execution must be an integer >= 1", 2)
  end
  local h, err = self.client:history(id, execution)
  if not h then error("history " .. tostring(id) .. ": " .. tostring(err), 2) end
  h.instance_id = id
  h.execution_id = execution or self.client:status(id).execution_id
  return h
end

--- Session rows of the store: { {session_id=, worker_id=, locked_until=, last_activity=,
--- queued=, running=}, ... } (worker_id nil when unowned).
function Env:sessions() return self.store:sessions() end

--- The session's history in the store, oldest first: { {at=, event= "claimed" | "moved" |
--- "released", worker_id=, detail= how or reason, from= previous owner}, ... }.
function Env:session_history(sid)
  check_string(sid, "session id")
  return self.store:session_events(sid)
end

--- Metrics of running worker `id` (rt:metrics(): { [name] = {type=, help=, series=} }). With
--- `name`: the sum over that metric's series whose labels include every pair in `labels`
--- (a histogram's series count their observations). Read once the workers are idle: a
--- worker counts a commit when its loop hears that the store applied it.
function Env:metrics(id, name, labels)
  local w = self:_worker(id, "metrics")
  if not w.alive then error("metrics: worker " .. id .. " is not running", 2) end
  self:_wait_idle()
  local m = w.rt:metrics()
  if name == nil then return m end
  local fam = m[name]
  if not fam then error("metrics: no metric named " .. tostring(name), 2) end
  local sum = 0
  for _, s in ipairs(fam.series) do
    local match = true
    for k, v in pairs(labels or {}) do
      if s.labels[k] ~= v then match = false end
    end
    if match then sum = sum + (s.value or s.count) end
  end
  return sum
end

--- Start simulated worker `id` (a runtime with worker_node_id = id on this store). options
--- override the env's; options.without_activities = { names } makes it a worker running
--- older code, without those activities (they are "not registered" there: upgrade scenarios).
function Env:add_worker(id, options)
  check_string(id, "worker id")
  local w = self.workers[id]
  if w and w.alive then error("worker " .. id .. " is already running", 2) end
  local o = {}
  for k, v in pairs(self.options) do o[k] = v end
  for k, v in pairs(options or (w and w.options) or {}) do o[k] = v end
  o.store, o.worker_node_id = self.dir, id
  -- without_activities: an older worker that lacks these activities (upgrade scenarios)
  local without = o.without_activities
  o.without_activities = nil
  if without ~= nil and type(without) ~= "table" then
    error("add_worker: without_activities must be a list of activity names, got "
      .. type(without), 2)
  end
  local rt = duroxide.runtime(o)
  if without then rt:_without(without) end
  rt:start({ shared = true })
  if not w then self.order[#self.order + 1] = id end
  self.workers[id] = { id = id, rt = rt, alive = true, options = options or (w and w.options),
                       config = rt:_config(),
                       tags = type(o.tags) == "table" and table.concat(o.tags, ",") or o.tags }
  return id
end

function Env:_worker(id, what)
  local w = self.workers[id]
  if not w then error(what .. ": no worker " .. tostring(id), 3) end
  return w
end

--- Kill worker `id` abruptly: no hooks, no session release, nothing more committed. Its
--- liveness registration goes with it (as the OS drops a killed process's), so with a store
--- that has liveness its sessions and in-flight activities move at once; otherwise they stay
--- locked until their locks and leases lapse (the clock jumps there). Same as kill_worker.
function Env:crash_worker(id)
  local w = self:_worker(id, "crash_worker")
  if not w.alive then error("crash_worker: worker " .. id .. " is not running", 2) end
  w.alive = false
  w.rt:crash()
  w.rt = nil
end

--- Kill worker `id` as SIGKILL kills a process: nothing more runs or is committed, no hook,
--- no release, and the operating system tells its peers at once (its liveness registration
--- goes with it), so its sessions and in-flight activities move to another worker without
--- waiting for their leases.
function Env:kill_worker(id)
  local w = self:_worker(id, "kill_worker")
  if not w.alive then error("kill_worker: worker " .. id .. " is not running", 2) end
  w.alive = false
  w.rt:crash() -- unregisters: a dead owner is seen dead by its peers at once
  w.rt = nil
end

--- Stall worker `id` for `ms` of virtual time, as SIGSTOP then SIGCONT would: it renews
--- nothing, fetches and commits nothing, and its activities make no progress, while the
--- clock moves `ms` and the other workers run (its leases lapse when `ms` is past them and
--- another worker may claim its sessions). On resuming it first gives up the sessions whose
--- lease lapsed (on_session_released "lost"); their activities see actx:is_cancelled() and
--- their results are not recorded.
function Env:stall_worker(id, ms)
  local w = self:_worker(id, "stall_worker")
  if not w.alive then error("stall_worker: worker " .. id .. " is not running", 2) end
  if w.stalled then error("stall_worker: worker " .. id .. " is already stalled", 2) end
  if math.type(ms) ~= "integer" or ms < 0 then
    error("stall_worker: ms must be a non-negative integer, got " .. tostring(ms), 2)
  end
  w.stalled = true
  w.rt:_stall(true)
  local ok, err = pcall(self._drive, self, never, ms)
  w.rt:_stall(false)
  w.stalled = nil
  if not ok then error(err, 2) end
  self:_wait_idle_once()
end

--- Stop worker `id` gracefully: running activities finish (up to shutdown_grace), its
--- sessions are released (on_session_released "shutdown") so others claim them at once.
function Env:shutdown_worker(id)
  local w = self:_worker(id, "shutdown_worker")
  if not w.alive then error("shutdown_worker: worker " .. id .. " is not running", 2) end
  w.alive = false
  w.rt:stop()
  w.rt = nil
end

--- Start worker `id` again as a new runtime with the same worker_node_id (a running one is
--- shut down first). Sessions it still owns in the store are its own at once ("reclaim").
function Env:restart_worker(id)
  local w = self:_worker(id, "restart_worker")
  if w.alive then self:shutdown_worker(id) end
  return self:add_worker(id)
end

--- The lease of session `sid` lapses now: its end is set to the current time in the store
--- (the owner stays recorded, as when an owner fails to renew in time). The owner's renewal
--- then runs at once, does not cover it, and the owner's on_session_released fires with
--- "lost" ("idle" when it was idle). The session's next activity goes to the first worker that
--- fetches it: another worker claims it ("new"), or the old owner takes it back ("reclaim").
function Env:expire_session(sid)
  check_string(sid, "session id")
  local owner
  for _, s in ipairs(self.store:sessions()) do
    if s.session_id == sid then owner = s.worker_id end
  end
  local ok, err = self.store:expire_session(sid, clock_now())
  if not ok then error("expire_session: " .. err, 2) end
  local w = owner and self.workers[owner]
  if w and w.alive then
    w.rt:_renew_sessions()
    self:_wait_idle()
  end
end

--- Stop every worker (abruptly: no hooks), restore the registrations of before the env
--- (mocks and test registrations go away), delete the store. Idempotent.
function Env:close()
  if self.closed then return end
  self.closed = true
  for _, w in ipairs(self:_live()) do
    w.alive = false
    pcall(w.rt.crash, w.rt)
    w.rt = nil
  end
  restore(self.reg, self.saved)
  if self.client then self.client:close() end
  if self.store then self.store:close() end
  if self.own_dir and self.dir:match("^/tmp/") then M.remove_tree(self.dir) end
  local reg = debug.getregistry()
  if reg[OPEN_KEY] == self then reg[OPEN_KEY] = nil end
end

Env.__close = Env.close

--- A new env: a temporary store and worker "w1". opts.app: a script dofile'd now (its
--- registrations last until close); opts.store: a store to use instead of a temporary
--- directory (a directory or a postgres:// URL; kept on close, so give it a fresh one, e.g. a
--- new ?schema=); opts.options: worker options (duroxide.runtime names);
--- opts.workers: worker ids to start (default {"w1"}). An env still open in this Lua state (a
--- spec that failed before env:close()) is closed first: one env runs at a time.
function M.env(opts)
  opts = opts or {}
  if opts.store ~= nil and (type(opts.store) ~= "string" or opts.store == "") then
    error("testing.env: store must be a non-empty string (a directory or a postgres:// URL), "
      .. "got " .. (type(opts.store) == "string" and "an empty string" or type(opts.store)), 2)
  end
  local reg = debug.getregistry()
  local stale = reg[OPEN_KEY]
  if stale and not stale.closed then stale:close() end
  local self = setmetatable({
    workers = {}, order = {}, calls_by_name = {}, all_calls = {}, seq = 0,
    wrappers = setmetatable({}, { __mode = "k" }), options = {},
  }, Env)
  for k, v in pairs(M.default_options) do self.options[k] = v end
  for k, v in pairs(opts.options or {}) do self.options[k] = v end
  self.reg = duroxide._registry()
  self.saved = snapshot(self.reg)
  self.own_dir = opts.store == nil
  self.dir = opts.store or M.tmpdir()
  local ok, err = pcall(function()
    if opts.app then dofile(opts.app) end
    self.client = duroxide.client({ store = self.dir })
    self.store = duroxide._test_store(self.dir)
    self:_wrap_all()
    for _, id in ipairs(opts.workers or { "w1" }) do self:add_worker(id) end
  end)
  reg[OPEN_KEY] = self
  if not ok then
    self:close()
    error(err, 2)
  end
  return self
end

--- Replay a recorded history (env:history(id), or client:history with .instance_id set)
--- against the code of `app` (a script; nil = what is registered now). Returns true when the
--- code is compatible, or false and the engine's message ("nondeterministic: ...") when it
--- would fail on replay; a third value tells how the replayed code ended ("Completed",
--- "Failed", "ContinuedAsNew", "Running"). Registrations are restored afterwards.
--- opts: instance_id, execution_id (default: the history's), kv (the instance's key-value
--- state when the execution began, {key = value}; default none: right for a first execution).
function M.check_replay(history, app, opts)
  if type(history) ~= "table" then error("check_replay: history must be a table", 2) end
  opts = opts or {}
  local reg = duroxide._registry()
  local saved = snapshot(reg)
  local ok, a, b, c = pcall(function()
    if type(app) == "string" then dofile(app)
    elseif type(app) == "function" then app(duroxide)
    elseif app ~= nil then error("check_replay: app must be a script path or a function") end
    return duroxide._replay(history, opts.instance_id or history.instance_id,
                            opts.execution_id or history.execution_id, opts.kv)
  end)
  restore(reg, saved)
  if not ok then error(a, 2) end
  return a, b, c
end

return M
