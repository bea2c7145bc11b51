"""build_kernels.py on a tiny project of its own (two families, one header, one table).

The NVIDIA target (nvcc, present here and on the GPU machine) exercises compiling,
the manifest, incremental rebuilds, the cache and the check; the AMD path runs in
the ROCm chroot when there is one (``rocm`` marker).
"""

import importlib.util
import json
import lzma
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


def _fake_tools(tmp_path, monkeypatch, **outputs):
    """Executables named like the GPU query tools, printing the given text, alone on PATH."""
    for name, text in outputs.items():
        exe = tmp_path / name
        exe.write_text(f"#!{sys.executable}\nimport sys\nsys.stdout.write({text!r})\n")
        exe.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "no-rocm"))
    monkeypatch.delenv("HIP_PATH", raising=False)


def test_arch_auto_takes_this_machines_gpus(tmp_path, monkeypatch, capsys):
    # amdgpu-arch (ROCm's LLVM) names each GPU, features appended; nvidia-smi gives compute caps
    _fake_tools(tmp_path, monkeypatch, **{"amdgpu-arch": "gfx1100\ngfx90a:sramecc+:xnack-\ngfx1036\n",
                                          "nvidia-smi": "9.0\n"})
    assert bk.select_targets("auto", "all", False) == ["gfx1100", "gfx90a", "sm_90"]
    assert "no kernels for gfx1036" in capsys.readouterr().err      # an iGPU we do not build for
    assert bk.select_targets("auto", "amd", False) == ["gfx1100", "gfx90a"]


def test_arch_auto_reads_rocminfo_without_amdgpu_arch(tmp_path, monkeypatch):
    _fake_tools(tmp_path, monkeypatch, rocminfo=(
        "Agent 1\n  Name:                    AMD Ryzen 9 7950X 16-Core Processor\n"
        "Agent 2\n  Name:                    gfx1201\n  Marketing Name:          AMD Radeon RX 9070 XT\n"
        "  ISA 1\n      Name:                    amdgcn-amd-amdhsa--gfx1201\n"))
    assert bk.detect_gpus() == (["gfx1201"], [])


