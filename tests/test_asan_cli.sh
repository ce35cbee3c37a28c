#!/usr/bin/env bash
# test_asan_cli.sh — the fourbit binary built with ASan + UBSan (build/asan/fourbit, clang
# -fsanitize=address,undefined -fno-sanitize-recover=undefined) through its main paths: quant / dequant of every
# format with --stats (nvfp4 at 1 x 16 too, where the outer scales sit unaligned in OUT), plan (text and JSON),
# gen of one kernel into a cache (NVRTC), the cache's ls / verify / export / import, a short CPU train with
# --checkpoint, then --stop-at and --resume, and refusals (a FIFO as IN, a folder as OUT, a bad option).
# Any sanitizer report fails it: the sanitizers abort the command (exit status not the expected one) and their
# report names itself on stderr, which every command's stderr is searched for.
# usage: tests/test_asan_cli.sh build/asan/fourbit build/tests/tools/f32tool
set -u
FB=$1; T=$2
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
pass=0; fail=0
ok()  { pass=$((pass+1)); }
bad() { fail=$((fail+1)); echo "  FAIL: $*"; }
# The first report ends the command with a status of its own (86 ASan, 87 UBSan, 88 LSan). Leak detection is on:
# the CLI frees what it allocates, and NVRTC (libnvrtc.so, not instrumented, but allocating through the interposed
# malloc) reports no leak of its own here, so no suppression is needed; nor protect_shadow_gap=0, which the CUDA
# driver needs under ASan -- nothing here loads libcuda.so.1 (no GPU: train runs on the CPU, gen only compiles).
export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:exitcode=86
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:exitcode=87
export LSAN_OPTIONS=exitcode=88
# run EXPECTED-STATUS DESCRIPTION ARGS...: the status, and no sanitizer report on stderr (a hang: 124 after 120 s)
run() {
  local want=$1 d=$2; shift 2
  timeout 120 "$FB" "$@" > "$W/so" 2> "$W/se"; local rc=$?  # 124: it hung
  if grep -qE 'AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|runtime error:' "$W/se"; then
    bad "$d: a sanitizer report (exit $rc):"; sed 's/^/    /' "$W/se" | head -40; return 1
  fi
  [ "$rc" = "$want" ] && ok || { bad "$d: exit $rc, expected $want: $(tail -3 "$W/se")"; return 1; }
}

R=32; C=256
"$T" gen gauss $R $C 1 "$W/g.f32"; "$T" gen edge $R $C 3 "$W/e.f32"; "$T" gen gauss 1 16 4 "$W/one.f32"
for inp in g e; do
  for f in "nvfp4" "nvfp4 --outer row --four-over-six" "nvfp4 --rounding sr --seed 3" "mxfp8" "mxfp8 --rounding sr" "s2f6" "s2f6 --rht"; do
    run 0 "quant $f ($inp)" quant --format $f --rows $R --cols $C --stats "$W/$inp.f32" "$W/q" &&
      run 0 "dequant $f ($inp)" dequant --format $f --rows $R --cols $C "$W/q" "$W/y"
  done
done
run 0 "quant nvfp4 1 x 16 --stats (outer scale at byte 9 of OUT)" quant --format nvfp4 --rows 1 --cols 16 --stats "$W/one.f32" "$W/one.q"
run 0 "quant nvfp4 1 x 16 --outer row --stats" quant --format nvfp4 --outer row --rows 1 --cols 16 --stats "$W/one.f32" "$W/one.q"
run 0 "dequant nvfp4 1 x 16" dequant --format nvfp4 --rows 1 --cols 16 "$W/one.q" "$W/one.y"
mkfifo "$W/fifo"; ln -s /proc/self/fd/1 "$W/out" # our own link to standard output, never /dev/stdout itself (tests/test_cli.sh)
run 2 "quant IN a FIFO" quant --format mxfp8 --rows $R --cols $C "$W/fifo" "$W/q"
run 2 "quant OUT a folder" quant --format mxfp8 --rows $R --cols $C "$W/g.f32" "$W"
run 0 "quant OUT a link to standard output" quant --format mxfp8 --rows $R --cols $C "$W/g.f32" "$W/out"
run 2 "quant -xy" quant -xy --format mxfp8 --rows $R --cols $C "$W/g.f32" "$W/q"

for r in tiny inkling2_small; do
  run 0 "plan $r" plan recipes/$r.lua
  run 0 "plan --json $r" plan --json recipes/$r.lua
done
run 2 "plan of a bad recipe" plan tests/fixtures/recipes/$(ls tests/fixtures/recipes | grep '\.lua$' | head -1)

# gen one kernel into a cache (NVRTC), again from the cache, then the cache commands
run 0 "gen --cache" gen recipes/tiny.lua --only quant_mxfp8_row --cache "$W/c" --out "$W/k"
run 0 "gen --cache (cached)" gen recipes/tiny.lua --only quant_mxfp8_row --cache "$W/c" --out "$W/k"
grep -q cached "$W/so" && ok || bad "the second gen did not take the kernel from the cache"
run 2 "gen --only NOMATCH" gen recipes/tiny.lua --only no_such_kernel --out "$W/k"
run 0 "cache ls" cache ls --cache "$W/c"
run 0 "cache verify" cache verify --cache "$W/c"
run 0 "cache export" cache export "$W/c.fbx" --cache "$W/c"
run 0 "cache import" cache import "$W/c.fbx" --cache "$W/d"
run 0 "cache export (imported)" cache export "$W/d.fbx" --cache "$W/d"
cmp -s "$W/c.fbx" "$W/d.fbx" && ok || bad "cache round trip: the exports differ"
# cache export into a character device (mknod) and through a link to standard output: both stay what they were
if mknod "$W/null" c 1 3 2>/dev/null; then
  run 0 "cache export to a character device" cache export "$W/null" --cache "$W/c" && [ -c "$W/null" ] && ok \
    || bad "cache export replaced a character device: now $(stat -c %F "$W/null")"
fi
# (export prints its summary on stdout too, after the file: the export is the first bytes)
"$FB" cache export "$W/out" --cache "$W/c" 2> "$W/se" | head -c "$(stat -c %s "$W/c.fbx")" | cmp -s - "$W/c.fbx" && [ -L "$W/out" ] && ok \
  || bad "cache export through a link to standard output: not the export's bytes, or the link replaced: $(cat "$W/se")"

# a short CPU train: checkpoint, then the same run interrupted at step 2 and resumed
M="--model-override micro --steps 4 --batch 32"
run 0 "train --checkpoint" train recipes/tiny.lua $M --checkpoint "$W/full.ckpt" --log "$W/a.csv"
run 0 "train --stop-at 2" train recipes/tiny.lua $M --checkpoint "$W/r.ckpt" --stop-at 2 --log "$W/r.csv" --quiet
run 0 "train --resume" train recipes/tiny.lua $M --resume "$W/r.ckpt" --checkpoint "$W/r.ckpt" --log "$W/r.csv" --quiet
cmp -s "$W/full.ckpt" "$W/r.ckpt" && ok || bad "the resumed run's checkpoint differs from the uninterrupted one's"

echo "test_asan_cli: $pass passed, $fail failed"
[ $fail -eq 0 ]
