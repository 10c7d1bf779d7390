-- spec/examples/chat_agent_spec.lua: examples/chat_agent.lua (turns on a session with a live
-- agent process, rehydration after a crash, closing the session before a long idle wait).
local duroxide = require("duroxide")
local testing = require("duroxide.testing")

local MIN = 60 * 1000
local DAY = 24 * 60 * MIN

-- Load the app with its release hook wrapped, so every call is recorded.
local function load_env()
  local released = {}
  local on_released = duroxide.on_session_released
  duroxide.on_session_released = function(fn)
    on_released(function(sid, reason, wid)
      released[#released + 1] = { sid, reason, wid }
      return fn(sid, reason, wid)
    end)
  end
  local ok, env = pcall(testing.env, { app = "examples/chat_agent.lua" })
  duroxide.on_session_released = on_released
  assert(ok, env)
  return env, released
end

local function say(env, id, text)
  env:raise_event(id, "message", text)
  env:run_until_idle()
  return env:status(id).custom_status
end

describe("examples/chat_agent.lua", function()
  local env, released
  before_each(function() env, released = load_env() end)
  after_each(function() env:close() end)

  it("runs each turn on the session owner and reuses its live agent", function()
    local id = env:start("chat-1", "ChatAgent", { idle_ms = MIN })
    env:run_until_idle()
    local cs = say(env, id, "hello")
    assert.are.same({ last_reply = "echo: hello", turns = 1, worker = "w1", rehydrated = false }, cs)
    cs = say(env, id, "how are you")
    assert.are.same({ last_reply = "echo: how are you", turns = 2, worker = "w1",
                      rehydrated = false }, cs)
    local calls = env:calls("ChatTurn")
    assert.are.equal(2, #calls)
    for _, c in ipairs(calls) do
      assert.are.equal("chat-chat-1", c.session_id)
      assert.are.equal("w1", c.worker_id)
    end
    -- the second turn carries the first turn's checkpoint
    assert.is_nil(calls[1].input.checkpoint)
    assert.are.same({ { role = "user", text = "hello" }, { role = "assistant", text = "echo: hello" } },
                    calls[2].input.checkpoint.messages)
    env:raise_event(id, "message", "bye")
    local st = env:run_until_complete(id)
    env:run_until_idle() -- the close committed with the final turn reaches the owner
    assert.are.equal("Completed", st.status)
    assert.are.equal("bye", st.output.ended)
    assert.are.equal(2, st.output.turns)
    assert.are.equal(4, #st.output.checkpoint.messages)
    assert.are.same({ { "chat-chat-1", "closed", "w1" } }, released)
  end)

  it("rebuilds the agent from the checkpoint on another worker after the owner crashes", function()
    local id = env:start("chat-2", "ChatAgent", { idle_ms = 60 * MIN })
    env:run_until_idle()
    assert.are.equal("w1", say(env, id, "one").worker)
    env:add_worker("w2")
    env:crash_worker("w1")
    -- The harness's workers share one Lua state, so w1's agent is still in memory; the session
    -- handler keeps state per worker, so w2's claim opens a fresh agent, as in production.
    released = {}
    env:raise_event(id, "message", "two")
    env:run_until_idle() -- w1 is dead and its peers know at once (liveness): w2 claims
    local cs = env:status(id).custom_status
    assert.are.same({ last_reply = "echo: two", turns = 2, worker = "w2", rehydrated = true }, cs)
    local calls = env:calls("ChatTurn")
    assert.are.equal(2, #calls)
    assert.are.equal("w2", calls[2].worker_id)
    assert.are.equal(2, #calls[2].input.checkpoint.messages)
    -- the crashed worker runs no hook; the new owner keeps the session
    assert.are.same({}, released)
  end)

  it("closes the session before the long idle wait, and ends after a day of silence", function()
    -- idle_ms (1 min) is shorter than the session idle timeout (5 min): the orchestration
    -- closes the session itself before the worker would unpin it.
    local id = env:start("chat-3", "ChatAgent", { idle_ms = MIN })
    env:run_until_idle()
    say(env, id, "hi")
    env:advance(MIN // 2)
    assert.are.same({}, released) -- not quiet for long enough yet
    env:advance(MIN)              -- the idle timer has fired: the session is closed
    assert.are.same({ { "chat-chat-3", "closed", "w1" } }, released)
    assert.are.equal("Running", env:status(id).status)
    -- a message during the long wait opens the session again and rebuilds the agent
    local cs = say(env, id, "back")
    assert.are.same({ last_reply = "echo: back", turns = 2, worker = "w1", rehydrated = true }, cs)
    -- then a day of silence: the session is closed again, and the chat ends
    env:advance(MIN + DAY)
    local st = env:status(id)
    assert.are.equal("Completed", st.status)
    assert.are.same({ turns = 2, ended = "idle" }, st.output)
    assert.are.same({ { "chat-chat-3", "closed", "w1" }, { "chat-chat-3", "closed", "w1" } },
                    released)
  end)

  it("continues as new every 20 turns, keeping the session and the checkpoint", function()
    local id = env:start("chat-4", "ChatAgent", { idle_ms = MIN })
    env:run_until_idle()
    for i = 1, 21 do say(env, id, "m" .. i) end
    local st = env:status(id)
    assert.are.equal(2, st.execution_id)
    assert.are.same({ last_reply = "echo: m21", turns = 21, worker = "w1", rehydrated = false },
                    st.custom_status)
    local calls = env:calls("ChatTurn")
    assert.are.equal(40, #calls[21].input.checkpoint.messages)
    assert.are.equal("chat-chat-4", calls[21].session_id)
  end)

  it("replays its history deterministically", function()
    local id = env:start("chat-5", "ChatAgent", { idle_ms = MIN })
    env:run_until_idle()
    say(env, id, "hello")
    env:raise_event(id, "message", "bye")
    env:run_until_complete(id)
    local ok, err = testing.check_replay(env:history(id), "examples/chat_agent.lua")
    assert.is_true(ok, err)
  end)
end)