def test_arch_auto_without_a_gpu_builds_nothing(tmp_path, monkeypatch, tiny, capsys):
    _fake_tools(tmp_path, monkeypatch)
    assert bk.detect_gpus() == ([], [])
    assert bk.main(["--root", str(tiny), "--arch", "auto", "-q"]) == 0   # pip install goes on without kernels
    assert not (tiny / "mlx_amd" / "kernels" / "manifest.json").exists()


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
    assert bk.outputs_for("unary", "gfx90a") == {"file": "gfx90a/unary.co.xz"}
    assert bk.outputs_for("unary", "sm_90") == {"file": "sm_90/unary.cubin.xz", "ptx": "sm_90/unary.ptx.xz"}
    assert bk.compiled_name("sm_90/unary.ptx.xz") == "unary.ptx"
    amd = bk.compile_argv("gfx942", "f", Path("/s/f.hip"), [Path("/i")], Path("/o"))
    assert len(amd) == 1 and "--offload-arch=gfx942" in amd[0] and "-mcode-object-version=5" in amd[0]
    assert "--no-gpu-bundle-output" in amd[0]
    assert amd[0][amd[0].index("-o") + 1] == "/o/f.co"             # the compiler writes the plain file
    nv = bk.compile_argv("sm_90", "f", Path("/s/f.hip"), [Path("/i")], Path("/o"))
    assert [a[a.index("-o") + 1] for a in nv] == ["/o/f.ptx", "/o/f.cubin"]


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
    assert m["version"] == 2 and m["compression"] == "xz" and set(m["sources"]) == {"alpha", "beta"}
    assert "release" in m["compilers"]["nvidia"]
    fams = m["targets"]["sm_90"]["families"]
    assert m["targets"]["sm_90"]["kind"] == "nvidia"
    assert fams["alpha"]["kernels"] == ["alpha_scale_float"] and fams["beta"]["kernels"] == ["beta_fill"]
    for e in fams.values():
        for prefix, role in (("", "file"), ("ptx_", "ptx")):
            stored = (tiny / "mlx_amd" / "kernels" / e[role]).read_bytes()
            assert bk.sha256_bytes(stored) == e[prefix + "sha256"]
            image = lzma.decompress(stored)
            assert bk.sha256_bytes(image) == e[prefix + "image_sha256"] and len(image) == e[prefix + "image_size"]
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

    # A header change rebuilds the families that include it (both include tiny.h) ...
    with open(tiny / "hip_kernels" / "include" / "tiny" / "tiny.h", "a") as f:
        f.write("// touched\n")
    rep = bk.build(project(tiny, cache), ["sm_90"])
    assert sorted(rep.built) == ["sm_90/alpha", "sm_90/beta"]
    # ... and only those: a header beta reaches through another header, and a new header
    # nobody includes
    inc = tiny / "hip_kernels" / "include" / "tiny"
    (inc / "beta_args.h").write_text('#pragma once\n#include "beta_more.h"\n')
    (inc / "beta_more.h").write_text("#pragma once\n")
    (tiny / "hip_kernels" / "beta.hip").write_text('#include "tiny/beta_args.h"\n' + BETA)
    rep = bk.build(project(tiny, cache), ["sm_90"])
    assert rep.built == ["sm_90/beta"]
    with open(inc / "beta_more.h", "a") as f:
        f.write("// touched\n")
    (inc / "unused.h").write_text("#pragma once\n")
    rep = bk.build(project(tiny, cache), ["sm_90"])
    assert rep.built == ["sm_90/beta"] and rep.up_to_date == ["sm_90/alpha"]
    # a quoted include found nowhere here: every header counts for that family
    p = project(tiny)
    (tiny / "hip_kernels" / "beta.hip").write_text('#include "somewhere/else.h"\n' + BETA)
    assert p.family_header_digest("beta") == p.header_digest() != p.family_header_digest("alpha")
    (tiny / "hip_kernels" / "beta.hip").write_text('#include "tiny/beta_args.h"\n' + BETA)

    # A clean clone with the same cache restores every object without compiling.
    assert bk.main(["--root", str(tiny), "--clean", "-q"]) == 0
    assert not (tiny / "mlx_amd" / "kernels" / "sm_90").exists()
    assert not (tiny / "mlx_amd" / "kernels" / "manifest.json").exists()
    rep = bk.build(project(tiny, cache), ["sm_90"])
    assert rep.built == [] and sorted(rep.cached) == ["sm_90/alpha", "sm_90/beta"]
    assert bk.check(project(tiny)) == []

    # A damaged output is noticed and rebuilt (from the cache).
    (tiny / "mlx_amd" / "kernels" / "sm_90" / "beta.cubin.xz").write_bytes(b"junk")
    rep = bk.build(project(tiny, cache), ["sm_90"])
    assert rep.cached == ["sm_90/beta"] and rep.built == []
    assert bk.check(project(tiny)) == []
    # The cache holds the compressed files, under their stored names.
    entry = bk._cache_entry(project(tiny, cache), [u for u in bk.plan(project(tiny), ["sm_90"]) if u.family == "beta"][0])
    assert sorted(p.name for p in entry.iterdir()) == ["beta.cubin.xz", "beta.ptx.xz"]


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
    assert not (tiny / "mlx_amd" / "kernels" / "sm_90" / "beta.cubin.xz").exists()
    assert bk.main(["--root", str(tiny), "check", "-q"]) == 1
    assert "sm_90: no object for family beta" in capsys.readouterr().err


