-- tools/tap_count.lua MESON_TESTLOG.json [BUSTED_TAP.txt]: count TAP results.
-- Prints "<passed> <failed> <skipped>"; a failing TODO check counts as none of them. A meson
-- test that printed no TAP line counts as one failure when it did not pass (it crashed or
-- failed to start), as one skip when it skipped (a "1..0 # SKIP" plan), as one pass
-- otherwise. "ok N ... # SKIP" lines count as skipped.
local json = require("dkjson")
local passed, failed, skipped = 0, 0, 0
local function count_tap(text)
  local p, f, s = 0, 0, 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    -- "not ok ... # TODO": a known, reported gap (tests/e2e/lib.sh `todo`), not a failure.
    if line:match("^not ok %d+[^#]*#%s*TODO") then -- counted neither way
    elseif line:match("^not ok %d+") then f = f + 1
    elseif line:match("^ok %d+.*#%s*[Ss][Kk][Ii][Pp]") then s = s + 1
    elseif line:match("^ok %d+") then p = p + 1 end
  end
  return p, f, s
end
local log = io.open(arg[1], "r")
if log then
  for line in log:lines() do
    local t = json.decode(line)
    if t and t.name then
      local p, f, s = count_tap(t.stdout or "")
      if p + f + s == 0 then
        if t.result == "SKIP" then s = 1 elseif t.result == "OK" then p = 1 else f = 1 end
      elseif t.result ~= "OK" and f == 0 then
        f = 1 -- TAP said ok but the test as a whole failed (exit status, timeout)
      end
      passed, failed, skipped = passed + p, failed + f, skipped + s
    end
  end
  log:close()
end
if arg[2] then
  local b = io.open(arg[2], "r")
  if b then
    local text = b:read("a")
    local p, f, s = count_tap(text)
    local plan = tonumber(text:match("\n1%.%.(%d+)") or text:match("^1%.%.(%d+)"))
    b:close()
    if p + f + s == 0 then f = 1 end -- busted did not run
    -- busted prints its plan last: none, or fewer results than planned, means it died midway
    -- (a crash or a sanitizer abort), which is a failure even when every line so far was ok
    if not plan or p + f + s < plan then f = f + 1 end
    passed, failed, skipped = passed + p, failed + f, skipped + s
  else
    failed = failed + 1
  end
end
print(passed .. " " .. failed .. " " .. skipped)
