"""The one parser of the fixed-value environment switches (runtime/switches.py) and the
families that read through it: a bad value raises naming the variable, the value and the
choices; unset or empty is the default; case and surrounding blanks do not matter."""

import pytest

from mlx_amd.runtime import matrix_units, switches
from mlx_amd.runtime.blas import lt
from mlx_amd.runtime.ops import sdpa


def test_choice_normalises_and_defaults():
    vals = ("auto", "im2col")
    assert switches.choice("X", vals, "auto", env={}) == "auto"
    assert switches.choice("X", vals, "auto", env={"X": ""}) == "auto"
    assert switches.choice("X", vals, "auto", env={"X": "  IM2COL "}) == "im2col"
    with pytest.raises(ValueError, match=r"X='gemm': expected one of auto, im2col"):
        switches.choice("X", vals, "auto", env={"X": "gemm"})


@pytest.mark.parametrize("name,read,good,bad", [
    ("MLX_AMD_MATRIX_UNITS", matrix_units.mode, {"1": "1", "": "auto"}, "yes"),
    ("MLX_AMD_SDPA_PREFILL", sdpa.prefill_force, {"Flash": "flash", "auto": ""}, "flsh"),
    ("MLX_AMD_SDPA_DECODE", sdpa._decode_force, {"mma": "mma", "": ""}, "fast"),
    ("MLX_AMD_GEMM_TUNE", lt.tune_mode, {"ALWAYS": "always", "": "repeat"}, "on"),
])
def test_family_switches(monkeypatch, name, read, good, bad):
    for value, want in good.items():
        monkeypatch.setenv(name, value)
        assert read() == want, (name, value)
    monkeypatch.setenv(name, bad)
    with pytest.raises(ValueError, match=f"{name}='{bad}'"):
        read()
