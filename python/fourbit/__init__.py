"""fourbit — Python front door of libfourbit.so (include/fourbit/libfourbit.h), through ctypes; numpy for host arrays.

    fourbit.quantize(x, format="nvfp4", outer="row", four_over_six=True)  -> Quantized(codes, scales, outer)
    fourbit.dequantize(q, format="nvfp4", outer="row", four_over_six=True) -> float32 array
    fourbit.plan("recipes/inkling2_small.lua")                             -> dict (fourbit plan --json)
    fourbit.info()                                                          -> dict
    fourbit.Recipe, fourbit.Cache, fourbit.Layer                            the handles under them
    fourbit.Quantizer                                                       the quantizers on device pointers
    fourbit.torch.quantize / dequantize                                     the same on CUDA tensors
    fourbit.torch.MoEExperts                                                the GPU expert layer as an nn.Module

The quantizers are the numerics library's (docs/numerics.md): the bytes `fourbit quant` writes, part by part (codes
row-major, NVFP4 two per byte with the even element in the low nibble; one scale byte per block; NVFP4's float32
outer scales). Errors raise fourbit.Error (fourbit.InputError, also a ValueError, for bad input) with the library's
message."""

import collections
import ctypes
import json

import numpy as np

from . import _lib
from ._lib import Error, InputError

__all__ = ["quantize", "dequantize", "plan", "info", "Quantized", "Recipe", "Cache", "Layer", "Quantizer", "Error", "InputError",
           "__version__", "library_path"]

__version__ = _lib.lib.fourbit_version().decode()
library_path = _lib.path

FORMATS = {"nvfp4": 1, "mxfp8": 2, "s2f6": 3}
BLOCK = {"nvfp4": 16, "mxfp8": 32, "s2f6": 32}


class Quantized(collections.namedtuple("Quantized", "codes scales outer")):
    """codes: uint8 (R, C/2) for nvfp4, uint8 E4M3 (R, C) for mxfp8, int8 (R, C) for s2f6; scales: uint8 (R, C/block)
    (E4M3 for nvfp4, E8M0 else); outer: float32 (1,) or (R,) for nvfp4, None else."""

    def tobytes(self):
        """The bytes of `fourbit quant`'s OUT: codes, scales, then the outer scales."""
        parts = [self.codes.tobytes(), self.scales.tobytes()]
        if self.outer is not None:
            parts.append(self.outer.astype("<f4").tobytes())
        return b"".join(parts)


def _opts(fn, format, outer, four_over_six, rounding, seed, step, rht):
    """The struct of the C call, refusing what `fourbit quant` refuses: an option given that does not apply."""
    if format not in FORMATS:
        raise InputError(1, "%s: format %r: unknown (nvfp4, mxfp8, s2f6)" % (fn, format))
    if format != "nvfp4" and (outer is not None or four_over_six is not None):
        raise InputError(1, "%s: outer and four_over_six apply to format nvfp4 only" % fn)
    if format == "s2f6" and (rounding is not None or step is not None):
        raise InputError(1, "%s: rounding and step do not apply to format s2f6" % fn)
    if format != "s2f6" and rht is not None:
        raise InputError(1, "%s: rht applies to format s2f6 only" % fn)
    if outer not in (None, "tensor", "row"):
        raise InputError(1, "%s: outer %r: unknown granularity (tensor, row)" % (fn, outer))
    if rounding not in (None, "rn", "sr"):
        raise InputError(1, "%s: rounding %r: unknown mode (rn, sr)" % (fn, rounding))
    for name, v in (("seed", seed), ("step", step)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= int(v) <= 0xFFFFFFFF):
            raise InputError(1, "%s: %s %r: an integer in [0, 2^32)" % (fn, name, v))
    return _lib.QuantOpts(size=ctypes.sizeof(_lib.QuantOpts), format=FORMATS[format], outer_row=int(outer == "row"),
                          four_over_six=int(bool(four_over_six)), sr=int(rounding == "sr"), rht=int(bool(rht)),
                          seed=int(seed or 0), step=int(step or 0))


def _layout(fn, o, rows, cols):
    cb, sb, no = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_size_t()
    _lib.check(_lib.lib.fourbit_quant_layout(ctypes.byref(o), rows, cols, ctypes.byref(cb), ctypes.byref(sb), ctypes.byref(no)), fn)
    return cb.value, sb.value, no.value


