-- spec/helpers.lua: shared setup for the busted specs.
--
-- Each test gets a fresh temporary store directory, a runtime on it (started) and a client on
-- the same store. Registrations are global to the Lua state, so names are made unique with a
-- counter kept in the registry (busted's insulation reloads this module for every file).
-- Only one runtime may run per Lua state: always close the env (after_each / H.with_env).
local duroxide = require("duroxide")

local H = {}

local DEFAULTS = {
  log_level = "error",
  -- Short leases so lock stealing (select losers, retry timeouts) reaches running activities
  -- quickly through the renewal timer.
  worker_lock_timeout = "1s",
  shutdown_grace = "1s",
}

--- A name unique within this Lua state: base_N.
function H.unique(base)
  local reg = debug.getregistry()
  reg.duroxide_spec_seq = (reg.duroxide_spec_seq or 0) + 1
  return string.format("%s_%d", base or "x", reg.duroxide_spec_seq)
end

-- Temporary directories come from the harness (luv calls: much cheaper than shells).
local testing = require("duroxide.testing")
H.tmpdir = testing.tmpdir

function H.rmdir(path)
  if path and path:match("^/tmp/") then testing.remove_tree(path) end
end

--- Events of one instance's history that have the given type.
function H.events_of(history, type_)
  local out = {}
  for _, e in ipairs(history or {}) do
    if e.type == type_ then out[#out + 1] = e end
  end
  return out
end

local Env = {}
Env.__index = Env

--- Register an activity under a unique name derived from base; returns the name.
function Env:activity(base, fn)
  local name = H.unique(base)
  duroxide.activity(name, fn)
  return name
end

--- Register an orchestration under a unique name derived from base; returns the name.
function Env:orchestration(base, fn, opts)
  local name = H.unique(base)
  duroxide.orchestration(name, fn, opts)
  return name
end

--- Start an instance (id generated when nil); asserts the client accepted it.
function Env:start(name, input, id)
  id = id or H.unique("inst")
  local ok, err = self.client:start(id, name, input)
  assert(ok, err and tostring(err))
  return id
end

--- Wait until the instance is terminal; fails the test on timeout.
function Env:wait(id, timeout_ms)
  local st, err = self.client:wait(id, timeout_ms or 5000)
  assert(st, "waiting for " .. id .. ": " .. tostring(err))
  return st
end

--- Start and wait: returns the final status table and the instance id.
function Env:run(name, input, timeout_ms)
  local id = self:start(name, input)
  return self:wait(id, timeout_ms), id
end

--- Drive the runtime until pred() is true; fails the test on timeout.
function Env:run_until(pred, timeout_ms, what)
  assert(self.rt:run_until(pred, timeout_ms or 5000), "timed out waiting for " .. (what or "condition"))
end

--- Drive the runtime until the instance's history holds an event of this type.
function Env:await_event(id, type_, timeout_ms)
  self:run_until(function()
    return #H.events_of(self.client:history(id), type_) > 0
  end, timeout_ms, type_ .. " in " .. id)
end

function Env:close()
  if self.closed then return end
  self.closed = true
  self.rt:stop()
  self.client:close()
  H.rmdir(self.dir)
end

--- A started runtime and a client on a fresh store. opts override the runtime options.
function H.env(opts)
  local dir = H.tmpdir()
  local o = { store = dir }
  for k, v in pairs(DEFAULTS) do o[k] = v end
  for k, v in pairs(opts or {}) do o[k] = v end
  local ok, rt = pcall(duroxide.runtime, o)
  if not ok then
    H.rmdir(dir)
    error(rt, 0)
  end
  rt:start()
  return setmetatable({ dir = dir, rt = rt, client = duroxide.client({ store = dir }) }, Env)
end

--- Call fn(env) with a fresh env, closing it afterwards even when fn fails.
function H.with_env(fn, opts)
  local env = H.env(opts)
  local res = table.pack(xpcall(fn, debug.traceback, env))
  env:close()
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end

--- helpers.run(function(env) ... return orchestration_name, input end [, opts [, timeout]]):
--- registers what the test needs, runs one instance to completion and returns its status
--- table (plus the env's client history of it and its id). The env is closed afterwards.
function H.run(registrations, opts, timeout_ms)
  return H.with_env(function(env)
    local name, input = registrations(env)
    local st, id = env:run(name, input, timeout_ms)
    return st, env.client:history(id), id
  end, opts)
end

return H
