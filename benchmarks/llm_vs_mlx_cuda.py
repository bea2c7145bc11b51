"""LLM decode and prefill: mlx-amd against MLX's own CUDA backend on the same GPU, same
random-weight models (mlx_amd/llm.py), same prompt, mlx-lm's own generate_step (greedy).

Each engine runs in its own process (they are different libmlx builds):

    PYTHONPATH=<mlx-cuda-13 site>:<repo> python benchmarks/llm_vs_mlx_cuda.py --engine mlx-cuda --part DIR
    python benchmarks/llm_vs_mlx_cuda.py --engine ours --part DIR      # mlx-amd enabled
    python benchmarks/llm_vs_mlx_cuda.py --combine DIR [--out DIR]     # rows with ratios

A host-bound step (llama-1b) moves up to 2x within minutes on a lent machine
(results/decode_noise-h200.txt), so a comparison that must settle a ratio runs rounds:
``--round K`` writes the engine's part as round K, the engines alternate (mlx-cuda r0,
ours r0, mlx-cuda r1, ...: tools/llm-compare.sh), and --combine reports the median over
rounds of each round's median, printing every round's value.

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


def part_name(engine, rnd=None) -> str:
    return f"llm-{engine}.json" if rnd is None else f"llm-{engine}-r{int(rnd)}.json"


def run_engine(engine, shapes, quant, tokens, prompt_len, runs, part_dir, warmup=2, rnd=None):
    import mlx.core as mx
    from mlx.utils import tree_flatten

    from mlx_amd import llm

    if engine == "ours":
        import mlx_amd

        mlx_amd.enable()
    res = {"engine": engine, "mlx": mx.__version__, "models": {}}
    path = os.path.join(part_dir, part_name(engine, rnd))
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


def load_rounds(part_dir, engine) -> dict:
    """{tag: {field: median over rounds, "rounds": [per-round decode tok/s]}} from every
    part of ``engine`` in part_dir (one unnumbered part, or rounds r0, r1, ...)."""
    import glob

    paths = sorted(glob.glob(os.path.join(part_dir, f"llm-{engine}-r*.json")))
    single = os.path.join(part_dir, part_name(engine))
    if not paths and os.path.exists(single):
        paths = [single]
    per_tag: dict = {}
    for p in paths:
        for tag, m in json.load(open(p))["models"].items():
            per_tag.setdefault(tag, []).append(m)
    out = {}
    for tag, ms in per_tag.items():
        o = dict(ms[0])
        for f in ("decode_tok_s", "prefill_tok_s"):
            o[f] = statistics.median(m[f] for m in ms)
        o["rounds"] = [round(m["decode_tok_s"], 1) for m in ms]
        out[tag] = o
    return out


def combine(part_dir, out_dir):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from harness import Bench

    ours = load_rounds(part_dir, "ours")
    peer = load_rounds(part_dir, "mlx-cuda")
    b = Bench("llm_vs_mlx_cuda")
    ref = "MLX 0.32.4 CUDA backend (mlx-cuda-13), same GPU, same run"
    for tag, o in ours.items():
        p = peer.get(tag, {})
        if len(o["rounds"]) > 1 or len(p.get("rounds", ())) > 1:
            print(f"  {tag}: decode per round, ours {o['rounds']}, MLX-CUDA {p.get('rounds')}")
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
    ap.add_argument("--round", type=int, default=None, help="write this engine's part as round K")
    a = ap.parse_args()
    if not a.combine and not a.engine:
        ap.error("say --engine ours|mlx-cuda|plain (one process per engine), or --combine PART_DIR")
    if a.combine:
        combine(a.combine, a.out)
        return
    os.makedirs(a.part, exist_ok=True)
    run_engine(a.engine, a.shapes.split(","), [int(q) for q in a.quant.split(",")], a.tokens, a.prompt,
               a.runs, a.part, a.warmup, a.round)


if __name__ == "__main__":
    main()
