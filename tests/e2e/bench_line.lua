-- tests/e2e/bench_line.lua CHECK...: reads what bench/run printed on stdin; it must be exactly
-- one line holding one JSON object (parsed strictly by jansson). Each CHECK is KEY:TYPE (number,
-- string, boolean, object, number|null; decimal2 = a number printed with exactly two decimals,
-- as the latency fields are) or KEY=VALUE (the value's JSON text, e.g. steps=20, cache="off").
-- Prints "ok", or one line per problem and exits 1.
local duroxide = require("duroxide")
local text = io.read("a")
local lines = {}
for l in text:gmatch("[^\n]+") do lines[#lines + 1] = l end
if #lines ~= 1 then
  print("expected one line, got " .. #lines .. ": " .. text:sub(1, 500))
  os.exit(1)
end
local ok, rec = pcall(duroxide.json_decode, lines[1])
if not ok or type(rec) ~= "table" then
  print("not one JSON object: " .. tostring(rec) .. ": " .. lines[1])
  os.exit(1)
end
local function type_of(v)
  if v == nil or v == duroxide.null then return "null" end
  if type(v) == "table" then return "object" end
  return type(v)
end
local bad = 0
for _, check in ipairs(arg) do
  local key, want = check:match("^([%w_]+):(.+)$")
  local problem
  if key and want == "decimal2" then
    local txt = lines[1]:match('"' .. key .. '":([^,}]*)')
    if not (txt and txt:match("^%-?%d+%.%d%d$")) then
      problem = string.format("%s is printed as %s, expected a number with two decimals", key,
                              tostring(txt))
    end
  elseif key then
    local t = type_of(rec[key])
    local allowed = false
    for alt in want:gmatch("[^|]+") do if alt == t then allowed = true end end
    if not allowed then problem = string.format("%s is %s, expected %s", key, t, want) end
  else
    local k, v = check:match("^([%w_]+)=(.+)$")
    assert(k, "bad check " .. check)
    local expect = duroxide.json_decode(v)
    if rec[k] ~= expect then
      problem = string.format("%s is %s, expected %s", k, tostring(rec[k]), v)
    end
  end
  if problem then
    bad = bad + 1
    print(problem)
  end
end
if bad > 0 then print("line: " .. lines[1]); os.exit(1) end
print("ok")
