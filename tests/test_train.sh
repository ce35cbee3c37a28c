#!/usr/bin/env bash
# test_train.sh — `fourbit train` and `fourbit compare` end to end on the CPU: the CSV log, identical logs from
# two runs of one seed, checkpoint + resume == the uninterrupted run (logs and checkpoint files byte for byte),
# the refusals (exit 2 with the reason: --device gpu, bad options, a checkpoint of other options, a model too
# large for the CPU), and compare's outputs (CSV, table, PNG when gnuplot is installed).
# usage: tests/test_train.sh build/fourbit
set -u
FB=$1
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
pass=0; fail=0
ok()  { pass=$((pass+1)); }
bad() { fail=$((fail+1)); echo "  FAIL: $*"; }
TR=recipes/tiny.lua
M="--model-override micro --steps 12"
nontime() { cut -d, -f1-7 "$1"; } # the timing columns (tokens_per_s, ms_per_step) differ run to run

# 1. the log, and determinism
"$FB" train $TR $M --log "$W/a.csv" > "$W/a.out" || bad "train failed: $(tail -2 "$W/a.out")"
head -1 "$W/a.csv" | grep -q '^step,loss,' && ok || bad "CSV header: $(head -1 "$W/a.csv")"
[ "$(wc -l < "$W/a.csv")" = 13 ] && ok || bad "CSV has $(wc -l < "$W/a.csv") lines, expected 13"
[ "$(grep -c '^step ' "$W/a.out")" = 12 ] && ok || bad "expected 12 step lines"
grep -q 'floor 1\.' "$W/a.out" && ok || bad "no entropy floor in the step lines"
awk -F, 'NR == 2 {a = $2} END {exit !($2 < a)}' "$W/a.csv" && ok || bad "loss did not fall over 12 steps"
"$FB" train $TR $M --log "$W/b.csv" > /dev/null || bad "second run failed"
cmp -s <(nontime "$W/a.csv") <(nontime "$W/b.csv") && ok || bad "two runs with one seed differ"
"$FB" train $TR $M --seed 7 --log "$W/c.csv" > /dev/null || bad "seed 7 run failed"
! cmp -s <(nontime "$W/a.csv") <(nontime "$W/c.csv") && ok || bad "--seed does not change the run"

# 2. checkpoint + resume == the uninterrupted run
"$FB" train $TR $M --checkpoint "$W/full.ckpt" --quiet || bad "checkpointed run failed"
"$FB" train $TR $M --log "$W/r.csv" --checkpoint "$W/r.ckpt" --stop-at 5 --quiet || bad "--stop-at 5 failed"
[ "$(wc -l < "$W/r.csv")" = 6 ] && ok || bad "--stop-at 5 logged $(wc -l < "$W/r.csv") lines"
"$FB" train $TR $M --log "$W/r.csv" --resume "$W/r.ckpt" --checkpoint "$W/r.ckpt" > "$W/r.out" || bad "resume failed"
grep -q 'resumed from .* at step 5' "$W/r.out" && ok || bad "no 'resumed' line"
cmp -s <(nontime "$W/a.csv") <(nontime "$W/r.csv") && ok || bad "resumed log differs from the uninterrupted one"
cmp -s "$W/full.ckpt" "$W/r.ckpt" && ok || bad "final checkpoints differ"
ls "$W"/*.tmp.* > /dev/null 2>&1 && bad "a temporary checkpoint file was left behind" || ok

# 3. refusals: exit 2 and a message naming the problem
expect2() { # description, pattern, args...
  local d=$1 pat=$2; shift 2
  "$FB" "$@" > "$W/o" 2> "$W/e"; local rc=$?
  [ $rc = 2 ] && grep -q -- "$pat" "$W/e" && ok || bad "$d: exit $rc, stderr: $(head -2 "$W/e")"
}
expect2 "gpu d_ff" "d_ff = 64: the GPU expert GEMMs take multiples of 128" train $TR --device gpu
expect2 "gpu ranks" "d_ff = 64: the GPU expert GEMMs take multiples of 128" train $TR --device gpu --gpus 2
expect2 "cache without gpu" "go with --device gpu" train $TR --cache "$W/cache"
expect2 "bad device" "--device" train $TR --device tpu
expect2 "bad steps" "--steps" train $TR --steps 0
expect2 "bad preset" "--model-override" train $TR --model-override huge
expect2 "no recipe" "cannot\|No such" train "$W/none.lua" $M
expect2 "batch" "multiple of the sequence length" train $TR $M --batch 70
expect2 "d_model" "d_model" train $TR $M --d-model 100
expect2 "too large" "too large" train recipes/inkling2_small.lua --steps 1
expect2 "resume other seed" "seed" train $TR $M --seed 9 --resume "$W/r.ckpt"
expect2 "resume other steps" "steps" train $TR --model-override micro --steps 13 --resume "$W/r.ckpt"
expect2 "resume other recipe" "recipe" train recipes/bf16.lua $M --resume "$W/r.ckpt"
printf 'garbage' > "$W/g.ckpt"
expect2 "resume garbage" "not a fourbit checkpoint" train $TR $M --resume "$W/g.ckpt"
expect2 "compare no recipe" "RECIPE" compare --steps 3
expect2 "compare --resume" "options of fourbit train" compare $TR --resume "$W/r.ckpt"

# 4. compare
"$FB" compare recipes/bf16.lua $TR $M --quiet --out "$W/cmp" > "$W/cmp.out" || bad "compare failed: $(tail -3 "$W/cmp.out")"
[ "$(wc -l < "$W/cmp/losses.csv")" = 13 ] && head -1 "$W/cmp/losses.csv" | grep -q '^step,floor,bf16,tiny$' && ok \
  || bad "losses.csv: $(head -1 "$W/cmp/losses.csv")"
grep -q '^tiny ' "$W/cmp/summary.txt" && grep -q 'baseline bf16' "$W/cmp/summary.txt" && ok || bad "summary.txt"
cmp -s <(nontime "$W/cmp/bf16.csv") <("$FB" train recipes/bf16.lua $M --quiet --log /dev/stdout | cut -d, -f1-7) && ok \
  || bad "compare's bf16 run differs from fourbit train's"
if command -v gnuplot > /dev/null; then
  [ "$(head -c 4 "$W/cmp/loss.png" | od -An -c | tr -d ' ')" = "211PNG" ] && ok || bad "loss.png is not a PNG"
else
  grep -q "gnuplot not found" "$W/cmp.out" && ok || bad "no gnuplot, and compare did not say so"
fi
sed -n '1,/^final/p' "$W/cmp.out" | sed 's/^/  /'

echo "test_train.sh: $pass passed, $fail failed"
[ $fail = 0 ]
