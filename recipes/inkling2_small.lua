-- inkling2_small.lua — the end-to-end 4-bit recipe that trained Inkling 2 Small (docs/design.md).
-- 594B total / 17B active parameters, 48 layers, 384 experts, top-8.
-- The widths are not published: d_model 5120 and d_ff 2048 are the pair chosen for 594B total / 17B active
-- (not the model's confirmed shape). Counted for this model as written here: experts 48 x 384 x 3 x 5120 x
-- 2048 = 579.8B, untied embedding and LM head 2 x 200064 x 5120 = 2.05B, routers 0.09B: about 582B total,
-- and per token 48 x 8 x 31.5M + 2.05B + 0.09B = about 14.2B active. The rest of the published figures
-- sits in parts this model does not have (its token mixer is a short convolution, not attention).
return recipe {
  name = "inkling2_small",
  description = "NVFP4 expert forward (4/6 per-token activations, per-expert weights), last 1/6 in MXFP8, MXFP8 backward with SR requantization, NVFP4 dispatch, RHT-32 + S2F6 combine",
  seed = 20260101,
  model = { layers = 48, d_model = 5120, d_ff = 2048, experts = 384, top_k = 8, vocab = 200064, conv_width = 4 },
  parallel = { ep = 8 },          -- one rank of 8-way expert parallelism holds 48 experts (S1)
  batch = { tokens = 8192 },      -- tokens per rank per step: 8192 x top-8 = 65536 expert rows (S1)

  experts = {
    fwd = nvfp4 {
      act    = { outer = "token", four_over_six = true },   -- per-token outer scale, 4/6 block scales
      weight = { outer = "expert" },                        -- per-expert outer scale, plain 1x16 blocks
    },
    bwd = mxfp8 {
      grad  = { rounding = "sr" },   -- dY and dH quantized with stochastic rounding
      saved = { rounding = "sr" },   -- what the forward saved: dequant -> transpose -> MXFP8 with SR
    },
    dispatch = "fwd",                -- tokens travel already quantized as fwd.act says (NVFP4)
    combine = s2f6 { rht = 32 },     -- 32-point random Hadamard transform, int8/64 with E8M0 per 32
  },

  layers = {
    { range = last_fraction(1/6), note = "the last sixth of the layers: MXFP8 forward",
      fwd = mxfp8 { act = { rounding = "rn" }, weight = { rounding = "rn" } } },
  },

  tune = {
    gemm = {
      tile_m = { 64, 128, 256 }, tile_n = { 128, 192, 256 }, tile_k = { 64, 128, 768 },
      -- weights_bf16: true first, so the untuned default multiplies BF16 products; false (FP8 wgmma for MXFP8 x MXFP8,
      -- each k32 block promoted on the CUDA cores) is tried by the tuner: on the H200 it loses to BF16 products on every
      -- MXFP8 GEMM at S1 (the best FP8 variant about 0.6x their rate since its scale stagers were mended; BENCHMARKS.md)
      stages = { 2, 3, 4, 5, 6 }, cluster = { 1, 2 }, consumers = { 1, 2 }, weights_bf16 = { true, false },
      -- pipe 2: the next half k-block's A decoded while the previous one's wgmmas run (NVFP4 / MXFP8 x BF16 copy);
      -- on the H200 it gains with NVFP4 BF16 outputs and epilogues (+1..9%) and loses elsewhere (up to -14%): the tuner picks
      pipe = { 0, 2 },
      -- pingpong 1: the two consumer warpgroups take turns, a whole tile each, so that one's epilogue runs beside the
      -- other's main loop (the wgrads: K is an expert's rows, and each tile stores 64 KiB of FP32); with two consumers,
      -- where one warpgroup's registers hold the whole tile. On the H100 the tuner picked it for the wgrads until the
      -- 2-stage 128 x 256 tile below beat it; it still wins the w2 forward with the S2F6 epilogue (BENCHMARKS.md)
      pingpong = { 0, 1 },
      -- mma_k 96: the tcgen05 family's K = 96 NVFP4 MMAs (sm_103a; the generator prunes them on other archs and on MXFP8
      -- GEMMs), on 768-wide K tiles of which 2 stages fit; S1's K (5120, 2048) ends in a partial K tile
      mma_k = { 0, 96 },
      -- the generator prunes what does not fit (shared memory, registers) or is not written yet, and says why
      keep = function(v)
        -- K = 96 variants: tile_k 768 and 2 stages with it only, one CTA (tile_m 128) or the pair (256, cluster 2), and the
        -- parameters tcgen05 does not read at one value each
        if v.mma_k == 96 or v.tile_k == 768 then
          return v.mma_k == 96 and v.tile_k == 768 and v.stages == 2 and v.tile_m == 128 * v.cluster and v.consumers == 1
                 and v.weights_bf16 and v.pipe == 0 and v.pingpong == 0
        end
        -- 2 stages only for the tiles of which 3 do not fit: 128 x 256 (and larger) of an MXFP8 x BF16-copy GEMM (the
        -- dgrads and wgrads: 16 + 64 KiB a stage), where the two consumer warpgroups share each 64 KiB B tile; on the
        -- H100 it wins the wgrads, the w13 dgrad and the MXFP8 w13 forward (BENCHMARKS.md, twenty-first session)
        if v.stages == 2 then return v.tile_m * v.tile_n >= 128 * 256 end
        return v.tile_m * v.tile_n * v.stages <= 256 * 256 * 5
      end,
    },
    -- rows: rows per CTA (row-wise quantizers) or tile height (column-wise); cols: tile width
    -- stage: KiB of shared memory per warp that keep a row between the passes of the per-token 4/6 quantizer
    -- (0: none, pass 2 reads the row again through L1/L2); 8 holds 256 of the 320 blocks of a 5120-wide row, 10 all
    quant = { rows = { 8, 16, 32 }, cols = { 64, 128, 256 }, threads = { 128, 256 }, stage = { 0, 4, 8, 10 }, pair = { 0, 1 } },
    -- slots: the raw ring of NVFP4 sources (mx_col.cuh FB_SLOTS: raw tiles cp.async'd that many tiles ahead; 0: the
    -- register path); the generator prunes it on other sources, below 64 columns and past 48 KiB of shared memory
    -- half: the f16 tile of NVFP4 sources (mx_col.cuh FB_HALF: exact products e2m1 * sf, S_dec applied down the
    -- columns; 0: the FP32 tile); the generator prunes it on other sources, with slots and below 64 columns
    -- pair: the BF16 copies (the requantizers' kbf16, and bcopy in the quant family) stored by lane pairs as whole
    -- 32-byte sectors (1) or a lane's 64 bytes alone (0: half sectors a store; ncu on the H100 found both kernels
    -- L2-bound with DRAM at 26-46%, twenty-second session); the generator prunes it on every other kernel
    requant = { rows = { 32, 64, 128 }, cols = { 32, 64, 128 }, slots = { 0, 2, 4, 8 }, half = { 0, 1 }, pair = { 0, 1 } },
  },
}
