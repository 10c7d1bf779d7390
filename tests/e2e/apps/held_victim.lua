-- tests/e2e/apps/held_victim.lua STORE: a worker of its own (a Lua script running
-- duroxide.runtime, not the CLI) whose store cycles wait up to 10 s for the loop
-- (rt:_turn_hold), so on a directory store CrashOnceOrch's activity surely runs inside the
-- transaction of the turn that scheduled it, and kills this process there (turns.lua).
local here = arg[0]:match("^(.*)/[^/]*$") or "."
dofile(here .. "/turns.lua")
local duroxide = require("duroxide")
-- (a short activity lock: on PostgreSQL the activity runs after its turn's commit, and its lock,
-- committed, must lapse before the next worker takes it again)
local rt = duroxide.runtime({ store = assert(arg[1], "usage: held_victim.lua STORE"),
                              log_level = "info", worker_node_id = "node-A",
                              worker_lock_timeout = "2s" })
rt:_turn_hold(10000)
rt:start()
rt:run_for(60000)
rt:stop()
