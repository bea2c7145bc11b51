"""Which primitives still take MLX's CPU fallback: a broad corpus of our own MLX programs
(ops across mlx.core, mlx.nn layers, losses, optimizers, compiled functions, random) run
with mlx-amd enabled, counting nodes per primitive and path.

    python benchmarks/fallback_probe.py [--out DIR]

Prints the primitives that fell back (count) and writes <out>/fallback_probe-h200.json with
one row per primitive seen: its GPU share of nodes (1.0: never fell back).
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import mlx.core as mx  # noqa: E402
import mlx.nn as nn  # noqa: E402
import mlx.optimizers as optim  # noqa: E402

import mlx_amd  # noqa: E402


def corpus():
    """(name, thunk) pairs; each thunk builds and evaluates one small program."""
    k = mx.random.key(0)
    a = mx.random.normal((33, 65), key=k)
    b = mx.random.normal((65, 17), key=mx.random.key(1))
    i = mx.random.randint(0, 33, (9,), key=mx.random.key(2))
    ints = mx.random.randint(-50, 50, (33, 65), key=mx.random.key(3))
    progs = {
        "unary": lambda: [f(a) for f in (mx.exp, mx.log1p, mx.sin, mx.tanh, mx.sigmoid, mx.erf, mx.abs,
                                         mx.floor, mx.sqrt, mx.rsqrt, mx.square, mx.sign, mx.negative)],
        "binary": lambda: [a + 1, a * a, a / 3, a - a.T.T, mx.maximum(a, 0), mx.power(mx.abs(a), 1.5),
                           mx.arctan2(a, a + 1), mx.logaddexp(a, a), a > 0, a == a, mx.remainder(a, 0.7)],
        "integers": lambda: [ints // 7, ints % 7, ints << 2, ints >> 1, ints & 5, ints | 3, ints ^ 9,
                             mx.divmod(ints, 7), ~ints, ints.astype(mx.float16)],
        "dtypes": lambda: [a.astype(d) * 2 for d in (mx.float16, mx.bfloat16, mx.int8, mx.uint16,
                                                      mx.int64, mx.float64, mx.complex64)],
        "reductions": lambda: [mx.sum(a), mx.mean(a, 0), mx.max(a, 1), mx.min(a, keepdims=True),
                               mx.prod(a[:4, :4]), mx.all(a > -9), mx.any(a > 9), mx.argmax(a, 1),
                               mx.argmin(a, 0), mx.var(a, 1), mx.std(a), mx.logsumexp(a, 1)],
        "softmax_scan": lambda: [mx.softmax(a, 1), mx.softmax(a, 0, precise=True), mx.cumsum(a, 1),
                                 mx.cumprod(a[:, :8], 0), mx.cummax(a, 1), mx.logcumsumexp(a, 1)],
        "layout": lambda: [mx.concatenate([a, a], 0), mx.stack([a, a]), mx.pad(a, 2), mx.where(a > 0, a, -a),
                           mx.arange(100), mx.split(a, 5, 1), mx.tile(a[:2, :3], (2, 2)), mx.repeat(a[:2], 2, 0),
                           mx.flip(a, 0), mx.roll(a, 3, 1), mx.tril(a), mx.triu(a), mx.eye(7),
                           mx.linspace(0, 1, 11), mx.full((3, 3), 2.5), mx.zeros_like(a)],
        "indexing": lambda: [a[i], mx.take(a, i, 1), mx.take_along_axis(a, mx.argsort(a, 1), 1),
                             a.at[i].add(1.0), mx.put_along_axis(a, mx.argmax(a, 1, keepdims=True),
                                                                  mx.array(0.0), 1), a[2:30:3, ::-2]],
        "slice_update": lambda: (lambda x: (x.__setitem__((slice(1, 4), slice(2, 9)), 0.0), x)[1])(mx.array(a)),
        "sort": lambda: [mx.sort(a, 1), mx.argsort(a, 0), mx.partition(a, 3, 1), mx.argpartition(a, 5, 0),
                         mx.topk(a, 4, 1)],
        "matmul": lambda: [a @ b, mx.addmm(mx.ones((33, 17)), a, b, alpha=0.5, beta=2.0),
                           mx.matmul(a[None], b[None]), (a @ b).T @ a, mx.outer(a[0], a[1]),
                           mx.inner(a, a), mx.einsum("ij,jk->ik", a, b), mx.tensordot(a, b, 1)],
        "random": lambda: [mx.random.normal((100,)), mx.random.uniform(shape=(7, 7)),
                           mx.random.bernoulli(0.3, (50,)), mx.random.categorical(a), mx.random.permutation(10)],
        "compiled": lambda: [mx.compile(lambda x, y: nn.silu(x) * y)(a, a), mx.compile(nn.gelu_approx)(a)],
    }

    def mlp_step():
        model = nn.Sequential(nn.Linear(65, 32), nn.ReLU(), nn.Linear(32, 10))
        opt = optim.AdamW(1e-3)
        y = mx.random.randint(0, 10, (33,), key=mx.random.key(4))

        def loss(m):
            return nn.losses.cross_entropy(m(a), y, reduction="mean")

        lg = nn.value_and_grad(model, loss)
        out = []
        for _ in range(3):
            l, g = lg(model)
            opt.update(model, g)
            out.append(l)
        return out + [model.parameters()]

    def layers():
        x = mx.random.normal((2, 8, 16, 16), key=k)
        conv = nn.Conv2d(8, 4, 3, padding=1)
        ln, rms = nn.LayerNorm(16), nn.RMSNorm(16)
        att = nn.MultiHeadAttention(16, 4)
        emb = nn.Embedding(100, 16)
        t = mx.random.normal((2, 5, 16), key=k)
        return [conv(x.transpose(0, 2, 3, 1)), ln(t), rms(t), att(t, t, t), emb(mx.array([[1, 2, 3]])),
                nn.Dropout(0.5)(t), nn.GELU()(t), nn.losses.mse_loss(t, t * 2), nn.losses.l1_loss(t, -t),
                mx.fast.rms_norm(t, mx.ones((16,)), 1e-5), mx.fast.layer_norm(t, None, None, 1e-5),
                mx.fast.rope(t[:, None], 16, traditional=False, base=10000.0, scale=1.0, offset=0),
                mx.fast.scaled_dot_product_attention(t[:, None], t[:, None], t[:, None], scale=0.25)]

    progs["mlp_training"] = mlp_step
    progs["nn_layers"] = layers
    return progs


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    args = ap.parse_args(argv)
    if not mlx_amd.is_enabled():
        mlx_amd.enable()
    mlx_amd.stats(reset=True)
    failed = []
    for name, thunk in corpus().items():
        try:
            mx.eval(thunk())
        except Exception as e:   # a program that fails is a finding too; keep probing
            failed.append((name, f"{type(e).__name__}: {e}"))
            traceback.print_exc()
    st = mlx_amd.stats()["by_primitive"]
    rows = []
    fell_back = {p: c["cpu"] for p, c in st.items() if c.get("cpu")}
    for p, c in sorted(st.items()):
        total = sum(c.values())
        share = (total - c.get("cpu", 0)) / total
        rows.append({"name": f"{p} nodes off the CPU fallback", "value": share, "unit": "fraction",
                     "reference": "all nodes of the primitive", "reference_value": 1.0, "ratio": share})
    print(f"primitives seen: {len(st)}; on MLX's CPU fallback: {fell_back or 'none'}")
    for name, err in failed:
        print(f"program {name} failed: {err}")
    try:
        from mlx_amd.runtime.context import get_runtime

        device = get_runtime().props.name
    except Exception:
        device = "unknown"
    import datetime
    import json

    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "fallback_probe-h200.json")
    with open(path, "w") as f:
        json.dump({"benchmark": "fallback_probe", "device": device,
                   "command": "python benchmarks/fallback_probe.py", "date": datetime.date.today().isoformat(),
                   "fallback_counts": fell_back, "failed_programs": failed, "rows": rows}, f, indent=1)
    print(path)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
