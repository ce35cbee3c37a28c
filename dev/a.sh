#!/usr/bin/env bash
# device call A (session 13): FP8 wgmma MXFP8 GEMM checks + bench, tcopy MXFP8 kernels, device quantizers, torch layer streams
set -u
export PYTHONPATH=$PWD/python FOURBIT_LIB=$PWD/build/libfourbit.so
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv,noheader
t0=$(date +%s)
build/gpu/test_kernels --only tcopy > $OUT/kernels.log 2>&1; echo "test_kernels tcopy rc=$? ($(( $(date +%s) - t0 )) s)"; tail -3 $OUT/kernels.log
build/gpu/test_gemm --write-shapes $OUT/gemm_shapes.txt > /dev/null 2>&1
python3 tests/gpu/bench_gemm_peer.py $OUT/gemm_shapes.txt $OUT/gemm_peer.txt > $OUT/gemm_peer.log 2>&1; echo "gemm peer rc=$? ($(( $(date +%s) - t0 )) s)"
build/gpu/test_gemm --only mxfp8xmxfp8 --bench $OUT/gemm_peer.txt > $OUT/gemm.log 2>&1; echo "test_gemm mxfp8 rc=$? ($(( $(date +%s) - t0 )) s)"
grep -E "FAIL|^test_gemm:" $OUT/gemm.log | head -20
sed -n '/== bench/,$p' $OUT/gemm.log | grep -iE "mxfp8|ceiling|peer|cublas" | head -40
python3 tests/gpu/quant_device.py > $OUT/quant_device.log 2>&1; echo "quant_device rc=$? ($(( $(date +%s) - t0 )) s)"; grep -vE "^$" $OUT/quant_device.log | tail -8
python3 tests/gpu/torch_layer.py --shape small > $OUT/torch_layer.log 2>&1; echo "torch_layer small rc=$? ($(( $(date +%s) - t0 )) s)"; grep -E "^check|^FAIL|torch_layer" $OUT/torch_layer.log
