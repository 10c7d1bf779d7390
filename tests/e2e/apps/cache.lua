-- tests/e2e/apps/cache.lua: the app of tests/e2e_cache.sh (the orchestration cache across
-- real processes).
local duroxide = require("duroxide")

duroxide.activity("Step", function(actx, input)
  if input.ms then actx:sleep(input.ms) end
  return input.v + 1
end)

-- Three events, each answered by an activity: every turn depends on the ones before it.
duroxide.orchestration("Steps", function(ctx)
  local got = {}
  for k = 1, 3 do
    local ev = ctx:schedule_wait("go"):await()
    got[k] = assert(ctx:schedule_activity("Step", { v = ev }):await())
    ctx:set_custom_status({ step = k })
  end
  return got
end)

-- A chain of input.steps activities of input.ms each (crash with the cache on).
duroxide.orchestration("Chain", function(ctx, input)
  local v = 0
  for _ = 1, input.steps do v = assert(ctx:schedule_activity("Step", { v = v, ms = input.ms }):await()) end
  return v
end)
