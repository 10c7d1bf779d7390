-- spec/examples/model_session_spec.lua: examples/model_session.lua (a model loaded once per
-- worker per session by the session handler's open, reloaded after the session moves, freed
-- by close when the session is released).
local duroxide = require("duroxide")
local testing = require("duroxide.testing")

local TEXTS = { "great product", "awful service", "it is ok", "love it", "bad fit", "nice" }
local LABELS = { "positive", "negative", "neutral", "positive", "negative", "positive" }

-- Load the app with its session hooks and handler wrapped, so the spec sees every call (as
-- "claimed", "released", "open", "close"), and with a 1 ms model load ($MODEL_LOAD_MS).
local function env_with_hooks()
  local hooks = {}
  local on_claimed, on_released = duroxide.on_session_claimed, duroxide.on_session_released
  local handler, getenv = duroxide.session_handler, os.getenv
  duroxide.session_handler = function(h)
    handler({
      open = function(sid, how)
        hooks[#hooks + 1] = { "open", sid, how }
        return h.open(sid, how)
      end,
      close = function(sid, state, reason)
        hooks[#hooks + 1] = { "close", sid, reason }
        return h.close(sid, state, reason)
      end,
    })
  end
  os.getenv = function(k) if k == "MODEL_LOAD_MS" then return "1" end return getenv(k) end
  duroxide.on_session_claimed = function(fn)
    on_claimed(function(sid, how, wid)
      hooks[#hooks + 1] = { "claimed", sid, how, wid }
      return fn(sid, how, wid)
    end)
  end
  duroxide.on_session_released = function(fn)
    on_released(function(sid, reason, wid)
      hooks[#hooks + 1] = { "released", sid, reason, wid }
      return fn(sid, reason, wid)
    end)
  end
  local ok, env = pcall(testing.env, { app = "examples/model_session.lua" })
  duroxide.on_session_claimed, duroxide.on_session_released = on_claimed, on_released
  duroxide.session_handler, os.getenv = handler, getenv
  assert(ok, env)
  return env, hooks
end

local function hooks_of(hooks, kind, sid)
  local out = {}
  for _, h in ipairs(hooks) do
    if h[1] == kind and h[2] == sid then out[#out + 1] = { h[3], h[4] } end
  end
  return out
end

-- Classifies texts on session `sid`, but waits for the event "go" after the first `pause`
-- texts, so a spec can crash the session's owner in between.
local function register_paused_batch(env)
  env:register_orchestration("PausedBatch", function(ctx, input)
    local out = {}
    for i, text in ipairs(input.texts) do
      if i == input.pause + 1 then ctx:schedule_wait("go"):await() end
      out[i] = assert(ctx:schedule_activity_on_session("Classify", { text = text },
        input.session):await())
    end
    ctx:close_session(input.session)
    return out
  end)
end

-- run_until_complete returns once the status is final; the session close committed with the
-- final turn is delivered to the owner just after, so let it run before looking at hooks.
local function finish(env, id)
  local st = env:run_until_complete(id)
  env:run_until_idle()
  return st
end

describe("examples/model_session.lua", function()
  local env, hooks
  before_each(function() env, hooks = env_with_hooks() end)
  after_each(function() env:close() end)

  it("loads the model once for many classifications on one worker", function()
    local id = env:start("batch-1", "ClassifyBatch", { texts = TEXTS })
    local st = env:run_until_complete(id)
    assert.are.equal("Completed", st.status)
    assert.are.same(LABELS, st.output.labels)
    assert.are.equal(1, st.output.loads)
    local calls = env:calls("Classify")
    assert.are.equal(#TEXTS, #calls)
    for i, c in ipairs(calls) do
      assert.are.equal("model-batch-1", c.session_id)
      assert.are.equal("w1", c.worker_id)
      assert.are.equal(TEXTS[i], c.input.text)
    end
  end)

  it("frees the model through on_session_released \"closed\" at the end", function()
    local st = finish(env, env:start("batch-2", "ClassifyBatch", { texts = TEXTS }))
    assert.are.equal("Completed", st.status)
    assert.are.same({ { "new", "w1" } }, hooks_of(hooks, "claimed", "model-batch-2"))
    assert.are.same({ { "closed", "w1" } }, hooks_of(hooks, "released", "model-batch-2"))
    assert.are.same({ { "new" } }, hooks_of(hooks, "open", "model-batch-2"))
    assert.are.same({ { "closed" } }, hooks_of(hooks, "close", "model-batch-2"))
    -- the session was released: a new batch on the same session id loads the model again
    local st2 = env:run_until_complete(env:start("batch-3", "ClassifyBatch",
      { texts = { "good" }, session = "model-batch-2" }))
    assert.are.equal(1, st2.output.loads)
  end)

  it("gives each batch its own session and model", function()
    local a = env:start("batch-a", "ClassifyBatch", { texts = { "good", "bad" } })
    local b = env:start("batch-b", "ClassifyBatch", { texts = { "ok", "nice" } })
    local sa, sb = finish(env, a), finish(env, b)
    assert.are.same({ "positive", "negative" }, sa.output.labels)
    assert.are.same({ "neutral", "positive" }, sb.output.labels)
    assert.are.equal(1, sa.output.loads)
    assert.are.equal(1, sb.output.loads)
    assert.are.same({ { "closed", "w1" } }, hooks_of(hooks, "released", "model-batch-a"))
    assert.are.same({ { "closed", "w1" } }, hooks_of(hooks, "released", "model-batch-b"))
  end)

  it("reloads the model on the new owner after the owner crashes", function()
    register_paused_batch(env)
    local id = env:start("batch-crash", "PausedBatch",
                         { texts = TEXTS, pause = 3, session = "s-crash" })
    env:run_until_idle()
    local calls = env:calls("Classify")
    assert.are.equal(3, #calls)
    env:add_worker("w2")
    env:crash_worker("w1")
    env:raise_event(id, "go")
    local st = finish(env, id) -- the clock jumps until w1's lease lapses
    assert.are.equal("Completed", st.status)
    for i, out in ipairs(st.output) do
      assert.are.equal(LABELS[i], out.label)
      assert.are.equal(i <= 3 and "w1" or "w2", out.worker)
      -- one load per owner: the first call on each worker
      assert.are.equal(i == 1 or i == 4, out.loaded)
    end
    -- the crashed worker never ran a hook; the new owner claimed the session and closed it
    assert.are.same({ { "new", "w1" }, { "new", "w2" } }, hooks_of(hooks, "claimed", "s-crash"))
    assert.are.same({ { "closed", "w2" } }, hooks_of(hooks, "released", "s-crash"))
    -- one open per claim; the crashed worker's close never runs (its process is gone)
    assert.are.same({ { "new" }, { "new" } }, hooks_of(hooks, "open", "s-crash"))
    assert.are.same({ { "closed" } }, hooks_of(hooks, "close", "s-crash"))
  end)

  it("reloads the model after the owner restarts with the same worker id", function()
    register_paused_batch(env)
    local id = env:start("batch-restart", "PausedBatch",
                         { texts = TEXTS, pause = 2, session = "s-restart" })
    env:run_until_idle()
    env:crash_worker("w1")
    env:restart_worker("w1")
    env:raise_event(id, "go")
    local st = finish(env, id)
    assert.are.equal("Completed", st.status)
    for i, out in ipairs(st.output) do
      assert.are.equal("w1", out.worker)
      assert.are.equal(i == 1 or i == 3, out.loaded)
    end
    assert.are.same({ { "new", "w1" }, { "reclaim", "w1" } }, hooks_of(hooks, "claimed", "s-restart"))
    assert.are.same({ { "closed", "w1" } }, hooks_of(hooks, "released", "s-restart"))
    assert.are.same({ { "new" }, { "reclaim" } }, hooks_of(hooks, "open", "s-restart"))
  end)

  it("replays its history deterministically", function()
    local id = env:start("batch-replay", "ClassifyBatch", { texts = TEXTS })
    env:run_until_complete(id)
    local ok, err = testing.check_replay(env:history(id), "examples/model_session.lua")
    assert.is_true(ok, err)
  end)
end)
