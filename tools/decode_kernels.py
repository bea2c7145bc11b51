"""The kernels one decode step launches, by name and count, without a GPU: mlx-lm's model on
the null runtime (tools/profile_engine.py: the host driver, kernel launches as no-ops), node by
node so that every launch resolves its kernel by name.

    python tools/decode_kernels.py [--shape llama-1b] [--bits 0] [--steps 10]

Compiled functions (mlx-lm's swiglu) run their tapes node by node here, as there is no run-time
compiler on the host driver; on a GPU each is one fused kernel.
"""

import argparse
import collections
import ctypes
import os
import sys

os.environ.setdefault("MLX_AMD_AUTO", "0")
os.environ["MLX_AMD_REPLAY"] = "0"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llm_args import model_args  # noqa: E402  (tools/: the script's own folder)


def main():
    ap = argparse.ArgumentParser()
    model_args(ap)
    ap.add_argument("--steps", type=int, default=10)
    a = ap.parse_args()

    import profile_engine

    rt, _ = profile_engine.make_runtime()
    counts = collections.Counter()

    class Counting:
        def function(self, family, name):
            counts[name] += 1
            return ctypes.c_void_p(1)

    rt.modules = rt.evaluator.modules = Counting()
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    import mlx_amd
    from mlx_amd import llm

    mlx_amd.enable()
    model = llm.random_model(a.shape, "bfloat16", quantize=a.bits)
    cache = make_prompt_cache(model)
    prompt = mx.random.randint(0, model.args.vocab_size, (a.prompt,), key=mx.random.key(1))

    def step(y):
        return mx.argmax(model(y[None], cache=cache)[:, -1, :], axis=-1)

    y = step(prompt)
    mx.eval(y)
    for _ in range(4):
        y = step(y)
        mx.eval(y)
    counts.clear()
    for _ in range(a.steps):
        y = step(y)
        mx.eval(y)
    print(f"{a.shape} {'bf16' if not a.bits else f'{a.bits}-bit'}: "
          f"{sum(counts.values()) / a.steps:.1f} launches per decode step")
    for name, n in counts.most_common():
        print(f"{n / a.steps:7.1f}  {name}")


if __name__ == "__main__":
    main()
