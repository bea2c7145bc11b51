"""mx.fast.* (and mx.dequantize) while mlx-amd is enabled: the same functions, building one
node of our own primitive each (``mlx_amd::RMSNorm``, ``LayerNorm``, ``RoPE``, ``SDPA``,
``Dequantize``; see ``src/bridge/fast.h``) instead of MLX's decomposition, so the GPU sees
the fused op.
MLX's CPU fallback of those nodes computes MLX's own decomposition.

Calls we do not route (an explicit ``stream=``, ``force_fused=True``, arguments the
bridge does not take, such as numpy arrays, wrong arguments) go to MLX's own function with
the caller's arguments unchanged, so its results and errors are MLX's; so do calls while a
function is exported (``mx.export_function``/``mx.exporter``).
"""

from __future__ import annotations

import contextlib

import mlx.core as mx

NAMES = ("rms_norm", "layer_norm", "rope", "scaled_dot_product_attention")
# mx.<name> routed the same way: mx.dequantize of the affine mode (``mlx_amd::Dequantize``;
# the CPU wheel builds ~20 shift/mask nodes for it, a quantized embedding's row each step)
TOP_NAMES = ("dequantize",)
_original: dict = {}


_bridge = None


def _b():
    # imported on first use (not at import time: mlx_amd must import without the bridge),
    # then kept: these run once per mx.fast call
    global _bridge
    if _bridge is None:
        from . import _bridge as b

        _bridge = b
    return _bridge


# Each public function takes the caller's arguments as given and tries our primitive; any
# TypeError on the way (wrong arguments, an explicit stream=, numpy inputs the bridge does not
# take) hands the very same arguments to MLX's own function, so what MLX accepts, computes or
# raises (type and message) is unchanged. While a function is being exported, MLX's own
# functions run: an exported file must load in plain MLX, which cannot evaluate our nodes.
_exporting = [0]


def _routed(name, ours):
    """mx.fast.<name> while enabled: ``ours`` (its signature is MLX's), else MLX's own."""
    def fn(*args, **kwargs):
        if not _exporting[0]:
            try:
                return ours(*args, **kwargs)
            except TypeError:
                pass
        return original(name)(*args, **kwargs)

    fn.__name__ = fn.__qualname__ = name
    return fn


def _mlx_stream(stream):
    if stream is not None:
        raise TypeError("an explicit stream: MLX's own function")


def _rms_norm(x, weight, eps, *, stream=None):
    _mlx_stream(stream)
    return _b().fast_rms_norm(x, weight, eps)


def _layer_norm(x, weight, bias, eps, *, stream=None):
    _mlx_stream(stream)
    return _b().fast_layer_norm(x, weight, bias, eps)


def _rope(a, dims, *, traditional, base, scale, offset, freqs=None, stream=None):
    _mlx_stream(stream)
    return _b().fast_rope(a, dims, traditional, base, scale, offset, freqs)


def _sdpa(q, k, v, *, scale, mask=None, sinks=None, force_fused=False, stream=None):
    _mlx_stream(stream)
    # a mask string other than "causal": MLX's own function raises its own error
    if force_fused or (isinstance(mask, str) and mask != "causal"):
        raise TypeError("not ours: MLX's own function")
    if mask is None or isinstance(mask, str):
        mode, arr = (mask or ""), None
    else:
        mode, arr = "array", mask
    return _b().fast_sdpa(q, k, v, scale, mode, arr, sinks)


def _dequantize(w, scales, biases=None, group_size=None, bits=None, mode="affine", global_scale=None,
                dtype=None, *, stream=None):
    _mlx_stream(stream)
    # (another output dtype than the scales': the quantized family's kernel has none, and
    # MLX's decomposition then runs on the GPU op by op rather than on the CPU)
    if mode != "affine" or biases is None or global_scale is not None or \
            (dtype is not None and dtype != getattr(scales, "dtype", None)):
        raise TypeError("not ours: MLX's own function")
    # MLX's affine defaults: groups of 64, 4 bits
    return _b().dequantize(w, scales, biases, 64 if group_size is None else group_size,
                           4 if bits is None else bits, dtype)


rms_norm = _routed("rms_norm", _rms_norm)
layer_norm = _routed("layer_norm", _layer_norm)
rope = _routed("rope", _rope)
scaled_dot_product_attention = _routed("scaled_dot_product_attention", _sdpa)
dequantize = _routed("dequantize", _dequantize)


@contextlib.contextmanager
def exporting():
    """MLX's own mx.fast functions inside (api's export_function/exporter)."""
    _exporting[0] += 1
    try:
        yield
    finally:
        _exporting[0] -= 1


_OURS = {"rms_norm": rms_norm, "layer_norm": layer_norm, "rope": rope,
         "scaled_dot_product_attention": scaled_dot_product_attention, "dequantize": dequantize}


def _home(name: str):
    return mx if name in TOP_NAMES else mx.fast


def install() -> None:
    """Route mx.fast.* and mx.dequantize to ours (idempotent)."""
    if _original:
        return
    for name in NAMES + TOP_NAMES:
        orig = getattr(_home(name), name)
        ours = _OURS[name]
        ours.__doc__ = orig.__doc__
        _original[name] = orig
        setattr(_home(name), name, ours)


def uninstall() -> None:
    """mx.fast.* and mx.dequantize are MLX's own again (idempotent)."""
    for name, orig in list(_original.items()):
        setattr(_home(name), name, orig)
    _original.clear()


def original(name: str):
    """MLX's own function (whether or not ours are installed)."""
    return _original.get(name) or getattr(_home(name), name)
