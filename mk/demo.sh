#!/usr/bin/env bash
# demo.sh — the main job: what this build links and sees, the plan of the
# design's recipe, kernels generated and compiled for every target, then every quantizer of the recipe on
# Gaussian and heavy-tailed (Student-t, 3 dof) activations with the round-trip error a recipe author
# compares formats by, then the tiny recipe trained on the CPU for a few hundred steps (DEMO_STEPS, default 200)
# with its loss curve (build/demo/train_tiny.png and an ASCII plot).
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

# The runtime: train the tiny recipe (inkling2_small's numerics on a 6-layer, 8-expert model) for a few hundred
# steps. On the CPU every quantizer is the numerics library's (the oracle of the GPU kernels); the GPU train
# step is not wired into the runtime yet, so this runs on the CPU even where there is a GPU.
STEPS=${DEMO_STEPS:-200}; D=build/demo; mkdir -p "$D"
echo; echo "== fourbit train recipes/tiny.lua --device cpu --steps $STEPS (a line every 20 steps; ~0.7 s a step)"
"$FB" train recipes/tiny.lua --device cpu --steps "$STEPS" --print-every 20 --log "$D/train_tiny.csv"
floor=$(awk -F, 'NR == 2 {print $3}' "$D/train_tiny.csv")
if command -v gnuplot > /dev/null; then
  bash mk/demo_plot.sh "$D" "$floor" | gnuplot
  echo "plot: $D/train_tiny.png"
else
  echo "(gnuplot not found: no plot; apt-get install gnuplot-nox)"
fi
echo "loss by 20-step window (mean), floor $floor:"
awk -F, -v f="$floor" 'NR > 1 { s += $2; n++; if (n == 20) { printf "  steps %4d-%4d  loss %.4f  gap %.4f\n", $1 - 19, $1, s / n, s / n - f; s = 0; n = 0 } }' "$D/train_tiny.csv"
