-- examples/model_session.lua: model serving on an activity session. Loading a model is slow
-- (simulated with actx:sleep), so it is loaded once per worker per session and kept in the
-- worker's memory. Every classification of the batch runs on the session, so on the same
-- worker, and reuses the loaded model. The orchestration closes the session at the end; the
-- owner's on_session_released hook then frees the model.
--
--   duroxide-lua examples/model_session.lua & duroxide-lua start ClassifyBatch '{"texts":["great product","awful service","it is ok","love it"]}' --id batch-1 --wait 30s; kill $!
--
-- Prints {"output":{"labels":["positive","negative","neutral","positive"],"loads":1,...},...}:
-- four classifications, one model load. If the session moves to another worker (the owner
-- crashed, shut down or idled out), the new owner loads the model again and "loads" grows.
-- Input: texts (strings to classify), load_ms (simulated load time, default 500).
local duroxide = require("duroxide")

-- Per-process memory: session id -> { worker = owner's worker id, model = ... }. The worker
-- id is kept so that a table shared by several workers (the test harness runs simulated
-- workers in one process) never hands one worker's model to another.
local models = {}
local stats = { loads = 0, frees = 0 } -- per process, for the curious

local WORDS = {
  positive = { "great", "good", "love", "excellent", "nice" },
  negative = { "awful", "bad", "hate", "terrible", "poor" },
}

local function load_model(actx, load_ms)
  actx:sleep(load_ms) -- the expensive part: reading weights, warming caches
  stats.loads = stats.loads + 1
  return { id = stats.loads, words = WORDS }
end

local function classify(model, text)
  local score = 0
  for word in text:lower():gmatch("%a+") do
    for _, w in ipairs(model.words.positive) do if word == w then score = score + 1 end end
    for _, w in ipairs(model.words.negative) do if word == w then score = score - 1 end end
  end
  return score > 0 and "positive" or score < 0 and "negative" or "neutral"
end

-- A claim means this worker did not own the session a moment ago: whatever is kept for it
-- is stale (a restarted worker taking its sessions back has an empty memory anyway).
duroxide.on_session_claimed(function(session_id, how, worker_id)
  models[session_id] = nil
end)

duroxide.on_session_released(function(session_id, reason, worker_id)
  local entry = models[session_id]
  -- Free it only if this worker loaded it (worker_id is the worker whose session manager
  -- released the session).
  if entry and (worker_id == nil or entry.worker == worker_id) then
    models[session_id] = nil
    stats.frees = stats.frees + 1
  end
end)

duroxide.activity("Classify", function(actx, req)
  local entry = models[actx.session_id]
  local loaded = false
  if not entry or entry.worker ~= actx.worker_id then
    entry = { worker = actx.worker_id, model = load_model(actx, req.load_ms or 500) }
    models[actx.session_id] = entry
    loaded = true
  end
  return { label = classify(entry.model, req.text), loaded = loaded, worker = actx.worker_id }
end)

duroxide.orchestration("ClassifyBatch", function(ctx, input)
  input = input or {}
  local texts = input.texts or { "great product", "awful service", "it is ok" }
  local session = input.session or ("model-" .. ctx.instance_id)
  local labels, workers, loads = {}, {}, 0
  for i, text in ipairs(texts) do
    local out = assert(ctx:schedule_activity_on_session("Classify",
      { text = text, load_ms = input.load_ms }, session):await())
    labels[i] = out.label
    workers[i] = out.worker
    if out.loaded then loads = loads + 1 end
    ctx:set_custom_status({ done = i, of = #texts, loads = loads })
  end
  -- Done with the model: free the worker's memory and its session slot now, instead of
  -- holding them until the session idles out.
  ctx:close_session(session)
  return { labels = duroxide.array(labels), loads = loads, workers = duroxide.array(workers) }
end)
