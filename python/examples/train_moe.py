#!/usr/bin/env python3
"""train_moe.py — a small PyTorch MoE model trained twice on the same data from the same initialization: once with
fourbit.torch.MoEExperts (the expert layers in the Inkling recipe's numerics: NVFP4 4/6 forward, MXFP8 SR backward,
S2F6 + RHT combine, the last sixth of the layers MXFP8), once with a plain BF16 expert layer in PyTorch. Prints both
loss curves' ends beside the data's floor, and writes a PNG of the curves where matplotlib is installed.

    python3 python/examples/train_moe.py [--steps 300] [--recipe recipes/inkling2_small.lua] [--cache DIR] [--png F]

Needs an sm_90a GPU (the GPU expert layer's kernels are Hopper's), torch, and fourbit importable (pip install -e python,
or PYTHONPATH=python) with build/libfourbit.so built. The model: embedding -> L x [RMSNorm -> router (FP32, softmax,
top-k, renormalized) -> experts -> residual] -> RMSNorm -> LM head -> cross-entropy. The data: a random sparse Markov
chain over the vocabulary (each token has 4 successors with Dirichlet weights); inputs are drawn uniformly, so the
best loss any model can reach is the mean entropy of the rows, printed as the floor."""

import argparse
import math
import os
import sys
import time

import torch
import torch.nn.functional as Fn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from fourbit.torch import MoEExperts  # noqa: E402


def rms_norm(h):
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)


class BF16Experts(torch.nn.Module):
    """The peer: the same SwiGLU experts on BF16 operands with FP32 accumulation (PyTorch's BF16 matmuls), same masters."""

    def __init__(self, experts, d_model, d_ff, device=None):
        super().__init__()
        self.experts, self.d_ff = experts, d_ff
        self.w13 = torch.nn.Parameter(torch.randn(experts, 2 * d_ff, d_model, device=device) / d_model ** 0.5)
        self.w2 = torch.nn.Parameter(torch.randn(experts, d_model, d_ff, device=device) / d_ff ** 0.5)

    def forward(self, x, topk_idx, topk_w):
        y = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
        flat = topk_idx.flatten()
        for e in range(self.experts):
            rows = (flat == e).nonzero().flatten()
            if rows.numel() == 0:
                continue
            tok = rows // topk_idx.shape[1]
            h = x[tok] @ self.w13[e].to(torch.bfloat16).t()
            g, u = h[:, :self.d_ff], h[:, self.d_ff:]
            a = (Fn.silu(g.float()) * u.float()).to(torch.bfloat16)
            ye = a @ self.w2[e].to(torch.bfloat16).t()
            y = y.index_add(0, tok, ye.float() * topk_w.flatten()[rows, None])
        return y.to(torch.bfloat16)


class Model(torch.nn.Module):
    def __init__(self, make_experts, layers, vocab, d_model, experts, top_k, device):
        super().__init__()
        self.top_k = top_k
        self.emb = torch.nn.Embedding(vocab, d_model, device=device)
        self.routers = torch.nn.ModuleList(torch.nn.Linear(d_model, experts, bias=False, device=device) for _ in range(layers))
        self.experts = torch.nn.ModuleList(make_experts(i + 1) for i in range(layers))
        self.head = torch.nn.Linear(d_model, vocab, bias=False, device=device)

    def forward(self, tokens):
        h = self.emb(tokens)
        aux = 0.0
        for router, experts in zip(self.routers, self.experts):
            u = rms_norm(h).to(torch.bfloat16)
            probs = torch.softmax(router(u.float()), -1)
            w, idx = probs.topk(self.top_k, -1)
            w = w / w.sum(-1, keepdim=True)
            # the load-balancing loss: E * sum_e (fraction of rows routed to e) * (mean probability of e)
            frac = torch.zeros(probs.shape[-1], device=h.device).index_add_(0, idx.flatten(), torch.ones(idx.numel(), device=h.device))
            aux = aux + probs.shape[-1] * (frac / idx.numel() * probs.mean(0)).sum()
            h = h + experts(u, idx.to(torch.int32), w).float()
        return self.head(rms_norm(h).to(torch.bfloat16).float()), aux


