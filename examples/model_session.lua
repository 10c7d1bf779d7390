-- examples/model_session.lua: model serving on an activity session. Loading a model is slow
-- (simulated with a timer), so it is loaded once per worker per session and kept in the
-- worker's memory: the session handler's open loads it when a worker claims the session, every
-- classification of the batch runs on the session (so on the same worker) and gets the model
-- as actx.session_state, and close frees it when the worker releases the session (the
-- orchestration closes it at the end).
--
--   duroxide-lua examples/model_session.lua & duroxide-lua start ClassifyBatch '{"texts":["great product","awful service","it is ok","love it"]}' --id batch-1 --wait 30s; kill $!
--
-- Prints {"output":{"labels":["positive","negative","neutral","positive"],"loads":1,...},...}:
-- four classifications, one model load. If the session moves to another worker (the owner
-- crashed, shut down or idled out), the new owner opens the session again, loads the model
-- again and "loads" grows. Input: texts (strings to classify). $MODEL_LOAD_MS sets the
-- simulated load time (default 500).
local duroxide = require("duroxide")

local LOAD_MS = tonumber(os.getenv("MODEL_LOAD_MS")) or 500
local stats = { loads = 0, frees = 0, claims = 0, releases = 0 } -- per process, for the curious

local WORDS = {
  positive = { "great", "good", "love", "excellent", "nice" },
  negative = { "awful", "bad", "hate", "terrible", "poor" },
}

local function classify(model, text)
  local score = 0
  for word in text:lower():gmatch("%a+") do
    for _, w in ipairs(model.words.positive) do if word == w then score = score + 1 end end
    for _, w in ipairs(model.words.negative) do if word == w then score = score - 1 end end
  end
  return score > 0 and "positive" or score < 0 and "negative" or "neutral"
end

-- The session's state on this worker: open runs once per claim, before the session's first
-- activity here, inside that activity (so it may wait: read weights, warm caches); close runs
-- on every release (closed, idle, shutdown, lost, ...).
duroxide.session_handler({
  open = function(session_id, how)
    duroxide.wait(function(done) -- the expensive part, without blocking the worker
      local t = require("luv").new_timer()
      t:start(LOAD_MS, 0, function() t:close(); done() end)
    end)
    stats.loads = stats.loads + 1
    return { model = { id = stats.loads, words = WORDS }, fresh = true }
  end,
  close = function(session_id, state, reason)
    state.model = nil
    stats.frees = stats.frees + 1
  end,
})

-- The claim and release hooks still fire for apps that want them (metrics, logs).
duroxide.on_session_claimed(function(session_id, how, worker_id)
  stats.claims = stats.claims + 1
end)
duroxide.on_session_released(function(session_id, reason, worker_id)
  stats.releases = stats.releases + 1
end)

duroxide.activity("Classify", function(actx, req)
  local state = actx.session_state
  local loaded = state.fresh -- the first classification since this worker loaded the model
  state.fresh = false
  return { label = classify(state.model, req.text), loaded = loaded, worker = actx.worker_id }
end)

duroxide.orchestration("ClassifyBatch", function(ctx, input)
  input = input or {}
  local texts = input.texts or { "great product", "awful service", "it is ok" }
  local session = input.session or ("model-" .. ctx.instance_id)
  local labels, workers, loads = {}, {}, 0
  for i, text in ipairs(texts) do
    local out = assert(ctx:schedule_activity_on_session("Classify", { text = text }, session)
      :await())
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
