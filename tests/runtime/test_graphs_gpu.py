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
