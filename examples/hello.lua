-- examples/hello.lua: the smallest app. Run a worker, then start an instance:
--   duroxide-lua examples/hello.lua &
--   duroxide-lua start HelloWorld '"Lua"' --id hello-1 --wait
local duroxide = require("duroxide")

duroxide.activity("Greet", function(actx, name)
  return "Hello, " .. name .. "!"
end)

duroxide.orchestration("HelloWorld", function(ctx, name)
  local greeting, err = ctx:schedule_activity("Greet", name):await()
  if not greeting then error(err) end
  return greeting
end)
