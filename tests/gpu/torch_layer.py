#!/usr/bin/env python3
"""torch_layer.py — fourbit.torch.MoEExperts (python/fourbit/torch.py, over build/libfourbit.so) on the GPU against
build/gpu/bench_layer for the same inputs (issue 22's GPU checks), from the repository root with build/ carried:

    python3 tests/gpu/torch_layer.py [--shape small|s1|both] [--cache DIR] [--iters N] [--dump-dir DIR]

For each shape: bench_layer --dump writes its inputs (tokens, routing, masters, dy rounded to BF16 values) and the
outputs of its first checked run; then, in this process, MoEExperts with those masters runs the forward and an
autograd backward (y.backward(dy in BF16)) and must give, byte for byte: y; dx in FP32 (MoEExperts.last_dx) and
x.grad = dx in BF16; w13.grad = dW13; w2.grad = dW2; topk_w.grad = dL/dtopk_w. A second run must be byte-identical to
the first. At the small shape, forward + backward on a torch.cuda.Stream must complete while the legacy default
stream is still busy (the layer queues its work on the caller's stream), with the same bytes. At --shape s1 (bench_layer's defaults: 8192 tokens, top-8 of 48 experts, d_model 5120, d_ff 2048) the
median forward + backward of --iters runs, timed with CUDA events on the current stream (grads set to None before each
run, as bench_layer overwrites its gradients), must be within 5% of bench_layer's RESULT ms (the same number of runs,
the same kernels: the defaults, or --cache DIR's winners for both). Exit status 0 when every check passed, 1 otherwise,
2 for bad usage; "SKIPPED (not passed)" and 77 without a GPU or torch.

Dumps take about 13 GB at S1 (--dump-dir, default a temporary folder, removed at the end)."""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

SHAPES = {"small": ["--tokens", "2048", "--experts", "16", "--top-k", "4", "--d-model", "1024", "--d-ff", "512"], "s1": []}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=["small", "s1", "both"], default="both")
    ap.add_argument("--cache", help="the kernel cache for both sides (default: none: every kernel's default variant)")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--recipe", default="recipes/inkling2_small.lua")
    ap.add_argument("--layer", type=int, default=1)
    ap.add_argument("--bench-layer", default=os.path.join(ROOT, "build/gpu/bench_layer"))
    ap.add_argument("--dump-dir")
    a = ap.parse_args()
    try:
        import numpy as np
        import torch
    except ImportError as e:
        print("torch_layer.py: SKIPPED (not passed): %s" % e)
        return 77
    if not torch.cuda.is_available():
        print("torch_layer.py: SKIPPED (not passed): torch sees no GPU")
        return 77
    import fourbit
    import fourbit.torch as ft
    print("fourbit %s (%s), torch %s, %s" % (fourbit.__version__, fourbit.library_path, torch.__version__,
                                              torch.cuda.get_device_name(0)))
    bad = 0
    for shape in (["small", "s1"] if a.shape == "both" else [a.shape]):
        top = a.dump_dir or tempfile.mkdtemp(prefix="fourbit-torch-layer-")
        dump = os.path.join(top, shape)
        os.makedirs(dump, exist_ok=True)
        try:
            bad += check_shape(a, shape, dump, np, torch, ft)
        finally:
            if not a.dump_dir:
                shutil.rmtree(top, ignore_errors=True)
    print("torch_layer.py: %s" % ("every check passed" if not bad else "%d check(s) FAILED" % bad))
    return 1 if bad else 0