def test_check_reports_missing_kernels(tiny, capsys):
    needs_nvcc()
    write_table(tiny, extra=["alpha_ghost"])   # listed in the table, never instantiated
    assert bk.main(["--root", str(tiny), "--arch", "sm_90", "-q"]) == 1
    err = capsys.readouterr().err
    assert "sm_90/alpha: missing kernels in sm_90/alpha.cubin.xz: alpha_ghost" in err
    assert "sm_90/alpha: missing kernels in sm_90/alpha.ptx.xz: alpha_ghost" in err
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
    assert "sm_80/alpha: missing kernels in sm_80/alpha.cubin.xz: alpha_scale_double" in capsys.readouterr().err


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
    obj = bk.elf.read(lzma.decompress((tiny / "mlx_amd" / "kernels" / "gfx1100" / "alpha.co.xz").read_bytes()))
    t = bk.elf.amd_target(obj)
    assert (t.arch, t.code_object_version) == ("gfx1100", 5)
    assert bk.elf.kernel_names(obj) == {"alpha_scale_float"}
    assert bk.check(project(tiny)) == []
    rep = bk.build(project(tiny, rocm_chroot=CHROOT), ["gfx1100"])
    assert rep.built == [] and len(rep.up_to_date) == 2


# ----------------------------------------------------------------------------- compression

def test_stored_files_are_xz_of_what_the_compiler_wrote(tiny):
    needs_nvcc()
    bk.build(project(tiny), ["sm_90"])
    kdir, work = tiny / "mlx_amd" / "kernels", tiny / "build" / "kernels" / "work" / "nvidia" / "sm_90"
    e = manifest(tiny)["targets"]["sm_90"]["families"]["alpha"]
    cubin = lzma.decompress((kdir / e["file"]).read_bytes())
    assert cubin == (work / "alpha.cubin").read_bytes()
    assert bk.elf.kernel_names(bk.elf.read(cubin)) == {"alpha_scale_float"}
    assert lzma.decompress((kdir / e["ptx"]).read_bytes()) == (work / "alpha.ptx").read_bytes()
    assert (kdir / e["file"]).stat().st_size * 2 < len(cubin)
    assert sorted(p.name for p in (kdir / "sm_90").iterdir()) == \
        ["alpha.cubin.xz", "alpha.ptx.xz", "beta.cubin.xz", "beta.ptx.xz"]   # no plain files ship


@pytest.mark.parametrize("damage, says", [
    ("cut", "alpha.cubin.xz does not decompress"),
    ("junk", "alpha.cubin.xz does not decompress"),
    ("other", "alpha.cubin.xz decompresses to an image that does not match its manifest image_sha256"),
])
def test_check_verifies_the_decompressed_image(tiny, damage, says):
    needs_nvcc()
    bk.build(project(tiny), ["sm_90"])
    path = tiny / "mlx_amd" / "kernels" / "sm_90" / "alpha.cubin.xz"
    good = path.read_bytes()
    bad = {"cut": good[:-20], "junk": b"\x7fELF not xz",
           "other": lzma.compress((tiny / "mlx_amd" / "kernels" / "sm_90" / "beta.cubin.xz").read_bytes())}[damage]
    path.write_bytes(bad)
    problems = bk.check(project(tiny))
    assert "sm_90/alpha: sm_90/alpha.cubin.xz does not match its manifest sha256" in problems
    assert any(says in p for p in problems), problems
    # The next build notices the damage (stamp vs file) and rebuilds that object only.
    rep = bk.build(project(tiny), ["sm_90"])
    assert rep.built == ["sm_90/alpha"] and bk.check(project(tiny)) == []


