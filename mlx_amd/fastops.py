"""mx.fast.* while mlx-amd is enabled: the same functions, building one node of our own
primitive each (``mlx_amd::RMSNorm``, ``LayerNorm``, ``RoPE``, ``SDPA``; see
``src/bridge/fast.h``) instead of MLX's decomposition, so the GPU sees the fused op.
MLX's CPU fallback of those nodes computes MLX's own decomposition.

Calls we do not route (an explicit ``stream=``, ``force_fused=True``, arguments the
bridge does not take, such as numpy arrays) go to MLX's own function unchanged.
"""

from __future__ import annotations

import mlx.core as mx

NAMES = ("rms_norm", "layer_norm", "rope", "scaled_dot_product_attention")
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


def rms_norm(x, weight, eps, *, stream=None):
    if stream is None:
        try:
            return _b().fast_rms_norm(x, weight, eps)
        except TypeError:
            pass
    return original("rms_norm")(x, weight, eps, stream=stream)


def layer_norm(x, weight, bias, eps, *, stream=None):
    if stream is None:
        try:
            return _b().fast_layer_norm(x, weight, bias, eps)
        except TypeError:
            pass
    return original("layer_norm")(x, weight, bias, eps, stream=stream)


def rope(a, dims, *, traditional, base, scale, offset, freqs=None, stream=None):
    if stream is None:
        try:
            return _b().fast_rope(a, dims, traditional, base, scale, offset, freqs)
        except TypeError:
            pass
    return original("rope")(a, dims, traditional=traditional, base=base, scale=scale,
                             offset=offset, freqs=freqs, stream=stream)


def scaled_dot_product_attention(q, k, v, *, scale, mask=None, sinks=None, force_fused=False,
                                 stream=None):
    # a mask string other than "causal": MLX's own function raises its own error
    if stream is None and not force_fused and (not isinstance(mask, str) or mask == "causal"):
        if mask is None or isinstance(mask, str):
            mode, arr = (mask or ""), None
        else:
            mode, arr = "array", mask
        try:
            return _b().fast_sdpa(q, k, v, scale, mode, arr, sinks)
        except TypeError:
            pass
    return original("scaled_dot_product_attention")(q, k, v, scale=scale, mask=mask, sinks=sinks,
                                                     force_fused=force_fused, stream=stream)


_OURS = {"rms_norm": rms_norm, "layer_norm": layer_norm, "rope": rope,
         "scaled_dot_product_attention": scaled_dot_product_attention}


def install() -> None:
    """Route mx.fast.* to ours (idempotent)."""
    if _original:
        return
    for name in NAMES:
        orig = getattr(mx.fast, name)
        ours = _OURS[name]
        ours.__doc__ = orig.__doc__
        _original[name] = orig
        setattr(mx.fast, name, ours)


def uninstall() -> None:
    """mx.fast.* are MLX's own again (idempotent)."""
    for name, orig in list(_original.items()):
        setattr(mx.fast, name, orig)
    _original.clear()


def original(name: str):
    """MLX's own mx.fast function (whether or not ours are installed)."""
    return _original.get(name) or getattr(mx.fast, name)
