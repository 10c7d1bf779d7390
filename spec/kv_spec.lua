-- Key-value state per instance (issue 11 item 1): ctx:*_kv_* calls, client reads and waits,
-- continue-as-new, limits at the call, replay determinism, duroxide.testing's env:kv.
local duroxide = require("duroxide")
local testing = require("duroxide.testing")

local HOUR = 3600 * 1000

describe("key-value state", function()
  local env
  before_each(function() env = testing.env({}) end)
  after_each(function() env:close() end)

  it("sets, reads, overwrites and clears values of any JSON shape", function()
    env:register_orchestration("KV", function(ctx)
      local seen = {}
      seen.before = ctx:get_kv_value("a")
      ctx:set_kv_value("a", 1)
      ctx:set_kv_value("b", { list = { 1, 2 }, s = "x" })
      ctx:set_kv_value("c", "text")
      seen.a1 = ctx:get_kv_value("a")
      ctx:set_kv_value("a", 2)
      seen.a2 = ctx:get_kv_value("a")
      ctx:clear_kv_value("c")
      seen.c = ctx:get_kv_value("c")
      seen.keys = ctx:get_kv_all_keys()
      seen.all = ctx:get_kv_all_values()
      seen.len = ctx:get_kv_length()
      return seen
    end)
    local st = env:run_until_complete(env:start("kv-1", "KV"))
    assert.are.equal("Completed", st.status)
    assert.are.same({ a1 = 1, a2 = 2, keys = { "a", "b" }, len = 2,
                      all = { a = 2, b = { list = { 1, 2 }, s = "x" } } }, st.output)
    assert.are.same({ a = 2, b = { list = { 1, 2 }, s = "x" } }, env:kv("kv-1"))
    assert.are.equal(2, env.client:get_kv_value("kv-1", "a"))
    assert.is_nil(env.client:get_kv_value("kv-1", "c"))
  end)

  it("clear_all_kv_values clears every key, committed ones included", function()
    env:register_orchestration("ClearAll", function(ctx, n)
      if n == 1 then
        ctx:set_kv_value("old", true)
        ctx:continue_as_new(2)
      end
      ctx:set_kv_value("new", true)
      ctx:schedule_timer(1000):await()
      ctx:clear_all_kv_values()
      return ctx:get_kv_all_keys()
    end)
    local id = env:start("kv-2", "ClearAll", 1)
    env:run_until_idle()
    assert.are.same({ old = true, new = true }, env:kv(id))
    local st = env:run_until_complete(id)
    assert.are.same({}, st.output)
    assert.are.same({}, env:kv(id))
  end)

  it("survives continue_as_new: the next execution reads what the previous wrote", function()
    env:register_orchestration("Counter", function(ctx, n)
      local count = (ctx:get_kv_value("count") or 0) + 1
      ctx:set_kv_value("count", count)
      if n < 3 then ctx:continue_as_new(n + 1) end
      return count
    end)
    local st = env:run_until_complete(env:start("kv-3", "Counter", 1))
    assert.are.equal("Completed", st.status)
    assert.are.equal(3, st.execution_id)
    assert.are.equal(3, st.output)
    assert.are.same({ count = 3 }, env:kv("kv-3"))
    -- replaying execution 2 needs the state it began with (what execution 1 left)
    local h2 = env:history("kv-3", 2)
    local ok, err = testing.check_replay(h2, nil, { kv = { count = 1 } })
    assert.is_true(ok, tostring(err))
    ok, err = testing.check_replay(h2, nil, { kv = {} })
    assert.is_false(ok)
    assert.matches("key%-value set at event 2 was 'count' = 2 in history but the code now sets " ..
                   "'count' = 1", err)
  end)

  -- duroxide 0.1.26's read-modify-write fix: every turn replays from the committed state, so
  -- a value read after the code's own writes is the same on every replay.
  it("read-modify-write across turns is deterministic", function()
    env:register_orchestration("RMW", function(ctx)
      for i = 1, 3 do
        ctx:set_kv_value("n", (ctx:get_kv_value("n") or 0) + i)
        ctx:schedule_timer(1000):await()
      end
      return ctx:get_kv_value("n")
    end)
    local st = env:run_until_complete(env:start("kv-4", "RMW"))
    assert.are.equal("Completed", st.status)
    assert.are.equal(6, st.output)
    local ok, err = testing.check_replay(env:history("kv-4"))
    assert.is_true(ok, tostring(err))
  end)

  it("prune_kv_values_updated_before clears keys older than the cutoff", function()
    env:register_orchestration("Prune", function(ctx)
      ctx:set_kv_value("old", 1)
      ctx:schedule_timer(HOUR):await()
      local cutoff = ctx:utc_now()
      ctx:set_kv_value("new", 2)
      local n = ctx:prune_kv_values_updated_before(cutoff)
      return { n = n, keys = ctx:get_kv_all_keys() }
    end)
    local st = env:run_until_complete(env:start("kv-5", "Prune"))
    assert.are.same({ n = 1, keys = { "new" } }, st.output)
    assert.are.same({ new = 2 }, env:kv("kv-5"))
  end)

  it("get_kv_value_from_instance reads another instance (nil when it has no such key)", function()
    env:register_orchestration("Source", function(ctx)
      ctx:set_kv_value("price", 42)
      ctx:schedule_wait("never"):await()
    end)
    env:register_orchestration("Reader", function(ctx, src)
      local v = assert(ctx:get_kv_value_from_instance(src, "price"):await())
      local missing, err = ctx:get_kv_value_from_instance(src, "nope"):await()
      local other = ctx:get_kv_value_from_instance("no-such-instance", "price"):await()
      return { v = v, missing = missing, err = err, other = other }
    end)
    env:start("src", "Source")
    env:run_until_idle()
    local st = env:run_until_complete(env:start("reader", "Reader", "src"))
    assert.are.equal("Completed", st.status)
    assert.are.same({ v = 42 }, st.output)
    -- the value read is recorded: replaying needs no store
    local ok, err = testing.check_replay(env:history("reader"))
    assert.is_true(ok, tostring(err))
  end)

  describe("refuses bad writes at the call, naming the problem", function()
    local function failure_of(fn)
      env:register_orchestration("Bad", fn)
      local st = env:run_until_complete(env:start(nil, "Bad"))
      assert.are.equal("Failed", st.status)
      return st.error.message
    end

    it("a value over 16384 bytes", function()
      local msg = failure_of(function(ctx) ctx:set_kv_value("k", string.rep("x", 16384)) end)
      assert.matches("key%-value value is 16386 bytes; the limit is 16384 bytes", msg)
    end)

    it("a 101st key (overwriting an existing key is fine)", function()
      local msg = failure_of(function(ctx)
        for i = 1, 100 do ctx:set_kv_value("k" .. i, i) end
        ctx:set_kv_value("k1", "again")
        ctx:set_kv_value("one-too-many", 1)
      end)
      assert.matches("cannot set key%-value key 'one%-too%-many': the instance already has 100 keys",
                     msg)
    end)

    it("keys that are empty, too long or not strings, and nil values", function()
      assert.matches("key%-value key must be a non%-empty string, got number",
                     failure_of(function(ctx) ctx:set_kv_value(1, 1) end))
      assert.matches("key%-value key must be a non%-empty string",
                     failure_of(function(ctx) ctx:get_kv_value("") end))
      assert.matches("key%-value key is 101 bytes; the limit is 100 bytes",
                     failure_of(function(ctx) ctx:get_kv_value(string.rep("k", 101)) end))
      assert.matches("key%-value key must not contain a NUL byte",
                     failure_of(function(ctx) ctx:get_kv_value("a\0b") end))
      assert.matches("key%-value key must not contain a NUL byte",
                     failure_of(function(ctx) ctx:set_kv_value("a\0b", 1) end))
      assert.matches("key%-value key is not valid UTF%-8",
                     failure_of(function(ctx) ctx:set_kv_value("a\255", 1) end))
      assert.matches("instance id is 401 bytes; the limit is 400 bytes",
                     failure_of(function(ctx)
                       ctx:get_kv_value_from_instance(string.rep("i", 401), "k")
                     end))
      assert.matches("key%-value key is 101 bytes; the limit is 100 bytes",
                     failure_of(function(ctx)
                       ctx:get_kv_value_from_instance("i", string.rep("k", 101))
                     end))
      assert.matches("queue name is 401 bytes; the limit is 400 bytes",
                     failure_of(function(ctx) ctx:dequeue_event(string.rep("q", 401)) end))
      assert.matches("key%-value key is 101 bytes; the limit is 100 bytes",
                     failure_of(function(ctx) ctx:set_kv_value(string.rep("k", 101), 1) end))
      assert.matches("value must not be nil %(use clear_kv_value%)",
                     failure_of(function(ctx) ctx:set_kv_value("k", nil) end))
      assert.matches("cannot encode",
                     failure_of(function(ctx) ctx:set_kv_value("k", print) end))
      assert.matches("prune_kv_values_updated_before expects a time in milliseconds",
                     failure_of(function(ctx) ctx:prune_kv_values_updated_before("soon") end))
    end)

    it("and records nothing for the refused write", function()
      env:register_orchestration("Partial", function(ctx)
        ctx:set_kv_value("ok", 1)
        ctx:set_kv_value("big", string.rep("x", 20000))
      end)
      local id = env:start(nil, "Partial")
      assert.are.equal("Failed", env:run_until_complete(id).status)
      assert.are.same({ ok = 1 }, env:kv(id))
      local sets = 0
      for _, e in ipairs(env:history(id)) do
        if e.type == "KeyValueSet" then sets = sets + 1 end
      end
      assert.are.equal(1, sets)
    end)
  end)

  it("a changed key or value on replay is nondeterminism", function()
    env:register_orchestration("V", function(ctx)
      ctx:set_kv_value("k", 1)
      ctx:schedule_timer(10):await()
    end)
    local id = env:start("kv-nd", "V")
    env:run_until_complete(id)
    local ok, err = testing.check_replay(env:history(id), function(d)
      d.orchestration("V", function(ctx) ctx:set_kv_value("k", 2) ctx:schedule_timer(10):await() end)
    end)
    assert.is_false(ok)
    assert.matches("key%-value set at event 2 was 'k' = 1 in history but the code now sets 'k' = 2",
                   err)
    ok, err = testing.check_replay(env:history(id), function(d)
      d.orchestration("V", function(ctx) ctx:clear_kv_value("k") ctx:schedule_timer(10):await() end)
    end)
    assert.is_false(ok)
    assert.matches("schedule mismatch", err)
  end)
end)

