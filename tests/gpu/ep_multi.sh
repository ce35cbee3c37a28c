#!/usr/bin/env bash
# tests/gpu/ep_multi.sh — expert parallelism on every GPU of one host, in one device call (issue 8):
#   1. fourbit train, tiny and a mid-size model, on 1 GPU and on N GPUs with the same global batch and seed: the loss
#      curves side by side (step 1 must be identical; later steps differ by stochastic rounding: printed, with the
#      one-GPU run's own step-to-step noise beside them as the scale); both models tuned first (recipes written under
#      $OUT/recipes), and every rank's kernel lookups printed by rank 0 and required to agree (the same tuned winners);
#   2. one S1-shaped expert layer (8192 tokens and 48 experts a rank, top-8, d_model 5120, d_ff 2048) at N = 1, 2, 4, 8
#      (as many as there are GPUs): the step time (the slowest rank), the weak-scaling efficiency t(1) / t(N), and
#      the dispatch exchange against a plain NCCL all-to-all of the same rows in BF16, from build/gpu/bench_layer;
#      at the largest N also the dX exchange in series (FOURBIT_GPU_OVERLAP=0) and with the w13 wgrad leaving 16 SMs to
#      NCCL (FOURBIT_GPU_COMM_SMS=16), and with the dispatch exchange in series (FOURBIT_GPU_OVERLAP=1: the dX
#      exchange alone beside the wgrad; the default also sends the dispatch beside the weights' quantization): how
#      much each overlap hides.
# usage: tests/gpu/ep_multi.sh [build/fourbit]   (results under $OUT, else build/ep)
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0), as the device documentation requires.
set -u
FB=${1:-build/fourbit}
dir=${OUT:-build/ep}
mkdir -p "$dir"
export NCCL_NVLS_ENABLE=0
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "$ngpu" -lt 1 ]; then echo "ep_multi: SKIPPED (not passed): no GPU"; exit 77; fi
echo "ep_multi: $ngpu GPU(s): $(nvidia-smi -L | head -1)"
fail=0
export FOURBIT_CACHE=${FOURBIT_CACHE:-/tmp/fbcache_ep}

# the kernels every rank loads: inkling2_small's winners for the S1 layer (the train runs below, other shapes, take
# the default variants, compiled by NVRTC on each rank)
"$FB" tune recipes/inkling2_small.lua --time 90 --jobs 16 > "$dir/tune.log" 2>&1 || { echo "  tune FAILED"; tail -5 "$dir/tune.log"; fail=1; }

