-- examples/embed_app.lua: the Lua half of examples/embed.c.
-- "WordStats" fans out one "Checksum" per word: Checksum is a C activity that the host
-- program registers with dx_register_activity (it runs on the libuv thread pool). "Summary"
-- is an ordinary Lua activity.
local duroxide = require("duroxide")

duroxide.activity("Summary", function(actx, r)
  return string.format("%d words, checksum total %d", r.words, r.total)
end)

duroxide.orchestration("WordStats", function(ctx, words)
  local futures = {}
  for i, w in ipairs(words) do
    futures[i] = ctx:schedule_activity("Checksum", w)
  end
  local sums, errs = ctx:join(futures)
  if errs then
    for i = 1, #futures do
      if errs[i] then error("Checksum failed: " .. errs[i].message, 0) end
    end
  end
  local total = 0
  for i = 1, #futures do total = total + sums[i] end
  local summary = assert(ctx:schedule_activity("Summary", { words = #words, total = total }):await())
  return { sums = sums, summary = summary }
end)
