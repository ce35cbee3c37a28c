#!/usr/bin/env bash
# tests/gpu/tune_train.sh — train start after a tune, on the device machine: `fourbit tune` of inkling2_small (the S1
# layer's recipe) and of tests/gpu/recipes/small_moe.lua (6 layers, d_model 512, d_ff 512, 16 experts top-2) into
# fresh caches, where no candidate may fail its check; then `fourbit train small_moe --device gpu --cache` and
# bench_layer (S1) with the inkling2_small cache, which must compile no kernel with NVRTC (every kernel the runtime
# runs is a plan kernel: tests/gpu/test_names.c checks that on the fake driver).
#   bash tests/gpu/tune_train.sh build/fourbit [LOGDIR]
# Exit 0 passed, 1 failed, 77 skipped (no GPU).
set -u
FB=$1
LOG=${2:-/tmp/tune_train}
mkdir -p "$LOG"
if ! "$FB" info | grep -q '^gpu 0'; then echo "tune_train: SKIPPED (not passed): no GPU"; exit 77; fi
d=$(mktemp -d)
cp recipes/inkling2_small.lua tests/gpu/recipes/small_moe.lua "$d"/
fail=0
for r in recipes/inkling2_small.lua "$d"/small_moe.lua; do
  n=$(basename "$r" .lua)
  t0=$(date +%s)
  "$FB" tune "$r" --cache "$d/cache_$n" --jobs 16 > "$LOG/tune_$n.log" 2>&1
  trc=$?
  # a failed candidate is one line '  VARIANT: STATUS: why' (tuner/tune.c fail_cand)
  bad=$(grep -cE '^  [a-z0-9_]+: (wrong|fault|timeout|compile-failed): ' "$LOG/tune_$n.log")
  cands=$(grep -E '^compiled [0-9]+' "$LOG/tune_$n.log" | head -1)
  echo "tune $n: exit $trc in $(( $(date +%s) - t0 )) s; $cands; failed candidates: $bad"
  grep -E '^  [a-z0-9_]+: (wrong|fault|timeout|compile-failed): ' "$LOG/tune_$n.log" | cut -c1-220 | head -20
  grep -E '^[0-9]+ winners stored' "$LOG/tune_$n.log"
  [ "$bad" -eq 0 ] || fail=1
done
# the train start: the expert layer's and the resident step's NVRTC compiles (kernel summary lines, cli/train.c)
"$FB" train "$d"/small_moe.lua --device gpu --cache "$d/cache_small_moe" --steps 3 > "$LOG/train_small_moe.log" 2>&1 || { tail -20 "$LOG/train_small_moe.log"; fail=1; }
ce=$(sed -n 's/^kernels: [0-9]* ([0-9]* from the cache: .*; \([0-9][0-9]*\) compiled with NVRTC.*/\1/p' "$LOG/train_small_moe.log")
cs=$(sed -n 's/^train step kernels: [0-9]* ([0-9]* from the cache, \([0-9][0-9]*\) compiled.*/\1/p' "$LOG/train_small_moe.log")
grep -E '^(kernels|train step kernels):' "$LOG/train_small_moe.log"
echo "train small_moe --cache: expert layer compiled ${ce:-?}, resident step compiled ${cs:-?}"
[ "${ce:-x}" = 0 ] && [ "${cs:-x}" = 0 ] || fail=1
# LAYER_PEER: the eager PyTorch layer's times (tests/gpu/bench_layer_peer.py, as make bench makes them) to print beside
build/gpu/bench_layer --routing balanced --cache "$d/cache_inkling2_small" ${LAYER_PEER:+--peer "$LAYER_PEER"} > "$LOG/bench_layer_cache.log" 2>&1 || { tail -20 "$LOG/bench_layer_cache.log"; fail=1; }
grep -v '^  kernel' "$LOG/bench_layer_cache.log" | tail -25
cb=$(sed -n 's/^kernels: .*; \([0-9][0-9]*\) compiled with NVRTC.*/\1/p' "$LOG/bench_layer_cache.log")
grep -E '^kernels:' "$LOG/bench_layer_cache.log"
echo "bench_layer S1 --cache: compiled ${cb:-?}"
[ "${cb:-x}" = 0 ] || fail=1
echo "$d" > "$LOG/cache_dir"
[ $fail -eq 0 ] && echo "tune_train: passed" || { echo "tune_train: FAILED"; exit 1; }
