#!/usr/bin/env bash
# device call C (session 13): issue 22's checks again after the fence fix; issue 21: the layer's peers (BF16, torchao),
# then fourbit tune of inkling2_small (FP8 wgmma variants now in the space) and the tuned S1 layer beside the peers
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
export PYTHONPATH=$PYTHONPATH:$PWD/python FOURBIT_LIB=$PWD/build/libfourbit.so PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 150 python3 tests/gpu/quant_device.py --big 1024x5120 > $OUT/quant_device.log 2>&1; echo "quant_device rc=$? ($(( $(date +%s) - t0 )) s)"
grep -E "^check|quant_device.py:" $OUT/quant_device.log; grep "^FAIL" $OUT/quant_device.log | head -5
timeout 100 python3 tests/gpu/torch_layer.py --shape small > $OUT/torch_layer.log 2>&1; echo "torch_layer small rc=$? ($(( $(date +%s) - t0 )) s)"
grep -E "^check|^FAIL|torch_layer.py:" $OUT/torch_layer.log
build/gpu/bench_layer --routing balanced --routing-out $OUT/route_balanced.bin --routing-only > /dev/null 2>&1
timeout 120 python3 tests/gpu/bench_layer_peer.py $OUT/layer_peer.txt 8192 48 8 5120 2048 balanced=$OUT/route_balanced.bin > $OUT/layer_peer.log 2>&1; echo "layer peers rc=$? ($(( $(date +%s) - t0 )) s)"
cat $OUT/layer_peer.log
LAYER_PEER=$OUT/layer_peer.txt timeout 330 bash tests/gpu/tune_train.sh build/fourbit $OUT/tt > $OUT/tune_train.log 2>&1; echo "tune_train rc=$? ($(( $(date +%s) - t0 )) s)"
grep -E "^tune |winners|^PEER|^RESULT|^layer fwd|GEMMs|pool peak|compiled|tune_train|bwd w2 dgrad  gemm|bwd w13 dgrad  gemm|wgrad  gemm|^  [a-z0-9_]+: (wrong|fault)" $OUT/tune_train.log | head -40
