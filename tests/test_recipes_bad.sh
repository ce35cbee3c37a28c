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
# Then the cases no fixture file can be (made in a temporary folder: see special() below).
# Prints one line per fixture and a summary; exits 1 if any fixture fails.
set -u

bin=${1:-}
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
  echo "usage: bash tests/test_recipes_bad.sh path/to/fourbit" >&2
  exit 2
fi
dir=$(dirname "$0")/fixtures/recipes
dir=${dir#./}
# a hang fails at this many seconds; generous, as the sandbox's own limits (an instruction count, a 20 s wall clock) answer
# first, and the endless-loop fixture takes about 2 s of CPU, which a loaded 2-core machine can stretch past 10 s of wall
limit=${FB_FIXTURE_TIMEOUT:-60}
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

nfix=$((pass + fail))
if [ "$nfix" -eq 0 ]; then
  echo "no fixtures in $dir"
  exit 1
fi

# Cases a fixture file cannot be, made in $tmp: a directory, a FIFO, a binary chunk, a path of over 250
# characters, a print flood, limits that need FOURBIT_RECIPE_TIMEOUT lowered, and the other commands that load
# a recipe. special NAME PREFIX [ENV=VALUE...] -- ARGS...: `fourbit ARGS` exits 2 within the time limit, prints
# nothing on stdout and one line on stderr that starts with PREFIX (the CLI's tag, the file, ':' and the line
# where there is one) and holds every name of $also after PREFIX, in order (a directory is named so: the word;
# before, it ran as an empty recipe and "returned nil"). flood=N: any number of lines, at most N bytes, the last
# one the message.
special() {
  local name=$1 prefix=$2 why="" envs=() rc msg nl
  shift 2
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  : >"$tmp/out"; : >"$tmp/err"
  rc=$( { env "${envs[@]}" timeout -k 2 "$limit" "$bin" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null; echo $?; } 2>/dev/null )
  msg=$(head -n 1 "$tmp/err")
  nl=$(wc -l <"$tmp/err")
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then why="still running after ${limit} s (killed)"
  elif [ "$rc" -gt 128 ]; then why="crashed: killed by signal $((rc - 128))"
  elif [ "$rc" -ne 2 ]; then why="exit status $rc, not 2"
  elif [ -s "$tmp/out" ]; then why="wrote $(wc -c <"$tmp/out") bytes to stdout"
  elif [ -n "${flood:-}" ]; then
    msg=$(tail -n 1 "$tmp/err")
    [ "$(wc -c <"$tmp/err")" -le "$flood" ] || why="stderr has $(wc -c <"$tmp/err") bytes, more than $flood"
  elif [ "$nl" -ne 1 ]; then why="stderr has $nl line(s), not exactly one"
  fi
  if [ -z "$why" ]; then
    if [[ "$msg" != "$prefix"* ]]; then why="does not start with '$prefix'"
    elif [ -n "${also:-}" ]; then
      local b=$bytext; named "${msg#"$prefix"}" "$also"; bytext=$b
      [ -z "$missing" ] || why="message lacks $missing"
    fi
  fi
  if [ -z "$why" ]; then
    pass=$((pass + 1)); echo "ok    $name"
  else
    fail=$((fail + 1)); failed+=("$name"); echo "FAIL  $name: $why"
    [ -s "$tmp/err" ] && echo "      stderr: $(head -c 400 "$tmp/err" | tr '\n' '|')"
  fi
  also="" flood=""
}
also="" flood=""
t=$tmp
mkdir "$t/dir.lua"; mkfifo "$t/fifo.lua"; mkdir "$t/incdir.lua"
printf 'return include "fifo.lua"\n' >"$t/include_fifo.lua"
printf 'return include "incdir.lua"\n' >"$t/include_dir.lua"
printf '\033Lua\124\000\031\223\r\n\032\n' >"$t/binary.lua"
also="'fifo.lua'" special special_include_fifo "${tag}$t/include_fifo.lua:1: " -- plan "$t/include_fifo.lua"
also="directory" special special_include_dir "${tag}$t/include_dir.lua:1: " -- plan "$t/include_dir.lua"
special special_recipe_fifo "${tag}$t/fifo.lua: " -- plan "$t/fifo.lua"
also="directory" special special_recipe_dir "${tag}$t/dir.lua: " -- plan "$t/dir.lua"
special special_recipe_binary "${tag}$t/binary.lua: " -- plan "$t/binary.lua"
long="$t/$(printf 'd%.0s' {1..150})/$(printf 'e%.0s' {1..150})"
mkdir -p "$long"
cp "$dir/runtime_error.lua" "$dir/unknown_key_top.lua" "$dir/include_missing.lua" "$dir/rules_overlap.lua" "$long/"
special special_long_path_runtime "${tag}$long/runtime_error.lua:2: " -- plan "$long/runtime_error.lua"
also="'nmae'" special special_long_path_field "${tag}$long/unknown_key_top.lua:3: " -- plan "$long/unknown_key_top.lua"
also="'no_such_recipe.lua' $long/no_such_recipe.lua" special special_long_path_include "${tag}$long/include_missing.lua:2: " -- plan "$long/include_missing.lua"
also="$long/rules_overlap.lua" special special_long_path_rule "${tag}$long/rules_overlap.lua:" -- plan "$long/rules_overlap.lua"
printf 'for i = 1, 1000000 do print(string.rep("x", 100)) end\nerror("printed")\n' >"$t/print_flood.lua"
flood=5000 special special_print_flood "${tag}$t/print_flood.lua:2: " -- plan "$t/print_flood.lua"
printf 'while true do local s = string.rep("x", 1 << 20) end\n' >"$t/wall_rep.lua"
printf 'table.move({}, 1, 1 << 62, 2)\n' >"$t/wall_move.lua"
printf 'table.insert(setmetatable({}, { __len = function() return 1 << 62 end }), 1, 0)\n' >"$t/wall_insert.lua"
printf 'table.remove(setmetatable({}, { __len = function() return 1 << 62 end }), 1)\n' >"$t/wall_remove.lua"
# (the allocator stops wall_rep: "not enough memory" has no position, so no line is asked for there)
also="(1 s)" special special_wall_clock_rep "${tag}$t/wall_rep.lua:" FOURBIT_RECIPE_TIMEOUT=1 -- plan "$t/wall_rep.lua"
for w in move insert remove; do
  also="(1 s)" special "special_wall_clock_$w" "${tag}$t/wall_$w.lua:1: " FOURBIT_RECIPE_TIMEOUT=1 -- plan "$t/wall_$w.lua"
done
gc=$dir/sandbox_gc_finalizer_loop.lua
special special_gc_gen "fourbit gen: $gc:4: " -- gen "$gc" --out "$t/gen"
special special_gc_tune "fourbit tune: $gc:4: " -- tune "$gc" --dry-run
special special_gc_train "fourbit train: $gc:4: " -- train "$gc" --steps 1

total=$((pass + fail))
echo "recipes_bad: $total cases ($nfix fixtures, $bytext by their whole text; $((total - nfix)) made at run time), $pass passed, $fail failed${failed:+: ${failed[*]}}"
[ "$fail" -eq 0 ]
