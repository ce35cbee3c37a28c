-- tiny.lua — the Inkling 2 Small recipe, precision for precision, on a model that trains on a CPU in a
-- minute: for the demo and the tests. 6 layers, so last_fraction(1/6) is layer 6 alone.
local base = include "inkling2_small.lua"

return recipe(extend(base, {
  name = "tiny",
  description = "inkling2_small's precision on a 6-layer, 8-expert model for CPU runs",
  model = { layers = 6, d_model = 128, d_ff = 64, experts = 8, top_k = 2, vocab = 256, conv_width = 4 },
  parallel = { ep = 1 },
  batch = { tokens = 256 },
}))
