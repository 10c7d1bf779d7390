-- tests/e2e/apps/hostile.lua: hostile orchestrations for tests/e2e_hostile.sh. Each Attack_*
-- must fail its own instance; Innocent must keep returning the same output in the same worker.
local duroxide = require("duroxide")
local uv = require("luv") -- captured at load time: still refused inside orchestrations
local timer = uv.new_timer() -- a handle made at load time: its methods are refused too

local attacks = {
  -- the instruction budget cannot be bypassed
  sort = function()
    local t = { 3, 2, 1 }
    while true do pcall(table.sort, t, function() while true do end end) end
  end,
  gsub = function()
    while true do pcall(string.gsub, "abc", ".", function() while true do end end) end
  end,
  tostring = function()
    local o = setmetatable({}, { __tostring = function() while true do end end })
    while true do pcall(tostring, o) end
  end,
  index = function()
    local o = setmetatable({}, { __index = function() while true do end end })
    while true do pcall(function() return o.x end) end
  end,
  handler = function()
    while true do xpcall(error, function() while true do end end) end
  end,
  errobj = function()
    error(setmetatable({}, { __tostring = function() while true do end end }))
  end,
  -- pattern matching (C code the count hook cannot interrupt) is charged to the budget
  pattern = function() return ("a"):rep(30):match(("a?"):rep(30) .. ("a"):rep(30)) end,
  patfind = function()
    while true do pcall(string.find, string.rep("a", 1e5), ".-.-.-.-b") end
  end,
  move = function() return table.move({}, 1, 1e12, 2) end,
  emptyrep = function() return string.rep("", 1e15) end,
  -- single C calls that take long but count as one instruction: the turn time limit ends them
  -- (tests/e2e_hostile.sh h4 runs the worker with --turn-time-limit 1s)
  slowsort = function()
    local t = {}
    for i = 1, 1e6 do t[i] = (i * 7919) % 1000003 end
    while true do table.sort(t) end
  end,
  shift = function()
    local t = {}
    for i = 1, 1e6 do t[i] = i end
    while true do table.insert(t, 1, 0); table.remove(t, 1) end
  end,
  utf8len = function()
    local s = string.rep("a", 16 * 1024 * 1024)
    while true do utf8.len(s) end
  end,
  streq = function()
    local a, b = string.rep("a", 1e7) .. "b", string.rep("a", 1e7) .. "c"
    local n = 0
    while true do if a == b then n = n + 1 end end
  end,
  -- memory
  rep = function() return #string.rep("x", 1e9) end,
  -- shared state
  strrep = function() string.rep = function() return "evil" end end,
  strmeta = function() getmetatable("").__index.upper = function() return "evil" end end,
  ctxmeta = function(ctx) getmetatable(ctx).__index.schedule_activity = nil end,
  -- unreachable
  binary = function() return load(string.dump(function() return 1 end), "x", "b") end,
  luv = function() return uv.now() end,
  luvhandle = function() timer:start(10, 0, function() end) end,
  exit = function() os.exit(3) end,
  gcstop = function() collectgarbage("stop") end,
  finalizer = function() setmetatable({}, { __gc = function() os.exit(4) end }) end,
}

for name, fn in pairs(attacks) do duroxide.orchestration("Attack_" .. name, fn) end

duroxide.activity("Echo", function(_, v) return v end)

duroxide.orchestration("Innocent", function(ctx, v)
  local got = assert(ctx:schedule_activity("Echo", v):await())
  return string.rep("ab", 2) .. ("x"):upper() .. table.concat({ got, #string.format("%5d", 1) })
end)

-- A helper defined outside the orchestration that forgets `local`: each instance still sees
-- its own global (it starts at 1 in every instance).
local function bump()
  hcount = (hcount or 0) + 1 -- luacheck: ignore
  return hcount
end
duroxide.orchestration("HelperGlobals", function(ctx)
  local first = bump()
  assert(ctx:schedule_activity("Echo", 0):await())
  return { first, bump() }
end)
