-- Pattern matching inside orchestrations (bindings/lua/pattern.c): the sandbox's budgeted
-- matcher must give exactly what the stock string functions give. Each case runs outside an
-- orchestration (the stock functions) and inside one (the sandbox's), and every result --
-- values, their types, error messages -- must be identical. The hostile side (catastrophic
-- patterns fail on the budget) is in spec/hostile_spec.lua.
local duroxide = require("duroxide")
local H = require("helpers")

-- {===== the cases =====}

-- A small deterministic generator (a 31-bit LCG): the same cases on every run and on both sides.
local function rng(seed)
  local x = seed
  return function(n)
    x = (x * 1103515245 + 12345) % 2147483648
    return x % n + 1
  end
end

local function pick(r, list) return list[r(#list)] end

local SUBJECT_BYTES = { "a", "a", "b", "b", "c", "1", "2", " ", "(", ")", "[", "]", "%", ".",
                        "-", "^", "$", "_", "\0", "\n", "A", "Z", "\200", "x", "y" }
local ATOMS = { "a", "b", "c", ".", "%a", "%d", "%s", "%w", "%p", "%x", "%u", "%l", "%c", "%g",
                "%A", "%D", "%S", "%W", "%.", "%%", "%(", "%z", "[ab]", "[^a]", "[a-c]",
                "[%a_]", "[%d%s]", "[]]", "[^]]", "[a-]", "[-a]", "[%]]", "[\128-\255]", "1",
                " ", "x", "\0", "^", "$", "-" }
local QUANTS = { "", "", "", "*", "+", "-", "?" }
local SPECIALS = { "()", "%b()", "%b[]", "%bab", "%f[%w]", "%f[%W]", "%f[a]", "%f[^%z]",
                   "%f[%z]", "%1", "%2" }
-- bytes that make malformed patterns now and then
local RAW = { "%", "[", "]", "(", ")", "%b", "%f", "[^", "%0", "%9" }

local function subject(r)
  local t = {}
  for i = 1, (r(8) == 1 and r(60) or r(12)) - 1 do t[i] = pick(r, SUBJECT_BYTES) end
  return table.concat(t)
end

local function pattern(r, depth)
  local t = {}
  if r(6) == 1 then t[#t + 1] = "^" end
  for _ = 1, r(5) do
    local k = r(20)
    if k <= 12 then
      t[#t + 1] = pick(r, ATOMS) .. pick(r, QUANTS)
    elseif k <= 15 then
      t[#t + 1] = pick(r, SPECIALS)
    elseif k <= 18 and depth < 3 then
      t[#t + 1] = "(" .. pattern(r, depth + 1) .. ")"
    else
      t[#t + 1] = pick(r, RAW)
    end
  end
  if r(6) == 1 then t[#t + 1] = "$" end
  return table.concat(t)
end

local REPLS = { "<%0>", "%1", "%2-%1", "%%", "x%", "%x", "", "[%1%1]", 7 }
local REPL_TABLE = { a = "A", b = false, ["1"] = 1, [1] = "one", [3] = 3.5, ab = {} }
local function repl_fn(...)
  local n, first = select("#", ...), ...
  if first == "b" then return false end
  if first == "c" then return {} end
  return n .. ":" .. tostring(first)
end
local INITS = { nil, 1, 2, 0, -1, -3, 5, 100, -100 }

-- One random case: {op, subject, pattern, extra...}.
local function random_case(r)
  local op = pick(r, { "find", "find", "match", "match", "gmatch", "gsub", "gsub", "findplain" })
  local s, p = subject(r), pattern(r, 0)
  if op == "gsub" then
    local which = r(4)
    local repl = which == 1 and REPL_TABLE or which == 2 and repl_fn or pick(r, REPLS)
    return { op, s, p, repl, r(3) == 1 and r(4) - 2 or nil }
  elseif op == "findplain" then
    return { "find", s, r(2) == 1 and subject(r) or p, INITS[r(#INITS)], true }
  end
  return { op, s, p, INITS[r(#INITS)] }
end

-- Fixed cases: documented features, limits and every malformed-pattern message.
local CORPUS = {
  { "find", "hello world", "o w" }, { "find", "hello", "l+" }, { "find", "hello", "" },
  { "find", "hello", "", 10 }, { "find", "hello", "", 6 }, { "find", "a.b", ".", 1, true },
  { "match", "key = value", "(%w+)%s*=%s*(%w+)" }, { "match", "hello", "()ll()" },
  { "match", "  trim  ", "^%s*(.-)%s*$" }, { "match", "THE (quick) fox", "%((%a+)%)" },
  { "match", "f(a(b)c)d", "%b()" }, { "match", "THE (quick) fox", "%f[%a]%a+", 5 },
  { "match", "hello", "(h)(e)(l)(l)(o)" }, { "match", "abcabc", "(abc)%1" },
  { "match", "aaa", "()a*()" }, { "match", "x", "(()" }, { "match", "x", "(x" },
  { "match", "date: 2024-01-02", "(%d+)-(%d+)-(%d+)" }, { "match", "a\0b", "%z" },
  { "match", "a\0b", "a%zb" }, { "match", "abc", "%f[^\0]a" }, { "match", "abc", "c%f[%z]" },
  { "match", "a\0b", "[\0]" }, { "match", "\0", "%c" },
  { "match", "abc", "$" }, { "match", "a$c", "a$c" }, { "match", "a^c", "a^c" },
  { "match", "ab", "^(a)%1?b" }, { "match", "aa", "()%1" }, { "match", "]", "[]]" },
  { "match", "x", "[^]]" }, { "match", "-", "[a-]" }, { "match", "%", "[%%]" },
  { "find", "a", "%" }, { "find", "a", "[a" }, { "find", "a", "[]" }, { "find", "a", "[^]" },
  { "find", "a", "%f" }, { "find", "a", "%fa" }, { "find", "a", "%b" }, { "find", "a", "%ba" },
  { "find", "a", "%1" }, { "find", "a", "%0" }, { "find", "a", "(a)%2" },
  { "find", "a", "(a%1)" }, { "find", "a", ")" }, { "find", "a", "a)" },
  { "find", "a", ("()"):rep(32) }, { "find", "a", ("()"):rep(33) },
  { "find", ("a"):rep(300), ("a?"):rep(199) }, { "find", ("a"):rep(300), ("a?"):rep(200) },
  { "find", ("a"):rep(300), ("a?"):rep(201) }, { "find", ("a"):rep(300), ("(a)"):rep(150) },
  { "gsub", "hello world", "o", "0" }, { "gsub", "hello world", "(o)", "[%1]", 1 },
  { "gsub", "hello", "", "-" }, { "gsub", "abc", "%w", "%0%0" }, { "gsub", "abc", "b", "%2" },
  { "gsub", "abc", "b", "%" }, { "gsub", "abc", "(b)", "%2" }, { "gsub", "abc", "b", true },
  { "gsub", "abc", "b", {} }, { "gsub", "abc", "()", "%1" }, { "gsub", "abc", "^a", "X" },
  { "gsub", "abc", "^", "X" }, { "gsub", "abc", "$", "X" }, { "gsub", "abc", ".", "x", 0 },
  { "gsub", "abc", ".", "x", -1 }, { "gsub", "abc", "x*", "-" }, { "gsub", "abc", "b", "x", "y" },
  { "gsub", "a,b,,c", "[^,]*", "<%0>" }, { "gsub", "$name and $x", "%$(%w+)", REPL_TABLE },
  { "gsub", "abc", "%w", repl_fn }, { "gsub", "abc", "(%w)()", repl_fn },
  { "gmatch", "one two  three", "%a+" }, { "gmatch", "k=v, a=b", "(%w+)=(%w+)" },
  { "gmatch", "abc", "" }, { "gmatch", "^a^a", "^a" }, { "gmatch", "hello world", "%a+", 3 },
  { "gmatch", "hello", ".", -2 }, { "gmatch", "hello", ".", 10 }, { "gmatch", "abc", "()" },
  { "gmatch", "a", "a", "x" },
  { "find", {}, "a" }, { "find", "a", nil }, { "find", "a", "a", "x" }, { "find", 123, 2 },
  { "match", 1.5, "%." }, { "gsub", 12, 2, 3 },
}

-- {===== running them =====}

-- The stock functions: the sandbox's wrappers keep them as their first upvalue.
local STOCK = {}
for _, name in ipairs({ "find", "match", "gmatch", "gsub" }) do
  local _, f = debug.getupvalue(string[name], 1)
  assert(type(f) == "function" and f ~= string[name], "no stock string." .. name)
  STOCK[name] = f
end

-- A string as printable ASCII (bytes outside it as \ddd).
local function escape(s)
  local out = {}
  for i = 1, #s do
    local b = s:byte(i)
    out[i] = (b >= 32 and b < 127 and b ~= 92) and string.char(b) or string.format("\\%03d", b)
  end
  return table.concat(out)
end

-- A value as text that keeps its type ("s:..." / "n:..." / "nil").
local function show(v)
  local t = type(v)
  if t == "string" then return 's:"' .. escape(v) .. '"' end
  if t == "number" then return (math.type(v) or "n") .. ":" .. tostring(v) end
  return t .. ":" .. tostring(v)
end

local function show_all(...)
  local out = {}
  for i = 1, select("#", ...) do out[i] = show((select(i, ...))) end
  return table.concat(out, ",")
end

local function iterate(it)
  local out = {}
  for _ = 1, 50 do
    local got = table.pack(it())
    if got[1] == nil then break end
    out[#out + 1] = "{" .. show_all(table.unpack(got, 1, got.n)) .. "}"
  end
  return table.concat(out)
end

-- Call F[op] from Lua (not a tail call), as code would: errors the matcher raises name this line.
local function call(F, c)
  local res = table.pack(F[c[1]](table.unpack(c, 2, 5)))
  if c[1] == "gmatch" then return iterate(res[1]) end
  return show_all(table.unpack(res, 1, res.n))
end

-- The observable result of one case with the functions of F (values, or the error) as text.
local function run_case(c, F)
  local ok, res = pcall(call, F, c)
  return show(ok) .. " " .. show(res)
end

-- More or other random cases for a longer hunt: DX_PATTERN_CASES=100000 DX_PATTERN_SEED=7.
local RANDOM_CASES = tonumber(os.getenv("DX_PATTERN_CASES")) or 4000
local SEED = tonumber(os.getenv("DX_PATTERN_SEED")) or 20240601

local function all_cases(n)
  local cases, r = {}, rng(SEED)
  for i = 1, #CORPUS do cases[i] = CORPUS[i] end
  for _ = 1, n do cases[#cases + 1] = random_case(r) end
  return cases
end

local function describe_case(c)
  local parts = {}
  for i = 1, 5 do parts[i] = show(c[i]) end
  return table.concat(parts, " ")
end

describe("pattern matching in orchestrations", function()
  local env
  before_each(function()
    duroxide.configure({ turn_instruction_budget = 1000000000 })
    env = H.env({ turn_instruction_budget = 1000000000 })
  end)
  after_each(function()
    env:close()
    duroxide.configure({ turn_instruction_budget = 50000000 })
  end)

  -- Run the cases outside, then inside an orchestration that reports the cases whose result
  -- differs (the expected results reach it as an upvalue, so the output stays small).
  local function differential(cases)
    local expected = {}
    for i, c in ipairs(cases) do expected[i] = run_case(c, STOCK) end
    local orch = env:orchestration("PatternDiff", function()
      local diffs = {}
      for i, c in ipairs(cases) do
        local got = run_case(c, string)
        if got ~= expected[i] and #diffs < 10 then
          diffs[#diffs + 1] = describe_case(c) .. "\n  stock: " .. expected[i]
            .. "\n  ours:  " .. got
        end
      end
      return { n = #cases, diffs = table.concat(diffs, "\n") }
    end)
    local st = env:run(orch, nil, 120000)
    assert.are.equal("Completed", st.status, st.error and st.error.message)
    assert.are.equal(#cases, st.output.n)
    assert.are.equal("", st.output.diffs)
  end

  it("gives the stock results for a fixed corpus (features, limits, malformed patterns)", function()
    differential(CORPUS)
  end)

  it("gives the stock results for " .. RANDOM_CASES .. " random (subject, pattern) cases", function()
    differential(all_cases(RANDOM_CASES))
  end)

  it("really runs its own matcher inside orchestrations (the budget counts its steps)", function()
    -- a match that the count hook alone would charge a handful of instructions for
    env:close()
    env = H.env({ turn_instruction_budget = 100000 })
    local orch = env:orchestration("PatternSteps", function()
      return (("a"):rep(20):match(("a?"):rep(20) .. ("a"):rep(20)))
    end)
    local st = env:run(orch, nil, 120000)
    assert.are.equal("Failed", st.status)
    assert.are.equal("BudgetExceeded", st.error.kind)
  end)

  it("calls the stock functions outside orchestrations, with the same results and errors", function()
    for _, c in ipairs(all_cases(1000)) do
      assert.are.equal(run_case(c, STOCK), run_case(c, string), describe_case(c))
    end
    -- an error of the stock function names the caller's line; a callback's error is untouched
    local ok, err = pcall(function()
      local r = ("a"):find("%")
      return r
    end)
    assert.is_false(ok)
    assert.matches("^spec/pattern_spec%.lua:%d+: malformed pattern %(ends with '%%'%)$", err)
    ok, err = pcall(function()
      local r = ("a"):gsub(".", function() error("boom") end)
      return r
    end)
    assert.is_false(ok)
    assert.matches("^spec/pattern_spec%.lua:%d+: boom$", err)
  end)

  it("leaves no way to the stock functions from orchestration code", function()
    local orch = env:orchestration("PatternReach", function()
      local seen = {}
      for k, v in pairs(string) do
        if k == "find" then seen.pairs = rawequal(v, string.find) end
      end
      local idx = getmetatable("").__index
      seen.meta = rawequal(idx.find, nil) or rawequal(idx.find, string.find)
      seen.method = rawequal(("").find, string.find)
      seen.upvalue = not pcall(debug.getupvalue, string.find, 1)
      return seen
    end)
    local st = env:run(orch, nil, 120000)
    assert.are.equal("Completed", st.status, st.error and st.error.message)
    assert.are.same({ pairs = true, meta = true, method = true, upvalue = true }, st.output)
  end)

  it("keeps the stock functions for activities", function()
    env:close()
    env = H.env({ turn_instruction_budget = 100000 })
    local act = env:activity("PatternAct", function()
      return (("a"):rep(20):match(("a?"):rep(20) .. ("a"):rep(20)))
    end)
    local orch = env:orchestration("PatternActOrch", function(ctx)
      return ctx:schedule_activity(act):await()
    end)
    local st = env:run(orch, nil, 120000)
    assert.are.equal("Completed", st.status, st.error and st.error.message)
    assert.are.equal(("a"):rep(20), st.output)
  end)

  it("charges a gmatch iterator used across turns to the turn that calls it", function()
    local orch = env:orchestration("PatternIter", function(ctx)
      local it, out = ("a1b22c333"):gmatch("%a(%d+)"), {}
      out[1] = it()
      ctx:schedule_timer(1):await()
      out[2] = it()
      out[3] = it()
      out[4] = it() or "end"
      return out
    end)
    local st = env:run(orch, nil, 120000)
    assert.are.equal("Completed", st.status, st.error and st.error.message)
    assert.are.same({ "1", "22", "333", "end" }, st.output)
  end)
end)
