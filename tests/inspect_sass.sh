#!/usr/bin/env bash
# inspect_sass.sh — `make inspect`: the machine code of the generated kernels for every arch, read with
# cuobjdump (CUDA's, or the copy `pip install triton` brings): no local memory (LDL/STL: spills or stack
# arrays) in any kernel, and the conversion instructions we mean to use: F2FP...E4M3 (sm_89+, RN E4M3) and, on
# sm_100a/sm_103a, F2FP...E8...RP (the rounded-up E8M0 of MXFP8) and F2FP.SATFINITE.E2M1 (the E2M1 codes of every RN NVFP4
# quantizer, quant_nvfp4_* without _sr / _2d: templates/fb_cvt.h; on no other arch); every wgmma GEMM (gemm_*, sm_90a) runs its products
# on the tensor cores (HGMMA) and loads by TMA (UTMALDG), every portable one (gemm_*_mma_*, every arch) on mma.sync
# (HMMA, or QMMA for FP8 where the arch has it) with cp.async loads (LDGSTS), every tcgen05 one (gemm_*_tc_*, sm_100a /
# sm_103a) on the Blackwell tensor cores (UTCHMMA BF16, UTCQMMA MXFP8, UTCOMMA NVFP4) with TMA loads (UTMALDG), the
# MMA's commit (UTCBAR), TMEM loads (LDTM) and, block-scaled, the scale copies (UTCCP); its B-multicast form (gemm_*_tc_m128*_c2)
# the multicast TMA load (UTMALDG.2D.MULTICAST) and commit (UTCBAR.MULTICAST), no other form. Only sm_90a cubins have run (an H200):
# sm_89, sm_100a, sm_103a and sm_120a ones are only read, never run.
# Prints SKIPPED and exits 77 (never counted as passed) when no cuobjdump is found.
# usage: tests/inspect_sass.sh build/fourbit   (INSPECT_ARCHS: the archs; INSPECT_ONLY: fourbit gen --only, the kernel
# specs whose name has it, e.g. gemm_wgrad, and then only the per-kernel checks, not the per-arch counts)
set -u
FB=$1
CO=${CUOBJDUMP:-$(command -v cuobjdump || true)}
if [ -z "$CO" ]; then
  CO=$(python3 -c 'import triton, os; print(os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump"))' 2>/dev/null)
fi
[ -x "${CO:-/nonexistent}" ] || { echo "inspect: SKIPPED (not passed): no cuobjdump (pip install triton brings one)"; exit 77; }
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
ARCHS=${INSPECT_ARCHS:-sm_89 sm_90a sm_100a sm_103a sm_120a}
"$FB" gen recipes/inkling2_small.lua --arch "$(tr ' ' , <<<"$ARCHS")" --out "$W" ${INSPECT_ONLY:+--only "$INSPECT_ONLY"} > "$W/log" 2>&1 ||
  { cat "$W/log"; exit 1; }
