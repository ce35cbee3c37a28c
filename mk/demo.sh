#!/usr/bin/env bash
# demo.sh — the main job until the runtime exists: what this build links and sees, the plan of the
# design's recipe, kernels generated and compiled for every target, then every quantizer of the recipe on
# Gaussian and heavy-tailed (Student-t, 3 dof) activations with the round-trip error a recipe author
# compares formats by.
set -eu
FB=$1; T=${2:-build/tests/tools/f32tool}
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
R=256; C=4096
echo "== fourbit info"; "$FB" info
echo; echo "== fourbit plan recipes/inkling2_small.lua (the recipe of the design)"
"$FB" plan recipes/inkling2_small.lua | sed -n '1,12p;/^memory/,$p'
echo; echo "== fourbit gen recipes/tiny.lua --only quant_nvfp4 (NVRTC, sm_90a and the Blackwell targets; nothing runs here)"
"$FB" gen recipes/tiny.lua --arch sm_90a,sm_100a,sm_103a --only quant_nvfp4 --out build/kernels | tail -3
"$T" gen gauss $R $C 1 "$W/gauss.f32"; "$T" gen t3 $R $C 2 "$W/t3.f32"
echo; echo "== round trip of a $R x $C float32 matrix (fourbit quant --stats)"
printf '%-44s %-6s %s\n' "format and options" "input" "error"
while IFS='|' read -r name flags; do
  for d in gauss t3; do
    s=$("$FB" quant $flags --rows $R --cols $C --stats "$W/$d.f32" "$W/q" | sed 's/round trip over [0-9]* finite values: //')
    printf '%-44s %-6s %s\n' "$name" "$d" "$s"
  done
done <<'LIST'
nvfp4, per-tensor outer (NVIDIA)|--format nvfp4
nvfp4, per-token outer|--format nvfp4 --outer row
nvfp4, per-token outer, 4/6 (Inkling)|--format nvfp4 --outer row --four-over-six
nvfp4, per-token outer, SR|--format nvfp4 --outer row --rounding sr
mxfp8, RN|--format mxfp8
mxfp8, SR (backward)|--format mxfp8 --rounding sr
s2f6 (combine)|--format s2f6
s2f6 + RHT-32 (combine, Inkling)|--format s2f6 --rht
LIST
