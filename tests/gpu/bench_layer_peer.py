# bench_layer_peer.py — the PyTorch peer of bench_layer: an eager BF16 MoE expert layer, forward + backward, on the
# routing bench_layer wrote (same tokens x top-k, experts, widths), measured in the same device call.
# The layer: rows sorted by expert (stable), tokens gathered, torch._grouped_mm with W13 (E x 2F x D), SwiGLU,
# torch._grouped_mm with W2 (E x D x F), rows scaled by the router weights, index_add back to the tokens; autograd for
# the backward (dx, dW13, dW2, d router weights). No router (bench_layer has none either). CUDA events around
# forward + backward, 3 warm-ups, median of N; peak = torch.cuda.max_memory_allocated over the timed steps
# (parameters, gradients, activations, autograd's saved tensors).
# usage: bench_layer_peer.py OUT T E K D F NAME=ROUTING_FILE...
import statistics
import sys

import torch
import torch.nn.functional as Fn

out_path = sys.argv[1]
T, E, K, D, F = (int(v) for v in sys.argv[2:7])
dev = "cuda"
print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
lines = []
for spec in sys.argv[7:]:
    name, path = spec.split("=", 1)
    raw = open(path, "rb").read()
    idx = torch.frombuffer(bytearray(raw[: T * K * 4]), dtype=torch.int32).to(dev).view(T, K)
    wts = torch.frombuffer(bytearray(raw[T * K * 4 : 2 * T * K * 4]), dtype=torch.float32).to(dev).view(T, K)
    torch.manual_seed(0)
    x = torch.randn(T, D, device=dev, dtype=torch.bfloat16, requires_grad=True)
    w13 = (torch.randn(E, 2 * F, D, device=dev) / D**0.5).to(torch.bfloat16).requires_grad_()
    w2 = (torch.randn(E, D, F, device=dev) / F**0.5).to(torch.bfloat16).requires_grad_()
    tw = wts.clone().requires_grad_()
    dy = torch.randn(T, D, device=dev, dtype=torch.bfloat16) * 1e-2

    def step():
        flat = idx.flatten()
        order = torch.argsort(flat, stable=True)
        tok = order // K
        offs = torch.bincount(flat, minlength=E).cumsum(0).to(torch.int32)
        xs = x[tok]
        h = torch._grouped_mm(xs, w13.transpose(-2, -1), offs=offs)
        g, u = h.split(F, dim=-1)
        a = Fn.silu(g) * u
        ys = torch._grouped_mm(a, w2.transpose(-2, -1), offs=offs)
        ys = ys * tw.flatten()[order].to(torch.bfloat16).unsqueeze(1)
        y = torch.zeros(T, D, device=dev, dtype=torch.bfloat16).index_add(0, tok, ys)
        y.backward(dy)
        x.grad = w13.grad = w2.grad = tw.grad = None

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    ts = []
    for _ in range(10):
        a_, b_ = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a_.record()
        step()
        b_.record()
        b_.synchronize()
        ts.append(a_.elapsed_time(b_))
    peak = torch.cuda.max_memory_allocated() / 2**30
    ms = statistics.median(ts)
    flop = 2.0 * T * K * (2 * F * D + D * F) * 3
    print(f"eager BF16 layer ({name}): median {ms:.3f} ms (min {min(ts):.3f}, max {max(ts):.3f}) = {flop / (ms * 1e-3) / 1e12:.0f} TFLOP/s, peak {peak:.2f} GiB")
    lines.append(f"PEER routing={name} ms={ms:.4f} peak_gib={peak:.4f}")
    del x, w13, w2, tw, dy
    torch.cuda.empty_cache()
with open(out_path, "w") as fo:
    fo.write("\n".join(lines) + "\n")
