"""Compile and run a small C++ program against hip_kernels/include with the host compiler:
how the plan tests check their argument packers against the C structs (sizeof, offsetof)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

INCLUDE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "hip_kernels", "include")


def probe_output(source: str, workdir) -> str:
    """stdout of ``source`` compiled with g++/c++ -std=c++17 -I hip_kernels/include and run
    (the test skips without a host compiler; CI's MLX_AMD_NO_SKIP turns that into a failure)."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no host C++ compiler to check the argument structs with")
    src, exe = os.path.join(str(workdir), "probe.cpp"), os.path.join(str(workdir), "probe")
    with open(src, "w") as f:
        f.write(source)
    subprocess.run([cxx, "-std=c++17", "-I", INCLUDE, src, "-o", exe], check=True)
    return subprocess.run([exe], check=True, capture_output=True, text=True).stdout
