-- spec/examples/saga_spec.lua: examples/saga.lua (reservations, compensation in reverse order).
local testing = require("duroxide.testing")

local function scheduled_names(history)
  local names = {}
  for _, e in ipairs(history) do
    if e.type == "ActivityScheduled" then names[#names + 1] = e.name end
  end
  return names
end

describe("examples/saga.lua", function()
  local env
  before_each(function() env = testing.env({ app = "examples/saga.lua" }) end)
  after_each(function() env:close() end)

  it("books every step and compensates nothing", function()
    local st = env:run_until_complete(env:start("trip-ok", "BookTrip", { trip = "lisbon" }))
    assert.are.equal("Completed", st.status)
    assert.are.same({ status = "booked", trip = "lisbon", confirmations = {
      flight = "flight-trip-ok", hotel = "hotel-trip-ok", car = "car-trip-ok" } }, st.output)
    for _, n in ipairs({ "ReserveFlight", "ReserveHotel", "ReserveCar" }) do
      assert.are.equal(1, #env:calls(n))
    end
    for _, n in ipairs({ "CancelFlight", "CancelHotel", "CancelCar" }) do
      assert.are.equal(0, #env:calls(n))
    end
  end)

  it("undoes the hotel and the flight, newest first, when the car fails", function()
    local id = env:start("trip-car", "BookTrip", { trip = "lisbon", fail = "car" })
    local st = env:run_until_complete(id)
    assert.are.equal("Completed", st.status)
    assert.are.same({ status = "compensated", trip = "lisbon", failed_step = "car",
                      error = "no car available for lisbon", compensated = { "hotel", "flight" } },
                    st.output)
    assert.are.equal(1, #env:calls("ReserveCar"))
    assert.are.same({ "hotel-trip-car" }, { env:calls("CancelHotel")[1].input })
    assert.are.same({ "flight-trip-car" }, { env:calls("CancelFlight")[1].input })
    assert.are.equal(1, #env:calls("CancelHotel"))
    assert.are.equal(1, #env:calls("CancelFlight"))
    assert.are.equal(0, #env:calls("CancelCar"))
    assert.are.same({ "ReserveFlight", "ReserveHotel", "ReserveCar", "CancelHotel", "CancelFlight" },
                    scheduled_names(env:history(id)))
  end)

  it("compensates nothing when the first step fails", function()
    local st = env:run_until_complete(env:start("trip-flight", "BookTrip",
                                                { trip = "oslo", fail = "flight" }))
    assert.are.equal("compensated", st.output.status)
    assert.are.equal("flight", st.output.failed_step)
    assert.are.same({}, st.output.compensated)
    assert.are.equal(0, #env:calls("ReserveHotel"))
    assert.are.equal(0, #env:calls("CancelFlight"))
  end)

  it("retries a compensation that fails transiently", function()
    local attempts = 0
    env:mock_activity("CancelFlight", function(actx, confirmation)
      attempts = attempts + 1
      if attempts < 3 then error("airline busy", 0) end
      return confirmation
    end)
    local st = env:run_until_complete(env:start("trip-retry", "BookTrip",
                                                { trip = "rome", fail = "hotel" }))
    assert.are.equal("Completed", st.status)
    assert.are.same({ "flight" }, st.output.compensated)
    local calls = env:calls("CancelFlight")
    assert.are.equal(3, #calls)
    for _, c in ipairs(calls) do assert.are.equal("flight-trip-retry", c.input) end
  end)

  it("replays its history deterministically", function()
    local id = env:start("trip-replay", "BookTrip", { trip = "lisbon", fail = "car" })
    env:run_until_complete(id)
    local ok, err = testing.check_replay(env:history(id), "examples/saga.lua")
    assert.is_true(ok, err)
  end)
end)
