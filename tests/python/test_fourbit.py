"""test_fourbit.py — the Python package (python/fourbit) against the CLI, under pytest (make test's tier-python):
fourbit.quantize / dequantize byte for byte against `fourbit quant` / `fourbit dequant` on every format and every
option `fourbit quant --help` lists (--outer, --four-over-six, --rounding, --seed, --step, --rht; --stats through the
round trip's figures), on Gaussian data and on edge values (zeros, -0, NaN, +-Inf, huge, subnormal); plan and info
against `fourbit plan --json` and `fourbit info`; every bad recipe fixture's message against the CLI's; the error
paths (bad format, option, shape, dtype, sizes, paths) raising fourbit.InputError / fourbit.Error with a message.

Environment (the Makefile sets it): FOURBIT_LIB (build/libfourbit.so), FOURBIT_CLI (build/fourbit), PYTHONPATH with
build/pydeps and python/. Run from the repository root."""

import glob
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import fourbit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from quant_cases import DATA, case_id, cases  # noqa: E402 (the data and option cases, shared with the device tests)

CLI = os.environ.get("FOURBIT_CLI", "build/fourbit")


def run(*args, check=True):
    p = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True)
    if check and p.returncode != 0:
        raise AssertionError("%s: exit %d: %s" % (" ".join(map(str, args)), p.returncode, p.stderr))
    return p


def flags(fmt, kw):
    f = ["--format", fmt]
    for k, v in kw.items():
        if v is None:
            continue
        if k == "four_over_six":
            f.append("--four-over-six")
        elif k == "rht":
            f.append("--rht")
        else:
            f += ["--" + k, str(v)]
    return f


@pytest.mark.parametrize("case", cases(), ids=case_id)
def test_quant_dequant_byte_for_byte(case, tmp_path):
    fmt, kw = case
    for name, x in DATA.items():
        rows, cols = x.shape
        xin, qout, yout = tmp_path / (name + ".f32"), tmp_path / (name + ".q"), tmp_path / (name + ".y")
        x.astype("<f4").tofile(xin)
        run("quant", *flags(fmt, kw), "--rows", rows, "--cols", cols, xin, qout)
        q = fourbit.quantize(x, fmt, **kw)
        cli = qout.read_bytes()
        assert q.tobytes() == cli, "%s on %s: quantize differs from fourbit quant" % (case_id(case), name)
        run("dequant", *flags(fmt, kw), "--rows", rows, "--cols", cols, qout, yout)
        y = fourbit.dequantize(q, format=fmt, **kw)
        assert y.dtype == np.float32 and y.shape == x.shape
        assert y.tobytes() == yout.read_bytes(), "%s on %s: dequantize differs from fourbit dequant" % (case_id(case), name)
        # the same from the CLI's bytes, taken apart as its layout says (flat arrays, rows and cols given)
        nc = rows * cols // 2 if fmt == "nvfp4" else rows * cols
        ns = rows * cols // fourbit.BLOCK[fmt]
        codes = np.frombuffer(cli, np.uint8, nc)
        scales = np.frombuffer(cli, np.uint8, ns, nc)
        outer = np.frombuffer(cli[nc + ns:], "<f4") if fmt == "nvfp4" else None
        y2 = fourbit.dequantize(codes, scales, outer, format=fmt, rows=rows, cols=cols, **kw)
        assert y2.tobytes() == y.tobytes()


def test_shapes_and_dtypes():
    x = DATA["gauss"]
    q = fourbit.quantize(x, "nvfp4", outer="row")
    assert q.codes.dtype == np.uint8 and q.codes.shape == (24, 64)
    assert q.scales.shape == (24, 8) and q.outer.shape == (24,) and q.outer.dtype == np.float32
    assert fourbit.quantize(x, "nvfp4").outer.shape == (1,)
    q = fourbit.quantize(x, "mxfp8")
    assert q.codes.shape == (24, 128) and q.scales.shape == (24, 4) and q.outer is None
    q = fourbit.quantize(x, "s2f6", rht=True)
    assert q.codes.dtype == np.int8 and q.codes.shape == (24, 128) and q.scales.shape == (24, 4)
    # the options reach the quantizers (so the byte-for-byte comparisons compare different encodings)
    enc = {fourbit.quantize(x, "mxfp8", rounding=r, seed=sd, step=st).tobytes()
           for r, sd, st in [("rn", 0, 0), ("sr", 0, 0), ("sr", 7, 0), ("sr", 0, 3)]}
    assert len(enc) == 4
    enc = {fourbit.quantize(x, "nvfp4", outer=o, four_over_six=f).tobytes() for o in ("tensor", "row") for f in (False, True)}
    assert len(enc) == 4
    assert fourbit.quantize(x, "s2f6", rht=True, seed=1).tobytes() != fourbit.quantize(x, "s2f6", rht=True, seed=2).tobytes()
    # a strided view quantizes as its contiguous copy
    big = np.ascontiguousarray(np.concatenate([x, x], axis=1))
    assert fourbit.quantize(big[:, ::2], "mxfp8").tobytes() == fourbit.quantize(np.ascontiguousarray(big[:, ::2]), "mxfp8").tobytes()


