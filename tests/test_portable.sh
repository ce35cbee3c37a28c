#!/usr/bin/env bash
# test_portable.sh — the GEMM families on the CPU and the fake driver (issue 20): which families each arch gets
# (fourbit info --arch, tune --dry-run --arch, plan --arch), and fourbit train --device gpu on GPUs of other archs
# (FB_MOCK_CC: the fake driver's compute capability): on sm_120a and sm_89 every kernel is planned, named and compiled
# for that arch and the GEMMs come from the portable family alone; the step's losses equal the sm_90a run's (the fake
# driver computes every kernel as its CPU reference, so this checks the plumbing, not the mma.sync kernels: those are
# checked on the H200 by tests/gpu/portable.sh). A GPU fourbit has no kernels for, and a family the arch lacks, are
# refused with exit 2 and named.
# usage: tests/test_portable.sh build/fourbit build/mockcuda
set -u
FB=$1
MOCK=$2
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
pass=0; fail=0
ok()  { pass=$((pass+1)); }
bad() { fail=$((fail+1)); echo "  FAIL: $*"; }
has() { grep -q -- "$2" "$1" && ok || { bad "$3: no '$2' in: $(head -c 400 "$1")"; }; }

# the families each arch gets
"$FB" info --arch sm_89 > "$W/i89" 2>&1 && ok || bad "info --arch sm_89 failed"
has "$W/i89" "arch sm_89: GEMM families mma " "info --arch sm_89"
"$FB" info --arch sm_80 > "$W/i80" 2>&1; [ $? = 2 ] && ok || bad "info --arch sm_80: not exit 2"
"$FB" tune recipes/inkling2_small.lua --dry-run --arch sm_120a --only gemm_wgrad --cache "$W/none" > "$W/d120" 2>&1 && ok || bad "tune --dry-run --arch sm_120a failed: $(tail -2 "$W/d120")"
has "$W/d120" "GEMM families tried on sm_120a: mma " "dry run sm_120a"
has "$W/d120" "families: mma [0-9]* (gemm_mma.cuh)" "dry run sm_120a"
grep -q "gemm_sm90.cuh" "$W/d120" && bad "dry run sm_120a lists a wgmma variant" || ok
"$FB" tune recipes/inkling2_small.lua --dry-run --only gemm_wgrad --cache "$W/none" > "$W/d90" 2>&1 && ok || bad "tune --dry-run failed"
has "$W/d90" "GEMM families tried on sm_90a: wgmma, mma " "dry run sm_90a"
has "$W/d90" "families: wgmma [0-9]* (gemm_sm90.cuh), mma [0-9]* (gemm_mma.cuh)" "dry run sm_90a"
"$FB" tune recipes/inkling2_small.lua --dry-run --arch sm_100a --only gemm_wgrad --cache "$W/none" > "$W/d100" 2>&1 && ok || bad "tune --dry-run --arch sm_100a failed"
has "$W/d100" "GEMM families tried on sm_100a: tcgen05, mma " "dry run sm_100a"
has "$W/d100" "families: tcgen05 [0-9]* (gemm_sm100.cuh), mma [0-9]* (gemm_mma.cuh)" "dry run sm_100a"
# sm_103a: the NVFP4 GEMMs' K = 96 variants (tile_k 768) fit S1's K of 5120 and 2048, which end in a partial K tile: one
# CTA and the pair at tile_n 128 for each of the two (tile_n 192 divides neither N)
"$FB" tune recipes/inkling2_small.lua --dry-run --arch sm_103a --only gemm_fwd_nvfp4xnvfp4 --cache "$W/none" > "$W/d103" 2>&1 && ok || bad "tune --dry-run --arch sm_103a failed"
[ "$(grep -cE "^ +gemm_fwd_nvfp4xnvfp4_(bf16_swiglu|s2f6_rht32)_sm103a_tc_m(128n128k768_s2_c1|256n128k768_s2_c2)_k96$" "$W/d103")" = 4 ] && ok ||
  bad "dry run sm_103a: not the 4 K = 96 variants at S1's K: $(grep -c _k96 "$W/d103")"
"$FB" tune recipes/tiny.lua --dry-run --arch sm_86 > "$W/d86" 2>&1; [ $? = 2 ] && ok || bad "tune --arch sm_86: not exit 2"
for a in sm_89 sm_100a sm_103a sm_120a; do # every GEMM of the plan has a template on every arch (no 'no template')
  "$FB" plan recipes/inkling2_small.lua --arch $a > "$W/p_$a" 2>&1 && ok || bad "plan --arch $a failed"
  [ "$(grep -c "^gemm_.*_${a/_/}" "$W/p_$a")" -ge 7 ] && ok || bad "plan --arch $a: fewer than 7 GEMM specs"
done