# ---- 1. train on 1 and N GPUs ----
cmp_logs() { # name, log1, logN
  python3 - "$@" <<'PY'
import csv, sys
name, a, b = sys.argv[1:4]
A = list(csv.DictReader(open(a))); B = list(csv.DictReader(open(b)))
n = min(len(A), len(B))
la = [float(r["loss"]) for r in A[:n]]; lb = [float(r["loss"]) for r in B[:n]]
d = [abs(x - y) for x, y in zip(la, lb)]
noise = sorted(abs(la[i] - la[i - 1]) for i in range(max(1, n - 50), n))
k = max(1, n // 10)
print(f"  {name}: {n} steps; step 1 loss {la[0]:.6f} vs {lb[0]:.6f} ({'identical' if la[0] == lb[0] else 'DIFFER'}); "
      f"|loss(1 GPU) - loss(N)| max {max(d):.4f}, mean over the last {k} steps {sum(d[-k:]) / k:.4f}; "
      f"final (mean of the last {k}) {sum(la[-k:]) / k:.4f} vs {sum(lb[-k:]) / k:.4f}; "
      f"the 1-GPU run's own step-to-step change (median, last 50) {noise[len(noise) // 2]:.4f}")
sys.exit(0 if la[0] == lb[0] else 1)
PY
}
N=$ngpu
[ "$N" -gt 8 ] && N=8
# the two models as recipes (the tuner takes no model overrides), tuned for the tokens of one rank and of each of N
rd="$dir/recipes"
mkdir -p "$rd" && cp recipes/*.lua "$rd/"
cat > "$rd/tiny_ep.lua" <<'EOF'
return recipe(extend(include "tiny.lua", { name = "tiny_ep", model = { d_ff = 128 } }))
EOF
cat > "$rd/mid_ep.lua" <<'EOF'
return recipe(extend(include "tiny.lua", { name = "mid_ep",
  model = { layers = 6, d_model = 512, d_ff = 512, experts = 16, top_k = 2, vocab = 1024 }, batch = { tokens = 2048 } }))
EOF
for model in tiny mid; do
  T=256; [ $model = mid ] && T=2048
  "$FB" tune "$rd/${model}_ep.lua" --shapes $T,$((T / N)) --time 40 --jobs 16 > "$dir/tune_$model.log" 2>&1 \
    || { echo "  tune ${model}_ep FAILED"; tail -5 "$dir/tune_$model.log"; fail=1; }
  tail -1 "$dir/tune_$model.log" | sed "s/^/  tune ${model}_ep: /"
done
for model in tiny mid; do
  for n in 1 $N; do
    [ $n = 1 ] || [ $N -gt 1 ] || continue
    # (the whole step runs on the GPU (runtime/train_gpu.c): the mid-size model took ~7 ms a step on one H200)
    "$FB" train "$rd/${model}_ep.lua" --device gpu --gpus $n --steps 300 --seed 7 --print-every 50 --verbose --cache "$FOURBIT_CACHE" \
      --log "$dir/train_${model}_g$n.csv" > "$dir/train_${model}_g$n.out" 2>&1 || { echo "  train $model --gpus $n FAILED"; tail -5 "$dir/train_${model}_g$n.out"; fail=1; }
    grep -E "^kernels|^train step kernels|^  rank [0-9]+ kernels|^  every rank|payload" "$dir/train_${model}_g$n.out" | tail -12 | sed "s/^ */  $model g$n: /"
    if [ $n -gt 1 ]; then # every rank's cache lookups: the same winners (digest of kernel, variant and cubin hash)
      grep -qE "^  every rank \($n\) loaded the same kernels from the cache \([1-9][0-9]* tuned winners" "$dir/train_${model}_g$n.out" \
        || { echo "  $model --gpus $n: the ranks did not load the same tuned winners"; fail=1; }
    fi
  done
  if [ $N -gt 1 ]; then cmp_logs "$model, 1 GPU vs $N" "$dir/train_${model}_g1.csv" "$dir/train_${model}_g$N.csv" || fail=1; fi
done

# ---- 2. the S1 layer at N = 1, 2, 4, 8 ----
layer() { # n tag [VAR=value ...]: the S1 layer on n ranks; its step time (the slowest rank) in $ms, its log in $L
  local n=$1 tag=$2 port=$((29600 + $1)); shift 2
  for ((r = 0; r < n; ++r)); do
    env "$@" WORLD_SIZE=$n RANK=$r LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      build/gpu/bench_layer --cache "$FOURBIT_CACHE" --iters 10 > "$dir/layer_n${n}${tag}_r$r.log" 2>&1 &
  done
  wait
  L="$dir/layer_n${n}${tag}_r0.log"
  ms=$(grep -oE '^RESULT_EP ranks=[0-9]+ ms=[0-9.]+' "$L" | sed 's/.*ms=//')
  [ -n "$ms" ] || ms=$(grep -oE '^RESULT layer=.* ms=[0-9.]+' "$L" | sed 's/.*ms=//')
  grep -q '^RESULT' "$L" && [ -n "$ms" ]
}
t1=; nmax=1
for n in 1 2 4 8; do
  [ $n -le $ngpu ] || break
  if ! layer $n ""; then echo "  layer N=$n FAILED"; tail -5 "$L"; fail=1; continue; fi
  [ -n "$t1" ] || t1=$ms
  nmax=$n
  eff=$(python3 -c "print(f'{$t1 / $ms:.3f}')")
  echo "  S1 layer, $n rank(s): step $ms ms; weak-scaling efficiency t(1)/t($n) = $eff"
  grep -E '^EXCHANGE|^check' "$L" | sed 's/^/    /'
done
if [ $nmax -gt 1 ]; then # the dX exchange beside the w13 wgrad: in series, and with SMs left to NCCL
  for v in "_serial FOURBIT_GPU_OVERLAP=0" "_sms16 FOURBIT_GPU_COMM_SMS=16" "_dxonly FOURBIT_GPU_OVERLAP=1"; do
    set -- $v
    if layer $nmax "$1" "$2"; then echo "  S1 layer, $nmax ranks, $2: step $ms ms"; else echo "  layer N=$nmax $2 FAILED"; tail -5 "$L"; fail=1; fi
  done
fi
[ $fail -eq 0 ] && echo "ep_multi: passed" || { echo "ep_multi: FAILED"; exit 1; }
