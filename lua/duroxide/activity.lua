-- duroxide/activity.lua: the activity context (actx) and duroxide.wait.
--
-- Loaded once by the C module with its primitives table `C`. An activity is a coroutine;
-- duroxide.wait parks it (in Lua, never across a C call) until `done` is called, typically
-- from a luv callback, and C.resume_activity continues it.
local C = ...
-- the original, taken before sandbox.c wraps coroutine.running: wait's copy of the coroutine
-- does not keep it from the next activities (a stale done() resumes a later wait: it waits on)
local running = coroutine.running

-- An actx is { _h = handle } (activity.c builds it): its fields are kept in the handle and
-- read through __index, which is cheaper for every activity than a table of nine fields.
-- A field the code assigns (actx.session_state, or its own) is a plain field of the table.
local FIELDS = { instance_id = 1, execution_id = 2, activity_id = 3, name = 4, attempt = 5,
                 session_id = 6, tag = 7, worker_id = 8 }

local Actx = {}
Actx.__name = "duroxide.ActivityContext"
-- In C (activity.c actx_index): Actx[k] if set, else field FIELDS[k] of the handle t._h
-- (copied into the handle when the activity started), else nil. t._h is a plain field (activity.c sets it); were it removed, the
-- __index answers nil for "_h" (no FIELDS entry) without recursing, as rawget would.
Actx.__index = C.actx_indexer(Actx, FIELDS)

--- Suspend the running activity, call fn(done), and return whatever done(...) receives.
local function wait(fn)
  if type(fn) ~= "function" then error("duroxide.wait expects a function", 2) end
  local co = running()
  if not C.is_activity(co) then error("duroxide.wait must be called inside an activity", 2) end
  local st = { done = false, parked = false }
  local function done(...)
    if st.done then return end
    st.done, st.n, st.v = true, select("#", ...), { ... }
    if st.parked then C.resume_activity(co) end
  end
  fn(done)
  if not st.done then
    st.parked = true
    repeat coroutine.yield() until st.done
  end
  return table.unpack(st.v, 1, st.n)
end

function Actx:sleep(ms)
  if math.type(ms) == nil or ms < 0 then
    error("actx:sleep expects a non-negative number of milliseconds", 2)
  end
  return wait(function(done) C.after(math.floor(ms), done) end)
end

function Actx:is_cancelled() return C.actx_cancelled(self._h) end

--- Give this activity's session up on this worker now (its in-memory state is bad): the
--- session's released hook fires with "aborted", its queued work goes to the next claimer, and
--- the session's activities running here (this one too) are cancelled: their results are
--- discarded and they run again on the next claimer.
function Actx:abort_session(reason)
  if reason ~= nil and type(reason) ~= "string" then
    error("actx:abort_session expects a reason string (or nothing), got " .. type(reason), 2)
  end
  C.actx_abort_session(self._h, reason)
end

local LEVELS = { error = 0, warn = 1, info = 2, debug = 3 }
function Actx:trace(level, message)
  local lv = LEVELS[level]
  if not lv then error("trace level must be error, warn, info or debug", 2) end
  C.actx_trace(self._h, lv, tostring(message))
end
function Actx:trace_info(message) C.actx_trace(self._h, 2, tostring(message)) end
function Actx:trace_warn(message) C.actx_trace(self._h, 1, tostring(message)) end
function Actx:trace_error(message) C.actx_trace(self._h, 0, tostring(message)) end
function Actx:trace_debug(message) C.actx_trace(self._h, 3, tostring(message)) end

-- {===== session handler (duroxide.session_handler) =====}
-- State of each session this process owns, per worker (simulated workers share one Lua
-- state): key worker_id \0 session_id -> { how = claim word, opened, opening, state,
-- waiters (dones of activities waiting for an open in flight), released (a reason) }.
-- A claim starts a fresh entry; the first activity of the session here calls open in its own
-- coroutine (so open may wait); a release calls close with the state and drops the entry.
local sessions = {}

local function skey(worker, sid) return (worker or "") .. "\0" .. sid end

local function call_close(h, sid, state, reason)
  if h and h.close then h.close(sid, state, reason) end
end

local function session_claimed(sid, how, worker)
  sessions[skey(worker, sid)] = { how = how }
end

local function session_released(sid, reason, worker)
  local k = skey(worker, sid)
  local e = sessions[k]
  if not e then return end
  sessions[k] = nil
  if e.opened then call_close(C.session_handler(), sid, e.state, reason)
  else e.released = reason end -- an open in flight: close once it returns
end

-- Open the session's state on this worker (once per claim), then run the activity with it.
local function session_run(fn, actx, input)
  local h = C.session_handler()
  local sid, k = actx.session_id, skey(actx.worker_id, actx.session_id)
  local e = sessions[k]
  while true do
    if not e then e = { how = "new" }; sessions[k] = e end
    if not e.opening then break end
    -- another activity of the session is opening it here: wait for it, then look again
    local mine = e
    wait(function(done) mine.waiters[#mine.waiters + 1] = done end)
    e = sessions[k]
    -- released while it opened: run with the state it opened (already closed) rather than
    -- open one that no release would close
    if e ~= mine and mine.opened then e = mine; break end
  end
  if not e.opened then
    e.opening, e.waiters = true, {}
    local ok, state = pcall(h.open or function() end, sid, e.how)
    local waiters = e.waiters
    e.opening, e.waiters = false, nil
    if ok then e.opened, e.state = true, state end
    if ok and e.released then call_close(h, sid, state, e.released) end
    for _, done in ipairs(waiters) do done() end -- after the outcome is set: they read it
    if not ok then
      local msg = type(state) == "table" and state.message or tostring(state)
      error(("session handler open failed for session %s: %s"):format(sid, msg), 0)
    end
  end
  actx.session_state = e.state
  return fn(actx, input)
end

return { Actx = Actx, wait = wait, session_run = session_run,
         session_claimed = session_claimed, session_released = session_released }
