#!/usr/bin/env bash
# tests/gpu/bench.sh — `make bench`. No GPU kernels exist yet (issue 4 brings the first), so there is
# nothing to time; this says so rather than printing figures.
echo "bench: no GPU kernels exist yet; nothing is timed (see issue 4)"
