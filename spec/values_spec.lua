-- Values: JSON codec (duroxide.json_encode/json_decode) and round trips through activities.
local duroxide = require("duroxide")
local H = require("helpers")

-- A description of a value's Lua shape, so math.type and array marks are compared too.
local function shape(v)
  local t = type(v)
  if t == "number" then return math.type(v) end
  if v == duroxide.null then return "null" end
  if t ~= "table" then return t end
  local out = {}
  for k, x in pairs(v) do out[k] = shape(x) end
  return out
end

describe("duroxide.json_encode / json_decode", function()
  it("encodes canonically: sorted keys, no whitespace, integers vs floats", function()
    assert.are.equal('{"a":[1,1.5,"x"],"b":{"c":true,"d":null},"z":1.0}',
      duroxide.json_encode({ z = 1.0, b = { d = duroxide.null, c = true }, a = { 1, 1.5, "x" } }))
    assert.are.equal("1", duroxide.json_encode(1))
    assert.are.equal("1.0", duroxide.json_encode(1.0))
    assert.are.equal("-0.0", duroxide.json_encode(-0.0))
    assert.are.equal("null", duroxide.json_encode(nil))
    assert.are.equal('"hé"', duroxide.json_encode("hé"))
  end)

  it("encodes {} as an object and duroxide.array({}) as an array", function()
    assert.are.equal("{}", duroxide.json_encode({}))
    assert.are.equal("[]", duroxide.json_encode(duroxide.array({})))
    assert.are.equal("[]", duroxide.json_encode(duroxide.array()))
    assert.are.equal('{"e":[],"o":{}}', duroxide.json_encode({ e = duroxide.array({}), o = {} }))
  end)

  it("encodes duroxide.null inside arrays", function()
    assert.are.equal("[1,null,3]", duroxide.json_encode({ 1, duroxide.null, 3 }))
    assert.are.equal("duroxide.null", tostring(duroxide.null))
  end)

  it("decodes with integer/float subtypes, null sentinel and array marks", function()
    local v = duroxide.json_decode('{"i":1,"f":1.0,"a":[],"o":{},"n":[null,2],"s":"✓"}')
    assert.are.equal("integer", math.type(v.i))
    assert.are.equal("float", math.type(v.f))
    assert.are.equal(duroxide.null, v.n[1])
    assert.are.equal(2, v.n[2])
    assert.are.equal("✓", v.s)
    -- a decoded [] stays an array when encoded again; {} stays an object
    assert.are.equal("[]", duroxide.json_encode(v.a))
    assert.are.equal("{}", duroxide.json_encode(v.o))
    assert.is_nil(duroxide.json_decode("null"))
  end)

  it("round trips unicode strings byte for byte", function()
    local s = "héllo wörld ✓ 日本語 😀 \u{10FFFF}"
    assert.are.equal(s, duroxide.json_decode(duroxide.json_encode(s)))
  end)

  it("reports invalid JSON with nil, err", function()
    local v, err = duroxide.json_decode("{bad")
    assert.is_nil(v)
    assert.matches("invalid JSON", err)
  end)

  it("names the offending path for values it cannot encode", function()
    local function fails(value, expected)
      local s, err = duroxide.json_encode(value)
      assert.is_nil(s)
      assert.are.equal(expected, err)
    end
    fails({ items = { 1, 2, print } }, "value.items[3]: cannot encode a function")
    fails({ ["a key"] = coroutine.create(print) }, 'value["a key"]: cannot encode a thread (coroutine)')
    fails({ x = 0 / 0 }, "value.x: cannot encode NaN or infinity")
    fails({ x = math.huge }, "value.x: cannot encode NaN or infinity")
    fails({ 1, 2, k = "v" }, "value: mixed table (array and string keys)")
    fails({ [1] = 1, [3] = 3 }, "value: sparse table (integer keys are not 1..n; use duroxide.null for holes)")
    fails({ [true] = 1 }, "value: table key must be a string or integer")
    fails({ s = "\xff" }, "value.s: string is not valid UTF-8")
    local cyc = {}
    cyc.self = cyc
    fails({ c = cyc }, "value.c.self: cyclic table (refers back to value.c)")
  end)
end)

