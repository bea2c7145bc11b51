"""Where a prefill's time to first token goes: each evaluation mlx-lm's generate_step makes
before the first token (the prompt pass, then the first decode steps), with its node count,
whether it was replayed, the evaluator's host time and the whole evaluation (host + waiting
for the GPU); then the prompt pass alone split into graph build, queue (async_eval) and wait.

    python tools/prefill_phases.py [--shape llama-1b] [--bits 0] [--prompt 512] [--runs 5]
    python tools/prefill_phases.py --null ...   # no GPU (tools/profile_engine.py)

Prints one line per run and a JSON summary (medians of the runs after the first two, in ms).
"""

import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("MLX_AMD_AUTO", "0")
from llm_args import model_args, null_args, start_null  # noqa: E402  (tools/: the script's own folder)


def main():
    ap = argparse.ArgumentParser()
    model_args(ap, prompt=512)
    ap.add_argument("--runs", type=int, default=5)
    null_args(ap, cus=132)
    ap.add_argument("--profile-run", type=int, default=-1,
                    help="cProfile this run (0-based) and print its top functions")
    ap.add_argument("--phases", action="store_true",
                    help="also the evaluator's phases per run (tools/decode_timeline.py's timers, ms)")
    a = ap.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    start_null(a)
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    import mlx_amd
    from mlx_amd import llm
    from mlx_amd.runtime.context import get_runtime

    mlx_amd.enable()
    ev = get_runtime().evaluator
    model = llm.random_model(a.shape, "bfloat16", quantize=a.bits)
    prompt = mx.random.randint(0, model.args.vocab_size, (a.prompt,), key=mx.random.key(1))
    mx.eval(prompt)

    log = []
    orig_run, orig_eval = ev._run, ev.eval

    from mlx_amd.runtime import bridge

    def run(g):
        t, r0, n, p0 = time.perf_counter(), ev.replays, len(g), ev.replay_python
        b0 = bridge.graph_stats()
        orig_run(g)
        b1 = bridge.graph_stats()
        log.append([n, ev.replays > r0, time.perf_counter() - t, 0.0, ev.replay_python - p0,
                    b1["builds"] - b0["builds"], (b1["build_ns"] - b0["build_ns"]) * 1e-9])

    def evaluate(arrays, async_=False):
        t = time.perf_counter()
        orig_eval(arrays, async_)
        if log:
            log[-1][3] = time.perf_counter() - t

    ev._run, ev.eval = run, evaluate
    acc = None
    if a.phases:
        import collections

        from decode_timeline import install_phase_timers

        acc = collections.defaultdict(float)
        install_phase_timers(acc)
        drv = ev.driver
        if hasattr(drv, "_alloc"):        # the driver's allocation calls, by entry point
            real_alloc = drv._alloc

            def timed_alloc(logical, nbytes, *flags):
                t = time.perf_counter()
                try:
                    return real_alloc(logical, nbytes, *flags)
                finally:
                    acc[f"driver {logical}"] += time.perf_counter() - t
                    acc[f"driver {logical} MB"] += nbytes / 1e9   # (printed x1e3)
            drv._alloc = timed_alloc
    pool = ev.residency.device_pool
    hpool = getattr(ev.residency, "host_pool", None)
    ttfts, evals = [], []
    for i in range(a.runs):
        log.clear()
        if acc is not None:
            acc.clear()
        c0 = dict(pool.counts)
        h0 = dict(hpool.counts) if hpool is not None else {}
        if i == a.profile_run:
            import cProfile
            import pstats

            pr = cProfile.Profile()
            pr.enable()
        ttft = llm.generate(model, prompt, 1)[1]
        if i == a.profile_run:
            pr.disable()
            pstats.Stats(pr).sort_stats("tottime").print_stats(25)
        c1 = dict(pool.counts)
        h1 = dict(hpool.counts) if hpool is not None else {}
        if acc is not None:
            print(f"run {i} phases ms: " + ", ".join(f"{k} {v * 1e3:.2f}" for k, v in
                                                     sorted(acc.items(), key=lambda kv: -kv[1])))
            for name, x0, x1 in (("device", c0, c1), ("host", h0, h1)):
                print(f"run {i} {name} pool: " + ", ".join(f"{k} +{x1[k] - x0[k]}" for k in x1
                                                           if isinstance(x1[k], int) and k in x0))
        ttfts.append(ttft)
        evals.append([list(x) for x in log])
        print(f"run {i}: ttft {ttft * 1e3:.2f} ms; evaluations (nodes, R=replayed, host ms / eval ms"
              ", [nodes run in Python], {graph builds: ms}): "
              + "  ".join(f"{n}{'R' if r else ''} {h * 1e3:.1f}/{e * 1e3:.1f}"
                          + (f" [{p}]" if p else "") + (f" {{{b}: {bt * 1e3:.1f}}}" if b else "")
                          for n, r, h, e, p, b, bt in log))
    ev._run, ev.eval = orig_run, orig_eval

    split = []
    for _ in range(a.runs):
        cache = make_prompt_cache(model)
        t0 = time.perf_counter()
        model(prompt[None, :-1], cache=cache)
        t1 = time.perf_counter()
        mx.async_eval([c.state for c in cache])
        t2 = time.perf_counter()
        mx.eval([c.state for c in cache])
        mx.synchronize()
        t3 = time.perf_counter()
        split.append((t1 - t0, t2 - t1, t3 - t2))
    med = lambda xs: round(statistics.median(xs) * 1e3, 3)  # noqa: E731
    tail = slice(2, None) if a.runs > 2 else slice(None)
    out = {"shape": a.shape, "bits": a.bits, "prompt": a.prompt, "driver": ev.driver.platform,
           "graphs": bool(ev.graphs), "graph_after": bridge.graph_after(),
           "ttft_ms": med(ttfts[tail]),
           "evals_ms": [[x[0], x[1], round(x[2] * 1e3, 3), round(x[3] * 1e3, 3)] for x in evals[-1]],
           "ttfts_ms": [round(t * 1e3, 2) for t in ttfts],
           "prompt_pass_ms": {"build": med([s[0] for s in split[tail]]),
                              "queue": med([s[1] for s in split[tail]]),
                              "wait": med([s[2] for s in split[tail]])}}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