# fourbit tune as on a Blackwell GPU (FB_MOCK_CC 10.0; the fake driver computes each GEMM as its CPU reference, so this
# checks the path, not the tcgen05 kernels): every candidate is checked (the harness's NVFP4 x NVFP4 problem) before it
# is timed, 0 fail (the CTA-pair and B-multicast variants through cuLaunchKernelEx's clusters of 2), a tcgen05 winner
# is stored (1-CTA, pair or B multicast); and a tcgen05 variant that fails its check (FOURBIT_TUNE_WRONG) is never
# stored
FB_MOCK_CC=10.0 LD_LIBRARY_PATH=$MOCK "$FB" tune recipes/tiny.lua --only gemm_fwd_nvfp4xnvfp4_s2f6 --cache "$W/tc100" > "$W/tune100" 2>&1 &&
  grep -qE "^gemm_fwd_nvfp4xnvfp4_s2f6_rht32_sm100a +256 .* tc_m(128n[0-9]+k[0-9]+_s[0-9]+_c[12]|256n[0-9]+k[0-9]+_s[0-9]+_c2) .* ([0-9]+) +0$" "$W/tune100" && ok ||
  bad "tune on a fake sm_100a: $(tail -4 "$W/tune100")"
FOURBIT_TUNE_WRONG=_tc_m FB_MOCK_CC=10.0 LD_LIBRARY_PATH=$MOCK "$FB" tune recipes/tiny.lua --only gemm_fwd_nvfp4xnvfp4_s2f6 \
  --cache "$W/tc100w" > "$W/tune100w" 2>&1 && bad "tune with every tcgen05 variant wrong: exit 0" || ok
grep -qE "no candidate passed +([0-9]+) +\1$" "$W/tune100w" && grep -q "0 winners stored" "$W/tune100w" && ok ||
  bad "tune with every tcgen05 variant wrong: $(tail -4 "$W/tune100w")"

# train on the fake driver as GPUs of other archs
train() { # name cc [args...]
  local n=$1 cc=$2; shift 2
  FB_MOCK_CC=$cc LD_LIBRARY_PATH=$MOCK "$FB" train recipes/tiny.lua --device gpu --d-ff 128 --steps 2 "$@" > "$W/$n.out" 2> "$W/$n.err"
  echo $? > "$W/$n.rc"
}
train t90 9.0
train t120 12.0
train t89 8.9
train t120w 12.0 --pick wgmma
train t86 8.6
MOCK_V=1 train t100 10.0
MOCK_V=1 train t103 10.3
MOCK_V=1 train t100m 10.0 --pick mma
train tbad 9.0 --pick tcgen
for n in t90 t120 t89 t100 t103 t100m; do
  [ "$(cat "$W/$n.rc")" = 0 ] && ok || bad "$n: exit $(cat "$W/$n.rc"): $(tail -2 "$W/$n.err")"
done
l90=$(grep '^step     2/2' "$W/t90.out" | awk '{print $4}')
for n in t120 t89 t100 t103 t100m; do
  l=$(grep '^step     2/2' "$W/$n.out" | awk '{print $4}')
  [ -n "$l90" ] && [ "$l" = "$l90" ] && ok || bad "$n: step 2 loss '$l', sm_90a's '$l90'"
  grep -q "unplanned\|the plan does not name" "$W/$n.out" && bad "$n: kernels the plan does not name" || ok
done
# sm_100a: the GEMMs from the tcgen05 family (gemm_sm100.cuh), B taken as the quantized operand itself: no BF16 copy
# (bcopy) launched; with --pick mma the portable family's
grep -q "launch gemm_.*_sm100a_tc_m" "$W/t100.err" && ok || bad "sm_100a: no tcgen05 GEMM launched"
grep -q "launch gemm_.*_sm100a_mma_" "$W/t100.err" && bad "sm_100a: a portable GEMM launched by default" || ok
grep -q "launch bcopy_" "$W/t100.err" && bad "sm_100a: a BF16 copy launched beside tcgen05 GEMMs" || ok
grep -q "launch gemm_.*_sm100a_tc_m" "$W/t100m.err" && bad "sm_100a --pick mma: a tcgen05 GEMM launched" || ok
grep -q "launch gemm_.*_sm103a_tc_m" "$W/t103.err" && ok || bad "sm_103a: no tcgen05 GEMM launched"
[ "$(cat "$W/t120w.rc")" = 2 ] && ok || bad "--pick wgmma on sm_120a: exit $(cat "$W/t120w.rc")"
has "$W/t120w.err" "gemm_.*_sm120a: no variant of the GEMM family 'wgmma'" "--pick wgmma on sm_120a"
[ "$(cat "$W/t86.rc")" = 2 ] && ok || bad "sm_86: exit $(cat "$W/t86.rc")"
has "$W/t86.err" "is sm_86: fourbit generates kernels for" "sm_86"
[ "$(cat "$W/tbad.rc")" = 2 ] && ok || bad "--pick tcgen: exit $(cat "$W/tbad.rc")"
has "$W/tbad.err" "not a GEMM family" "--pick tcgen"
"$FB" train recipes/tiny.lua --pick mma --steps 1 > "$W/cpu.out" 2> "$W/cpu.err"; [ $? = 2 ] && ok || bad "--pick without --device gpu: not exit 2"

echo "test_portable.sh: $pass passed, $fail failed"
[ $fail -eq 0 ]
