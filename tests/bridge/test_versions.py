"""The bridge refuses an MLX other than 0.32.4 and a foreign nanobind ABI, clearly."""

import os
import shutil
import subprocess
import sys
import textwrap

import mlx.core as mx
import pytest

from mlx_amd.runtime import bridge


def test_versions_of_this_build():
    v = bridge.versions()
    assert v["mlx_runtime"] == v["mlx_compiled"] == bridge.MLX_VERSION
    assert v["mlx_runtime"] == mx.__version__
    assert v["nanobind"].startswith("3.0.")
    bridge.check_versions(v)  # no complaint
    assert bridge.probe(mx.array([1, 2]))


@pytest.mark.parametrize("field,value", [
    ("mlx_runtime", "0.33.0"), ("mlx_compiled", "0.31.1"), ("nanobind", "2.15.0")])
def test_version_mismatch_message(field, value):
    v = dict(bridge.versions(), **{field: value})
    with pytest.raises(ImportError) as err:
        bridge.check_versions(v)
    msg = str(err.value)
    assert "mlx==0.32.4" in msg and "mlx-cpu==0.32.4" in msg and "nanobind 3.0.x" in msg
    assert value in msg  # names what it found


def test_abi_mismatch_message():
    def foreign_probe(a):
        raise TypeError("probe(): incompatible function arguments. The following "
                        "argument types are supported: (a: mlx.core.array) -> bool")

    with pytest.raises(ImportError) as err:
        bridge.check_abi(foreign_probe, mx.array(0))
    msg = str(err.value)
    assert "nanobind" in msg and "mlx==0.32.4" in msg and "incompatible" in msg
    bridge.check_abi(bridge.probe, mx.array(0))  # the real one converts


def test_compiled_module_refuses_another_libmlx(tmp_path):
    """Interpose mlx::core::version() so libmlx reports 0.33.0: the import must fail."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler to build the version shim")
    src = tmp_path / "shim.cpp"
    src.write_text(textwrap.dedent("""
        namespace mlx::core { const char* version() { return "0.33.0"; } }
    """))
    shim = tmp_path / "libshim.so"
    subprocess.run([cxx, "-shared", "-fPIC", "-o", str(shim), str(src)], check=True)
    env = dict(os.environ, LD_PRELOAD=str(shim), PYTHONPATH=os.pathsep.join(sys.path))
    code = ("import mlx_amd.runtime.bridge\n")
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert res.returncode != 0
    assert "ImportError" in res.stderr
    assert "0.33.0" in res.stderr and "mlx==0.32.4" in res.stderr
