"""Long-generation stability through mlx-lm's own loop, mlx-amd enabled:

    python benchmarks/llm_stability.py [--shape llama-1b] [--bits 4] [--tokens 10000] [--out DIR]
    python benchmarks/llm_stability.py --null ...   # no GPU: host driver, no-op kernels

* memory: active and peak pool memory, live buffers, cached plans and programs every
  1,000 decode tokens; each row's reference is the value after the first 1,000 tokens
  (ratio 1.0 = flat);
* Ctrl-C: a KeyboardInterrupt raised inside generation (SIGALRM) leaves the process usable:
  the next generation gives the same tokens as before the interrupt;
* out of memory: a batch of prompts too large for the pool's memory limit raises MemoryError
  naming the size asked and the pool state, and the next, smaller prompt works.
Writes <out>/llm_stability-<device>.json (with --null: -host).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

os.environ.setdefault("MLX_AMD_AUTO", "0")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tools"))
from llm_args import model_args, null_args, start_null  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    model_args(ap, bits=4, prompt=None)
    ap.add_argument("--tokens", type=int, default=10000)
    ap.add_argument("--every", type=int, default=1000)
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    null_args(ap)
    a = ap.parse_args()
    start_null(a)
    import mlx.core as mx
    from mlx_lm.generate import generate_step

    import mlx_amd
    from mlx_amd import llm
    from mlx_amd.bench import Bench
    from mlx_amd.runtime import bridge
    from mlx_amd.runtime.context import get_runtime

    b = Bench("llm_stability") if not a.null else None
    mlx_amd.enable()
    rt = get_runtime()
    ev, pool = rt.evaluator, rt.residency.device_pool
    model = llm.random_model(a.shape, "bfloat16", quantize=a.bits)
    prompt = mx.random.randint(0, model.args.vocab_size, (128,), key=mx.random.key(1))
    tag = f"{a.shape} {'bf16' if not a.bits else f'{a.bits}-bit g64'}"
    rows = []

    def row(name, value, unit, reference, ref_value, lower_is_better=True):
        r = {"name": name, "value": value, "unit": unit, "reference": reference, "reference_value": ref_value,
             "ratio": (ref_value / value if lower_is_better else value / ref_value) if value and ref_value else None}
        rows.append(r)
        print(f"  {name:52s} {value:12.4g} {unit:6s} ref {ref_value}", flush=True)

    # --- memory over a long generation ------------------------------------------------------
    samples = []
    t0 = time.perf_counter()
    for i, (tok, _) in enumerate(generate_step(prompt, model, max_tokens=a.tokens)):
        n = i + 1
        if n % a.every == 0:
            mx.synchronize()
            samples.append((n, pool.get_active_memory(), pool.get_peak_memory(), bridge.live()[0],
                            len(ev.plans), len(ev.programs)))
            print(f"{n} tokens ({time.perf_counter() - t0:.1f} s): active {samples[-1][1] / 2**20:.1f} MiB, "
                  f"peak {samples[-1][2] / 2**20:.1f} MiB, live buffers {samples[-1][3]}, "
                  f"plans {samples[-1][4]}, programs {samples[-1][5]}", flush=True)
    # mlx-lm's KV cache grows by design (in steps of 256 positions): what it holds is taken
    # out, so a flat row means nothing else grew
    args = model.args
    heads = getattr(args, "num_key_value_heads", None) or args.num_attention_heads
    hd = getattr(args, "head_dim", None) or args.hidden_size // args.num_attention_heads
    per_pos = 2 * args.num_hidden_layers * heads * hd * 2      # k and v, bfloat16

    def kv(n):
        return -(-(prompt.size + n) // 256) * 256 * per_pos

    first = samples[0]
    for n, act, peak, live, plans, progs in samples:
        row(f"active memory minus KV cache {tag} after {n} tokens", (act - kv(n)) / 2**20, "MiB",
            f"after {first[0]} tokens, same run", (first[1] - kv(first[0])) / 2**20)
        row(f"live buffers {tag} after {n} tokens", live, "count", f"after {first[0]} tokens, same run", first[3])
    n, act, peak, live, plans, progs = samples[-1]
    row(f"peak memory {tag} over {n} tokens", peak / 2**20, "MiB", f"after {first[0]} tokens, same run",
        first[2] / 2**20)

    # --- Ctrl-C inside generation ---------------------------------------------------------------
    def tokens(k):
        return [int(t) for t, _ in generate_step(prompt, model, max_tokens=k)]

    before = tokens(16)

    def alarm(*_):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, alarm)
    interrupted = False
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        try:
            tokens(100000)
        except KeyboardInterrupt:
            interrupted = True
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    after = tokens(16)
    # (--null runs no kernels: tokens are garbage there, only "it still runs" is checked)
    same = after == before or (a.null and len(after) == len(before))
    ok = interrupted and same
    print(f"Ctrl-C: interrupted {interrupted}, the next generation gives the same tokens: {same}")
    row(f"generation after Ctrl-C {tag} gives the same tokens", float(ok), "bool",
        "1.0: usable and unchanged", 1.0, lower_is_better=False)

    # --- a prompt too large for the memory limit ------------------------------------------------
    limit = pool.set_memory_limit(pool.get_active_memory() + (256 << 20))
    err = ""
    try:
        big = mx.random.randint(0, model.args.vocab_size, (64, 4096), key=mx.random.key(3))
        mx.eval(model(big))
    except MemoryError as e:
        err = str(e)
    finally:
        pool.set_memory_limit(limit)
    print(f"oversized prompt: {'MemoryError: ' + err[:300] if err else 'no MemoryError'}")
    again = tokens(16)
    ok = bool(err) and "bytes" in err and (again == before or (a.null and len(again) == len(before)))
    row(f"oversized prompt {tag} raises MemoryError, next prompt works", float(ok), "bool",
        "1.0: MemoryError naming the size, then the same tokens", 1.0, lower_is_better=False)

    import datetime
    import json

    doc = {"benchmark": "llm_stability", "device": rt.props.name if not a.null else "host (no-op kernels)",
           "command": " ".join(["python", os.path.relpath(sys.argv[0])] + sys.argv[1:]),
           "date": datetime.date.today().isoformat(), "rows": rows}
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, f"llm_stability-{'host' if a.null else 'h200'}.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    print(path)
    del b


if __name__ == "__main__":
    main()
