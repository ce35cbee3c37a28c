-- small_moe.lua — the Inkling 2 Small recipe on the "recipe of one's own" of issue 18: 6 layers, d_model 512,
-- d_ff 512, 16 experts top-2 (d_model and d_ff multiples of 128, as the GPU expert layer takes). tests/gpu/tune_train.sh
-- tunes it and then trains it with --device gpu --cache: no kernel may compile.
local base = include "inkling2_small.lua" -- tests/gpu/tune_train.sh copies it beside this file

return recipe(extend(base, {
  name = "small_moe",
  description = "inkling2_small's precision on a 6-layer, 16-expert model with d_model 512",
  model = { layers = 6, d_model = 512, d_ff = 512, experts = 16, top_k = 2, vocab = 1024, conv_width = 4 },
  parallel = { ep = 1 },
  batch = { tokens = 2048 },
}))
