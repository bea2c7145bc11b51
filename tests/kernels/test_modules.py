"""mlx_amd/runtime/modules.py with a fake driver: target choice, lazy loading, caching, errors."""

import hashlib
import json
import lzma
import struct
import threading

import pytest

from mlx_amd.runtime import elf
from mlx_amd.runtime.driver.base import DeviceProperties, DriverError
from mlx_amd.runtime.modules import GENERIC_TARGETS, KernelNotFound, KernelsUnavailable, Modules


def make_elf(machine, flags=0, osabi=0, abi_version=0, symbols=()):
    """A minimal ELF64 with a .symtab: symbols are (name, st_info, st_other) tuples, all defined."""
    strtab = b"\0" + b"".join(n.encode() + b"\0" for n, _, _ in symbols)
    shstr = b"\0.symtab\0.strtab\0.shstrtab\0.text\0"
    syms, at = [bytes(24)], 1
    for name, info, other in symbols:
        syms.append(struct.pack("<IBBHQQ", at, info, other, 4, 0, 16))
        at += len(name) + 1
    symtab = b"".join(syms)
    body_off = 64
    offs = [body_off, body_off + len(symtab), body_off + len(symtab) + len(strtab)]
    shoff = offs[2] + len(shstr)
    shoff += -shoff % 8
    blob = symtab + strtab + shstr
    header = b"\x7fELF" + bytes([2, 1, 1, osabi, abi_version]) + bytes(7)
    header += struct.pack("<HHIQQQIHHHHHH", 3, machine, 1, 0, 0, shoff, flags, 64, 0, 0, 64, 5, 3)
    sh = [bytes(64),
          struct.pack("<IIQQQQIIQQ", 1, 2, 0, 0, offs[0], len(symtab), 2, 1, 8, 24),
          struct.pack("<IIQQQQIIQQ", 9, 3, 0, 0, offs[1], len(strtab), 0, 0, 1, 0),
          struct.pack("<IIQQQQIIQQ", 17, 3, 0, 0, offs[2], len(shstr), 0, 0, 1, 0),
          struct.pack("<IIQQQQIIQQ", 27, 1, 6, 0, 0, 0, 0, 0, 1, 0)]
    data = header + blob
    return data + bytes(shoff - len(data)) + b"".join(sh)


FUNC, OBJECT = (1 << 4) | 2, (1 << 4) | 1   # GLOBAL FUNC / GLOBAL OBJECT


def amd_object(arch, kernels, co=5):
    flags = elf.AMD_MACH[arch]
    syms = [(k, FUNC, 3) for k in kernels] + [(k + ".kd", OBJECT, 3) for k in kernels]
    return make_elf(elf.EM_AMDGPU, flags, elf.ELFOSABI_AMDGPU_HSA, co - 2, syms)


def cuda_object(kernels):
    return make_elf(elf.EM_CUDA, 0, 0x41, 8, [(k, FUNC, 0x10) for k in kernels])


def test_synthetic_objects_parse():
    t = elf.amd_target(elf.read(amd_object("gfx1151", ["a", "b"])))
    assert (t.arch, t.code_object_version, t.generic_version) == ("gfx1151", 5, 0)
    assert elf.kernel_names(elf.read(amd_object("gfx90a", ["a", "b"]))) == {"a", "b"}
    assert elf.kernel_names(elf.read(cuda_object(["k"]))) == {"k"}


def test_amd_feature_bits():
    # xnack "on" (3 << 8), sramecc "off" (2 << 10), code object v4.
    f = elf.read(make_elf(elf.EM_AMDGPU, elf.AMD_MACH["gfx90a"] | 0x300 | 0x800, elf.ELFOSABI_AMDGPU_HSA, 2))
    t = elf.amd_target(f)
    assert (t.arch, t.xnack, t.sramecc, t.code_object_version) == ("gfx90a", "on", "off", 4)
    unknown = elf.amd_target(elf.read(make_elf(elf.EM_AMDGPU, 0x0FE, elf.ELFOSABI_AMDGPU_HSA, 3)))
    assert unknown.arch is None and unknown.mach == 0x0FE


# ----------------------------------------------------------------------------- fake driver

