-- examples/saga.lua: a booking saga. Reserve a flight, a hotel and a car, one after the
-- other. If a step fails, undo the steps that succeeded, in reverse order, and report what
-- happened. The input flag "fail" names a step that fails, to show the compensation.
--
--   duroxide-lua examples/saga.lua & duroxide-lua start BookTrip '{"trip":"lisbon","fail":"car"}' --id trip-1 --wait 30s; kill $!
--
-- Prints {"output":{"compensated":["hotel","flight"],"error":"no car available for lisbon",
-- "failed_step":"car","status":"compensated","trip":"lisbon"},...}. Without "fail" the output
-- is {"confirmations":{"car":...,"flight":...,"hotel":...},"status":"booked","trip":"lisbon"}.
local duroxide = require("duroxide")

local STEPS = { "flight", "hotel", "car" }
local NAMES = { flight = "Flight", hotel = "Hotel", car = "Car" }

-- Reserve<Step> and Cancel<Step> for each step. The confirmation is derived from the instance
-- id, so a reservation delivered twice (a worker crashed after booking) books the same thing:
-- activities run at least once, so make them idempotent.
for _, step in ipairs(STEPS) do
  duroxide.activity("Reserve" .. NAMES[step], function(actx, req)
    if req.fail == step then error("no " .. step .. " available for " .. req.trip, 0) end
    return step .. "-" .. actx.instance_id
  end)
  duroxide.activity("Cancel" .. NAMES[step], function(actx, confirmation)
    actx:trace_info("cancelled " .. confirmation)
    return confirmation
  end)
end

-- Compensations must not give up on a transient failure: retry them with backoff.
local UNDO_RETRY = { max_attempts = 5, backoff = "exponential", initial_ms = 1000 }

duroxide.orchestration("BookTrip", function(ctx, input)
  input = input or {}
  local trip = input.trip or "trip"
  local done, confirmations = {}, {}
  for _, step in ipairs(STEPS) do
    local conf, err = ctx:schedule_activity("Reserve" .. NAMES[step],
                                            { trip = trip, fail = input.fail }):await()
    if err then
      -- Undo what succeeded, newest first.
      local compensated = {}
      for i = #done, 1, -1 do
        local s = done[i]
        assert(ctx:schedule_activity_with_retry("Cancel" .. NAMES[s], confirmations[s],
                                                UNDO_RETRY):await())
        compensated[#compensated + 1] = s
      end
      return { status = "compensated", trip = trip, failed_step = step, error = err.message,
               compensated = duroxide.array(compensated) }
    end
    done[#done + 1] = step
    confirmations[step] = conf
  end
  return { status = "booked", trip = trip, confirmations = confirmations }
end)
