"""Indexing kernels against the memory roofline, measured in one run.

    python benchmarks/indexing_bandwidth.py [--out DIR]

Each case is planned by the indexing launcher (runtime/ops/indexing.py) and its kernel
launched directly on device buffers, timed with device events (Bench.time_device, median
of 20 after warm-up): the bandwidth is the kernel's, not the engine's per-node host work.
Bytes counted are those that must move: index arrays read once, the rows/elements a
gather reads, the output written once (a scatter or slice update in place: the updates
read and the touched output read-modified-written). References measured in the same run:
the device copy roofline and, where PyTorch is installed, the same op in PyTorch.
Writes indexing_bandwidth-h200.json.
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import Bench  # noqa: E402

from mlx_amd.runtime.launch import run  # noqa: E402
from mlx_amd.runtime.ops import indexing as ix  # noqa: E402
from mlx_amd.runtime.plan import ITEMSIZE, Layout, Node  # noqa: E402

R = Layout.row_major


def _resolve(ref, ins, outs):
    base = ins[ref.index] if ref.kind == "i" else outs[ref.index]
    return base + ref.offset


def device_case(b, node, host_inputs, out_nbytes):
    """Upload inputs, allocate the output (donated: the first input's buffer), return
    (run-the-plan's-steps callable, cleanup)."""
    drv = b.drv
    ins = []
    for arr in host_inputs:
        p = drv.malloc(max(arr.nbytes, 1))
        drv.memcpy_htod(p, arr.ctypes.data, arr.nbytes)
        ins.append(p)
    drv.synchronize()
    plan = ix.plan_node(node, b.props)
    assert plan is not None, node.prim
    donated = bool(plan.donate)
    outs = [ins[0]] if donated else [drv.malloc(out_nbytes)]
    mods = b.rt.modules

    def go():
        for st in plan.steps:
            run(st, mods, drv, tuple(_resolve(r, ins, outs) for r in st.refs))

    def free():
        for p in ins + ([] if donated else outs):
            drv.free(p)
    return go, free


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = ap.parse_args()
    b = Bench("indexing_bandwidth")
    rng = np.random.default_rng(0)
    try:
        import torch
        cuda = torch.cuda.is_available()
    except Exception:
        torch, cuda = None, False

    def bench(name, node, host_inputs, nbytes, torch_fn=None):
        go, free = device_case(b, node, host_inputs, node.out.nbytes)
        try:
            ms = b.time_device(go)
        finally:
            free()
        ref = b.time_torch(torch_fn) if torch_fn is not None else None
        b.row(name, nbytes / ms / 1e6, "GB/s", "copy roofline", b.roofline_gbps)
        if ref:
            b.row(name + " vs torch", nbytes / ms / 1e6, "GB/s", "torch", nbytes / ref / 1e6)

    # embedding lookup: 4096 token rows of a bf16 (128256, 2048) table
    V, D, T = 128256, 2048, 4096
    table = np.zeros((V, D), np.uint16)
    tok = rng.integers(0, V, size=T).astype(np.int32)
    node = Node("Gather", ((0,), (1, D)), (R((V, D), "bfloat16"), R((T,), "int32")), (R((T, 1, D), "bfloat16"),))
    tf = None
    if cuda:
        tt, ti = torch.zeros((V, D), dtype=torch.bfloat16, device="cuda"), torch.from_numpy(tok).long().cuda()
        tf = lambda: tt.index_select(0, ti)  # noqa: E731
    bench("gather bf16 rows 128256x2048 take 4096", node, [table, tok], 2 * T * D * 2 + T * 4, tf)
    del table

    # take_along_axis along rows of a (4096, 4096) f32
    N = 4096
    src = rng.standard_normal((N, N)).astype(np.float32)
    idx = rng.integers(0, N, size=(N, N)).astype(np.int32)
    node = Node("GatherAxis", (1,), (R((N, N), "float32"), R((N, N), "int32")), (R((N, N), "float32"),))
    tf = None
    if cuda:
        ts, tix = torch.from_numpy(src).cuda(), torch.from_numpy(idx).long().cuda()
        tf = lambda: torch.take_along_dim(ts, tix, dim=1)  # noqa: E731
    bench("take_along_axis f32 4096x4096", node, [src, idx], 3 * N * N * 4, tf)
    del src, idx

    # scatter-add of 2^24 scalar updates into a 2^24 f32 array (random targets)
    M = 1 << 24
    dst = np.zeros(M, np.float32)
    sidx = rng.integers(0, M, size=M).astype(np.int32)
    upd = np.ones((M, 1), np.float32)
    node = Node("Scatter", (2, (0,)), (R((M,), "float32"), R((M,), "int32"), R((M, 1), "float32")),
                (R((M,), "float32"),))
    tf = None
    if cuda:
        td, tsi, tu = torch.zeros(M, device="cuda"), torch.from_numpy(sidx).long().cuda(), torch.ones(M, device="cuda")
        tf = lambda: td.index_add_(0, tsi, tu)  # noqa: E731
    # updates + indices read, each target read-modified-written
    bench("scatter_add f32 2^24 updates", node, [dst, sidx, upd], M * (4 + 4 + 8), tf)
    del dst, sidx, upd

    # one decode step of a (32, 8, 4096, 128) bf16 KV cache, in place
    B, H, S, Dh = 32, 8, 4096, 128
    t = 1234
    cache = np.zeros((B, H, S, Dh), np.uint16)
    step = np.ones((B, H, 1, Dh), np.uint16)
    node = Node("SliceUpdate", (4, (0, 0, t, 0), (B, H, t + 1, Dh), (1, 1, 1, 1)),
                (R(cache.shape, "bfloat16"), R(step.shape, "bfloat16")), (R(cache.shape, "bfloat16"),))
    tf = None
    if cuda:
        tc = torch.zeros((B, H, S, Dh), dtype=torch.bfloat16, device="cuda")
        tst = torch.ones((B, H, 1, Dh), dtype=torch.bfloat16, device="cuda")
        tf = lambda: tc[:, :, t:t + 1, :].copy_(tst)  # noqa: E731
    bench("slice_update bf16 kv-cache (32,8,4096,128) one step", node, [cache, step],
          2 * B * H * Dh * ITEMSIZE["bfloat16"], tf)
    del cache

    print("wrote", b.write(args.out))


if __name__ == "__main__":
    main()
