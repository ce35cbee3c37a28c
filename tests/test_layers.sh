#!/usr/bin/env bash
# test_layers.sh — the ground stays below everything: a file of base/ includes only system headers, base/'s own
# headers and include/fourbit/base.h (its part of the public API). Nothing from runtime/, gen/, tuner/, cache/,
# recipes/ or templates/, and not fourbit.h, which declares every module. Each #include is resolved as the compiler
# would (beside the file, then the Makefile's -I folders), so "../runtime/x.h" and <fourbit.h> count too.
# A self-check first: the same rule on a made-up tree with two bad includes must find exactly those two.
# usage: tests/test_layers.sh   (from the repository root)
set -u
INC_DIRS=$(sed -n 's/^INCS *:= *//p' Makefile | tr ' ' '\n' | sed -n 's#^-I\([^/$]\)#\1#p') # the Makefile's own -I folders, in order
ALLOWED="include/fourbit/base.h"

# check ROOT: one line per include of ROOT/base/* (and of $ALLOWED) that resolves outside base/ to anything but
# $ALLOWED; returns their count
check() {
  local root=$1 bad=0 f line kind name hit d re='^[[:space:]]*#[[:space:]]*include[[:space:]]*(["<])([^">]+)[">]'
  for f in "$root"/base/*.c "$root"/base/*.h "$root/$ALLOWED"; do
    [ -e "$f" ] || continue
    while IFS= read -r line; do
      [[ $line =~ $re ]] || continue
      kind=${BASH_REMATCH[1]} name=${BASH_REMATCH[2]} hit=
      if [ "$kind" = '"' ] && [ -e "$(dirname "$f")/$name" ]; then hit=$(dirname "$f")/$name; fi
      if [ -z "$hit" ]; then
        for d in $INC_DIRS; do
          if [ -e "$root/$d/$name" ]; then hit=$root/$d/$name; break; fi
        done
      fi
      [ -n "$hit" ] || continue # a system header
      hit=$(realpath --relative-to="$root" "$hit")
      case $hit in
      base/*|$ALLOWED) ;;
      *) echo "  ${f#"$root"/}: #include $kind$name$([ "$kind" = '<' ] && echo '>' || echo '"'): $hit is above base/"; bad=$((bad + 1)) ;;
      esac
    done < "$f"
  done
  return $bad
}

T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
mkdir -p "$T/base" "$T/include/fourbit" "$T/runtime" "$T/gen"
touch "$T/include/fourbit.h" "$T/include/fourbit/base.h" "$T/runtime/comm.h" "$T/gen/fb_embed.h" "$T/base/own.h"
printf '#include "own.h"\n#include "fourbit/base.h"\n#include <stdio.h>\n#include "../runtime/comm.h"\n' > "$T/base/a.c"
printf '#include <fourbit.h>\n#include <stdint.h>\n' > "$T/base/b.h"
check "$T" > "$T/out"
if [ $? -ne 2 ]; then echo "test_layers.sh: the self-check found $(grep -c . "$T/out") of the 2 planted includes:"; cat "$T/out"; exit 1; fi

check . > "$T/out"
n=$?
if [ $n -ne 0 ]; then
  echo "test_layers.sh: FAILED: $n include(s) of base/ reach above it:"
  cat "$T/out"
  exit 1
fi
echo "test_layers.sh: base/ includes only itself, system headers and $ALLOWED"
