"""LoRA fine-tuning with mlx-lm's own trainer through mlx-amd (its compiled training step,
Adam, a validation pass, the adapter weights saved), on a random-weight model of a public
shape and one batch of seeded random tokens (no network needed).

    python examples/lora.py                                  # tiny model, mlx-amd enabled
    python examples/lora.py --shape llama-1b --dtype bfloat16 --iters 10
    python examples/lora.py --compare                        # plain MLX on the same model and data too

Prints each iteration's training loss and time, and where the step's graph nodes ran (GPU
kernels, zero-copy views, MLX's CPU fallback, per primitive for the fallback).
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("MLX_AMD_AUTO", "0")


def main(argv=None):
    import mlx_amd
    from mlx_amd.llm import SHAPES, lora_finetune, random_model

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="tiny", choices=sorted(SHAPES))
    ap.add_argument("--dtype", default="float32", choices=("bfloat16", "float16", "float32"))
    ap.add_argument("--quantize", type=int, default=0, choices=(0, 4, 8), help="QLoRA: quantized base weights")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--layers", type=int, default=2, help="blocks (from the last) that get LoRA adapters")
    ap.add_argument("--compare", action="store_true", help="also run plain MLX on the same model and data")
    a = ap.parse_args(argv)

    def run(engine):
        model = random_model(a.shape, a.dtype, seed=1, quantize=a.quantize)
        return lora_finetune(model, iters=a.iters, batch_size=a.batch, seq_len=a.seq, rank=a.rank,
                             layers=a.layers, seed=1)

    results = {}
    if a.compare:
        results["plain MLX"] = run("plain")
    if not mlx_amd.is_available():
        print("mlx-amd: no usable GPU here; running on MLX's CPU fallback through mlx-amd's evaluator")
    mlx_amd.enable()
    mlx_amd.stats(reset=True)
    results["mlx-amd"] = run("mlx-amd")
    st = mlx_amd.stats()
    mlx_amd.disable()

    print(f"\n{a.shape} {a.dtype}{f' {a.quantize}-bit' if a.quantize else ''}: LoRA rank {a.rank} on "
          f"{a.layers} blocks, batch {a.batch} x {a.seq} tokens")
    for name, (train, val, secs, _) in results.items():
        steps = ", ".join(f"{loss:.4f} ({s * 1e3:.0f} ms)" for loss, s in zip(train, secs))
        print(f"  {name:10s} train loss per iteration: {steps}; validation {', '.join(f'{v:.4f}' for v in val)}")
    n = st["nodes"]
    print(f"  mlx-amd nodes: {n['gpu']} GPU, {n['view']} views, {n['cpu']} on MLX's CPU fallback")
    cpu = {k: v["cpu"] for k, v in st["by_primitive"].items() if v.get("cpu")}
    if cpu:
        print("  fallback by primitive:", ", ".join(f"{k} {v}" for k, v in sorted(cpu.items())))


if __name__ == "__main__":
    main()