class FakeDriver:
    def __init__(self, platform):
        self.platform = platform
        self.loaded, self.unloaded, self.lookups = [], [], []
        self.fail_load = None

    def module_load_data(self, image):
        if self.fail_load:
            raise DriverError("hipModuleLoadData", 209, "hipErrorNoBinaryForGpu", self.fail_load)
        self.loaded.append(image)
        return ("module", len(self.loaded))

    def module_get_function(self, module, name):
        self.lookups.append((module, name))
        if name.startswith("absent"):
            raise DriverError("hipModuleGetFunction", 500, "hipErrorNotFound", "named symbol not found")
        return ("fn", module, name)

    def module_unload(self, module):
        self.unloaded.append(module)


def props(arch, name="Test GPU"):
    return DeviceProperties(index=0, name=name, arch=arch, arch_full=arch, features={}, wave_size=32,
                            compute_units=1, total_memory=1 << 30, integrated=False, clock_khz=1,
                            memory_clock_khz=1, memory_bus_width=1, l2_cache_size=1,
                            max_threads_per_block=1024, max_shared_memory_per_block=65536,
                            managed_memory=True, pci_bus_id="0000:00:00.0")


FAMILIES = {"unary": ["unary_v_exp_float32_float32", "unary_v_abs_int32_int32"], "copy": ["copy_v_float32_float32"]}


def sha(b):
    return hashlib.sha256(b).hexdigest()


def store(d, rel, image):
    """Write ``image`` xz-compressed at d/rel as build_kernels.py does; its manifest fields."""
    data = lzma.compress(image, format=lzma.FORMAT_XZ)
    (d / rel).parent.mkdir(parents=True, exist_ok=True)
    (d / rel).write_bytes(data)
    return {"sha256": sha(data), "image_sha256": sha(image), "image_size": len(image)}


def make_kernel_dir(d, targets, families=FAMILIES, ptx=True):
    """Write a build_kernels.py-shaped directory (manifest v2, xz files) for the given targets."""
    man = {"version": 2, "compression": "xz", "sources": {f: "0" * 64 for f in families},
           "compilers": {}, "targets": {}}
    for t in targets:
        nv = t.startswith("sm_")
        fams = {}
        for fam, kernels in families.items():
            rel = f"{t}/{fam}.{'cubin' if nv else 'co'}.xz"
            data = cuda_object(kernels) if nv else amd_object(t, kernels, 6 if t.endswith("generic") else 5)
            e = {"file": rel, **store(d, rel, data), "kernels": sorted(kernels)}
            if nv and ptx:
                text = "".join(f".visible .entry {k}(\n)\n{{}}\n" for k in kernels).encode()
                info = store(d, f"{t}/{fam}.ptx.xz", text)
                e.update({"ptx": f"{t}/{fam}.ptx.xz", **{"ptx_" + k: v for k, v in info.items()}})
            fams[fam] = e
        man["targets"][t] = {"kind": "nvidia" if nv else "amd", "families": fams}
    (d / "manifest.json").write_text(json.dumps(man))
    return man


@pytest.fixture
def kdir(tmp_path):
    d = tmp_path / "kernels"
    d.mkdir()
    return d


# ----------------------------------------------------------------------------- selection

@pytest.mark.parametrize("arch, built, expected", [
    ("gfx1100", ["gfx1100", "gfx11-generic", "sm_90"], "gfx1100"),         # exact beats generic
    ("gfx1103", ["gfx1100", "gfx11-generic"], "gfx11-generic"),            # only the generic covers it
    ("gfx950", ["gfx942", "gfx9-4-generic"], "gfx9-4-generic"),
    ("gfx1201", ["gfx1200", "gfx12-generic"], "gfx12-generic"),
])
def test_amd_target_choice(kdir, arch, built, expected):
    make_kernel_dir(kdir, built)
    m = Modules(FakeDriver("amd"), props(arch), kdir)
    assert m.target() == expected
    assert m.available() == sorted(built)


def test_generic_table_covers_our_archs():
    members = {a for archs in GENERIC_TARGETS.values() for a in archs}
    assert {"gfx942", "gfx950", "gfx1100", "gfx1101", "gfx1102", "gfx1150", "gfx1151",
            "gfx1200", "gfx1201"} <= members
    assert set(GENERIC_TARGETS) <= set(elf.AMD_MACH)


