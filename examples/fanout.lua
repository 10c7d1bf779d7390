-- examples/fanout.lua: fan-out/fan-in. Schedule one activity per item, wait for all of them
-- with ctx:join, and aggregate what succeeded. Failed items are reported, not fatal: join
-- returns a second array holding the error of each failed position.
--
--   duroxide-lua examples/fanout.lua & duroxide-lua start FanOut '{"items":[1,2,3,4,5,6,7,8],"fail":[3,7]}' --id fanout-1 --wait 30s; kill $!
--
-- Prints {"output":{"failed":[{"error":"item 3 failed",...},...],"ok":6,"results":[...],"total":...},...}.
-- Input: items (an array of numbers; default 1..10), fail (items whose activity raises).
local duroxide = require("duroxide")

-- One unit of work. Raising fails just this activity; the orchestration sees the error.
duroxide.activity("Square", function(actx, req)
  if req.fail then error("item " .. req.value .. " failed", 0) end
  return req.value * req.value
end)

duroxide.orchestration("FanOut", function(ctx, input)
  input = input or {}
  local items = input.items
  if not items then
    items = {}
    for i = 1, 10 do items[i] = i end
  end
  local failing = {}
  for _, v in ipairs(input.fail or {}) do failing[v] = true end

  -- Fan out: every schedule_activity call is recorded now; all run in parallel.
  local futures = {}
  for i, v in ipairs(items) do
    futures[i] = ctx:schedule_activity("Square", { value = v, fail = failing[v] or nil })
  end

  -- Fan in: values[i] / errors[i] belong to futures[i]. Both may have holes, so loop over
  -- #futures, never ipairs(values).
  local values, errors = ctx:join(futures)
  local results, failed, total = {}, {}, 0
  for i = 1, #futures do
    if errors and errors[i] then
      failed[#failed + 1] = { item = items[i], error = errors[i].message }
      results[i] = duroxide.null -- a table with holes cannot be encoded
    else
      results[i] = values[i]
      total = total + values[i]
    end
  end
  return {
    results = duroxide.array(results),
    total = total,
    ok = #futures - #failed,
    failed = duroxide.array(failed),
  }
end)
