"""test_layer_mock.py — fourbit.Layer (libfourbit.so's GPU expert layer, through ctypes) on the fake CUDA driver
(build/mockcuda: device memory is host memory, every kernel its CPU reference) against build/gpu/bench_layer --dump:
for the same inputs, y, dx, dW13, dW2 and dtopk_w byte-identical, on the legacy default stream and on a caller's stream
(every call of the layer that names a stream names the caller's, and none is a synchronous copy); two runs identical; the kernel listing; the error paths of the layer calls. It
checks the ABI's host side (arguments, layouts, the saved state's life, streams' plumbing), not kernels: the GPU
script tests/gpu/torch_layer.py makes the same comparison on an H200 through fourbit.torch.

Environment (make test's tier-python-layer): LD_LIBRARY_PATH with build/mockcuda, FOURBIT_BENCH_LAYER, FOURBIT_LIB."""

import ctypes
import os
import subprocess

import numpy as np
import pytest

import fourbit

BL = os.environ.get("FOURBIT_BENCH_LAYER", "build/gpu/bench_layer")
SHAPE = dict(tokens=256, experts=8, top_k=2, d_model=256, d_ff=128)

if "mockcuda" not in os.environ.get("LD_LIBRARY_PATH", ""):
    pytest.fail("run with LD_LIBRARY_PATH=build/mockcuda (make tier-python-layer): this tier must not pass without "
                "running", pytrace=False)

# the fake driver needs NVRTC's symbols from the global scope (a program linking NVRTC has them there; here
# libfourbit.so loaded it locally): the loaded libnvrtc made global, then the driver, the same library libfourbit.so opens
ctypes.CDLL(next(l.split()[-1] for l in open("/proc/self/maps") if "libnvrtc.so" in l), mode=ctypes.RTLD_GLOBAL)
cu = ctypes.CDLL("libcuda.so.1")
for name, args in [("cuInit", [ctypes.c_uint]), ("cuMemAlloc_v2", [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]),
                   ("cuMemcpyHtoD_v2", [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]),
                   ("cuMemcpyDtoH_v2", [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]),
                   ("cuMemFree_v2", [ctypes.c_uint64]),
                   # the fake driver's own counters (tests/gpu/mock_libcuda.c): calls per stream, synchronous copies
                   ("fbmock_streams_reset", []), ("fbmock_stream_calls", [ctypes.c_void_p]), ("fbmock_streams_seen", []),
                   ("fbmock_stream_total", []), ("fbmock_stream_waits", []),
                   ("fbmock_legacy_calls", [])]:
    getattr(cu, name).argtypes = args
    getattr(cu, name).restype = ctypes.c_long if name.startswith("fbmock_") else ctypes.c_int
assert cu.cuInit(0) == 0


def dev_alloc(n):
    p = ctypes.c_uint64()
    assert cu.cuMemAlloc_v2(ctypes.byref(p), n) == 0
    return p.value


def dev_up(a):
    a = np.ascontiguousarray(a)
    p = dev_alloc(a.nbytes)
    assert cu.cuMemcpyHtoD_v2(p, a.ctypes.data, a.nbytes) == 0
    return p


