"""build_kernels.py on a tiny project of its own (two families, one header, one table).

The NVIDIA target (nvcc, present here and on the GPU machine) exercises compiling,
the manifest, incremental rebuilds, the cache and the check; the AMD path runs in
the ROCm chroot when there is one (``rocm`` marker).
"""

import importlib.util
import json
import re
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHROOT = os.environ.get("ROCM_CHROOT", "/var/cache/rocm-sid-root")


def _load_build_kernels():
    spec = importlib.util.spec_from_file_location("build_kernels_under_test", REPO / "build_kernels.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


bk = _load_build_kernels()

HEADER = """#pragma once
#ifdef __HIP__
#include <hip/hip_runtime.h>
#endif
#define TINY_GLOBAL extern "C" __global__
"""
# alpha: a template instantiated through the generated .inc; beta: a plain kernel, no .inc.
ALPHA = """#include "tiny/tiny.h"
template <typename T> __device__ void scale(T* x, T a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}
#include "alpha.inc"
"""
BETA = """#include "tiny/tiny.h"
TINY_GLOBAL void beta_fill(float* x, float v) { x[threadIdx.x] = v; }
#include "beta.inc"
"""
TABLE = '''
ALPHA_TYPES = {types!r}
EXTRA = {extra!r}
def families():
    return ["alpha", "beta"]
def kernel_names(family):
    if family == "alpha":
        return ["alpha_scale_" + t for t in ALPHA_TYPES] + EXTRA
    return ["beta_fill"]
def instantiation_source(family):
    if family != "alpha":
        return ""
    return "".join('TINY_GLOBAL void alpha_scale_%s(%s* x, %s a, int n) {{ scale(x, a, n); }}\\n' % (t, t, t)
                   for t in ALPHA_TYPES)
'''


def write_table(root, types=("float",), extra=()):
    (root / "mlx_amd" / "runtime" / "kernel_table.py").write_text(TABLE.format(types=list(types), extra=list(extra)))


@pytest.fixture
def tiny(tmp_path):
    root = tmp_path / "proj"
    (root / "hip_kernels" / "include" / "tiny").mkdir(parents=True)
    (root / "mlx_amd" / "runtime").mkdir(parents=True)
    (root / "hip_kernels" / "include" / "tiny" / "tiny.h").write_text(HEADER)
    (root / "hip_kernels" / "alpha.hip").write_text(ALPHA)
    (root / "hip_kernels" / "beta.hip").write_text(BETA)
    write_table(root)
    return root


def project(root, cache=None, **kw):
    return bk.Project(root=root, out_dir=root / "mlx_amd" / "kernels", cache_dir=cache, jobs=2,
                      verbose=False, **kw)


def manifest(root):
    return json.loads((root / "mlx_amd" / "kernels" / "manifest.json").read_text())


def needs_nvcc():
    try:
        bk.find_nvidia()
    except bk.BuildError as e:
        pytest.skip(str(e))


# ----------------------------------------------------------------------------- target selection

def test_select_targets_filters():
    assert bk.select_targets(None, "all", False) == list(bk.AMD_ARCHS) + list(bk.NVIDIA_TARGETS)
    assert bk.select_targets(None, "nvidia", False) == ["sm_90"]
    assert bk.select_targets(None, "amd", False) == list(bk.AMD_ARCHS)
    assert set(bk.GENERIC_ARCHS) <= set(bk.select_targets(None, "amd", True))
    assert bk.select_targets("gfx1100,gfx942", "all", False) == ["gfx1100", "gfx942"]
    assert bk.select_targets("gfx1100,sm_90", "nvidia", False) == ["sm_90"]
    assert bk.select_targets(" gfx1103 ,gfx1103", "all", False) == ["gfx1103"]  # any arch the compiler knows


@pytest.mark.parametrize("arch, target, msg", [
    ("gfx1100", "nvidia", "no nvidia target"),
    ("rx7900", "all", "unknown target 'rx7900'"),
    (",", "all", "--arch is empty"),
])
def test_select_targets_errors(arch, target, msg):
    with pytest.raises(bk.BuildError, match=msg):
        bk.select_targets(arch, target, False)


def test_code_object_versions_and_outputs():
    assert bk.amd_code_object_version("gfx1100") == 5
    assert bk.amd_code_object_version("gfx11-generic") == 6
    assert bk.outputs_for("unary", "gfx90a") == {"file": "gfx90a/unary.co"}
    assert bk.outputs_for("unary", "sm_90") == {"file": "sm_90/unary.cubin", "ptx": "sm_90/unary.ptx"}
    amd = bk.compile_argv("gfx942", "f", Path("/s/f.hip"), [Path("/i")], Path("/o"))
    assert len(amd) == 1 and "--offload-arch=gfx942" in amd[0] and "-mcode-object-version=5" in amd[0]
    assert "--no-gpu-bundle-output" in amd[0]


def test_missing_amd_toolchain_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    for v in ("ROCM_PATH", "HIP_PATH"):
        monkeypatch.delenv(v, raising=False)
    if os.access("/opt/rocm/bin/hipcc", os.X_OK):
        pytest.skip("/opt/rocm/bin/hipcc exists on this machine")
    monkeypatch.setenv("ROCM_CHROOT", str(tmp_path / "no-chroot"))
    with pytest.raises(bk.BuildError, match="no AMD toolchain.*--target nvidia"):
        bk.find_amd(None)


def test_table_family_without_source_is_an_error(tiny):
    (tiny / "hip_kernels" / "beta.hip").unlink()
    with pytest.raises(bk.BuildError, match=r"lists \['beta'\].*beta.hip"):
        project(tiny).families()


def test_table_failures_become_build_errors(tiny, capsys):
    (tiny / "mlx_amd" / "runtime" / "kernel_table.py").write_text(
        TABLE.format(types=["float"], extra=[]) + "def instantiation_source(family):\n    return {}[family]\n")
    with pytest.raises(bk.BuildError, match=r"kernel_table.instantiation_source\('alpha'\) failed: KeyError"):
        project(tiny).instantiation("alpha")
    (tiny / "mlx_amd" / "runtime" / "kernel_table.py").write_text("def families(:\n")
    assert bk.main(["--root", str(tiny), "--target", "nvidia", "-q"]) == 1
    assert "cannot load" in capsys.readouterr().err


# ----------------------------------------------------------------------------- NVIDIA builds

def test_build_manifest_incremental_and_cache(tiny, tmp_path):
    needs_nvcc()
    cache = tmp_path / "cache"
    cache.mkdir()
    rep = bk.build(project(tiny, cache), ["sm_90"])
    assert sorted(rep.built) == ["sm_90/alpha", "sm_90/beta"] and not rep.failed
    assert rep.seconds["sm_90"] > 0
    m = manifest(tiny)
    assert m["version"] == 1 and set(m["sources"]) == {"alpha", "beta"}
    assert "release" in m["compilers"]["nvidia"]
    fams = m["targets"]["sm_90"]["families"]
    assert m["targets"]["sm_90"]["kind"] == "nvidia"
    assert fams["alpha"]["kernels"] == ["alpha_scale_float"] and fams["beta"]["kernels"] == ["beta_fill"]
    for e in fams.values():
        assert bk.sha256_file(tiny / "mlx_amd" / "kernels" / e["file"]) == e["sha256"]
        assert bk.sha256_file(tiny / "mlx_amd" / "kernels" / e["ptx"]) == e["ptx_sha256"]
    assert (tiny / "build" / "kernels" / "gen" / "beta.inc").read_text() == ""   # written even when empty
    assert bk.check(project(tiny)) == []

    # Nothing changed: nothing compiles.
    rep = bk.build(project(tiny, cache), ["sm_90"])
    assert rep.built == [] and sorted(rep.up_to_date) == ["sm_90/alpha", "sm_90/beta"]

    # A source change rebuilds that family only.
    with open(tiny / "hip_kernels" / "beta.hip", "a") as f:
        f.write("// touched\n")
    rep = bk.build(project(tiny, cache), ["sm_90"])
    assert rep.built == ["sm_90/beta"] and rep.up_to_date == ["sm_90/alpha"]

    # A table change alters alpha's generated .inc: alpha only, with the new kernel listed and present.
    write_table(tiny, types=("float", "double"))
    rep = bk.build(project(tiny, cache), ["sm_90"])
    assert rep.built == ["sm_90/alpha"] and rep.up_to_date == ["sm_90/beta"]
    assert manifest(tiny)["targets"]["sm_90"]["families"]["alpha"]["kernels"] == \
        ["alpha_scale_double", "alpha_scale_float"]

    # A header change rebuilds every family.
    with open(tiny / "hip_kernels" / "include" / "tiny" / "tiny.h", "a") as f:
        f.write("// touched\n")
    rep = bk.build(project(tiny, cache), ["sm_90"])
    assert sorted(rep.built) == ["sm_90/alpha", "sm_90/beta"]

    # A clean clone with the same cache restores every object without compiling.
    assert bk.main(["--root", str(tiny), "--clean", "-q"]) == 0
    assert not (tiny / "mlx_amd" / "kernels" / "sm_90").exists()
    assert not (tiny / "mlx_amd" / "kernels" / "manifest.json").exists()
    rep = bk.build(project(tiny, cache), ["sm_90"])
    assert rep.built == [] and sorted(rep.cached) == ["sm_90/alpha", "sm_90/beta"]
    assert bk.check(project(tiny)) == []

    # A damaged output is noticed and rebuilt (from the cache).
    (tiny / "mlx_amd" / "kernels" / "sm_90" / "beta.cubin").write_bytes(b"junk")
    rep = bk.build(project(tiny, cache), ["sm_90"])
    assert rep.cached == ["sm_90/beta"] and rep.built == []


def test_compile_error_names_command_and_compiler_output(tiny, capsys):
    needs_nvcc()
    assert bk.main(["--root", str(tiny), "--target", "nvidia", "-j", "2", "-q"]) == 0
    (tiny / "hip_kernels" / "beta.hip").write_text(BETA + "this is not C++;\n")
    assert bk.main(["--root", str(tiny), "--target", "nvidia", "-j", "2", "-q"]) == 1
    err = capsys.readouterr().err
    assert "sm_90/beta: compiler exit" in err
    assert "command: " in err and "nvcc" in err and "beta.hip" in err
    assert re.search(r"\| .*beta\.hip.*error", err)        # the compiler's own diagnostic
    assert "sm_90/alpha" not in err
    # The manifest stops vouching for the failed object, and check says so.
    fams = manifest(tiny)["targets"]["sm_90"]["families"]
    assert "beta" not in fams and "alpha" in fams
    assert not (tiny / "mlx_amd" / "kernels" / "sm_90" / "beta.cubin").exists()
    assert bk.main(["--root", str(tiny), "check", "-q"]) == 1
    assert "sm_90: no object for family beta" in capsys.readouterr().err


def test_check_reports_missing_kernels(tiny, capsys):
    needs_nvcc()
    write_table(tiny, extra=["alpha_ghost"])   # listed in the table, never instantiated
    assert bk.main(["--root", str(tiny), "--arch", "sm_90", "-q"]) == 1
    err = capsys.readouterr().err
    assert "sm_90/alpha: missing kernels in sm_90/alpha.cubin: alpha_ghost" in err
    assert "sm_90/alpha: missing kernels in sm_90/alpha.ptx: alpha_ghost" in err
    # The table changes under a finished build: check compares the manifest with the table.
    write_table(tiny)
    assert bk.main(["--root", str(tiny), "--arch", "sm_90", "-q"]) == 0
    write_table(tiny, types=("float", "int"))
    assert bk.main(["--root", str(tiny), "check", "-q"]) == 1
    assert "differs from kernel_table.kernel_names('alpha') (stale build?): missing [alpha_scale_int], extra []" \
        in capsys.readouterr().err


def test_a_partial_build_checks_its_own_targets_and_notes_stale_others(tiny, capsys):
    needs_nvcc()
    assert bk.main(["--root", str(tiny), "--arch", "sm_90", "-q"]) == 0
    # Another target built earlier (here: sm_90's files under another name) that this run leaves alone.
    kdir = tiny / "mlx_amd" / "kernels"
    m = manifest(tiny)
    (kdir / "sm_80").mkdir()
    for fam, e in m["targets"]["sm_90"]["families"].items():
        for role in ("file", "ptx"):
            (kdir / e[role].replace("sm_90", "sm_80")).write_bytes((kdir / e[role]).read_bytes())
            e[role] = e[role].replace("sm_90", "sm_80")
    m["targets"]["sm_80"] = m["targets"]["sm_90"]
    (kdir / "manifest.json").write_text(json.dumps(m))
    write_table(tiny, types=("float", "double"))       # sm_80 is now stale
    assert bk.main(["--root", str(tiny), "--arch", "sm_90"]) == 0
    assert "note: kept targets sm_80 are stale" in capsys.readouterr().out
    assert "sm_80" in manifest(tiny)["targets"]                  # still listed while its files are intact
    assert bk.main(["--root", str(tiny), "check", "-q"]) == 1
    assert "sm_80/alpha: missing kernels in sm_80/alpha.cubin: alpha_scale_double" in capsys.readouterr().err


def test_list_and_clean_one_target(tiny, capsys):
    needs_nvcc()
    assert bk.main(["--root", str(tiny), "--list", "--target", "nvidia"]) == 0
    out = capsys.readouterr().out
    assert "families: alpha, beta" in out and "to build: alpha, beta" in out
    assert bk.main(["--root", str(tiny), "--target", "nvidia", "-q"]) == 0
    assert bk.main(["--root", str(tiny), "--list", "--target", "nvidia"]) == 0
    assert "sm_90            up to date" in capsys.readouterr().out
    assert bk.main(["--root", str(tiny), "--clean", "--arch", "sm_90", "-q"]) == 0
    assert "sm_90" not in manifest(tiny)["targets"]
    assert not (tiny / "mlx_amd" / "kernels" / "sm_90").exists()


def test_family_outside_the_table_takes_kernels_from_the_object(tiny):
    needs_nvcc()
    (tiny / "hip_kernels" / "gamma.hip").write_text(
        '#include "tiny/tiny.h"\nTINY_GLOBAL void gamma_a(float* x) { x[0] = 1; }\n'
        'TINY_GLOBAL void gamma_b(float* x) { x[1] = 2; }\n')
    bk.build(project(tiny), ["sm_90"])
    assert manifest(tiny)["targets"]["sm_90"]["families"]["gamma"]["kernels"] == ["gamma_a", "gamma_b"]


# ----------------------------------------------------------------------------- the real table

def test_real_kernel_table_is_consistent_with_the_sources():
    proj = bk.Project(root=REPO, out_dir=REPO / "mlx_amd" / "kernels", verbose=False)
    families = proj.families()            # raises if the table names a family without a .hip
    for fam in proj.table_families():
        names = proj.table_kernels(fam)
        assert names and len(names) == len(set(names)), fam
        text = proj.instantiation(fam) + (REPO / "hip_kernels" / f"{fam}.hip").read_text()
        missing = [n for n in names if n not in text]
        assert not missing, f"{fam}: kernels neither instantiated nor defined: {missing[:5]}"
    assert set(proj.table_families()) <= set(families)


# ----------------------------------------------------------------------------- AMD in the chroot

@pytest.mark.rocm
def test_amd_build_in_chroot(tiny):
    if not os.path.isfile(os.path.join(CHROOT, bk.CHROOT_STAMP)):
        pytest.skip(f"no ROCm toolchain chroot at {CHROOT} (create it: tools/rocm-toolchain.sh setup)")
    if os.geteuid() != 0:
        pytest.skip("the ROCm toolchain chroot needs root")
    rep = bk.build(project(tiny, rocm_chroot=CHROOT), ["gfx1100"])
    assert sorted(rep.built) == ["gfx1100/alpha", "gfx1100/beta"]
    m = manifest(tiny)
    assert m["targets"]["gfx1100"]["kind"] == "amd" and "clang version" in m["compilers"]["amd"]
    obj = bk.elf.read(tiny / "mlx_amd" / "kernels" / "gfx1100" / "alpha.co")
    t = bk.elf.amd_target(obj)
    assert (t.arch, t.code_object_version) == ("gfx1100", 5)
    assert bk.elf.kernel_names(obj) == {"alpha_scale_float"}
    assert bk.check(project(tiny)) == []
    rep = bk.build(project(tiny, rocm_chroot=CHROOT), ["gfx1100"])
    assert rep.built == [] and len(rep.up_to_date) == 2
