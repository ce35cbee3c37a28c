#!/usr/bin/env bash
# test_tune.sh — `fourbit tune` on the CPU: --dry-run (lists what it would compile and measure, needs no GPU), the
# real worker without a GPU (says so, exit 1), and whole sweeps with the emulated worker (build/emu/fourbit-worker:
# the GPU harness's checks under the warp emulator, and the tcgen05 GEMMs' under the functional model of the Blackwell
# instructions, timed by the wall clock, which means nothing): winners and
# trials in the cache, nothing compiled twice, a variant made to fault (FOURBIT_TUNE_FAULT) kills its worker without
# ending the sweep and is not retried by the next one; bad usage (exit 2). Checks read exit codes, the cache (cache
# verify's counts, cache show's fields), the tables' fields and the numbers of the summary lines, not sentences.
# usage: tests/test_tune.sh build/fourbit   (from the repository root: the emulator compiles against templates/)
set -u
FB=$1
EMU=$(dirname "$FB")/emu/fourbit-worker
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
pass=0; fail=0
ok() { pass=$((pass+1)); }
bad() { fail=$((fail+1)); echo "  FAIL: $*"; }
# the numbers of FILE's first line starting with LABEL (paths under $W and words aside)
nums() { grep -m1 "^$2" "$1" | sed "s|$W/[^ :]*||g" | tr ' (),;:' '\n' | grep -xE '[0-9]+(\.[0-9]+)?' | tr '\n' ' '; }
# cache verify's counts: "Nk Bk Nw Bw Nt Bt rc" (entries and bad entries of kernels, winners, trials; verify's status)
counts() { "$FB" cache verify --cache "$1" > "$W/vc" 2>&1; local rc=$?
  awk -v rc=$rc '$3 == "entries," { c[$1] = $2 " " $4 } END { print c["kernels"], c["winners"], c["trials"], rc }' "$W/vc"; }

"$FB" tune recipes/tiny.lua --dry-run --cache "$W/none" > "$W/dry" 2>&1 && ok || { bad "dry-run"; cat "$W/dry"; }
# the table: a row per spec (template, variants, cached, to compile, shape), its variants below it, the default
# first; the closing line's first numbers: variants to compile, of how many, how many in the cache (the table's sums)
nv=$(awk '$2 ~ /\.cuh$/ { n += $3 } END { print n }' "$W/dry")
grep -qE "^quant_mxfp8_sr_row_sm90a +quant_mxfp8.cuh +2 +0 +2 +512 x 128" "$W/dry" \
  && awk '$1 == "quant_mxfp8_sr_row_sm90a_t128" && $2 == "(default)" { f = 1 } END { exit !f }' "$W/dry" \
  && [ "$nv" -gt 0 ] && [ "$(nums "$W/dry" would | cut -d' ' -f1-3)" = "$nv $nv 0" ] && ok || { bad "dry-run listing"; cat "$W/dry"; }
[ ! -e "$W/none" ] && ok || bad "dry-run created a cache"
"$FB" tune recipes/inkling2_small.lua --dry-run --shapes 4096,8192,6000 > "$W/dry2" 2>&1 && [ "$(nums "$W/dry2" "shape buckets")" = "4096 8192 " ] \
  && grep -qE "^router_top8_e384_sm90a .* 4096 x 384" "$W/dry2" && ok || { bad "dry-run buckets"; cat "$W/dry2"; }
if [ -z "$(ls /usr/lib/x86_64-linux-gnu/libcuda.so.1 /usr/lib64/libcuda.so.1 2>/dev/null)" ]; then
  "$FB" tune recipes/tiny.lua --cache "$W/c0" > "$W/nogpu" 2>&1; rc=$?
  [ $rc -eq 1 ] && grep -q 'libcuda\.so\.1' "$W/nogpu" && [ ! -e "$W/c0" ] && ok || { bad "without a GPU: exit $rc"; cat "$W/nogpu"; }
