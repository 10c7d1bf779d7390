-- Store URLs: every Lua entry point that names a store (duroxide.client, duroxide.runtime,
-- testing.env) goes through the provider seam, takes a directory or a postgres:// URL, and
-- refuses anything else with a message naming the problem. With $DX_TEST_PG (scripts/test
-- starts a server) the same harness run happens on PostgreSQL in a fresh schema.
local duroxide = require("duroxide")
local testing = require("duroxide.testing")

local function errmsg(fn, ...)
  local ok, err = pcall(fn, ...)
  assert.is_false(ok)
  return tostring(err)
end

local function hello_on(store)
  local env = testing.env({ store = store })
  env:register_activity("Greet", function(_, name) return "hello " .. name end)
  env:register_orchestration("Hello", function(ctx, name)
    return ctx:schedule_activity("Greet", name):await()
  end)
  local id = env:start("h1", "Hello", "ann")
  local st = env:run_until_complete(id)
  env:close()
  return st
end

describe("store URLs", function()
  it("refuse an unknown scheme in duroxide.client and duroxide.runtime", function()
    local m = errmsg(duroxide.client, { store = "mysql://db/x" })
    assert.matches("unknown store scheme 'mysql://'", m, 1, true)
    m = errmsg(duroxide.runtime, { store = "redis://cache" })
    assert.matches("unknown store scheme 'redis://'", m, 1, true)
  end)

  it("refuse an empty or non-string store in testing.env", function()
    assert.matches("store must be a non-empty string", errmsg(testing.env, { store = "" }), 1, true)
    assert.matches("got number", errmsg(testing.env, { store = 42 }), 1, true)
  end)

  it("run testing.env on a given directory and keep it on close", function()
    local dir = testing.tmpdir() .. "/given"
    local st = hello_on(dir)
    assert.are.equal("Completed", st.status)
    assert.are.equal("hello ann", st.output)
    local c = duroxide.client({ store = dir }) -- the instance is still there
    assert.are.equal("Completed", c:status("h1").status)
    c:close()
    testing.remove_tree(dir)
  end)

  local pg = os.getenv("DX_TEST_PG")
  if pg and pg ~= "" then
    it("run testing.env on PostgreSQL ($DX_TEST_PG, fresh schema)", function()
      local sep = pg:find("?", 1, true) and "&" or "?"
      local url = pg .. sep .. "schema=spec_" .. tostring(os.time()) .. "_" ..
        tostring(math.random(1, 1000000))
      local st = hello_on(url)
      assert.are.equal("Completed", st.status)
      assert.are.equal("hello ann", st.output)
    end)
  end
end)
