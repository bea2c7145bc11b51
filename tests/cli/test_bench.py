"""`mlx-amd bench`: the standard LLM set runs end to end (host driver, the tiny shape) and
writes its rows in the results schema."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("mlx_lm", reason="mlx-lm is a test dependency ('.[test]')")


def test_bench_writes_rows_in_the_results_schema(tmp_path):
    out = tmp_path / "llm.json"
    env = dict(os.environ, MLX_AMD_DRIVER="host")
    r = subprocess.run([sys.executable, "-m", "mlx_amd", "bench", "--shapes", "tiny", "--tokens", "4",
                        "--plain-tokens", "2", "--json", str(out)], env=env, cwd=str(tmp_path),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "llm_decode" and doc["command"]
    names = [row["name"] for row in doc["rows"]]
    assert names == ["decode tiny bf16 vs bandwidth bound", "decode tiny bf16",
                     "prefill tiny bf16 (16 vs 128 tokens)"]
    for row in doc["rows"]:
        assert set(row) == {"name", "value", "unit", "reference", "reference_value", "ratio"}
        assert row["value"] > 0 and row["reference_value"] > 0
        assert row["ratio"] == pytest.approx(row["value"] / row["reference_value"])


def test_llm_compare_rounds_take_the_median_of_round_medians(tmp_path):
    """benchmarks/llm_vs_mlx_cuda.py --round: every round's part is kept, --combine reads
    the median over rounds (a host-bound step moves 2x between minutes on a lent machine)."""
    import importlib.util
    import json
    import os

    path = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "llm_vs_mlx_cuda.py")
    spec = importlib.util.spec_from_file_location("llm_vs_mlx_cuda", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    base = {"weight_bytes": 1, "prompt": 512, "tokens": 128, "first_tokens": [1, 2]}
    for r, (dec, pre) in enumerate(((221.0, 26000.0), (451.0, 31000.0), (487.0, 27000.0))):
        m = dict(base, decode_tok_s=dec, prefill_tok_s=pre)
        (tmp_path / mod.part_name("ours", r)).write_text(json.dumps({"models": {"llama-1b bf16": m}}))
    got = mod.load_rounds(str(tmp_path), "ours")["llama-1b bf16"]
    assert got["decode_tok_s"] == 451.0 and got["prefill_tok_s"] == 27000.0
    assert got["rounds"] == [221.0, 451.0, 487.0]
    # an unnumbered part alone (the single-run form) is one round
    m = dict(base, decode_tok_s=400.0, prefill_tok_s=30000.0)
    (tmp_path / mod.part_name("mlx-cuda")).write_text(json.dumps({"models": {"llama-1b bf16": m}}))
    assert mod.load_rounds(str(tmp_path), "mlx-cuda")["llama-1b bf16"]["rounds"] == [400.0]
    assert mod.load_rounds(str(tmp_path / "none"), "ours") == {}


def test_result_files_are_named_after_the_card_that_ran():
    """A benchmark run on a lent H100 must not land in a file named for the H200."""
    from mlx_amd.bench import device_tag_of

    assert device_tag_of("NVIDIA H100 80GB HBM3") == "h100"
    assert device_tag_of("NVIDIA H200") == "h200"
    assert device_tag_of("AMD Instinct MI300X") == "mi300x"
    assert device_tag_of("AMD Radeon RX 7900 XTX") == "7900"
    assert device_tag_of("host (no-op kernels)") == "gpu"