@pytest.mark.parametrize("fmt,kw", [("nvfp4", dict(outer="row", four_over_six=True)), ("mxfp8", dict(rounding="sr", seed=3)),
                                    ("s2f6", dict(rht=True, seed=9))])
def test_stats_match_cli(fmt, kw, tmp_path):
    """--stats: the CLI's round-trip figures are those of fourbit.dequantize(fourbit.quantize(x)) (FP64 sums)."""
    x = DATA["gauss"]
    x.astype("<f4").tofile(tmp_path / "x")
    p = run("quant", *flags(fmt, kw), "--rows", x.shape[0], "--cols", x.shape[1], "--stats", tmp_path / "x", tmp_path / "q")
    m = re.search(r"rmse (\S+) .* max abs error (\S+), mean signed error \(bias\) (\S+)", p.stdout)
    assert m, p.stdout
    d = fourbit.dequantize(fourbit.quantize(x, fmt, **kw), format=fmt, **kw).astype(np.float64) - x.astype(np.float64)
    rmse, mx, bias = np.sqrt(np.mean(d * d)), np.max(np.abs(d)), np.mean(d)
    assert float(m.group(1)) == pytest.approx(rmse, rel=1e-5)
    assert float(m.group(2)) == pytest.approx(mx, rel=1e-5)
    assert float(m.group(3)) == pytest.approx(bias, rel=1e-4, abs=1e-9)


def expect_input_error(fn, pattern):
    with pytest.raises(fourbit.InputError) as e:
        fn()
    assert re.search(pattern, str(e.value)), str(e.value)
    assert isinstance(e.value, ValueError) and e.value.status == "EINVAL"


def test_quant_errors():
    x = DATA["gauss"]
    expect_input_error(lambda: fourbit.quantize(x, "nvfp8"), r"format 'nvfp8': unknown")
    expect_input_error(lambda: fourbit.quantize(x[:, :40].copy(), "nvfp4"), r"cols 40 is not a multiple of the nvfp4 block \(16\)")
    expect_input_error(lambda: fourbit.quantize(x[:, :48].copy(), "mxfp8"), r"cols 48 is not a multiple of the mxfp8 block \(32\)")
    expect_input_error(lambda: fourbit.quantize(x[0], "mxfp8"), r"shape \(128,\): a 2-D")
    expect_input_error(lambda: fourbit.quantize(x.astype(np.float64), "mxfp8"), r"float64: float32 wanted")
    expect_input_error(lambda: fourbit.quantize(np.zeros((0, 32), np.float32), "mxfp8"), r"0 x 32: rows and cols are in \[1, 2\^31\]")
    expect_input_error(lambda: fourbit.quantize(x, "mxfp8", outer="tensor"), r"outer and four_over_six apply to format nvfp4 only")
    expect_input_error(lambda: fourbit.quantize(x, "s2f6", four_over_six=True), r"outer and four_over_six apply to format nvfp4 only")
    expect_input_error(lambda: fourbit.quantize(x, "s2f6", rounding="rn"), r"rounding and step do not apply to format s2f6")
    expect_input_error(lambda: fourbit.quantize(x, "s2f6", step=1), r"rounding and step do not apply to format s2f6")
    expect_input_error(lambda: fourbit.quantize(x, "nvfp4", rht=True), r"rht applies to format s2f6 only")
    expect_input_error(lambda: fourbit.quantize(x, "nvfp4", outer="token"), r"outer 'token': unknown granularity")
    expect_input_error(lambda: fourbit.quantize(x, "mxfp8", rounding="up"), r"rounding 'up': unknown mode")
    expect_input_error(lambda: fourbit.quantize(x, "mxfp8", seed=-1), r"seed -1: an integer in \[0, 2\^32\)")
    expect_input_error(lambda: fourbit.quantize(x, "mxfp8", step=2 ** 32), r"step 4294967296: an integer")
    q = fourbit.quantize(x, "nvfp4", outer="row")
    expect_input_error(lambda: fourbit.dequantize(q, format="nvfp4"), r"1 outer scales wanted \(outer tensor\), got 24")
    expect_input_error(lambda: fourbit.dequantize(q.codes, q.scales[:, :4], q.outer, format="nvfp4", outer="row"),
                       r"24 x 128 nvfp4 takes 1536 code bytes and 192 scale bytes, got 1536 and 96")
    expect_input_error(lambda: fourbit.dequantize(q.codes, q.scales, format="nvfp4", outer="row"), r"needs its outer scales")
    m = fourbit.quantize(x, "mxfp8")
    expect_input_error(lambda: fourbit.dequantize(m.codes, m.scales, np.ones(1, np.float32), format="mxfp8"),
                       r"mxfp8 has no outer scales")
    expect_input_error(lambda: fourbit.dequantize(q, q.scales, format="nvfp4"), r"a Quantized carries its scales")
    expect_input_error(lambda: fourbit.dequantize(q.codes.astype(np.int32), q.scales, q.outer, format="nvfp4", outer="row"),
                       r"codes \(int32\) and scales \(uint8\) are uint8")


