-- client:history and client:status build their tables straight from the store's records
-- (bindings/lua/lrecords.c). They must be exactly what the JSON the CLI prints for the same
-- records decodes to: compared through the canonical encoder, which also tells integers
-- from floats, [] from {} and duroxide.null from a missing field.
local duroxide = require("duroxide")
local H = require("helpers")

local function same_as_json(value, json, what)
  local want = duroxide.json_decode(json)
  assert.are.equal(duroxide.json_encode(want), duroxide.json_encode(value), what)
end

describe("client records", function()
  local env
  before_each(function() env = H.env() end)
  after_each(function() env:close() end)

  it("history and status tables equal the decoded JSON of every kind of event", function()
    local ok_act = env:activity("Shape", function(actx, v)
      return { list = duroxide.array(), n = 1, f = 1.5, z = -0.0, none = duroxide.null, v = v }
    end)
    local bad_act = env:activity("Bad", function(actx) error("bad \255 byte: caf\195\169") end)
    local child = env:orchestration("Child", function(ctx, x) return { x, "child" } end)
    local orch = env:orchestration("Records", function(ctx, input)
      if input.round == 2 then
        ctx:set_custom_status({ round = 2, list = duroxide.array() })
        return { done = true, nothing = duroxide.null }
      end
      ctx:set_custom_status("phase \226\130\172 one")
      local r = assert(ctx:schedule_activity(ok_act, { 1, 2.0, "x" }):await())
      local ok = ctx:schedule_activity(bad_act, nil):await()
      assert(ok == nil)
      ctx:schedule_timer(1):await()
      local ev = ctx:schedule_wait("go"):await()
      local s = assert(ctx:schedule_activity_on_session(ok_act, "s", "sess-1"):await())
      local c = assert(ctx:schedule_sub_orchestration(child, r.n):await())
      ctx:close_session("sess-1")
      return ctx:continue_as_new({ round = 2, seen = { ev or duroxide.null, s.v, c } })
    end)
    local id = env:start(orch, { round = 1 })
    env:await_event(id, "ExternalSubscribed")
    assert(env.client:raise_event(id, "go", duroxide.null))
    local st = env:wait(id, 10000)
    assert.are.equal("Completed", st.status, st.error and st.error.message)
    same_as_json(st, env.client:_status_json(id), "status")

    local kinds = {}
    for exec = 1, 2 do
      local h, js = env.client:history(id, exec), env.client:_history_json(id, exec)
      assert.are.equal(#js, #h)
      assert.is_true(#h > 1)
      for i = 1, #h do
        same_as_json(h[i], js[i], "execution " .. exec .. " event " .. i)
        kinds[h[i].type] = true
      end
    end
    for _, k in ipairs({ "OrchestrationStarted", "ActivityScheduled", "ActivityCompleted",
                         "ActivityFailed", "TimerCreated", "TimerFired", "ExternalSubscribed",
                         "ExternalEvent", "SubOrchestrationScheduled",
                         "SubOrchestrationCompleted", "CustomStatusUpdated",
                         "OrchestrationContinuedAsNew", "OrchestrationCompleted" }) do
      assert.is_true(kinds[k] ~= nil, "no " .. k .. " event in the histories")
    end
    -- the failure's bytes that are not UTF-8 come back as U+FFFD, as in the JSON
    local failed = H.events_of(env.client:history(id, 1), "ActivityFailed")[1]
    assert.matches("bad \239\191\189 byte: caf\195\169", failed.error.message, 1, true)
  end)

  it("status of failed, running and unknown instances equals the decoded JSON", function()
    local boom = env:orchestration("Boom", function() error({ kind = "Nope", message = "no" }) end)
    local wait = env:orchestration("Wait", function(ctx)
      ctx:set_custom_status({ 1, 2 })
      return ctx:schedule_wait("never"):await()
    end)
    local failed = env:start(boom)
    assert.are.equal("Failed", env:wait(failed).status)
    local running = env:start(wait)
    env:await_event(running, "ExternalSubscribed")
    for _, id in ipairs({ failed, running, "nobody-here" }) do
      same_as_json(env.client:status(id), env.client:_status_json(id), id)
    end
    assert.are.same({}, env.client:history("nobody-here") or {})
  end)
end)
