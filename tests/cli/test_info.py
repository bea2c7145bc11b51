"""``mlx-amd info``: without a GPU (as a subprocess), with a fake driver, and kernel coverage."""

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from mlx_amd.cli import app
import mlx_amd.cli.info as info_mod
from mlx_amd.runtime import driver
from mlx_amd.runtime.driver import base

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(*args, **env_over):
    env = {k: v for k, v in os.environ.items() if k != "MLX_AMD_DRIVER"}
    env.update(MLX_AMD_AUTO="0", **env_over)
    return subprocess.run([sys.executable, "-m", "mlx_amd", "info", *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=120)


@pytest.fixture
def no_gpu_here():
    rep = driver.probe()
    driver.reset()
    if rep["selected"] is not None:
        pytest.skip(f"this machine has a usable {rep['selected']} driver")


def test_info_without_gpu_says_so_and_exits_0(no_gpu_here):
    r = _run()
    assert r.returncode == 0, r.stderr
    assert "No usable GPU found" in r.stdout
    assert "hip driver: not loaded" in r.stdout and "cuda driver: not loaded" in r.stdout
    assert "looked in:" in r.stdout and "libamdhip64.so" in r.stdout and "libcuda.so.1" in r.stdout
    assert "Kernels in this installation:" in r.stdout
    assert "Traceback" not in r.stderr


def test_info_json_without_gpu(no_gpu_here, tmp_path):
    r = _run("--json", ROCM_PATH=str(tmp_path))
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["driver"] is None and info["devices"] == []
    recs = {d["name"]: d for d in info["probe"]["drivers"]}
    assert set(recs) == {"hip", "cuda"}
    assert all(not d["loaded"] and d["error"] and d["tried"] for d in recs.values())
    assert f"{tmp_path}/lib: no such directory" in recs["hip"]["tried"]
    assert set(info["kernels"]) >= {"path", "found", "error", "targets"}


def test_bad_driver_name_is_reported_and_fails():
    r = _run(MLX_AMD_DRIVER="metal")
    assert r.returncode == 1 and "MLX_AMD_DRIVER='metal'" in r.stdout and "Traceback" not in r.stderr


def test_info_path_imports_no_mlx():
    """The CLI and the driver package, imported without mlx_amd/__init__.py, never pull in mlx."""
    code = ("import sys, types\n"
            f"m = types.ModuleType('mlx_amd'); m.__path__ = [{REPO!r} + '/mlx_amd']; sys.modules['mlx_amd'] = m\n"
            "from mlx_amd.cli import app\n"
            "try:\n    app(['info', '--json'])\nexcept SystemExit:\n    pass\n"
            "bad = [n for n in sys.modules if n.split('.')[0] in ('mlx', 'numpy')]\n"
            "assert not bad, bad\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120,
                       env={k: v for k, v in os.environ.items() if k != "MLX_AMD_DRIVER"})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["probe"]["drivers"]


# --- a fake GPU driver, in process --------------------------------------------------------------

DEVICES = [("Fake Radeon RX 7900 XTX", "gfx1100", {}, 32, False),
           ("Fake Instinct MI210", "gfx90a", {"sramecc": True, "xnack": False}, 64, False),
           ("Fake Ryzen AI Max+ 395", "gfx1151", {}, 32, True)]


class FakeGpu(base.Driver):
    name, platform, library_path = "hip", "amd", "/opt/rocm-6.4.1/lib/libamdhip64.so"

    def __init__(self):
        self.device = 0

    def device_count(self):
        return len(DEVICES)

    def runtime_version(self):
        return "6.4.43484"

    def driver_version(self):
        return "6.4.43484"

    def rocm_version(self):
        return "6.4.1"

    def set_device(self, d):
        self.device = d

    def mem_info(self):
        return (1 + self.device) << 30, 64 << 30

    def properties(self, i=0):
        name, arch, feats, wave, apu = DEVICES[i]
        full = ":".join([arch] + [f"{k}{'+' if v else '-'}" for k, v in feats.items()])
        return base.DeviceProperties(
            index=i, name=name, arch=arch, arch_full=full, features=feats, wave_size=wave,
            compute_units=96 + i, total_memory=64 << 30, integrated=apu, clock_khz=2_500_000,
            memory_clock_khz=1_250_000, memory_bus_width=384, l2_cache_size=6 << 20,
            max_threads_per_block=1024, max_shared_memory_per_block=65536, managed_memory=True,
            pci_bus_id=f"0000:0{i}:00.0")


@pytest.fixture
def fake_gpu(monkeypatch, tmp_path):
    monkeypatch.delenv("MLX_AMD_DRIVER", raising=False)
    monkeypatch.setitem(driver.FACTORIES, "hip", FakeGpu)
    driver.reset()
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"version": 1, "targets": {
        "gfx11-generic": {"families": {"unary": {"file": "gfx11-generic/unary.co", "kernels": ["a", "b"]},
                                       "copy": {"file": "gfx11-generic/copy.co", "kernels": ["c"]}}},
        "gfx1151": {"families": {"unary": {"file": "gfx1151/unary.co", "kernels": ["a"]}}},
        "gfx90a:xnack+": {"families": {"unary": {"file": "x.co", "kernels": ["a"]}}},
        "sm_90": {"families": {}}}}))
    yield str(manifest)
    driver.reset()


