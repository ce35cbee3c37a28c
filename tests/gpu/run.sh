#!/usr/bin/env bash
# tests/gpu/run.sh — `make test-gpu` on the device machine: every generated kernel and variant against the
# CPU reference (build/gpu/test_kernels), then compute-sanitizer memcheck and racecheck over one variant of
# each kernel spec (and of the requantizers' f16-tile and raw-ring forms). Where there is no GPU it says
# SKIPPED and exits 77, which never counts as passed.
set -u
FB=$1
info=$("$FB" info) || { echo "test-gpu: fourbit info failed"; exit 1; }
if ! grep -q '^gpu 0' <<<"$info"; then
  echo "test-gpu: SKIPPED (not passed): $(grep '^cuda' <<<"$info")"
  exit 77
fi
grep -E '^(gpu|nvrtc|fourbit)' <<<"$info"
fail=0
echo "== test_kernels (all specs, all variants, 3 input kinds x 2 draws)"
build/gpu/test_kernels || fail=1
echo "== test_gemm (grouped GEMMs, a covering set of the generator's kept variants, against the FP64 reference: balanced and skewed experts)"
timeout -s KILL 600 build/gpu/test_gemm > /tmp/test_gemm.log 2>&1 || fail=1
grep -vE "^  compiled" /tmp/test_gemm.log | tail -60
echo "== test_train_gpu (the GPU expert layer and a train step of tiny.lua against the CPU reference)"
timeout -s KILL 300 build/gpu/test_train_gpu || fail=1
echo "== test_train_dev (the GPU-resident train step against the host step; ms/step, tiny and mid-size)"
timeout -s KILL 400 build/gpu/test_train_dev || fail=1
if command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck; do
    echo "== compute-sanitizer --tool $tool (one GEMM variant of each operand kind, and two of the portable family)"
    # (with what each one's checks compare with: the FP32 companion of a fused epilogue, the pipe 0 twin)
    for v in gemm_fwd_bf16xbf16_bf16_sm90a_m128n256k64_s2_c1_w2 gemm_fwd_nvfp4_tenxnvfp4_ten_bf16_sm90a_m128n256k128_s3_c1_w2_b1 \
             gemm_dgrad_mxfp8xmxfp8_bf16_sm90a_m128n128k128_s3_c1_w2_b1_p2 gemm_wgrad_mxfp8xmxfp8_f32_sm90a_m128n128k128_s3_c1_w2_b1 gemm_wgrad_mxfp8xmxfp8_f32_sm90a_m128n256k128_s2_c1_w2_b1 \
             gemm_fwd_mxfp8xmxfp8_bf16_swiglu_sm90a_m128n128k128_s3_c1_w2_b1_p2 \
             gemm_fwd_nvfp4xnvfp4_s2f6_rht32_sm90a_mma_m128n128k128_s3_w2_b1_p2 gemm_wgrad_mxfp8xmxfp8_f32_sm90a_mma_m128n128k128_s3_w2_b0; do
      if ! timeout -s KILL 300 compute-sanitizer --tool $tool --error-exitcode 3 build/gpu/test_gemm --only $v > /tmp/csg_$tool.log 2>&1; then
        tail -20 /tmp/csg_$tool.log; echo "compute-sanitizer $tool test_gemm --only $v FAILED"; fail=1
      else grep -E "ERROR SUMMARY|RACECHECK SUMMARY|test_gemm:" /tmp/csg_$tool.log | tail -2; fi
    done
    # one variant of each spec (--quick: the first), then the requantizers' other forms of mx_col.cuh, whose first
    # variant is the FP32 tile: the f16 tile (_h1), the raw ring (_s2) and the BF16 copy's lane-pair stores (_p1)
    for sel in "" "--only requant --variant _h1" "--only requant --variant _s2" "--only kbf16 --variant _p1"; do
      echo "== compute-sanitizer --tool $tool (test_kernels --quick $sel: one input)"
      log=/tmp/cs_$tool${sel//[ -]/_}.log
      if compute-sanitizer --tool $tool --error-exitcode 3 build/gpu/test_kernels --quick $sel > $log 2>&1; then
        grep -E "ERROR SUMMARY|RACECHECK SUMMARY|test_kernels:" $log | tail -3
      else
        tail -30 $log; echo "compute-sanitizer $tool test_kernels --quick $sel FAILED"; fail=1
      fi
    done
  done
else
  echo "compute-sanitizer: not found: SKIPPED (not passed)"; fail=1
fi
[ $fail -eq 0 ] && echo "test-gpu: passed" || { echo "test-gpu: FAILED"; exit 1; }