def test_c_layer_refuses_what_the_cli_refuses():
    """The C ABI's own checks (fourbit_quant_layout), below the Python ones: a struct set by hand."""
    import ctypes
    from fourbit import _lib
    for fields, pattern in [(dict(format=2, outer_row=1), "outer and four_over_six apply to format nvfp4 only"),
                            (dict(format=3, sr=1), "rounding and step do not apply to format s2f6"),
                            (dict(format=1, rht=1), "rht applies to format s2f6 only"),
                            (dict(format=9), "format 9: unknown")]:
        o = _lib.QuantOpts(size=ctypes.sizeof(_lib.QuantOpts), **fields)
        st = _lib.lib.fourbit_quant_layout(ctypes.byref(o), 4, 64, None, None, None)
        assert st == 1 and pattern in _lib.lib.fourbit_errmsg().decode()
    o = _lib.QuantOpts(size=8, format=1)  # an older caller's struct, too short for this library
    assert _lib.lib.fourbit_quant_layout(ctypes.byref(o), 4, 64, None, None, None) == 1
    assert "size 8, this library needs" in _lib.lib.fourbit_errmsg().decode()


@pytest.mark.parametrize("recipe", sorted(glob.glob("recipes/*.lua")))
def test_plan_matches_cli(recipe):
    assert fourbit.plan(recipe) == json.loads(run("plan", "--json", recipe).stdout)
    assert fourbit.plan(recipe, "sm_100a") == json.loads(run("plan", "--json", "--arch", "sm_100a", recipe).stdout)


def test_plan_dims_override():
    p = fourbit.plan("recipes/inkling2_small.lua", layers=6, d_model=256, d_ff=128, experts=8, top_k=2)
    assert (p["model"]["layers"], p["model"]["d_model"], p["model"]["experts"]) == (6, 256, 8)
    assert len(p["layers"]) == 6
    expect_input_error(lambda: fourbit.plan("recipes/tiny.lua", arch="sm_80"), r"arch 'sm_80': unknown")


def test_example_defaults_plan_every_layer():
    """python/examples/train_moe.py's default model must be one its recipe plans at every layer (on the H200, the
    default of 2 layers met 'last_fraction(0.166667) of 2 layers selects no layer' before its first step)."""
    src = open("python/examples/train_moe.py").read()
    d = {k: re.search(r'"--%s", (?:type=int, )?default="?([^")]+)' % k, src).group(1)
         for k in ("recipe", "layers", "d-model", "d-ff", "experts", "top-k", "vocab")}
    dims = dict(layers=int(d["layers"]), d_model=int(d["d-model"]), d_ff=int(d["d-ff"]), experts=int(d["experts"]),
                top_k=int(d["top-k"]), vocab=int(d["vocab"]))
    p = fourbit.plan(d["recipe"], **dims)
    assert len(p["layers"]) == dims["layers"]
    fmts = {json.dumps({k: v for k, v in l.items() if k != "layer"}, sort_keys=True) for l in p["layers"]}
    assert len(fmts) >= 2, "the example's layers should cover both of the recipe's layer kinds (NVFP4 and MXFP8)"


FIXTURES = sorted(f for f in glob.glob("tests/fixtures/recipes/*.lua") if not os.path.basename(f).startswith("_"))


@pytest.mark.parametrize("fixture", FIXTURES, ids=os.path.basename)
def test_bad_recipe_message_is_the_cli_s(fixture):
    """Every bad recipe: a fourbit.Error whose message is the line `fourbit plan` prints (file:line: field: what)."""
    p = run("plan", fixture, check=False)
    assert p.returncode == 2, p.stderr
    want = p.stderr.strip().removeprefix("fourbit plan: ")
    with pytest.raises(fourbit.Error) as e:
        fourbit.plan(fixture)
    assert str(e.value) == want


def test_missing_recipe():
    with pytest.raises(fourbit.Error) as e:
        fourbit.Recipe("tests/fixtures/recipes/no_such_recipe.lua")
    assert "tests/fixtures/recipes/no_such_recipe.lua" in str(e.value) and e.value.status == "EIO"
    expect_input_error(lambda: fourbit.Recipe("recipes/tiny.lua", d_model=-5), r"dims.d_model = -5")


