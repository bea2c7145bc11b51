"""Environment switches with a fixed set of values (MLX_AMD_CONV, MLX_AMD_GEMM_TUNE, ...): one
parser, so every switch reads, normalises and rejects a value the same way."""

from __future__ import annotations

import os


def choice(name: str, values: tuple, default: str, env=os.environ) -> str:
    """The value of switch ``name`` (stripped, lower-cased; ``default`` when unset or empty),
    or ValueError naming the variable, what it was given and what it takes."""
    v = env.get(name, "").strip().lower() or default
    if v not in values:
        raise ValueError(f"{name}={v!r}: expected one of {', '.join(values)}")
    return v
