-- duroxide/activity.lua: the activity context (actx) and duroxide.wait.
--
-- Loaded once by the C module with its primitives table `C`. An activity is a coroutine;
-- duroxide.wait parks it (in Lua, never across a C call) until `done` is called, typically
-- from a luv callback, and C.resume_activity continues it.
local C = ...

local Actx = {}
Actx.__index = Actx
Actx.__name = "duroxide.ActivityContext"

--- Suspend the running activity, call fn(done), and return whatever done(...) receives.
local function wait(fn)
  if type(fn) ~= "function" then error("duroxide.wait expects a function", 2) end
  local co = coroutine.running()
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

return { Actx = Actx, wait = wait }
