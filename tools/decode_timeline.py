"""Where a decode step's wall time goes on a GPU: mlx-lm's pipelining (build step n+1's
graph, queue it with async_eval, then read token n) timed phase by phase, next to the same
steps evaluated synchronously (host and GPU one after the other).

    python tools/decode_timeline.py [--shape llama-1b] [--bits 0] [--steps 64]
    python tools/decode_timeline.py --ncu-step ...   # one synchronous step between
        cuProfilerStart/Stop: run under `ncu --profile-from-start off` for its kernels
    python tools/decode_timeline.py --ncu-prefill ...   # the same for one prefill (fresh cache)
    python tools/decode_timeline.py --modes eager,graphs,graphs+arrays,eager+arrays ...
    python tools/decode_timeline.py --phases ...   # and the evaluator's phases of a step

Prints one JSON line: medians in milliseconds of build (the model's graph), queue
(async_eval until it returns), wait (reading the previous token), step (all three), and
sync (build + eval + read, nothing overlapped), queue_mean / step_mean (means of queue and
step: the medians hide rare slow steps), prefill (a fresh cache's prompt, synchronous, after
one warm-up prefill), and with graphs the host time of their node updates and launch per
launched step (graph_update_ms, graph_launch_ms). step ~ build + queue means the host is the
bound; a large wait means the GPU is.
"""

import argparse
import ctypes
import json
import os
import statistics
import time

os.environ.setdefault("MLX_AMD_AUTO", "0")
from llm_args import model_args, null_args, start_null  # noqa: E402  (tools/: the script's own folder)


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


def install_phase_timers(acc):
    """Wrap the evaluator's phases (the native graph walk and replay, leaf resolution,
    constant uploads, release, write-back, ...) in timers adding seconds into ``acc``;
    returns a function that removes them again."""
    from mlx_amd.runtime import evaluator as evmod
    from mlx_amd.runtime.context import get_runtime

    undo = []

    def wrap(obj, name):
        f = getattr(obj, name)

        def timed(*args, **kw):
            t = time.perf_counter()
            try:
                return f(*args, **kw)
            finally:
                acc[name] += time.perf_counter() - t
        setattr(obj, name, timed)
        undo.append(lambda: delattr(obj, name))   # the instance attribute hid the method

    ev = get_runtime().evaluator
    for n in ("eval", "_run", "_reap", "_queue_pending", "_host_valid"):
        wrap(ev, n)
    for n in ("adopt", "writeback", "sync_leaf_cache", "upload_consts", "device_ptrs", "trim_consts"):
        wrap(ev.residency, n)
    real = evmod._bridge

    class _Bridge:    # the evaluator's view of the bridge: Graph() timed, the rest as is
        def __getattr__(self, name):
            return getattr(real, name)

        @staticmethod
        def Graph(*args):
            t = time.perf_counter()
            g = real.Graph(*args)
            acc["Graph() (walk)"] += time.perf_counter() - t
            return _TimedGraph(g, acc)

    evmod._bridge = _Bridge()

    def remove():
        evmod._bridge = real
        for u in undo:
            u()
    return remove


