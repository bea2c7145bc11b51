"""LLM prefill and decode through mlx-lm's own loop, mlx-amd against plain MLX in the same
run, and against the bandwidth bound (weight bytes read per token over the device copy
bandwidth).

    python benchmarks/llm_decode.py [--out DIR] [--shapes llama-1b] [--tokens 64]

Random-weight models of public shapes (examples/generate.py), bf16, 128-token random prompt,
greedy. Decode = tokens after the first over the time after the first. Writes
<out>/llm_decode-h200.json.
"""

from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))

import mlx.core as mx  # noqa: E402
from mlx.utils import tree_flatten  # noqa: E402

import generate as gen  # noqa: E402
import mlx_amd  # noqa: E402
from harness import Bench  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--shapes", default="llama-1b")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--plain-tokens", type=int, default=4, help="plain MLX (CPU) is slow: fewer tokens (0: skip)")
    ap.add_argument("--plain-prompt", type=int, default=16, help="prompt tokens for the plain MLX reference")
    args = ap.parse_args(argv)
    b = Bench("llm_decode")
    for shape in args.shapes.split(","):
        model = gen.random_model(shape, "bfloat16")
        weight_bytes = sum(v.nbytes for _, v in tree_flatten(model.parameters()))
        prompt = mx.random.randint(0, model.args.vocab_size, (128,), key=mx.random.key(1))
        gen.generate(model, prompt, 4)                       # warm-up: plans, uploads, JIT
        toks, ttft, rest = gen.generate(model, prompt, args.tokens)
        decode = (len(toks) - 1) / rest
        prefill = prompt.size / ttft
        st = mlx_amd.stats()
        cpu = {p: c["cpu"] for p, c in st["by_primitive"].items() if c.get("cpu")}
        print(f"{shape}: decode {decode:.1f} tok/s, prefill {prefill:.0f} tok/s (TTFT {ttft:.3f} s); "
              f"CPU-fallback nodes {cpu or 'none'}", flush=True)
        bound = b.roofline_gbps * 1e9 / weight_bytes          # tokens/s if only weights were read
        b.row(f"decode {shape} bf16 vs bandwidth bound", decode, "tok/s",
              "weight bytes / device copy bandwidth", bound)
        b.write(args.out)                                     # kept if the slow reference is cut short
        if args.plain_tokens > 1:
            # plain MLX on the CPU is slow for these shapes: a short prompt and few tokens
            short = prompt[: args.plain_prompt]
            mlx_amd.disable()
            try:
                ptoks, pttft, prest = gen.generate(model, short, args.plain_tokens)
            finally:
                mlx_amd.enable()
            b.row(f"decode {shape} bf16", decode, "tok/s", "plain MLX 0.32.4 CPU, same run",
                  (len(ptoks) - 1) / prest if len(ptoks) > 1 else None)
            b.row(f"prefill {shape} bf16 ({args.plain_prompt} vs 128 tokens)", prefill, "tok/s",
                  "plain MLX 0.32.4 CPU, same run", short.size / pttft)
        del model
    print(b.write(args.out))


if __name__ == "__main__":
    main()
