"""Where a prompt's time to first token goes: mlx-lm's generate_step sequence replayed by
hand with a timer between its phases, on a random-weight model (mlx_amd/llm.py).

    python tools/ttft_probe.py [--shape llama-1b] [--bits 0] [--prompt 512] [--ab flash,gemm]

Phases (ms, medians): build (the prefill graph, mlx-lm's Python), queue / wait (async_eval
of the KV-cache state, then the wait for it), clear (mx.clear_cache, as mlx-lm calls it
after each prefill chunk), step1 / step2 (the first two one-token steps built and queued,
as generate_step does before it yields), wait1 (the first token's read), ttft (all).

Without --ab: with and without clear_cache, graphs and eager, and the pool's driver calls
per run. --ab runs variants in turn in one process, twice (the host's speed drifts):
flash / gemm (MLX_AMD_SDPA_PREFILL), native / python (who makes a replay's GEMM calls).
The stream-ordered pool is chosen at start-up: compare MLX_AMD_ASYNC_ALLOC=0 in another
process.
"""

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("MLX_AMD_AUTO", "0")
from llm_args import model_args  # noqa: E402  (tools/: the script's own folder)


def main():
    ap = argparse.ArgumentParser()
    model_args(ap, prompt=512)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--ab", default="", help="comma list of flash|gemm|native|python")
    a = ap.parse_args()

    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    import mlx_amd
    from mlx_amd import llm
    from mlx_amd.runtime.context import get_runtime

    mlx_amd.enable()
    model = llm.random_model(a.shape, "bfloat16", quantize=a.bits)
    prompt = mx.random.randint(0, model.args.vocab_size, (a.prompt,), key=mx.random.key(1))
    mx.eval(prompt)
    rt = get_runtime()
    ev, pool = rt.evaluator, rt.residency.device_pool
    n = a.prompt - 1

    def step(tokens, cache):
        logits = model(tokens[None], cache=cache)[:, -1, :]
        logprobs = logits - mx.logsumexp(logits, keepdims=True)
        y = mx.argmax(logprobs, axis=-1)
        mx.async_eval(y, logprobs)
        return y

    def one(clear=True):
        t = [time.perf_counter()]
        cache = make_prompt_cache(model)
        model(prompt[:n][None], cache=cache)
        t.append(time.perf_counter())
        state = [c.state for c in cache]
        mx.async_eval(state)
        t.append(time.perf_counter())
        mx.eval(state)
        t.append(time.perf_counter())
        if clear:
            mx.clear_cache()
        t.append(time.perf_counter())
        y = step(prompt[n:], cache)
        t.append(time.perf_counter())
        y2 = step(y, cache)
        t.append(time.perf_counter())
        y.item()
        t.append(time.perf_counter())
        mx.eval(y2)
        ms = [round((q - p) * 1e3, 3) for p, q in zip(t, t[1:])]
        return dict(zip(("build", "queue", "wait", "clear", "step1", "step2", "wait1"), ms),
                    ttft=round((t[-1] - t[0]) * 1e3, 3))

    def median(rows):
        return {k: statistics.median(r[k] for r in rows) for k in rows[0]}

    out = {"shape": a.shape, "bits": a.bits, "prompt": a.prompt, "async_alloc": pool.stats().get("async_alloc")}
    if a.ab:
        for rnd in range(2):
            for v in a.ab.split(","):
                if v in ("flash", "gemm"):
                    os.environ["MLX_AMD_SDPA_PREFILL"] = v
                elif v in ("native", "python"):
                    os.environ.pop("MLX_AMD_SDPA_PREFILL", None)
                    ev.native_calls = v == "native"
                else:
                    raise SystemExit(f"--ab: {v!r} is not flash|gemm|native|python")
                ev.plans.clear()
                ev.drop_programs()
                for _ in range(3):
                    one()
                out.setdefault(v, []).append(median([one() for _ in range(a.runs)]))
    else:
        for graphs in (True, False):
            ev.graphs = graphs
            for clear in (True, False):
                for _ in range(3):
                    one(clear)
                c0 = dict(pool.counts)
                rows = [one(clear) for _ in range(a.runs)]
                m = median(rows)
                m["driver_calls_per_run"] = {k: (pool.counts[k] - c0[k]) / a.runs for k in c0}
                out[f"{'graphs' if graphs else 'eager'} clear={clear}"] = m
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
