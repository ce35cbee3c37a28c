#!/usr/bin/env bash
# tests/gpu/run.sh — `make test-gpu`. There are no generated GPU kernels yet (issue 4 brings the
# first); until then this checks that the dlopen'd driver finds a GPU, and says SKIPPED where none is.
set -u
FB=$1
info=$("$FB" info) || { echo "test-gpu: fourbit info failed"; exit 1; }
if ! grep -q '^gpu 0' <<<"$info"; then
  echo "test-gpu: SKIPPED (not passed): $(grep '^cuda' <<<"$info")"
  exit 0
fi
grep '^gpu' <<<"$info"
echo "test-gpu: driver loaded through dlopen and reports the GPU; no kernel tests exist yet (issue 4)"