describe("client key-value reads", function()
  local env
  before_each(function() env = testing.env({}) end)
  after_each(function() env:close() end)

  it("get_kv_value / get_kv_all_values: nil and {} for unknown instances and keys", function()
    assert.is_nil(env.client:get_kv_value("nobody", "k"))
    assert.are.same({}, env.client:get_kv_all_values("nobody"))
  end)

  it("returns nil, err for ids and keys the store cannot hold; raises on misuse", function()
    local v, err = env.client:get_kv_value(string.rep("i", 401), "k")
    assert.is_nil(v)
    assert.matches("instance id is 401 bytes; the limit is 400 bytes", err.message)
    v, err = env.client:get_kv_value("i", string.rep("k", 101))
    assert.is_nil(v)
    assert.matches("key%-value key is 101 bytes; the limit is 100 bytes", err.message)
    v, err = env.client:get_kv_all_values("")
    assert.is_nil(v)
    assert.matches("instance id must be a non%-empty string", err.message)
    v, err = env.client:wait_for_kv_value("", "k", 10)
    assert.is_nil(v)
    assert.is_not_nil(err)
    assert.has_error(function() env.client:get_kv_value("i", {}) end)
    assert.has_error(function() env.client:wait_for_kv_value("i", "k", -1) end)
  end)

  it("wait_for_kv_value returns once the key exists, or nil, err on timeout", function()
    env:register_orchestration("Later", function(ctx)
      ctx:schedule_wait("go"):await()
      ctx:set_kv_value("ready", "yes")
      ctx:schedule_wait("never"):await()
    end)
    local id = env:start("w-1", "Later")
    env:run_until_idle()
    local v, err = env.client:wait_for_kv_value(id, "ready", 50)
    assert.is_nil(v)
    assert.are.equal("DX_ETIMEDOUT", err.kind)
    env:raise_event(id, "go", true)
    assert.are.equal("yes", env.client:wait_for_kv_value(id, "ready", 10000))
  end)
end)

