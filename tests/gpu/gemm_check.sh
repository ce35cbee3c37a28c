#!/usr/bin/env bash
# tests/gpu/gemm_check.sh — the grouped GEMMs over the generator's kept set on the device machine: build/gpu/test_gemm
# (one variant of every class of the kept set of every shipped recipe's GEMM specs, their FP32 companions and pipe 0
# twins, the expert layer's GEMMs; balanced and skewed rows with an empty expert; FP64 reference, bit-exact fused
# epilogues), then a short summary. Run from the repository root with build/gpu/test_gemm built (make build/gpu/test_gemm;
# nothing else of build/ is needed). Extra arguments go to test_gemm (e.g. --only mxfp8xmxfp8_bf16_swiglu).
# The full log: $GEMM_CHECK_LOG (default /tmp/gemm_check.log). Exit 0 all passed, 1 a failure, 77 no GPU (SKIPPED).
set -u
log=${GEMM_CHECK_LOG:-/tmp/gemm_check.log}
[ -x build/gpu/test_gemm ] || { echo "gemm_check: no build/gpu/test_gemm (make build/gpu/test_gemm; run from the repository root)"; exit 2; }
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1
t0=$(date +%s)
timeout -s KILL 590 build/gpu/test_gemm "$@" > "$log" 2>&1
rc=$?
t1=$(date +%s)
# what failed: compiles, runs, bit-exact checks, classes
grep -E "COMPILE FAILED|FAIL" "$log" | grep -vE "^  (ok|meas|prob) " | head -40
grep -E "^  compiled" "$log" | grep -v "no spills, no wgmma advisories" | head -20 # ptxas / SASS problems
grep -E "^test_gemm: (.* kernels:|compiled .* kernels in|SASS|[0-9]+ classes (with|of))|^device:" "$log"
sed -n '/^test_gemm: per class/,$p' "$log" | grep -E "^  FAIL" | head -40
summary=$(grep -E "^test_gemm: [0-9]+ classes run" "$log" | tail -1)
case $rc in
  0) echo "gemm_check: PASSED in $((t1 - t0)) s: $summary (log: $log)";;
  77) echo "gemm_check: SKIPPED (not passed): $(grep SKIPPED "$log" | tail -1) (log: $log)";;
  137) echo "gemm_check: KILLED after $((t1 - t0)) s (timeout 590 s); the end of the log:"; tail -20 "$log";;
  *) echo "gemm_check: FAILED (exit $rc) in $((t1 - t0)) s: ${summary:-no summary line, the end of the log follows}"; [ -n "$summary" ] || tail -20 "$log";;
esac
exit $rc
