"""LLM decode and prefill: mlx-amd against MLX's own CUDA backend on the same GPU, same
random-weight models (mlx_amd/llm.py), same prompt, mlx-lm's own generate_step (greedy).

Each engine runs in its own process (they are different libmlx builds):

    PYTHONPATH=<mlx-cuda-13 site>:<repo> python benchmarks/llm_vs_mlx_cuda.py --engine mlx-cuda --part DIR
    python benchmarks/llm_vs_mlx_cuda.py --engine ours --part DIR      # mlx-amd enabled
    python benchmarks/llm_vs_mlx_cuda.py --combine DIR [--out DIR]     # rows with ratios

Decode = tokens after the first over the time after the first (median of --runs runs),
prefill = prompt tokens over the time to the first token. Each run starts with a fresh KV
cache; --warmup generations first (MLX-CUDA JIT-compiles its kernels there; mlx-amd records
a graph at its second sighting and replays it from the third, so the default of two puts both
engines in their steady state).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("MLX_AMD_AUTO", "0")


def run_engine(engine, shapes, quant, tokens, prompt_len, runs, part_dir, warmup=2):
    import mlx.core as mx
    from mlx.utils import tree_flatten

    from mlx_amd import llm

    if engine == "ours":
        import mlx_amd

        mlx_amd.enable()
    res = {"engine": engine, "mlx": mx.__version__, "models": {}}
    path = os.path.join(part_dir, f"llm-{engine}.json")
    for shape in shapes:
        for bits in quant:
            tag = f"{shape} {'bf16' if not bits else f'{bits}-bit g64'}"
            print(f"[{engine}] {tag}: building", flush=True)
            t0 = time.perf_counter()
            model = llm.random_model(shape, "bfloat16", quantize=bits)
            wbytes = sum(v.nbytes for _, v in tree_flatten(model.parameters()))
            prompt = mx.random.randint(0, model.args.vocab_size, (prompt_len,), key=mx.random.key(1))
            mx.eval(prompt)
            t1 = time.perf_counter()
            for _ in range(warmup):                                     # JIT, plans, recordings
                llm.generate(model, prompt, 8)
            t2 = time.perf_counter()
            dec, pre, first = [], [], None
            for _ in range(runs):
                toks, ttft, rest = llm.generate(model, prompt, tokens)
                dec.append((len(toks) - 1) / rest)
                pre.append(prompt.size / ttft)
                first = first or toks
            res["models"][tag] = {
                "decode_tok_s": statistics.median(dec), "prefill_tok_s": statistics.median(pre),
                "weight_bytes": wbytes, "build_s": t1 - t0, "warmup_s": t2 - t1,
                "first_tokens": first[:16], "prompt": prompt_len, "tokens": tokens}
            print(f"[{engine}] {tag}: decode {statistics.median(dec):.1f} tok/s, prefill "
                  f"{statistics.median(pre):.0f} tok/s, warm-up {t2 - t1:.1f} s", flush=True)
            with open(path, "w") as f:
                json.dump(res, f, indent=1)
            del model
            mx.clear_cache()
    return path


def combine(part_dir, out_dir):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from harness import Bench

    ours = json.load(open(os.path.join(part_dir, "llm-ours.json")))["models"]
    peer_path = os.path.join(part_dir, "llm-mlx-cuda.json")
    peer = json.load(open(peer_path))["models"] if os.path.exists(peer_path) else {}
    b = Bench("llm_vs_mlx_cuda")
    ref = "MLX 0.32.4 CUDA backend (mlx-cuda-13), same GPU, same run"
    for tag, o in ours.items():
        p = peer.get(tag, {})
        b.row(f"decode {tag}", o["decode_tok_s"], "tok/s", ref, p.get("decode_tok_s"))
        b.row(f"prefill {tag} ({o['prompt']} tokens)", o["prefill_tok_s"], "tok/s", ref, p.get("prefill_tok_s"))
        b.row(f"decode {tag} vs bandwidth bound", o["decode_tok_s"], "tok/s",
              "weight bytes / device copy bandwidth", b.roofline_gbps * 1e9 / o["weight_bytes"])
        if p and p.get("first_tokens") != o.get("first_tokens"):
            print(f"  note: {tag}: first tokens differ from MLX-CUDA's: {o['first_tokens']} vs {p['first_tokens']}")
    print(b.write(out_dir))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", choices=("ours", "mlx-cuda", "plain"))
    ap.add_argument("--combine", metavar="PART_DIR")
    ap.add_argument("--part", default="/tmp/llm-parts")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    ap.add_argument("--shapes", default="llama-1b,llama-8b")
    ap.add_argument("--quant", default="0", help="comma list of bits: 0 = bf16, 4 = 4-bit g64")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--prompt", type=int, default=512, help="prompt tokens (issue 9 measures prefill at 512)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=2)
    a = ap.parse_args()
    if not a.combine and not a.engine:
        ap.error("say --engine ours|mlx-cuda|plain (one process per engine), or --combine PART_DIR")
    if a.combine:
        combine(a.combine, a.out)
        return
    os.makedirs(a.part, exist_ok=True)
    run_engine(a.engine, a.shapes.split(","), [int(q) for q in a.quant.split(",")], a.tokens, a.prompt,
               a.runs, a.part, a.warmup)


if __name__ == "__main__":
    main()
