# bench_layer_peer.py — the PyTorch peers of bench_layer, on the routing bench_layer wrote (same tokens x top-k, experts,
# widths), measured in the same device call:
#   bf16     an eager BF16 MoE expert layer: rows sorted by expert (stable), tokens gathered, torch._grouped_mm with W13
#            (E x 2F x D), SwiGLU, torch._grouped_mm with W2 (E x D x F), rows scaled by the router weights, index_add
#            back to the tokens; autograd for the backward (dx, dW13, dW2, d router weights).
#   torchao  the same layer with both grouped GEMMs as torchao's FP8-rowwise MoE training op
#            (torchao.prototype.moe_training.fp8_grouped_mm._to_fp8_rowwise_then_scaled_grouped_mm: FP8 forward, dgrad
#            and wgrad with per-row scales), when torchao imports; its token groups padded to multiples of 16 rows (zero
#            rows, as its kernels need) and pad_token_groups_for_grouped_mm=False.
#   with --compile also each step under torch.compile (bf16_compiled, torchao_compiled): what a user would run.
# No router (bench_layer has none either). CUDA events around forward + backward, 3 warm-ups, median of N; peak =
# torch.cuda.max_memory_allocated over the timed steps (parameters, gradients, activations, autograd's saved tensors).
# usage: bench_layer_peer.py [--compile] OUT T E K D F NAME=ROUTING_FILE...
# Writes "PEER routing=NAME ms=MS peak_gib=G peer=P" lines to OUT (bench_layer --peer reads them).
import statistics
import sys

import torch
import torch.nn.functional as Fn

args = sys.argv[1:]
compile_too = "--compile" in args
args = [a for a in args if a != "--compile"]
out_path = args[0]
T, E, K, D, F = (int(v) for v in args[1:6])
dev = "cuda"
print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
try:
    import torchao
    from torchao.prototype.moe_training.fp8_grouped_mm import _to_fp8_rowwise_then_scaled_grouped_mm as ao_mm
    print(f"torchao {torchao.__version__}")
except Exception as e:  # noqa: BLE001 (any import failure: the peer is reported missing, not faked)
    ao_mm = None
    print(f"torchao: not available ({type(e).__name__}: {e}); its peer is not measured")
lines = []
MP = T * K + 16 * E  # the padded rows' bound: every group rounded up to 16 (rows past the last group stay zero)


def make_step(kind, idx, x, w13, w2, tw, dy):
    def step_bf16():
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

    def step_ao():
        flat = idx.flatten()
        order = torch.argsort(flat, stable=True)
        tok = order // K
        cnt = torch.bincount(flat, minlength=E)
        pc = (cnt + 15) // 16 * 16
        pend = pc.cumsum(0)
        e_sorted = flat[order]
        pos = (pend - pc)[e_sorted] + torch.arange(T * K, device=dev) - (cnt.cumsum(0) - cnt)[e_sorted]
        xs = torch.zeros(MP, D, device=dev, dtype=torch.bfloat16).index_copy(0, pos, x[tok])
        offs = pend.to(torch.int32)
        h = ao_mm(xs, w13.transpose(-2, -1), offs, pad_token_groups_for_grouped_mm=False)
        g, u = h.split(F, dim=-1)
        a = Fn.silu(g) * u
        ys = ao_mm(a, w2.transpose(-2, -1), offs, pad_token_groups_for_grouped_mm=False)[pos]
        ys = ys * tw.flatten()[order].to(torch.bfloat16).unsqueeze(1)
        y = torch.zeros(T, D, device=dev, dtype=torch.bfloat16).index_add(0, tok, ys)
        y.backward(dy)

    return step_bf16 if kind.startswith("bf16") else step_ao


for spec in args[6:]:
    name, path = spec.split("=", 1)
    raw = open(path, "rb").read()
    idx = torch.frombuffer(bytearray(raw[: T * K * 4]), dtype=torch.int32).to(dev).view(T, K)
    wts = torch.frombuffer(bytearray(raw[T * K * 4 : 2 * T * K * 4]), dtype=torch.float32).to(dev).view(T, K)
    kinds = ["bf16"] + (["torchao"] if ao_mm else [])
    if compile_too:
        kinds += [k + "_compiled" for k in kinds]
    for kind in kinds:
        torch.manual_seed(0)
        x = torch.randn(T, D, device=dev, dtype=torch.bfloat16, requires_grad=True)
        w13 = (torch.randn(E, 2 * F, D, device=dev) / D**0.5).to(torch.bfloat16).requires_grad_()
        w2 = (torch.randn(E, D, F, device=dev) / F**0.5).to(torch.bfloat16).requires_grad_()
        tw = wts.clone().requires_grad_()
        dy = torch.randn(T, D, device=dev, dtype=torch.bfloat16) * 1e-2
        body = make_step(kind, idx, x, w13, w2, tw, dy)
        if kind.endswith("_compiled"):
            body = torch.compile(body)

        def step():
            body()
            x.grad = w13.grad = w2.grad = tw.grad = None

        try:
            for _ in range(3):
                step()
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 (a peer that fails is reported, not timed)
            print(f"{kind} layer ({name}): FAILED: {type(e).__name__}: {str(e)[:300]}")
            continue
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
        print(f"{kind} layer ({name}): median {ms:.3f} ms (min {min(ts):.3f}, max {max(ts):.3f}) = "
              f"{flop / (ms * 1e-3) / 1e12:.0f} TFLOP/s, peak {peak:.2f} GiB")
        lines.append(f"PEER routing={name} ms={ms:.4f} peak_gib={peak:.4f} peer={kind}")
        del x, w13, w2, tw, dy, body
        torch.cuda.empty_cache()
with open(out_path, "w") as fo:
    fo.write("\n".join(lines) + "\n")
