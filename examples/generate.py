"""Generate text with an mlx-lm model through mlx-amd, using mlx-lm's own decode loop.

    python examples/generate.py --model mlx-community/Llama-3.2-1B-Instruct-4bit --prompt "hello"
    python examples/generate.py --random-weights llama-1b --prompt-tokens 128 --max-tokens 128
    python examples/generate.py --random-weights tiny --plain      # plain MLX, for comparison

``--model`` is a local path or a Hugging Face repo id (needs network); ``--random-weights``
builds a model of that shape from a config with seeded random weights, for machines
without network. Prints the text (or token ids), prompt and decode tokens/s, time to first
token and peak GPU memory.
"""

from __future__ import annotations

import argparse
import time

# name -> (mlx-lm model module, ModelArgs fields); shapes of the public checkpoints
SHAPES = {
    "tiny": ("llama", dict(model_type="llama", hidden_size=128, num_hidden_layers=2, intermediate_size=256,
                           num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5, vocab_size=512)),
    "llama-1b": ("llama", dict(model_type="llama", hidden_size=2048, num_hidden_layers=16, intermediate_size=8192,
                               num_attention_heads=32, num_key_value_heads=8, rms_norm_eps=1e-5,
                               vocab_size=128256, rope_theta=500000.0, tie_word_embeddings=True)),
    "llama-8b": ("llama", dict(model_type="llama", hidden_size=4096, num_hidden_layers=32, intermediate_size=14336,
                               num_attention_heads=32, num_key_value_heads=8, rms_norm_eps=1e-5,
                               vocab_size=128256, rope_theta=500000.0, tie_word_embeddings=False)),
    "qwen3-0.6b": ("qwen3", dict(model_type="qwen3", hidden_size=1024, num_hidden_layers=28, intermediate_size=3072,
                                 num_attention_heads=16, num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-6,
                                 vocab_size=151936, rope_theta=1000000.0, max_position_embeddings=40960,
                                 tie_word_embeddings=True)),
}


def random_model(name: str, dtype: str = "bfloat16", seed: int = 0, quantize: int = 0):
    """An mlx-lm model of a known shape with seeded random weights."""
    import importlib

    import mlx.core as mx
    import mlx.nn as nn

    module, fields = SHAPES[name]
    mod = importlib.import_module(f"mlx_lm.models.{module}")
    mx.random.seed(seed)
    model = mod.Model(mod.ModelArgs.from_dict(fields))
    # small weights keep the random model's logits well scaled through many layers
    model.update(nn.utils.tree_map(lambda w: w * 0.5 if isinstance(w, mx.array) else w, model.parameters()))
    model.set_dtype(getattr(mx, dtype))
    if quantize:
        nn.quantize(model, group_size=64, bits=quantize)
    mx.eval(model.parameters())
    return model


def generate(model, prompt, max_tokens: int):
    """(tokens, seconds to first token, seconds for the rest) with mlx-lm's generate_step
    (greedy)."""
    from mlx_lm.generate import generate_step

    tokens, t0 = [], time.perf_counter()
    first = None
    for tok, _ in generate_step(prompt, model, max_tokens=max_tokens):
        tokens.append(int(tok))
        if first is None:
            first = time.perf_counter()
    end = time.perf_counter()
    return tokens, first - t0, end - first


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="local path or Hugging Face repo id")
    src.add_argument("--random-weights", choices=sorted(SHAPES), help="a model of this shape, random weights")
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    ap.add_argument("--quantize", type=int, default=0, choices=(0, 4, 8), help="quantize random weights")
    ap.add_argument("--prompt", default=None, help="text prompt (needs the model's tokenizer)")
    ap.add_argument("--prompt-tokens", type=int, default=128, help="random prompt length (random weights)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--plain", action="store_true", help="plain MLX (no mlx-amd), for comparison")
    args = ap.parse_args(argv)

    import mlx.core as mx

    import mlx_amd

    if args.plain:
        mlx_amd.disable()
    elif not mlx_amd.is_enabled():
        mlx_amd.enable()
    tokenizer = None
    if args.model:
        from mlx_lm import load

        model, tokenizer = load(args.model)
    else:
        model = random_model(args.random_weights, args.dtype, quantize=args.quantize)
    if args.prompt is not None:
        if tokenizer is None:
            raise SystemExit("--prompt needs a model with a tokenizer (--model); use --prompt-tokens")
        prompt = mx.array(tokenizer.encode(args.prompt))
    else:
        vocab = model.args.vocab_size
        prompt = mx.random.randint(0, vocab, (args.prompt_tokens,), key=mx.random.key(1))
    tokens, ttft, rest = generate(model, prompt, args.max_tokens)
    text = tokenizer.decode(tokens) if tokenizer is not None else " ".join(map(str, tokens))
    print(text)
    n = len(tokens)
    print(f"prompt: {prompt.size} tokens, {prompt.size / ttft:.1f} tokens/s (time to first token {ttft:.3f} s)")
    if n > 1:
        print(f"decode: {n - 1} tokens, {(n - 1) / rest:.1f} tokens/s")
    if mlx_amd.is_enabled():
        print(f"peak GPU memory: {mlx_amd.get_peak_memory() / 2**30:.2f} GiB")
        st = mlx_amd.stats()
        cpu = {p: c["cpu"] for p, c in st["by_primitive"].items() if c.get("cpu")}
        print(f"nodes: {st['nodes']}; on MLX's CPU fallback: {cpu or 'none'}")


if __name__ == "__main__":
    main()
