#!/usr/bin/env bash
# test_cache.sh — `fourbit cache` end to end on the CPU: ls, show, verify (clean, then a flipped byte: exit 1 and
# the bad entry named), export / import round trip and merge (the faster winner stays, a line says so), a corrupt
# or truncated export (exit 2, nothing written), filters, gc, --help of every command, bad usage (exit 2).
# Two caches are filled by build/tests/test_cache --fill DIR a|b: four kernel specs, two of them on both sides
# with different times (quant_mxfp8_row faster in a, amax_ten faster in b), one under a B200 fingerprint.
# usage: tests/test_cache.sh build/fourbit build/tests/test_cache
set -u
FB=$1
FILL=$2
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
pass=0; fail=0
ok() { pass=$((pass+1)); }
bad() { fail=$((fail+1)); echo "  FAIL: $*"; }
"$FILL" --fill "$W/a" a && "$FILL" --fill "$W/b" b || { echo "test_cache.sh: --fill failed"; exit 1; }

"$FB" cache ls --cache "$W/a" > "$W/ls" 2>&1 && grep -q "4 kernels, 3 winners, 3 trials" "$W/ls" && grep -q "quant_mxfp8_row_sm90a" "$W/ls" \
  && grep -qE "quant_mxfp8_row_sm90a +256 +from_a +0.1000 +1.50x" "$W/ls" && ok || { bad "ls"; cat "$W/ls"; }
FOURBIT_CACHE="$W/a" "$FB" cache ls > "$W/ls2" 2>&1 && cmp -s <(tail -n +2 "$W/ls") <(tail -n +2 "$W/ls2") && ok || bad "FOURBIT_CACHE is not the default dir"
"$FB" cache ls --cache "$W/a" --fingerprint B200 > "$W/ls3" && [ "$(grep -c _sm90a "$W/ls3")" = 1 ] && grep -q router_top2 "$W/ls3" && ok || bad "ls --fingerprint"
"$FB" cache show quant_mxfp8 --cache "$W/a" > "$W/show" 2>&1 && grep -q "runner-up" "$W/show" && grep -q "NVIDIA H200 sm_90" "$W/show" \
  && grep -qE "^[0-9a-f]{14} +quant_mxfp8_row_sm90a_from_a +256 +ok" "$W/show" && ok || { bad "show"; cat "$W/show"; }
"$FB" cache show nothing_like_this --cache "$W/a" > /dev/null 2>&1; [ $? -eq 1 ] && ok || bad "show of nothing: not exit 1"
"$FB" cache verify --cache "$W/a" > "$W/v" 2>&1 && grep -q "verify .*: clean" "$W/v" && grep -qE "^winners +3 entries, 0 bad" "$W/v" && ok || { bad "verify clean"; cat "$W/v"; }

# export a, import into a fresh cache: the same entries; export again: the same bytes
"$FB" cache export "$W/a.fbx" --cache "$W/a" > "$W/e" && grep -q "exported 4 kernels, 3 winners, 3 trials" "$W/e" && ok || { bad "export"; cat "$W/e"; }
"$FB" cache import "$W/a.fbx" --cache "$W/c" > "$W/i" && grep -q "4 kernels, 3 winners, 3 trials written" "$W/i" && ok || { bad "import into empty"; cat "$W/i"; }
"$FB" cache export "$W/c.fbx" --cache "$W/c" > /dev/null && cmp -s "$W/a.fbx" "$W/c.fbx" && ok || bad "round trip: the exports differ"

# a corrupt file and a truncated one: exit 2, nothing written
"$FB" cache export "$W/b0.fbx" --cache "$W/b" > /dev/null
cp "$W/a.fbx" "$W/bad.fbx"; printf '\x55' | dd of="$W/bad.fbx" bs=1 seek=200 conv=notrunc status=none
head -c 300 "$W/a.fbx" > "$W/short.fbx"
echo "not an export" > "$W/text.fbx"
for f in bad short text; do
  "$FB" cache import "$W/$f.fbx" --cache "$W/b" > "$W/o" 2> "$W/err"; rc=$?
  [ $rc -eq 2 ] && grep -q "$f.fbx" "$W/err" && ok || { bad "import $f.fbx: exit $rc"; cat "$W/err"; }
done
"$FB" cache export "$W/b1.fbx" --cache "$W/b" > /dev/null && cmp -s "$W/b0.fbx" "$W/b1.fbx" && ok || bad "a failed import changed the cache"

