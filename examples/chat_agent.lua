-- examples/chat_agent.lua: a long-lived chat whose turns run on an activity session.
--
-- Each conversation keeps a live "agent" in the worker's memory: its message list and a child
-- process (here `cat`, standing in for a model server), started with luv by the session
-- handler's open and stopped by its close. Every turn of the conversation runs on the
-- session's owner, so the agent is reused. Each turn returns a checkpoint; if the session
-- moves to another worker (crash, shutdown, idle unpin), the new owner opens a fresh agent and
-- the turn rebuilds it from that checkpoint. Before a long wait, the orchestration closes the
-- session so the worker frees the agent instead of holding it for hours.
--
--   duroxide-lua examples/chat_agent.lua &
--   duroxide-lua start ChatAgent '{"idle_ms":60000}' --id chat-1
--   duroxide-lua raise chat-1 message '"hello"'
--   duroxide-lua status chat-1          # custom_status.last_reply == "echo: hello"
--   duroxide-lua raise chat-1 message '"bye"'
--
-- Send the next message after the previous reply shows up in the custom status: a message
-- raised while no wait is open is not kept (events are positional).
local duroxide = require("duroxide")
local uv = require("luv")

-- The live agent of a session on this worker is the session handler's state: open starts its
-- process when the worker claims the session (before the session's first turn here), every
-- turn gets it as actx.session_state, and close stops the process on every release (idle,
-- closed, shutdown, lost, ...).
duroxide.session_handler({
  open = function(session_id, how)
    local stdin, stdout = uv.new_pipe(false), uv.new_pipe(false)
    local agent = { messages = {}, stdin = stdin, stdout = stdout }
    agent.handle, agent.pid = uv.spawn("cat", { stdio = { stdin, stdout, nil } }, function()
      agent.exited = true
    end)
    assert(agent.handle, "cannot start the agent process")
    stdout:read_start(function(err, data)
      local reply = agent.pending
      if reply and data then
        agent.pending = nil
        reply(err, data)
      end
    end)
    return agent
  end,
  close = function(session_id, agent, reason)
    agent.stdout:read_stop()
    agent.stdin:close()
    agent.stdout:close()
    if not agent.handle:is_closing() then
      agent.handle:kill("sigterm")
      agent.handle:close()
    end
  end,
})

-- Apps may still watch claims and releases (here: a count, for the curious).
local released = 0
duroxide.on_session_released(function(session_id, reason) released = released + 1 end)

duroxide.activity("ChatTurn", function(actx, req)
  local agent = actx.session_state
  assert(not agent.exited, "the agent process exited")
  local rehydrated = false
  if #agent.messages == 0 and req.checkpoint and #req.checkpoint.messages > 0 then
    -- a fresh agent (new owner, or the session was closed meanwhile): rebuild it from the
    -- checkpoint the orchestration keeps in history
    for _, m in ipairs(req.checkpoint.messages) do agent.messages[#agent.messages + 1] = m end
    rehydrated = true
  end
  agent.messages[#agent.messages + 1] = { role = "user", text = req.message }
  local err, data = duroxide.wait(function(done)
    agent.pending = done
    agent.stdin:write(req.message .. "\n")
  end)
  assert(not err, err)
  local reply = "echo: " .. data:gsub("\n$", "")
  agent.messages[#agent.messages + 1] = { role = "assistant", text = reply }
  return {
    reply = reply,
    checkpoint = { messages = agent.messages },
    worker = actx.worker_id,
    pid = agent.pid,
    rehydrated = rehydrated,
  }
end)

duroxide.orchestration("ChatAgent", function(ctx, input)
  input = input or {}
  local session = input.session or ("chat-" .. ctx.instance_id)
  local checkpoint = input.checkpoint
  local turns = input.turns or 0
  local idle_ms = input.idle_ms or 60000
  while true do
    local i, msg = ctx:select({ ctx:schedule_wait("message"), ctx:schedule_timer(idle_ms) })
    if i == 2 then
      -- Quiet for a while: free the live agent before a long wait. The checkpoint in
      -- history is enough to rebuild it on whichever worker takes the next turn.
      ctx:close_session(session)
      local j, m = ctx:select({ ctx:schedule_wait("message"),
                                ctx:schedule_timer(24 * 3600 * 1000) })
      if j == 2 then return { turns = turns, ended = "idle" } end
      msg = m
    end
    if msg == "bye" then
      ctx:close_session(session)
      return { turns = turns, ended = "bye", checkpoint = checkpoint }
    end
    local out = assert(ctx:schedule_activity_on_session("ChatTurn",
      { message = msg, checkpoint = checkpoint }, session):await())
    checkpoint = out.checkpoint
    turns = turns + 1
    ctx:set_custom_status({ last_reply = out.reply, turns = turns, worker = out.worker,
                            rehydrated = out.rehydrated })
    if turns % 20 == 0 then
      -- Keep history short; the session id and checkpoint carry over.
      ctx:continue_as_new({ session = session, checkpoint = checkpoint, turns = turns,
                            idle_ms = idle_ms })
    end
  end
end)
