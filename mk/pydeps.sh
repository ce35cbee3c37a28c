#!/usr/bin/env bash
# mk/pydeps.sh — numpy and pytest for make test's Python tiers (tests/python/): the wheels of
# mk/python-test-requirements.txt (pinned by version and SHA-256, binary only, no other dependency resolved) installed
# from PyPI into DIR with pip --target; nothing outside DIR is touched. A test-only dependency: the package itself
# (python/fourbit) needs numpy alone. Fails loudly (exit 1) when pip or PyPI is not reachable: the tiers never pass
# without their tests.
#   bash mk/pydeps.sh DIR      (then PYTHONPATH=DIR python3 -m pytest ...)
set -eu
DIR=$1
REQ=$(dirname "$0")/python-test-requirements.txt
PY=${PYTHON:-python3}
"$PY" -c 'import sys; assert sys.version_info >= (3, 9), sys.version' \
  || { echo "mk/pydeps.sh: $PY is not Python >= 3.9 (the Python tiers need it)"; exit 1; }
"$PY" -m pip --version > /dev/null 2>&1 || { echo "mk/pydeps.sh: no pip for $PY (python3 -m pip): the Python tiers cannot run"; exit 1; }
rm -rf "$DIR.tmp"
"$PY" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps --only-binary=:all: --require-hashes \
  --target "$DIR.tmp" -r "$REQ" \
  || { rm -rf "$DIR.tmp"; echo "mk/pydeps.sh: could not install $REQ from PyPI (the Python tiers need it)"; exit 1; }
rm -rf "$DIR" && mv "$DIR.tmp" "$DIR"
echo "  ok  $(PYTHONPATH=$DIR "$PY" -c 'import numpy, pytest; print("numpy", numpy.__version__, "+ pytest", pytest.__version__)') (tests only) in $DIR"
