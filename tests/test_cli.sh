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
# 4. what OUT is: a regular file or nothing is replaced whole (temp + rename); a character device or a FIFO is
# written into and stays what it is; a symbolic link stays a link (its target gets the data); a folder, or a file
# that cannot be written, exits 2 naming it
Q="quant --format mxfp8 --rows $R --cols $C $W/g.f32"
QB=$((R*C + R*C/32))
"$FB" $Q "$W/ref.q" || bad "quant to a new file failed"
mknod "$W/null" c 1 3 2>/dev/null && chmod 666 "$W/null"
if [ -c "$W/null" ]; then
  "$FB" $Q "$W/null" && [ -c "$W/null" ] && ok || bad "OUT a character device (mknod c 1 3): exit $?, now $(stat -c %F "$W/null")"
  ln -s "$W/null" "$W/lnull"
  "$FB" $Q "$W/lnull" && [ -L "$W/lnull" ] && [ -c "$W/null" ] && ok || bad "OUT a link to a character device: the link or the device was replaced"
  ls "$W" | grep -q '\.tmp\.' && bad "a temporary file left beside a device" || ok
else
  echo "  (mknod not permitted here: the character-device checks are left out)"
fi
# a link to standard output (as /dev/stdout is: a link to /proc/self/fd/1), directly and through a second link: the data
# goes down the pipe, byte for byte, and the links stay links. The links are our own, never /dev/stdout itself: a
# regression must not be able to replace the machine's /dev/stdout (a rename into /proc/self/fd fails harmlessly)
ln -s /proc/self/fd/1 "$W/lout"; ln -s "$W/lout" "$W/lout2"
"$FB" $Q "$W/lout" | cmp -s - "$W/ref.q" && [ -L "$W/lout" ] && ok || bad "OUT a link to standard output: not the quantized bytes down the pipe, or the link replaced"
"$FB" $Q "$W/lout2" | cmp -s - "$W/ref.q" && [ -L "$W/lout2" ] && [ -L "$W/lout" ] && ok || bad "OUT a link to a link to standard output"
mkfifo "$W/fifo"
timeout 20 cat "$W/fifo" > "$W/fromfifo" & timeout 20 "$FB" $Q "$W/fifo"; rc=$?; wait
[ $rc = 0 ] && [ -p "$W/fifo" ] && cmp -s "$W/fromfifo" "$W/ref.q" && ok || bad "OUT a FIFO: exit $rc, or replaced, or other bytes"
# a link to a regular file (relative, in another folder): the target is replaced, the link stays a link
mkdir "$W/sub"; printf old > "$W/sub/t.q"; chmod 640 "$W/sub/t.q"; ln -s sub/t.q "$W/lfile"
"$FB" $Q "$W/lfile" && [ -L "$W/lfile" ] && cmp -s "$W/sub/t.q" "$W/ref.q" && [ "$(stat -c %a "$W/sub/t.q")" = 640 ] && ok \
  || bad "OUT a link to a file: the link replaced, the target not written, or its mode changed"
ls "$W/sub" "$W" | grep -q '\.tmp\.' && bad "a temporary file left (link to a file)" || ok
# a dangling link: the file it names is created
ln -s sub/new.q "$W/ldang"
"$FB" $Q "$W/ldang" && [ -L "$W/ldang" ] && cmp -s "$W/sub/new.q" "$W/ref.q" && ok || bad "OUT a dangling link: its target not created"
# exit 2 naming OUT: a folder, a missing folder, a file under a read-only folder (root ignores modes: a read-only bind
# is not at hand, so the folder case covers permission), a socket-like other kind (a block device)
for o in "$W/sub" "$W/nodir/out" "$W/ref.q/x"; do
  "$FB" $Q "$o" > /dev/null 2> "$W/se"; rc=$?
  [ $rc = 2 ] && grep -qF "$o" "$W/se" && ok || bad "OUT $o: exit $rc (expected 2, naming it): $(cat "$W/se")"
done
[ -d "$W/sub" ] && [ ! -e "$W/nodir" ] && ok || bad "a refused OUT was changed"
if mknod "$W/blk" b 7 200 2>/dev/null; then
  "$FB" $Q "$W/blk" > /dev/null 2> "$W/se"; rc=$?
  [ $rc = 2 ] && [ -b "$W/blk" ] && grep -qF "$W/blk" "$W/se" && ok || bad "OUT a block device: exit $rc, or replaced"
