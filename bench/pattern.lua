-- bench/pattern.lua: the speed of the sandbox's pattern matcher (bindings/lua/pattern.c) against
-- the stock string functions, on typical patterns. Prints one line per workload, the best of
-- 5 runs: stock vs ours inside one orchestration turn each (the same runtime overhead on both
-- sides), and stock vs the wrappers outside orchestrations (the activities' path).
--
--   lua5.4 bench/pattern.lua [ROUNDS]     (from the repository root, after scripts/build)
package.cpath = "build/bindings/?.so;" .. package.cpath
local duroxide = require("duroxide")
local testing = require("duroxide.testing")
local uv = require("luv")

local rounds = tonumber(arg and arg[1]) or 200
local STOCK = {}
for _, name in ipairs({ "find", "match", "gmatch", "gsub" }) do
  STOCK[name] = select(2, debug.getupvalue(string[name], 1))
end

local text = {}
for i = 1, 200 do text[i] = string.format("key%d = value%d; name: item-%d\n", i, i * 7, i) end
text = table.concat(text) -- about 7 KB

-- Each workload takes the function table F (stock or the sandbox's) and does typical work.
local WORKLOADS = {
  { "gmatch (%w+)%s*=%s*(%w+)", function(F)
    local n = 0
    for _ in F.gmatch(text, "(%w+)%s*=%s*(%w+)") do n = n + 1 end
    return n
  end },
  { "gsub %d+ -> function", function(F)
    return select(2, F.gsub(text, "%d+", function(d) return d end))
  end },
  { "find plain 'item-200'", function(F) return F.find(text, "item-200", 1, true) end },
  { "match ^%s*(.-)%s*$ (trim)", function(F) return #F.match("   " .. text .. "   ", "^%s*(.-)%s*$") end },
  { "find %f[%a]name: (%a+)%-(%d+) x200", function(F)
    local pos, n = 1, 0
    for _ = 1, 200 do
      local _, e = F.find(text, "%f[%a]name: (%a+)%-(%d+)", pos)
      if not e then break end
      pos, n = e + 1, n + 1
    end
    return n
  end },
}

local dir = testing.tmpdir()
local rt = duroxide.runtime({ store = dir, log_level = "error",
                             turn_instruction_budget = 1000000000 })
rt:start()
local client = duroxide.client({ store = dir })

-- Run fn(F) `rounds` times inside one orchestration turn; wall time of the whole instance.
local seq = 0
local function timed_orch(fn, F)
  seq = seq + 1
  local name = "PatternBench" .. seq
  duroxide.orchestration(name, function()
    local F2 = F or string
    local r
    for _ = 1, rounds do r = fn(F2) end
    return r
  end)
  local t0 = uv.hrtime()
  assert(client:start("b" .. seq, name))
  local st = assert(client:wait("b" .. seq, 600000))
  assert(st.status == "Completed", st.error and st.error.message)
  return (uv.hrtime() - t0) / 1e6
end

local function timed_outside(fn, F)
  local t0 = uv.hrtime()
  for _ = 1, rounds do fn(F) end
  return (uv.hrtime() - t0) / 1e6
end

print(string.format("%d rounds over %d bytes; ms (lower is better)", rounds, #text))
print(string.format("%-38s %9s %9s %6s | %9s %9s %6s", "workload", "orch:stk", "orch:ours", "ratio",
  "out:stk", "out:wrap", "ratio"))
for _, w in ipairs(WORKLOADS) do
  assert(w[2](STOCK) == w[2](string), w[1])
  timed_orch(w[2], STOCK) -- warm-up
  local a, b, c, d = math.huge, math.huge, math.huge, math.huge
  for _ = 1, 5 do -- the best of 5: the machine is shared
    a, b = math.min(a, timed_orch(w[2], STOCK)), math.min(b, timed_orch(w[2], nil))
    c, d = math.min(c, timed_outside(w[2], STOCK)), math.min(d, timed_outside(w[2], string))
  end
  print(string.format("%-38s %9.1f %9.1f %6.2f | %9.1f %9.1f %6.2f", w[1], a, b, b / a, c, d, d / c))
end
rt:stop()
client:close()
testing.remove_tree(dir)
