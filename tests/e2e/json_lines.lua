-- tests/e2e/json_lines.lua LOG: check a --log-format json log. Every line must be exactly one
-- JSON object (parsed strictly by jansson: valid UTF-8, nothing after the object) with ts,
-- level, msg and a worker_id string. Then prints, one per line, "msg<TAB>key" for each string
-- field that holds the hostile marker "FORGED" together with a real newline and a quote
-- (control characters of msg shown as '?'), so the shell test can check where hostile text
-- arrived intact.
local duroxide = require("duroxide")
local n, bad = 0, 0
for line in io.lines(arg[1]) do
  n = n + 1
  local ok, rec = pcall(duroxide.json_decode, line)
  if not ok or type(rec) ~= "table" then
    bad = bad + 1
    io.stderr:write("line " .. n .. " is not one JSON object: " .. tostring(rec) .. "\n")
  elseif type(rec.ts) ~= "string" or type(rec.level) ~= "string" or type(rec.msg) ~= "string"
      or type(rec.worker_id) ~= "string" then
    bad = bad + 1
    io.stderr:write("line " .. n .. " lacks ts, level, msg or worker_id: " .. line .. "\n")
  else
    for k, v in pairs(rec) do
      if type(v) == "string" and v:find("FORGED", 1, true) and v:find("\n", 1, true)
          and v:find('"', 1, true) then
        print((rec.msg:gsub("%c", "?")) .. "\t" .. k) -- one output line per field
      end
    end
  end
end
print("lines " .. n .. " bad " .. bad)
