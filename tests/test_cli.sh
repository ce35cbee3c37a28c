#!/usr/bin/env bash
# test_cli.sh — `fourbit quant`/`dequant` end to end: file layouts and sizes, the --stats figures
# against an independent comparison of the dequantized file, determinism, SR seeds, 4/6 and RHT
# effects, and every bad-input path (exit 2, one message, no OUT written or changed).
# usage: tests/test_cli.sh build/fourbit build/tests/tools/f32tool
set -u
FB=$1; T=$2
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
pass=0; fail=0
ok()  { pass=$((pass+1)); }
bad() { fail=$((fail+1)); echo "  FAIL: $*"; }
R=64; C=512
"$T" gen gauss $R $C 1 "$W/g.f32"; "$T" gen t3 $R $C 2 "$W/t.f32"; "$T" gen edge $R $C 3 "$W/e.f32"

# rmse of the round trip printed by --stats
rmse_of() { sed -n 's/.*: rmse \([^ ]*\) .*/\1/p'; }

# 1. round trips: OUT sizes, --stats == an independent comparison of dequant's output, determinism
while IFS='|' read -r fmt flags size; do
  size=$((size))
  for inp in g t e; do
    tag="$fmt $flags ($inp)"
    out=$("$FB" quant --format $fmt $flags --rows $R --cols $C --stats "$W/$inp.f32" "$W/q") || { bad "$tag: quant failed"; continue; }
    [ "$(stat -c %s "$W/q")" = "$size" ] && ok || bad "$tag: OUT is $(stat -c %s "$W/q") bytes, expected $size"
    "$FB" dequant --format $fmt $flags --rows $R --cols $C "$W/q" "$W/y.f32" || { bad "$tag: dequant failed"; continue; }
    read -r rmse maxabs _ < <("$T" cmp "$W/$inp.f32" "$W/y.f32")
    srmse=$(rmse_of <<<"$out"); smax=$(sed -n 's/.*max abs error \([^,]*\),.*/\1/p' <<<"$out")
    [ "$srmse" = "$rmse" ] && [ "$smax" = "$maxabs" ] && ok || bad "$tag: --stats says rmse $srmse max $smax; the dequantized file gives $rmse $maxabs"
    "$FB" quant --format $fmt $flags --rows $R --cols $C "$W/$inp.f32" "$W/q2" && cmp -s "$W/q" "$W/q2" && ok || bad "$tag: not deterministic"
    [ "$inp" = g ] && echo "  $fmt $flags: $(sed 's/round trip over [0-9]* finite values: //' <<<"$out")"
  done
done <<LIST
nvfp4||R*C/2 + R*C/16 + 4
nvfp4|--outer row|R*C/2 + R*C/16 + 4*R
nvfp4|--four-over-six|R*C/2 + R*C/16 + 4
nvfp4|--four-over-six --outer row|R*C/2 + R*C/16 + 4*R
nvfp4|--rounding sr --seed 7 --step 3|R*C/2 + R*C/16 + 4
mxfp8||R*C + R*C/32
mxfp8|--rounding sr --seed 7|R*C + R*C/32
s2f6||R*C + R*C/32
s2f6|--rht --seed 9|R*C + R*C/32
LIST

# 2. expected relations between options
q() { "$FB" quant --rows $R --cols $C --stats "$@" "$W/q" | rmse_of; }
lt() { awk -v a="$1" -v b="$2" 'BEGIN{exit !(a < b)}'; }
for inp in g t; do
  plain=$(q --format nvfp4 --outer row "$W/$inp.f32"); fos=$(q --format nvfp4 --outer row --four-over-six "$W/$inp.f32")
  lt "$fos" "$plain" && ok || bad "4/6 did not lower the nvfp4 rmse on $inp ($fos vs $plain)"
  echo "  4/6 on $inp: rmse $plain -> $fos"
done
"$FB" quant --format nvfp4 --rounding sr --seed 1 --rows $R --cols $C "$W/g.f32" "$W/a"
"$FB" quant --format nvfp4 --rounding sr --seed 2 --rows $R --cols $C "$W/g.f32" "$W/b"
"$FB" quant --format nvfp4 --rounding sr --seed 1 --step 1 --rows $R --cols $C "$W/g.f32" "$W/c"
! cmp -s "$W/a" "$W/b" && ! cmp -s "$W/a" "$W/c" && ok || bad "SR output does not depend on --seed and --step"
"$FB" quant --format mxfp8 --seed 1 --rows $R --cols $C "$W/g.f32" "$W/a"
"$FB" quant --format mxfp8 --seed 2 --rows $R --cols $C "$W/g.f32" "$W/b"
cmp -s "$W/a" "$W/b" && ok || bad "RN output depends on --seed"
# RHT: dequantizing with another seed's signs must not give the input back
"$FB" quant --format s2f6 --rht --seed 5 --rows $R --cols $C "$W/g.f32" "$W/a"
"$FB" dequant --format s2f6 --rht --seed 6 --rows $R --cols $C "$W/a" "$W/y.f32"
read -r wrong _ < <("$T" cmp "$W/g.f32" "$W/y.f32")
"$FB" dequant --format s2f6 --rht --seed 5 --rows $R --cols $C "$W/a" "$W/y.f32"
read -r right _ < <("$T" cmp "$W/g.f32" "$W/y.f32")
lt "$right" 0.01 && lt 0.5 "$wrong" && ok || bad "RHT seeds: rmse $right with the right signs, $wrong with wrong ones"

