"""The GPU's own timeline of decode steps (or one prefill), kernel by kernel, for mlx-amd or for
whatever MLX is importable (MLX's CUDA backend when its site is first on PYTHONPATH): CUPTI
activity records through PyTorch's profiler, which sees every kernel of the process, graph
nodes included. ncu serialises kernels and flushes caches; this does neither, so it shows the
gaps between kernels and the real duration of small ones.

    python tools/kernel_timeline.py --shape llama-8b --bits 0 [--steps 8] [--engine ours|plain]
    python tools/kernel_timeline.py ... --prefill         # one 512-token prompt pass instead
    python tools/kernel_timeline.py ... --variants "ops.sdpa.DECODE_MIN_KEYS=16;ops.matmul.GEMV_PER_CU=48"
        # then each variant of planner constants (under mlx_amd.runtime; ',' joins several
        # in one variant) in the same process, plans and programs dropped at each switch

Prints a table (kernels by total time: count, mean, share of the steps' span) and one JSON
line: span per step, kernel time, busy (union of kernel intervals), idle, launches per step.
The profiler adds host time per launch; the GPU-side durations are what to read.
"""

import argparse
import collections
import json
import os
import re
import statistics
import tempfile
import time

os.environ.setdefault("MLX_AMD_AUTO", "0")


def short(name, width=60):
    name = re.sub(r"\(.*", "", name)            # drop C++ argument lists
    name = re.sub(r"^void ", "", name)
    return name if len(name) <= width else name[:width - 3] + "..."


