"""Where a decode step's host time goes: mlx-lm's generate_step on a random-weight model
under cProfile, with mlx-amd enabled, plus the per-step node count and replay statistics.

    python tools/profile_decode.py [--shape llama-1b] [--tokens 16] [--bits 0]
    python tools/profile_decode.py --prefill ...   # the time to the first token instead
"""

import argparse
import collections
import cProfile
import os
import pstats
import time

os.environ.setdefault("MLX_AMD_AUTO", "0")
from llm_args import model_args, null_args, start_null  # noqa: E402  (tools/: the script's own folder)


def main():
    ap = argparse.ArgumentParser()
    model_args(ap)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--top", type=int, default=35)
    ap.add_argument("--sort", default="tottime", help="pstats order: tottime, cumulative, ...")
    ap.add_argument("--no-profile", action="store_true", help="time only")
    ap.add_argument("--prefill", action="store_true",
                    help="profile five prompts' time to the first token (fresh caches) instead")
    null_args(ap)
    a = ap.parse_args()
    start_null(a)
    import mlx.core as mx

    import mlx_amd
    from mlx_amd import llm
    from mlx_amd.runtime.context import get_runtime

    mlx_amd.enable()
    ev = get_runtime().evaluator
    model = llm.random_model(a.shape, "bfloat16", quantize=a.bits)
    prompt = mx.random.randint(0, model.args.vocab_size, (a.prompt,), key=mx.random.key(1))
    llm.generate(model, prompt, 8)
    mlx_amd.stats(reset=True)
    r0, p0 = ev.replays, ev.replay_python
    import collections as _c

    py_prims = _c.Counter()
    orig_node = ev._node

    def counting(g, metas, i, prim, *rest):
        if getattr(metas, "g", None) is not None:     # called back by a replay
            py_prims[prim] += 1
        return orig_node(g, metas, i, prim, *rest)

    ev._node = counting
    pr = cProfile.Profile()
    t = time.perf_counter()
    if not a.no_profile:
        pr.enable()
    if a.prefill:
        ttfts = [llm.generate(model, prompt, 1)[1] for _ in range(5)]
        pr.disable()
        print(f"{a.shape}: time to first token of a {prompt.size}-token prompt, five runs: "
              + ", ".join(f"{x * 1e3:.2f}" for x in ttfts) + " ms")
        if not a.no_profile:
            pstats.Stats(pr).sort_stats(a.sort).print_stats(a.top)
        print("nodes a replay handed back to Python:", py_prims.most_common(12))
        return
    toks, ttft, rest = llm.generate(model, prompt, a.tokens)
    pr.disable()
    wall = time.perf_counter() - t
    st = mlx_amd.stats()
    by = collections.Counter({p: sum(c.values()) for p, c in st["by_primitive"].items()})
    print(f"{a.shape}: {len(toks)} tokens in {wall:.2f} s (decode {(len(toks) - 1) / rest:.1f} tok/s"
          f"{'' if a.no_profile else ' under the profiler'}); evaluations {st['evals']}, replays {ev.replays - r0} "
          f"({ev.replay_python - p0} nodes of them through Python), nodes {st['nodes']}")
    print("nodes by primitive:", by.most_common(20))
    print("plans cached:", len(ev.plans))
    print("nodes a replay handed back to Python:", py_prims.most_common(12))
    if not a.no_profile:
        pstats.Stats(pr).sort_stats(a.sort).print_stats(a.top)


if __name__ == "__main__":
    main()
