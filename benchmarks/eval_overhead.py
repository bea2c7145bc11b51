"""Per-node host cost of the evaluator, in one run:

    python benchmarks/eval_overhead.py [--out DIR]

A chain of tiny elementwise ops (~1k and ~10k graph nodes, half of them kernel launches,
half Broadcast views of fresh scalar constants; kernel time negligible), evaluated
  * steady state: the same graph structure again (a decode or training step): the
    recorded program replays from native code (its launches as CUDA graph segments where
    graphs are on; also timed as one graph per replay, the way before session 24);
  * the same with replay switched off (the node-by-node path), for before/after;
  * first sighting: a graph structure not seen before (node plans may be cached);
  * steady state with the multiplier's value new each evaluation: every multiply kernel gets
    another constant address (graph-node updates on CUDA);
  * steady state with eager launches (no CUDA/HIP graph: HIP's default), per launched node
    against the driver's own launch cost (the same kernel launched from a native loop), and
    the same for the chain on full-size operands (launches only: no views, no fresh leaves);
next to MLX's own CPU evaluation of the same graph. Rows: microseconds per graph node.
"""

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("MLX_AMD_AUTO", "0")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402

from harness import Bench  # noqa: E402
from mlx_amd.runtime import bridge  # noqa: E402


def chain(x, n, variant=-1, scale=1.0001, operands=None):
    """``operands``: two arrays of x's shape to multiply and add instead of fresh Python
    scalars (no Broadcast views, no new constant leaves: launches only)."""
    s, h = operands if operands is not None else (scale, 0.5)
    for i in range(n // 2):
        x = x * s
        x = (x - h) if i == variant else (x + h)   # another structure per variant
    return x


def time_eval(n, evaluate, reps, fresh=False, moving=False, operands=None):
    """Median seconds per evaluation of a chain of n ops, and its node count. ``moving``:
    the multiplier's value changes every evaluation (same structure), so its constant's
    device copy moves and every multiply's kernel changes an argument (a graph replay
    updates those nodes: what a decode step's RoPE offsets and KV lengths cost)."""
    x = mx.array(np.ones(16, np.float32))
    mx.eval(x)
    ts, nodes = [], 0
    # warm-up: two sightings record the structure, graph_after() replays launch eagerly, the
    # next builds the graphs; only then is a replay the steady state (before session 24 the
    # 10k-op rows timed 5 evaluations after two, so their median was an eager replay)
    warm = 3 + bridge.graph_after()
    for r in range(reps + warm):
        y = chain(x, n, variant=r if fresh else -1, scale=1.0001 + (r * 1e-6 if moving else 0.0),
                  operands=operands)
        nodes = len(bridge.Graph([y]))
        t = time.perf_counter()
        evaluate(y)
        if r >= warm:
            ts.append(time.perf_counter() - t)
    return statistics.median(ts), nodes


def _gpu_nodes(ev, run) -> int:
    """GPU nodes (kernel launches here: one a chain op) that ``run`` evaluates."""
    count = lambda: sum(c["gpu"] for c in ev.stats.by_prim.values())  # noqa: E731
    before = count()
    run()
    return count() - before


def _driver_launch(ev, count) -> float:
    """Seconds per launch of the chain's multiply kernel, ``count`` times from a native loop
    on the evaluator's stream: what the driver itself costs, nothing of ours around it."""
    from mlx_amd.runtime.evaluator import _single_args

    single = next(e[2] for sig, e in ev.plans.items()
                  if sig[0] == "Multiply" and e[2] is not None)
    pool = ev.residency.device_pool
    bufs = [pool.alloc(256) for _ in range(3)]
    try:
        args = _single_args(single, [bufs[0].data, bufs[1].data], [bufs[2].data])
        ev.native.time_launches(single[0], single[1], single[2], args, single[3], ev.stream, 64)
        t = ev.native.time_launches(single[0], single[1], single[2], args, single[3], ev.stream, count)
        ev.driver.stream_synchronize(ev.stream)
        return t
    finally:
        for buf in bufs:
            pool.free(buf)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args()
    mlx_eval = mx.eval
    b = Bench("eval_overhead")
    ev = b.rt.evaluator
    for n in (1000, 10000):
        reps = 9 if n == 1000 else 5
        ours, nodes = time_eval(n, mx.eval, reps)
        replays = ev.replays
        ev.replay, saved = False, ev.replay
        try:
            off, _ = time_eval(n, mx.eval, reps)
        finally:
            ev.replay = saved
        # eager replays (kernel by kernel from the native loop: HIP's default) against the
        # driver's own launch cost, timed in a native loop of the chain's own multiply kernel
        launches = _gpu_nodes(ev, lambda: mx.eval(chain(mx.array(np.ones(16, np.float32)), n)))
        # the same with full-size operands: the chain's launches without its Broadcast views
        # and fresh scalar leaves (half its nodes, and under the null runtime most of its cost)
        ops = (mx.full((16,), 1.0001), mx.full((16,), 0.5))
        mx.eval(*ops)
        launches_full = _gpu_nodes(ev, lambda: mx.eval(chain(mx.array(np.ones(16, np.float32)), n, operands=ops)))
        ev.graphs, graphs = False, ev.graphs
        try:
            eager, _ = time_eval(n, mx.eval, reps)
            eager_full, nodes_full = time_eval(n, mx.eval, reps, operands=ops)
        finally:
            ev.graphs = graphs
        driver_launch = _driver_launch(ev, launches)
        one = None
        if ev.graphs:   # the steady state as one graph per replay (before session 24's segments)
            segments = bridge.graph_segments()
            ev.drop_programs()
            bridge.set_graph_segments(1 << 30, 1 << 30)
            try:
                one, _ = time_eval(n, mx.eval, reps)
            finally:
                bridge.set_graph_segments(*segments)
                ev.drop_programs()
        first, _ = time_eval(n, mx.eval, reps, fresh=True)
        moving, _ = time_eval(n, mx.eval, reps, moving=True)
        ref, _ = time_eval(n, mlx_eval, reps)
        x = mx.array(np.ones(16, np.float32))
        mx.eval(x)
        y = chain(x, n)
        t = time.perf_counter()
        g = bridge.Graph([y])
        walk = time.perf_counter() - t
        g.release()
        us = lambda s: s / nodes * 1e6  # noqa: E731
        print(f"{nodes} nodes: steady {us(ours):.2f} us/node (replays {replays}), replay off {us(off):.2f}, "
              f"first sighting {us(first):.2f}, graph walk {us(walk):.2f}, MLX CPU {us(ref):.2f}, "
              f"steady with a moving constant {us(moving):.2f}")
        b.row(f"eval overhead {nodes} nodes steady (replay)", us(ours), "us/node",
              "same graphs, replay off (node-by-node path), same run", us(off), higher_is_better=False)
        b.row(f"eval overhead {nodes} nodes steady vs MLX CPU eval", us(ours), "us/node",
              "MLX 0.32.4 CPU evaluation of the same graph", us(ref), higher_is_better=False)
        if one is not None:
            print(f"  steady as one graph per replay: {us(one):.2f} us/node")
            b.row(f"eval overhead {nodes} nodes steady (replay), graph segments", us(ours), "us/node",
                  "the same replays as one graph each (launched once every launch is collected), same run",
                  us(one), higher_is_better=False)
        per_launch = eager / launches * 1e6
        print(f"  eager replay: {us(eager):.2f} us/node, {per_launch:.2f} us per launched node "
              f"({launches} launches), the driver's own launch {driver_launch * 1e6:.2f} us: "
              f"ours {per_launch - driver_launch * 1e6:.2f} us per launch above it")
        b.row(f"eval overhead {nodes} nodes steady, eager launches (no graph)", us(eager), "us/node",
              "the same with the replay as one CUDA/HIP graph, same run", us(ours), higher_is_better=False)
        b.row(f"eager replay {nodes} nodes, host time per launched node", per_launch, "us/launch",
              "the driver's own launch cost (the same kernel launched in a native loop), same run",
              driver_launch * 1e6, higher_is_better=False)
        per_launch_full = eager_full / launches_full * 1e6
        print(f"  eager replay, full-size operands: {per_launch_full:.2f} us per launched node "
              f"({launches_full} launches, {nodes_full} nodes): ours {per_launch_full - driver_launch * 1e6:.2f} "
              f"us per launch above the driver")
        b.row(f"eager replay {launches_full} ops with full-size operands, host time per launched node",
              per_launch_full, "us/launch",
              "the driver's own launch cost (the same kernel launched in a native loop), same run",
              driver_launch * 1e6, higher_is_better=False)
        b.row(f"eval overhead {nodes} nodes first sighting", us(first), "us/node",
              "MLX 0.32.4 CPU evaluation of the same graph", us(ref), higher_is_better=False)
        b.row(f"graph walk {nodes} nodes", us(walk), "us/node", "MLX 0.32.4 CPU evaluation", us(ref),
              higher_is_better=False)
        # half the nodes are multiplies whose argument changes: the extra cost per changed node
        # is 2 * (moving - ours) / (a node) of this row against the steady one
        b.row(f"eval overhead {nodes} nodes steady, every multiply's constant moving", us(moving), "us/node",
              "the same graphs with constants that keep their value, same run", us(ours), higher_is_better=False)
    print(b.write(args.out))


if __name__ == "__main__":
    main()
