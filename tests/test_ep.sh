#!/usr/bin/env bash
# test_ep.sh — `fourbit train --ranks N` (expert parallelism on the CPU path) end to end: 1, 2 and 4 ranks of the
# tiny recipe on one global batch and seed (step 1 identical, later steps within the tolerance test_ep.c states:
# 2e-3 nats), the payload bytes (--verbose) against BF16, checkpoint + resume across rank counts, torchrun-style
# processes (RANK, WORLD_SIZE, MASTER_PORT), a killed worker (non-zero exit naming the rank, nothing left running),
# Ctrl-C and SIGTERM (all ranks stop after one step, the checkpoint is written), and the refusals (exit 2, naming the option or
# field at fault). Checks read exit codes, the CSV logs and checkpoints, and numbers (the payload line's), not sentences.
# usage: tests/test_ep.sh build/fourbit
set -u
FB=$1
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
pass=0; fail=0
ok()  { pass=$((pass+1)); }
bad() { fail=$((fail+1)); echo "  FAIL: $*"; }
TR=recipes/tiny.lua
MI="--model-override micro"
nontime() { cut -d, -f1-7 "$1"; }

# 1. 1, 2, 4 ranks: step 1 identical; steps 2-3 within 2e-3 nats; the payload line
for n in 1 2 4; do
  "$FB" train $TR --steps 20 --stop-at 3 --ranks $n --verbose --log "$W/t$n.csv" > "$W/t$n.out" 2> "$W/t$n.err" \
    || bad "--ranks $n failed: $(tail -2 "$W/t$n.err")"
  [ "$(grep -c '^step ' "$W/t$n.out")" = 3 ] && ok || bad "--ranks $n: $(grep -c '^step ' "$W/t$n.out") step lines (rank 0 alone prints)"
done
for n in 2 4; do
  [ "$(sed -n 2p "$W/t1.csv" | cut -d, -f1-4)" = "$(sed -n 2p "$W/t$n.csv" | cut -d, -f1-4)" ] && ok \
    || bad "step 1 differs: 1 rank $(sed -n 2p "$W/t1.csv" | cut -d, -f2), $n ranks $(sed -n 2p "$W/t$n.csv" | cut -d, -f2)"
  d=$(paste -d, "$W/t1.csv" "$W/t$n.csv" | awk -F, 'NR > 1 { d = $2 - $11; if (d < 0) d = -d; if (d > m) m = d } END { printf "%.3g", m }')
  awk -v d="$d" 'BEGIN { exit !(d <= 2e-3) }' && ok || bad "$n ranks: loss differs from 1 rank's by $d"
  echo "  tiny, $n ranks vs 1: step 1 loss identical, max |dloss| over 3 steps $d (tolerance 2e-3)"
done
# tiny: 6 layers x 256 tokens x top-2 = 3072 rows a step, d_model 128 (256 B in BF16); layers 1-5 dispatch NVFP4
# (64 codes + 8 scales + 4 outer = 76 B = 0.2969 of BF16; 72 B = 0.28125 = 4.5/16 without the outer scale),
# layer 6 MXFP8 (132 B); the combine is S2F6 + E8M0 (132 B = 0.515625 = 8.25/16). dY and dX travel in BF16.
# The payload line's numbers, in order: rows, BF16 bytes a row, dispatch bytes, its ratio to BF16, the NVFP4 rows' ratio
# with and without their outer scales, combine bytes, its ratio, dY's and dX's, then the bytes to other ranks, their
# percentage and the rank count (the words that are not numbers aside).
nums() { grep -m1 '^  payload:' "$1" | tr ' (),;%' '\n' | grep -xE '[0-9]+(\.[0-9]+)?' | tr '\n' ' '; }
for n in 1 2 4; do
  read -ra v <<<"$(nums "$W/t$n.out")"
  [ "${v[*]:0:10}" = "3072 256 262144 0.3333 0.2969 0.2812 405504 0.5156 1.0000 1.0000" ] && [ "${v[-1]}" = $n ] && ok \
    || bad "--ranks $n payload line: $(grep -m1 '^  payload:' "$W/t$n.out")"
