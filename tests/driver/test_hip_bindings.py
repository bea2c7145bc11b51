"""The HIP binding table against Debian's ROCm 6.4 and ROCm 5.7 (headers, libamdhip64), in toolchain chroots."""

import os
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLCHAIN = os.path.join(REPO, "tools", "rocm-toolchain.sh")
CHROOT = os.environ.get("ROCM_CHROOT", "/var/cache/rocm-sid-root")


# (suite, chroot, packages, extra args): Debian sid's ROCm 6.4 (the whole check, GEMM
# libraries included, rocBLAS required) and Debian trixie's ROCm 5.7 (HIP only: trixie has no hipBLASLt)
ROCM57 = ("libamdhip64-dev python3 clang")
RUNTIMES = {
    "rocm-6.4": ("sid", CHROOT, None, ["--require-rocblas"]),
    "rocm-5.7": ("trixie", os.environ.get("ROCM57_CHROOT", "/var/cache/rocm-trixie-root"), ROCM57,
                 ["--no-blas", "--libraries", "report"]),
}


@pytest.mark.rocm
@pytest.mark.parametrize("runtime", list(RUNTIMES))
def test_hip_bindings_match_rocm_headers_and_library(runtime):
    suite, chroot, packages, extra = RUNTIMES[runtime]
    if not os.path.exists(TOOLCHAIN):
        pytest.skip(f"{TOOLCHAIN} is missing: the ROCm toolchain helper is not in this checkout")
    if not os.path.exists(os.path.join(chroot, "usr", "include", "hip", "hip_runtime_api.h")):
        pytest.skip(f"no {runtime} toolchain chroot at {chroot} (create it: ROCM_SUITE={suite} "
                    f"ROCM_CHROOT={chroot} {TOOLCHAIN} setup)")
    if os.geteuid() != 0:
        pytest.skip("the ROCm toolchain chroot needs root")
    env = dict(os.environ, ROCM_CHROOT=chroot, ROCM_SUITE=suite)
    if packages:
        env["ROCM_PACKAGES"] = packages
    r = subprocess.run([TOOLCHAIN, "run", REPO, "python3", "tools/check_hip_bindings.py", *extra],
                       capture_output=True, text=True, timeout=600, env=env)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    lines = out.splitlines()
    assert "OK" in lines
    for section in ("symbols:", "prototypes:", "constants/offsets:"):
        line = next(l for l in lines if l.startswith(section))
        done, total = (int(x) for x in line.split()[1].split("/"))
        # an older runtime may lack a symbol whose fallback row it has (said on the line)
        fallback = int(line.split(", ")[1].split()[0]) if "older-runtime fallback" in line else 0
        assert done + fallback == total and total > 0, line
    assert "device_count: 0" in lines or any(l.startswith("device 0:") for l in lines)
    # our helper libraries (sortlib) load against ROCm 6.x's libamdhip64.so.6
    line = next(l for l in lines if l.startswith("libraries:"))
    if runtime == "rocm-6.4" and "load" in line.split():
        done, total = (int(x) for x in line.split()[1].split("/"))
        assert done == total, out
