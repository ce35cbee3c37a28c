"""fourbit.torch — fourbit's GPU expert layer (runtime/experts_gpu.c through libfourbit.so) as a PyTorch nn.Module.

    experts = MoEExperts("recipes/inkling2_small.lua", layer=1, experts=8, d_model=512, d_ff=256, cache=None)
    y = experts(x, topk_idx, topk_w)     # x: (T, d_model) BF16 CUDA; topk_idx: (T, k) int32 (int64 is converted);
                                         # topk_w: (T, k) FP32 router weights. y: (T, d_model) BF16.
    y.backward(dy)                       # x.grad, experts.w13.grad, experts.w2.grad, topk_w.grad
    q = quantize(t, "nvfp4", outer="row", four_over_six=True)   # t: (R, C) float32 / bfloat16 CUDA -> Quantized of
    t2 = dequantize(q, format="nvfp4", outer="row", four_over_six=True)   # CUDA tensors; fourbit.quantize's bytes

The forward and backward are fourbit's (the recipe's numerics for that layer: NVFP4 4/6 forward, MXFP8 SR backward,
S2F6 + RHT combine for Inkling), bit for bit what build/gpu/bench_layer computes for the same inputs: dy is taken as
FP32 (a BF16 gradient converts exactly), and dx comes out of the layer in FP32 and is handed to autograd in x's dtype
(BF16; MoEExperts.last_dx keeps the FP32 one when keep_fp32_dx is set). The parameters are the FP32 masters
w13 (experts, 2 d_ff, d_model: gate rows, then up rows) and w2 (experts, d_model, d_ff).

Work is queued on the caller's current CUDA stream (torch.cuda.current_stream), in PyTorch's context (the device's
primary one, retained by the library). The forward synchronizes with the host once (rows per expert), and once more
to check the expert indices unless check_indices=False. The layer's own scratch and saved tensors come from the
library's device pool (cuMemAlloc), not PyTorch's caching allocator: torch.cuda.memory_allocated does not count them.
The SR and RHT random streams are keyed by (seed, step): step advances by one on each forward in training mode, so two
runs from the same state are identical.

torch.compile: MoEExperts.forward is excluded from compilation (torch.compiler.disable): a compiled model graph-breaks
around it and the layer runs as it does eagerly (it calls a C library through ctypes, which Dynamo cannot trace). No
other support is claimed; this was not run under torch.compile."""

import os
import weakref

import torch

from . import Cache, InputError, Layer, Quantized, Quantizer, Recipe

# One fourbit.Layer (the kernels of every layer of a recipe, loaded once) per (recipe, sizes, device, cache, tokens),
# shared by the MoEExperts of a model's layers; dropped with the last module using it.
_shared = weakref.WeakValueDictionary()

_disable = getattr(getattr(torch, "compiler", None), "disable", None) or (lambda f: f)


def _need(ok, msg):
    if not ok:
        raise InputError(1, "MoEExperts: " + msg)


class _ExpertsFn(torch.autograd.Function):
    """y = experts(x); backward: dx, dtopk_w, dW13, dW2 from fourbit's GPU layer."""

    @staticmethod
    def forward(ctx, x, topk_idx, topk_w, w13, w2, mod):
        y, saved = mod._forward(x, topk_idx, topk_w, w13, w2)
        ctx.fb_saved, ctx.mod = saved, mod
        ctx.shapes = (x.shape, x.dtype, topk_w.shape, w13.shape, w2.shape)
        return y

    @staticmethod
    def backward(ctx, dy):
        mod, saved = ctx.mod, ctx.fb_saved
        ctx.fb_saved = None
        xs, xdt, ws, s13, s2 = ctx.shapes
        dev = dy.device
        dy32 = dy.to(torch.float32).contiguous()
        f32 = dict(dtype=torch.float32, device=dev)
        dx = torch.empty(xs, **f32)
        dw13 = torch.empty(s13, **f32)
        dw2 = torch.empty(s2, **f32)
        dtw = torch.empty(ws, **f32)
        stream = torch.cuda.current_stream(dev).cuda_stream
        mod._layer.backward(saved, dy32.data_ptr(), dx.data_ptr(), dw13.data_ptr(), dw2.data_ptr(), dtw.data_ptr(), stream=stream)
        if mod.keep_fp32_dx:
            mod.last_dx = dx
        return dx.to(xdt), None, dtw, dw13, dw2, None


