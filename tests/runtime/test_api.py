"""The public switch: import side effects, enable/disable, context manager, transforms."""

import os
import subprocess
import sys

import mlx.core as mx
import numpy as np
import pytest

import mlx_amd


def _python(code, **env):
    e = dict(os.environ)
    e.pop("MLX_AMD_AUTO", None)
    e.pop("MLX_AMD_DRIVER", None)
    e.update(env)
    # run outside the repository so the installed package is what gets imported
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True,
                          timeout=120, cwd=os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.skipif(os.path.exists("/dev/nvidiactl") or os.path.exists("/dev/kfd"),
                    reason="this machine has a GPU: the import would enable it")
def test_import_without_gpu_is_silent_plain_mlx():
    r = _python(
        "import warnings; warnings.simplefilter('error')\n"
        "import mlx.core as mx; ev = mx.eval\n"
        "import mlx_amd\n"
        "assert not mlx_amd.is_enabled() and mx.eval is ev\n"
        "assert mlx_amd.is_available() is False\n"
        "print(mx.array([1, 2]).sum().item())\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "3" and r.stderr == ""


def test_enable_without_a_gpu_says_why():
    r = _python("import mlx_amd\ntry:\n    mlx_amd.enable()\nexcept Exception as e:\n"
                "    print(type(e).__name__, e)\n", MLX_AMD_AUTO="0", MLX_AMD_DRIVER="cuda")
    assert r.returncode == 0, r.stderr
    if os.path.exists("/dev/nvidiactl"):
        pytest.skip("a CUDA driver exists here")
    assert "DriverUnavailable" in r.stdout and "libcuda" in r.stdout


def test_enable_disable_idempotent_and_context_manager(runtime):
    # the fixture enabled it
    assert mlx_amd.is_enabled() and mx.eval is mlx_amd.eval
    assert mlx_amd.enable().was_enabled          # second enable: no-op
    mlx_amd.disable()
    mlx_amd.disable()
    assert not mlx_amd.is_enabled() and mx.eval is not mlx_amd.eval
    with mlx_amd.enable():
        assert mlx_amd.is_enabled()
        y = mx.exp(mx.array([0.0, 1.0]))
        mx.eval(y)
    assert not mlx_amd.is_enabled()
    np.testing.assert_allclose(np.array(y), np.exp([0.0, 1.0]), rtol=1e-6)
    mlx_amd.enable()  # leave it as the fixture expects


def test_vmap_and_vjp_graphs(runtime):
    x = np.random.default_rng(1).standard_normal((6, 5)).astype(np.float32)

    def f(v):
        return mx.tanh(v) * mx.exp(-v * v)

    ours = mx.vmap(f)(mx.array(x))
    _, (vj,) = mx.vjp(f, [mx.array(x)], [mx.ones((6, 5))])
    mx.eval(ours, vj)
    t = np.tanh(x) * np.exp(-x * x)
    np.testing.assert_allclose(np.array(ours), t, rtol=1e-5, atol=1e-6)
    d = (1 - np.tanh(x) ** 2) * np.exp(-x * x) + np.tanh(x) * np.exp(-x * x) * (-2 * x)
    np.testing.assert_allclose(np.array(vj), d, rtol=1e-4, atol=1e-5)


def test_compile_stays_on_while_enabled(runtime):
    calls = []

    @mx.compile
    def g(a):
        calls.append(1)
        return mx.exp(a) + 1

    a = mx.array([0.5, 1.5])
    for _ in range(2):
        r = g(a)
        mx.eval(r)
    # traced once, as in plain MLX; the fused node is evaluated through mlx-amd
    assert len(calls) == 1
    s = mlx_amd.stats()["by_primitive"]
    assert sum(s["Compiled"].values()) == 2
    np.testing.assert_allclose(np.array(r), np.exp([0.5, 1.5]) + 1, rtol=1e-6)