def test_version_1_manifest_is_refused_by_check_and_replaced_by_a_build(tiny, capsys):
    needs_nvcc()
    kdir = tiny / "mlx_amd" / "kernels"
    (kdir / "sm_90").mkdir(parents=True)
    (kdir / "gfx942").mkdir()
    for rel in ("sm_90/alpha.cubin", "sm_90/alpha.ptx", "gfx942/alpha.co"):
        (kdir / rel).write_bytes(b"old plain file")
    (kdir / "manifest.json").write_text(json.dumps({"version": 1, "targets": {
        "sm_90": {"kind": "nvidia", "families": {"alpha": {"file": "sm_90/alpha.cubin", "sha256": "0",
                                                           "ptx": "sm_90/alpha.ptx", "ptx_sha256": "0"}}},
        "gfx942": {"kind": "amd", "families": {"alpha": {"file": "gfx942/alpha.co", "sha256": "0"},
                                               "evil": {"file": "../../outside"}}}}}))
    (tiny / "outside").write_text("not ours")
    assert bk.main(["--root", str(tiny), "check", "-q"]) == 1
    assert "is manifest version 1, this build_kernels.py writes version 2 (compressed kernel files): " \
           "rebuild with `python build_kernels.py`" in capsys.readouterr().err
    assert bk.main(["--root", str(tiny), "--arch", "sm_90"]) == 0
    out = capsys.readouterr().out
    assert "was manifest version 1" in out and "removed its 3 uncompressed file(s)" in out
    assert not any((kdir / rel).exists() for rel in ("sm_90/alpha.cubin", "sm_90/alpha.ptx", "gfx942/alpha.co"))
    assert (tiny / "outside").exists()                           # never outside the kernel dir
    assert manifest(tiny)["version"] == 2 and set(manifest(tiny)["targets"]) == {"sm_90"}
    assert bk.check(project(tiny)) == []


def test_cache_entries_of_the_plain_format_still_restore(tiny, tmp_path):
    needs_nvcc()
    cache = tmp_path / "cache"
    cache.mkdir()
    bk.build(project(tiny, cache), ["sm_90"])
    work = tiny / "build" / "kernels" / "work" / "nvidia" / "sm_90"
    # Turn every entry into what an older build_kernels.py stored: the compiler's plain files.
    for entry in (d for d in cache.glob("*/*") if d.is_dir()):
        for xz in list(entry.glob("*.xz")):
            (entry / xz.name[:-3]).write_bytes((work / xz.name[:-3]).read_bytes())
            xz.unlink()
    assert bk.main(["--root", str(tiny), "--clean", "-q"]) == 0
    rep = bk.build(project(tiny, cache), ["sm_90"])
    assert rep.built == [] and sorted(rep.cached) == ["sm_90/alpha", "sm_90/beta"]
    assert bk.check(project(tiny)) == []
    assert len(list(cache.glob("*/*/*.xz"))) == 4                 # the entries gained compressed files


# ----------------------------------------------------------------------------- AMD resources (synthetic)

def kern(name="k", **kw):
    fields = dict(vgprs=8, sgprs=16, agprs=0, lds=0, scratch=0, vgpr_spills=0, sgpr_spills=0, wavefront_size=64,
                  max_workgroup_size=256, kernarg_size=8, dynamic_stack=False)
    fields.update(kw)
    return bk.elf.AmdKernel(name=name, **fields)


def test_arch_limits_cover_every_target_we_build():
    assert set(bk.AMD_ARCHS) | set(bk.GENERIC_ARCHS) <= set(bk.AMD_ARCH_LIMITS)
    for t, a in bk.AMD_ARCH_LIMITS.items():
        assert a.wave == (64 if t.startswith("gfx9") else 32), t
        assert a.lds == (160 * 1024 if t == "gfx950" else 64 * 1024), t
        assert a.vgprs % a.granule == 0 and a.max_waves * a.granule <= a.vgprs


