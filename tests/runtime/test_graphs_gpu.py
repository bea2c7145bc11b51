"""Replays as CUDA/HIP graphs (src/bridge/graphexec.h): the self-test that decides whether
graphs are used on HIP (MLX_AMD_GRAPHS=auto) runs and passes on the test GPU, and an
mlx-lm decode gives the same tokens with graphs and without."""

import mlx.core as mx
import pytest

from mlx_amd.runtime import bridge

pytestmark = pytest.mark.gpu


def test_graph_selftest_passes_here(gpu_runtime, monkeypatch):
    ev = gpu_runtime.evaluator
    monkeypatch.setattr(ev, "graphs", True)
    before = bridge.graph_stats()
    assert ev.graph_selftest() is True
    assert ev.graphs is True and ev.graphs_selftest is False
    after = bridge.graph_stats()
    assert after["launches"] > before["launches"] and after["failures"] == before["failures"]


@pytest.mark.large
def test_decode_tokens_same_with_and_without_graphs(gpu_runtime, monkeypatch):
    from mlx_amd import llm

    ev = gpu_runtime.evaluator
    # (a llama-1b shape: every node of its decode step has a GPU path, so the replays are
    # graphs; a CPU-fallback node inside a step makes that replay eager)
    model = llm.random_model("llama-1b", "bfloat16", seed=3)
    prompt = mx.random.randint(0, model.args.vocab_size, (24,), key=mx.random.key(2))
    runs = {}
    for mode in (True, False):
        monkeypatch.setattr(ev, "graphs", mode)
        s0 = bridge.graph_stats()["launches"]
        runs[mode] = llm.generate(model, prompt, 16)[0]
        used = bridge.graph_stats()["launches"] - s0
        assert (used > 10) if mode else (used == 0), (mode, used)
    assert runs[True] == runs[False]


@pytest.mark.large
def test_decode_with_the_default_graph_policy_matches_eager(gpu_runtime, monkeypatch):
    # the suite builds graphs at the first replay (conftest); the default waits for two eager
    # replays per program: the same tokens, graphs launched only once programs came back
    from mlx_amd import llm
    from mlx_amd.runtime.evaluator import GRAPH_AFTER

    ev = gpu_runtime.evaluator
    model = llm.random_model("llama-1b", "bfloat16", seed=5)
    prompt = mx.random.randint(0, model.args.vocab_size, (20,), key=mx.random.key(4))
    before = bridge.graph_after()
    bridge.set_graph_after(GRAPH_AFTER)
    try:
        runs = {}
        for mode in (False, True):
            monkeypatch.setattr(ev, "graphs", mode)
            ev.drop_programs()
            s0 = bridge.graph_stats()
            runs[mode] = llm.generate(model, prompt, 16)[0]
            s1 = bridge.graph_stats()
            used = s1["launches"] - s0["launches"]
            if mode:
                assert used > 5 and s1["builds"] > s0["builds"], (s0, s1)
            else:
                assert used == 0
    finally:
        bridge.set_graph_after(before)
    assert runs[True] == runs[False]


def test_graph_segments_compute_what_eager_launches_compute(gpu_runtime, monkeypatch):
    # small segments (3, then at most 7 launches): a replay's ~40 launches become several
    # graphs, each built once and then updated in place with new inputs and buffers; every
    # result bitwise what kernel-by-kernel launches give
    import numpy as np

    ev = gpu_runtime.evaluator
    before = bridge.graph_segments()
    bridge.set_graph_segments(3, 7)

    def f(x):
        for k in range(8):
            x = mx.maximum(mx.sin(x * (1.0 + k)) + x, -x * 0.25)
            x = x - mx.mean(x, axis=-1, keepdims=True)
        return mx.softmax(x, axis=-1), mx.sum(x, axis=0)

    rng = np.random.default_rng(7)
    inputs = [rng.standard_normal((16, 300)).astype(np.float32) for _ in range(6)]
    got = {}
    try:
        for mode in (False, True):
            monkeypatch.setattr(ev, "graphs", mode)
            ev.drop_programs()
            s0 = bridge.graph_stats()
            got[mode] = []
            for v in inputs:    # recorded at the 2nd sighting, replayed from the 3rd
                outs = f(mx.array(v))
                mx.eval(*outs)
                got[mode].append([np.array(o) for o in outs])
            s1 = bridge.graph_stats()
            if mode:
                progs = [p.program for p in ev.programs.values()]
                assert progs and max(p.graph_segments for p in progs) >= 4
                assert s1["node_updates"] > s0["node_updates"] and s1["failures"] == s0["failures"]
                assert s1["launches"] - s0["launches"] >= 4 * 3      # replays 3 to 6, 4+ segments each
    finally:
        bridge.set_graph_segments(*before)
    for a, b in zip(got[False], got[True]):
        for x, y in zip(a, b):
            assert np.array_equal(x, y)
