#!/usr/bin/env bash
# test_bench_layer.sh — build/gpu/bench_layer's host side on the fake CUDA driver (tests/gpu/mock_libcuda.c: device
# memory is host memory, kernels are the CPU references): one rank with its checks (two runs byte-identical, y
# against the FP64 layer), and two torchrun-style ranks whose layers exchange their payloads over the host mesh. The
# times mean nothing here; the device runs it for real (make bench).
# usage: tests/test_bench_layer.sh build/gpu/bench_layer build/mockcuda
set -u
BL=$1; MOCK=$2
pass=0; fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "  FAIL $*"; fail=$((fail + 1)); }
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
args="--tokens 256 --experts 8 --top-k 2 --d-model 256 --d-ff 128 --iters 2"
LD_LIBRARY_PATH=$MOCK "$BL" $args > "$W/one" 2>&1 && ok || { bad "one rank: exit $?"; tail -5 "$W/one"; }
[ "$(grep -c 'two runs byte-identical' "$W/one")" = 5 ] && grep -q 'unquantized operands: rel. Frobenius .* ok' "$W/one" && ok || { bad "one rank: checks"; grep '^check' "$W/one"; }
# one rank: the direct path (no exchange) and the exchange path forced on give the same bytes; the exchange path timed
grep -q '^check one rank: direct path = exchange path: y dx dW13 dW2 dtopk_w byte-identical (timed: the direct path' "$W/one" && ok \
  || { bad "one rank: direct vs exchange path"; grep '^check one rank' "$W/one"; }
# the launches of inkling2_small layer 1's step on each path (runtime/experts_gpu.c's orchestration: update with it)
grep -q '^kernels of the profiled step: .* (36 launches;' "$W/one" && ok || { bad "one rank: launches of the direct path"; grep '^kernels of' "$W/one"; }
FOURBIT_GPU_EXCHANGE=1 LD_LIBRARY_PATH=$MOCK "$BL" $args > "$W/onex" 2>&1 && ok || { bad "one rank, exchange path: exit $?"; tail -5 "$W/onex"; }
grep -q '^check one rank: direct path = exchange path: .* byte-identical (timed: the exchange path' "$W/onex" && \
  grep -q '^kernels of the profiled step: .* (59 launches;' "$W/onex" && ok || { bad "one rank, exchange path: checks"; grep -E '^check one|^kernels of' "$W/onex"; }
# NVFP4 dispatch rows of 256 values: 128 code bytes + 16 E4M3 scales + 4 (the FP32 outer scale) = 148 B
grep -qE '^EXCHANGE dispatch: ours .* 512 rows x 148 B \(nvfp4 payload: 0.2891 of BF16\)' "$W/one" && ok || { bad "one rank: exchange line"; grep EXCHANGE "$W/one"; }
port=$((29700 + RANDOM % 200))
pids=()
for r in 0 1; do
  WORLD_SIZE=2 RANK=$r LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port LD_LIBRARY_PATH=$MOCK \
    "$BL" --tokens 256 --experts 4 --top-k 2 --d-model 256 --d-ff 128 --iters 2 > "$W/r$r" 2>&1 &
  pids+=($!)
done
wait "${pids[0]}"; rc0=$?; wait "${pids[1]}"; rc1=$?
[ $rc0 = 0 ] && [ $rc1 = 0 ] && ok || { bad "two ranks: exit $rc0 / $rc1"; tail -5 "$W/r0" "$W/r1"; }
[ "$(grep -c 'two runs byte-identical' "$W/r0")" = 5 ] && grep -q '^RESULT_EP ranks=2' "$W/r0" && grep -q 'skipped with 2 ranks' "$W/r0" && ok \
  || { bad "two ranks: rank 0's report"; grep -E '^check|RESULT' "$W/r0"; }
[ ! -s "$W/r1" ] && ok || { bad "rank 1 printed (rank 0 alone speaks)"; head -3 "$W/r1"; }
echo "test_bench_layer.sh: $pass passed, $fail failed"
[ $fail -eq 0 ]
