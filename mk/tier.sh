#!/usr/bin/env bash
# mk/tier.sh — one tier of make check / make test / make test-exhaustive: prints "== NAME", runs CMD, then one line
# "-- NAME: passed|FAILED (exit N) in W s wall, C s user+sys", and exits with CMD's status. The Makefile runs the tiers
# as targets of a parallel sub-make (-O keeps each tier's lines together).
# usage: mk/tier.sh NAME [--log FILE] -- CMD [ARGS...]
#   --log FILE   CMD's output goes to FILE; printed whole if CMD fails, else only its last line
set -u
name=$1; shift
log=
[ "${1:-}" = --log ] && { log=$2; shift 2; }
[ "${1:-}" = -- ] && shift
echo "== $name"
t0=$(date +%s.%N)
if [ -n "$log" ]; then
  mkdir -p "$(dirname "$log")"
  "$@" > "$log" 2>&1; rc=$?
  if [ $rc -ne 0 ]; then cat "$log"; else tail -1 "$log"; fi
else
  "$@"; rc=$?
fi
t1=$(date +%s.%N)
tf=$(mktemp); times > "$tf" # (in this shell: a subshell would count its own children, none)
read -r _ _ cu cs < <(tr '\n' ' ' < "$tf"); rm -f "$tf" # the second line: the children's user and system time
sec() { awk -v t="$1" 'BEGIN { n = split(t, p, "m"); sub("s", "", p[2]); printf "%.1f", p[1] * 60 + p[2] }'; }
state=passed; [ $rc -eq 0 ] || state="FAILED (exit $rc)"
echo "-- $name: $state in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s wall, $(awk -v u="$(sec "$cu")" -v s="$(sec "$cs")" 'BEGIN { printf "%.1f", u + s }') s user+sys"
exit $rc
