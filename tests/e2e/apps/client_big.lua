-- tests/e2e/apps/client_big.lua: not a worker app. Its top-level code uses the client to start
-- an instance whose input is over the 256 KiB payload limit, prints the error to stderr and
-- exits 2 when refused (0 if accepted). A command-line argument cannot carry 256 KiB (Linux
-- limits one argv string to 128 KiB), so this is how e2e.sh checks the limit from a process.
local duroxide = require("duroxide")
local store = assert(os.getenv("E2E_STORE"), "E2E_STORE not set")
local c = duroxide.client({ store = store })
local ok, err = c:start(os.getenv("E2E_ID") or "big1", "Quick", string.rep("x", 300 * 1024))
if ok == nil and err then
  io.stderr:write("refused: ", tostring(err), "\n")
  os.exit(2)
end
os.exit(0)