@pytest.mark.parametrize("target, k, problem", [
    ("gfx942", kern(), None),
    ("gfx942", kern(sgpr_spills=30, sgprs=106), None),        # SGPRs spill into VGPR lanes: no memory
    ("gfx942", kern(scratch=16), "1 kernel(s) use scratch (private segment): k (16 B per work-item)"),
    ("gfx942", kern(vgpr_spills=3), "1 kernel(s) spill VGPRs: k (3)"),
    ("gfx942", kern(dynamic_stack=True), "1 kernel(s) have a dynamic call stack"),
    ("gfx942", kern(lds=65536), None),
    ("gfx942", kern(lds=65537), "1 kernel(s) need more LDS than gfx942's 64 KiB per workgroup: k (65537 B)"),
    ("gfx950", kern(lds=160 * 1024), None),
    ("gfx950", kern(lds=160 * 1024 + 4), "need more LDS than gfx950's 160 KiB"),
    ("gfx1201", kern(lds=65540, wavefront_size=32), "need more LDS than gfx1201's 64 KiB"),
    ("gfx942", kern(wavefront_size=32), "1 kernel(s) run at a wave width other than gfx942's 64: k (wave32)"),
    ("gfx1100", kern(), "run at a wave width other than gfx1100's 32: k (wave64)"),
    ("gfx1100", kern(wavefront_size=32, max_workgroup_size=1024), None),
    ("gfx1100", kern(wavefront_size=32, max_workgroup_size=2048), "allow workgroups over 1024 work-items: k (2048)"),
    # Trap stubs of the wave width the arch never runs are exempt from the scratch rules...
    ("gfx942", kern("red_w32", scratch=64), None),
    ("gfx1100", kern("red_w64", wavefront_size=32, vgpr_spills=1), None),
    # ...but the native width is not a stub.
    ("gfx942", kern("red_w64", scratch=64), "use scratch (private segment): red_w64 (64 B"),
    # An arch without a limits entry (built through --arch) still gets the scratch rules.
    ("gfx1103", kern(wavefront_size=32, lds=1 << 20), None),
    ("gfx1103", kern(scratch=4), "use scratch"),
])
def test_resource_problems(target, k, problem):
    found = bk.resource_problems(target, {k.name: k})
    if problem is None:
        assert found == []
    else:
        assert len(found) == 1 and problem in found[0], found


def test_resource_problems_group_by_kind_and_name_the_kernels():
    ks = {f"k{i}": kern(f"k{i}", scratch=4 * i) for i in range(1, 8)}
    ks["w"] = kern("w", wavefront_size=32)
    found = bk.resource_problems("gfx90a", ks)
    assert found == ["7 kernel(s) use scratch (private segment): k1 (4 B per work-item), k2 (8 B per "
                     "work-item), k3 (12 B per work-item), k4 (16 B per work-item) and 3 more",
                     "1 kernel(s) run at a wave width other than gfx90a's 64: w (wave32)"]


@pytest.mark.parametrize("target, vgprs, waves", [
    ("gfx942", 0, 8), ("gfx942", 64, 8), ("gfx942", 65, 7), ("gfx942", 76, 6), ("gfx942", 128, 4),
    ("gfx942", 512, 1), ("gfx90a", 256, 2),
    ("gfx908", 24, 10), ("gfx908", 128, 2), ("gfx908", 256, 1),
    ("gfx1030", 64, 16), ("gfx1030", 128, 8), ("gfx1102", 129, 7),
    # 24-VGPR granule on the 1.5x-VGPR parts: steps at 96, 120, 144 (as llc reports for gfx1151/gfx1201)
    ("gfx1100", 96, 16), ("gfx1100", 97, 12), ("gfx1151", 121, 10), ("gfx1201", 256, 5),    # rounds to 264
])
def test_vgpr_occupancy(target, vgprs, waves):
    o = bk.occupancy(bk.AMD_ARCH_LIMITS[target], kern(vgprs=vgprs))
    assert (o["waves"], o["by_vgpr"], o["by_lds"]) == (waves, waves, bk.AMD_ARCH_LIMITS[target].max_waves)


