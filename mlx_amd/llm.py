"""mlx-lm models for examples, tests and `mlx-amd bench`: public model shapes with seeded
random weights (for machines without network), and mlx-lm's own greedy decode loop, timed.
mlx-lm is imported only when a function needs it."""

from __future__ import annotations

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
    # mixtures of experts (mlx-lm's SwitchGLU: GatherMM / GatherQMM nodes)
    "moe-tiny": ("mixtral", dict(model_type="mixtral", vocab_size=512, hidden_size=128, intermediate_size=256,
                                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                 num_local_experts=4, num_experts_per_tok=2, rms_norm_eps=1e-5)),
    "mixtral-8x7b": ("mixtral", dict(model_type="mixtral", vocab_size=32000, hidden_size=4096,
                                     intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                                     num_key_value_heads=8, num_local_experts=8, num_experts_per_tok=2,
                                     rms_norm_eps=1e-5, rope_theta=1e6)),
    # Mistral 7B v0.3: mlx-lm runs "mistral" checkpoints through its llama module
    "mistral-7b": ("llama", dict(model_type="mistral", hidden_size=4096, num_hidden_layers=32, intermediate_size=14336,
                                 num_attention_heads=32, num_key_value_heads=8, rms_norm_eps=1e-5,
                                 vocab_size=32768, rope_theta=1000000.0, tie_word_embeddings=False)),
    # public shapes of other families (Gemma 3 1B: head dim 256, one kv head, 5 of 6 layers on a
    # 512-token sliding window; Phi-3 mini 4k; Qwen2.5 0.5B)
    "gemma3-1b": ("gemma3_text", dict(model_type="gemma3_text", hidden_size=1152, num_hidden_layers=26,
                                      intermediate_size=6912, num_attention_heads=4, num_key_value_heads=1,
                                      head_dim=256, query_pre_attn_scalar=256, vocab_size=262144,
                                      sliding_window=512, sliding_window_pattern=6, rms_norm_eps=1e-6,
                                      rope_theta=1000000.0, rope_local_base_freq=10000.0)),
    "phi3-mini": ("phi3", dict(model_type="phi3", hidden_size=3072, num_hidden_layers=32, intermediate_size=8192,
                               num_attention_heads=32, num_key_value_heads=32, rms_norm_eps=1e-5,
                               vocab_size=32064, rope_theta=10000.0, max_position_embeddings=4096,
                               original_max_position_embeddings=4096)),
    "qwen2.5-0.5b": ("qwen2", dict(model_type="qwen2", hidden_size=896, num_hidden_layers=24, intermediate_size=4864,
                                   num_attention_heads=14, num_key_value_heads=2, rms_norm_eps=1e-6,
                                   vocab_size=151936, rope_theta=1000000.0, tie_word_embeddings=True)),
    # small members of the other families mlx-lm users run (tests: greedy tokens against plain MLX),
    # head dims our attention kernels take (64; 256 with one kv head, as Gemma 3 1B), each family's
    # own twists: Qwen2's q/k/v biases, Qwen3's q/k norms, Gemma 3's sliding-window layers (a
    # rotating KV cache once the window fills) beside global ones, gelu and embedding scaling,
    # Phi-3's fused qkv and gate/up projections, Qwen3-MoE's routed experts
    "qwen2-tiny": ("qwen2", dict(model_type="qwen2", hidden_size=256, num_hidden_layers=2, intermediate_size=512,
                                 num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6,
                                 vocab_size=512, tie_word_embeddings=True)),
    "qwen3-tiny": ("qwen3", dict(model_type="qwen3", hidden_size=128, num_hidden_layers=2, intermediate_size=256,
                                 num_attention_heads=4, num_key_value_heads=2, head_dim=64, rms_norm_eps=1e-6,
                                 vocab_size=512, max_position_embeddings=4096, tie_word_embeddings=True,
                                 rope_theta=1000000.0)),
    "gemma3-tiny": ("gemma3_text", dict(model_type="gemma3_text", hidden_size=128, num_hidden_layers=2,
                                        intermediate_size=256, num_attention_heads=4, num_key_value_heads=2,
                                        head_dim=64, query_pre_attn_scalar=64, vocab_size=512, sliding_window=16,
                                        sliding_window_pattern=2, rms_norm_eps=1e-6)),
    "gemma3-d256-tiny": ("gemma3_text", dict(model_type="gemma3_text", hidden_size=128, num_hidden_layers=2,
                                             intermediate_size=256, num_attention_heads=4, num_key_value_heads=1,
                                             head_dim=256, query_pre_attn_scalar=256, vocab_size=512,
                                             sliding_window=16, sliding_window_pattern=2, rms_norm_eps=1e-6)),
    "phi3-tiny": ("phi3", dict(model_type="phi3", hidden_size=256, num_hidden_layers=2, intermediate_size=512,
                               num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5, vocab_size=512)),
    "qwen3-moe-tiny": ("qwen3_moe", dict(model_type="qwen3_moe", hidden_size=128, num_hidden_layers=2,
                                         intermediate_size=256, num_attention_heads=4, num_key_value_heads=2,
                                         head_dim=64, num_experts=4, num_experts_per_tok=2, decoder_sparse_step=1,
                                         mlp_only_layers=[], moe_intermediate_size=128, rms_norm_eps=1e-6,
                                         vocab_size=512, rope_theta=1000000.0, tie_word_embeddings=False,
                                         max_position_embeddings=4096, norm_topk_prob=True)),
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


