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

from mlx_amd.llm import SHAPES, generate, random_model

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