done
read -ra v <<<"$(nums "$W/t1.out")"
[ "${v[-3]}" = 0 ] && [ "${v[-2]}" = 0.0 ] && ok || bad "1 rank sent bytes to others: $(grep -m1 '^  payload:' "$W/t1.out")"
read -ra v <<<"$(nums "$W/t4.out")"
awk -v p="${v[-2]}" 'BEGIN { exit !(p >= 70 && p < 80) }' && ok \
  || bad "4 ranks: expected ~75% of the payload to other ranks: $(grep -m1 '^  payload:' "$W/t4.out")"
grep -m1 '^  payload:' "$W/t4.out" | sed 's/^  /  4 ranks: /'

# 2. checkpoint + resume with 2 ranks == the uninterrupted 2-rank run (log and checkpoint file); other rank counts
M="$MI --steps 8"
"$FB" train $TR $M --ranks 2 --log "$W/u.csv" --checkpoint "$W/u.ckpt" --quiet || bad "2-rank checkpointed run failed"
"$FB" train $TR $M --ranks 2 --log "$W/r.csv" --checkpoint "$W/r.ckpt" --stop-at 3 --quiet || bad "--stop-at 3 failed"
"$FB" train $TR $M --ranks 2 --log "$W/r.csv" --resume "$W/r.ckpt" --checkpoint "$W/r.ckpt" --quiet || bad "resume failed"
cmp -s <(nontime "$W/u.csv") <(nontime "$W/r.csv") && ok || bad "2-rank resumed log differs from the uninterrupted one"
cmp -s "$W/u.ckpt" "$W/r.ckpt" && ok || bad "2-rank final checkpoints differ"
"$FB" train $TR $M --ranks 2 --stop-at 3 --checkpoint "$W/x.ckpt" --quiet || bad "--stop-at 3 failed"
"$FB" train $TR $M --ranks 1 --resume "$W/x.ckpt" --log "$W/x1.csv" --quiet && ok || bad "a 2-rank checkpoint does not resume on 1 rank"
"$FB" train $TR $M --ranks 4 --batch 128 --resume "$W/x.ckpt" --quiet > /dev/null 2>&1
[ $? = 2 ] && ok || bad "resume with another batch was not refused"
[ "$(wc -l < "$W/x1.csv")" = 6 ] && ok || bad "1-rank resume logged $(wc -l < "$W/x1.csv") lines, expected 6"

# 3. torchrun-style processes: the same run as --ranks 2
port=$((20000 + RANDOM % 30000))
RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$FB" train $TR $M --quiet --log "$W/tr1.csv" &
p1=$!
RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$FB" train $TR $M --quiet --log "$W/tr.csv" \
  || bad "torchrun-style rank 0 failed"
wait $p1 || bad "torchrun-style rank 1 failed"
cmp -s <(nontime "$W/u.csv") <(nontime "$W/tr.csv") && ok || bad "torchrun-style log differs from --ranks 2"
[ ! -e "$W/tr1.csv" ] && ok || bad "rank 1 wrote a log"

# 4. a killed worker: the run fails naming it; every process is gone
"$FB" train $TR $MI --steps 100000 --ranks 2 --quiet > "$W/k.out" 2> "$W/k.err" &
lp=$!
for i in $(seq 50); do kids=$(pgrep -P $lp | tr '\n' ' '); [ "$(echo $kids | wc -w)" = 2 ] && break; sleep 0.1; done
sleep 1
victim=""
for k in $kids; do tr '\0' '\n' < /proc/$k/environ 2>/dev/null | grep -qx 'RANK=1' && victim=$k; done
[ -n "$victim" ] && kill -9 "$victim"
wait $lp; rc=$?
# the launcher names the rank, its pid and the signal; rank 0 names the rank it lost
[ $rc != 0 ] && [ -n "$victim" ] && grep "rank 1 " "$W/k.err" | grep -w -- "$victim" | grep -qw 9 && ok \
  || bad "killed worker: exit $rc, stderr: $(cat "$W/k.err")"
grep '^fourbit train: rank 0: ' "$W/k.err" | grep -q 'rank 1\b' && ok || bad "rank 0 did not name the lost rank: $(cat "$W/k.err")"
left=0; for k in $kids; do kill -0 "$k" 2> /dev/null && left=1; done
[ $left = 0 ] && ok || bad "processes left after the launcher exited: $kids"
sed 's/^/  killed worker: /' "$W/k.err"

