-- tests/e2e/apps/store_full.lua: an activity that finishes only when told to (a flag file), so
-- tests/e2e_store.sh can fill the store while it runs and see how its result is refused.
local duroxide = require("duroxide")

-- input = { flag = path }: writes flag..".started", waits for flag, returns 200 KB.
duroxide.activity("WaitFlag", function(actx, input)
  assert(io.open(input.flag .. ".started", "w")):close()
  while true do
    local f = io.open(input.flag)
    if f then f:close() break end
    actx:sleep(50)
  end
  return string.rep("y", 200 * 1024)
end)

duroxide.orchestration("FlagThenDone", function(ctx, input)
  ctx:schedule_activity("WaitFlag", input):await()
  return "done"
end)