fi
# IN must be a regular file: a FIFO nobody writes to is refused at once (it used to wait for a writer forever)
mkfifo "$W/infifo"
timeout 10 "$FB" quant --format mxfp8 --rows $R --cols $C "$W/infifo" "$W/new" 2> "$W/se"; rc=$?
[ $rc = 2 ] && grep -qF "$W/infifo" "$W/se" && [ ! -e "$W/new" ] && ok || bad "IN a FIFO: exit $rc (124: it hung), expected 2 naming it"

# 5. messages name what is wrong: an unknown short option names its argument; --stats on a shape whose outer scales
# are not 4-byte aligned in OUT (1 x 16: 8 + 1 bytes before them); out of memory says how many bytes
for arg in -xy -x; do
  "$FB" quant $arg --format mxfp8 --rows $R --cols $C "$W/g.f32" "$W/new" 2> "$W/se"; rc=$?
  [ $rc = 2 ] && grep -qF "'$arg'" "$W/se" && ok || bad "quant $arg: exit $rc, the message does not name '$arg': $(cat "$W/se")"
done
"$T" gen gauss 1 16 4 "$W/one.f32"
"$FB" quant --format nvfp4 --rows 1 --cols 16 --stats "$W/one.f32" "$W/one.q" > "$W/so" && [ "$(stat -c %s "$W/one.q")" = 13 ] \
  && "$FB" dequant --format nvfp4 --rows 1 --cols 16 "$W/one.q" "$W/one.y" && ok || bad "nvfp4 1 x 16 --stats"
read -r rmse _ < <("$T" cmp "$W/one.f32" "$W/one.y")
[ "$(rmse_of < "$W/so")" = "$rmse" ] && ok || bad "1 x 16 --stats: rmse $(rmse_of < "$W/so"), the file gives $rmse"
(ulimit -v 400000; "$FB" train recipes/tiny.lua --model-override micro --vocab 65536 --d-model 1024 --steps 1 --quiet) \
  > /dev/null 2> "$W/se"; rc=$?
[ $rc = 1 ] && grep -Eq 'out of memory: .*[0-9]+ bytes' "$W/se" && ok || bad "out of memory: exit $rc, no byte count: $(cat "$W/se")"

# 6. fourbit gen: OUT not a folder, or an --only nothing matches: exit 2 before anything compiles
printf x > "$W/file"
timeout 60 "$FB" gen recipes/tiny.lua --only quant_mxfp8_row --out "$W/file" > /dev/null 2> "$W/se"; rc=$?
[ $rc = 2 ] && grep -qF "$W/file" "$W/se" && [ "$(cat "$W/file")" = x ] && ok || bad "gen --out FILE: exit $rc, expected 2 naming it"
timeout 60 "$FB" gen recipes/tiny.lua --only no_such_kernel --out "$W/gen" > "$W/so" 2> "$W/se"; rc=$?
[ $rc = 2 ] && grep -qF no_such_kernel "$W/se" && ok || bad "gen --only NOMATCH: exit $rc, expected 2 naming it"

# 7. the plots: gnuplot's enhanced text would set a recipe name's '_' as a subscript (inkling2_small)
bash mk/demo_plot.sh "$W/p" 1.5 > "$W/p.gp"
# every plot under a terminal set noenhanced (on its 'set terminal' line, or a 'set termoption noenhanced' after it)
awk '/set terminal/ { t = 1; enh = $0 !~ /noenhanced/ } /set termoption noenhanced/ { enh = 0 } /^plot/ { n++; if (!t || enh) b = 1 }
     END { exit b || !n }' "$W/p.gp" && ok || bad "mk/demo_plot.sh: a plot with enhanced text: $(cat "$W/p.gp")"
"$FB" compare recipes/bf16.lua recipes/tiny.lua --model-override micro --steps 2 --quiet --out "$W/cmp" > /dev/null 2> "$W/se"; rc=$?
if command -v gnuplot > /dev/null; then
  [ $rc = 0 ] && grep -q noenhanced "$W/cmp/loss.gp" && ok || bad "compare: exit $rc, or loss.gp without noenhanced: $(cat "$W/se")"
fi

# --help: exit 0, the text on stdout (naming the command), nothing on stderr
for c in quant dequant info help; do
  "$FB" $c --help > "$W/h" 2> "$W/he" && [ -s "$W/h" ] && [ ! -s "$W/he" ] && grep -qF "fourbit" "$W/h" && ok || bad "$c --help"
done

echo "test_cli: $pass passed, $fail failed"
[ $fail -eq 0 ]
