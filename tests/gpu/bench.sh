#!/usr/bin/env bash
# tests/gpu/bench.sh — `make bench` on the device machine: the PyTorch peer first, then our kernels, in the
# same call; results (CSV) under $OUT when set, else build/.
set -u
FB=$1
dir=${OUT:-build}
if ! "$FB" info | grep -q '^gpu 0'; then echo "bench: SKIPPED (not passed): no GPU"; exit 0; fi
python3 tests/gpu/bench_peer.py "$dir/peer.txt" || echo "bench: the PyTorch peer failed; ratios will be missing"
build/gpu/bench --peer "$dir/peer.txt" --csv "$dir/bench.csv"
# the grouped GEMMs: shapes from test_gemm, the PyTorch peers on them, then ours (each variant checked first)
build/gpu/test_gemm --write-shapes "$dir/gemm_shapes.txt"
python3 tests/gpu/bench_gemm_peer.py "$dir/gemm_shapes.txt" "$dir/gemm_peer.txt" || echo "bench: the PyTorch GEMM peer failed; ratios will be missing"
build/gpu/test_gemm --bench "$dir/gemm_peer.txt" | sed -n '/== bench/,$p'
