"""quant_cases.py — the quantizer tests' data and option cases, shared by tests/python/test_fourbit.py (host, against
the CLI), tests/python/test_layer_mock.py (the device calls on the fake driver) and tests/gpu/quant_device.py (the
device calls on a GPU): Gaussian, heavy-tailed and edge-value inputs (zeros, -0, subnormals, NaN, +-Inf, huge), and
every option combination of `fourbit quant --help` as (format, keyword arguments of fourbit.quantize)."""

import itertools

import numpy as np


def inputs():
    rng = np.random.default_rng(20261202)
    gauss = rng.standard_normal((24, 128)).astype(np.float32)
    heavy = (rng.standard_t(2, (8, 256)) * 10.0 ** rng.integers(-6, 6, (8, 256))).astype(np.float32)
    edge = rng.standard_normal((6, 64)).astype(np.float32)
    edge[0] = 0.0                               # a block (and row) of zeros
    edge[1, :32] = -0.0
    edge[1, 32:] = np.float32(1e-42)            # subnormals
    edge[2, 3], edge[2, 40] = np.nan, np.inf    # non-finite in a block
    edge[3, 5], edge[3, 50] = -np.inf, 3.0e38   # huge: saturates
    edge[4] *= 1e-30
    edge[5] = np.linspace(-7, 7, 64, dtype=np.float32)
    return {"gauss": gauss, "heavy": heavy, "edge": edge}


DATA = inputs()


def cases():
    """Every option combination of `fourbit quant --help`: (format, python kwargs, CLI flags)."""
    out = []
    seeds = [(None, None), (7, 3), (0xFFFFFFFF, 0xFFFFFFFF)]
    for outer, fos, rnd, (seed, step) in itertools.product([None, "tensor", "row"], [None, True], [None, "rn", "sr"], seeds):
        out.append(("nvfp4", dict(outer=outer, four_over_six=fos, rounding=rnd, seed=seed, step=step)))
    for rnd, (seed, step) in itertools.product([None, "rn", "sr"], seeds):
        out.append(("mxfp8", dict(rounding=rnd, seed=seed, step=step)))
    for rht, seed in itertools.product([None, True], [None, 5, 0xFFFFFFFF]):
        out.append(("s2f6", dict(rht=rht, seed=seed)))
    return out


def case_id(c):
    fmt, kw = c
    return fmt + "".join("-%s=%s" % (k, v) for k, v in kw.items() if v is not None)