fail=0; n=0; ng=0; nm=0; nt=0
printf '%-8s %8s %10s %10s %10s %10s %8s %8s %8s\n' arch cubins "local mem" "E4M3 cvt" "E8M0 cvt" "E2M1 cvt" "wgmma" "tcgen05" "mma"
for arch in $ARCHS; do
  nl=0; ne4=0; ne8=0; ne2=0; nc=0; gw=0; gm=0; gt=0
  for c in "$W"/*.$arch.cubin; do
    s=$("$CO" -sass "$c")
    nc=$((nc+1))
    if grep -qE '\b(LDL|STL)\b' <<<"$s"; then
      case $arch/$(basename "$c") in
      # the one known exception, said each time: dense.cuh's cross entropy is FP64 to match the host reference, and on
      # sm_120a (consumer Blackwell, slow FP64) ptxas 13.0 gives libdevice's exp an 8-byte stack frame (8 bytes spilled)
      sm_120a/dense_*)
        fns=$(awk '/Function :/ { f = $NF } /[^A-Z](LDL|STL)[. ]/ { print f }' <<<"$s" | sort -u | tr '\n' ' ')
        if [[ "$fns" =~ ^[A-Za-z0-9_]+_ce\ $ ]]; then echo "  local memory in $(basename "$c"), $fns(known: _ce's FP64 exp on sm_120a; not counted)"
        else nl=$((nl+1)); echo "  local memory in $(basename "$c"): $fns"; fi ;;
      *) nl=$((nl+1)); echo "  local memory in $(basename "$c")" ;;
      esac
    fi
    grep -q 'F2FP.SATFINITE.E4M3' <<<"$s" && ne4=$((ne4+1))
    grep -qE 'F2FP.*E8.*RP' <<<"$s" && ne8=$((ne8+1))
    e2=0; grep -q 'F2FP.SATFINITE.E2M1' <<<"$s" && e2=1 && ne2=$((ne2+1))
    case $arch/$(basename "$c") in
    sm_100a/quant_nvfp4_*_sr_*|sm_103a/quant_nvfp4_*_sr_*|sm_100a/quant_nvfp4_*_2d_*|sm_103a/quant_nvfp4_*_2d_*) ;;
    sm_100a/quant_nvfp4_*|sm_103a/quant_nvfp4_*) [ $e2 = 1 ] || { echo "  no E2M1 conversion in $(basename "$c")"; fail=1; } ;;
    sm_100a/*|sm_103a/*) ;;
    *) [ $e2 = 0 ] || { echo "  an E2M1 conversion instruction on $arch: $(basename "$c")"; fail=1; } ;;
    esac
    case $(basename "$c") in
    gemm_*_tc_m*)
      gt=$((gt+1))
      case $arch in sm_100a|sm_103a) ;; *) echo "  a tcgen05 GEMM for $arch: $(basename "$c")"; fail=1 ;; esac
      case $(basename "$c") in *nvfp4x*) mma=UTCOMMA ;; *mxfp8x*) mma=UTCQMMA ;; *) mma=UTCHMMA ;; esac
      for ins in $mma UTMALDG UTCBAR LDTM; do grep -q "$ins" <<<"$s" || { echo "  no $ins in $(basename "$c")"; fail=1; }; done
      [ $mma = UTCHMMA ] || grep -q UTCCP <<<"$s" || { echo "  no UTCCP (the scale factors' copy) in $(basename "$c")"; fail=1; }
      grep -qE '\b(HGMMA|HMMA|QMMA)\.' <<<"$s" && { echo "  a wgmma / mma.sync instruction in $(basename "$c")"; fail=1; }
      case $(basename "$c") in
      gemm_*_tc_m128*_c2.*|gemm_*_tc_m128*_c2_*) for ins in UTMALDG.2D.MULTICAST UTCBAR.MULTICAST; do grep -q "$ins" <<<"$s" || { echo "  no $ins in $(basename "$c")"; fail=1; }; done ;;
      *) grep -qE 'UTMALDG[.A-Z0-9]*MULTICAST|UTCBAR.MULTICAST' <<<"$s" && { echo "  a multicast TMA or 1-CTA commit in $(basename "$c")"; fail=1; } ;;
      esac ;;
    gemm_*_mma_*)
      gm=$((gm+1))
      { grep -qE '\b(HMMA|QMMA)\.' <<<"$s" && grep -q 'LDGSTS' <<<"$s" && ! grep -q 'GMMA' <<<"$s"; } ||
        { echo "  no HMMA / QMMA or no LDGSTS (or a GMMA) in $(basename "$c")"; fail=1; } ;;
    gemm_*)
      gw=$((gw+1))
      [ $arch = sm_90a ] || { echo "  a wgmma GEMM for $arch: $(basename "$c")"; fail=1; }
      # MXFP8 x MXFP8 on FP8 wgmma (weights_bf16 false, _b0) multiplies E4M3 operands: QGMMA; every other one HGMMA
      case $(basename "$c") in *mxfp8xmxfp8*_b0*) mma=QGMMA ;; *) mma=HGMMA ;; esac
      { grep -q "$mma" <<<"$s" && grep -q 'UTMALDG' <<<"$s"; } || { echo "  no $mma or no UTMALDG in $(basename "$c")"; fail=1; } ;;
    esac
  done
  printf '%-8s %8d %10d %10d %10d %10d %8d %8d %8d\n' $arch $nc $nl $ne4 $ne8 $ne2 $gw $gt $gm
  ng=$((ng+gw)); nm=$((nm+gm)); nt=$((nt+gt)); n=$((n+nc))
  [ $nl -eq 0 ] || fail=1
  [ -z "${INSPECT_ONLY:-}" ] || continue
  case $arch in sm_100a|sm_103a) [ $gt -gt 0 ] || { echo "  no tcgen05 GEMM for $arch"; fail=1; } ;; esac
  [ $gm -gt 0 ] || { echo "  no portable GEMM for $arch"; fail=1; }
  [ $ne4 -gt 0 ] || { echo "  no E4M3 conversion instruction in any $arch kernel"; fail=1; }
  case $arch in
  sm_100a|sm_103a) [ $ne8 -gt 0 ] || { echo "  no E8M0 conversion instruction in any $arch kernel"; fail=1; } ;;
  sm_89|sm_90a) [ $ne8 -eq 0 ] || { echo "  an E8M0 conversion instruction on $arch?"; fail=1; } ;;
  esac
done
grep -E '^sm_[0-9a]+: GEMM families' "$W/log"
[ $fail -eq 0 ] && echo "inspect: $n cubins read ($ng wgmma GEMMs with HGMMA and TMA, $nt tcgen05 ones with UTC*MMA, TMA and TMEM loads (compiled, never run on a Blackwell GPU), $nm portable ones with HMMA / QMMA and cp.async), as expected" ||
  { echo "inspect: FAILED"; exit 1; }
