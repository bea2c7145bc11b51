"""The HIP binding table against Debian's ROCm 6.4 (headers, libamdhip64), in the toolchain chroot."""

import os
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLCHAIN = os.path.join(REPO, "tools", "rocm-toolchain.sh")
CHROOT = os.environ.get("ROCM_CHROOT", "/var/cache/rocm-sid-root")


@pytest.mark.rocm
def test_hip_bindings_match_rocm_headers_and_library():
    if not os.path.exists(TOOLCHAIN):
        pytest.skip(f"{TOOLCHAIN} is missing: the ROCm toolchain helper is not in this checkout")
    if not os.path.exists(os.path.join(CHROOT, "usr", "include", "hip", "hip_runtime_api.h")):
        pytest.skip(f"no ROCm toolchain chroot at {CHROOT} (create it: {TOOLCHAIN} setup; or set ROCM_CHROOT)")
    if os.geteuid() != 0:
        pytest.skip("the ROCm toolchain chroot needs root")
    r = subprocess.run([TOOLCHAIN, "run", REPO, "python3", "tools/check_hip_bindings.py"],
                       capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    lines = out.splitlines()
    assert "OK" in lines
    for section in ("symbols:", "prototypes:", "constants/offsets:"):
        line = next(l for l in lines if l.startswith(section))
        done, total = line.split()[1].split("/")
        assert done == total and int(total) > 0, line
    assert "device_count: 0" in lines or any(l.startswith("device 0:") for l in lines)
