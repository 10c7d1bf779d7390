-- tests/e2e/apps/syntax_error.lua: does not compile (line 5); the worker must refuse to start.
local duroxide = require("duroxide")
duroxide.activity("A", function(actx, input)
  return input
local x = = 1
