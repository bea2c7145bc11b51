"""LLM prefill and decode through mlx-lm's own loop, mlx-amd against plain MLX in the same
run, and against the bandwidth bound (weight bytes read per token over the device copy
bandwidth).

    python benchmarks/llm_decode.py [--out DIR] [--shapes llama-1b] [--tokens 64]

Random-weight models of public shapes (mlx_amd/llm.py; the same set as `mlx-amd bench`), bf16, 128-token random prompt,
greedy. Decode = tokens after the first over the time after the first. Writes
<out>/llm_decode-h200.json.
"""

from __future__ import annotations

import argparse
import os

from mlx_amd.bench import Bench, llm_decode

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--shapes", default="llama-1b")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--plain-tokens", type=int, default=4, help="plain MLX (CPU) is slow: fewer tokens (0: skip)")
    ap.add_argument("--plain-prompt", type=int, default=16, help="prompt tokens for the plain MLX reference")
    args = ap.parse_args(argv)
    b = Bench("llm_decode")
    llm_decode(b, args.shapes.split(","), args.tokens, args.plain_tokens, args.plain_prompt, out_dir=args.out)
    print(b.write(args.out))


if __name__ == "__main__":
    main()