fi

# a sweep of one spec on the emulated worker
export FOURBIT_TUNE_WORKER=$EMU
"$FB" tune recipes/tiny.lua --only quant_mxfp8_sr_row --cache "$W/c" --jobs 2 > "$W/s1" 2>&1 && ok || { bad "emulated sweep"; cat "$W/s1"; }
# "compiled N, C from the cache, F failed, ...": 2 0 0
grep -qE "^quant_mxfp8_sr_row_sm90a +256 +[0-9.]+ +[0-9.]+ +[0-9.]+x +t(128|256) +t(128|256) \([0-9.]+\) +2 +0$" "$W/s1" \
  && [ "$(nums "$W/s1" "compiled " | cut -d' ' -f1-3)" = "2 0 0" ] && ok || { bad "summary row"; cat "$W/s1"; }
[ "$(counts "$W/c")" = "2 0 1 0 2 0 0" ] && ok || { bad "cache after the sweep"; cat "$W/vc"; }
# show: the fingerprint is the emulated worker's device; the default variant
"$FB" cache show quant_mxfp8_sr_row --cache "$W/c" > "$W/show" && awk '$1 == "fingerprint" && /warp emulator/ { f = 1 } END { exit !f }' "$W/show" \
  && [ "$(awk '$1 == "default" { print $2 }' "$W/show")" = quant_mxfp8_sr_row_sm90a_t128 ] && ok || { bad "cache show after the sweep"; cat "$W/show"; }
"$FB" tune recipes/tiny.lua --only quant_mxfp8_sr_row --cache "$W/c" --jobs 2 --strategy halving > "$W/s2" 2>&1 \
  && [ "$(nums "$W/s2" "compiled " | cut -d' ' -f1-3)" = "0 2 0" ] && ok || { bad "second sweep compiled again"; cat "$W/s2"; }

# the faulting-variant hook: quant_nvfp4_4o6_tok_row has 18 variants (rows x threads, and the shared-memory stages
# that fit: 0, 4, 8, 10 KiB a warp at 128 threads, 0 and 4 at 256); the six of 32 rows fault and kill their workers
F=quant_nvfp4_4o6_tok_row_sm90a_r32
FOURBIT_TUNE_FAULT=$F "$FB" tune recipes/tiny.lua --only quant_nvfp4_4o6_tok_row --cache "$W/c" --jobs 2 > "$W/f1" 2>&1; rc=$?
[ $rc -eq 0 ] && ok || { bad "the faulting sweep: exit $rc"; tail -20 "$W/f1"; }
# the worker names the hook and the variant each time it fires; the sweep reports each such variant's status: fault
[ "$(grep FOURBIT_TUNE_FAULT "$W/f1" | grep -c "$F")" = 6 ] && ok || bad "the hook did not fire six times"
grep -qE "${F}_t128: fault: " "$W/f1" && grep -qE "${F}_t256: fault: " "$W/f1" && ok || { bad "faults not reported"; cat "$W/f1"; }
# the summary row (18 candidates, 6 failed); "W winners stored in DIR (N without one); the worker was replaced R times":
# 1 winner, 0 without, R in 2..9
read -ra v <<<"$(nums "$W/f1" "[0-9]* winners stored")"
grep -qE "^quant_nvfp4_4o6_tok_row_sm90a +256 .* r(8|16)_t(128|256)(_s[0-9]+)? +r(8|16)_t(128|256)(_s[0-9]+)? .* 18 +6$" "$W/f1" \
  && [ "${v[0]}" = 1 ] && [ "${v[1]}" = 0 ] && [ "${v[2]}" -ge 2 ] && [ "${v[2]}" -le 9 ] && ok || { bad "the sweep did not finish around the faults"; tail -8 "$W/f1"; }