@pytest.mark.parametrize("target, lds, wg, by_lds", [
    ("gfx942", 32768, 256, 2),     # 2 groups of 4 waves on 4 SIMDs
    ("gfx942", 16384, 64, 1),      # 4 one-wave groups on 4 SIMDs
    ("gfx942", 4096, 1024, 8),     # 16 groups of 16 waves: capped at 8
    ("gfx950", 81920, 512, 4),     # 2 groups of 8 waves in 160 KiB
    ("gfx1100", 65536, 1024, 16),  # a WGP's 128 KiB holds 2 groups of 32 waves
    ("gfx1100", 65536, 256, 4),
])
def test_lds_occupancy(target, lds, wg, by_lds):
    o = bk.occupancy(bk.AMD_ARCH_LIMITS[target], kern(lds=lds, max_workgroup_size=wg))
    assert o["by_lds"] == by_lds and o["waves"] == min(by_lds, o["by_vgpr"])


def test_report_of_an_nvidia_build_and_its_files(tiny, tmp_path, capsys):
    needs_nvcc()
    assert bk.main(["--root", str(tiny), "--arch", "sm_90", "-q"]) == 0
    j, md = tmp_path / "r.json", tmp_path / "r.md"
    assert bk.main(["--root", str(tiny), "report", "--json", str(j), "--markdown", str(md), "-q"]) == 0
    assert capsys.readouterr().out == ""
    rep = json.loads(j.read_text())
    fam = rep["targets"]["sm_90"]["families"]["alpha"]
    e = manifest(tiny)["targets"]["sm_90"]["families"]["alpha"]
    assert fam["kernels"] == 1 and fam["image_bytes"] == e["image_size"] + e["ptx_image_size"]
    assert rep["total"]["stored_bytes"] == sum(t["stored_bytes"] for t in rep["targets"].values())
    text = md.read_text()
    assert text.startswith("# Kernel resources") and "## sm_90" in text and "| alpha | 1 |" in text
    assert bk.main(["--root", str(tiny), "report"]) == 0
    assert capsys.readouterr().out == text                    # without files: markdown on stdout


def test_report_without_a_build_is_a_clear_error(tiny, capsys):
    assert bk.main(["--root", str(tiny), "report"]) == 1
    assert "no manifest at" in capsys.readouterr().err


SCRATCH_BODY = "float b[512]; for (int i = 0; i < 512; ++i) b[i] = x[i * n]; x[threadIdx.x] = b[(threadIdx.x * 7) % 512];"


@pytest.mark.rocm
def test_amd_check_and_report_read_the_code_objects(tiny, tmp_path):
    if not os.path.isfile(os.path.join(CHROOT, bk.CHROOT_STAMP)):
        pytest.skip(f"no ROCm toolchain chroot at {CHROOT} (create it: tools/rocm-toolchain.sh setup)")
    if os.geteuid() != 0:
        pytest.skip("the ROCm toolchain chroot needs root")
    # gamma: a wave-width pair; on gfx1100 (wave32) the _w64 one is a stub, so its scratch is let through.
    (tiny / "hip_kernels" / "gamma.hip").write_text(
        '#include "tiny/tiny.h"\n'
        'TINY_GLOBAL void gamma_sum_w32(float* x, int n) { __shared__ float t[256]; t[threadIdx.x] = x[n];'
        ' __syncthreads(); x[threadIdx.x] = t[255 - threadIdx.x]; }\n'
        f'TINY_GLOBAL void gamma_sum_w64(float* x, int n) {{ {SCRATCH_BODY} }}\n')
    proj = project(tiny, rocm_chroot=CHROOT)
    bk.build(proj, ["gfx1100"])
    assert bk.check(proj) == []
    rep = bk.report(proj)
    g = rep["targets"]["gfx1100"]["families"]["gamma"]
    assert (g["kernels"], g["stubs"], g["lds"]["max"], g["scratch_max"]) == (1, 1, 1024, 0)
    assert g["occupancy"]["min"] == 16 and rep["limits"]["gfx1100"]["vgprs"] == 1536
    a = rep["targets"]["gfx1100"]["families"]["alpha"]
    assert a["kernels"] == 1 and a["stubs"] == 0 and 0 < a["vgprs"]["max"] < 32 and a["max_workgroup_size"] == 1024
    md = bk.report_markdown(rep)
    assert "| gamma | 1 | 1 |" in md and "| gfx1100 | 32 | 1536 | 24 | 16 | 64 KiB | 128 KiB |" in md
    # delta: scratch in a kernel the arch runs: the build's own check refuses it.
    (tiny / "hip_kernels" / "delta.hip").write_text(
        f'#include "tiny/tiny.h"\nTINY_GLOBAL void delta_scratch(float* x, int n) {{ {SCRATCH_BODY} }}\n')
    with pytest.raises(bk.BuildError, match=r"built kernels fail the check:\n  gfx1100/delta: 1 kernel\(s\) use "
                                            r"scratch \(private segment\): delta_scratch \(\d+ B per work-item\)"):
        bk.build(proj, ["gfx1100"])


