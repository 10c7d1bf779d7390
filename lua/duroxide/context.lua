-- duroxide/context.lua: the orchestration context (ctx), durable futures, join and select.
--
-- Loaded once by the C module with its primitives table `C`:
--   C.emit(box, kind, name, input, session_id, instance, version, delay_ms, on_moved, tag) -> token | value
--   C.schedule(...) as C.emit, -> the action's future (a userdata: its state is C's)
--   C.fpoll(future) -> state, value, err, order   (0 pending, 1 ok, 2 error, 3 cancelled or a retry)
--   C.fcancel(future [, drop]) -> whether it was pending ; C.fretry(box) -> future, state
--   C.fstate(future) -> a retry's state table, else nil ; C.future_mt(mt) sets futures' metatable
--   C.replaying(box) -> boolean ; C.trace(box, level, message)
--   C.kv_get(box, key) -> value ; C.kv_all(box) -> { {key, value, updated_ms}, ... }
--   C.kv_key_check(key) raises for a key no write would accept
--   C.custom_status(box) -> value
--   (box: the ctx itself, the instance's turn box)
--   C.on_main() -> true on the running instance's own coroutine (ctx does not show it: any
--     code holding a ctx could reach it, and resume it from another instance)
-- Yields happen here, in Lua, never inside a C function: a suspended orchestration is a
-- coroutine parked in `coroutine.yield()` until the engine delivers something and resumes it.
local C = ...

local ACT_ACTIVITY, ACT_TIMER, ACT_WAIT, ACT_SUB, ACT_CHAINED, ACT_STATUS, ACT_SYSCALL, ACT_CAN =
  1, 2, 3, 4, 5, 6, 7, 8
local ACT_CLOSE_SESSION = 9
local ACT_KV_SET, ACT_KV_CLEAR, ACT_KV_CLEAR_ALL, ACT_DEQUEUE = 10, 11, 12, 13
local KV_SYSCALL = "__duroxide_syscall:get_kv_value"
local PENDING, OK, SPECIAL = 0, 1, 3

local yield, on_main = coroutine.yield, C.on_main
-- the primitives every await and schedule call uses, as upvalues (one lookup fewer per call:
-- orchestration code runs under the instruction hook, where every VM instruction counts)
local fpoll, schedule, texts, fstate = C.fpoll, C.schedule, C.texts, C.fstate
-- A wait yields (PARK, future) or (PARK, futures, i): the engine then resumes the code only
-- once those futures are no longer pending (orch.c park_from_yield). Private to this file.
local PARK = C.PARK
local mtype = math.type
local type, select_, error, tostring, ipairs = type, select, error, tostring, ipairs
-- the original, captured before the sandbox guards it (sandbox.c): Future checks compare
-- the real metatable, which orchestration code only sees as a read-only view
local getmetatable = getmetatable

-- The methods of every future. A future is a userdata made by C.schedule (orch.c): its token,
-- flags and ctx are C's, and its metatable refuses writes, so code holding another instance's
-- future cannot make it resolve as another one. Future itself has no __index.
local Future = {}
local FutureMT = { __index = Future, __name = "duroxide.Future" }
FutureMT.__newindex = function(_, k)
  error("a future is read-only" .. (type(k) == "string" and ": cannot assign future." .. k or "")
        .. " (keep state in locals)", 2)
end
FutureMT.__metatable = FutureMT -- getmetatable: itself, and in orchestrations a view
C.future_mt(FutureMT)

-- The methods of every ctx. A ctx is its instance's turn box (a full userdata, orch.c): it has
-- no fields code can assign, and its metatable (one per instance: its fields, then these
-- methods) refuses writes. Context itself has no __index, so ctx.__index does not reach it.
local Context = {}

local function check_name(what, v, level)
  if type(v) ~= "string" or v == "" then
    error(what .. " must be a non-empty string, got " .. type(v), level or 3)
  end
end

local function check_ms(v)
  if math.type(v) == nil or v < 0 then
    error("timer duration must be a non-negative number of milliseconds, got " .. tostring(v), 3)
  end
  return math.floor(v)
end