def test_info_with_a_fake_gpu(fake_gpu):
    r = CliRunner().invoke(app, ["info", "--manifest", fake_gpu])
    assert r.exit_code == 0, r.output
    out = r.output
    assert "hip driver: selected (/opt/rocm-6.4.1/lib/libamdhip64.so)" in out
    assert "HIP runtime 6.4.43484, driver 6.4.43484, ROCm 6.4.1" in out
    assert "Devices: 3" in out
    assert "[0] Fake Radeon RX 7900 XTX: gfx1100 (gfx1100), features: none" in out
    assert "wave size 32, 96 CUs, memory 64.0 GiB (1.0 GiB free), discrete" in out
    assert "kernels: yes, target gfx11-generic (2 families, 3 kernels)" in out
    assert "[1] Fake Instinct MI210: gfx90a (gfx90a:sramecc+:xnack-), features: sramecc+, xnack-" in out
    assert "wave size 64" in out and "kernels: NONE for gfx90a" in out   # only an xnack+ build exists
    assert "APU (integrated, shared memory)" in out
    assert "kernels: yes, target gfx1151 (1 families, 1 kernels)" in out   # exact beats generic
    # the matrix-unit backend per arch (gfx11: WMMA, gfx90a: MFMA)
    assert out.count("matrix units: wmma for float16, bfloat16 attention (checked") == 2
    # gfx90a's MFMA also serves the 2-8-row 4-bit matmul (gfx11's WMMA has no backend of it)
    assert "matrix units: mfma for float16, bfloat16 attention and 2-8-row 4-bit matmuls" in out


def test_info_json_with_a_fake_gpu(fake_gpu):
    r = CliRunner().invoke(app, ["info", "--json", "--manifest", fake_gpu])
    assert r.exit_code == 0, r.output
    info = json.loads(r.output)
    assert info["driver"] == "hip" and info["rocm_version"] == "6.4.1"
    devs = info["devices"]
    assert [d["arch"] for d in devs] == ["gfx1100", "gfx90a", "gfx1151"]
    assert [d["kernels"]["available"] for d in devs] == [True, False, True]
    assert [d["matrix_units"]["bfloat16"] for d in devs] == ["wmma", "mfma", "wmma"]
    assert [d["free_memory"] for d in devs] == [1 << 30, 2 << 30, 3 << 30]
    assert devs[1]["features"] == {"sramecc": True, "xnack": False} and devs[2]["integrated"] is True


# --- the manifest, read defensively ------------------------------------------------------------------

def test_manifest_missing_broken_or_odd(tmp_path):
    m = info_mod.read_manifest(tmp_path / "nope.json")
    assert not m["found"] and "no kernel manifest" in m["error"] and m["targets"] == {}
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    m = info_mod.read_manifest(bad)
    assert not m["found"] and "unreadable" in m["error"]
    bad.write_text('{"targets": [1, 2]}')
    assert "no 'targets'" in info_mod.read_manifest(bad)["error"]
    bad.write_text('{"targets": {"gfx942": 5, "gfx1100": {"families": {"u": {"kernels": null}}}}}')
    m = info_mod.read_manifest(bad)
    assert m["found"] and m["targets"] == {"gfx942": {"families": 0, "kernels": 0},
                                           "gfx1100": {"families": 1, "kernels": 0}}
    assert info_mod.coverage(m, "gfx942")["available"] is False
    assert info_mod.coverage(m, "gfx1100")["target"] == "gfx1100"


def test_info_reports_a_missing_manifest(fake_gpu, tmp_path):
    r = CliRunner().invoke(app, ["info", "--manifest", str(tmp_path / "none.json")])
    assert r.exit_code == 0
    assert "Kernels in this installation: none (no kernel manifest at" in r.output
    assert r.output.count("kernels: NONE for") == 3