def dev_down(p, n):
    b = np.empty(n, np.uint8)
    assert cu.cuMemcpyDtoH_v2(b.ctypes.data, p, n) == 0
    return b.tobytes()


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    d = tmp_path_factory.mktemp("dump")
    args = [BL, "--iters", "1", "--dump", str(d)]
    for k, v in SHAPE.items():
        args += ["--" + k.replace("_", "-"), str(v)]
    p = subprocess.run(args, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "dump: inputs and outputs" in p.stdout
    return d


def load(d, name):
    return (d / name).read_bytes()


@pytest.fixture(scope="module")
def layer(dump):
    meta = (dump / "meta.txt").read_text().split()
    recipe, lay = meta[0], int(meta[1])
    T, E, K, D, F = map(int, meta[2:7])
    assert (T, E, K, D, F) == tuple(SHAPE[k] for k in ("tokens", "experts", "top_k", "d_model", "d_ff"))
    r = fourbit.Recipe(recipe, experts=E, top_k=K, d_model=D, d_ff=F)
    return fourbit.Layer(r, tokens=T), dict(layer=lay, T=T, E=E, K=K, D=D, F=F, seed=int(meta[7]), step=int(meta[8]))


def run_layer(layer, dump, stream, seed=None, calls=None):
    L, m = layer
    T, E, K, D, F = m["T"], m["E"], m["K"], m["D"], m["F"]
    ins = {n: dev_up(np.frombuffer(load(dump, n), np.uint8)) for n in
           ("x.bf16", "idx.i32", "topk_w.f32", "w13.f32", "w2.f32", "dy.f32")}
    y, dx, dw13, dw2, dtw = (dev_alloc(n) for n in (T * D * 2, T * D * 4, E * 2 * F * D * 4, E * D * F * 4, T * K * 4))
    def counted(name, call):
        cu.fbmock_streams_reset()
        r = call()
        if calls is not None:
            mine = cu.fbmock_stream_calls(stream or None)
            calls[name] = dict(mine=mine, others=cu.fbmock_stream_total() - mine, streams=cu.fbmock_streams_seen(),
                               legacy=cu.fbmock_legacy_calls(), waits=cu.fbmock_stream_waits())
        return r
    saved = counted("forward", lambda: L.forward(m["layer"], T, ins["x.bf16"], ins["idx.i32"], ins["topk_w.f32"],
                                                 ins["w13.f32"], ins["w2.f32"], y, seed=m["seed"] if seed is None else seed,
                                                 step=m["step"], stream=stream))
    out = {"y.bf16": dev_down(y, T * D * 2)}
    counted("backward", lambda: L.backward(saved, ins["dy.f32"], dx, dw13, dw2, dtw, stream=stream))
    out.update({"dx.f32": dev_down(dx, T * D * 4), "dw13.f32": dev_down(dw13, E * 2 * F * D * 4),
                "dw2.f32": dev_down(dw2, E * D * F * 4), "dtopk_w.f32": dev_down(dtw, T * K * 4)})
    for p in list(ins.values()) + [y, dx, dw13, dw2, dtw]:
        cu.cuMemFree_v2(p)
    return out


@pytest.mark.parametrize("stream", [0, 0x5EED], ids=["default-stream", "callers-stream"])
def test_layer_matches_bench_layer(layer, dump, stream):
    calls = {}
    out = run_layer(layer, dump, stream, calls=calls)
    # every launch, copy, set and event of the call on the caller's stream, nothing on another, no synchronous copy;
    # the forward waits once when the last call was on another stream (the test before this one: stream 0)
    f, b = calls["forward"], calls["backward"]
    assert f["mine"] > 20 and f["legacy"] == 0 and (f["streams"], f["others"]) == (1, 0) and f["waits"] <= 1, f
    assert b["mine"] > 10 and b["legacy"] == 0 and (b["streams"], b["others"]) == (1, 0) and b["waits"] == 0, b
    for name, got in out.items():
        want = load(dump, name)
        assert len(got) == len(want) and got == want, "%s differs from bench_layer's" % name
    assert len(set(np.frombuffer(out["y.bf16"], np.uint16))) > 100  # not a constant answer


def test_two_runs_identical(layer, dump):
    assert run_layer(layer, dump, 0) == run_layer(layer, dump, 0)


def test_stream_change_waits_for_the_last_stream(layer, dump):
    """A call on another stream than the last call's: the new stream waits once for the event the last call recorded
    after its own work (the pool's buffers may be in use there), and nothing is queued on the old stream (which would
    make the new one wait for whatever the caller queued there since). The outputs are the same."""
    calls = {}
    run_layer(layer, dump, 0x5EED)
    out = run_layer(layer, dump, 0x7A11, calls=calls)
    f, b = calls["forward"], calls["backward"]
    assert (f["streams"], f["others"], f["waits"]) == (1, 0, 1) and f["legacy"] == 0 and f["mine"] > 20, f  # one fence
    assert (b["streams"], b["others"], b["waits"]) == (1, 0, 0) and b["legacy"] == 0, b                     # no fence
    assert out == run_layer(layer, dump, 0)


def test_seed_reaches_the_layer(layer, dump):
    """The comparison above can fail: another seed changes the combine's RHT signs (y) and the SR backward's draws."""
    a, b = run_layer(layer, dump, 0), run_layer(layer, dump, 0, seed=99)
    assert all(a[n] != b[n] for n in ("y.bf16", "dx.f32", "dw13.f32", "dw2.f32", "dtopk_w.f32"))


def test_kernel_listing(layer):
    k = layer[0].kernels()
    assert k["kernels"] > 10 and k["compiled"] == k["kernels"] and k["from_cache"] == 0 and k["cache"] is None
    assert len(k["loaded"]) == k["kernels"]
    # each variant is its spec's canonical name (ending in the arch tag) and a tile tag
    assert all(e["from"] == "nvrtc" and e["spec"].endswith("_sm90a") and e["variant"].startswith(e["spec"] + "_")
               for e in k["loaded"]), k["loaded"][:3]
    names = [e["variant"] for e in k["loaded"]]
    assert any(n.startswith("gemm_fwd_") for n in names) and any(n.startswith("quant_nvfp4") for n in names)


def test_layer_errors(layer, dump):
    L, m = layer
    with pytest.raises(fourbit.InputError, match="tokens 0: at least one"):
        L.forward(1, 0, 1, 1, 1, 1, 1, 1, seed=0, step=0)
    with pytest.raises(fourbit.InputError, match="layer 99: the recipe.s model has layers 1..48"):
        L.forward(99, 4, 1, 1, 1, 1, 1, 1, seed=0, step=0)
    with pytest.raises(fourbit.InputError, match="a NULL device pointer"):
        L.forward(1, 4, 0, 1, 1, 1, 1, 1, seed=0, step=0)
    T, E, K, D, F = m["T"], m["E"], m["K"], m["D"], m["F"]
    bufs = [dev_alloc(n) for n in (T * D * 2, T * K * 4, T * K * 4, E * 2 * F * D * 4, E * D * F * 4, T * D * 2)]
    idx = np.frombuffer(load(dump, "idx.i32"), np.int32)
    assert cu.cuMemcpyHtoD_v2(bufs[1], idx.ctypes.data, idx.nbytes) == 0
    s = L.forward(1, T, *bufs, seed=1, step=1)
    s.release()
    with pytest.raises(fourbit.InputError, match="not a live forward of this layer"):
        L.backward(s, 1, 1, 1, 1, 1)
    s = L.forward(1, T, *bufs, seed=1, step=1)
    with pytest.raises(fourbit.InputError, match="a NULL device pointer"):
        L.backward(s, 0, 1, 1, 1, 1)
    with pytest.raises(fourbit.InputError, match="not a live forward"):  # consumed by the failed call
        L.backward(s, 1, 1, 1, 1, 1)
    for p in bufs:
        cu.cuMemFree_v2(p)
    with pytest.raises(fourbit.InputError, match="device 7: the driver sees 1 GPU"):
        fourbit.Layer(L.recipe, device=7)


def test_layer_with_an_empty_cache(layer, dump, tmp_path):
    """With a cache that holds none of the kernels: each is looked up (the lookup's note kept), then compiled; the
    outputs are the same bytes."""
    L, m = layer
    c = fourbit.Cache(tmp_path / "cache")
    Lc = fourbit.Layer(L.recipe, tokens=m["T"], cache=c)
    k = Lc.kernels()
    assert k["cache"] == str(tmp_path / "cache") and k["from_cache"] == 0 and k["compiled"] == k["kernels"]
    assert all(e["from"] == "nvrtc" and "not in the cache" in e["note"] for e in k["loaded"]), k["loaded"][:2]
    assert run_layer((Lc, m), dump, 0) == run_layer(layer, dump, 0)
    Lc.close()
    c.close()


# ---- the quantizers on device pointers (fourbit.Quantizer) on the fake driver ----------------------------------------
# Every option of fourbit quant on the host tests' data: the device call's bytes equal fourbit.quantize's (FP32 and BF16
# inputs: a BF16 input is its values' exact FP32), and the device dequantize's equal fourbit.dequantize's. The fake
# driver runs each kernel's CPU reference from its name and parameters: this checks the host side (the kernel each
# option picks, its parameters, the buffers), and that the references agree; tests/gpu/quant_device.py runs the kernels.
import sys  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from quant_cases import DATA, case_id, cases  # noqa: E402


@pytest.fixture(scope="module")
def quantizer():
    q = fourbit.Quantizer()
    yield q
    q.close()


def to_bf16_values(x):
    """x rounded to BF16 (RNE, NaN kept), as uint16 bits and as the float32 values they hold"""
    u = x.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    r[nan] = ((x.view(np.uint32)[nan] >> 16) | 0x40).astype(np.uint16)
    return r, (r.astype(np.uint32) << 16).view(np.float32)


@pytest.mark.parametrize("case", cases(), ids=case_id)
def test_device_quantizers_match_the_host_ones(quantizer, case):
    fmt, kw = case
    for name, x in DATA.items():
        rows, cols = x.shape
        for dtype in ("float32", "bfloat16"):
            if dtype == "float32":
                xin, vals = x, x
            else:
                xin, vals = to_bf16_values(x)
            want = fourbit.quantize(vals, fmt, **kw)
            cb, sb, no = fourbit.Quantizer.layout(rows, cols, fmt, **kw)
            dx, dc, ds = dev_up(xin), dev_alloc(cb), dev_alloc(sb)
            do = dev_alloc(no * 4) if no else 0
            cu.fbmock_streams_reset()
            quantizer.quantize(dx, rows, cols, dc, ds, do, format=fmt, dtype=dtype, stream=0x5EED, **kw)
            assert cu.fbmock_streams_seen() == 1 and cu.fbmock_legacy_calls() == 0  # on the caller's stream only
            got = dev_down(dc, cb) + dev_down(ds, sb) + (dev_down(do, no * 4) if no else b"")
            assert got == want.tobytes(), "%s on %s (%s): the device quantizer differs" % (case_id(case), name, dtype)
            dy = dev_alloc(rows * cols * 4)
            quantizer.dequantize(dc, ds, do, rows, cols, dy, format=fmt, stream=0x5EED, **kw)
            y = fourbit.dequantize(want, format=fmt, **kw)
            assert dev_down(dy, rows * cols * 4) == y.tobytes(), "%s on %s: the device dequantizer differs" % (case_id(case), name)
            for p in (dx, dc, ds, do, dy):
                if p:
                    cu.cuMemFree_v2(p)
    k = quantizer.kernels()
    assert k["arch"] == "sm_90a" and k["compiled"] == len(k["loaded"]) > 0


def test_device_quantizer_errors(quantizer):
    with pytest.raises(fourbit.InputError, match="a NULL device pointer"):
        quantizer.quantize(0, 4, 64, 1, 1, 1, format="nvfp4")
    with pytest.raises(fourbit.InputError, match="cols 40 is not a multiple of the mxfp8 block"):
        quantizer.quantize(1, 4, 40, 1, 1, 0, format="mxfp8")
    with pytest.raises(fourbit.InputError, match="outer and four_over_six apply to format nvfp4 only"):
        quantizer.dequantize(1, 1, 0, 4, 64, 1, format="s2f6", outer="row")
    with pytest.raises(fourbit.InputError, match="dtype 'float16': float32 or bfloat16"):
        quantizer.quantize(1, 4, 64, 1, 1, 1, format="nvfp4", dtype="float16")
    with pytest.raises(fourbit.InputError, match="device 3: the driver sees 1 GPU"):
        fourbit.Quantizer(device=3)
