-- bf16.lua — the BF16 baseline on the Inkling-like model: no quantization anywhere, the reference
-- every recipe's loss is compared with.
local base = include "inkling2_small.lua"

return recipe(extend(base, {
  name = "bf16",
  description = "BF16 everywhere (the reference)",
  experts = { fwd = "bf16", bwd = "bf16", dispatch = "bf16", combine = "bf16" },
  layers = {},
}))