@pytest.mark.parametrize("arch, built, expected, role", [
    ("sm_90", ["sm_90"], "sm_90", "file"),
    ("sm_92", ["sm_90"], "sm_90", "file"),        # same major: the cubin runs
    ("sm_100", ["sm_90", "sm_80"], "sm_90", "ptx"),  # newer major: the newest PTX, JIT-compiled
])
def test_nvidia_target_choice(kdir, arch, built, expected, role):
    make_kernel_dir(kdir, built)
    drv = FakeDriver("nvidia")
    m = Modules(drv, props(arch), kdir)
    assert m.target() == expected
    m.function("copy", "copy_v_float32_float32")
    image = drv.loaded[0]
    if role == "file":
        assert elf.read(image).machine == elf.EM_CUDA
    else:
        assert image.endswith(b"\0") and b".entry copy_v_float32_float32(" in image


def test_nvidia_older_device_has_no_kernels(kdir):
    make_kernel_dir(kdir, ["sm_90"])
    with pytest.raises(KernelsUnavailable, match="no kernels for sm_80"):
        Modules(FakeDriver("nvidia"), props("sm_80"), kdir).target()


def test_unavailable_arch_lists_targets_and_how_to_build(kdir):
    make_kernel_dir(kdir, ["gfx1100", "gfx942", "sm_90"])
    m = Modules(FakeDriver("amd"), props("gfx1030", "Radeon RX 6800"), kdir)
    with pytest.raises(KernelsUnavailable) as ei:
        m.target()
    msg = str(ei.value)
    assert msg.startswith("no kernels for gfx1030 (Radeon RX 6800)")
    assert "gfx1100, gfx942, sm_90" in msg and "python build_kernels.py --arch gfx1030" in msg
    assert ei.value.targets == ["gfx1100", "gfx942", "sm_90"] and ei.value.arch == "gfx1030"
    assert isinstance(ei.value, RuntimeError)


def test_amd_device_does_not_take_nvidia_kernels(kdir):
    make_kernel_dir(kdir, ["sm_90"])
    with pytest.raises(KernelsUnavailable, match="carries sm_90"):
        Modules(FakeDriver("amd"), props("sm_90"), kdir).target()


def test_no_manifest(kdir, monkeypatch):
    monkeypatch.setenv("MLX_AMD_KERNEL_DIR", str(kdir))
    m = Modules(FakeDriver("amd"), props("gfx1100"))   # constructing never raises
    assert m.directory == kdir and m.available() == []
    with pytest.raises(KernelsUnavailable, match="no kernels built: .*manifest.json does not exist.*"
                                                 "MLX_AMD_ARCHS=gfx1100 pip install.*build_kernels.py"):
        m.target()
    (kdir / "manifest.json").write_text("{not json")
    with pytest.raises(KernelsUnavailable, match="cannot read"):
        Modules(FakeDriver("amd"), props("gfx1100"), kdir).target()
    (kdir / "manifest.json").write_text(json.dumps({"version": 99, "targets": {}}))
    with pytest.raises(KernelsUnavailable, match="unknown format"):
        Modules(FakeDriver("amd"), props("gfx1100"), kdir).target()
    (kdir / "manifest.json").write_text(json.dumps({"version": 2, "compression": "zstd", "targets": {}}))
    with pytest.raises(KernelsUnavailable, match="unknown format.*compression 'zstd'"):
        Modules(FakeDriver("amd"), props("gfx1100"), kdir).target()
    (kdir / "manifest.json").write_text("[1, 2]")
    with pytest.raises(KernelsUnavailable, match="not a JSON object"):
        Modules(FakeDriver("amd"), props("gfx1100"), kdir).target()


def test_version_1_manifest_asks_for_a_rebuild(kdir):
    # What build_kernels.py wrote before compression: plain files, no image hashes.
    (kdir / "gfx1100").mkdir()
    (kdir / "gfx1100" / "unary.co").write_bytes(amd_object("gfx1100", ["k"]))
    (kdir / "manifest.json").write_text(json.dumps({"version": 1, "targets": {"gfx1100": {
        "kind": "amd", "families": {"unary": {"file": "gfx1100/unary.co", "sha256": "0" * 64, "kernels": ["k"]}}}}}))
    m = Modules(FakeDriver("amd"), props("gfx1100"), kdir)
    with pytest.raises(KernelsUnavailable, match=r"manifest version 1, written by an older build_kernels.py "
                                                 r"\(uncompressed kernel files\).*rebuild with "
                                                 r"`python build_kernels.py` \(or `--arch gfx1100`"):
        m.function("unary", "k")
    assert m.available() == []


