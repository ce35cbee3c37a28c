#!/usr/bin/env bash
# test_golden.sh — the plans of the shipped recipes (text and JSON) must equal tests/golden/ byte for
# byte; the JSON must parse and hold the fields the issue promises. After an intended change:
# `make golden`, then review the diff like code.
# usage: tests/test_golden.sh build/fourbit RECIPE...
set -u
FB=$1; shift
fail=0
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
for r in "$@"; do
  for kind in txt json; do
    flag=; [ $kind = json ] && flag=--json
    g=tests/golden/plan_$r.$kind
    if ! "$FB" plan $flag recipes/$r.lua > "$W/out" 2> "$W/err"; then echo "  FAIL $r ($kind): $(cat "$W/err")"; fail=1; continue; fi
    if [ ! -f "$g" ]; then echo "  FAIL $r: no golden file $g (make golden)"; fail=1; continue; fi
    if ! cmp -s "$W/out" "$g"; then echo "  FAIL $r ($kind) differs from $g:"; diff "$g" "$W/out" | head -20; fail=1; continue; fi
    if [ $kind = json ]; then
      python3 - "$W/out" "$r" <<'PY' || fail=1
import json, sys
p = json.load(open(sys.argv[1]))
L = p["model"]["layers"]
assert [l["layer"] for l in p["layers"]] == list(range(1, L + 1)), "layers 1..L"
for l in p["layers"]:
    for k in ("fwd", "bwd", "dispatch", "combine"):
        assert l[k] in ("nvfp4", "mxfp8", "bf16", "s2f6"), (k, l[k])
names = [k["name"] for k in p["kernels"]]
assert len(names) == len(set(names)) and names, "unique kernel names"
assert all(n.endswith("_sm90a") for n in names)
assert len(p["plan_sha256"]) == 64
print(f"  ok   {sys.argv[2]}: {L} layers, {len(names)} kernels, plan {p['plan_sha256'][:12]}")
PY
    fi
  done
done
[ $fail -eq 0 ] && echo "test_golden: $# recipes match" || { echo "test_golden: FAILED"; exit 1; }
