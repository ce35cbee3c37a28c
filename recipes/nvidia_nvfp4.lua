-- nvidia_nvfp4.lua — NVIDIA's NVFP4 pretraining recipe ("Pretraining Large Language Models with NVFP4",
-- arXiv 2509.25149) applied to the Inkling-like model, so the two recipes compare on one shape:
-- NVFP4 forward and backward with one FP32 outer scale per tensor, 16x16 2D blocks for weights (the
-- transposed weight has the same codes), stochastic rounding on gradients, a 16-point random Hadamard
-- transform on the wgrad operands, and the last ~15% of the layers in BF16. Communication stays BF16.
local base = include "inkling2_small.lua"

return recipe(extend(base, {
  name = "nvidia_nvfp4",
  description = "NVIDIA NVFP4: per-tensor outer scales, 2D weights, SR gradients, RHT-16 wgrad, last 15% BF16",
  experts = {
    fwd = nvfp4 {
      act    = { outer = "tensor" },
      weight = { outer = "tensor", two_d = true },
    },
    bwd = nvfp4 {
      grad  = { outer = "tensor", rounding = "sr" },
      saved = { outer = "tensor", rounding = "rn" },
      wgrad_rht = 16,
    },
    dispatch = "bf16",
    combine = "bf16",
  },
  layers = {
    { range = last_fraction(0.15), note = "the last ~15% of the layers in BF16",
      fwd = "bf16", bwd = "bf16", dispatch = "bf16" },
  },
}))