describe("duroxide.testing additions", function()
  it("tmpdir honours $TMPDIR", function()
    local base = testing.tmpdir()
    -- a child process with TMPDIR set (this process cannot change its own environment)
    local script = base .. "/child.lua"
    local f = assert(io.open(script, "w"))
    f:write("package.path, package.cpath = ... io.write(require('duroxide.testing').tmpdir())")
    f:close()
    local p = io.popen(string.format("TMPDIR=%q lua5.4 %q %q %q 2>&1", base .. "/", script,
                                     package.path, package.cpath))
    local out = p:read("a")
    p:close()
    assert.matches("^" .. base:gsub("%p", "%%%0") .. "/duroxide%-%w+$", out)
    testing.remove_tree(base)
  end)

  it("env:history(id, execution) reads an earlier execution; env:cancel cancels", function()
    local env = testing.env({})
    env:register_orchestration("Twice", function(ctx, n)
      if n == 1 then ctx:continue_as_new(2) end
      ctx:schedule_wait("never"):await()
    end)
    local id = env:start("t-1", "Twice", 1)
    env:run_until_idle()
    local h1 = env:history(id, 1)
    assert.are.equal(1, h1.execution_id)
    assert.are.equal("OrchestrationContinuedAsNew", h1[#h1].type)
    assert.are.equal(2, env:history(id).execution_id)
    assert.has_error(function() env:history(id, 0) end, "history: execution must be an integer >= 1")
    env:cancel(id, "enough")
    local st = env:run_until_complete(id)
    assert.are.equal("Failed", st.status)
    assert.are.equal("canceled: enough", st.error.message)
    assert.has_error(function() env:cancel("nobody", "x") end)
    env:close()
  end)
end)
