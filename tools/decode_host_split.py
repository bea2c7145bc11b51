"""Where a decode step's host time goes, without a profiler: mlx-lm's own generate loop on a
random-weight model, timing what mlx-amd's mx.async_eval / mx.eval and the token reads
(array.item) take per token against the whole step (the rest is mlx-lm building the graph).

    python tools/decode_host_split.py [--shape llama-1b] [--tokens 256] [--bits 0] [--null]

--null: the host driver with no-op kernels (tools/profile_engine.py): our host cost alone.
PERF_CTL=<fifo>: writes 'enable' / 'disable' around the timed loop, for
`perf record -D -1 --control=fifo:<fifo>,<ack>` (the loop without model set-up).
"""

import argparse
import os
import time

os.environ.setdefault("MLX_AMD_AUTO", "0")
from llm_args import model_args, null_args, start_null  # noqa: E402  (tools/: the script's own folder)


def main():
    ap = argparse.ArgumentParser()
    model_args(ap)
    ap.add_argument("--tokens", type=int, default=256)
    null_args(ap, cus=132)
    a = ap.parse_args()
    start_null(a)
    import mlx.core as mx

    import mlx_amd
    from mlx_amd import llm

    mlx_amd.enable()
    model = llm.random_model(a.shape, "bfloat16", quantize=a.bits)
    prompt = mx.random.randint(0, model.args.vocab_size, (a.prompt,), key=mx.random.key(1))
    llm.generate(model, prompt, 8)
    spent = {"async_eval": 0.0, "eval": 0.0, "item": 0.0}

    def timed(name, fn):
        def call(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - t
        return call

    saved = {n: getattr(mx, n) for n in ("async_eval", "eval")}
    saved_item = mx.array.item
    for n, f in saved.items():
        setattr(mx, n, timed(n, f))
    mx.array.item = timed("item", saved_item)
    ctl = os.environ.get("PERF_CTL")
    try:
        if ctl:
            with open(ctl, "w") as f:
                f.write("enable\n")
        t = time.perf_counter()
        toks, _, _ = llm.generate(model, prompt, a.tokens)
        wall = time.perf_counter() - t
        if ctl:
            with open(ctl, "w") as f:
                f.write("disable\n")
    finally:
        for n, f in saved.items():
            setattr(mx, n, f)
        mx.array.item = saved_item
    n = len(toks)
    per = {k: v / n * 1e3 for k, v in spent.items()}
    print(f"{a.shape} {'4-bit' if a.bits == 4 else 'bf16'}{' (null runtime)' if a.null else ''}, "
          f"{n} tokens, ms per token (prompt pass included once): whole {wall / n * 1e3:.3f}; "
          f"async_eval {per['async_eval']:.3f}, eval {per['eval']:.3f}, token reads {per['item']:.3f}; "
          f"the rest (mlx-lm) {wall / n * 1e3 - sum(per.values()):.3f}")


if __name__ == "__main__":
    main()
