# bench_gemm_peer.py — the PyTorch peers of the grouped-GEMM benchmark (test_gemm --bench), measured in the same
# device call on the same shapes: torch._grouped_mm (BF16) and torch._scaled_grouped_mm (FP8 E4M3 with row-wise
# scales), plus dense cuBLAS BF16 (torch.matmul) and FP8 (torch._scaled_mm) on 8192^3 as the ceilings.
# CUDA events, 3 warm-ups, median of 10.
# usage: bench_gemm_peer.py SHAPES OUT   (SHAPES from test_gemm --write-shapes: "name mode E M N K count...")
import statistics
import sys

import torch

def median_ms(fn, n=10):
    for _ in range(3):
        fn()
    ts = []
    for _ in range(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)

dev = "cuda"
out = []
print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
# ceilings
n = 8192
a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
t = median_ms(lambda: a @ b)
dense_bf16 = 2 * n**3 / (t * 1e-3) / 1e12
a8 = a.to(torch.float8_e4m3fn)
b8 = b.to(torch.float8_e4m3fn).t().contiguous().t()
one = torch.ones((), device=dev, dtype=torch.float32)
try:
    t = median_ms(lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
    dense_fp8 = 2 * n**3 / (t * 1e-3) / 1e12
except Exception as e:  # noqa: BLE001
    print("dense fp8:", e)
    dense_fp8 = 0.0
print(f"dense cuBLAS 8192^3: BF16 {dense_bf16:.0f} TFLOP/s, FP8 {dense_fp8:.0f} TFLOP/s")
out.append(f"dense {dense_bf16:.1f} {dense_fp8:.1f}")
del a, b, a8, b8
# the BF16 weight copy's peer: torch's plain FP8 -> BF16 cast of S1's W13 (48 x 4096 x 5120), and its device copy
w8 = torch.randn(48 * 4096, 5120, device=dev, dtype=torch.bfloat16).to(torch.float8_e4m3fn)
t = median_ms(lambda: w8.to(torch.bfloat16))
cast = 3 * w8.numel() / (t * 1e-3) / 1e9
wb = torch.empty(w8.shape, device=dev, dtype=torch.bfloat16)
wc = torch.empty_like(wb)
t = median_ms(lambda: wc.copy_(wb))
copy = 4 * wb.numel() / (t * 1e-3) / 1e9
print(f"W13 FP8 -> BF16 cast {cast:.0f} GB/s, BF16 copy {copy:.0f} GB/s")
out.append(f"bcopy {cast:.1f} {copy:.1f}")
del w8, wb, wc

for line in open(sys.argv[1]):
    f = line.split()
    name, mode, E, M, N, K = f[0], int(f[1]), int(f[2]), int(f[3]), int(f[4]), int(f[5])
    counts = [int(x) for x in f[6:6 + E]]
    rows = sum(counts)
    offs = torch.tensor(counts, device=dev, dtype=torch.int32).cumsum(0).to(torch.int32)
    res = {}
    if mode == 0:
        flops = 2.0 * rows * N * K
        A = torch.randn(rows, K, device=dev, dtype=torch.bfloat16)
        B = torch.randn(E, N, K, device=dev, dtype=torch.bfloat16) * 0.05
        Bt = B.transpose(-2, -1)  # E x K x N, column-major
        try:
            res["bf16"] = median_ms(lambda: torch._grouped_mm(A, Bt, offs=offs))
        except Exception as e:  # noqa: BLE001
            print(name, "grouped_mm:", str(e).splitlines()[0])
        A8, B8 = A.to(torch.float8_e4m3fn), B.to(torch.float8_e4m3fn)
        sa = torch.ones(rows, device=dev, dtype=torch.float32)
        sb = torch.ones(E, N, device=dev, dtype=torch.float32)
        try:
            res["fp8"] = median_ms(lambda: torch._scaled_grouped_mm(A8, B8.transpose(-2, -1), sa, sb, offs=offs, out_dtype=torch.bfloat16))
        except Exception as e:  # noqa: BLE001
            print(name, "scaled_grouped_mm:", str(e).splitlines()[0])
        del A, B, A8, B8
    else:
        flops = 2.0 * M * N * rows
        A = torch.randn(M, rows, device=dev, dtype=torch.bfloat16)
        B = torch.randn(N, rows, device=dev, dtype=torch.bfloat16)
        try:
            res["bf16"] = median_ms(lambda: torch._grouped_mm(A, B.t(), offs=offs))
        except Exception as e:  # noqa: BLE001
            print(name, "grouped_mm:", str(e).splitlines()[0])
        A8, B8 = A.to(torch.float8_e4m3fn), B.to(torch.float8_e4m3fn)
        sa = torch.ones(M * E, device=dev, dtype=torch.float32)
        sb = torch.ones(N * E, device=dev, dtype=torch.float32)
        try:
            res["fp8"] = median_ms(lambda: torch._scaled_grouped_mm(A8, B8.t(), sa, sb, offs=offs, out_dtype=torch.bfloat16))
        except Exception as e:  # noqa: BLE001
            print(name, "scaled_grouped_mm:", str(e).splitlines()[0])
        del A, B, A8, B8
    torch.cuda.empty_cache()
    tf = {k: flops / (v * 1e-3) / 1e12 for k, v in res.items()}
    print(f"{name:28s} rows {rows:6d}  " + "  ".join(f"{k} {res[k]:.3f} ms = {tf[k]:.0f} TFLOP/s" for k in res))
    out.append(f"{name} {tf.get('bf16', 0.0):.1f} {tf.get('fp8', 0.0):.1f}")
with open(sys.argv[2], "w") as fo:
    fo.write("\n".join(out) + "\n")
