"""Elementwise kernels against the memory roofline, measured in one run.

    python benchmarks/elementwise_bandwidth.py [--out DIR]

Each kernel is launched directly (driver + Modules + its family launcher) on 2^28-element
device buffers, timed with device events (median of 20 after warm-up). Bandwidth counts
the bytes each element must move (inputs read once, output written once). References
measured in the same run: a device-to-device copy through the driver (the practical
roofline) and, where PyTorch is installed, the same op in PyTorch. Writes
elementwise_bandwidth.json.
"""

import argparse
import json
import os
import statistics

from mlx_amd.runtime.driver import get_driver
from mlx_amd.runtime.launch import run
from mlx_amd.runtime.modules import Modules
from mlx_amd.runtime.ops import binary, copy, unary
from mlx_amd.runtime.ops.elementwise import ITEMSIZE, Layout, row_strides

N = 1 << 28
REPS = 20


def timed(drv, fn, reps=REPS, warmup=3):
    e0, e1 = drv.event_create(), drv.event_create()
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(reps):
        drv.event_record(e0)
        fn()
        drv.event_record(e1)
        drv.event_synchronize(e1)
        ts.append(drv.event_elapsed_ms(e0, e1))
    return statistics.median(ts)


def layout(shape, dtype, strides=None):
    n = 1
    for d in shape:
        n *= d
    st = strides or row_strides(shape)
    row = st == row_strides(shape)
    size = n if 0 not in st else max(1, n // shape[0])
    return Layout(tuple(shape), tuple(st), dtype, size, row, row)


CASES = [
    # name, module, op, input layouts, out dtype, bytes per element moved
    ("add f32 (vv)", binary, "add", [((N,), "float32"), ((N,), "float32")], "float32"),
    ("add bf16 (vv)", binary, "add", [((N,), "bfloat16"), ((N,), "bfloat16")], "bfloat16"),
    ("mul f32 by scalar (vs)", binary, "multiply", [((N,), "float32"), ((N,), "float32", (0,))], "float32"),
    ("add f32 row-broadcast (g)", binary, "add",
     [((N // 4096, 4096), "float32"), ((N // 4096, 4096), "float32", (0, 1))], "float32"),
    ("exp f32 (v)", unary, "exp", [((N,), "float32")], "float32"),
    ("exp bf16 (v)", unary, "exp", [((N,), "bfloat16")], "bfloat16"),
    ("sigmoid f16 (v)", unary, "sigmoid", [((N,), "float16")], "float16"),
    ("cast f32->bf16 (v)", copy, "float32->bfloat16", [((N,), "float32")], "bfloat16"),
    ("transpose copy f32 (t)", copy, "float32->float32",
     [((16384, N // 16384), "float32", (1, 16384))], "float32"),
]


def moved_bytes(ins, out_dtype):
    total = N * ITEMSIZE[out_dtype]
    for spec in ins:
        shape, dt = spec[0], spec[1]
        strides = spec[2] if len(spec) > 2 else None
        if strides and 0 in strides:
            n = 1
            for d, s in zip(shape, strides):
                n *= d if s else 1
            total += n * ITEMSIZE[dt]
        else:
            total += N * ITEMSIZE[dt]
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--reps", type=int, default=REPS)
    ap.add_argument("--warmup", type=int, default=3, help="0 and --reps 1 under a profiler")
    args = ap.parse_args()
    drv = get_driver()
    props = drv.properties(drv.current_device())
    mods = Modules(drv, props)
    bufs = [drv.malloc(N * 4) for _ in range(3)]
    for b in bufs:
        drv.memset(b, 0x3c, N * 4)  # a finite non-zero pattern in every dtype
    copy_ms = timed(drv, lambda: drv.memcpy_dtod(bufs[1], bufs[0], N * 4))
    roof = 2 * N * 4 / (copy_ms * 1e-3) / 1e9
    res = {"device": props.name, "elements": N, "copy_dtod_GBps": roof, "kernels": []}
    print(f"device-to-device copy: {roof:.0f} GB/s (the roofline used below)")

    torch_ref = {}
    try:
        import torch

        dt = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
        a = torch.ones(N, device="cuda", dtype=torch.float32)
        b = torch.ones(N, device="cuda", dtype=torch.float32)

        def ttime(fn):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            for _ in range(3):
                fn()
            ts = []
            for _ in range(REPS):
                s.record()
                fn()
                e.record()
                e.synchronize()
                ts.append(s.elapsed_time(e))
            return statistics.median(ts)

        torch_ref["add f32 (vv)"] = ttime(lambda: torch.add(a, b))
        torch_ref["exp f32 (v)"] = ttime(lambda: torch.exp(a))
        ab, bb = a.to(dt["bfloat16"]), b.to(dt["bfloat16"])
        torch_ref["add bf16 (vv)"] = ttime(lambda: torch.add(ab, bb))
        torch_ref["cast f32->bf16 (v)"] = ttime(lambda: a.to(dt["bfloat16"]))
        del a, b, ab, bb
        torch.cuda.empty_cache()
    except Exception as e:  # no torch / no CUDA torch: roofline only
        print(f"PyTorch reference unavailable: {e}")

    print(f"{'kernel':30s} {'ms':>8s} {'GB/s':>8s} {'% roof':>7s} {'torch GB/s':>10s}")
    for name, mod, op, ins, out_dt in CASES:
        lays = tuple(layout(*spec) for spec in ins)
        out = layout((N,) if len(ins[0][0]) == 1 else ins[0][0], out_dt)
        if mod is copy:
            plan = mod.plan("AsType" if "cast" in name else "Copy", lays, out, props)
        else:
            plan = mod.plan(op, lays, out, props)
        if plan is None:
            print(f"{name:30s} no plan")
            continue
        ptrs = tuple(bufs[i] for i in range(len(ins))) + (bufs[2],)
        ms = timed(drv, lambda: run(plan, mods, drv, ptrs), args.reps, args.warmup)
        gbs = moved_bytes(ins, out_dt) / (ms * 1e-3) / 1e9
        t = torch_ref.get(name)
        tg = moved_bytes(ins, out_dt) / (t * 1e-3) / 1e9 if t else None
        res["kernels"].append({"kernel": name, "launch": plan.kernel, "ms": ms, "GBps": gbs,
                               "fraction_of_copy_roofline": gbs / roof, "torch_GBps": tg})
        print(f"{name:30s} {ms:8.3f} {gbs:8.0f} {100 * gbs / roof:6.0f}% "
              f"{'' if tg is None else f'{tg:10.0f}'}")
    for b in bufs:
        drv.free(b)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "elementwise_bandwidth.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
