"""Where the evaluator's part of a pipelined decode step goes, phase by phase: mlx-lm-style
steps (build step n+1, mx.async_eval it, read token n) with the evaluator's phases wrapped in
timers (the native graph walk, the native replay, leaf resolution, constant uploads, graph
release, write-back, ...). Milliseconds per step, means over the timed steps.

    python tools/decode_phases.py [--shape llama-1b] [--bits 0] [--steps 400] [--null]

--null: no GPU, the host driver with no-op kernels (tools/profile_engine.py).
"""

import argparse
import collections
import os
import sys
import time

os.environ.setdefault("MLX_AMD_AUTO", "0")


class _TimedGraph:
    """bridge.Graph with its replay, leaves and release timed (the rest passes through)."""

    TIMED = ("leaves", "replay", "release")

    def __init__(self, g, acc):
        object.__setattr__(self, "_g", g)
        object.__setattr__(self, "_acc", acc)

    def __getattr__(self, name):
        f = getattr(self._g, name)
        if name not in self.TIMED:
            return f

        def timed(*a, **k):
            t = time.perf_counter()
            try:
                r = f(*a, **k)
                return list(r) if name == "leaves" else r
            finally:
                self._acc["g." + name] += time.perf_counter() - t
        return timed

    def __len__(self):
        return len(self._g)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="llama-1b")
    ap.add_argument("--bits", type=int, default=0)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--null", action="store_true")
    a = ap.parse_args()
    if a.null:
        from profile_engine import make_runtime   # tools/ is the script's own folder

        make_runtime()
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    import mlx_amd
    from mlx_amd import llm
    from mlx_amd.runtime import evaluator as evmod
    from mlx_amd.runtime.context import get_runtime

    mlx_amd.enable()
    model = llm.random_model(a.shape, "bfloat16", quantize=a.bits)
    cache = make_prompt_cache(model)
    prompt = mx.random.randint(0, model.args.vocab_size, (128,), key=mx.random.key(1))

    def step(y):
        return mx.argmax(model(y[None], cache=cache)[:, -1, :], axis=-1)

    acc = collections.defaultdict(float)

    def wrap(obj, name, label=None):
        f = getattr(obj, name)

        def timed(*args, **kw):
            t = time.perf_counter()
            try:
                return f(*args, **kw)
            finally:
                acc[label or name] += time.perf_counter() - t
        setattr(obj, name, timed)

    ev = get_runtime().evaluator
    res = ev.residency
    for n in ("eval", "_run", "_reap", "_queue_pending", "_host_valid"):
        wrap(ev, n)
    for n in ("adopt", "writeback", "sync_leaf_cache", "upload_consts", "device_ptrs", "trim_consts"):
        wrap(res, n)

    real_bridge = evmod._bridge

    class _Bridge:    # the evaluator's view of the bridge: Graph() timed, the rest as is
        def __getattr__(self, name):
            return getattr(real_bridge, name)

        @staticmethod
        def Graph(*args):
            t = time.perf_counter()
            g = real_bridge.Graph(*args)
            acc["Graph() (walk)"] += time.perf_counter() - t
            return _TimedGraph(g, acc)

    evmod._bridge = _Bridge()
    try:
        y = step(prompt)
        mx.eval(y)
        for _ in range(10):           # recordings, first replays
            y = step(y)
            mx.eval(y)
        acc.clear()
        build = queue = 0.0
        for _ in range(a.steps):
            t0 = time.perf_counter()
            ny = step(y)
            t1 = time.perf_counter()
            mx.async_eval(ny)
            t2 = time.perf_counter()
            y.item()
            y = ny
            build += t1 - t0
            queue += t2 - t1
    finally:
        evmod._bridge = real_bridge
    n = a.steps
    print(f"{a.shape} bits {a.bits}: build {build / n * 1e3:.3f} ms, queue (async_eval) {queue / n * 1e3:.3f} ms per step")
    for k, v in sorted(acc.items(), key=lambda kv: -kv[1]):
        print(f"  {k:22s} {v / n * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