def check_shape(a, shape, dump, np, torch, ft):
    cmd = [a.bench_layer, "--recipe", a.recipe, "--layer", str(a.layer), "--iters", str(a.iters), "--dump", dump] + SHAPES[shape]
    if a.cache:
        cmd += ["--cache", a.cache]
    print("== %s: %s" % (shape, " ".join(cmd)))
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if p.returncode != 0:
        print(p.stdout[-4000:], p.stderr[-4000:])
        print("FAIL %s: bench_layer exit %d" % (shape, p.returncode))
        return 1
    m = re.search(r"^RESULT .* ms=([0-9.]+) fwd=([0-9.]+) bwd=([0-9.]+)", p.stdout, re.M)
    bench_ms = float(m.group(1)) if m else None
    kl = re.search(r"^kernels: .*$", p.stdout, re.M)
    print("bench_layer: %s; %s" % (kl.group(0) if kl else "?", m.group(0) if m else "no RESULT line"))
    meta = open(os.path.join(dump, "meta.txt")).read().split()
    recipe, layer = meta[0], int(meta[1])
    T, E, K, D, F, seed, step = map(int, meta[2:9])
    dev = torch.device("cuda", 0)

    def load(name, npdt, tdt, shp):
        t = torch.from_numpy(np.fromfile(os.path.join(dump, name), npdt).reshape(shp)).to(dev)
        return t.view(tdt) if tdt is not None else t

    x0 = load("x.bf16", np.int16, torch.bfloat16, (T, D))
    idx = load("idx.i32", np.int32, None, (T, K))
    tw0 = load("topk_w.f32", np.float32, None, (T, K))
    dy = load("dy.f32", np.float32, None, (T, D))
    ref = {n: load(n, np.int16 if n.endswith("bf16") else np.int32, None, (-1,))
           for n in ("y.bf16", "dx.f32", "dw13.f32", "dw2.f32", "dtopk_w.f32")}
    dyb = dy.to(torch.bfloat16)
    bad = 0
    if not torch.equal(dyb.float(), dy):
        print("FAIL %s: the dumped dy is not BF16-valued" % shape)
        return 1
    mod = ft.MoEExperts(recipe, layer, experts=E, d_model=D, d_ff=F, top_k=K, seed=seed, step=step, tokens=T,
                        cache=a.cache if a.cache else False, keep_fp32_dx=True, device=dev)
    with torch.no_grad():
        mod.w13.copy_(load("w13.f32", np.float32, None, tuple(mod.w13.shape)))
        mod.w2.copy_(load("w2.f32", np.float32, None, tuple(mod.w2.shape)))
    k = mod.kernels()
    print("MoEExperts: %d kernels (%d from the cache, %d compiled with NVRTC)" % (k["kernels"], k["from_cache"], k["compiled"]))

    def run(sync=True):
        mod.step = step
        mod.zero_grad(set_to_none=True)
        x = x0.clone().requires_grad_()
        tw = tw0.clone().requires_grad_()
        y = mod(x, idx, tw)
        y.backward(dyb)
        if sync:
            torch.cuda.synchronize()
        return {"y.bf16": y.detach().view(torch.int16).flatten(), "dx.f32": mod.last_dx.view(torch.int32).flatten(),
                "dw13.f32": mod.w13.grad.view(torch.int32).flatten(), "dw2.f32": mod.w2.grad.view(torch.int32).flatten(),
                "dtopk_w.f32": tw.grad.view(torch.int32).flatten(), "x.grad": x.grad.view(torch.int16).flatten()}

    r1 = run()
    for n in ref:
        same = torch.equal(r1[n], ref[n])
        wrong = int((r1[n] != ref[n]).sum()) if r1[n].shape == ref[n].shape else -1
        print("check %-8s %s bench_layer's (#wrong %d of %d)" % (n.split(".")[0], "byte-identical to" if same else "DIFFERS from",
                                                             wrong, ref[n].numel()))
        bad += not same
    xg_ref = ref["dx.f32"].view(torch.float32).to(torch.bfloat16).view(torch.int16)
    same = torch.equal(r1["x.grad"], xg_ref)
    print("check x.grad   %s bf16(bench_layer's dx)" % ("byte-identical to" if same else "DIFFERS from"))
    bad += not same
    r2 = run()
    same = all(torch.equal(r1[n], r2[n]) for n in r1)
    print("check two runs %s" % ("byte-identical" if same else "DIFFER"))
    bad += not same
    if shape == "small":
        # on a side stream while the legacy default stream is busy (torch.cuda._sleep, about 2 s): the layer's work is
        # queued on the caller's stream itself, so forward + backward complete before the default stream is free
        side = torch.cuda.Stream(dev)
        torch.cuda.synchronize()
        torch.cuda._sleep(4_000_000_000)
        with torch.cuda.stream(side):
            r3 = run(sync=False)
            done = torch.cuda.Event()
            done.record(side)
        done.synchronize()
        busy = not torch.cuda.default_stream(dev).query()
        torch.cuda.synchronize()
        same = all(torch.equal(r1[n], r3[n]) for n in r1)
        print("check streams: forward + backward on a side stream %s while the default stream was busy; outputs %s"
              % ("completed" if busy else "did NOT complete", "byte-identical" if same else "DIFFER"))
        bad += not (busy and same)
        del r3
    del r1, r2
    if shape == "s1":
        mod.check_indices = False
        x = x0.clone().requires_grad_()
        tw = tw0.clone().requires_grad_()
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
        ts = []
        for it in range(a.iters + 2):
            mod.zero_grad(set_to_none=True)
            x.grad = tw.grad = None
            ev[0].record()
            y = mod(x, idx, tw)
            y.backward(dyb)
            ev[1].record()
            ev[1].synchronize()
            if it >= 2:
                ts.append(ev[0].elapsed_time(ev[1]))
        ts.sort()
        ours = ts[len(ts) // 2]
        ratio = ours / bench_ms if bench_ms else float("inf")
        ok = ratio <= 1.05
        print("TIME S1 forward + backward: MoEExperts %.3f ms (median of %d), bench_layer %.3f ms: ratio %.3f (<= 1.05: %s)"
              % (ours, len(ts), bench_ms or 0, ratio, "ok" if ok else "FAIL"))
        bad += not ok
    return bad


if __name__ == "__main__":
    sys.exit(main())
