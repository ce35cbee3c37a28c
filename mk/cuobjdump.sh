#!/usr/bin/env bash
# mk/cuobjdump.sh — fetch cuobjdump and the nvdisasm it runs for -sass, for the SASS checks of make test
# (tests/test_tc_ops.c reads the tcgen05 instructions of sm_100a / sm_103a cubins back): the nvidia-cuda-cuobjdump
# and nvidia-cuda-nvdisasm wheels from PyPI, pinned by version and SHA-256, their tools unpacked into DIR/bin. A
# test-only dependency; the toolkit here has neither.
#   bash mk/cuobjdump.sh DIR      (then DIR/bin/cuobjdump, with NVDISASM_PATH or PATH naming DIR/bin)
set -eu
DIR=$1
VER=13.5.37
PLAT=py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64
mkdir -p "$DIR/whl" "$DIR/bin"
fetch() { # package, wheel name prefix, sha256, tool
  local pkg=$1 pre=$2 sha=$3 tool=$4 whl="$2-$VER-$PLAT.whl"
  if [ ! -f "$DIR/whl/$whl" ]; then
    python3 -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux2014_x86_64 "$pkg==$VER" -d "$DIR/whl" \
      || { echo "mk/cuobjdump.sh: could not download $pkg $VER from PyPI (the SASS checks need it)"; exit 1; }
  fi
  echo "$sha  $DIR/whl/$whl" | sha256sum -c --quiet - || { echo "mk/cuobjdump.sh: $whl: SHA-256 mismatch"; rm -f "$DIR/whl/$whl"; exit 1; }
  python3 - "$DIR/whl/$whl" "$DIR/bin" "$tool" <<'PY'
import sys, zipfile, os
whl, out, tool = sys.argv[1:4]
with zipfile.ZipFile(whl) as z:
    names = [n for n in z.namelist() if n.endswith("/bin/" + tool)]
    if not names:
        sys.exit("mk/cuobjdump.sh: no bin/%s in %s" % (tool, whl))
    tmp = os.path.join(out, tool + ".tmp")
    with open(tmp, "wb") as f:
        f.write(z.read(names[0]))
    os.chmod(tmp, 0o755)
    os.replace(tmp, os.path.join(out, tool))
PY
}
fetch nvidia-cuda-nvdisasm nvidia_cuda_nvdisasm d3fdbdd49fa53e2e4aacd3db8259d052bd2b049ececdcb69e92e083c6728e7ca nvdisasm
fetch nvidia-cuda-cuobjdump nvidia_cuda_cuobjdump 38780fee50863252a0b8926357faa91615ca1c8346490563f33a06100cd73f58 cuobjdump
echo "  ok  cuobjdump and nvdisasm $VER (tests only) in $DIR/bin"