class MoEExperts(torch.nn.Module):
    """The expert layer `layer` (1-based) of a fourbit recipe, with the model's sizes given here (layers: the model's
    layer count, so that the recipe's layer rules, e.g. Inkling's MXFP8 last sixth, resolve for it). The modules of one
    model share one loaded set of kernels. cache: a folder, a fourbit.Cache, None ($FOURBIT_CACHE, else
    ~/.cache/fourbit, when it exists; else every kernel's default compiled with NVRTC), or False (no cache)."""

    def __init__(self, recipe, layer, experts, d_model, d_ff, *, top_k=None, layers=None, cache=None, seed=1234, step=1,
                 tokens=0, check_indices=True, keep_fp32_dx=False, verbose=False, device=None):
        super().__init__()
        self.recipe_path, self.layer_index = str(recipe), int(layer)
        self.experts, self.d_model, self.d_ff = int(experts), int(d_model), int(d_ff)
        _need(self.d_model % 128 == 0 and self.d_ff % 128 == 0,
              "d_model %d and d_ff %d: the GPU expert GEMMs take multiples of 128" % (self.d_model, self.d_ff))
        self._dims = (self.experts, self.d_model, self.d_ff, top_k or 0, layers or 0)
        self._recipe = Recipe(recipe, experts=self.experts, d_model=self.d_model, d_ff=self.d_ff, top_k=top_k,
                              layers=layers)
        self.top_k = self._recipe.plan()["model"]["top_k"]
        nl = self._recipe.plan()["model"]["layers"]
        _need(1 <= self.layer_index <= nl, "layer %d: the recipe's model has layers 1..%d" % (self.layer_index, nl))
        self._cache_arg, self._tokens, self._verbose = cache, int(tokens), verbose
        self.seed, self.step = int(seed), int(step)
        self.check_indices, self.keep_fp32_dx, self.last_dx = check_indices, keep_fp32_dx, None
        self.w13 = torch.nn.Parameter(torch.randn(self.experts, 2 * self.d_ff, self.d_model, device=device) / self.d_model ** 0.5)
        self.w2 = torch.nn.Parameter(torch.randn(self.experts, self.d_model, self.d_ff, device=device) / self.d_ff ** 0.5)
        self._layer, self._cache = None, None

    def extra_repr(self):
        return "%s layer %d: experts=%d, top_k=%d, d_model=%d, d_ff=%d" % (self.recipe_path, self.layer_index, self.experts,
                                                                           self.top_k, self.d_model, self.d_ff)

    def prepare(self, device=None):
        """Load the layer's kernels on device (default: the masters' device) now, instead of at the first forward."""
        dev = torch.device(device) if device is not None else self.w13.device
        _need(dev.type == "cuda", "the layer runs on a CUDA device (the masters are on %s)" % dev)
        idx = dev.index if dev.index is not None else torch.cuda.current_device()
        if self._layer is not None and self._layer.device == idx:
            return self._layer
        if self._cache is None and self._cache_arg is not False:
            if isinstance(self._cache_arg, Cache):
                self._cache = self._cache_arg
            elif self._cache_arg is not None:
                self._cache = Cache(self._cache_arg)
            else:
                d = os.environ.get("FOURBIT_CACHE") or os.path.expanduser("~/.cache/fourbit")
                self._cache = Cache(d) if os.path.isdir(d) else None
        key = (os.path.abspath(self.recipe_path), self._dims, idx, self._cache.dir if self._cache else None, self._tokens)
        layer = _shared.get(key)
        if layer is None:
            torch.cuda.init()  # PyTorch's primary context exists before the library retains it
            with torch.cuda.device(idx):
                layer = Layer(self._recipe, device=idx, tokens=self._tokens, cache=self._cache, verbose=self._verbose)
            _shared[key] = layer
        self._layer = layer
        return layer

    def kernels(self):
        """Which kernels the layer loaded, and from where (cache winner, default, NVRTC)."""
        return self.prepare().kernels()

    def _check(self, x, topk_idx, topk_w):
        _need(isinstance(x, torch.Tensor) and isinstance(topk_idx, torch.Tensor) and isinstance(topk_w, torch.Tensor),
              "x, topk_idx and topk_w are tensors")
        dev = self.w13.device
        for name, t in (("x", x), ("topk_idx", topk_idx), ("topk_w", topk_w), ("w2", self.w2)):
            _need(t.device == dev, "%s is on %s, the masters (w13) on %s" % (name, t.device, dev))
        _need(dev.type == "cuda", "the layer runs on a CUDA device: move the module and its inputs there (now %s)" % dev)
        _need(x.dtype == torch.bfloat16, "x is %s: BF16 tokens wanted" % x.dtype)
        _need(x.dim() == 2 and x.shape[1] == self.d_model and x.shape[0] >= 1,
              "x has shape %s: (tokens, d_model = %d) wanted" % (tuple(x.shape), self.d_model))
        T = x.shape[0]
        _need(topk_idx.dtype in (torch.int32, torch.int64), "topk_idx is %s: int32 (or int64) wanted" % topk_idx.dtype)
        _need(tuple(topk_idx.shape) == (T, self.top_k),
              "topk_idx has shape %s: (tokens = %d, top_k = %d) wanted" % (tuple(topk_idx.shape), T, self.top_k))
        _need(topk_w.dtype == torch.float32, "topk_w is %s: FP32 router weights wanted (.float() them)" % topk_w.dtype)
        _need(tuple(topk_w.shape) == (T, self.top_k),
              "topk_w has shape %s: (tokens = %d, top_k = %d) wanted" % (tuple(topk_w.shape), T, self.top_k))
        for name, t in (("x", x), ("topk_idx", topk_idx), ("topk_w", topk_w), ("w13", self.w13), ("w2", self.w2)):
            _need(t.is_contiguous(), "%s is not contiguous (.contiguous() it)" % name)
        for name, t, shape in (("w13", self.w13, (self.experts, 2 * self.d_ff, self.d_model)),
                               ("w2", self.w2, (self.experts, self.d_model, self.d_ff))):
            _need(t.dtype == torch.float32 and tuple(t.shape) == shape,
                  "%s is %s %s: FP32 %s wanted" % (name, t.dtype, tuple(t.shape), shape))

    def _forward(self, x, topk_idx, topk_w, w13, w2):
        layer = self.prepare(x.device)
        if topk_idx.dtype != torch.int32:
            topk_idx = topk_idx.to(torch.int32)
        if self.check_indices:
            lo, hi = torch.aminmax(topk_idx)
            lo, hi = int(lo), int(hi)
            _need(0 <= lo and hi < self.experts, "topk_idx holds %d..%d: expert indices are in [0, %d)" % (lo, hi, self.experts))
        y = torch.empty_like(x)
        step = self.step
        if self.training:
            self.step += 1
        stream = torch.cuda.current_stream(x.device).cuda_stream
        saved = layer.forward(self.layer_index, x.shape[0], x.data_ptr(), topk_idx.data_ptr(), topk_w.data_ptr(), w13.data_ptr(),
                              w2.data_ptr(), y.data_ptr(), seed=self.seed, step=step, stream=stream)
        return y, saved

    @_disable
    def forward(self, x, topk_idx, topk_w):
        self._check(x, topk_idx, topk_w)
        grads = torch.is_grad_enabled() and any(t.requires_grad for t in (x, topk_w, self.w13, self.w2))
        if grads:
            return _ExpertsFn.apply(x, topk_idx, topk_w, self.w13, self.w2, self)
        with torch.no_grad():
            y, saved = self._forward(x, topk_idx, topk_w, self.w13, self.w2)
        saved.release()  # no backward will come: the pool gets its memory back now
        return y