def lora_finetune(model, iters: int = 4, batch_size: int = 2, seq_len: int = 48, rank: int = 8,
                  layers: int = 2, lr: float = 1e-3, seed: int = 0, adapter_file: str | None = None):
    """LoRA fine-tuning with mlx-lm's own tuner: ``linear_to_lora_layers`` on the last ``layers``
    blocks, then ``mlx_lm.tuner.trainer.train`` (its ``mx.compile``d step over model, optimizer
    and random state, Adam, a validation pass at the first and last iteration, the adapter
    weights saved) on one batch of seeded random token sequences, so the same model trains on
    the same data whichever engine runs it. Returns (training loss per iteration, validation
    losses, seconds per iteration, the trainable parameters after)."""
    import os
    import tempfile

    import mlx.core as mx
    import mlx.optimizers as optim
    import numpy as np
    from mlx.utils import tree_flatten
    from mlx_lm.tuner.trainer import TrainingArgs, TrainingCallback, train
    from mlx_lm.tuner.utils import linear_to_lora_layers

    model.freeze()
    linear_to_lora_layers(model, layers, {"rank": rank, "scale": 20.0, "dropout": 0.0})
    mx.random.seed(seed)   # the LoRA A matrices above took their values from the seed before it
    rng = np.random.default_rng(seed)
    vocab = model.args.vocab_size
    data = [(rng.integers(1, vocab, seq_len).tolist(), 0) for _ in range(batch_size)]   # (tokens, prompt offset)

    class Record(TrainingCallback):
        def __init__(self):
            self.train, self.val, self.secs = [], [], []

        def on_train_loss_report(self, info):
            self.train.append(float(info["train_loss"]))
            self.secs.append(1.0 / float(info["iterations_per_second"]))

        def on_val_loss_report(self, info):
            self.val.append(float(info["val_loss"]))

    rec = Record()
    with tempfile.TemporaryDirectory() as tmp:
        args = TrainingArgs(batch_size=batch_size, iters=iters, val_batches=1, steps_per_report=1,
                            steps_per_eval=10**9, steps_per_save=10**9, max_seq_length=seq_len + 1,
                            adapter_file=adapter_file or os.path.join(tmp, "adapters.safetensors"))
        np.random.seed(seed)   # iterate_batches shuffles with numpy's global generator
        train(model, optim.Adam(learning_rate=lr), data, data, args=args, training_callback=rec)
    trained = {k: v for k, v in tree_flatten(model.trainable_parameters())}
    mx.eval(list(trained.values()))
    return rec.train, rec.val, rec.secs, trained