def test_info():
    i = fourbit.info()
    assert i["version"] == fourbit.__version__ == "0.1.0" and i["abi"] == 1
    cli = run("info").stdout
    assert i["lua"] in cli and i["nvrtc"] in cli
    assert isinstance(i["devices"], list)


def test_cache(tmp_path):
    c = fourbit.Cache(tmp_path / "cache")
    assert c.dir == str(tmp_path / "cache") and os.path.exists(tmp_path / "cache" / "data.mdb")
    c.close()
    env = dict(os.environ, FOURBIT_CACHE=str(tmp_path / "envcache"))
    out = subprocess.run(["python3", "-c", "import fourbit; print(fourbit.Cache().dir, fourbit.info()['cache_dir'])"],
                         env=env, capture_output=True, text=True)
    assert out.stdout.split() == [str(tmp_path / "envcache")] * 2, out.stderr
    (tmp_path / "file").write_text("x")
    with pytest.raises(fourbit.Error) as e:
        fourbit.Cache(tmp_path / "file")
    assert str(tmp_path / "file") in str(e.value)


def test_layer_without_driver():
    """No driver here (unless the fake one is on LD_LIBRARY_PATH): the GPU layer says so, as an exception."""
    if "mockcuda" in os.environ.get("LD_LIBRARY_PATH", ""):
        pytest.skip("the fake driver is loaded: tests/python/test_layer_mock.py runs the layer")
    r = fourbit.Recipe("recipes/tiny.lua")
    with pytest.raises(fourbit.Error) as e:
        fourbit.Layer(r)
    assert e.value.status == "ECUDA" and "libcuda.so.1" in str(e.value)
    expect_input_error(lambda: fourbit.Layer(r, device=-1), r"device -1: a CUDA ordinal is >= 0")


C_LAYOUT = r"""
#include "fourbit/libfourbit.h"
#include <stddef.h>
#include <stdio.h>
#define F(T, f) printf(#T "." #f " %zu %zu\n", offsetof(T, f), sizeof(((T *)0)->f))
int main(void) {
  printf("abi %d %d\n", FOURBIT_ABI_VERSION, fourbit_abi_version());
  printf("fourbit_quant_opts %zu\nfourbit_dims %zu\nfourbit_layer_opts %zu\n", sizeof(fourbit_quant_opts),
         sizeof(fourbit_dims), sizeof(fourbit_layer_opts));
  F(fourbit_quant_opts, size); F(fourbit_quant_opts, format); F(fourbit_quant_opts, outer_row);
  F(fourbit_quant_opts, four_over_six); F(fourbit_quant_opts, sr); F(fourbit_quant_opts, rht);
  F(fourbit_quant_opts, seed); F(fourbit_quant_opts, step);
  F(fourbit_dims, size); F(fourbit_dims, layers); F(fourbit_dims, d_model); F(fourbit_dims, d_ff);
  F(fourbit_dims, experts); F(fourbit_dims, top_k); F(fourbit_dims, vocab);
  F(fourbit_layer_opts, size); F(fourbit_layer_opts, device); F(fourbit_layer_opts, tokens);
  F(fourbit_layer_opts, cache); F(fourbit_layer_opts, verbose);
  return 0;
}
"""


def test_header_is_c99_and_matches_ctypes(tmp_path):
    """The header compiles as strict C99 (and C++), links against the library by its soname, and its structs have the
    layout the ctypes mirrors in fourbit/_lib.py give them, field by field."""
    import ctypes
    from fourbit import _lib
    src = tmp_path / "layout.c"
    src.write_text(C_LAYOUT)
    libdir = os.path.dirname(fourbit.library_path)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    inc = os.path.join(os.path.dirname(root), "include")
    exe = tmp_path / "layout"
    subprocess.run(["gcc", "-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror", "-I" + inc, "-o", str(exe), str(src),
                    "-L" + libdir, "-lfourbit", "-Wl,-rpath," + libdir], check=True)
    subprocess.run(["g++", "-std=c++11", "-Wall", "-Wextra", "-Werror", "-I" + inc, "-x", "c++", "-fsyntax-only", str(src)],
                   check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "abi 1 1"
    mirrors = {"fourbit_quant_opts": _lib.QuantOpts, "fourbit_dims": _lib.Dims, "fourbit_layer_opts": _lib.LayerOpts}
    seen = 0
    for line in out[1:]:
        w = line.split()
        if len(w) == 2:
            assert ctypes.sizeof(mirrors[w[0]]) == int(w[1]), line
        elif len(w) == 3:
            t, f = w[0].split(".")
            fld = getattr(mirrors[t], f)
            assert (fld.offset, fld.size) == (int(w[1]), int(w[2])), line
            seen += 1
    assert seen == sum(len(m._fields_) for m in mirrors.values())
