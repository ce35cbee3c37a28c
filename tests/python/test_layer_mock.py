"""test_layer_mock.py — fourbit.Layer (libfourbit.so's GPU expert layer, through ctypes) on the fake CUDA driver
(build/mockcuda: device memory is host memory, every kernel its CPU reference) against build/gpu/bench_layer --dump:
for the same inputs, y, dx, dW13, dW2 and dtopk_w byte-identical, through the legacy default stream and through the
stream fence (a non-null stream); two runs identical; the kernel listing; the error paths of the layer calls. It
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
                   ("cuMemFree_v2", [ctypes.c_uint64])]:
    getattr(cu, name).argtypes = args
    getattr(cu, name).restype = ctypes.c_int
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


def run_layer(layer, dump, stream, seed=None):
    L, m = layer
    T, E, K, D, F = m["T"], m["E"], m["K"], m["D"], m["F"]
    ins = {n: dev_up(np.frombuffer(load(dump, n), np.uint8)) for n in
           ("x.bf16", "idx.i32", "topk_w.f32", "w13.f32", "w2.f32", "dy.f32")}
    y, dx, dw13, dw2, dtw = (dev_alloc(n) for n in (T * D * 2, T * D * 4, E * 2 * F * D * 4, E * D * F * 4, T * K * 4))
    saved = L.forward(m["layer"], T, ins["x.bf16"], ins["idx.i32"], ins["topk_w.f32"], ins["w13.f32"], ins["w2.f32"], y,
                      seed=m["seed"] if seed is None else seed, step=m["step"], stream=stream)
    out = {"y.bf16": dev_down(y, T * D * 2)}
    L.backward(saved, ins["dy.f32"], dx, dw13, dw2, dtw, stream=stream)
    out.update({"dx.f32": dev_down(dx, T * D * 4), "dw13.f32": dev_down(dw13, E * 2 * F * D * 4),
                "dw2.f32": dev_down(dw2, E * D * F * 4), "dtopk_w.f32": dev_down(dtw, T * K * 4)})
    for p in list(ins.values()) + [y, dx, dw13, dw2, dtw]:
        cu.cuMemFree_v2(p)
    return out


@pytest.mark.parametrize("stream", [0, 0x5EED], ids=["default-stream", "fenced-stream"])
def test_layer_matches_bench_layer(layer, dump, stream):
    out = run_layer(layer, dump, stream)
    for name, got in out.items():
        want = load(dump, name)
        assert len(got) == len(want) and got == want, "%s differs from bench_layer's" % name
    assert len(set(np.frombuffer(out["y.bf16"], np.uint16))) > 100  # not a constant answer


def test_two_runs_identical(layer, dump):
    assert run_layer(layer, dump, 0) == run_layer(layer, dump, 0)


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