# ----------------------------------------------------------------------------- helper libraries

FAKE_SORTLIB = r'''
#include <stddef.h>
#include <stdint.h>
extern "C" int mlxa_sortlib_abi(void) { return 1; }
extern "C" int mlxa_sort_pairs(int, int, void*, size_t* temp_bytes, const void*, void*, const void*, void*,
                               int64_t, int, void*) { *temp_bytes = 123; return 0; }
'''


def test_helper_library_build_manifest_check_and_load(tiny, tmp_path, monkeypatch):
    """A hip_kernels/lib/<name>.hip becomes <target>/<name>.so.xz, listed under the manifest's
    "libraries", checked (intact, an x86-64 shared object exporting its entry points) and
    loaded by the runtime from memory; the emulator gets none."""
    needs_nvcc()
    (tiny / "hip_kernels" / "lib").mkdir()
    (tiny / "hip_kernels" / "lib" / "sortlib.hip").write_text(FAKE_SORTLIB)
    cache = tmp_path / "cache"
    cache.mkdir()
    rep = bk.build(project(tiny, cache), ["sm_90"])
    assert sorted(rep.built) == ["sm_90/alpha", "sm_90/beta", "sm_90/sortlib"]
    libs = manifest(tiny)["libraries"]
    e = libs["sm_90"]["sortlib"]
    assert e["file"] == "sm_90/sortlib.so.xz"
    image = lzma.decompress((tiny / "mlx_amd" / "kernels" / e["file"]).read_bytes())
    assert bk.sha256_bytes(image) == e["image_sha256"] and image[:4] == b"\x7fELF"
    assert bk.check(project(tiny)) == []
    # not rebuilt when nothing changed; a source change rebuilds it alone
    assert bk.build(project(tiny, cache), ["sm_90"]).built == []
    with open(tiny / "hip_kernels" / "lib" / "sortlib.hip", "a") as f:
        f.write("// touched\n")
    assert bk.build(project(tiny, cache), ["sm_90"]).built == ["sm_90/sortlib"]
    e = manifest(tiny)["libraries"]["sm_90"]["sortlib"]
    image = lzma.decompress((tiny / "mlx_amd" / "kernels" / e["file"]).read_bytes())

    # the runtime loads it from memory and calls it
    from mlx_amd.runtime import modules, sortlib

    monkeypatch.setenv("MLX_AMD_KERNEL_DIR", str(tiny / "mlx_amd" / "kernels"))
    monkeypatch.delenv(modules.LIBRARIES_ENV, raising=False)
    monkeypatch.setattr(modules, "_libraries", {})
    monkeypatch.setattr(sortlib, "_bound", {})
    lib = sortlib.get("sm_90")
    assert lib is not None and lib.abi() == sortlib.ABI and lib.temp_bytes(4, 4, 1000) == 123
    assert sortlib.get("gfx1100") is None and "no sortlib for gfx1100" in sortlib.why_not("gfx1100")
    monkeypatch.setenv(modules.LIBRARIES_ENV, "none")
    assert sortlib.get("sm_90") is None

    # damage is found by check and refused by the loader
    p = tiny / "mlx_amd" / "kernels" / e["file"]
    good = p.read_bytes()
    p.write_bytes(lzma.compress(image[:-1] + b"\x01", format=lzma.FORMAT_XZ))
    assert any("does not match" in x and "sortlib" in x for x in bk.check(project(tiny)))
    monkeypatch.delenv(modules.LIBRARIES_ENV)
    monkeypatch.setattr(modules, "_libraries", {})
    lib, why = modules.library("sortlib", "sm_90")
    assert lib is None and "does not match manifest.json" in why
    # an object that is not a shared library, or lacks an entry point
    p.write_bytes(lzma.compress(b"\x7fELF\x02\x01" + bytes(40), format=lzma.FORMAT_XZ))
    m = manifest(tiny)
    blob = lzma.decompress(p.read_bytes())
    m["libraries"]["sm_90"]["sortlib"].update(sha256=bk.sha256_bytes(p.read_bytes()), image_sha256=bk.sha256_bytes(blob),
                                              image_size=len(blob))
    (tiny / "mlx_amd" / "kernels" / "manifest.json").write_text(json.dumps(m))
    assert any("not an x86-64 shared library" in x for x in bk.check(project(tiny)))
    p.write_bytes(good)
    m["libraries"]["sm_90"]["sortlib"].update(sha256=bk.sha256_bytes(good), image_sha256=e["image_sha256"],
                                              image_size=e["image_size"])
    (tiny / "mlx_amd" / "kernels" / "manifest.json").write_text(json.dumps(m))
    assert bk.check(project(tiny)) == []
    # a build that lost it is stale
    del m["libraries"]["sm_90"]
    (tiny / "mlx_amd" / "kernels" / "manifest.json").write_text(json.dumps(m))
    assert any("sm_90/sortlib: helper library not built" in x for x in bk.check(project(tiny)))


