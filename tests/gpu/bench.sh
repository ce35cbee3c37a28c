#!/usr/bin/env bash
# tests/gpu/bench.sh — `make bench` on the device machine: the PyTorch peer first, then our kernels, in the
# same call; results (CSV) under $OUT when set, else build/.
set -u
FB=$1
dir=${OUT:-build}
if ! "$FB" info | grep -q '^gpu 0'; then echo "bench: SKIPPED (not passed): no GPU"; exit 77; fi
python3 tests/gpu/bench_peer.py "$dir/peer.txt" || echo "bench: the PyTorch peer failed; ratios will be missing"
build/gpu/bench --peer "$dir/peer.txt" --csv "$dir/bench.csv"
# the grouped GEMMs: shapes from test_gemm, the PyTorch peers on them, then ours (each variant checked first)
build/gpu/test_gemm --write-shapes "$dir/gemm_shapes.txt"
python3 tests/gpu/bench_gemm_peer.py "$dir/gemm_shapes.txt" "$dir/gemm_peer.txt" || echo "bench: the PyTorch GEMM peer failed; ratios will be missing"
build/gpu/test_gemm --bench "$dir/gemm_peer.txt" | sed -n '/== bench/,$p'
# one S1 MoE expert layer, forward + backward (bench_layer), against its PyTorch peers on the same routing: eager BF16
# and torchao's FP8-rowwise layer, each also under torch.compile (what a user would run); kernels from $FOURBIT_CACHE
# when it holds fourbit tune's winners. Layer 1 (NVFP4 forward) with --train-amax: the weights' amax handed over as
# AdamW's NVFP4 form leaves them, i.e. the layer as the train step runs it; layer 48 (MXFP8) has no amax pass.
cache=${FOURBIT_CACHE:+--cache $FOURBIT_CACHE}
for rt in balanced zipf; do build/gpu/bench_layer --routing $rt --routing-out "$dir/route_$rt.bin" --routing-only; done
python3 tests/gpu/bench_layer_peer.py --compile "$dir/layer_peer.txt" 8192 48 8 5120 2048 balanced="$dir/route_balanced.bin" zipf="$dir/route_zipf.bin" ||
  echo "bench: the PyTorch layer peer failed; ratios will be missing"
for rt in balanced zipf; do build/gpu/bench_layer --routing $rt $cache --train-amax --peer "$dir/layer_peer.txt" | grep -v '^  kernel'; done
build/gpu/bench_layer --layer 48 --routing balanced $cache --peer "$dir/layer_peer.txt" | grep -v '^  kernel'
