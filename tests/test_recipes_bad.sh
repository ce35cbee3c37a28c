#!/usr/bin/env bash
# test_recipes_bad.sh — every bad recipe in tests/fixtures/recipes/ must be refused with one clear message.
#
# usage: bash tests/test_recipes_bad.sh build/fourbit      (from the repository root)
#
# For each fixture X.lua (files starting with _ are helpers that fixtures include, not fixtures), runs
# `fourbit plan X.lua` and checks:
#   - exit status 2, nothing on stdout, exactly one line on stderr;
#   - the line names, in order, what the text after "-- expect: " on the fixture's first line names: its field paths
#     (experts.fwd.act, layers[1].range, model.d_ff:), quoted names and values ('outr', '../x.lua'), labels (name:,
#     last_fraction(), numbers (144, -1, 3..9) and line references (:5:, the line the error must point at); the English
#     around them is not compared. Four fixtures whose message names nothing (returns_nil, returns_number,
#     runtime_error_object_table, sandbox_memory: a Lua type or Lua's own words are all there is) are compared by the
#     whole text, and counted apart in the summary;
#   - the line starts with the fixture's path, ':', a line number and ':' (after the CLI's own
#     "fourbit plan: " tag), e.g. "fourbit plan: tests/fixtures/recipes/unknown_key_top.lua:3: ...";
#     a fixture whose second line is "-- noline: <why>" must start with "<path>: " instead (no line);
#   - it finishes within FB_FIXTURE_TIMEOUT seconds (default 10): the sandbox's limits must stop it.
# Prints one line per fixture and a summary; exits 1 if any fixture fails.
set -u

bin=${1:-}
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
  echo "usage: bash tests/test_recipes_bad.sh path/to/fourbit" >&2
  exit 2
fi
dir=$(dirname "$0")/fixtures/recipes
dir=${dir#./}
limit=${FB_FIXTURE_TIMEOUT:-10}
tag="fourbit plan: "
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# the names of an expect text (see above), one a line
names() { grep -oE "'[^']*'|:[0-9]+:|[A-Za-z_][A-Za-z0-9_]*((\.[A-Za-z_][A-Za-z0-9_]*)|(\[[0-9]+\]))+:?|\b[A-Za-z_][A-Za-z0-9_]*[:(]|\b-?[0-9]+(\.[0-9]+)?(\.\.[0-9]+)?\b" <<<"$1"; }
# does MSG hold every name of EXPECT in order? (no names: the whole text) sets $missing
named() {
  local msg=$1 rest=$1 n; missing=
  mapfile -t nv < <(names "$2")
  if [ ${#nv[@]} -eq 0 ]; then bytext=$((bytext + 1)); [[ "$msg" == *"$2"* ]] || missing="the text: $2"; return; fi
  for n in "${nv[@]}"; do
    if [[ "$rest" == *"$n"* ]]; then rest=${rest#*"$n"}; else missing="$missing $n"; fi
  done
  [ -z "$missing" ] || missing="the names (in order):$missing"
}

pass=0 fail=0 failed=() bytext=0
for f in "$dir"/*.lua; do
  name=$(basename "$f" .lua)
  case "$name" in _*) continue ;; esac
  expect=$(sed -n '1s/^-- expect: //p' "$f")
  noline=$(sed -n '2s/^-- noline: //p' "$f")
  why=""
  : >"$tmp/out"
  : >"$tmp/err"
  if [ -z "$expect" ]; then
    why="no '-- expect: ' on line 1"
  else
    # (the shell's own "Segmentation fault" notice of a crash goes to /dev/null; the status stays)
    rc=$( { timeout -k 2 "$limit" "$bin" plan "$f" >"$tmp/out" 2>"$tmp/err"; echo $?; } 2>/dev/null )
    msg=$(head -n 1 "$tmp/err")
    nl=$(wc -l <"$tmp/err")
    rest=${msg#"$tag"}
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then why="still running after ${limit} s (killed)"
    elif [ "$rc" -gt 128 ]; then why="crashed: killed by signal $((rc - 128))"
    elif [ "$rc" -ne 2 ]; then why="exit status $rc, not 2"
    elif [ -s "$tmp/out" ]; then why="wrote $(wc -c <"$tmp/out") bytes to stdout"
    elif [ "$nl" -ne 1 ] || [ -n "$(tail -c 1 "$tmp/err" | tr -d '\n')" ]; then
      why="stderr has $nl line(s) (and $(tail -c 1 "$tmp/err" | tr -d '\n' | wc -c) byte(s) after the last newline), not exactly one"
    elif named "$rest" "$expect"; [ -n "$missing" ]; then why="message lacks $missing"
    elif [ -n "$noline" ]; then
      [[ "$rest" == "$f: "* ]] || why="does not start with '$f: ' (noline fixture)"
    else
      after=${rest#"$f:"}
      if [ "$after" = "$rest" ]; then why="does not start with '$f:'"
      elif ! [[ "$after" =~ ^[0-9]+:\  ]]; then why="no line number after '$f:'"
      fi
    fi
  fi
  if [ -z "$why" ]; then
    pass=$((pass + 1))
    echo "ok    $name"
  else
    fail=$((fail + 1))
    failed+=("$name")
    echo "FAIL  $name: $why"
    [ -s "$tmp/err" ] && echo "      stderr: $(head -c 400 "$tmp/err" | tr '\n' '|')"
  fi
done

total=$((pass + fail))
if [ "$total" -eq 0 ]; then
  echo "no fixtures in $dir"
  exit 1
fi
echo "recipes_bad: $total fixtures ($bytext by their whole text), $pass passed, $fail failed${failed:+: ${failed[*]}}"
[ "$fail" -eq 0 ]