def test_helper_library_targets():
    assert bk.library_targets("sortlib", ["gfx1100", "gfx950", "gfx11-generic", "sm_90", "emu32"]) == \
        ["gfx1100", "sm_90"]
    argv = bk.library_argv("gfx942", "sortlib", Path("/s/x.hip"), [Path("/i")], Path("/o"))
    assert argv[0][-3:] == ["-o", "/o/sortlib.so", "/s/x.hip"] and "--offload-arch=gfx942" in argv[0]
    assert "--cuda-device-only" not in argv[0] and "-shared" in argv[0]


def test_helper_library_that_does_not_compile_is_a_note_unless_required(tiny, capsys):
    """An install without the vendor's headers still installs (the note names the log; the
    launcher uses our kernels); CI's --require-libraries makes it an error."""
    needs_nvcc()
    (tiny / "hip_kernels" / "lib").mkdir()
    (tiny / "hip_kernels" / "lib" / "sortlib.hip").write_text("#include <no_such_vendor_header.h>\n")
    p = project(tiny)
    p.verbose = True
    rep = bk.build(p, ["sm_90"])
    assert rep.failed == ["sm_90/sortlib"] and sorted(rep.built) == ["sm_90/alpha", "sm_90/beta"]
    assert "helper library sm_90/sortlib did not compile" in capsys.readouterr().out
    assert manifest(tiny)["libraries"]["sm_90"]["sortlib"] == {"missing": "did not compile"}
    assert bk.check(project(tiny)) == []
    assert bk.check(project(tiny), require_libraries=True) == ["sm_90/sortlib: helper library did not compile"]
    with pytest.raises(bk.BuildError, match="sm_90/sortlib: compiler exit"):
        bk.build(project(tiny, require_libraries=True), ["sm_90"])