# merge a into b: quant_mxfp8_row is faster in a (imported kept), amax_ten faster in b (local kept)
"$FB" cache import "$W/a.fbx" --cache "$W/b" > "$W/m" 2>&1 && ok || { bad "merge"; cat "$W/m"; }
grep -qE "conflict on winners/[0-9a-f]{16}/quant_mxfp8_row_sm90a/b0*256: kept the imported quant_mxfp8_row_sm90a_from_a \(0.1000 ms\) over the local quant_mxfp8_row_sm90a_from_b \(0.2000 ms\)" "$W/m" \
  && ok || { bad "merge message (imported faster)"; cat "$W/m"; }
grep -qE "conflict on winners/[0-9a-f]{16}/amax_ten_bf16_sm90a/b0*256: kept the local amax_ten_bf16_sm90a_from_b \(0.2500 ms\) over the imported" "$W/m" \
  && ok || { bad "merge message (local faster)"; cat "$W/m"; }
grep -q "1 local winners kept" "$W/m" && ok || bad "merge summary"
"$FB" cache ls --cache "$W/b" > "$W/lsb" && grep -qE "quant_mxfp8_row_sm90a +256 +from_a" "$W/lsb" && grep -qE "amax_ten_bf16_sm90a +256 +from_b" "$W/lsb" \
  && [ "$(grep -c _sm90a "$W/lsb")" = 4 ] && ok || { bad "merged winners"; cat "$W/lsb"; }
"$FB" cache verify --cache "$W/b" > /dev/null && ok || bad "verify after merge"
# filtered exports
"$FB" cache export "$W/ink.fbx" --cache "$W/b" --recipe inkling2_small > "$W/e2" && grep -q "1 kernels, 1 winners" "$W/e2" && ok || { bad "export --recipe"; cat "$W/e2"; }
"$FB" cache export "$W/b200.fbx" --cache "$W/b" --fingerprint B200 > "$W/e3" && grep -q "1 kernels, 1 winners, 0 trials" "$W/e3" && ok || { bad "export --fingerprint"; cat "$W/e3"; }

# gc: the unused cubins go, every winner keeps its own
"$FB" cache gc --cache "$W/b" --dry-run > "$W/g0" && grep -qE "[1-9][0-9]* cubins would be dropped: no winner uses, 4 kept" "$W/g0" && ok || { bad "gc --dry-run"; cat "$W/g0"; }
"$FB" cache gc --cache "$W/b" > "$W/g" && grep -qE "[1-9][0-9]* cubins dropped: no winner uses, 4 kept" "$W/g" && ok || { bad "gc"; cat "$W/g"; }
"$FB" cache verify --cache "$W/b" | grep -qE "^kernels +4 entries, 0 bad" && ok || bad "verify after gc"

# a flipped byte in a stored value: verify names it and exits 1; ls says there are bad entries
python3 - "$W/a/data.mdb" <<'EOF'
import sys
p = sys.argv[1]
b = bytearray(open(p, 'rb').read())
i = b.find(b'variant=amax_ten_bf16_sm90a_from_a\nkernel=')
n = 0
while i >= 0:  # every copy LMDB's pages hold
    b[i + 10] ^= 0x01; n += 1
    i = b.find(b'variant=amax_ten_bf16_sm90a_from_a\nkernel=', i + 1)
open(p, 'wb').write(b)
sys.exit(0 if n else 1)
EOF
[ $? -eq 0 ] && ok || bad "could not find the value to flip"
"$FB" cache verify --cache "$W/a" > "$W/v2" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -qE "^BAD winners/[0-9a-f]{16}/amax_ten_bf16_sm90a/b0*256: fails its checksum" "$W/v2" && grep -qE "^winners +3 entries, 1 bad" "$W/v2" \
  && ok || { bad "verify of a flipped byte: exit $rc"; cat "$W/v2"; }
"$FB" cache ls --cache "$W/a" | grep -q "1 bad" && ok || bad "ls does not mention the bad entry"
"$FB" cache export "$W/a2.fbx" --cache "$W/a" | grep -q "2 winners" && ok || bad "export should leave the bad entry out"

# --help of every command; bad usage
for c in ls show verify export import gc; do "$FB" cache $c --help | grep -q "usage: fourbit cache $c" && ok || bad "cache $c --help"; done
"$FB" cache --help | grep -q "usage: fourbit cache" && ok || bad "cache --help"
expect2() { "$FB" "$@" > /dev/null 2> "$W/err"; rc=$?; [ $rc -eq 2 ] && [ -s "$W/err" ] && ok || bad "$*: exit $rc"; }
expect2 cache
expect2 cache frobnicate
expect2 cache show
expect2 cache export
expect2 cache ls --cache "$W/nonexistent"
expect2 cache verify --bogus
expect2 cache import "$W/nonexistent.fbx" --cache "$W/c"
expect2 cache gc --recipe x --cache "$W/b"
echo "test_cache.sh: $pass passed, $fail failed"
[ $fail -eq 0 ]