# 5. Ctrl-C (SIGINT to the process group): every rank stops after the same step, the checkpoint is written
setsid "$FB" train $TR $MI --steps 100000 --ranks 2 --quiet --log "$W/c.csv" --checkpoint "$W/c.ckpt" 2> "$W/c.err" &
sp=$!
for i in $(seq 50); do [ -f "$W/c.csv" ] && [ "$(wc -l < "$W/c.csv")" -ge 4 ] && break; sleep 0.1; done
kill -INT -- -$sp
wait $sp; rc=$?
n=$(($(wc -l < "$W/c.csv") - 1))
[ $rc = 130 ] && [ -s "$W/c.ckpt" ] && ok || bad "Ctrl-C: exit $rc, checkpoint $(ls -l "$W/c.ckpt" 2>&1)"
"$FB" train $TR $MI --steps 100000 --stop-at $((n + 1)) --ranks 2 --resume "$W/c.ckpt" --quiet > /dev/null 2>&1 && ok \
  || bad "Ctrl-C checkpoint (after step $n) does not resume"

# 5b. SIGTERM to the launcher (a scheduler's stop), which forwards it: the ranks stop after the same step, the
# checkpoint is of the last step logged, exit 143
"$FB" train $TR $MI --steps 100000 --ranks 2 --quiet --log "$W/term.csv" --checkpoint "$W/term.ckpt" 2> "$W/term.err" &
sp=$!
for i in $(seq 300); do [ -f "$W/term.csv" ] && [ "$(wc -l < "$W/term.csv")" -ge 3 ] && break; sleep 0.1; done
kill -TERM $sp
wait $sp; rc=$?
n=$(tail -1 "$W/term.csv" | cut -d, -f1)
[ $rc = 143 ] && [ -s "$W/term.ckpt" ] && ok || bad "SIGTERM: exit $rc, checkpoint $(ls -l "$W/term.ckpt" 2>&1)"
"$FB" train $TR $MI --steps 100000 --stop-at $((n + 1)) --ranks 2 --resume "$W/term.ckpt" --log "$W/term2.csv" --quiet > /dev/null 2>&1 \
  && [ "$(tail -n +2 "$W/term2.csv" | cut -d, -f1 | tr '\n' ' ')" = "$((n + 1)) " ] && ok \
  || bad "SIGTERM checkpoint (after step $n) does not resume at step $((n + 1)): log $(cut -d, -f1 "$W/term.csv" | tr "\n" " "), resumed $(cut -d, -f1 "$W/term2.csv" | tr "\n" " "); $(cat "$W/term.err")"

# 6. refusals: exit 2, and stderr naming what is at fault: each of NAMES (|-separated) appears in it
expect2() { # description, names, args...
  local d=$1 names=$2 n; shift 2
  "$FB" "$@" > "$W/o" 2> "$W/e"; local rc=$?
  local miss=; IFS='|' read -ra nv <<<"$names"
  for n in "${nv[@]}"; do grep -qF -- "$n" "$W/e" || miss="$miss '$n'"; done
  [ $rc = 2 ] && [ -z "$miss" ] && ok || bad "$d: exit $rc, not named:$miss; stderr: $(head -3 "$W/e")"
}
expect2 "experts % ranks" "$TR|parallel.ep|--ranks|3 ranks|8 experts" train $TR --ranks 3 --steps 1
expect2 "sequences % ranks" "$TR|batch|4 ranks" train $TR $MI --ranks 4 --steps 1
expect2 "--gpus on cpu" "--gpus|--device gpu" train $TR --gpus 2
RANK=0 WORLD_SIZE=1 "$FB" train $TR --ranks 2 --steps 1 > /dev/null 2> "$W/e"; rc=$?
[ $rc = 2 ] && grep -qF -- "--ranks 2" "$W/e" && grep -qF "WORLD_SIZE" "$W/e" && ok || bad "WORLD_SIZE mismatch: exit $rc, $(head -2 "$W/e")"
expect2 "compare --ranks" "--ranks" compare $TR --ranks 2
# one error of the recipe, the same on every rank, is said once, and the ranks' common exit status in one line
expect2 "a bad override, 3 ranks" "$TR|d_model|100" train $TR $MI --ranks 3 --d-model 100 --steps 1
[ "$(grep -c 'd_model' "$W/e")" = 1 ] && [ "$(wc -l < "$W/e")" = 2 ] && ok || bad "3 ranks, one error: $(wc -l < "$W/e") lines: $(cat "$W/e")"

echo "test_ep.sh: $pass passed, $fail failed"
[ $fail = 0 ]
