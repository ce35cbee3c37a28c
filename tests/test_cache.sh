#!/usr/bin/env bash
# test_cache.sh — `fourbit cache` end to end on the CPU: ls, show, verify (clean, then a flipped byte: exit 1 and
# the bad entry named), export / import round trip and merge (the faster winner stays, a line says so), a corrupt
# or truncated export (exit 2, nothing written), filters, gc, --help of every command, bad usage (exit 2).
# Two caches are filled by build/tests/test_cache --fill DIR a|b: four kernel specs, two of them on both sides
# with different times (quant_mxfp8_row faster in a, amax_ten faster in b), one under a B200 fingerprint.
# Checks read exit codes, files (exports, byte for byte), the fields of the tables (ls's rows, show's keys, verify's
# counts) and the numbers of the summary lines, not sentences.
# usage: tests/test_cache.sh build/fourbit build/tests/test_cache
set -u
FB=$1
FILL=$2
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
pass=0; fail=0
ok() { pass=$((pass+1)); }
bad() { fail=$((fail+1)); echo "  FAIL: $*"; }
"$FILL" --fill "$W/a" a && "$FILL" --fill "$W/b" b || { echo "test_cache.sh: --fill failed"; exit 1; }
# the numbers of a summary line (FILE's first line, or the line LABEL starts), the path and words aside
nums() { { if [ -n "${2:-}" ]; then grep -m1 "^$2" "$1"; else head -1 "$1"; fi; } | sed "s|$W/[^ :]*||g" | tr ' (),;:' '\n' \
  | grep -xE '[0-9]+(\.[0-9]+)?' | tr '\n' ' '; }
# verify's table, "kernels N entries, B bad" a row: "Nk Bk Nw Bw Nt Bt", then verify's exit status (its output: $W/vc)
counts() { "$FB" cache verify --cache "$1" > "$W/vc" 2>&1; local rc=$?
  awk -v rc=$rc '$3 == "entries," { c[$1] = $2 " " $4 } END { print c["kernels"], c["winners"], c["trials"], rc }' "$W/vc"; }
# ls's rows (after the summary and the column heads): fingerprint, kernel spec, bucket, variant, median ms, speed-up, ...
rows() { tail -n +3 "$1"; }

"$FB" cache ls --cache "$W/a" > "$W/ls" 2>&1 && [ "$(nums "$W/ls")" = "4 3 3 " ] && [ "$(rows "$W/ls" | wc -l)" = 3 ] \
  && rows "$W/ls" | awk '$2 == "quant_mxfp8_row_sm90a" && $3 == 256 && $4 == "from_a" && $5 == "0.1000" && $6 == "1.50x" { f = 1 } END { exit !f }' \
  && ok || { bad "ls"; cat "$W/ls"; }
FOURBIT_CACHE="$W/a" "$FB" cache ls > "$W/ls2" 2>&1 && cmp -s <(tail -n +2 "$W/ls") <(tail -n +2 "$W/ls2") && ok || bad "FOURBIT_CACHE is not the default dir"
"$FB" cache ls --cache "$W/a" --fingerprint B200 > "$W/ls3" && [ "$(rows "$W/ls3" | wc -l)" = 1 ] && [ "$(rows "$W/ls3" | awk '{ print $2 }')" = router_top2_e8_sm90a ] \
  && ok || bad "ls --fingerprint"
# show: "  key  value" lines (the runner-up, the fingerprint's device), then the trials' rows (key, variant, bucket, status)
"$FB" cache show quant_mxfp8 --cache "$W/a" > "$W/show" 2>&1 && [ "$(awk '$1 == "runner-up" { print $2 }' "$W/show")" = quant_mxfp8_row_sm90a_runnerup ] \
  && awk '$1 == "fingerprint" && $2 == "NVIDIA" && $3 == "H200" && $4 == "sm_90" { f = 1 } END { exit !f }' "$W/show" \
  && awk 'length($1) == 14 && $1 ~ /^[0-9a-f]+$/ && $2 == "quant_mxfp8_row_sm90a_from_a" && $3 == 256 && $4 == "ok" { f = 1 } END { exit !f }' "$W/show" \
  && ok || { bad "show"; cat "$W/show"; }