def markov(vocab, succ, seed, device):
    g = torch.Generator().manual_seed(seed)
    P = torch.zeros(vocab, vocab, dtype=torch.float64)
    for i in range(vocab):
        nxt = torch.randperm(vocab, generator=g)[:succ]
        nxt[0] = (i + 1) % vocab
        P[i, nxt] = torch.distributions.Dirichlet(torch.ones(succ, dtype=torch.float64)).sample()
    floor = float(-(P * torch.log(P.clamp_min(1e-300))).sum(1).mean())  # uniform inputs: the mean row entropy
    return P.float().to(device), floor


def train(name, make_experts, a, P, device):
    torch.manual_seed(a.seed)
    model = Model(make_experts, a.layers, a.vocab, a.d_model, a.experts, a.top_k, device)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.1)
    gen = torch.Generator(device=device).manual_seed(a.seed + 1)
    losses, t0 = [], time.time()
    for step in range(a.steps):
        lr = a.lr * min(1.0, (step + 1) / a.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / a.steps)))
        for grp in opt.param_groups:
            grp["lr"] = lr
        cur = torch.randint(0, a.vocab, (a.tokens,), generator=gen, device=device)
        nxt = torch.multinomial(P[cur], 1, generator=gen).flatten()
        logits, aux = model(cur)
        loss = Fn.cross_entropy(logits, nxt)
        opt.zero_grad(set_to_none=True)
        (loss + 0.01 * aux).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss))
        if step % max(1, a.steps // 10) == 0 or step == a.steps - 1:
            print("%-8s step %4d  loss %.4f  %.1f ms/step" % (name, step + 1, losses[-1], 1e3 * (time.time() - t0) / (step + 1)))
    return losses


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recipe", default="recipes/inkling2_small.lua")
    ap.add_argument("--cache", help="fourbit's kernel cache (default: $FOURBIT_CACHE or ~/.cache/fourbit when present)")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=6)  # the recipe's last sixth (layer 6) is MXFP8
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--d-ff", type=int, default=256)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--png", default="train_moe.png")
    a = ap.parse_args()
    device = torch.device("cuda")
    P, floor = markov(a.vocab, 4, a.seed, device)
    print("data: Markov chain over %d tokens, floor (best reachable loss) %.4f nats" % (a.vocab, floor))

    def fourbit_experts(layer):
        return MoEExperts(a.recipe, layer, a.experts, a.d_model, a.d_ff, top_k=a.top_k, layers=a.layers, cache=a.cache,
                          tokens=a.tokens, check_indices=False, device=device)

    def bf16_experts(layer):
        return BF16Experts(a.experts, a.d_model, a.d_ff, device=device)

    curves = {"fourbit": train("fourbit", fourbit_experts, a, P, device), "bf16": train("bf16", bf16_experts, a, P, device)}
    n = max(1, a.steps // 10)
    for name, c in curves.items():
        print("%-8s final loss %.4f (mean of the last %d steps: %.4f), floor %.4f" % (name, c[-1], n, sum(c[-n:]) / n, floor))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib not installed: no PNG)")
        return 0
    plt.figure(figsize=(7, 4))
    for name, c in curves.items():
        plt.plot(range(1, len(c) + 1), c, label=name)
    plt.axhline(floor, color="gray", linestyle="--", label="floor")
    plt.xlabel("step")
    plt.ylabel("cross-entropy (nats)")
    plt.title("MoE: fourbit %s experts vs BF16 experts" % os.path.basename(a.recipe))
    plt.legend()
    plt.tight_layout()
    plt.savefig(a.png, dpi=120)
    print("wrote %s" % a.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