# 3. bad input: exit 2, one message on stderr, OUT not created, an existing OUT unchanged
printf 'keep' > "$W/keep"
expect2() { # description, args...
  local d=$1; shift
  rm -f "$W/new"
  "$FB" "$@" >"$W/so" 2>"$W/se"; local rc=$?
  if [ $rc -ne 2 ]; then bad "$d: exit $rc, expected 2"; return; fi
  [ -s "$W/se" ] || { bad "$d: no message"; return; }
  [ ! -e "$W/new" ] || { bad "$d: wrote OUT"; return; }
  [ "$(cat "$W/keep")" = keep ] || { bad "$d: changed an existing OUT"; return; }
  ls "$W" | grep -q '\.tmp\.' && { bad "$d: left a temporary file"; return; }
  ok
}
expect2 "wrong IN size"        quant --format nvfp4 --rows 65 --cols $C "$W/g.f32" "$W/new"
expect2 "wrong IN size, keep"  quant --format nvfp4 --rows 65 --cols $C "$W/g.f32" "$W/keep"
expect2 "cols not x16"         quant --format nvfp4 --rows $R --cols 24 "$W/g.f32" "$W/new"
expect2 "cols not x32"         quant --format mxfp8 --rows $R --cols 48 "$W/g.f32" "$W/new"
expect2 "missing IN"           quant --format mxfp8 --rows $R --cols $C "$W/nope.f32" "$W/new"
expect2 "IN is a directory"    quant --format mxfp8 --rows $R --cols $C "$W" "$W/new"
expect2 "unknown flag"         quant --format mxfp8 --bogus --rows $R --cols $C "$W/g.f32" "$W/new"
expect2 "unknown format"       quant --format fp5 --rows $R --cols $C "$W/g.f32" "$W/new"
expect2 "no format"            quant --rows $R --cols $C "$W/g.f32" "$W/new"
expect2 "no rows"              quant --format s2f6 --cols $C "$W/g.f32" "$W/new"
expect2 "zero rows"            quant --format s2f6 --rows 0 --cols $C "$W/g.f32" "$W/new"
expect2 "bad number"           quant --format s2f6 --rows 12x --cols $C "$W/g.f32" "$W/new"
expect2 "negative seed"        quant --format nvfp4 --seed -1 --rows $R --cols $C "$W/g.f32" "$W/new"
expect2 "three files"          quant --format s2f6 --rows $R --cols $C "$W/g.f32" "$W/new" "$W/x"
expect2 "--rht on nvfp4"       quant --format nvfp4 --rht --rows $R --cols $C "$W/g.f32" "$W/new"
expect2 "--outer on mxfp8"     quant --format mxfp8 --outer row --rows $R --cols $C "$W/g.f32" "$W/new"
expect2 "--rounding on s2f6"   quant --format s2f6 --rounding sr --rows $R --cols $C "$W/g.f32" "$W/new"
expect2 "bad --outer"          quant --format nvfp4 --outer expert --rows $R --cols $C "$W/g.f32" "$W/new"
expect2 "dequant --stats"      dequant --format mxfp8 --stats --rows $R --cols $C "$W/a" "$W/new"
expect2 "dequant wrong size"   dequant --format nvfp4 --outer row --rows $R --cols $C "$W/g.f32" "$W/new"
expect2 "unknown command"      frobnicate
"$FB" quant --format nvfp4 --rows $R --cols $C "$W/g.f32" "$W/nodir/out" 2>/dev/null; rc=$?
[ $rc -ne 0 ] && [ ! -e "$W/nodir" ] && ok || bad "unwritable OUT: exit $rc"
# --help: exit 0, the text on stdout (naming the command), nothing on stderr
for c in quant dequant info help; do
  "$FB" $c --help > "$W/h" 2> "$W/he" && [ -s "$W/h" ] && [ ! -s "$W/he" ] && grep -qF "fourbit" "$W/h" && ok || bad "$c --help"
done

echo "test_cli: $pass passed, $fail failed"
[ $fail -eq 0 ]