"$FB" cache show nothing_like_this --cache "$W/a" > /dev/null 2>&1; [ $? -eq 1 ] && ok || bad "show of nothing: not exit 1"
[ "$(counts "$W/a")" = "4 0 3 0 3 0 0" ] && ok || { bad "verify clean"; cat "$W/vc"; }

# export a, import into a fresh cache: the same entries; export again: the same bytes
"$FB" cache export "$W/a.fbx" --cache "$W/a" > "$W/e" && [ "$(nums "$W/e" | cut -d' ' -f1-3)" = "4 3 3" ] && [ -s "$W/a.fbx" ] && ok || { bad "export"; cat "$W/e"; }
"$FB" cache import "$W/a.fbx" --cache "$W/c" > "$W/i" && [ "$(counts "$W/c")" = "4 0 3 0 3 0 0" ] && ok || { bad "import into empty"; cat "$W/i"; }
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
# one line per conflict, naming the entry's key and both variants with their times, the kept one first; which one the
# cache kept is read back with ls below
conflict() { # key-spec, kept variant, its ms, the other, its ms
  grep -E "winners/[0-9a-f]{16}/$1/b0*256[: ]" "$W/m" | grep -F "$2 ($3 ms)" | grep -qF "$4 ($5 ms)" && \
    [ "$(grep -E "winners/[0-9a-f]{16}/$1/b0*256[: ]" "$W/m" | sed "s/.*$2 ($3 ms)//" | grep -cF "$4 ($5 ms)")" = 1 ]; }
conflict quant_mxfp8_row_sm90a quant_mxfp8_row_sm90a_from_a 0.1000 quant_mxfp8_row_sm90a_from_b 0.2000 \
  && ok || { bad "merge conflict line (imported faster)"; cat "$W/m"; }
conflict amax_ten_bf16_sm90a amax_ten_bf16_sm90a_from_b 0.2500 amax_ten_bf16_sm90a_from_a 0.3000 \
  && ok || { bad "merge conflict line (local faster)"; cat "$W/m"; }
[ "$(grep -cE "winners/[0-9a-f]{16}/" "$W/m")" = 2 ] && ok || bad "merge: not two conflict lines"
"$FB" cache ls --cache "$W/b" > "$W/lsb" && rows "$W/lsb" | awk '$2 == "quant_mxfp8_row_sm90a" && $3 == 256 && $4 == "from_a" { a = 1 }
  $2 == "amax_ten_bf16_sm90a" && $3 == 256 && $4 == "from_b" { b = 1 } END { exit !(a && b && NR == 4) }' && ok || { bad "merged winners"; cat "$W/lsb"; }
"$FB" cache verify --cache "$W/b" > /dev/null && ok || bad "verify after merge"
# filtered exports
# filtered exports: what a fresh cache holds after importing them
"$FB" cache export "$W/ink.fbx" --cache "$W/b" --recipe inkling2_small > "$W/e2" && "$FB" cache import "$W/ink.fbx" --cache "$W/ink" > /dev/null \
  && [ "$(counts "$W/ink" | cut -d' ' -f1,3,7)" = "1 1 0" ] && "$FB" cache ls --cache "$W/ink" > "$W/lsi" && [ "$(rows "$W/lsi" | awk '{ print $NF }')" = inkling2_small ] \
  && ok || { bad "export --recipe"; cat "$W/e2"; }
"$FB" cache export "$W/b200.fbx" --cache "$W/b" --fingerprint B200 > "$W/e3" && "$FB" cache import "$W/b200.fbx" --cache "$W/b200" > /dev/null \
  && [ "$(counts "$W/b200")" = "1 0 1 0 0 0 0" ] && ok || { bad "export --fingerprint"; cat "$W/e3"; }

# gc: the unused cubins go, every winner keeps its own
# gc: the unused cubins go, every winner (4) keeps its own; --dry-run says how many (dropped, kept) and changes nothing
nk=$(counts "$W/b" | cut -d' ' -f1)
"$FB" cache export "$W/g0.fbx" --cache "$W/b" > /dev/null
"$FB" cache gc --cache "$W/b" --dry-run > "$W/g0" && [ "$(nums "$W/g0")" = "$((nk - 4)) 4 " ] && [ "$nk" -gt 4 ] \
  && "$FB" cache export "$W/g1.fbx" --cache "$W/b" > /dev/null && cmp -s "$W/g0.fbx" "$W/g1.fbx" && ok || { bad "gc --dry-run ($nk kernels)"; cat "$W/g0"; }
"$FB" cache gc --cache "$W/b" > "$W/g" && [ "$(nums "$W/g")" = "$((nk - 4)) 4 " ] && ok || { bad "gc"; cat "$W/g"; }
[ "$(counts "$W/b")" = "4 0 4 0 6 0 0" ] && ok || { bad "verify after gc"; cat "$W/vc"; }

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
# verify: exit 1, a BAD row naming the entry, the winners' count 3 with 1 bad
c=$(counts "$W/a")
[ "$c" = "4 0 3 1 3 0 1" ] && grep -E '^BAD winners/[0-9a-f]{16}/amax_ten_bf16_sm90a/b0*256[: ]' "$W/vc" | [ "$(wc -l)" = 1 ] \
  && [ "$(grep -c '^BAD ' "$W/vc")" = 1 ] && ok || { bad "verify of a flipped byte: $c"; cat "$W/vc"; }
"$FB" cache ls --cache "$W/a" > "$W/ls4"; [ "$(nums "$W/ls4")" = "4 3 3 1 " ] && ok || { bad "ls does not count the bad entry"; head -1 "$W/ls4"; }
"$FB" cache export "$W/a2.fbx" --cache "$W/a" > /dev/null && "$FB" cache import "$W/a2.fbx" --cache "$W/a2" > /dev/null \
  && [ "$(counts "$W/a2" | cut -d' ' -f3,4,7)" = "2 0 0" ] && ok || bad "export should leave the bad entry out"

# ---- a damaged data.mdb (issue 23): a truncated file, a 0-byte one, a zeroed one, a flipped byte in a leaf page.
# Every command that opens the cache (cache verify/ls/show/export/import/gc, gen --cache, train --device gpu --cache)
# exits 2 naming DIR/data.mdb, or (a byte LMDB does not depend on) as usual: never by a signal (exit status > 128).
"$FILL" --fill "$W/d" a && "$FILL" --fill "$W/d" b || bad "--fill of the damage cache"
"$FB" cache export "$W/d.fbx" --cache "$W/d" > /dev/null || bad "export of the damage cache"
# run every command on the cache $1; prints "rc rc rc ..." (their exit statuses); stderr of each in $W/dm.<i>
on_cache() { local i=0 c
  for c in "cache verify --cache" "cache ls --cache" "cache show quant --cache" "cache export $W/dx.fbx --cache" \
           "cache import $W/d.fbx --cache" "cache gc --cache" "gen recipes/tiny.lua --only quant_mxfp8_row --out $W/dk --cache" \
           "train recipes/tiny.lua --device gpu --steps 1 --cache"; do
    $FB $c "$1" > /dev/null 2> "$W/dm.$i"; echo -n "$? "; i=$((i+1)); done; }
# all exit 2 and each names data.mdb
all_damaged() { local r=$(on_cache "$1") i=0 x; for x in $r; do [ "$x" = 2 ] && grep -qF "$1/data.mdb" "$W/dm.$i" || { echo "$r"; return 1; }; i=$((i+1)); done; }
fresh() { rm -rf "$W/x"; cp -r "$W/d" "$W/x"; }
fresh; sz=$(stat -c %s "$W/x/data.mdb"); truncate -s $((sz / 2)) "$W/x/data.mdb"
r=$(all_damaged "$W/x") && ok || bad "a truncated data.mdb: exit statuses $r (want 2 each, naming data.mdb)"
fresh; truncate -s 12288 "$W/x/data.mdb"
r=$(all_damaged "$W/x") && ok || bad "data.mdb truncated to 3 pages: exit statuses $r"
fresh; : > "$W/x/data.mdb"
r=$(all_damaged "$W/x") && ok || bad "a 0-byte data.mdb: exit statuses $r (want 2: damaged, not an empty clean cache)"
fresh; head -c "$sz" /dev/zero > "$W/x/data.mdb"
r=$(all_damaged "$W/x") && ok || bad "a zeroed data.mdb: exit statuses $r"
# flipped bytes: the node pointers and first node of every leaf page that holds a value (LMDB 0.9: 4096-byte pages,
# header pgno u64 | pad u16 | flags u16 | lower u16 | upper u16, then the node offsets)
cands=$(python3 - "$W/d/data.mdb" <<'EOF'
import struct, sys
b = open(sys.argv[1], 'rb').read()
c = []
for i in range(2, len(b) // 4096):
    pg = b[i * 4096:(i + 1) * 4096]
    pgno, pad, flags, lower, upper = struct.unpack_from('<QHHHH', pg)
    if pgno == i and flags == 2 and any(m in pg for m in (b'FBW1', b'FBT1', b'FBK1')):
        c += [i * 4096 + off for off in (16, 19, upper, upper + 2)]
for o in c[::max(1, len(c) // 16)]:  # 16 of them at most, spread over the pages
    print(o)
EOF
)
nc=0; nsig=0; ndam=0; nbadmsg=0
for o in $cands; do
  fresh; python3 -c "import sys; f = open(sys.argv[1], 'r+b'); f.seek($o); c = f.read(1); f.seek($o); f.write(bytes([c[0] ^ 0xff]))" "$W/x/data.mdb"
  r=$(on_cache "$W/x"); nc=$((nc+1)); i=0
  for x in $r; do
    [ "$x" -gt 128 ] && { nsig=$((nsig+1)); [ $nsig -le 3 ] && echo "  byte $o flipped: command $((i+1)) died by signal $((x - 128)) ($r)"; }
    [ "$x" = 2 ] && { ndam=$((ndam+1)); grep -qF "$W/x/data.mdb" "$W/dm.$i" || [ $i -ge 4 ] || nbadmsg=$((nbadmsg+1)); }
    i=$((i+1)); done
done
[ $nc -ge 10 ] && [ $nsig = 0 ] && [ $ndam -gt 0 ] && [ $nbadmsg = 0 ] && ok \
  || bad "flipped bytes: $nc candidates, $nsig commands died by a signal, $ndam exits 2, $nbadmsg without data.mdb named"
# the whole walk stays clean on the good cache
[ "$(on_cache "$W/d" | cut -d' ' -f1-3)" = "0 0 0" ] && ok || bad "the good cache: verify, ls, show did not exit 0"

# ---- a cache without write access (issue 23): verify, ls, export read it; import and gc fail (exit 1) and change
# nothing. Tests run as root, whom permission bits do not stop: the commands run as nobody (setpriv), and under a
# read-only bind mount (unshare -m) where the kernel refuses every write, root's too.
RO=$(mktemp -d /tmp/fb_cache_ro.XXXXXX); trap 'rm -rf "$W" "$RO"' EXIT; chmod 755 "$RO"
cp -r "$W/a2" "$RO/c" && mkdir -m 777 "$RO/out" && cp "$W/d.fbx" "$RO/out/" && chmod 444 "$RO/c"/* "$RO/out/d.fbx" && chmod 555 "$RO/c"
ro_checks() { # $1: how to run a command ("setpriv ..." or a read-only mount wrapper); $2: label
  local e c rc
  $1 "$FB" cache verify --cache "$RO/c" > "$W/rv" 2>&1 && [ "$(awk '$1 == "winners" { print $2 }' "$W/rv")" = 2 ] && ok || { bad "$2: verify"; cat "$W/rv"; }
  $1 "$FB" cache ls --cache "$RO/c" > "$W/rl" 2>&1 && [ "$(rows "$W/rl" | wc -l)" = 2 ] && ok || { bad "$2: ls"; cat "$W/rl"; }
  $1 "$FB" cache export "$RO/out/e.fbx" --cache "$RO/c" > "$W/re" 2>&1 && cmp -s "$RO/out/e.fbx" "$W/a2.fbx" && ok || { bad "$2: export"; cat "$W/re"; }
  $1 "$FB" cache import "$RO/out/d.fbx" --cache "$RO/c" > /dev/null 2> "$W/ri"; rc=$?
  [ $rc = 1 ] && grep -qF "$RO/c" "$W/ri" && ok || { bad "$2: import into it: exit $rc"; cat "$W/ri"; }
  $1 "$FB" cache gc --cache "$RO/c" > /dev/null 2> "$W/rg"; rc=$?
  [ $rc = 1 ] && ok || { bad "$2: gc of it: exit $rc"; cat "$W/rg"; }
  $1 "$FB" cache gc --dry-run --cache "$RO/c" > /dev/null 2>&1 && ok || bad "$2: gc --dry-run of it"
  rm -f "$RO/out/e.fbx"
}
"$FB" cache export "$W/a2.fbx" --cache "$W/a2" > /dev/null
if setpriv --reuid=65534 --regid=65534 --clear-groups true 2> /dev/null; then
  ro_checks "setpriv --reuid=65534 --regid=65534 --clear-groups" "no write permission (as nobody)"
else echo "  (setpriv is not usable here: the no-permission case is not tested)"; fi
chmod 755 "$RO/c"; chmod 644 "$RO/c"/*
if unshare -m sh -c "mount --bind -o ro '$RO/c' '$RO/c'" 2> /dev/null; then
  romount() { unshare -m sh -c 'mount --bind -o ro "$0" "$0" && exec "$@"' "$RO/c" "$@"; }
  ro_checks romount "a read-only mount"
else echo "  (unshare -m / mount --bind -o ro is not usable here: the read-only mount case is not tested)"; fi
cmp -s <(cd "$RO/c" && sha256sum data.mdb) <(cd "$W/a2" && sha256sum data.mdb) && ok || bad "the read-only cache changed"

# ---- temporary files of an export (issue 23): PATH.tmp.<pid>.* of a process that is gone are removed by the next
# write to PATH; one of a running process stays; none is left behind by a good export
sh -c 'exit 0' & dead=$!; wait $dead
: > "$W/t.fbx.tmp.$dead.AbC123"; : > "$W/t.fbx.tmp.$$.XyZ789"
"$FB" cache export "$W/t.fbx" --cache "$W/a2" > /dev/null && [ ! -e "$W/t.fbx.tmp.$dead.AbC123" ] && [ -e "$W/t.fbx.tmp.$$.XyZ789" ] \
  && [ "$(ls "$W" | grep -c '^t\.fbx\.tmp\.')" = 1 ] && ok || { bad "stale temporary files"; ls "$W" | grep '^t\.fbx'; }

# --help of every command; bad usage
# --help: exit 0, the text on stdout (naming the command), nothing on stderr
helps() { "$FB" "$@" --help > "$W/h" 2> "$W/he" && [ -s "$W/h" ] && [ ! -s "$W/he" ] && grep -qF "fourbit $*" "$W/h"; }
for c in ls show verify export import gc; do helps cache $c && ok || bad "cache $c --help"; done
helps cache && ok || bad "cache --help"
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