# ---- the quantizers on CUDA tensors ----------------------------------------------------------------------------------
_quantizers = {}  # one fourbit.Quantizer per device index, kept for the process (its kernels compile once)


def _quantizer(dev):
    q = _quantizers.get(dev.index)
    if q is None:
        q = _quantizers[dev.index] = Quantizer(device=dev.index)
    return q


def _qneed(ok, fn, msg):
    if not ok:
        raise InputError(1, "fourbit.torch.%s: %s" % (fn, msg))


def quantize(x, format, *, outer=None, four_over_six=None, rounding=None, seed=None, step=None, rht=None):
    """fourbit.quantize on a CUDA tensor, on the GPU: x (rows, cols) float32 or bfloat16, contiguous. Returns
    Quantized(codes, scales, outer) as CUDA tensors (codes uint8, int8 for s2f6; scales uint8; outer float32 or None),
    the same bytes fourbit.quantize gives for x's values, queued on the current stream."""
    _qneed(isinstance(x, torch.Tensor) and x.is_cuda, "quantize", "x is a CUDA tensor")
    _qneed(x.dtype in (torch.float32, torch.bfloat16), "quantize", "x is %s: float32 or bfloat16" % x.dtype)
    _qneed(x.dim() == 2 and x.is_contiguous(), "quantize", "x has shape %s: a contiguous (rows, cols) tensor" % (tuple(x.shape),))
    rows, cols = x.shape
    kw = dict(outer=outer, four_over_six=four_over_six, rounding=rounding, seed=seed, step=step, rht=rht)
    cb, sb, no = Quantizer.layout(rows, cols, format, **kw)
    codes = torch.empty((rows, cb // rows), dtype=torch.uint8, device=x.device)
    scales = torch.empty((rows, sb // rows), dtype=torch.uint8, device=x.device)
    outer_t = torch.empty(no, dtype=torch.float32, device=x.device) if no else None
    _quantizer(x.device).quantize(x.data_ptr(), rows, cols, codes.data_ptr(), scales.data_ptr(),
                                  outer_t.data_ptr() if no else 0, format=format,
                                  dtype="float32" if x.dtype == torch.float32 else "bfloat16",
                                  stream=torch.cuda.current_stream(x.device).cuda_stream, **kw)
    return Quantized(codes.view(torch.int8) if format == "s2f6" else codes, scales, outer_t)


def dequantize(codes, scales=None, outer_scales=None, *, format, outer=None, four_over_six=None, rounding=None, seed=None,
               step=None, rht=None):
    """fourbit.dequantize on CUDA tensors, on the GPU: a Quantized of fourbit.torch.quantize (or codes, scales, outer
    scales, each contiguous on one device) -> float32 (rows, cols), queued on the current stream: fourbit.dequantize's
    values bit for bit, except that a NaN may carry the GPU's canonical payload."""
    if isinstance(codes, Quantized):
        _qneed(scales is None and outer_scales is None, "dequantize", "a Quantized carries its scales: pass neither")
        codes, scales, outer_scales = codes
    _qneed(isinstance(codes, torch.Tensor) and isinstance(scales, torch.Tensor) and codes.is_cuda, "dequantize",
           "codes and scales are CUDA tensors")
    _qneed(codes.dtype in (torch.uint8, torch.int8) and scales.dtype == torch.uint8, "dequantize",
           "codes (%s) and scales (%s) are uint8 (s2f6 codes: int8 too)" % (codes.dtype, scales.dtype))
    ts = [codes, scales] + ([outer_scales] if outer_scales is not None else [])
    _qneed(all(t.device == codes.device and t.is_contiguous() for t in ts), "dequantize", "every tensor contiguous on one device")
    _qneed(codes.dim() == 2, "dequantize", "codes have shape %s: (rows, code columns)" % (tuple(codes.shape),))
    rows, cols = codes.shape[0], codes.shape[1] * (2 if format == "nvfp4" else 1)
    kw = dict(outer=outer, four_over_six=four_over_six, rounding=rounding, seed=seed, step=step, rht=rht)
    cb, sb, no = Quantizer.layout(rows, cols, format, **kw)
    _qneed(codes.numel() == cb and scales.numel() == sb, "dequantize", "%d x %d %s takes %d code bytes and %d scale bytes, got "
           "%d and %d" % (rows, cols, format, cb, sb, codes.numel(), scales.numel()))
    if no:
        _qneed(outer_scales is not None and outer_scales.dtype == torch.float32 and outer_scales.numel() == no, "dequantize",
               "nvfp4 needs its %d float32 outer scales (outer %s)" % (no, outer or "tensor"))
    else:
        _qneed(outer_scales is None, "dequantize", "%s has no outer scales" % format)
    y = torch.empty((rows, cols), dtype=torch.float32, device=codes.device)
    _quantizer(codes.device).dequantize(codes.data_ptr(), scales.data_ptr(), outer_scales.data_ptr() if no else 0, rows, cols,
                                        y.data_ptr(), format=format, stream=torch.cuda.current_stream(codes.device).cuda_stream,
                                        **kw)
    return y
