#!/usr/bin/env bash
# mk/deps.sh — find fourbit's build and test dependencies (Lua, LMDB, Random123, cmocka, clang with
# libFuzzer, gnuplot for fourbit compare's plot, the CUDA toolkit); install the missing Debian packages.
# Called by the Makefile before anything is built. As root it runs apt-get itself; otherwise it
# prints the exact command to run and fails. Prints what it found, one line per dependency.
set -u
CUDA=${CUDA_HOME:-/usr/local/cuda}
missing=()
check() { # name, package, test-command...
  local name=$1 pkg=$2; shift 2
  if "$@" >/dev/null 2>&1; then echo "  ok  $name"; else echo "  --  $name (Debian package $pkg)"; missing+=("$pkg"); fi
}
probe() {
  missing=()
  check "Lua 5.4 (static)"      liblua5.4-dev    test -f /usr/lib/x86_64-linux-gnu/liblua5.4.a -a -f /usr/include/lua5.4/lua.h
  check "LMDB (static)"         liblmdb-dev      test -f /usr/lib/x86_64-linux-gnu/liblmdb.a -a -f /usr/include/lmdb.h
  check "Random123 (tests)"     librandom123-dev test -f /usr/include/Random123/philox.h
  check "cmocka (tests)"        libcmocka-dev    test -f /usr/include/cmocka.h
  check "clang (fuzzer)"        clang            command -v clang
  check "libFuzzer runtime"     libclang-rt-dev  fuzzer_links
  check "gnuplot (compare plots)" gnuplot-nox    command -v gnuplot
}
fuzzer_links() { # clang can build a libFuzzer target
  local d; d=$(mktemp -d)
  printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' > "$d/f.c"
  clang -fsanitize=fuzzer "$d/f.c" -o "$d/f" >/dev/null 2>&1; local rc=$?
  rm -rf "$d"
  return $rc
}
echo "fourbit: dependencies"
probe
if [ ${#missing[@]} -gt 0 ]; then
  cmd="apt-get update && apt-get install -y --no-install-recommends ${missing[*]}"
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "fourbit: installing: ${missing[*]}"
    (export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}") >/tmp/fourbit-apt.log 2>&1 \
      || { echo "fourbit: apt-get failed; see /tmp/fourbit-apt.log"; tail -5 /tmp/fourbit-apt.log; exit 1; }
    probe
    [ ${#missing[@]} -eq 0 ] || { echo "fourbit: still missing: ${missing[*]}"; exit 1; }
  else
    echo "fourbit: missing packages; run as root:"
    echo "  $cmd"
    exit 1
  fi
fi
if [ -f "$CUDA/include/nvrtc.h" ] && [ -f "$CUDA/lib64/libnvrtc.so" ]; then echo "  ok  CUDA toolkit at $CUDA (NVRTC)"; else
  echo "  --  CUDA toolkit: $CUDA/include/nvrtc.h or $CUDA/lib64/libnvrtc.so not found (set CUDA_HOME)"; exit 1; fi
if [ -f "$CUDA/include/nccl.h" ] && ls "$CUDA"/lib64/libnccl.so* >/dev/null 2>&1; then echo "  ok  NCCL in $CUDA"; else
  echo "  --  NCCL: nccl.h / libnccl.so not found under $CUDA"; exit 1; fi
echo "  ok  libcuda.so.1: loaded with dlopen at run time (not needed to build)"
