#!/usr/bin/env bash
# mk/cutlass.sh — fetch CUTLASS's C++ headers for the host-side test oracles (tests/cutlass/): the nvidia-cutlass wheel
# from PyPI, pinned by version and SHA-256, unpacked into DIR/include. A test-only dependency: nothing of CUTLASS is in
# fourbit's kernels or library, and nothing of it is committed.
#   bash mk/cutlass.sh DIR
set -eu
DIR=$1
VER=4.2.0.0
SHA=f9599ada45c7bcb6bf53f7d3f0a7d154183e53451c01bfa59eecd37dd4a693f6
WHL=nvidia_cutlass-$VER-py3-none-any.whl
mkdir -p "$DIR/whl"
if [ ! -f "$DIR/whl/$WHL" ]; then
  python3 -m pip download --quiet --no-deps --only-binary=:all: "nvidia-cutlass==$VER" -d "$DIR/whl" \
    || { echo "mk/cutlass.sh: could not download nvidia-cutlass $VER from PyPI (the CUTLASS oracle tests need it)"; exit 1; }
fi
echo "$SHA  $DIR/whl/$WHL" | sha256sum -c --quiet - || { echo "mk/cutlass.sh: $WHL: SHA-256 mismatch"; rm -f "$DIR/whl/$WHL"; exit 1; }
rm -rf "$DIR/include.tmp"
python3 - "$DIR/whl/$WHL" "$DIR/include.tmp" <<'PY'
import sys, zipfile, os
whl, out = sys.argv[1], sys.argv[2]
pre = "cutlass_library/source/include/"
with zipfile.ZipFile(whl) as z:
    for n in z.namelist():
        if n.startswith(pre) and not n.endswith("/"):
            p = os.path.join(out, n[len(pre):])
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "wb") as f:
                f.write(z.read(n))
PY
rm -rf "$DIR/include" && mv "$DIR/include.tmp" "$DIR/include"
echo "  ok  CUTLASS $VER headers (tests only) in $DIR/include"