def main():
    ap = argparse.ArgumentParser()
    model_args(ap)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--plain", action="store_true", help="plain MLX (no mlx-amd), for reference")
    ap.add_argument("--ncu-step", action="store_true")
    ap.add_argument("--ncu-prefill", action="store_true")
    null_args(ap)
    ap.add_argument("--siblings-ab", type=int, default=0, metavar="ROUNDS",
                    help="in one process, ROUNDS rounds of --steps pipelined steps with the "
                         "evaluator's sibling/pair plans off, then on (programs re-recorded at "
                         "each switch): an A/B free of the host-speed spread between processes")
    ap.add_argument("--twins-ab", type=int, default=0, metavar="ROUNDS",
                    help="as --siblings-ab with only the twin plans (q/k RoPE, k/v cache writes) "
                         "switched")
    ap.add_argument("--chains-ab", type=int, default=0, metavar="ROUNDS",
                    help="as --siblings-ab with only the chains (residual add + RMS norm with the "
                         "projections after it) switched")
    ap.add_argument("--glu-ab", type=int, default=0, metavar="ROUNDS",
                    help="as --siblings-ab with only the tails (an MLP's quantized gate and up "
                         "with their swiglu) switched")
    ap.add_argument("--twin-chains-ab", type=int, default=0, metavar="ROUNDS",
                    help="as --siblings-ab with only the twin chains (q/k RoPE with the k/v cache "
                         "writes: one rope_kv launch) switched")
    ap.add_argument("--launcher-ab", type=int, default=0, metavar="ROUNDS",
                    help="in one process, for eager launches and for graphs, ROUNDS rounds of "
                         "--steps pipelined steps with the launch thread off, then on")
    ap.add_argument("--phases", action="store_true",
                    help="also time the evaluator's phases of the pipelined steps (ms per step, "
                         "in 'phases_ms'; the timers add a little to queue)")
    ap.add_argument("--modes", default="",
                    help="comma list of eager|graphs[+stream|+arrays] (launches, and what a read "
                         "waits for: evaluator.eval_wait, its default when left out), run in turn "
                         "on one model (mlx-amd only)")
    a = ap.parse_args()
    start_null(a)
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    import mlx_amd
    from mlx_amd import llm

    if not a.plain:
        mlx_amd.enable()
    model = llm.random_model(a.shape, "bfloat16", quantize=a.bits)
    cache = make_prompt_cache(model)
    prompt = mx.random.randint(0, model.args.vocab_size, (a.prompt,), key=mx.random.key(1))

    def step(y, c=cache):
        logits = model(y[None], cache=c)
        return mx.argmax(logits[:, -1, :], axis=-1)

    y = step(prompt)
    mx.eval(y)
    for _ in range(8):                      # recordings, first replays
        y = step(y)
        mx.eval(y)
    med = lambda v: round(statistics.median(v) * 1e3, 4)  # noqa: E731

    def pipelined(y, n):
        build, queue, wait, total = [], [], [], []
        t_prev = time.perf_counter()
        for _ in range(n):
            t0 = time.perf_counter()
            ny = step(y)
            t1 = time.perf_counter()
            mx.async_eval(ny)
            t2 = time.perf_counter()
            y.item()
            t3 = time.perf_counter()
            build.append(t1 - t0)
            queue.append(t2 - t1)
            wait.append(t3 - t2)
            total.append(t3 - t_prev)
            t_prev = t3
            y = ny
        y.item()
        # (means too: the medians hide the rare steps, e.g. a KV cache growing, that went
        # back to Python)
        return y, {"build_ms": med(build), "queue_ms": med(queue), "wait_ms": med(wait),
                   "step_ms": med(total), "tok_s": round(1.0 / statistics.median(total), 1),
                   "queue_mean_ms": round(statistics.mean(queue) * 1e3, 4),
                   "step_mean_ms": round(statistics.mean(total) * 1e3, 4)}

    def synced(y, n):
        sync = []
        for _ in range(n):
            t0 = time.perf_counter()
            y = step(y)
            mx.eval(y)
            y.item()
            sync.append(time.perf_counter() - t0)
        return y, med(sync)

    if a.modes:    # the same model and cache, each mode in turn, twice
        from mlx_amd.runtime.context import get_runtime

        ev = get_runtime().evaluator
        modes, default_wait = a.modes.split(","), ev.eval_wait
        rows = {m: [] for m in modes}
        for m in modes + modes:
            launch, _, wait = m.partition("+")
            if launch not in ("eager", "graphs") or wait not in ("", "stream", "arrays"):
                raise SystemExit(f"--modes: {m!r} is not eager|graphs[+stream|+arrays]")
            ev.graphs, ev.eval_wait = launch == "graphs", wait or default_wait
            y, r = pipelined(y, a.steps)
            y, r["sync_ms"] = synced(y, a.steps // 2)
            rows[m].append(r)
        print(json.dumps({"shape": a.shape, "bits": a.bits, **rows}), flush=True)
        return
    if a.launcher_ab:
        from mlx_amd.runtime.context import get_runtime

        ev = get_runtime().evaluator
        if not ev.threaded:
            raise SystemExit("--launcher-ab: the launch thread is not running (MLX_AMD_LAUNCH_THREAD=0?)")
        rows = {}
        for launch in ("eager", "graphs"):
            ev.graphs = launch == "graphs"
            r = rows[launch] = {"off": [], "on": [], "queue_off": [], "queue_on": []}
            for _ in range(a.launcher_ab):
                for mode in ("off", "on"):
                    mx.synchronize()
                    ev.threaded = mode == "on"
                    for _ in range(4):
                        y = step(y)
                        mx.eval(y)
                    y, p = pipelined(y, a.steps)
                    r[mode].append(p["tok_s"])
                    r["queue_" + mode].append(p["queue_ms"])
            r["median"] = {m: statistics.median(r[m]) for m in ("off", "on")}
        print(json.dumps({"shape": a.shape, "bits": a.bits, "switched": "launch thread", **rows}), flush=True)
        return
    n_ab = a.siblings_ab or a.twins_ab or a.chains_ab or a.glu_ab or a.twin_chains_ab
    if n_ab:
        from mlx_amd.runtime import evaluator as E
        from mlx_amd.runtime.context import get_runtime

        ev = get_runtime().evaluator
        pairs = E.pair_table(E.DISPATCH)
        # SIBLINGS, PAIRS, TWINS, CHAINS, TAILS, TWIN_CHAINS
        on = (E.sibling_table(E.DISPATCH), pairs, E.twin_table(E.DISPATCH), E.chain_table(E.DISPATCH, pairs),
              E.tail_table(E.DISPATCH), E.twin_chain_table(E.DISPATCH))
        cut = {"twins": (2, 5), "chains": (3,), "glu": (4,), "twin_chains": (5,), "siblings": tuple(range(6))}
        switched = ("twins" if a.twins_ab else "chains" if a.chains_ab else "glu" if a.glu_ab
                    else "twin_chains" if a.twin_chains_ab else "siblings")
        off = tuple({} if k in cut[switched] else t for k, t in enumerate(on))
        tables = {"off": off, "on": on}
        rows = {"off": [], "on": []}
        python_nodes = {"off": [], "on": []}   # nodes a replay handed back to Python
        for _ in range(n_ab):
            for mode in ("off", "on"):
                E.SIBLINGS, E.PAIRS, E.TWINS, E.CHAINS, E.TAILS, E.TWIN_CHAINS = tables[mode]
                ev.drop_programs()
                ev._seen.clear()
                ev._sib_groups.clear()
                for _ in range(6):               # record, then replays with a graph
                    y = step(y)
                    mx.eval(y)
                p0 = ev.replay_python
                y, r = pipelined(y, a.steps)
                rows[mode].append(r["tok_s"])
                python_nodes[mode].append(round((ev.replay_python - p0) / a.steps, 2))
        print(json.dumps({"shape": a.shape, "bits": a.bits, "switched": switched,
                          "tok_s": rows, "python_nodes_per_step": python_nodes,
                          "median": {m: statistics.median(v) for m, v in rows.items()}}), flush=True)
        return
    if a.phases:
        import collections

        acc = collections.defaultdict(float)
        remove = install_phase_timers(acc)
        try:
            y, out = pipelined(y, a.steps)
        finally:
            remove()
        out["phases_ms"] = {k: round(v / a.steps * 1e3, 4) for k, v in sorted(acc.items(), key=lambda kv: -kv[1])}
    else:
        y, out = pipelined(y, a.steps)
    y, out["sync_ms"] = synced(y, a.steps // 2)
    prefill = []
    for _ in range(6):                       # the first one may record; the median hides it
        fresh = make_prompt_cache(model)
        t0 = time.perf_counter()
        step(prompt, fresh).item()
        prefill.append(time.perf_counter() - t0)
    out["prefill_ms"] = med(prefill)
    if a.ncu_step or a.ncu_prefill:
        cuda = ctypes.CDLL("libcuda.so.1")
        mx.eval(y)
        fresh = make_prompt_cache(model)
        cuda.cuProfilerStart()
        y = step(prompt, fresh) if a.ncu_prefill else step(y)
        mx.eval(y)
        y.item()
        cuda.cuProfilerStop()
    out = {"shape": a.shape, "bits": a.bits, "engine": "plain" if a.plain else "mlx-amd", **out}
    if not a.plain:
        from mlx_amd.runtime.context import get_runtime

        ev = get_runtime().evaluator
        out["replays"], out["replay_python_nodes"] = ev.replays, ev.replay_python
        from mlx_amd.runtime import bridge

        gs = bridge.graph_stats()
        out["graphs"] = dict(gs, enabled=bool(ev.graphs))
        if gs["launches"]:   # host time of the graph calls per launched step (all steps run)
            out["graph_update_ms"] = round(gs["update_ns"] / gs["launches"] / 1e6, 4)
            out["graph_launch_ms"] = round(gs["launch_ns"] / gs["launches"] / 1e6, 4)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