# ----------------------------------------------------------------------------- loading and caching

def test_lazy_load_once_per_family_and_cached_handles(kdir):
    make_kernel_dir(kdir, ["gfx1100"])
    drv = FakeDriver("amd")
    m = Modules(drv, props("gfx1100"), kdir)
    assert drv.loaded == []                          # nothing loads before it is needed
    f1 = m.function("unary", "unary_v_exp_float32_float32")
    f2 = m.function("unary", "unary_v_abs_int32_int32")
    assert len(drv.loaded) == 1 and elf.amd_target(elf.read(drv.loaded[0])).arch == "gfx1100"
    assert m.function("unary", "unary_v_exp_float32_float32") is f1
    assert len(drv.lookups) == 2 and f1 != f2
    m.function("copy", "copy_v_float32_float32")
    assert len(drv.loaded) == 2
    assert m.families() == ["copy", "unary"]
    assert m.kernel_names("copy") == ["copy_v_float32_float32"]
    m.close()
    assert sorted(drv.unloaded) == sorted([("module", 1), ("module", 2)])
    m.function("copy", "copy_v_float32_float32")      # usable again after close: reloads
    assert len(drv.loaded) == 3


def test_concurrent_first_use_loads_once(kdir):
    make_kernel_dir(kdir, ["gfx1100"])
    drv = FakeDriver("amd")
    m = Modules(drv, props("gfx1100"), kdir)
    out = []
    threads = [threading.Thread(target=lambda: out.append(m.function("unary", "unary_v_exp_float32_float32")))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(drv.loaded) == 1 and len(set(out)) == 1 and len(out) == 8


def test_missing_kernel_and_family_name_everything(kdir):
    make_kernel_dir(kdir, ["gfx942"])
    drv = FakeDriver("amd")
    m = Modules(drv, props("gfx942"), kdir)
    with pytest.raises(KernelNotFound, match="no kernel 'unary_v_cos_float64_float64' in family 'unary' "
                                             "for target gfx942"):
        m.function("unary", "unary_v_cos_float64_float64")
    with pytest.raises(KernelNotFound, match="no kernel family 'sdpa' for target gfx942.*copy, unary"):
        m.function("sdpa", "sdpa_vector")
    assert drv.loaded == []                          # decided from the manifest, no driver call


def test_listed_but_not_exported(kdir):
    make_kernel_dir(kdir, ["gfx942"], families={"unary": ["absent_k"]})
    with pytest.raises(KernelNotFound, match="listed in manifest.json but the gfx942 module does not "
                                             "export it.*named symbol not found"):
        Modules(FakeDriver("amd"), props("gfx942"), kdir).function("unary", "absent_k")


def test_damaged_or_wrong_arch_file_is_refused_before_loading(kdir):
    make_kernel_dir(kdir, ["gfx1100", "gfx1101"])
    drv = FakeDriver("amd")
    (kdir / "gfx1100" / "unary.co.xz").write_bytes(b"truncated")
    m = Modules(drv, props("gfx1100"), kdir)
    with pytest.raises(KernelsUnavailable, match="unary.co.xz does not decompress .*damaged; rebuild with "
                                                 "`python build_kernels.py --arch gfx1100`"):
        m.function("unary", "unary_v_exp_float32_float32")
    # A gfx1101 object under gfx1100's name, with matching checksums: the ELF header tells.
    man = json.loads((kdir / "manifest.json").read_text())
    wrong = (kdir / "gfx1101" / "copy.co.xz").read_bytes()
    (kdir / "gfx1100" / "copy.co.xz").write_bytes(wrong)
    for k in ("sha256", "image_sha256", "image_size"):
        man["targets"]["gfx1100"]["families"]["copy"][k] = man["targets"]["gfx1101"]["families"]["copy"][k]
    (kdir / "manifest.json").write_text(json.dumps(man))
    m = Modules(drv, props("gfx1100"), kdir)
    with pytest.raises(KernelsUnavailable, match="built for gfx1101, not gfx1100"):
        m.function("copy", "copy_v_float32_float32")
    (kdir / "gfx1100" / "copy.co.xz").unlink()
    with pytest.raises(KernelsUnavailable, match="cannot be read"):
        Modules(drv, props("gfx1100"), kdir).function("copy", "copy_v_float32_float32")
    assert drv.loaded == []


def test_driver_load_failure_names_family_and_target(kdir):
    make_kernel_dir(kdir, ["gfx11-generic"])
    drv = FakeDriver("amd")
    drv.fail_load = "no kernel image is available"
    m = Modules(drv, props("gfx1151"), kdir)
    with pytest.raises(KernelsUnavailable, match="loading kernel family unary for gfx11-generic failed: "
                                                 "hipModuleLoadData.*code object v6"):
        m.function("unary", "unary_v_exp_float32_float32")
    drv.fail_load = None                             # a failed load is not cached
    assert m.function("unary", "unary_v_exp_float32_float32")[0] == "fn"



@pytest.mark.gpu
def test_real_device_loads_every_built_kernel():
    """On the GPU machine: the installed kernels for this device's target load through the
    real driver and every kernel the manifest (= the kernel table) lists resolves."""
    from mlx_amd.runtime import kernel_table
    from mlx_amd.runtime.driver import get_driver

    drv = get_driver()
    mods = Modules(drv, drv.properties(0))
    target = mods.target()
    n = 0
    for family in mods.families():
        names = mods.kernel_names(family)
        assert sorted(names) == sorted(kernel_table.kernel_names(family))
        for name in names:
            assert mods.function(family, name) is mods.function(family, name)  # cached handle
            n += 1
    assert n == sum(len(kernel_table.kernel_names(f)) for f in kernel_table.families())
    assert target == drv.properties(0).arch or target.endswith("generic")


@pytest.mark.parametrize("damage", ["cut", "flip", "tail", "other_image", "plain"])
def test_damaged_compressed_file_is_a_clear_error(kdir, damage):
    make_kernel_dir(kdir, ["gfx942"])
    path = kdir / "gfx942" / "unary.co.xz"
    good = path.read_bytes()
    if damage == "cut":            # a partial download / full disk
        bad = good[:len(good) // 2]
    elif damage == "flip":         # one bit inside the compressed data: the xz CRC or the decoder says so
        bad = bytearray(good)
        bad[len(good) // 2] ^= 0x10
        bad = bytes(bad)
    elif damage == "tail":
        bad = good + b"junk"
    elif damage == "other_image":  # a valid xz stream of another object: only the image hash tells
        bad = lzma.compress(amd_object("gfx942", ["unary_v_exp_float32_float32"]), format=lzma.FORMAT_XZ)
    else:                          # an uncompressed object where the compressed one belongs
        bad = amd_object("gfx942", FAMILIES["unary"])
    path.write_bytes(bad)
    drv = FakeDriver("amd")
    m = Modules(drv, props("gfx942"), kdir)
    msg = "does not match manifest.json" if damage == "other_image" else "does not decompress"
    with pytest.raises(KernelsUnavailable, match=msg) as ei:
        m.function("unary", "unary_v_exp_float32_float32")
    assert "rebuild with `python build_kernels.py --arch gfx942`" in str(ei.value)
    assert ei.value.targets == ["gfx942"]
    assert drv.loaded == []
    assert m.function("copy", "copy_v_float32_float32")[0] == "fn"   # other families still load


def test_loader_hands_the_decompressed_image_to_the_driver(kdir):
    make_kernel_dir(kdir, ["gfx942", "sm_90"])
    drv = FakeDriver("amd")
    Modules(drv, props("gfx942"), kdir).function("unary", "unary_v_exp_float32_float32")
    assert drv.loaded == [amd_object("gfx942", FAMILIES["unary"])]
    drv = FakeDriver("nvidia")
    Modules(drv, props("sm_100"), kdir).function("unary", "unary_v_exp_float32_float32")   # PTX
    assert drv.loaded[0].startswith(b".visible .entry ") and drv.loaded[0].endswith(b"\0")
    # A manifest entry without image_sha256 cannot vouch for anything.
    man = json.loads((kdir / "manifest.json").read_text())
    del man["targets"]["gfx942"]["families"]["copy"]["image_sha256"]
    (kdir / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(KernelsUnavailable, match="does not match manifest.json"):
        Modules(FakeDriver("amd"), props("gfx942"), kdir).function("copy", "copy_v_float32_float32")