"$FB" cache show quant_nvfp4_4o6_tok_row --cache "$W/c" > "$W/fs" && [ "$(grep -cE "${F}_t(128|256)(_s[0-9]+)? +256 fault" "$W/fs")" = 6 ] \
  && [ "$(grep -cE "_sm90a_r(8|16)_t(128|256)(_s[0-9]+)? +256 ok" "$W/fs")" -ge 2 ] && ok || { bad "fault trials"; cat "$W/fs"; }
# the next sweep does not retry them
FOURBIT_TUNE_FAULT=$F "$FB" tune recipes/tiny.lua --only quant_nvfp4_4o6_tok_row --cache "$W/c" --jobs 2 > "$W/f2" 2>&1; rc=$?
read -ra v <<<"$(nums "$W/f2" "[0-9]* winners stored")"
[ $rc -eq 0 ] && ! grep -q FOURBIT_TUNE_FAULT "$W/f2" && [ "${v[2]:-}" = 0 ] \
  && ok || { bad "recorded failures were retried (exit $rc)"; tail -8 "$W/f2"; }
"$FB" cache verify --cache "$W/c" > /dev/null && ok || bad "verify after the faults"
# as a Blackwell GPU (FB_EMU_CC=10.0: the emulated worker plans sm_100a): the generator's tcgen05 GEMM sources, compiled
# as host C++, run under the functional model of the instructions (tests/emu/tc_model.h) through the tuner's own check
# (gemm_harness.c: the skewed grouped problem with an empty expert, NVFP4 x NVFP4 against the FP64 reference and the
# S2F6 payload's error) before they are timed: every candidate (4 single-CTA; launched as clusters of 2, 5 CTA-pair ones,
# one of them with 2 stages, and 4 with B multicast) passes, a tcgen05 winner is stored
FB_EMU_CC=10.0 "$FB" tune recipes/tiny.lua --only gemm_fwd_nvfp4xnvfp4_s2f6 --cache "$W/ctc" > "$W/stc" 2>&1 &&
  grep -qE "^gemm_fwd_nvfp4xnvfp4_s2f6_rht32_sm100a +256 .* tc_m(128|256)n128k64_s[0-9]_c[12] .* 13 +0$" "$W/stc" &&
  grep -q "arch sm_100a" "$W/stc" && ok || { bad "tcgen05 sweep under the model"; tail -5 "$W/stc"; }
# the MXFP8 quantizers as sm_100a: their E4M3 conversions go through the instruction's model (tests/emu/fb_cvt_model.h,
# fb_formats.h FBF_E4M3_MODEL), every candidate checked against the CPU reference (a ties-away model fails them all)
FB_EMU_CC=10.0 "$FB" tune recipes/tiny.lua --only quant_mxfp8_sr_row --cache "$W/cq" > "$W/sq" 2>&1 &&
  grep -qE "^quant_mxfp8_sr_row_sm100a +256 .* [1-9][0-9]* +0$" "$W/sq" && ok || { bad "sm_100a MXFP8 quantizers under the E4M3 model"; tail -5 "$W/sq"; }
unset FOURBIT_TUNE_WORKER

# bad usage
expect2() { "$FB" "$@" > /dev/null 2> "$W/err"; rc=$?; [ $rc -eq 2 ] && [ -s "$W/err" ] && ok || bad "$*: exit $rc"; }
expect2 tune
expect2 tune recipes/nope.lua --dry-run
expect2 tune recipes/tiny.lua --strategy annealing
expect2 tune recipes/tiny.lua --budget 0
expect2 tune recipes/tiny.lua --budget 5 --time 3
expect2 tune recipes/tiny.lua --shapes 12,x
expect2 tune recipes/tiny.lua --time -1
"$FB" tune --help > "$W/h" 2> "$W/he" && [ -s "$W/h" ] && [ ! -s "$W/he" ] && grep -qF "fourbit tune" "$W/h" && ok || bad "tune --help"
echo "test_tune.sh: $pass passed, $fail failed"
[ $fail -eq 0 ]
