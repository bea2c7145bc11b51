"""Family launchers: one module per kernel family (``hip_kernels/<family>.hip``).

Each module has ``FAMILY``, ``PRIMITIVES`` (the MLX primitive classes it may take) and
``plan_node(node, device) -> Plan | None`` (``runtime/plan.py``): pure, cached by the
node's signature, no GPU involved; None sends the node to MLX's CPU fallback.

The evaluator dispatches on the union of the ``PRIMITIVES`` tables of every module in
this package, discovered here, so a new family is a new file and nothing else changes.
Optionally ``SIBLINGS`` / ``PAIRS_AFTER`` / ``TWINS`` / ``CHAINS_AFTER`` /
``TWIN_CHAINS_AFTER`` and ``plan_siblings(nodes, device)``: several nodes as one plan
(``sibling_table``, ``pair_table``, ``twin_table``, ``chain_table``, ``twin_chain_table``;
docs/architecture.md).
A family with ``VERIFIED = False`` (written, compile- and CPU-checked, but not yet run by
the GPU suite) is left out unless ``MLX_AMD_UNVERIFIED=1``: MLX's CPU fallback serves its
primitives meanwhile.
"""

from __future__ import annotations

import importlib
import os
import pkgutil

# MLX's view primitives: the bridge makes them zero-copy when MLX would.
# (Copy is a view too: MLX's CPU Copy shares its input's buffer; Contiguous only when
# its input already is; the bridge returns False where a real copy is needed.)
VIEW_PRIMITIVES = frozenset({
    "Reshape", "Transpose", "Broadcast", "BroadcastAxes", "Slice", "ExpandDims",
    "Squeeze", "AsStrided", "Flatten", "Unflatten", "StopGradient", "Depends", "View",
    "Copy", "Contiguous", "Split", "CustomTransforms",
})

# modules here that are helpers, not families
_HELPERS = frozenset({"elementwise"})


def family_modules() -> list:
    mods = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_") or info.name in _HELPERS:
            continue
        mod = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(mod, "PRIMITIVES") and hasattr(mod, "plan_node"):
            mods.append(mod)
    return mods


def unverified_enabled() -> bool:
    return os.environ.get("MLX_AMD_UNVERIFIED", "0") == "1"


def dispatch_table() -> dict:
    """MLX primitive class name -> family module; two families claiming one class is an error."""
    table: dict = {}
    for mod in family_modules():
        if getattr(mod, "VERIFIED", True) is False and not unverified_enabled():
            continue
        for prim in mod.PRIMITIVES:
            if prim in table:
                raise RuntimeError(f"primitive {prim} is claimed by both {table[prim].__name__} "
                                   f"and {mod.__name__}")
            table[prim] = mod
    return table


def sibling_table(dispatch: dict) -> dict:
    """MLX primitive class name -> family module that can plan several nodes of it on one
    input as one plan (its ``SIBLINGS`` and ``plan_siblings(nodes, device)``), of those
    ``dispatch`` routes to that module."""
    return {prim: mod for prim, mod in dispatch.items()
            if prim in getattr(mod, "SIBLINGS", ()) and hasattr(mod, "plan_siblings")}


def _after_table(dispatch: dict, attr: str, own_first: bool) -> dict:
    """(first primitive, second primitive) -> family module, from each planning module's
    ``attr`` ({first: (second, ...)}) where ``dispatch`` routes both (the first to that very
    module when ``own_first``)."""
    out = {}
    for mod in set(dispatch.values()):
        if not hasattr(mod, "plan_siblings"):
            continue
        for first, seconds in getattr(mod, attr, {}).items():
            for second in seconds:
                if (dispatch.get(first) is mod if own_first else first in dispatch) and second in dispatch:
                    out[(first, second)] = mod
    return out


def pair_table(dispatch: dict) -> dict:
    """(primitive, primitive of a node reading its output) -> the family module that plans
    the two as one (its ``PAIRS_AFTER`` and ``plan_siblings``), where ``dispatch`` routes
    both primitives to GPU families."""
    return _after_table(dispatch, "PAIRS_AFTER", False)


def tail_table(dispatch: dict) -> dict:
    """(primitive of a sibling group, primitive of a node reading the group's outputs) -> the
    family module that plans the group with that node as one (its ``TAILS_AFTER`` and
    ``plan_siblings``, ``tail_ok`` picking the nodes: an MLP's gate and up, then their
    swiglu), where ``dispatch`` routes the group's primitive to it and the node's to a family."""
    return _after_table(dispatch, "TAILS_AFTER", True)


def twin_table(dispatch: dict) -> dict:
    """MLX primitive class name -> family module that can plan two independent nodes of it
    with equal parameters as one plan (its ``TWINS`` and ``plan_siblings``: an attention's
    q and k rotations, its k and v cache writes), of those ``dispatch`` routes to it."""
    return {prim: mod for prim, mod in dispatch.items()
            if prim in getattr(mod, "TWINS", ()) and hasattr(mod, "plan_siblings")}


def twin_chain_table(dispatch: dict) -> dict:
    """(primitive of a twin pair, primitive of a later twin pair whose first reads the
    first pair's second output) -> the family module that plans the four as one (its
    ``TWIN_CHAINS_AFTER`` and ``plan_siblings``: q's and k's RoPE, then the k and v cache
    writes), where both primitives are twins (``twin_table``) and the first is that module's."""
    twins = twin_table(dispatch)
    return {k: mod for k, mod in _after_table(dispatch, "TWIN_CHAINS_AFTER", True).items()
            if k[0] in twins and k[1] in twins}


def chain_table(dispatch: dict, pairs: dict) -> dict:
    """(first, second) of a pair (``pair_table``) -> {primitive: family module} of the nodes
    reading the pair's output as first input that the module plans with the pair as one
    (its ``CHAINS_AFTER`` and ``plan_siblings``: a residual add and RMS norm, then the
    projections of the norm's output), where ``dispatch`` routes them to it."""
    out = {}
    for mod in set(dispatch.values()):
        if not hasattr(mod, "plan_siblings"):
            continue
        for pair, prims in getattr(mod, "CHAINS_AFTER", {}).items():
            if pair in pairs:
                for prim in prims:
                    if dispatch.get(prim) is mod:
                        out.setdefault(pair, {})[prim] = mod
    return out
