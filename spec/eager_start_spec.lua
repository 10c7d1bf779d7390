-- Eager start: client:start with this Lua state's runtime running on the same store hands the
-- start to that runtime, whose store cycle commits it together with the instance's first turn
-- (one durable commit instead of two); the activity's result then shares the commit of the
-- turn it unblocks (tests/test_store_cycle_turns.c). No timing is asserted. With $DX_TEST_PG the
-- same cases run on PostgreSQL (fresh schemas; "another store" is another schema there).
local duroxide = require("duroxide")
local H = require("helpers")

-- Each store kind: a fresh store and its disposal.
local kinds = {
  -- held: a local store's cycle also runs the activities its turns schedule before it commits
  -- (docs/store-thread.md "Turns and activities answered inside their fetch's transaction")
  { name = "a directory store", new = function() return H.tmpdir() end, drop = H.rmdir,
    held = true },
}
local pg = os.getenv("DX_TEST_PG")
if pg and pg ~= "" then
  kinds[#kinds + 1] = {
    name = "PostgreSQL",
    new = function()
      local sep = pg:find("?", 1, true) and "&" or "?"
      return pg .. sep .. "schema=" .. H.unique("eager") .. "_" .. os.time() .. "_" ..
        math.random(1, 1000000)
    end,
    drop = function() end, -- schemas die with the throwaway server
  }
end

for _, kind in ipairs(kinds) do
  describe("client:start with this state's runtime (eager start) on " .. kind.name, function()
    local dir, rt, client, hello
    before_each(function()
      dir = kind.new()
      hello = H.unique("EagerHello")
      local act = H.unique("EagerEcho")
      duroxide.activity(act, function(_, x) return x end)
      duroxide.orchestration(hello, function(ctx, x) return ctx:schedule_activity(act, x):await() end)
      rt = duroxide.runtime({ store = dir, log_level = "error" })
      rt:_turn_hold(10000) -- the loop answers within the hold however loaded the machine is
      rt:start()
      client = duroxide.client({ store = dir })
    end)
    after_each(function()
      rt:stop()
      client:close()
      kind.drop(dir)
    end)

    local function types(id)
      local t = {}
      for _, e in ipairs(client:history(id)) do t[#t + 1] = e.type end
      return t
    end

    it("commits the start together with its first turn", function()
      -- start returns once the start is committed; the turn is in that same commit (a turn
      -- committed later would not be in the history yet). On a local store the activity it
      -- scheduled ran inside that transaction too, and the turn its result woke: the whole
      -- hello is one commit
      assert.are.equal("e1", client:start("e1", hello, "x"))
      if kind.held then
        assert.are.same({ "OrchestrationStarted", "ActivityScheduled", "ActivityCompleted",
                          "OrchestrationCompleted" }, types("e1"))
      else
        assert.are.same({ "OrchestrationStarted", "ActivityScheduled" }, types("e1"))
      end
      assert.are.equal("x", client:wait("e1", 5000).output)
    end)

    it("refuses a bad start at once, changing nothing", function()
      local ok, err = client:start("e2", hello, "x", "1.x")
      assert.is_nil(ok)
      assert.matches("'1.x' is not a version", err.message, 1, true)
      assert.are.equal("NotFound", client:status("e2").status)
    end)

    it("refuses a second start of the same id", function()
      assert.truthy(client:start("e3", hello, 1))
      local ok, err = client:start("e3", hello, 2)
      assert.is_nil(ok)
      assert.matches("already exists", err.message, 1, true)
      assert.are.equal(1, client:wait("e3", 5000).output)
    end)

    it("leaves a start on another store to that store (committed alone, nothing run)", function()
      local other = kind.new()
      local c2 = duroxide.client({ store = other })
      local t0 = rt:stats().turns
      assert.truthy(c2:start("o1", hello, 1))
      assert.are.equal(0, #(c2:history("o1") or {})) -- queued, no turn ran
      assert.are.equal("o1", c2:status("o1").instance_id)
      assert.are.equal(0, rt:stats().turns - t0)
      c2:close()
      kind.drop(other)
    end)
  end)
end
