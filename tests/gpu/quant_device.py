#!/usr/bin/env python3
"""quant_device.py — the quantizers on device pointers (fourbit_quantize_device / _dequantize_device through
fourbit.torch.quantize / dequantize) on the GPU against the host ones (fourbit.quantize / dequantize, the bytes of
`fourbit quant`), from the repository root with build/ carried:

    python3 tests/gpu/quant_device.py [--big ROWSxCOLS]

For every option case of tests/python/quant_cases.py (every combination `fourbit quant --help` lists) and every input
(its Gaussian, heavy-tailed and edge-value matrices, and a --big Gaussian of wide dynamic range, 4096 x 5120 by
default, for many CTAs), with x given as float32 and as bfloat16: the device's codes, scales and outer scales must be
byte-identical to the host's for the same values, and the device dequantizer's float32 output bit-identical to the
host's except that a NaN may carry another payload (the GPU's arithmetic yields its canonical NaN where the CPU's keeps
the operand's: the NaNs must sit in the same places; how many differ so is printed).
Then the stream check: with the legacy default stream busy (torch.cuda._sleep, about 2 s), a quantize and a dequantize
on a torch.cuda.Stream must complete while the default stream is still busy (they are queued on the caller's stream,
not behind the default one), with the same bytes. Prints one line per format and a summary; exit 0 when every check
passed, 1 otherwise, 77 ("SKIPPED (not passed)") without a GPU or torch."""

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--big", default="4096x5120", help="the large input, ROWSxCOLS (cols a multiple of 32)")
    a = ap.parse_args()
    try:
        import numpy as np
        import torch
    except ImportError as e:
        print("quant_device.py: SKIPPED (not passed): %s" % e)
        return 77
    if not torch.cuda.is_available():
        print("quant_device.py: SKIPPED (not passed): torch sees no GPU")
        return 77
    import fourbit
    import fourbit.torch as ft
    from quant_cases import DATA, case_id, cases

    dev = torch.device("cuda", 0)
    R, C = map(int, a.big.lower().split("x"))
    rng = np.random.default_rng(7)
    big = (rng.standard_normal((R, C)) * 2.0 ** rng.integers(-20, 20, (R, C // 16)).repeat(16, 1)).astype(np.float32)
    data = dict(DATA, big=big)

    def bf16_values(x):  # RNE, as torch rounds (NaN stays NaN): the float32 values a bfloat16 tensor holds
        return torch.from_numpy(x).to(dev).to(torch.bfloat16)

    def host_bytes(q):
        return q.tobytes()

    def dev_bytes(q):
        parts = [q.codes.cpu().numpy().tobytes(), q.scales.cpu().numpy().tobytes()]
        if q.outer is not None:
            parts.append(q.outer.cpu().numpy().astype("<f4").tobytes())
        return b"".join(parts)

    def same_values(a, b):
        """bit-identical, a NaN equal to any NaN in the same place; and how many NaNs differ in their bits"""
        ua, ub = a.view(np.uint32), b.view(np.uint32)
        na, nb = np.isnan(a), np.isnan(b)
        return bool(np.array_equal(na, nb) and np.array_equal(ua[~na], ub[~nb])), int((ua[na] != ub[nb]).sum())

    bad, per, nanpay = 0, {}, {}
    t0 = time.time()
    for case in cases():
        fmt, kw = case
        for name, x in data.items():
            for dtype in ("float32", "bfloat16"):
                xt = torch.from_numpy(x).to(dev) if dtype == "float32" else bf16_values(x)
                vals = xt.float().cpu().numpy()
                want = fourbit.quantize(vals, fmt, **kw)
                got = ft.quantize(xt, fmt, **kw)
                ok_q = dev_bytes(got) == host_bytes(want)
                y = ft.dequantize(got, format=fmt, **kw)
                yd, yh = y.cpu().numpy(), fourbit.dequantize(want, format=fmt, **kw)
                ok_d, nanp = same_values(yd, yh)
                s_n = nanpay.setdefault(fmt, 0)
                nanpay[fmt] = s_n + nanp
                s = per.setdefault(fmt, [0, 0])
                s[0] += 1
                if not (ok_q and ok_d):
                    s[1] += 1
                    bad += 1
                    print("FAIL %s on %s (%s): %s" % (case_id(case), name, dtype,
                                                      "quantize differs" if not ok_q else "dequantize differs"))
    for fmt, (n, b) in per.items():
        print("check %-5s %4d runs (cases x inputs x dtypes) identical to the host: %s (dequantized NaNs with another payload: %d)"
              % (fmt, n, "all" if not b else "%d FAIL" % b, nanpay.get(fmt, 0)))
    print("quantizer kernels: %s (%.1f s for the checks)" % (ft._quantizer(dev).kernels(), time.time() - t0))

    # the stream check: the default stream busy, our calls on a side stream complete before it is free
    xt = torch.from_numpy(big).to(dev)
    want = fourbit.quantize(big, "nvfp4", outer="row", four_over_six=True)
    side = torch.cuda.Stream(dev)
    torch.cuda.synchronize()
    torch.cuda._sleep(4_000_000_000)  # on the legacy default stream: about 2 s at the H200's clock
    with torch.cuda.stream(side):
        q = ft.quantize(xt, "nvfp4", outer="row", four_over_six=True)
        y = ft.dequantize(q, format="nvfp4", outer="row", four_over_six=True)
        done = torch.cuda.Event()
        done.record(side)
    done.synchronize()
    busy = not torch.cuda.default_stream(dev).query()
    torch.cuda.synchronize()
    same = dev_bytes(q) == host_bytes(want) and same_values(y.cpu().numpy(), fourbit.dequantize(want, format="nvfp4", outer="row",
                                                                                                 four_over_six=True))[0]
    ok = busy and same
    print("check streams: quantize + dequantize on a side stream %s while the default stream was busy; bytes %s"
          % ("completed" if busy else "did NOT complete", "identical" if same else "DIFFER"))
    bad += not ok
    print("quant_device.py: %s" % ("every check passed" if not bad else "%d check(s) FAILED" % bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