def analyse(events, steps, seq=0):
    ks = sorted((e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")),
                key=lambda e: e["ts"])
    if not ks:
        raise SystemExit("no GPU activity recorded (CUPTI saw nothing)")
    by = collections.defaultdict(list)
    for e in ks:
        tag = short(e["name"]) if e["cat"] == "kernel" else f"[{e['cat']}] {short(e['name'])}"
        by[tag].append(e["dur"])
    span = ks[-1]["ts"] + ks[-1]["dur"] - ks[0]["ts"]
    busy, end = 0.0, ks[0]["ts"]
    gaps = []
    for e in ks:
        s, f = e["ts"], e["ts"] + e["dur"]
        if s > end:
            gaps.append(s - end)
        busy += max(0.0, f - max(s, end))
        end = max(end, f)
    total = sum(e["dur"] for e in ks)
    rows = sorted(((sum(d), len(d), tag) for tag, d in by.items()), reverse=True)
    mid = len(ks) // 2               # a run of launches from the middle: a layer or two in order
    run = [{"name": short(e["name"], 48), "us": round(e["dur"], 2),
            "gap_us": round(e["ts"] - (p["ts"] + p["dur"]), 2)}
           for p, e in zip(ks[mid - 1:mid + seq - 1], ks[mid:mid + seq])] if seq else []
    return {
        "span_us_per_step": round(span / steps, 1), "kernel_us_per_step": round(total / steps, 1),
        "busy_us_per_step": round(busy / steps, 1), "idle_us_per_step": round((span - busy) / steps, 1),
        "launches_per_step": round(len(ks) / steps, 1),
        "gap_median_us": round(statistics.median(gaps), 2) if gaps else 0.0,
        "kernels": [{"name": t, "n_per_step": round(n / steps, 2), "us_per_step": round(s / steps, 1),
                     "mean_us": round(s / n, 2)} for s, n, t in rows],
        "sequence": run,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="llama-1b")
    ap.add_argument("--bits", type=int, default=0)
    ap.add_argument("--steps", type=int, default=8, help="decode steps under the profiler")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--prefill", action="store_true", help="profile one prompt pass (fresh cache)")
    ap.add_argument("--engine", choices=("ours", "plain"), default="ours",
                    help="plain: no mlx-amd (MLX's own backend of the importable MLX)")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--seq", type=int, default=0, metavar="N",
                    help="also list N launches in order from the middle (duration, gap before)")
    ap.add_argument("--variants", default="",
                    help="';'-separated variants of 'module.CONST=value[,...]' (modules under "
                         "mlx_amd.runtime), each profiled after the defaults (mlx-amd only)")
    ap.add_argument("--out", default="", help="also write the JSON here")
    a = ap.parse_args()

    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.zeros(1, device="cuda")            # CUDA up before CUPTI (the primary context)
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    from mlx_amd import llm

    if a.engine == "ours":
        import mlx_amd

        mlx_amd.enable()
    model = llm.random_model(a.shape, "bfloat16", quantize=a.bits)
    cache = make_prompt_cache(model)
    prompt = mx.random.randint(0, model.args.vocab_size, (a.prompt,), key=mx.random.key(1))

    def step(y, c=cache):
        logits = model(y[None], cache=c)
        return mx.argmax(logits[:, -1, :], axis=-1)

    y = step(prompt)
    mx.eval(y)
    for _ in range(12):                         # recordings, replays, graphs, MLX-CUDA's JIT
        y = step(y)
        mx.eval(y)
    for _ in range(4):                          # warm prompt passes (plans and recordings)
        step(prompt, make_prompt_cache(model)).item()

    def decode(y, n):
        for _ in range(n):                      # mlx-lm's pipelining
            ny = step(y)
            mx.async_eval(ny)
            y.item()
            y = ny
        y.item()
        return y

    def measure(y, variant=""):
        t0 = time.perf_counter()
        y = decode(y, 32)
        tok_s = 32 / (time.perf_counter() - t0)
        mx.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            if a.prefill:
                step(prompt, make_prompt_cache(model)).item()
            else:
                y = decode(y, a.steps)
            mx.synchronize()
            torch.cuda.synchronize()
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "trace.json")
            prof.export_chrome_trace(p)
            with open(p) as f:
                events = json.load(f)["traceEvents"]
        res = analyse(events, 1 if a.prefill else a.steps, a.seq)
        return y, {"shape": a.shape, "bits": a.bits, "engine": a.engine, "mlx": mx.__version__,
                   "what": "prefill" if a.prefill else "decode", "variant": variant,
                   "tok_s_unprofiled": round(tok_s, 1), **res}

    y, res = measure(y)
    if a.variants:
        import importlib

        from mlx_amd.runtime.context import get_runtime

        ev = get_runtime().evaluator
        res["variants"] = []
        for v in a.variants.split(";"):
            saved = []
            for assign in v.split(","):
                path, _, val = assign.partition("=")
                mod, _, const = path.strip().rpartition(".")
                m = importlib.import_module("mlx_amd.runtime." + mod)
                saved.append((m, const, getattr(m, const)))
                setattr(m, const, type(getattr(m, const))(val))
            ev.plans.clear()
            ev.drop_programs()
            ev._seen.clear()
            ev._sib_groups.clear()
            for _ in range(8):
                y = step(y)
                mx.eval(y)
            y, r = measure(y, v)
            res["variants"].append(r)
            for m, const, old in saved:
                setattr(m, const, old)
            print(f"variant {v}: span {r['span_us_per_step']} us/step, busy {r['busy_us_per_step']}, "
                  f"unprofiled {r['tok_s_unprofiled']} tok/s; " + ", ".join(
                      f"{k['name'][:28]} {k['mean_us']}" for k in r["kernels"][:6]), flush=True)
    print(f"{a.engine} {a.shape} {'bf16' if not a.bits else f'{a.bits}-bit'} {res['what']}: "
          f"span {res['span_us_per_step']} us/step, kernels {res['kernel_us_per_step']}, busy "
          f"{res['busy_us_per_step']}, idle {res['idle_us_per_step']}, "
          f"{res['launches_per_step']} launches/step, median gap {res['gap_median_us']} us, "
          f"unprofiled {res['tok_s_unprofiled']} tok/s")
    print(f"{'us/step':>9} {'n/step':>7} {'mean us':>8}  kernel")
    for k in res["kernels"][:a.top]:
        print(f"{k['us_per_step']:9.1f} {k['n_per_step']:7.2f} {k['mean_us']:8.2f}  {k['name']}")
    for k in res["sequence"]:
        print(f"  seq {k['us']:8.2f} us  gap {k['gap_us']:6.2f}  {k['name']}")
    line = json.dumps(res)
    print(line, flush=True)
    if a.out:
        with open(a.out, "w") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
