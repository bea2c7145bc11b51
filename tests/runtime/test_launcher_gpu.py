"""The launch thread (src/bridge/launcher.h): replays post their launches, and the read-back
and completion event after them, to one worker thread that issues them in order. Results
must equal those of replays that launch themselves, through pipelined asynchronous
evaluations, graphs and eager launches; every driver call that touches the GPU waits for
what was posted; the worker's failure is raised by the next evaluation or synchronize."""

import mlx.core as mx
import numpy as np
import pytest

from mlx_amd.runtime import bridge
from mlx_amd.runtime.driver.base import DriverError

pytestmark = pytest.mark.gpu


@pytest.fixture
def threaded(gpu_runtime):
    ev = gpu_runtime.evaluator
    if not ev.threaded:
        pytest.skip("this driver gives the launch thread no entry points")
    return ev


def _step(x, k):
    # ~60 elementwise launches and a reduction: several eager batches, one graph segment
    for i in range(30):
        x = x * (1.0 + 1e-3 * (i % 3)) + k
    return x, x.sum()


@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "graphs"])
def test_pipelined_steps_equal_launching_replays(threaded, monkeypatch, graphs):
    ev = threaded
    monkeypatch.setattr(ev, "graphs", graphs)
    x0 = mx.array(np.linspace(-1, 1, 4096, dtype=np.float32))
    k = mx.array(np.float32(0.25))
    mx.eval(x0, k)

    def run(on):
        monkeypatch.setattr(ev, "threaded", on)
        out, x = [], x0
        for _ in range(8):             # recorded, then replayed; mlx-lm's pipelining
            nx, s = _step(x, k)
            mx.async_eval(nx, s)
            # (reads that wait for the work: on Python < 3.12 np.array(s) takes the buffer
            # protocol, which cannot be patched and reads the host memory as it is)
            out.append(s.item())
            x = nx
        return out, np.array(x.tolist(), np.float32)

    import mlx_amd

    jobs0 = mlx_amd.stats()["launch_thread"]["jobs"]
    on, x_on = run(True)
    lt = mlx_amd.stats()["launch_thread"]
    assert lt["enabled"] and lt["running"] and lt["jobs"] > jobs0, "no replay posted to the launch thread"
    off, x_off = run(False)
    np.testing.assert_array_equal(x_on, x_off)
    assert on == off
    with mx.stream(mx.cpu):           # and what plain MLX computes
        want, x = [], x0
        for _ in range(8):
            x, s = _step(x, k)
            want.append(np.array(s).item())
    np.testing.assert_allclose(on, want, rtol=1e-5)


def test_driver_calls_wait_for_posted_work(threaded):
    ev = threaded
    x0 = mx.array(np.arange(1 << 16, dtype=np.float32))
    mx.eval(x0)
    for _ in range(4):
        y = x0
        for _ in range(40):
            y = y * 0.5 + 1.0
        mx.async_eval(y)
    # a plain driver call (here a synchronize of the stream) lands behind everything posted
    ev.driver.stream_synchronize(ev.stream)
    assert not bridge.raw.launcher_busy()
    want = np.arange(1 << 16, dtype=np.float32)
    for _ in range(40):
        want = want * 0.5 + 1.0
    np.testing.assert_allclose(np.array(y.tolist(), np.float32), want, rtol=1e-6)


def test_worker_failure_raises_at_the_next_synchronize(threaded):
    ev = threaded
    # an event record on a null handle fails on the worker: the evaluator's next synchronize
    # raises the driver's error for it, once, and evaluations go on
    bridge.raw.launcher_post_record(0, ev.stream.value or 0)
    with pytest.raises(DriverError, match="event_record|EventRecord"):
        mx.synchronize()
    assert bridge.launcher_failure() is None
    x = mx.array(np.ones(256, np.float32)) * 3.0
    assert x.sum().item() == 768.0


def test_switch_reads_env(monkeypatch, gpu_runtime):
    from mlx_amd.runtime.evaluator import LAUNCH_THREAD_ENV

    monkeypatch.setenv(LAUNCH_THREAD_ENV, "2")
    with pytest.raises(ValueError, match=LAUNCH_THREAD_ENV):
        gpu_runtime.evaluator._start_launcher()


def test_a_forked_child_has_no_launch_thread(threaded):
    # only the forking thread survives fork: the child must not wait on the parent's worker
    import os
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)   # (fork with threads running)
        pid = os.fork()
    if pid == 0:
        try:
            ok = not bridge.launcher_stats()["running"]
            bridge.launcher_wait()   # nothing to wait for: returns at once
        except BaseException:
            ok = False
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert bridge.launcher_stats()["running"]
