-- tests/e2e/apps/common.lua: the app most e2e scenarios (tests/e2e.sh) run as a worker.
local duroxide = require("duroxide")

-- Append one line to a file (markers show how often an activity ran).
local function append(path, line)
  local f = assert(io.open(path, "a"))
  f:write(line, "\n")
  f:close()
end

-- input = { marker = path, ms = sleep, tag = string, v = integer }
duroxide.activity("Mark", function(actx, input)
  append(input.marker, "start " .. (input.tag or "") .. " " .. actx.worker_id)
  actx:sleep(input.ms or 0)
  append(input.marker, "end " .. (input.tag or "") .. " " .. actx.worker_id)
  return (input.v or 0) + 1
end)

-- One long activity (crash safety, graceful shutdown).
duroxide.orchestration("MarkOnce", function(ctx, input)
  return assert(ctx:schedule_activity("Mark", input):await())
end)

-- A chain of input.steps activities; each adds 1, so the output is input.steps.
duroxide.orchestration("Chain", function(ctx, input)
  local v = 0
  for i = 1, input.steps do
    v = assert(ctx:schedule_activity("Mark", {
      marker = input.marker, ms = input.ms, tag = "step" .. i, v = v,
    }):await())
  end
  return v
end)

-- Which worker ran the activity.
duroxide.activity("WhoAmI", function(actx, input)
  if input and input.ms then actx:sleep(input.ms) end
  return actx.worker_id
end)

duroxide.orchestration("WhoRan", function(ctx, input)
  return assert(ctx:schedule_activity("WhoAmI", input):await())
end)

-- Echo a (large) table through an activity, then wait for an event.
duroxide.activity("Echo", function(actx, input) return input end)

duroxide.orchestration("EchoThenWait", function(ctx, input)
  local echoed = assert(ctx:schedule_activity("Echo", input):await())
  local ev = ctx:schedule_wait("go"):await()
  return { echoed = echoed, ev = ev }
end)

-- Sandbox violations and runaway code.
duroxide.orchestration("UsesOsTime", function(ctx) return os.time() end)
duroxide.orchestration("UsesMathRandom", function(ctx) return math.random() end)
duroxide.orchestration("Spin", function(ctx) while true do end end)
duroxide.orchestration("Quick", function(ctx, input) return input end)

-- Payload limits inside the engine.
duroxide.orchestration("BigActivityInput", function(ctx)
  return assert(ctx:schedule_activity("Echo", string.rep("x", 300 * 1024)):await())
end)
duroxide.activity("BigOutput", function(actx) return string.rep("y", 300 * 1024) end)
duroxide.orchestration("BigActivityOutput", function(ctx)
  return assert(ctx:schedule_activity("BigOutput", nil):await())
end)
