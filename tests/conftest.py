"""Shared test set-up.

Importing mlx_amd must not switch anything on behind a test's back: auto-enable is off
for the test process; tests that want the evaluator ask for the `runtime` fixture.
"""

import os
import sys

os.environ.setdefault("MLX_AMD_AUTO", "0")
# replays become graphs at their first replay here (the default waits for 2), so the suite
# runs the graph path wherever a test replays; test_graph_after_* checks the default policy
os.environ.setdefault("MLX_AMD_GRAPH_AFTER", "0")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/oracle.py

import pytest  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _make_runtime(kind):
    from mlx_amd.runtime import context
    from mlx_amd.runtime.context import Runtime

    if kind == "host":
        from mlx_amd.runtime.driver.host import HostDriver

        return Runtime(HostDriver())
    from mlx_amd.runtime.driver import get_driver

    drv = get_driver()
    if drv.platform == "host":
        pytest.fail("GPU tests need a GPU driver (MLX_AMD_DRIVER=hip|cuda) or the kernel emulator (emu), "
                    "got the host driver")
    if kind == "gpu-unified":  # the APU memory model, on managed memory
        return Runtime(drv, memory_mode="unified")
    return context.get_runtime()


_runtimes = {}


@pytest.fixture(params=["host", pytest.param("gpu", marks=pytest.mark.gpu),
                        pytest.param("gpu-unified", marks=pytest.mark.gpu)])
def runtime(request):
    """The process runtime over the host driver (CI: every node on MLX's CPU fallback) or the
    GPU driver (test machine); installed as the current runtime and enabled for the test."""
    yield from _enabled(request.param)


@pytest.fixture
def host_runtime():
    """Like `runtime`, host driver only: every node through our evaluator on MLX's CPU
    fallback (Graph.eval_cpu)."""
    yield from _enabled("host")


@pytest.fixture(params=[pytest.param("gpu", marks=pytest.mark.gpu)])
def gpu_runtime(request):
    """Like `runtime`, GPU driver only (for what exists only with device memory)."""
    yield from _enabled(request.param)


def _enabled(kind):
    import mlx_amd
    from mlx_amd.runtime import context

    if kind not in _runtimes:
        _runtimes[kind] = _make_runtime(kind)
    rt = _runtimes[kind]
    saved = context._runtime
    context._runtime = rt
    mlx_amd.enable()
    rt.evaluator.stats.reset()
    try:
        yield rt
    finally:
        mlx_amd.disable()
        context._runtime = saved


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """With MLX_AMD_NO_SKIP=1 (set by .ci/run) a skip is a failure: CI has the ROCm chroot
    and nvcc, so every selected test must really run there."""
    outcome = yield
    rep = outcome.get_result()
    if rep.skipped and os.environ.get("MLX_AMD_NO_SKIP") == "1" and not hasattr(rep, "wasxfail"):
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        rep.outcome = "failed"
        rep.longrepr = f"skipped under MLX_AMD_NO_SKIP=1: {reason}"


@pytest.fixture(params=[32, 64], ids=["w32", "w64"])
def wave(request, monkeypatch):
    """Run a test at both wave widths: 64 through the emulated 64-wide wave on a 32-wide
    GPU (the CDNA code paths); plans are cached, so the current runtime's cache is cleared
    around the test."""
    from mlx_amd.runtime import context

    if request.param == 64:
        monkeypatch.setenv("MLX_AMD_WAVE", "64")
    else:
        monkeypatch.delenv("MLX_AMD_WAVE", raising=False)
    rt = context.current()
    if rt is not None:
        rt.evaluator.plans.clear()
    yield request.param
    rt = context.current()
    if rt is not None:
        rt.evaluator.plans.clear()
