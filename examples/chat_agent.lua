-- examples/chat_agent.lua: a long-lived chat whose turns run on an activity session.
--
-- Each conversation keeps a live "agent" in the worker's memory: its message list and a child
-- process (here `cat`, standing in for a model server), started with luv. Every turn of the
-- conversation runs on the session's owner, so the agent is reused. Each turn returns a
-- checkpoint; if the session moves to another worker (crash, shutdown, idle unpin), the new
-- owner rebuilds the agent from that checkpoint. Before a long wait, the orchestration closes
-- the session so the worker frees the agent instead of holding it for hours.
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

local agents = {} -- session id -> live agent (this process only)

local function stop_agent(session_id)
  local agent = agents[session_id]
  if not agent then return end
  agents[session_id] = nil
  agent.stdout:read_stop()
  agent.stdin:close()
  agent.stdout:close()
  if not agent.handle:is_closing() then
    agent.handle:kill("sigterm")
    agent.handle:close()
  end
end

local function start_agent(session_id, checkpoint)
  local stdin, stdout = uv.new_pipe(false), uv.new_pipe(false)
  local agent = { messages = {}, stdin = stdin, stdout = stdout }
  agent.handle, agent.pid = uv.spawn("cat", { stdio = { stdin, stdout, nil } }, function()
    agents[session_id] = nil
  end)
  assert(agent.handle, "cannot start the agent process")
  for _, m in ipairs(checkpoint and checkpoint.messages or {}) do
    agent.messages[#agent.messages + 1] = m
  end
  stdout:read_start(function(err, data)
    local reply = agent.pending
    if reply and data then
      agent.pending = nil
      reply(err, data)
    end
  end)
  agents[session_id] = agent
  return agent
end

-- The worker stops owning a session (idle, closed, shutdown, lost): free its agent.
duroxide.on_session_released(function(session_id, reason)
  stop_agent(session_id)
end)

-- A (re)claimed session may have been served elsewhere meanwhile: any agent still in memory
-- here is stale, so start from the checkpoint the next turn brings.
duroxide.on_session_claimed(function(session_id, how)
  stop_agent(session_id)
end)

duroxide.activity("ChatTurn", function(actx, req)
  local agent = agents[actx.session_id]
  local rehydrated = false
  if not agent then
    agent = start_agent(actx.session_id, req.checkpoint)
    rehydrated = req.checkpoint ~= nil and #req.checkpoint.messages > 0
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
