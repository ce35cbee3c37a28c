#!/usr/bin/env bash
# tests/gpu/python_gpu.sh — issue 22's GPU checks of the Python front door in one go, on the device machine (an sm_90a
# GPU, python3 with torch and numpy), from the repository root with build/ carried (build/libfourbit.so, build/lib/,
# build/gpu/bench_layer: make all builds them). `make test-python-gpu` runs it.
#   1. fourbit.info() sees the GPU;
#   2. tests/gpu/torch_layer.py --shape both: fourbit.torch.MoEExperts against bench_layer --dump for the same inputs
#      (y, dx, x.grad, dW13, dW2, dtopk_w byte-identical; two runs identical) at a small shape and at S1, and the S1
#      forward + backward within 5% of bench_layer's time; at the small shape also on a side stream while the legacy
#      default stream is busy (it completes first: the work is on the caller's stream);
#   2b. tests/gpu/quant_device.py: fourbit.torch.quantize / dequantize (the device quantizers) byte-identical to the
#      host ones on every option, float32 and bfloat16 inputs, and on a side stream while the default one is busy;
#   3. python/examples/train_moe.py --steps $STEPS (default 200): the MoE model trains with MoEExperts on the Inkling
#      recipe and with a BF16 expert layer; passes when fourbit's mean loss over the last tenth is below 0.8 log(vocab)
#      and within 10% (+0.05 nats) of BF16's.
# Exit 0 when all pass; 1 when one fails; 77 (SKIPPED, not passed) without a GPU or torch. Extra arguments go to
# torch_layer.py (e.g. --cache DIR for both sides' tuned winners).
set -u
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
export FOURBIT_LIB=${FOURBIT_LIB:-$PWD/build/libfourbit.so}
STEPS=${STEPS:-200}
python3 -c 'import torch, numpy; assert torch.cuda.is_available()' 2>/dev/null \
  || { echo "python_gpu.sh: SKIPPED (not passed): python3 has no torch/numpy or sees no GPU"; exit 77; }
fail=0
python3 -c 'import fourbit, json; i = fourbit.info(); print("info:", json.dumps(i)); assert i["devices"], "no GPU seen"' || fail=1
python3 tests/gpu/torch_layer.py --shape both "$@" || fail=1
python3 tests/gpu/quant_device.py || fail=1
log=$(mktemp); trap 'rm -f "$log"' EXIT
python3 python/examples/train_moe.py --steps "$STEPS" --png build/train_moe.png | tee "$log" || fail=1
python3 - "$log" <<'PY' || fail=1
import math, re, sys
t = open(sys.argv[1]).read()
m = dict(re.findall(r"^(\w+) +final loss \S+ \(mean of the last \d+ steps: (\S+)\)", t, re.M))
v = int(re.search(r"Markov chain over (\d+) tokens", t).group(1))
fb, bf = float(m["fourbit"]), float(m["bf16"])
ok = fb < 0.8 * math.log(v) and fb <= 1.1 * bf + 0.05
print("train_moe: fourbit %.4f, bf16 %.4f, log(vocab) %.4f: %s" % (fb, bf, math.log(v), "trains" if ok else "FAIL"))
sys.exit(0 if ok else 1)
PY
echo "python_gpu.sh: $([ $fail = 0 ] && echo 'all checks passed' || echo FAILED)"
exit $fail
