-- examples/approval.lua: human approval with a timeout. The orchestration asks for approval,
-- shows "waiting for approval" in its custom status, and races the "approved" event against
-- a durable timer with ctx:select. Whichever comes first in history wins; the loser is
-- cancelled.
--
-- Approve (the loop waits until the wait is subscribed: an event raised earlier is dropped):
--   duroxide-lua examples/approval.lua & duroxide-lua start Approval '{"request":"new laptop","timeout_ms":60000}' --id approval-1 && until duroxide-lua status approval-1 | grep -q 'waiting for approval'; do sleep 0.2; done && duroxide-lua raise approval-1 approved '{"by":"ann"}' && duroxide-lua wait approval-1; kill $!
--   # {"output":{"approved":true,"by":"ann","request":"new laptop"},...,"status":"Completed"}
--
-- Let it time out (nobody approves within 2 s; the output is a rejection):
--   duroxide-lua examples/approval.lua & duroxide-lua start Approval '{"request":"new laptop","timeout_ms":2000}' --id approval-2 --wait 30s; kill $!
--   # {"output":{"approved":false,"reason":"no approval within 2000 ms","request":"new laptop"},...}
local duroxide = require("duroxide")

-- Stands in for an e-mail or chat message to the approver.
duroxide.activity("NotifyApprover", function(actx, req)
  actx:trace_info(string.format("approval needed for %q: duroxide-lua raise %s approved '{\"by\":\"ann\"}'",
                                tostring(req.request), actx.instance_id))
  return true
end)

duroxide.orchestration("Approval", function(ctx, input)
  input = input or {}
  local request = input.request or "request"
  local timeout_ms = input.timeout_ms or 24 * 3600 * 1000

  -- Subscribe first: an "approved" raised while the notification is still being sent is
  -- then delivered to this wait instead of being dropped.
  local approval = ctx:schedule_wait("approved")
  ctx:set_custom_status({ state = "waiting for approval", request = request })
  assert(ctx:schedule_activity("NotifyApprover", { request = request }):await())

  local i, decision = ctx:select({ approval, ctx:schedule_timer(timeout_ms) })
  if i == 1 then
    decision = type(decision) == "table" and decision or {}
    ctx:set_custom_status({ state = "approved", request = request })
    return { approved = true, by = decision.by, request = request }
  end
  ctx:set_custom_status({ state = "timed out", request = request })
  return { approved = false, reason = "no approval within " .. timeout_ms .. " ms",
           request = request }
end)
