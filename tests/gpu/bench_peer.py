# bench_peer.py — the PyTorch peer of `make bench`, measured in the same device call: the plain cast
# x.to(torch.float8_e4m3fn) of a 65536 x 5120 BF16 tensor (no scaling at all), and PyTorch's own
# device copy. CUDA events, 3 warm-ups, median of 25. Writes "cast_GBps copy_GBps" to the file given.
import statistics
import sys

import torch

def median_ms(fn):
    for _ in range(3):
        fn()
    ts = []
    for _ in range(25):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)

x = torch.randn(65536, 5120, device="cuda", dtype=torch.bfloat16)
n = x.numel()
cast = median_ms(lambda: x.to(torch.float8_e4m3fn))
y = torch.empty_like(x)
copy = median_ms(lambda: y.copy_(x))
cast_gbs = (2 * n + n) / (cast * 1e-3) / 1e9
copy_gbs = (2 * n + 2 * n) / (copy * 1e-3) / 1e9
print(f"torch {torch.__version__}: x.to(float8_e4m3fn) {cast:.3f} ms = {cast_gbs:.0f} GB/s; copy {copy:.3f} ms = {copy_gbs:.0f} GB/s")
with open(sys.argv[1], "w") as f:
    f.write(f"{cast_gbs:.1f} {copy_gbs:.1f}\n")
