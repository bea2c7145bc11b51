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
