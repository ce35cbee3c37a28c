-- mxfp8.lua — the MXFP8 baseline ("Recipes for Pre-training LLMs with MXFP8", arXiv 2506.08027) on the
-- Inkling-like model: E4M3 with one E8M0 scale (rounded up) per 32 values for every expert GEMM, forward
-- and backward; gradients with SR as in this project's backward; communication in BF16.
local base = include "inkling2_small.lua"

return recipe(extend(base, {
  name = "mxfp8",
  description = "MXFP8 expert GEMMs forward and backward, BF16 communication",
  experts = {
    fwd = mxfp8 { act = { rounding = "rn" }, weight = { rounding = "rn" } },
    bwd = mxfp8 { grad = { rounding = "sr" }, saved = { rounding = "sr" } },
    dispatch = "bf16",
    combine = "bf16",
  },
  layers = {},
}))
