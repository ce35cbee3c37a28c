#!/usr/bin/env bash
# test_gen_table.sh — the generator's decision table (tests/tools/gen_table.c: every spec's template or why none, every
# variant's name, #defines, grid, block and shared memory, every pruned variant's reason) against its golden digests
# (tests/golden/gen_table.sha256), for the shipped recipes' own tune families, for a grid of every template parameter's
# values over their plans, and for 20000 pseudo-random specs. A change to gen/templates.c that changes what is
# generated fails here; after an intended one, `make golden` writes the new digests and the commit says what changed
# (diff the texts this test leaves in OUT between the two builds).
# usage: tests/test_gen_table.sh build/tests/tools/gen_table tests/golden/gen_table.sha256 OUT RECIPE...
set -u
T=$1 G=$2 OUT=$3; shift 3
mkdir -p "$OUT"
fail=0
"$T" "$@" > "$OUT/families.txt" || fail=1
"$T" --grid "$@" > "$OUT/grid.txt" || fail=1
"$T" --random 20000 > "$OUT/random.txt" || fail=1
[ $fail -eq 0 ] || { echo "  FAIL: gen_table exited non-zero"; exit 2; } # 2: make golden stops too (no digests of a partial table)
for f in families grid random; do
  n=$(grep -c '^  ' "$OUT/$f.txt")
  [ "$n" -gt 1000 ] || { echo "  FAIL: $f: only $n variant lines"; fail=1; }
done
# the table must name legal and pruned variants and specs without a template, or it checks nothing
for w in 'pruned' 'no template: ' 'tmpl=gemm_sm90.cuh' 'tmpl=mx_col.cuh'; do
  grep -q -- "$w" "$OUT/grid.txt" "$OUT/random.txt" || { echo "  FAIL: the table has no '$w' line"; fail=1; }
done
(cd "$OUT" && sha256sum families.txt grid.txt random.txt) > "$OUT/now.sha256"
if ! cmp -s "$G" "$OUT/now.sha256"; then
  echo "  FAIL: the generator's table differs from $G:"; diff "$G" "$OUT/now.sha256" | sed 's/^/    /'
  echo "  (the texts are in $OUT; after an intended change run make golden and say in the commit what changed)"
  fail=1
fi
[ $fail -eq 0 ] && echo "  $(wc -l < "$OUT/families.txt") + $(wc -l < "$OUT/grid.txt") + $(wc -l < "$OUT/random.txt") lines, digests as golden"
exit $fail
