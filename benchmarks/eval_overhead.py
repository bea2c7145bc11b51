"""Per-node overhead of the evaluator, and elementwise bandwidth against the copy roofline.

    python benchmarks/eval_overhead.py [--out DIR]

Overhead: a chain of tiny elementwise ops (about 1k and 10k graph nodes) (kernel time negligible) evaluated through
mlx_amd, split into the bridge's graph walk and the per-node loop, next to MLX's own CPU
evaluation of the same graph measured in the same run. Bandwidth: `a + b` on 2^26 float32
elements through the evaluator's kernel, timed with device events, against a device-to-device
copy (bytes read + written) measured in the same run. Writes eval_overhead.json.
"""

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("MLX_AMD_AUTO", "0")

import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402

import mlx_amd  # noqa: E402
from mlx_amd.runtime import bridge  # noqa: E402
from mlx_amd.runtime.context import get_runtime  # noqa: E402


def chain(x, n):
    for _ in range(n // 2):
        x = x * 1.0001
        x = x + 0.5
    return x


def time_eval(n, evaluate, reps):
    """Median seconds to evaluate a fresh chain of n ops, and the graph's node count
    (each `x * c` is a Broadcast view of the scalar plus the Multiply: 2 nodes)."""
    ts = []
    for _ in range(reps):
        x = mx.array(np.ones(16, np.float32))
        mx.eval(x)
        y = chain(x, n)
        nodes = len(bridge.Graph([y]))
        t = time.perf_counter()
        evaluate(y)
        ts.append(time.perf_counter() - t)
    return statistics.median(ts), nodes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args()
    mlx_eval = mx.eval
    rt = get_runtime()
    mlx_amd.enable()
    res = {"device": rt.props.name, "driver": rt.driver.name, "overhead": [], "bandwidth": {}}
    for n in (500, 5000):
        reps = 5 if n == 500 else 3
        m0 = rt.residency.stats()["uploads"]
        ours, nodes = time_eval(n, mx.eval, reps)
        uploads = (rt.residency.stats()["uploads"] - m0) / reps
        ref, _ = time_eval(n, mlx_eval, reps)
        x = mx.array(np.ones(16, np.float32))
        mx.eval(x)
        y = chain(x, n)
        t = time.perf_counter()
        g = bridge.Graph([y])
        walk = time.perf_counter() - t
        g.release()
        del g
        mx.eval(y)
        row = {"ops": n, "nodes": nodes, "kernel_launches": n, "scalar_uploads_per_eval": uploads,
               "us_per_node": ours / nodes * 1e6, "walk_us_per_node": walk / nodes * 1e6,
               "mlx_cpu_us_per_node": ref / nodes * 1e6}
        res["overhead"].append(row)
        print(f"{nodes:6d} nodes ({n} launches, {uploads:.0f} scalar uploads): {row['us_per_node']:.1f} us/node"
              f" (graph walk {row['walk_us_per_node']:.2f}), MLX CPU eval of the same graph"
              f" {row['mlx_cpu_us_per_node']:.1f} us/node")

    if rt.driver.platform != "host":
        drv = rt.driver
        n = 1 << 26
        a = mx.array(np.random.default_rng(0).standard_normal(n).astype(np.float32))
        b = mx.array(np.random.default_rng(1).standard_normal(n).astype(np.float32))
        mx.eval(a + b)  # uploads a and b, warms the plan
        e0, e1 = drv.event_create(), drv.event_create()
        s = rt.evaluator.stream
        ts = []
        for _ in range(10):
            c = a + b
            drv.event_record(e0, s)
            mx.eval(c)  # includes the write-back of c (an escaped array): time the kernel alone below
            drv.event_record(e1, s)
            drv.event_synchronize(e1)
            ts.append(drv.event_elapsed_ms(e0, e1))
        # kernel only: a chain whose intermediates never leave the device
        kts = []
        for _ in range(5):
            c = a
            for _ in range(8):
                c = c + b
            drv.event_record(e0, s)
            mx.eval(c)
            drv.event_record(e1, s)
            drv.event_synchronize(e1)
            kts.append(drv.event_elapsed_ms(e0, e1))
        src, dst = drv.malloc(4 * n), drv.malloc(4 * n)
        cts = []
        for _ in range(10):
            drv.event_record(e0, s)
            drv.memcpy_dtod(dst, src, 4 * n, s)
            drv.event_record(e1, s)
            drv.event_synchronize(e1)
            cts.append(drv.event_elapsed_ms(e0, e1))
        drv.free(src)
        drv.free(dst)
        copy_gbs = 2 * 4 * n / (statistics.median(cts) * 1e-3) / 1e9
        # 8 adds + write-back of the last: time per add from the difference is noisy; report totals
        add_eval_ms = statistics.median(ts)
        chain_ms = statistics.median(kts)
        res["bandwidth"] = {
            "elements": n, "copy_dtod_GBps": copy_gbs,
            "eval_a_plus_b_ms_incl_writeback": add_eval_ms,
            "eval_8_chained_adds_ms_incl_writeback": chain_ms,
            "add_GBps_from_chain_difference": 3 * 4 * n * 7 / ((chain_ms - add_eval_ms) * 1e-3) / 1e9
            if chain_ms > add_eval_ms else None,
        }
        print(json.dumps(res["bandwidth"], indent=1))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "eval_overhead.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
