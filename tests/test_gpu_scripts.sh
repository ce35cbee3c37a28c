#!/usr/bin/env bash
# test_gpu_scripts.sh — the GEMM variants tests/gpu/run.sh (make test-gpu) names for compute-sanitizer are variants
# build/gpu/test_gemm builds (its --list: the classes' chosen variants and the expert layer's, no GPU needed), so that a
# recipe or generator change that moves a class's representative fails here, on the CPU, and not on the device machine
# (2026-12-07: a BF16 variant named there stopped being its class's representative and make test-gpu failed).
# usage: tests/test_gpu_scripts.sh build/gpu/test_gemm [RUN_SH]   (from the repository root; RUN_SH: tests/gpu/run.sh)
set -u
TG=$1; RUN=${2:-tests/gpu/run.sh}
list=$("$TG" --list 2>&1) || { echo "  FAIL test_gemm --list: exit $?"; echo "test_gpu_scripts: 0 passed, 1 failed"; exit 1; }
names=$(awk '/for v in gemm_/ { f = 1 } f { print } f && /; do/ { exit }' "$RUN" | grep -oE 'gemm_[a-z0-9_]+')
pass=0; fail=0
n=$(wc -w <<<"$names")
[ "$n" -ge 5 ] && pass=$((pass + 1)) || { echo "  FAIL run.sh's sanitizer list: $n GEMM names found (the loop's form changed?)"; fail=$((fail + 1)); }
for v in $names; do
  if grep -qE "(^| )$v( |$)" <<<"$list"; then pass=$((pass + 1)); else echo "  FAIL $RUN names $v: test_gemm builds no such variant"; fail=$((fail + 1)); fi
done
echo "test_gpu_scripts: $pass passed, $fail failed ($n variants named)"
[ $fail -eq 0 ]
