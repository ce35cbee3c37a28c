#!/usr/bin/env bash
# test_train.sh — `fourbit train` and `fourbit compare` end to end on the CPU: the CSV log, identical logs from
# two runs of one seed, checkpoint + resume == the uninterrupted run (logs and checkpoint files byte for byte),
# the refusals (exit 2, naming the option, field, file or value at fault: --device gpu, bad options, a checkpoint of
# other options, a model too large for the CPU), and compare's outputs (CSV, table, PNG when gnuplot is installed).
# Hardening: an unwritable --checkpoint refused before step 1, the log of a run resumed after a crash (each step
# once), SIGTERM writing the checkpoint, --resume of a FIFO, directory or device refused without blocking.
# Checks read exit codes, files (the CSV logs, checkpoints) and fields (a step line's "floor X"), not sentences.
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
# the entropy floor: in every step line (its "floor" field) as in the CSV (column 3), between 1 and 2 nats for tiny
paste -d' ' <(awk '$1 == "step" { for (i = 2; i < NF; ++i) if ($i == "floor") print $(i + 1) }' "$W/a.out") <(tail -n +2 "$W/a.csv" | cut -d, -f3) \
  | awk 'NF != 2 || $1 != sprintf("%.4f", $2) || $2 < 1 || $2 >= 2 { bad = 1 } END { exit bad || NR != 12 }' && ok \
  || bad "the step lines' floor and the CSV's disagree, or are not in [1, 2)"
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
[ "$(awk '$1 == "step" { print $2; exit }' "$W/r.out")" = 6/12 ] && ok || bad "the resumed run did not start at step 6"
cmp -s <(nontime "$W/a.csv") <(nontime "$W/r.csv") && ok || bad "resumed log differs from the uninterrupted one"
cmp -s "$W/full.ckpt" "$W/r.ckpt" && ok || bad "final checkpoints differ"
ls "$W"/*.tmp.* > /dev/null 2>&1 && bad "a temporary checkpoint file was left behind" || ok

# 3. refusals: exit 2, nothing on stdout, and stderr naming what is at fault: each of NAMES (|-separated) appears in it
expect2() { # description, names, args...
  local d=$1 names=$2 n; shift 2
  "$FB" "$@" > "$W/o" 2> "$W/e"; local rc=$?
  local miss=; IFS='|' read -ra nv <<<"$names"
  for n in "${nv[@]}"; do grep -qF -- "$n" "$W/e" || miss="$miss '$n'"; done
  [ $rc = 2 ] && [ ! -s "$W/o" ] && [ -z "$miss" ] && ok || bad "$d: exit $rc, not named:$miss; stderr: $(head -2 "$W/e")"
}
expect2 "gpu d_ff" "$TR|model.d_ff|64|128" train $TR --device gpu
expect2 "gpu ranks" "$TR|model.d_ff|64|128" train $TR --device gpu --gpus 2
expect2 "cache without gpu" "--cache|--device gpu" train $TR --cache "$W/cache"
expect2 "bad device" "--device|tpu" train $TR --device tpu
expect2 "bad steps" "--steps|'0'" train $TR --steps 0
expect2 "bad preset" "--model-override|huge" train $TR --model-override huge
expect2 "no recipe" "$W/none.lua" train "$W/none.lua" $M
expect2 "batch" "$TR|batch|70|32" train $TR $M --batch 70
expect2 "d_model" "$TR|model.d_model|100|32" train $TR $M --d-model 100
expect2 "too large" "recipes/inkling2_small.lua|--model-override" train recipes/inkling2_small.lua --steps 1
expect2 "resume other seed" "$W/r.ckpt|seed|20260101|9" train $TR $M --seed 9 --resume "$W/r.ckpt"
expect2 "resume other steps" "$W/r.ckpt|steps|12|13" train $TR --model-override micro --steps 13 --resume "$W/r.ckpt"
expect2 "resume other recipe" "$W/r.ckpt|recipe|'tiny'|'bf16'" train recipes/bf16.lua $M --resume "$W/r.ckpt"
printf 'garbage' > "$W/g.ckpt"
expect2 "resume garbage" "--resume $W/g.ckpt" train $TR $M --resume "$W/g.ckpt"
expect2 "compare no recipe" "RECIPE" compare --steps 3
expect2 "compare --resume" "--resume" compare $TR --resume "$W/r.ckpt"

# 4. hardening (issue 23): checkpoint paths, the log of a resumed crash, SIGTERM, --resume of a non-regular file
steps_of() { tail -n +2 "$1" | cut -d, -f1 | tr '\n' ' '; } # the log's step column, on one line
upto() { seq -s' ' "$1" "$2" | sed 's/$/ /'; }                # "a a+1 ... b "
rows_at_least() { # file n: wait (at most 60 s) until the file has n lines
  local i; for i in $(seq 1200); do [ -f "$1" ] && [ "$(wc -l < "$1")" -ge "$2" ] && return 0; sleep 0.05; done; return 1
}
# 4a. a --checkpoint that cannot be written is refused before step 1: exit 2 naming it, no step line, no log
mkdir -p "$W/dir"; : > "$W/file"
for cp in "$W/nodir/x.ckpt" "$W/file/x.ckpt" "$W/dir" "$W/dir/"; do
  rm -f "$W/h.csv"
  expect2 "--checkpoint $cp" "--checkpoint $cp" train $TR $M --log "$W/h.csv" --checkpoint "$cp"
  [ ! -e "$W/h.csv" ] && ok || bad "--checkpoint $cp: the run started (it wrote its log)"
done
# a --checkpoint through a symbolic link: the file it names is written, the link stays a link; a character device
# (mknod, like /dev/null) is refused before step 1 and stays a device
mkdir -p "$W/ckdir"; ln -s ckdir/real.ckpt "$W/lnk.ckpt"
"$FB" train $TR $M --checkpoint "$W/lnk.ckpt" --quiet && [ -L "$W/lnk.ckpt" ] && [ -f "$W/ckdir/real.ckpt" ] \
  && ! ls "$W"/lnk.ckpt.tmp.* "$W"/ckdir/real.ckpt.tmp.* > /dev/null 2>&1 && ok \
  || bad "--checkpoint through a link: the link replaced, the file not written, or a temporary file left"
if mknod "$W/cdev" c 1 3 2>/dev/null; then
  expect2 "--checkpoint a character device" "--checkpoint $W/cdev" train $TR $M --checkpoint "$W/cdev"
  [ -c "$W/cdev" ] && ok || bad "--checkpoint replaced a character device: now $(stat -c %F "$W/cdev")"
fi
# 4b. a crash after step 9 whose last checkpoint is of step 5 (the run to 5, then a resumed run whose log reached
# step 9 and whose checkpoint was lost); resuming from step 5's checkpoint logs each step once: the uninterrupted log
"$FB" train $TR $M --log "$W/k.csv" --checkpoint "$W/k5.ckpt" --stop-at 5 --quiet || bad "--stop-at 5 failed"
cp "$W/k5.ckpt" "$W/k.ckpt"
"$FB" train $TR $M --log "$W/k.csv" --resume "$W/k.ckpt" --checkpoint "$W/k.ckpt" --stop-at 9 --quiet || bad "resume to 9 failed"
[ "$(steps_of "$W/k.csv")" = "$(upto 1 9)" ] && ok || bad "the log before the crash: steps $(steps_of "$W/k.csv")"
printf '10,2.1' >> "$W/k.csv" # and a row cut short by the crash
"$FB" train $TR $M --log "$W/k.csv" --resume "$W/k5.ckpt" --quiet || bad "resume from step 5 failed"
[ "$(steps_of "$W/k.csv")" = "$(upto 1 12)" ] && ok || bad "resumed after a crash: steps $(steps_of "$W/k.csv")"
cmp -s <(nontime "$W/a.csv") <(nontime "$W/k.csv") && ok || bad "the log resumed after a crash differs from the uninterrupted one"
# a --log that is not a train log is not cut on resume: exit 2 naming it, the file as it was
printf 'not,a,log\n7,8,9\n' > "$W/other.csv"; cp "$W/other.csv" "$W/other0.csv"
expect2 "--resume into another file" "--log $W/other.csv" train $TR $M --log "$W/other.csv" --resume "$W/k5.ckpt"
cmp -s "$W/other.csv" "$W/other0.csv" && ok || bad "--resume cut a --log file that is not a train log"
# the same after a kill -9 mid-run (a checkpoint every 3 steps): the steps strictly increasing, each once
"$FB" train $TR --model-override micro --steps 2000 --log "$W/q.csv" --checkpoint "$W/q.ckpt" --checkpoint-every 3 --quiet & qp=$!
rows_at_least "$W/q.csv" 9 || bad "kill -9 run: no 8 steps logged in 60 s"
kill -9 $qp; wait $qp 2> /dev/null
n=$(tail -n +2 "$W/q.csv" | awk -F, 'END { print $1 + 0 }') # the last step logged (its row may be cut short)
"$FB" train $TR --model-override micro --steps 2000 --log "$W/q.csv" --resume "$W/q.ckpt" --stop-at $((n + 2)) --quiet \
  || bad "resume after kill -9 failed"
[ "$(steps_of "$W/q.csv")" = "$(upto 1 $((n + 2)))" ] && ok || bad "resumed after kill -9 at step $n: steps $(steps_of "$W/q.csv")"
[ "$(grep -c '^step,' "$W/q.csv")" = 1 ] && ok || bad "the header is in the log $(grep -c '^step,' "$W/q.csv") times"
# 4c. SIGTERM (a scheduler's stop): the checkpoint of the last step logged is written, exit 143; it resumes there
"$FB" train $TR --model-override micro --steps 2000 --log "$W/t.csv" --checkpoint "$W/t.ckpt" --quiet 2> "$W/t.err" & tp=$!
rows_at_least "$W/t.csv" 2 || bad "SIGTERM run: no step logged in 60 s"
kill -TERM $tp; wait $tp; rc=$?
[ $rc = 143 ] && ok || bad "SIGTERM: exit $rc, expected 143"
[ -s "$W/t.ckpt" ] && ok || bad "SIGTERM: no checkpoint written"
k=$(tail -1 "$W/t.csv" | cut -d, -f1)
"$FB" train $TR --model-override micro --steps 2000 --resume "$W/t.ckpt" --stop-at $((k + 1)) --log "$W/t2.csv" --quiet \
  || bad "SIGTERM: the checkpoint does not resume"
[ "$(steps_of "$W/t2.csv")" = "$((k + 1)) " ] && ok || bad "SIGTERM after step $k: the resumed run logged steps $(steps_of "$W/t2.csv")"
# 4d. --checkpoint-every without --checkpoint; --resume of a FIFO (must not block), a directory, a device
expect2 "--checkpoint-every alone" "--checkpoint-every|--checkpoint " train $TR $M --checkpoint-every 3
mkfifo "$W/fifo"
timeout 30 "$FB" train $TR $M --resume "$W/fifo" > "$W/o" 2> "$W/e"; rc=$?
[ $rc = 2 ] && [ ! -s "$W/o" ] && grep -qF -- "--resume $W/fifo" "$W/e" && ok || bad "--resume FIFO: exit $rc: $(head -2 "$W/e")"
expect2 "--resume directory" "--resume $W/dir" train $TR $M --resume "$W/dir"
expect2 "--resume device" "--resume /dev/null" train $TR $M --resume /dev/null

# 5. compare
"$FB" compare recipes/bf16.lua $TR $M --quiet --out "$W/cmp" > "$W/cmp.out" || bad "compare failed: $(tail -3 "$W/cmp.out")"
[ "$(wc -l < "$W/cmp/losses.csv")" = 13 ] && head -1 "$W/cmp/losses.csv" | grep -q '^step,floor,bf16,tiny$' && ok \
  || bad "losses.csv: $(head -1 "$W/cmp/losses.csv")"
# summary.txt's table: a row per recipe (its name, then the final loss); bf16, the first, is the baseline: its
# "vs base" is +0.0000 and its efficiency 1.000
awk '$1 == "bf16" && $2 ~ /^[0-9.]+$/ && $4 == "+0.0000" && $6 == "1.000" { b = 1 } $1 == "tiny" && $2 ~ /^[0-9.]+$/ { t = 1 }
     END { exit !(b && t) }' "$W/cmp/summary.txt" && ok || bad "summary.txt: $(cat "$W/cmp/summary.txt")"
cmp -s <(nontime "$W/cmp/bf16.csv") <("$FB" train recipes/bf16.lua $M --quiet --log /dev/stdout | cut -d, -f1-7) && ok \
  || bad "compare's bf16 run differs from fourbit train's"
if command -v gnuplot > /dev/null; then
  [ "$(head -c 4 "$W/cmp/loss.png" | od -An -c | tr -d ' ')" = "211PNG" ] && ok || bad "loss.png is not a PNG"
else
  [ ! -e "$W/cmp/loss.png" ] && ok || bad "no gnuplot, yet a loss.png"
fi
sed -n '1,/^final/p' "$W/cmp.out" | sed 's/^/  /'

echo "test_train.sh: $pass passed, $fail failed"
[ $fail = 0 ]
