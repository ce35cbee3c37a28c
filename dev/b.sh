#!/usr/bin/env bash
# device call B (session 13): the device quantizers and the torch layer on a side stream (issue 22)
set -u
export PYTHONPATH=$PWD/python FOURBIT_LIB=$PWD/build/libfourbit.so PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 200 python3 tests/gpu/quant_device.py --big 1024x5120 > $OUT/quant_device.log 2>&1; echo "quant_device rc=$? ($(( $(date +%s) - t0 )) s)"
grep -vE "^$" $OUT/quant_device.log | grep -v "^FAIL" | tail -8; grep -c "^FAIL" $OUT/quant_device.log; grep "^FAIL" $OUT/quant_device.log | head -5
timeout 150 python3 tests/gpu/torch_layer.py --shape small > $OUT/torch_layer.log 2>&1; echo "torch_layer small rc=$? ($(( $(date +%s) - t0 )) s)"
grep -E "^check|^FAIL|torch_layer|MoEExperts" $OUT/torch_layer.log
