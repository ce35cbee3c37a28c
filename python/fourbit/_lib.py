"""_lib.py — ctypes over build/libfourbit.so (include/fourbit/libfourbit.h): finding the library, the prototypes, and
turning a failing status into an exception carrying the library's message. No compile step: the ABI is plain C.

The library is found at, in this order: $FOURBIT_LIB; libfourbit.so beside this package (a copied install); the
checkout's build/libfourbit.so, walking up from this file (an editable install, or PYTHONPATH=python)."""

import ctypes
import os

ABI_VERSION = 1  # FOURBIT_ABI_VERSION of the header these prototypes follow

STATUS = ["OK", "EINVAL", "ENOMEM", "ECUDA", "ENVRTC", "ELMDB", "ENCCL", "ELUA", "ENOTFOUND", "EVARIANT", "ENUMERIC", "EIO"]


class Error(RuntimeError):
    """A failing libfourbit call: .status (the fb_status name) and the library's message (file:line, field)."""

    def __init__(self, status, message):
        self.status = STATUS[status] if 0 <= status < len(STATUS) else str(status)
        super().__init__(message)


class InputError(Error, ValueError):
    """Bad input (FOURBIT_EINVAL, or a bad argument refused before the call): also a ValueError."""


def _candidates():
    env = os.environ.get("FOURBIT_LIB")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    out = [os.path.join(here, "libfourbit.so")]
    d = here
    for _ in range(4):
        d = os.path.dirname(d)
        out.append(os.path.join(d, "build", "libfourbit.so"))
    return out


def _load():
    tried = []
    for path in _candidates():
        if os.path.exists(path):
            try:
                return ctypes.CDLL(path), path
            except OSError as e:
                tried.append("%s (%s)" % (path, e))
        else:
            tried.append(path + " (absent)")
    raise ImportError("fourbit: libfourbit.so not found: build it (make build/libfourbit.so in the checkout) or set "
                      "FOURBIT_LIB; tried: " + "; ".join(tried))


lib, path = _load()

c_size_p = ctypes.POINTER(ctypes.c_size_t)
u8p = ctypes.POINTER(ctypes.c_uint8)
f32p = ctypes.POINTER(ctypes.c_float)


class QuantOpts(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("format", ctypes.c_int), ("outer_row", ctypes.c_int),
                ("four_over_six", ctypes.c_int), ("sr", ctypes.c_int), ("rht", ctypes.c_int),
                ("seed", ctypes.c_uint32), ("step", ctypes.c_uint32)]


class Dims(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("layers", ctypes.c_int), ("d_model", ctypes.c_int), ("d_ff", ctypes.c_int),
                ("experts", ctypes.c_int), ("top_k", ctypes.c_int), ("vocab", ctypes.c_int)]


class LayerOpts(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("device", ctypes.c_int), ("tokens", ctypes.c_int), ("cache", ctypes.c_void_p),
                ("verbose", ctypes.c_int)]


class QuantizerOpts(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("device", ctypes.c_int), ("verbose", ctypes.c_int)]


def _proto(name, res, *args):
    f = getattr(lib, name)
    f.restype = res
    f.argtypes = list(args)
    return f


V, I, U32, U64, SZ, P, CP = (None, ctypes.c_int, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p,
                             ctypes.c_char_p)
PP = ctypes.POINTER(ctypes.c_void_p)
CPP = ctypes.POINTER(ctypes.c_void_p)  # char ** answers, freed with fourbit_free
_proto("fourbit_abi_version", I)
_proto("fourbit_version", CP)
_proto("fourbit_errmsg", CP)
_proto("fourbit_status_name", CP, I)
_proto("fourbit_free", V, P)
_proto("fourbit_info_json", I, CPP)
_proto("fourbit_recipe_open", I, CP, ctypes.POINTER(Dims), PP)
_proto("fourbit_recipe_close", V, P)
_proto("fourbit_recipe_plan_json", I, P, CP, CPP)
_proto("fourbit_cache_open", I, CP, PP)
_proto("fourbit_cache_dir", CP, P)
_proto("fourbit_cache_close", V, P)
_proto("fourbit_quant_layout", I, ctypes.POINTER(QuantOpts), SZ, SZ, c_size_p, c_size_p, c_size_p)
_proto("fourbit_quantize", I, ctypes.POINTER(QuantOpts), f32p, SZ, SZ, u8p, u8p, f32p)
_proto("fourbit_dequantize", I, ctypes.POINTER(QuantOpts), u8p, u8p, f32p, SZ, SZ, f32p)
_proto("fourbit_quantizer_create", I, ctypes.POINTER(QuantizerOpts), PP)
_proto("fourbit_quantizer_free", V, P)
_proto("fourbit_quantizer_kernels_json", I, P, CPP)
_proto("fourbit_quantize_device", I, P, ctypes.POINTER(QuantOpts), I, U64, SZ, SZ, U64, U64, U64, P)
_proto("fourbit_dequantize_device", I, P, ctypes.POINTER(QuantOpts), U64, U64, U64, SZ, SZ, U64, P)
_proto("fourbit_layer_create", I, P, ctypes.POINTER(LayerOpts), PP)
_proto("fourbit_layer_kernels_json", I, P, CPP)
_proto("fourbit_layer_free", V, P)
_proto("fourbit_layer_forward", I, P, I, I, U64, U64, U64, U64, U64, U64, U32, U32, P, PP)
_proto("fourbit_layer_backward", I, P, P, U64, U64, U64, U64, U64, P)
_proto("fourbit_saved_free", V, P)

if lib.fourbit_abi_version() != ABI_VERSION:
    raise ImportError("fourbit: %s has ABI %d, this package speaks %d: rebuild the library or reinstall the package"
                      % (path, lib.fourbit_abi_version(), ABI_VERSION))


def check(status, what=None):
    """Raise the library's error for a failing status."""
    if status == 0:
        return
    msg = lib.fourbit_errmsg().decode("utf-8", "replace")
    if what:
        msg = "%s: %s" % (what, msg)
    raise (InputError if status == 1 else Error)(status, msg)


def take_string(fn, *args, what=None):
    """Call fn(*args, &out) and return the malloc'd answer as str (freed)."""
    out = ctypes.c_void_p()
    check(fn(*args, ctypes.byref(out)), what)
    try:
        return ctypes.string_at(out.value).decode("utf-8")
    finally:
        lib.fourbit_free(out)
