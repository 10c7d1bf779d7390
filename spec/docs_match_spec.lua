-- spec/docs_match_spec.lua: behaviours the docs promise, as a user reading docs/lua-api.md
-- would meet them (issue 13 item 6): error texts without internal file positions, the
-- client:history errors, the SessionClosed event.
local duroxide = require("duroxide")
local H = require("helpers")

describe("docs and behaviour agree", function()
  local env
  before_each(function() env = H.env() end)
  after_each(function() env:close() end)

  it("a stale ctx's error names no internal file (context.lua:NN:)", function()
    local kept
    local use_ctx = env:activity("UseCtx", function()
      local _, err = pcall(function() return kept:schedule_timer(10) end)
      return tostring(err)
    end)
    local orch = env:orchestration("KeepCtx", function(ctx)
      kept = ctx
      return assert(ctx:schedule_activity(use_ctx):await())
    end)
    local st = env:run(orch)
    assert.are.equal("Completed", st.status, st.error and st.error.message)
    assert.matches("this ctx belongs to a finished orchestration turn", st.output, 1, true)
    assert.is_nil(st.output:find("context.lua", 1, true), st.output)
  end)

  it("client:history of an unknown instance returns nil and `unknown instance 'x'`", function()
    local h, err = env.client:history("no-such-instance")
    assert.is_nil(h)
    assert.are.equal("unknown instance 'no-such-instance'", err.message)
    assert.are.equal("DX_ENOTFOUND", err.kind)
  end)

  it("every event type in a history is listed in docs/lua-api.md (SessionClosed too)", function()
    local act = env:activity("OnSession", function(actx, x) return x end)
    local orch = env:orchestration("CloseIt", function(ctx)
      local v = assert(ctx:schedule_activity_on_session(act, 1, "s-docs"):await())
      ctx:close_session("s-docs")
      ctx:set_custom_status("closed")
      return v
    end)
    local st, id = env:run(orch)
    assert.are.equal("Completed", st.status, st.error and st.error.message)
    local doc = assert(io.open("docs/lua-api.md")):read("a")
    local list = doc:match("The types are:%s*(.-)\n\n")
    assert.is_truthy(list, "docs/lua-api.md: no event type list")
    local seen = {}
    for _, e in ipairs(env.client:history(id or st.instance_id)) do seen[e.type] = true end
    assert.is_true(seen.SessionClosed, "no SessionClosed event in the history")
    for t in pairs(seen) do
      assert.is_truthy(list:find("`" .. t .. "`", 1, true), t .. " missing from the event list")
    end
  end)
end)

describe("require order", function()
  it("duroxide.testing loads first, with only duroxide.so on package.cpath", function()
    local p = assert(io.popen(string.format(
      "lua5.4 -e 'package.path=\"/nonexistent/?.lua\"; package.cpath=%q' " ..
      "-e 'local t = require(\"duroxide.testing\"); print(type(t.env), package.loaded.duroxide ~= nil)' 2>&1",
      package.cpath)))
    local out = p:read("a")
    p:close()
    assert.are.equal("function\ttrue\n", out)
  end)

  it("luv required before duroxide: the app's uv.run() runs duroxide's work", function()
    local script = os.tmpname()
    local f = assert(io.open(script, "w"))
    f:write([[
local uv = require("luv")
local duroxide = require("duroxide")
duroxide.activity("A", function(actx, x) return x + 1 end)
duroxide.orchestration("O", function(ctx, x) return assert(ctx:schedule_activity("A", x):await()) end)
local dir = os.tmpname(); os.remove(dir)
local rt = duroxide.runtime({ store = dir, log_level = "error" }):start()
local c = duroxide.client(dir)
c:start("i1", "O", 41)
local t = uv.new_timer()
local deadline = 0
t:start(10, 10, function()
  deadline = deadline + 1
  local st = c:status("i1")
  if st.status == "Completed" or deadline > 2000 then
    print(st.status, st.output); t:close(); uv.stop()
  end
end)
uv.run()
rt:stop()
os.execute("rm -rf '" .. dir .. "'")
]])
    f:close()
    local p = assert(io.popen(string.format("lua5.4 -e 'package.cpath=%q' %s 2>&1",
      package.cpath, script)))
    local out = p:read("a")
    p:close()
    os.remove(script)
    assert.are.equal("Completed\t42\n", out)
  end)
end)
