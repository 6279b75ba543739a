-- Argo CD health check for serving.vllm-operator.dev/VLLMService (Lua 5.1, as Argo CD runs).
-- Install: argocd-cm key `resource.customizations.health.serving.vllm-operator.dev_VLLMService`
-- (docs/argocd-application.yaml shows it). Reads only status.observedGeneration and the
-- metav1-style conditions the operator writes (Ready, Progressing, Degraded):
--   status not yet written for this generation -> Progressing (the operator has not acted yet)
--   Degraded=True (a crash loop, an image that cannot be pulled, an invalid spec, a
--   benchmark rollback, a refused or foreign child: ChildrenSynced=False says which;
--   never a failed read)                      -> Degraded, with the condition's message
--   Ready=False, reason ScaledToZero           -> Suspended (replicas: 0 on purpose)
--   Progressing=True, reason Canary or Baking  -> Progressing (a new revision is measured on
--                                                its canary, or bakes on live traffic beside
--                                                the stable pods, which serve meanwhile)
--   Ready=True                                 -> Healthy
--   Progressing=False, ProgressDeadlineExceeded -> Degraded
--   anything else                              -> Progressing (a rollout under way)
local hs = { status = "Progressing", message = "Waiting for the operator to reconcile" }

local function condition(conditions, kind)
  if conditions == nil then return nil end
  for _, c in ipairs(conditions) do
    if c.type == kind then return c end
  end
  return nil
end

local function msg(c, fallback)
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    if c.reason ~= nil and c.reason ~= "" then return c.reason .. ": " .. c.message end
    return c.message
  end
  return fallback
end

if obj.status == nil then
  return hs
end
local generation = obj.metadata.generation
local observed = obj.status.observedGeneration
if generation ~= nil and (observed == nil or observed < generation) then
  hs.message = "Waiting for the operator to observe generation " .. tostring(generation)
  return hs
end

local conditions = obj.status.conditions
local ready = condition(conditions, "Ready")
local progressing = condition(conditions, "Progressing")
local degraded = condition(conditions, "Degraded")

if degraded ~= nil and degraded.status == "True" then
  hs.status = "Degraded"
  hs.message = msg(degraded, "Degraded")
  return hs
end
if ready ~= nil and ready.status == "False" and ready.reason == "ScaledToZero" then
  hs.status = "Suspended"
  hs.message = msg(ready, "Scaled to zero")
  return hs
end
if progressing ~= nil and progressing.status == "True"
    and (progressing.reason == "Canary" or progressing.reason == "Baking") then
  hs.message = msg(progressing, "A new revision is measured on its canary")
  return hs
end
if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = msg(ready, "Ready")
  return hs
end
if progressing ~= nil and progressing.status == "False"
    and progressing.reason == "ProgressDeadlineExceeded" then
  hs.status = "Degraded"
  hs.message = msg(progressing, "Progress deadline exceeded")
  return hs
end
if ready ~= nil then
  hs.message = msg(ready, hs.message)
elseif progressing ~= nil then
  hs.message = msg(progressing, hs.message)
end
return hs
