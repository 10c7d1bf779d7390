-- tools/tap_count.lua MESON_TESTLOG.json [BUSTED_TAP.txt]: count TAP results.
-- Prints "<passed> <failed>"; a failing TODO check counts as neither. A meson test that
-- printed no TAP line counts as one failure when it did not pass (it crashed or failed to
-- start), as one pass otherwise.
local json = require("dkjson")
local passed, failed = 0, 0
local function count_tap(text)
  local p, f = 0, 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    -- "not ok ... # TODO": a known, reported gap (tests/e2e/lib.sh `todo`), not a failure.
    if line:match("^not ok %d+[^#]*#%s*TODO") then -- counted neither way
    elseif line:match("^not ok %d+") then f = f + 1
    elseif line:match("^ok %d+") then p = p + 1 end
  end
  return p, f
end
local log = io.open(arg[1], "r")
if log then
  for line in log:lines() do
    local t = json.decode(line)
    if t and t.name then
      local p, f = count_tap(t.stdout or "")
      if p + f == 0 then
        if t.result == "OK" or t.result == "SKIP" then p = 1 else f = 1 end
      elseif t.result ~= "OK" and f == 0 then
        f = 1 -- TAP said ok but the test as a whole failed (exit status, timeout)
      end
      passed, failed = passed + p, failed + f
    end
  end
  log:close()
end
if arg[2] then
  local b = io.open(arg[2], "r")
  if b then
    local p, f = count_tap(b:read("a"))
    b:close()
    if p + f == 0 then f = 1 end -- busted did not run
    passed, failed = passed + p, failed + f
  else
    failed = failed + 1
  end
end
print(passed .. " " .. failed)
