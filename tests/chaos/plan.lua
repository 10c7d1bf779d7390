-- tests/chaos/plan.lua -- the chaos campaign's instance plan: which orchestrations to start, with
-- which input, and the output each must end with. Pure Lua, no duroxide: the driver (ctl.lua)
-- uses it to start instances, raise their events and check their outputs. The expected outputs
-- are computed here with plain arithmetic, independently of the worker app (app.lua), which
-- gets them through activities, timers, sessions, sub-orchestrations and events.
local M = {}

-- The arithmetic of the app's activities: Step(x) and SessStep(x) = x + 1.
local function step(x) return (x * 7 + 3) % 1000003 end
M.step = step

local function chain(x, n)
  for _ = 1, n do x = step(x) end
  return x
end

-- A small deterministic generator (Park-Miller), so a seed gives the same plan everywhere.
local function rng(seed)
  local s = seed % 2147483647
  if s <= 0 then s = s + 2147483646 end
  return function(lo, hi)
    s = (s * 48271) % 2147483647
    return lo + s % (hi - lo + 1)
  end
end

-- The data the driver raises as event "go" to an Event instance, and what it adds to the output.
function M.event_data(e) return { v = (e.input.x * 13) % 997 } end

-- Kinds: name, weight, and a builder (r = generator, x = seed value, sid = a pooled session id,
-- close = may close its session) returning the input and the expected output.
local KINDS = {
  { "Chain", 18, function(r, x)
      local n = r(2, 6)
      return { x = x, n = n, ms = r(0, 150) }, chain(x, n)
    end },
  { "Fan", 14, function(r, x)
      local n, sum = r(2, 8), 0
      for j = 1, n do sum = sum + step(x + j) end
      return { x = x, n = n, ms = r(0, 150) }, sum
    end },
  { "Sess", 26, function(r, x, sid, close)
      local n, par = r(2, 5), r(0, 2)
      local v = x + n
      if par > 0 then v = par * (v + 1) end
      return { x = x, n = n, par = par, sid = sid, ms = r(30, 250), close = close and r(1, 3) == 1 }, v
    end },
  { "Timer", 10, function(r, x)
      return { x = x, t = r(100, 2000) }, step(x)
    end },
  { "Sub", 10, function(r, x)
      local n = r(1, 4)
      return { x = x, n = n, ms = r(0, 150) }, chain(x, n) + 1
    end },
  { "Event", 10, function(_, x)
      return { x = x }, nil   -- expected filled in below (needs the entry)
    end },
  { "Mix", 8, function(r, x, sid)
      local b = step(x) + 1                 -- Step, then SessStep on the session
      local c = chain(b, 2)                 -- sub-orchestration Chain{x = b, n = 2}
      return { x = x, sid = sid, ms = r(20, 150), t = r(50, 800) }, step(c + 1) + step(c + 2)
    end },
  { "Loop", 4, function(r, x)
      local rounds = r(2, 4)
      return { x = x, round = 1, rounds = rounds, ms = r(0, 100) }, chain(x, rounds)
    end },
}

-- opts = { n, seed, sessions (pool size), close (bool) } -> array of
-- { id, orch, input, expected, event (bool) }.
function M.make(opts)
  local r = rng(opts.seed)
  local total = 0
  for _, k in ipairs(KINDS) do total = total + k[2] end
  local out = {}
  for i = 1, opts.n do
    local pick, kind = r(1, total), nil
    for _, k in ipairs(KINDS) do
      if pick <= k[2] then kind = k; break end
      pick = pick - k[2]
    end
    -- Ids carry the seed, so runs with different seeds can share a store (a database URL).
    local sid = ("cs%d-%d"):format(opts.seed, r(1, opts.sessions))
    local input, expected = kind[3](r, 1000 * i + r(0, 999), sid, opts.close)
    local e = { id = ("c%d-%05d-%s"):format(opts.seed, i, kind[1]:lower()), orch = kind[1],
                input = input, expected = expected, event = kind[1] == "Event" }
    if e.event then e.expected = M.event_data(e).v + step(input.x) end
    out[i] = e
  end
  return out
end

return M