describe("values through activities", function()
  local env
  before_each(function() env = H.env() end)
  after_each(function() env:close() end)

  -- Echo the value through an activity; returns what the activity saw, what the
  -- orchestration got back (with its shape), and the final output.
  local function echo(value)
    local seen = {}
    local act = env:activity("Echo", function(actx, input)
      seen.input, seen.shape = input, shape(input)
      return input
    end)
    local orch = env:orchestration("EchoOrch", function(ctx, input)
      local out, err = ctx:schedule_activity(act, input):await()
      if err then error(err) end
      return { out = out, shape = shape(out), input_shape = shape(input) }
    end)
    local st = env:run(orch, value)
    assert.are.equal("Completed", st.status, st.error and st.error.message)
    return seen, st.output
  end

  it("keeps integers as integers and floats as floats (1.0 stays a float)", function()
    local seen, out = echo({ i = 1, f = 1.0, neg = -7, big = math.maxinteger, pi = 3.25, tiny = 1e-300 })
    local expected = { i = "integer", f = "float", neg = "integer", big = "integer", pi = "float",
                       tiny = "float" }
    assert.are.same(expected, seen.shape)
    assert.are.same(expected, out.shape)
    assert.are.same(expected, out.input_shape)
    assert.are.equal(math.maxinteger, out.out.big)
    assert.are.equal(1e-300, out.out.tiny)
    assert.are.equal("float", math.type(out.out.f))
    assert.are.equal("1.0", duroxide.json_encode(out.out.f))
  end)

  it("keeps scalar inputs (integer, float, string, boolean)", function()
    local seen, out = echo(1.0)
    assert.are.equal("float", seen.shape)
    assert.are.equal("float", out.shape)
    seen, out = echo(42)
    assert.are.equal("integer", seen.shape)
    assert.are.equal(42, out.out)
    seen, out = echo(false)
    assert.are.equal(false, seen.input)
    assert.are.equal(false, out.out)
  end)

  it("keeps integers at their limits as input, result and output (orch.c's integer path)", function()
    local act = env:activity("EchoInt", function(actx, x) return x end)
    local orch = env:orchestration("IntOrch", function(ctx, x)
      local out = assert(ctx:schedule_activity(act, x):await())
      assert(math.type(out) == math.type(x) and out == x, "changed in transit")
      return out
    end)
    for _, v in ipairs({ 0, -1, 7, 123456789012345678, -123456789012345678, 1234567890123456789,
                         math.maxinteger, math.mininteger, -0.0, 1.0 }) do
      local st = env:run(orch, v)
      assert.are.equal("Completed", st.status, st.error and st.error.message)
      assert.are.equal(v, st.output)
      assert.are.equal(math.type(v), math.type(st.output))
      assert.are.equal(duroxide.json_encode(v), duroxide.json_encode(st.output))
    end
  end)

  it("keeps nested tables, arrays and null sentinels", function()
    local value = {
      order = { id = "o-1", lines = { { sku = "a", qty = 2 }, { sku = "b", qty = 1, price = 9.5 } } },
      tags = { "x", duroxide.null, "z" },
      empty_array = duroxide.array({}),
      empty_object = {},
      deep = { { { { "bottom" } } } },
    }
    local seen, out = echo(value)
    assert.are.same(value, seen.input)
    assert.are.same(value, out.out)
    assert.are.equal(duroxide.null, out.out.tags[2])
    assert.are.equal(3, #out.out.tags)
    assert.are.equal("[]", duroxide.json_encode(out.out.empty_array))
    assert.are.equal("{}", duroxide.json_encode(out.out.empty_object))
    assert.are.equal("[]", duroxide.json_encode(seen.input.empty_array))
    assert.are.equal(duroxide.json_encode(value), duroxide.json_encode(out.out))
  end)

  it("keeps unicode strings and unicode keys", function()
    local value = { ["clé ✓"] = "héllo 日本語 😀", list = { "ü", "€" } }
    local seen, out = echo(value)
    assert.are.same(value, seen.input)
    assert.are.same(value, out.out)
  end)

  it("fails the orchestration with the path when activity input holds a function", function()
    local act = env:activity("Never", function() return "unreachable" end)
    local orch = env:orchestration("BadInput", function(ctx)
      return ctx:schedule_activity(act, { items = { 1, 2, function() end } }):await()
    end)
    local st = env:run(orch)
    assert.are.equal("Failed", st.status)
    assert.matches("input.items[3]: cannot encode a function", st.error.message, 1, true)
  end)

  it("fails the activity with the path when its output cannot be encoded", function()
    local act = env:activity("BadOutput", function() return { ok = true, cb = print } end)
    local orch = env:orchestration("BadOutputOrch", function(ctx)
      local v, err = ctx:schedule_activity(act):await()
      return { v = v, message = err and err.message }
    end)
    local st = env:run(orch)
    assert.are.equal("Completed", st.status)
    assert.are.equal("output.cb: cannot encode a function", st.output.message)
  end)

  it("refuses unencodable client input with an error naming the path", function()
    local ok, err = pcall(env.client.start, env.client, "bad-input", "Whatever", { f = print })
    assert.is_false(ok)
    assert.matches("input.f: cannot encode a function", err, 1, true)
    assert.are.equal("NotFound", env.client:status("bad-input").status)
  end)

  it("returns orchestration outputs with the same shape to the client", function()
    local orch = env:orchestration("Shape", function(ctx, input)
      return { input = input, float = 2.0, int = 2, arr = duroxide.array(), null_in_array = { duroxide.null } }
    end)
    local st = env:run(orch, { n = 1.0 })
    assert.are.equal("Completed", st.status)
    assert.are.equal("float", math.type(st.output.input.n))
    assert.are.equal("float", math.type(st.output.float))
    assert.are.equal("integer", math.type(st.output.int))
    assert.are.equal('{"arr":[],"float":2.0,"input":{"n":1.0},"int":2,"null_in_array":[null]}',
      duroxide.json_encode(st.output))
  end)
end)