-- Suspending is only possible on the orchestration's own coroutine: a yield inside
-- coroutine.wrap/resume would return to user code with nothing resolved.
local function suspend()
  if not on_main() then
    error("durable futures must be awaited on the orchestration's coroutine, not inside " ..
          "coroutine.wrap or coroutine.resume", 3)
  end
  yield()
end

local function cancelled_error()
  return C.error("cancelled: the orchestration cancelled this future", "application", "Cancelled")
end

-- A cancelled future's or a retry's wait (fpoll's SPECIAL). A retry's state (fstate):
-- composite (runs the attempts), current (the attempt's future), done, value, err, cancelled.
local function await_special(f)
  local st = fstate(f)
  if st == nil or st.cancelled then return nil, cancelled_error() end
  if not st.done then
    st.value, st.err = st.composite()
    st.done = true
  end
  return st.value, st.err
end

--- Wait for the future. Returns its value, or nil and a duroxide.Error.
function Future:await()
  while true do
    local state, value, err = fpoll(self)
    if state == OK then return value end
    if state ~= PENDING then
      if state == SPECIAL then return await_special(self) end
      return nil, err
    end
    -- suspend(), inlined: this loop runs once per await of every orchestration
    if not on_main() then suspend() end
    yield(PARK, self)
  end
end

function Future:is_ready()
  local state = fpoll(self)
  if state == SPECIAL then
    local st = fstate(self)
    return st == nil or st.cancelled == true
  end
  return state ~= PENDING
end

--- Withdraw a future the orchestration no longer needs: an activity is taken off the queue
--- (a running one sees actx:is_cancelled()), a sub-orchestration is cancelled, a wait is
--- unsubscribed, a timer is dropped. Recorded in history like a select loser, so replay does
--- the same. Returns true when the future was still pending (it then resolves to nil and a
--- "Cancelled" error), false when it had already completed (cancel changes nothing).
function Future:cancel()
  local st = fstate(self)
  if st == nil then return C.fcancel(self) end
  if st.cancelled then return true end
  if st.done then return false end
  st.cancelled = true
  if st.current then st.current:cancel() end
  return true
end

-- {===== scheduling =====}

-- "fail" / "run" of opts.on_moved (sessions).
local ON_MOVED = { fail = true, run = false }

-- The options table of activity calls ({ tag = "gpu" }, plus on_moved = "fail" | "run" on a
-- session); unknown keys are refused, so a misspelt option fails at the call instead of being
-- ignored. `allowed` adds keys that another layer handles. Returns the tag and whether the
-- activity fails SessionMoved when its session moved.
local function activity_opts(opts, allowed)
  if opts == nil then return nil, false end
  if type(opts) ~= "table" then error("activity options must be a table, got " .. type(opts), 4) end
  for k in pairs(opts) do
    if k ~= "tag" and not (allowed and allowed[k]) then
      error("unknown activity option '" .. tostring(k) .. "' (expected tag" ..
            (allowed and allowed.on_moved and ", on_moved" or "") .. ")", 4)
    end
  end
  local tag = opts.tag
  if tag ~= nil and (type(tag) ~= "string" or tag == "") then
    error("activity tag must be a non-empty string, got " ..
          (type(tag) == "string" and "an empty string" or type(tag)), 4)
  end
  local fail_moved = false
  if opts.on_moved ~= nil then
    fail_moved = ON_MOVED[opts.on_moved]
    if fail_moved == nil then
      error('on_moved must be "fail" or "run", got ' .. tostring(opts.on_moved), 4)
    end
  end
  return tag, fail_moved
end

local function activity_future(ctx, name, input, session_id, tag, fail_moved)
  return schedule(ctx, ACT_ACTIVITY, name, input, session_id, nil, nil, nil, fail_moved or false,
                  tag)
end

local SESSION_OPTS = { on_moved = true }
local SESSION_ID_OPTS = { session_id = true, on_moved = true }

--- Schedule an activity; opts.tag routes it to workers that take that tag, opts.session_id
--- runs it on a session (as schedule_activity_on_session).
-- the activity name the fast path checked last: a run of one name skips type(). It starts as a
-- private table, which no call can pass (nil or false would let those through).
local last_name = {}

function Context:schedule_activity(name, input, opts)
  -- the common call (a name, no options) in as few VM instructions as the hook counts
  if opts == nil and (name == last_name or type(name) == "string" and name ~= "") then
    last_name = name
    return schedule(self, ACT_ACTIVITY, name, input)
  end
  check_name("activity name", name)
  local tag, fail_moved = activity_opts(opts, SESSION_ID_OPTS)
  local sid = opts and opts.session_id
  if sid ~= nil then check_name("session id", sid) end
  return activity_future(self, name, input, sid, tag, fail_moved)
end

--- Like schedule_activity; the activity runs on the worker that owns `session_id`.
--- opts.on_moved = "fail": fail with kind SessionMoved instead of running when the session's
--- owner is not the worker that ran this instance's previous activity on it ("run": default).
function Context:schedule_activity_on_session(name, input, session_id, opts)
  -- the common call (no options): both names checked in one primitive, no type() calls
  if opts == nil and texts(name, session_id) then
    return schedule(self, ACT_ACTIVITY, name, input, session_id, nil, nil, nil, false)
  end
  check_name("activity name", name)
  check_name("session id", session_id)
  return activity_future(self, name, input, session_id, activity_opts(opts, SESSION_OPTS))
end

--- The worker that ran this instance's latest completed activity on `session_id` (as the
--- code has seen it so far: read from history, the same on every replay), or nil.
function Context:session_worker(session_id)
  check_name("session id", session_id)
  return C.session_worker(self, session_id)
end

--- Release a session now: its owner's on_session_released hook gets "closed" (after the
--- session's earlier activities), and the next activity on that id may go to any worker.
function Context:close_session(session_id)
  check_name("session id", session_id)
  C.emit(self, ACT_CLOSE_SESSION, nil, nil, session_id)
end

function Context:schedule_timer(ms)
  return schedule(self, ACT_TIMER, nil, nil, nil, nil, nil, check_ms(ms))
end

function Context:schedule_wait(event_name)
  check_name("event name", event_name)
  return schedule(self, ACT_WAIT, event_name)
end

local function check_version(v, level)
  if v ~= nil and (type(v) ~= "string" or not v:match("^%d+%.%d+%.%d+$")) then
    error("version must look like \"1.2.3\", got " ..
          (type(v) == "string" and ("'" .. v .. "'") or type(v)), level + 1)
  end
  return v
end

--- Start a child orchestration and wait for its output. The third argument is the child's
--- instance id, or an options table { instance_id = , version = } (version pins the code the
--- child runs; without one the child's registry policy decides).
function Context:schedule_sub_orchestration(name, input, opts)
  check_name("orchestration name", name)
  local instance_id, version = opts, nil
  if type(opts) == "table" then
    for k in pairs(opts) do
      if k ~= "instance_id" and k ~= "version" then
        error("unknown sub-orchestration option '" .. tostring(k) .. "'", 2)
      end
    end
    instance_id, version = opts.instance_id, check_version(opts.version, 2)
  end
  if instance_id ~= nil then check_name("instance id", instance_id) end
  return schedule(self, ACT_SUB, name, input, nil, instance_id, version)
end

function Context:start_orchestration(name, instance_id, input)
  check_name("orchestration name", name)
  check_name("instance id", instance_id)
  C.emit(self, ACT_CHAINED, name, input, nil, instance_id)
end

local function backoff_ms(policy, attempt)
  local kind = policy.backoff or "exponential"
  local initial = policy.initial_ms or 100
  local max = policy.max_ms or 30000
  local d
  if kind == "fixed" then d = initial
  elseif kind == "linear" then d = initial * attempt
  elseif kind == "exponential" then d = initial * (2 ^ (attempt - 1))
  elseif kind == "none" then d = 0
  else error("retry policy backoff must be \"exponential\", \"linear\", \"fixed\" or \"none\"", 4)
  end
  return math.floor(math.min(d, max))
end

local function check_policy(policy)
  if type(policy) ~= "table" then error("retry policy must be a table", 4) end
  local n = policy.max_attempts or 3
  if math.type(n) ~= "integer" or n < 1 then
    error("retry policy max_attempts must be an integer >= 1", 4)
  end
  backoff_ms(policy, 1)
  return n
end

--- Schedule an activity and retry it on failure per `policy`. Every attempt is an activity
--- scheduled in history; waits between attempts are durable timers, so retries survive
--- restarts. A per-attempt `timeout_ms` races the activity with a timer (timeouts are final).
--- The fourth argument is the session id or the options table; an options table may follow
--- a session id ({ tag = , plus on_moved for sessions }).
function Context:schedule_activity_with_retry(name, input, policy, session_id, opts)
  check_name("activity name", name)
  if type(session_id) == "table" and opts == nil then session_id, opts = nil, session_id end
  if session_id ~= nil then check_name("session id", session_id) end
  local tag, fail_moved = activity_opts(opts, session_id ~= nil and SESSION_OPTS or nil)
  local max_attempts = check_policy(policy)
  local ctx = self
  local function attempt_future()
    return activity_future(ctx, name, input, session_id, tag, fail_moved)
  end
  local f, st = C.fretry(self)
  local first = attempt_future()
  st.current = first
  st.composite = function()
    local current, last_err = first, nil
    for attempt = 1, max_attempts do
      if attempt > 1 then
        current = attempt_future()
        st.current = current
      end
      local value, err
      if policy.timeout_ms then
        local idx, v, e = ctx:select({ current, ctx:schedule_timer(policy.timeout_ms) })
        if idx == 2 then
          return nil, C.error("timeout: activity " .. name .. " timed out after " ..
                              policy.timeout_ms .. "ms", "application", "Timeout")
        end
        value, err = v, e
      else
        value, err = current:await()
      end
      if err == nil then return value end
      last_err = err
      if attempt < max_attempts then
        ctx:trace_warn("activity " .. name .. " failed (attempt " .. attempt .. " of " ..
                       max_attempts .. "): " .. tostring(err.message))
        local d = backoff_ms(policy, attempt)
        if d > 0 then ctx:schedule_timer(d):await() end
      end
    end
    return nil, last_err
  end
  return f
end

--- End this execution and start a new one with `input`; opts.version (or a version string)
--- picks the code the new execution runs (without one: the registry policy, i.e. upgrade).
function Context:continue_as_new(input, opts)
  local version = opts
  if type(opts) == "table" then
    for k in pairs(opts) do
      if k ~= "version" then error("unknown continue_as_new option '" .. tostring(k) .. "'", 2) end
    end
    version = opts.version
  end
  check_version(version, 2)
  C.emit(self, ACT_CAN, nil, input, nil, nil, version)
  while true do suspend() end
end

-- {===== deterministic helpers =====}

function Context:utc_now() return C.emit(self, ACT_SYSCALL, "utc_now") end
function Context:new_guid() return C.emit(self, ACT_SYSCALL, "new_guid") end
function Context:random() return C.emit(self, ACT_SYSCALL, "random") end

function Context:set_custom_status(value)
  C.emit(self, ACT_STATUS, nil, value)
end

--- The custom status as this execution last set it (a continued execution starts with the
--- status its predecessor ended with); nil when none.
function Context:get_custom_status() return C.custom_status(self) end

-- {===== key-value state =====}
-- Reads see the instance's state as of the previous execution's end plus this execution's
-- writes so far; every write is recorded in history, so replay reads the same values.

function Context:set_kv_value(key, value)
  check_name("key-value key", key)
  if value == nil then error("set_kv_value: value must not be nil (use clear_kv_value)", 2) end
  C.emit(self, ACT_KV_SET, key, value)
end

function Context:get_kv_value(key)
  check_name("key-value key", key)
  return C.kv_get(self, key)
end

function Context:clear_kv_value(key)
  check_name("key-value key", key)
  C.emit(self, ACT_KV_CLEAR, key)
end

function Context:clear_all_kv_values() C.emit(self, ACT_KV_CLEAR_ALL) end

function Context:get_kv_all_values()
  local all = {}
  for _, e in ipairs(C.kv_all(self)) do all[e[1]] = e[2] end
  return all
end

--- Keys in ascending (byte) order.
function Context:get_kv_all_keys()
  local keys = {}
  for i, e in ipairs(C.kv_all(self)) do keys[i] = e[1] end
  return keys
end

function Context:get_kv_length() return #C.kv_all(self) end

--- Clear every key last set before `cutoff_ms` (ms since the epoch, as ctx:utc_now());
--- returns how many were cleared.
function Context:prune_kv_values_updated_before(cutoff_ms)
  if mtype(cutoff_ms) == nil then
    error("prune_kv_values_updated_before expects a time in milliseconds, got " ..
          type(cutoff_ms), 2)
  end
  local n = 0
  for _, e in ipairs(C.kv_all(self)) do
    if e[3] < cutoff_ms then
      C.emit(self, ACT_KV_CLEAR, e[1])
      n = n + 1
    end
  end
  return n
end

--- A future of another instance's live value of `key` (nil when it has none), read by a
--- built-in activity so the value is recorded in history.
function Context:get_kv_value_from_instance(instance_id, key)
  check_name("instance id", instance_id)
  check_name("key-value key", key)
  C.kv_key_check(key)
  -- the instance id also goes as the action's instance: checked there like any other id
  return schedule(self, ACT_ACTIVITY, KV_SYSCALL, { instance = instance_id, key = key }, nil,
                  instance_id)
end

-- {===== event queues =====}

--- A future of the next message of `queue` (FIFO). Messages enqueued before anyone waits are
--- kept until dequeued, and carried across continue_as_new.
function Context:dequeue_event(queue)
  check_name("queue name", queue)
  return schedule(self, ACT_DEQUEUE, queue)
end

function Context:is_replaying() return C.replaying(self) end

local LEVELS = { error = 0, warn = 1, info = 2, debug = 3 }

function Context:trace(level, message)
  local lv = LEVELS[level]
  if not lv then error("trace level must be error, warn, info or debug", 2) end
  C.trace(self, lv, tostring(message))
end
function Context:trace_info(message) C.trace(self, 2, tostring(message)) end
function Context:trace_warn(message) C.trace(self, 1, tostring(message)) end
function Context:trace_error(message) C.trace(self, 0, tostring(message)) end
function Context:trace_debug(message) C.trace(self, 3, tostring(message)) end

-- {===== join and select =====}

local function check_futures(futures, what)
  if type(futures) ~= "table" then error(what .. " expects an array of futures", 3) end
  for i = 1, #futures do
    if getmetatable(futures[i]) ~= FutureMT then
      error(what .. ": element " .. i .. " is not a durable future", 3)
    end
  end
end

--- Wait for every future. Returns values in argument order, and an array of errors (nil
--- when none failed; failed positions hold nil in the values array).
function Context:join(futures)
  check_futures(futures, "join")
  local values, errors = {}, nil
  for i = 1, #futures do
    local f = futures[i]
    local v, e
    -- Future:await inlined (fewer VM instructions under the count hook); off the
    -- orchestration's coroutine, await raises as it always did
    while true do
      local state, value, err = fpoll(f)
      if state == OK then v = value break end
      if state ~= PENDING then
        if state == SPECIAL then v, e = await_special(f) else e = err end -- cancelled, a retry
        break
      end
      if not on_main() then v, e = f:await() break end
      yield(PARK, futures, i) -- resumed once futures i.. are all done
    end
    values[i] = v
    if e ~= nil then
      errors = errors or {}
      errors[i] = e
    end
  end
  return values, errors
end

--- Wait for the first future to complete (earliest in history). Returns index, value, err.
--- The losers are cancelled: activities are withdrawn, waits unsubscribed.
function Context:select(futures)
  check_futures(futures, "select")
  if #futures == 0 then error("select needs at least one future", 2) end
  for i = 1, #futures do
    if fstate(futures[i]) then error("select: element " .. i .. " is a retry future", 2) end
  end
  while true do
    local best, best_order, best_value, best_err
    for i = 1, #futures do
      local state, value, err, order = fpoll(futures[i])
      if state == SPECIAL then -- cancelled by the code itself, before anything in history
        state, value, err, order = -1, nil, cancelled_error(), -1
      end
      if state ~= PENDING and (best == nil or order < best_order) then
        best, best_order, best_value, best_err = i, order, value, err
      end
    end
    if best then
      for i = 1, #futures do
        if i ~= best then C.fcancel(futures[i], true) end
      end
      return best, best_value, best_err
    end
    suspend()
  end
end

-- the metatable of each ctx's fields table (orch.c): missing keys are Context's methods
return { Context = Context, Fields = { __index = Context }, Future = Future, select = select_ }