def _ptr(a, t):
    return a.ctypes.data_as(ctypes.POINTER(t))


def quantize(x, format, *, outer=None, four_over_six=None, rounding=None, seed=None, step=None, rht=None):
    """Quantize x (a 2-D float32 array, R x C; blocks along a row) as `fourbit quant --format FORMAT ...` does.
    nvfp4: outer "tensor" (default) | "row", four_over_six, rounding "rn" (default) | "sr", seed, step.
    mxfp8: rounding, seed, step. s2f6: rht, seed (the RHT sign mask). Returns Quantized(codes, scales, outer)."""
    o = _opts("quantize", format, outer, four_over_six, rounding, seed, step, rht)
    x = np.asarray(x)
    if x.dtype != np.float32:
        raise InputError(1, "quantize: x is %s: float32 wanted (convert it yourself: no silent rounding)" % x.dtype)
    if x.ndim != 2:
        raise InputError(1, "quantize: x has shape %s: a 2-D (rows, cols) array wanted" % (x.shape,))
    rows, cols = x.shape
    cb, sb, no = _layout("quantize", o, rows, cols)
    x = np.ascontiguousarray(x)
    codes = np.empty((rows, cb // rows), np.uint8)
    scales = np.empty((rows, sb // rows), np.uint8)
    outer_a = np.empty(no, np.float32) if no else None
    _lib.check(_lib.lib.fourbit_quantize(ctypes.byref(o), _ptr(x, ctypes.c_float), rows, cols, _ptr(codes, ctypes.c_uint8),
                                         _ptr(scales, ctypes.c_uint8), _ptr(outer_a, ctypes.c_float) if no else None), "quantize")
    if format == "s2f6":
        codes = codes.view(np.int8)
    return Quantized(codes, scales, outer_a)


def dequantize(codes, scales=None, outer_scales=None, *, format, outer=None, four_over_six=None, rounding=None, seed=None,
               step=None, rht=None, rows=None, cols=None):
    """The inverse of quantize, as `fourbit dequant` with the same options: float32 (R, C).
    codes may be a Quantized (then scales and outer scales come from it). The shape is read from codes (R, C/2 for
    nvfp4, else R, C) unless rows and cols are given (the arrays may then be flat)."""
    if isinstance(codes, Quantized):
        if scales is not None or outer_scales is not None:
            raise InputError(1, "dequantize: a Quantized carries its scales and outer scales: pass neither")
        codes, scales, outer_scales = codes
    if scales is None:
        raise InputError(1, "dequantize: scales missing")
    o = _opts("dequantize", format, outer, four_over_six, rounding, seed, step, rht)
    codes = np.ascontiguousarray(codes)
    scales = np.ascontiguousarray(scales)
    if codes.dtype not in (np.uint8, np.int8) or scales.dtype != np.uint8:
        raise InputError(1, "dequantize: codes (%s) and scales (%s) are uint8 (s2f6 codes: int8 too)" % (codes.dtype, scales.dtype))
    if rows is None or cols is None:
        if codes.ndim != 2:
            raise InputError(1, "dequantize: codes have shape %s: 2-D, or give rows and cols" % (codes.shape,))
        rows, cols = codes.shape[0], codes.shape[1] * (2 if format == "nvfp4" else 1)
    cb, sb, no = _layout("dequantize", o, rows, cols)
    if codes.nbytes != cb or scales.nbytes != sb:
        raise InputError(1, "dequantize: %d x %d %s takes %d code bytes and %d scale bytes, got %d and %d"
                         % (rows, cols, format, cb, sb, codes.nbytes, scales.nbytes))
    if no:
        if outer_scales is None:
            raise InputError(1, "dequantize: nvfp4 needs its outer scales (%d float32)" % no)
        outer_scales = np.ascontiguousarray(outer_scales, dtype=np.float32)
        if outer_scales.size != no:
            raise InputError(1, "dequantize: %d outer scales wanted (outer %s), got %d" % (no, outer or "tensor", outer_scales.size))
    elif outer_scales is not None:
        raise InputError(1, "dequantize: %s has no outer scales" % format)
    y = np.empty((rows, cols), np.float32)
    _lib.check(_lib.lib.fourbit_dequantize(ctypes.byref(o), _ptr(codes, ctypes.c_uint8), _ptr(scales, ctypes.c_uint8),
                                           _ptr(outer_scales, ctypes.c_float) if no else None, rows, cols,
                                           _ptr(y, ctypes.c_float)), "dequantize")
    return y


def _check_shape(fn, o, format, rows, cols):
    for name, v in (("rows", rows), ("cols", cols)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise InputError(1, "%s: %s %r: an integer" % (fn, name, v))
    return _layout(fn, o, int(rows), int(cols))


class Quantizer:
    """The quantizers on device pointers (GPU kernels; the bytes of quantize / dequantize for the same values), on CUDA
    device `device` (its primary context). Each form is compiled with NVRTC at its first use and kept. Pointers are
    ints (CUdeviceptr), stream a CUstream (int; 0: the legacy default stream); buffers have fourbit's layout sizes
    (Quantizer.layout). fourbit.torch.quantize / dequantize call these on tensors."""

    def __init__(self, *, device=0, verbose=False):
        self._h = None
        o = _lib.QuantizerOpts(size=ctypes.sizeof(_lib.QuantizerOpts), device=device, verbose=int(bool(verbose)))
        h = ctypes.c_void_p()
        _lib.check(_lib.lib.fourbit_quantizer_create(ctypes.byref(o), ctypes.byref(h)), "Quantizer")
        self._h, self.device = h, device

    @staticmethod
    def layout(rows, cols, format, *, outer=None, four_over_six=None, rounding=None, seed=None, step=None, rht=None):
        """(code bytes, scale bytes, outer scales) of a rows x cols encoding with these options."""
        o = _opts("layout", format, outer, four_over_six, rounding, seed, step, rht)
        return _check_shape("layout", o, format, rows, cols)

    def quantize(self, x, rows, cols, codes, scales, outer_scales, *, format, dtype="float32", stream=0, outer=None,
                 four_over_six=None, rounding=None, seed=None, step=None, rht=None):
        o = _opts("Quantizer.quantize", format, outer, four_over_six, rounding, seed, step, rht)
        _check_shape("Quantizer.quantize", o, format, rows, cols)
        if dtype not in ("float32", "bfloat16"):
            raise InputError(1, "Quantizer.quantize: dtype %r: float32 or bfloat16" % (dtype,))
        _lib.check(_lib.lib.fourbit_quantize_device(self._h, ctypes.byref(o), 0 if dtype == "float32" else 1, x, rows, cols,
                                                    codes, scales, outer_scales or 0, ctypes.c_void_p(stream or None)),
                   "Quantizer.quantize")

    def dequantize(self, codes, scales, outer_scales, rows, cols, y, *, format, stream=0, outer=None, four_over_six=None,
                   rounding=None, seed=None, step=None, rht=None):
        o = _opts("Quantizer.dequantize", format, outer, four_over_six, rounding, seed, step, rht)
        _check_shape("Quantizer.dequantize", o, format, rows, cols)
        _lib.check(_lib.lib.fourbit_dequantize_device(self._h, ctypes.byref(o), codes, scales, outer_scales or 0, rows, cols,
                                                      y, ctypes.c_void_p(stream or None)), "Quantizer.dequantize")

    def kernels(self):
        """{"arch", "compiled", "compile_ms", "loaded": [variant names]}."""
        return json.loads(_lib.take_string(_lib.lib.fourbit_quantizer_kernels_json, self._h))

    def close(self):
        if self._h:
            _lib.lib.fourbit_quantizer_free(self._h)
            self._h = None

    def __del__(self):
        self.close()


def info():
    """Versions this library links and finds, the GPUs the driver sees, the default cache folder."""
    return json.loads(_lib.take_string(_lib.lib.fourbit_info_json, what="info"))


class Recipe:
    """A loaded, validated recipe (sandboxed Lua), its model's sizes optionally overridden (0 / None: the recipe's)."""

    def __init__(self, path, *, layers=None, d_model=None, d_ff=None, experts=None, top_k=None, vocab=None):
        self.path = str(path)
        self._h = None
        d = _lib.Dims(size=ctypes.sizeof(_lib.Dims), layers=layers or 0, d_model=d_model or 0, d_ff=d_ff or 0,
                      experts=experts or 0, top_k=top_k or 0, vocab=vocab or 0)
        h = ctypes.c_void_p()
        _lib.check(_lib.lib.fourbit_recipe_open(self.path.encode(), ctypes.byref(d), ctypes.byref(h)))
        self._h = h

    def plan(self, arch=None):
        """The plan as `fourbit plan --json` prints it, as a dict."""
        return json.loads(_lib.take_string(_lib.lib.fourbit_recipe_plan_json, self._h, arch.encode() if arch else None))

    def close(self):
        if self._h:
            _lib.lib.fourbit_recipe_close(self._h)
            self._h = None

    def __del__(self):
        self.close()


def plan(recipe, arch=None, **dims):
    """fourbit.plan("recipes/inkling2_small.lua") -> dict: the recipe resolved per layer, its kernels, memory, wire bits."""
    r = Recipe(recipe, **dims)
    try:
        return r.plan(arch)
    finally:
        r.close()


class Cache:
    """The LMDB kernel cache: dir, else $FOURBIT_CACHE, else ~/.cache/fourbit (a local disk)."""

    def __init__(self, dir=None):
        self._h = None
        h = ctypes.c_void_p()
        _lib.check(_lib.lib.fourbit_cache_open(str(dir).encode() if dir else None, ctypes.byref(h)), "cache")
        self._h = h
        self.dir = _lib.lib.fourbit_cache_dir(h).decode()

    def close(self):
        if self._h:
            _lib.lib.fourbit_cache_close(self._h)
            self._h = None

    def __del__(self):
        self.close()


class Saved:
    """What a forward keeps for its backward (device memory of the layer's pool); freed by backward or release()."""

    def __init__(self, layer, h):
        self.layer, self._h = layer, h

    def release(self):
        if self._h:
            _lib.lib.fourbit_saved_free(self._h)
            self._h = None

    def __del__(self):
        self.release()


class Layer:
    """The GPU expert layers of a Recipe on CUDA device `device` (its primary context), every kernel of every layer
    loaded at construction (cache winners, else defaults, else NVRTC). forward (naming the layer, 1-based) / backward
    take device pointers (ints) and a CUstream (int; 0: the legacy default stream): the shapes of
    include/fourbit/libfourbit.h."""

    def __init__(self, recipe, *, device=0, tokens=0, cache=None, verbose=False):
        if not isinstance(recipe, Recipe):
            raise InputError(1, "Layer: recipe is a fourbit.Recipe (got %s)" % type(recipe).__name__)
        self.recipe, self.device, self.cache = recipe, device, cache
        self._h = None
        o = _lib.LayerOpts(size=ctypes.sizeof(_lib.LayerOpts), device=device, tokens=tokens,
                           cache=cache._h if cache is not None else None, verbose=int(bool(verbose)))
        h = ctypes.c_void_p()
        _lib.check(_lib.lib.fourbit_layer_create(recipe._h, ctypes.byref(o), ctypes.byref(h)), "Layer")
        self._h = h

    def kernels(self):
        """Which kernels the layer loaded and from where: {"kernels", "from_cache", "compiled", "loaded": [...]}."""
        return json.loads(_lib.take_string(_lib.lib.fourbit_layer_kernels_json, self._h))

    def forward(self, layer, tokens, x, topk_idx, topk_w, w13, w2, y, *, seed, step, stream=0):
        s = ctypes.c_void_p()
        _lib.check(_lib.lib.fourbit_layer_forward(self._h, layer, tokens, x, topk_idx, topk_w, w13, w2, y, seed, step,
                                                  ctypes.c_void_p(stream or None), ctypes.byref(s)), "Layer.forward")
        return Saved(self, s)

    def backward(self, saved, dy, dx, dw13, dw2, dtopk_w, *, stream=0):
        if not isinstance(saved, Saved) or saved.layer is not self or not saved._h:
            raise InputError(1, "Layer.backward: saved is not a live forward of this layer")
        h, saved._h = saved._h, None  # consumed by the call, even when it fails
        _lib.check(_lib.lib.fourbit_layer_backward(self._h, h, dy, dx, dw13, dw2, dtopk_w, ctypes.c_void_p(stream or None)),
                   "Layer.backward")

    def close(self):
        if self._h:
            _lib.lib.fourbit_layer_free(self._h)
            self._h = None

    def __del__(self):
        self.close()
