#!/usr/bin/env bash
# test_ep_gpu.sh — `fourbit train --device gpu --gpus N` (expert parallelism in the GPU expert layer,
# runtime/experts_gpu.c) on the fake CUDA driver (build/mockcuda/libcuda.so.1, tests/gpu/mock_libcuda.c): device memory
# is host memory and every kernel is its CPU reference, so N processes run the GPU layer's host side — the row counts,
# the per-plane all-to-all-v, the owner's regrouping, the way back — with runtime/comm.c carrying the device
# collectives over its host mesh (the fake driver says its memory is host memory; on GPUs they are NCCL's).
#
#   tiny_rn (tiny with an RN backward), --gpus 1 and 4, 3 steps: step 1's loss and aux identical to one rank's (the
#       forward is per token and the owner lays its rows out as one rank does), step 1's |g| within 1e-6 relative
#       (the expert gradients equal one rank's; the replicated ones are summed over ranks in another order), steps 2-3
#       within test_ep.c's tolerance for the CPU path (2e-3 on loss and aux, relative on |g|); the payload line equal
#       to the CPU path's (test_ep.sh), ~75% of it to other ranks at 4.
#   tiny (the recipe as written: SR backward), --gpus 2, 2 steps: step 1's loss and aux identical to one rank's; the
#       SR bits of the owner's backward operands are keyed by their one-rank index (the MXFP8 quantizers' SR maps: the
#       layer's outputs equal one rank's byte for byte at 2 and 4 ranks, tests/test_bench_layer.sh), but from step 2 on
#       the replicated gradients (summed over ranks in another order) move the masters apart: step 2 against
#       tiny_rn's one rank within 1e-2 (measured before the maps: 4.5e-4; SR vs RN on one rank 1.2e-3; a broken
#       expert backward is off by 0.1-1 nat).
# The launcher of --gpus N loads libnccl.so.2 and makes the NCCL unique id for its ranks (FOURBIT_NCCL_ID): the NCCL
# path loads; the ranks then find the fake driver and use the host mesh.
# Checks read exit codes, the CSV logs and the numbers of the labelled lines (payload, kernels, digests), not sentences.
# usage: tests/test_ep_gpu.sh build/fourbit build/mockcuda
set -u
FB=$1
MOCK=$2
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
pass=0; fail=0
ok()  { pass=$((pass+1)); }
bad() { fail=$((fail+1)); echo "  FAIL: $*"; }
cp recipes/*.lua "$W/"
cat > "$W/tiny_rn.lua" <<'EOF'
return recipe(extend(include "tiny.lua", { name = "tiny_rn", experts = { bwd = mxfp8 {
  grad = { rounding = "rn" }, saved = { rounding = "rn" } } } }))
EOF
run() { # name recipe gpus stop (FOURBIT_TRAIN_HOST passes through the environment)
  LD_LIBRARY_PATH=$MOCK "$FB" train "$2" --device gpu --d-ff 128 --gpus "$3" --steps 20 --stop-at "$4" --verbose \
    --log "$W/$1.csv" > "$W/$1.out" 2> "$W/$1.err" || bad "$1 (--gpus $3) failed: $(tail -3 "$W/$1.err")"
  [ "$(grep -c '^step ' "$W/$1.out")" = "$4" ] && ok || bad "$1: $(grep -c '^step ' "$W/$1.out") step lines, expected $4"
}
# largest |a - b| of CSV column c over the common steps (rel = 1: relative to a)
maxd() { paste -d, "$W/$1.csv" "$W/$2.csv" | awk -F, -v c="$3" -v rel="${4:-0}" \
  'NR > 1 && $(c + 9) != "" { d = $c - $(c + 9); if (d < 0) d = -d; if (rel) d /= ($c < 0 ? -$c : $c); if (d > m) m = d } END { printf "%.3g", m }'; }
within() { awk -v d="$1" -v t="$2" 'BEGIN { exit !(d <= t) }'; }

# 1. RN backward: 1 and 4 ranks (2 ranks: part 2; each rank compiles its kernels with NVRTC, ~15 s of CPU)
for n in 1 4; do run rn$n "$W/tiny_rn.lua" $n 3; done
for n in 4; do
  [ "$(sed -n 2p "$W/rn1.csv" | cut -d, -f1-4)" = "$(sed -n 2p "$W/rn$n.csv" | cut -d, -f1-4)" ] && ok \
    || bad "rn, $n ranks: step 1 differs: $(sed -n 2p "$W/rn1.csv" | cut -d, -f1-6) vs $(sed -n 2p "$W/rn$n.csv" | cut -d, -f1-6)"
  g1=$(paste -d, <(sed -n 2p "$W/rn1.csv") <(sed -n 2p "$W/rn$n.csv") | awk -F, '{ d = ($6 - $15) / $6; printf "%.3g", d < 0 ? -d : d }')
  within "$g1" 1e-6 && ok || bad "rn, $n ranks: step 1 |g| differs by $g1 (relative)"
  dl=$(maxd rn1 rn$n 2); da=$(maxd rn1 rn$n 4); dg=$(maxd rn1 rn$n 6 1)
  within "$dl" 2e-3 && within "$da" 2e-3 && within "$dg" 2e-3 && ok \
    || bad "rn, $n ranks vs 1: |dloss| $dl, |daux| $da, |dg|/g $dg (tolerance 2e-3)"
  echo "  tiny_rn --device gpu, $n ranks vs 1: step 1 loss and aux identical, |dg|/g $g1; over 3 steps max |dloss| $dl," \
    "|daux| $da, |dg|/g $dg (tolerance 2e-3)"
done
# the numbers of a labelled line (LABEL: ...) of FILE, the words aside
nums() { grep -m1 "^ *$2:" "$1" | sed "s/^ *$2://" | tr ' (),;%' '\n' | grep -xE '[0-9]+(\.[0-9]+)?' | tr '\n' ' '; }
# the payload line: the CPU path's numbers (tests/test_ep.sh), whatever the rank count: rows, BF16 bytes a row,
# dispatch bytes and ratios, combine bytes and ratio, dY's and dX's; then the bytes to other ranks, their percentage,
# the rank count
for n in 1 4; do
  read -ra v <<<"$(nums "$W/rn$n.out" payload)"
  [ "${v[*]:0:10}" = "3072 256 262144 0.3333 0.2969 0.2812 405504 0.5156 1.0000 1.0000" ] && [ "${v[-1]}" = $n ] && ok \
    || bad "--gpus $n payload line: $(grep -m1 '^  payload:' "$W/rn$n.out")"
done
read -ra v <<<"$(nums "$W/rn1.out" payload)"
[ "${v[-3]}" = 0 ] && [ "${v[-2]}" = 0.0 ] && ok || bad "1 rank sent bytes to others: $(grep -m1 '^  payload:' "$W/rn1.out")"
read -ra v <<<"$(nums "$W/rn4.out" payload)"
awk -v p="${v[-2]}" 'BEGIN { exit !(p >= 70 && p < 80) }' && ok \
  || bad "4 ranks: expected ~75% of the payload to other ranks: $(grep -m1 '^  payload:' "$W/rn4.out")"
# the expert parallelism line: 4 ranks, 2 experts and 2 sequences each, over the host mesh (not NCCL: the fake driver's
# memory is host memory)
[ "$(nums "$W/rn4.out" "expert parallelism")" = "4 2 2 " ] && grep -m1 '^  expert parallelism:' "$W/rn4.out" | grep -q 'host mesh' \
  && ! grep -m1 '^  expert parallelism:' "$W/rn4.out" | grep -q NCCL && ok \
  || bad "4 ranks: expert parallelism line: $(grep 'expert par' "$W/rn4.out")"
grep -m1 '^  payload:' "$W/rn4.out" | sed 's/^  /  4 GPU ranks: /'

# 2. the recipe as written (SR backward), 2 ranks
run sr2 recipes/tiny.lua 2 2
read -ra v <<<"$(nums "$W/sr2.out" payload)"
[ "${v[*]:2:2}" = "262144 0.3333" ] && [ "${v[-1]}" = 2 ] && ok || bad "--gpus 2 payload line: $(grep -m1 '^  payload:' "$W/sr2.out")"
[ "$(sed -n 2p "$W/rn1.csv" | cut -d, -f1-4)" = "$(sed -n 2p "$W/sr2.csv" | cut -d, -f1-4)" ] && ok \
  || bad "sr, 2 ranks: step 1 differs from one rank's: $(sed -n 2p "$W/sr2.csv" | cut -d, -f1-4)"
d2=$(maxd rn1 sr2 2)
within "$d2" 1e-2 && ok || bad "sr, 2 ranks: step 2 loss differs from one rank's (RN) by $d2 (tolerance 1e-2: SR noise)"
echo "  tiny --device gpu (SR backward), 2 ranks: step 1 loss and aux identical to one rank's; step 2 |dloss| vs RN one rank $d2"

# 3. the GPU-resident step (runtime/train_gpu.c, what --device gpu runs) against the host step around the same GPU expert
#    layer (FOURBIT_TRAIN_HOST=1), 2 ranks, 3 steps: every kernel and GEMM here is the CPU path's arithmetic, so the CSVs
#    agree bit for bit (loss, aux, lr, |g|): the router outputs and cross-entropies gathered over the host mesh, the
#    replicated gradients summed with the device allreduce, the norm's expert part gathered, AdamW on every rank.
FOURBIT_TRAIN_HOST=1 run host2 "$W/tiny_rn.lua" 2 3
# the resident step alone has kernels of its own: a "train step kernels" line where it ran (4 kernels: dense.cuh, the
# router, AdamW with a BF16 copy, and the NVFP4 form of AdamW that tiny's NVFP4 expert weights take), none in the host step
! grep -q '^train step kernels:' "$W/host2.out" && ok || bad "host2: not the host step: $(grep device "$W/host2.out")"
for n in 1 4; do
  [ "$(nums "$W/rn$n.out" "train step kernels" | cut -d' ' -f1)" = 4 ] && ok || bad "--gpus $n: --device gpu did not run the resident step"
done
run dev2 "$W/tiny_rn.lua" 2 3
[ "$(cut -d, -f1-7 "$W/host2.csv")" = "$(cut -d, -f1-7 "$W/dev2.csv")" ] && ok \
  || bad "2 ranks: resident vs host step differ: $(paste -d' ' "$W/host2.csv" "$W/dev2.csv" | cut -c1-200)"
echo "  tiny_rn --device gpu --gpus 2, 3 steps: resident step = host step (loss, aux, |g|): $(sed -n 4p "$W/dev2.csv" | cut -d, -f1-6)"
# 4. --cache: the resident step's own kernels go into the cache after NVRTC; a second run loads them (0 compiled)
for i in 1 2; do
  LD_LIBRARY_PATH=$MOCK "$FB" train "$W/tiny_rn.lua" --device gpu --d-ff 128 --steps 1 --cache "$W/kc" > "$W/cache$i.out" 2>&1 \
    || bad "--cache run $i failed: $(tail -3 "$W/cache$i.out")"
done
# "train step kernels: N (F from the cache, C compiled ...": N F C
[ "$(nums "$W/cache1.out" "train step kernels" | cut -d' ' -f1-3)" = "4 0 4" ] && ok || bad "first --cache run: $(grep '^train step' "$W/cache1.out")"
[ "$(nums "$W/cache2.out" "train step kernels" | cut -d' ' -f1-3)" = "4 4 0" ] && ok || bad "second --cache run compiled: $(grep '^train step' "$W/cache2.out")"
grep '^train step kernels' "$W/cache2.out" | sed 's/^/  second --cache run: /'

# 5. --gpus 2 --cache: rank 0 prints every rank's kernel lookups (counts, and a digest of the cache's answers: kernel,
#    variant and cubin hash) and whether the ranks agree; here the cache holds the router's default (part 4), on the H200
#    the tuned winners (tests/gpu/ep_multi.sh)
LD_LIBRARY_PATH=$MOCK "$FB" train "$W/tiny_rn.lua" --device gpu --d-ff 128 --gpus 2 --steps 1 --cache "$W/kc" > "$W/cache3.out" 2>&1 \
  || bad "--gpus 2 --cache failed: $(tail -3 "$W/cache3.out")"
# "rank R kernels: N (F from the cache: W tuned winners, D default variants; C compiled ...); ... digest X": the same
# numbers and digest on both ranks, the digest not zero, and rank 0's verdict that the 2 ranks agree
r0=$(nums "$W/cache3.out" "rank 0 kernels"); r1=$(nums "$W/cache3.out" "rank 1 kernels")
d0=$(awk '$1 == "rank" && $2 == 0 && $3 == "kernels:" { print $NF }' "$W/cache3.out")
d1=$(awk '$1 == "rank" && $2 == 1 && $3 == "kernels:" { print $NF }' "$W/cache3.out")
[ -n "$r0" ] && [ "$r0" = "$r1" ] && [[ "$d0" =~ ^[0-9a-f]{16}$ ]] && [ "$d0" = "$d1" ] && [ "$d0" != 0000000000000000 ] \
  && [ "$(sed -n 's/^  every rank (\([0-9]*\)).*/\1/p' "$W/cache3.out")" = 2 ] && ok \
  || bad "--gpus 2 --cache: rank lines: $(grep -E 'rank [01] kernels|every rank' "$W/cache3.out")"
grep -E '^  (rank [01] kernels|every rank)' "$W/cache3.out" | sed 's/^  /  --gpus 2 --cache: /'

echo "test_ep_gpu.sh: $pass passed, $fail failed"
[ $fail = 0 ]
