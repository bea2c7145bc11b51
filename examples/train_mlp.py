"""An unmodified mlx.nn training loop; the only change is `import mlx_amd`.

    python examples/train_mlp.py            # on the GPU when mlx-amd finds one
    MLX_AMD_AUTO=0 python examples/train_mlp.py   # plain MLX, for comparison

Prints the losses and where the graph's nodes ran (GPU kernels, zero-copy views,
MLX's CPU fallback) per primitive.
"""

import json

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np

import mlx_amd


class MLP(nn.Module):
    def __init__(self, din=32, hidden=128, dout=10):
        super().__init__()
        self.layers = [nn.Linear(din, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, dout)]

    def __call__(self, x):
        for layer in self.layers[:-1]:
            x = nn.gelu(layer(x))
        return self.layers[-1](x)


def main(steps=50):
    mx.random.seed(0)
    rng = np.random.default_rng(0)
    x = mx.array(rng.standard_normal((512, 32)).astype(np.float32))
    y = mx.array(rng.integers(0, 10, 512).astype(np.int32))
    model = MLP()
    opt = optim.AdamW(learning_rate=3e-3)

    def loss_fn(m, a, b):
        return nn.losses.cross_entropy(m(a), b, reduction="mean")

    step = nn.value_and_grad(model, loss_fn)
    for i in range(steps):
        loss, grads = step(model, x, y)
        opt.update(model, grads)
        mx.eval(model.parameters(), opt.state, loss)
        if i % 10 == 0 or i == steps - 1:
            print(f"step {i:3d} loss {loss.item():.5f}")
    print("enabled:", mlx_amd.is_enabled())
    print(json.dumps(mlx_amd.stats(), indent=1))


if __name__ == "__main__":
    main()
