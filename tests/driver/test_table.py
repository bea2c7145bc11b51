"""The binding table, error formatting and driver selection, without any GPU.

The HIP and CUDA drivers run here over a fake vendor library (Python functions
standing in for the C symbols), which checks what they pass to each call: the
argument-buffer list of a launch, the props offsets, the attribute numbers.
"""

import ctypes
import glob
import importlib.util
import inspect
import os
import re
import struct

import pytest

from mlx_amd.runtime import driver
from mlx_amd.runtime.driver import base, cuda, hip, table
from mlx_amd.runtime.driver.base import CudaError, DriverUnavailable, HipError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DRIVER_DIR = os.path.join(REPO, "mlx_amd", "runtime", "driver")


# --- the table ---------------------------------------------------------------------------

def _is_ctype(t):
    return isinstance(t, type) and issubclass(t, (ctypes._SimpleCData, ctypes._Pointer, ctypes.Array))


def test_table_is_self_consistent():
    names = [e.name for e in table.TABLE]
    assert len(names) == len(set(names)), "duplicate logical names"
    for e in table.TABLE:
        assert e.hip or e.cuda, f"{e.name} has neither a HIP nor a CUDA symbol"
        assert _is_ctype(e.restype), e.name
        assert isinstance(e.argtypes, tuple) and all(_is_ctype(t) for t in e.argtypes), e.name
        for sym in table.symbols(e, "hip"):
            assert sym.startswith("hip"), (e.name, sym)
        for sym in table.symbols(e, "cuda"):
            assert sym.startswith("cu"), (e.name, sym)
    for vendor in ("hip", "cuda"):
        syms = [s for e in table.TABLE for s in table.symbols(e, vendor)]
        assert len(syms) == len(set(syms)), f"a {vendor} symbol is bound twice"


def _used_logical_names(path):
    src = open(path).read()
    used = set(re.findall(r"self\.lib\.(\w+)", src)) - {"resolved", "path", "vendor"}
    used |= set(re.findall(r'_props_fn = "(\w+)"', src))
    used |= set(re.findall(r'_alloc\("(\w+)"', src))
    if "_copy(" in src:  # directional copies: the sync name and its _async twin
        for d in re.findall(r'_copy\("(\w+)"', src):
            used |= {d, d + "_async"}
    return used


@pytest.mark.parametrize("vendor,files", [("hip", ["table.py", "hip.py"]), ("cuda", ["table.py", "cuda.py"])])
def test_every_call_the_drivers_make_is_in_the_table_for_their_vendor(vendor, files):
    used = set().union(*(_used_logical_names(os.path.join(DRIVER_DIR, f)) for f in files))
    assert len(used) > 20
    for name in sorted(used):
        assert name in table.BY_NAME, f"{name} is not a table entry"
        assert table.symbols(table.BY_NAME[name], vendor), f"{name} has no {vendor} symbol"


@pytest.mark.parametrize("cls", [hip.HipDriver, cuda.CudaDriver])
def test_both_drivers_implement_every_interface_method(cls):
    methods = [n for n, v in vars(base.Driver).items() if callable(v) and not n.startswith("_")]
    assert len(methods) > 30
    for n in methods:
        impl = getattr(cls, n)
        assert impl is not getattr(base.Driver, n), f"{cls.__name__}.{n} is not implemented"
        want = list(inspect.signature(getattr(base.Driver, n)).parameters)
        assert list(inspect.signature(impl).parameters) == want, f"{cls.__name__}.{n} signature"
    assert cls.name in ("hip", "cuda") and cls.platform in ("amd", "nvidia")


# --- error formatting -----------------------------------------------------------------------

def test_check_formats_the_call_and_the_vendor_error():
    check = table.make_check(HipError, lambda code: ("hipErrorOutOfMemory", "out of memory"),
                             {"mem_alloc": "hipMalloc"}.get)
    check(0, "mem_alloc", 1)  # success: nothing
    with pytest.raises(HipError) as ei:
        check(2, "mem_alloc", 17179869184)
    e = ei.value
    assert str(e) == "hipMalloc(17179869184) -> hipErrorOutOfMemory (2): out of memory"
    assert (e.call, e.code, e.name, e.message) == ("hipMalloc(17179869184)", 2, "hipErrorOutOfMemory",
                                                   "out of memory")
    assert e.out_of_memory and isinstance(e, base.DriverError)
    check2 = table.make_check(CudaError, lambda code: ("CUDA_ERROR_INVALID_VALUE", "invalid argument"))
    with pytest.raises(CudaError, match=r"^cuMemFree_v2\(0x10, NULL\) -> CUDA_ERROR_INVALID_VALUE \(1\)"):
        check2(1, "cuMemFree_v2", hex(16), None)


# --- a fake vendor library ----------------------------------------------------------------------

class FakeFn:
    def __init__(self, fn):
        self.fn, self.restype, self.argtypes = fn, None, None

    def __call__(self, *a):
        return self.fn(*a)


def _out(ref, value):
    """Store through a byref() out-parameter the way the C function would."""
    ref._obj.value = value


class FakeLib:
    """Symbols as Python functions; records every call as (symbol, args)."""

    def __init__(self, funcs):
        self.funcs, self.calls = funcs, []

    def __getitem__(self, sym):
        if sym not in self.funcs:
            raise AttributeError(sym)
        fn = self.funcs[sym]

        def record(*a):
            self.calls.append((sym, a))
            return fn(*a)

        return FakeFn(record)

    def __getattr__(self, sym):
        return self[sym]


HIP_ERRORS = {0: b"hipSuccess", 2: b"hipErrorOutOfMemory", 100: b"hipErrorNoDevice", 600: b"hipErrorNotReady"}
ARCH_FULL = b"gfx90a:sramecc+:xnack-"


def fake_hip(devices=1, r0600=True, init_status=0, malloc_status=0):
    attrs = {v[1]: 1000 + v[1] for v in hip.ATTRIBUTES.values()}

    def props(buf, dev, arch_at):
        raw = bytearray(hip.PROPS_BUFFER)
        raw[0:9] = b"Fake MI2X"
        raw[arch_at:arch_at + len(ARCH_FULL)] = ARCH_FULL
        ctypes.memmove(buf, bytes(raw), len(raw))
        return 0

    def malloc(ref, n):
        if malloc_status:
            return malloc_status
        _out(ref, 0x7000)
        return 0

    f = {
        "hipInit": lambda flags: init_status,
        "hipGetDeviceCount": lambda ref: (_out(ref, devices), 0)[1],
        "hipRuntimeGetVersion": lambda ref: (_out(ref, 60443484), 0)[1],
        "hipDriverGetVersion": lambda ref: (_out(ref, 60443484), 0)[1],
        "hipDeviceGetAttribute": lambda ref, attr, dev: (_out(ref, attrs[attr]), 0)[1],
        "hipDeviceTotalMem": lambda ref, dev: (_out(ref, 64 << 30), 0)[1],
        "hipDeviceGetPCIBusId": lambda buf, n, dev: (ctypes.memmove(buf, b"0000:03:00.0\0", 13), 0)[1],
        "hipGetDeviceProperties": lambda buf, dev: props(buf, dev, 396),
        "hipSetDevice": lambda d: 0,
        "hipMalloc": malloc,
        "hipFree": lambda p: 0,
        "hipEventQuery": lambda e: 600,
        "hipModuleLaunchKernel": lambda *a: 0,
        "hipGetErrorName": lambda c: HIP_ERRORS.get(c, b"hipErrorUnknown"),
        "hipGetErrorString": lambda c: {2: b"out of memory", 100: b"no ROCm-capable device is detected"}.get(
            c, b"unknown error"),
    }
    if r0600:
        f["hipGetDevicePropertiesR0600"] = lambda buf, dev: props(buf, dev, 1160)
    return FakeLib(f)


def fake_cuda(devices=1):
    attrs = {v[1]: 1000 + v[1] for v in cuda.ATTRIBUTES.values()}
    attrs[cuda.ATTRIBUTES["cc_major"][1]], attrs[cuda.ATTRIBUTES["cc_minor"][1]] = 9, 0
    names = {0: b"CUDA_SUCCESS", 1: b"CUDA_ERROR_INVALID_VALUE", 2: b"CUDA_ERROR_OUT_OF_MEMORY"}

    def err_name(code, ref):
        if code not in names:
            return 1
        _out(ref, names[code])
        return 0

    return FakeLib({
        "cuInit": lambda flags: 0,
        "cuDeviceGetCount": lambda ref: (_out(ref, devices), 0)[1],
        "cuDeviceGet": lambda ref, i: (_out(ref, i), 0)[1],
        "cuDriverGetVersion": lambda ref: (_out(ref, 13000), 0)[1],
        "cuDeviceGetAttribute": lambda ref, attr, dev: (_out(ref, attrs[attr]), 0)[1],
        "cuDeviceGetName": lambda buf, n, dev: (ctypes.memmove(buf, b"Fake H200\0", 10), 0)[1],
        "cuDeviceTotalMem_v2": lambda ref, dev: (_out(ref, 141 << 30), 0)[1],
        "cuDeviceGetPCIBusId": lambda buf, n, dev: (ctypes.memmove(buf, b"0000:17:00.0\0", 13), 0)[1],
        "cuDevicePrimaryCtxRetain": lambda ref, dev: (_out(ref, 0xC0), 0)[1],
        "cuCtxSetCurrent": lambda ctx: 0,
        "cuMemAlloc_v2": lambda ref, n: 2,
        "cuLaunchKernel": lambda *a: 0,
        "cuGetErrorName": err_name,
        "cuGetErrorString": lambda code, ref: (_out(ref, b"out of memory"), 0)[1],
    })


def make_driver(cls, lib):
    return cls(env={}, opener=lambda path: lib)


# --- the drivers over the fake library -------------------------------------------------------------

def test_hip_error_names_the_vendor_call_and_its_arguments():
    lib = fake_hip(malloc_status=2)
    d = make_driver(hip.HipDriver, lib)
    with pytest.raises(HipError) as ei:
        d.malloc(17179869184)
    assert str(ei.value) == "hipMalloc(17179869184) -> hipErrorOutOfMemory (2): out of memory"
    assert ei.value.out_of_memory


def test_cuda_error_goes_through_the_out_pointer_error_calls():
    d = make_driver(cuda.CudaDriver, fake_cuda())
    with pytest.raises(CudaError) as ei:
        d.malloc(1 << 40)
    assert str(ei.value) == f"cuMemAlloc_v2({1 << 40}) -> CUDA_ERROR_OUT_OF_MEMORY (2): out of memory"
    assert d.error_string(12345) == ("CUresult(12345)", "unrecognized error code")


def test_bad_arguments_raise_python_errors_before_any_call():
    lib = fake_hip()
    d = make_driver(hip.HipDriver, lib)
    n = len(lib.calls)
    for call in (lambda: d.malloc(-1), lambda: d.malloc(0), lambda: d.malloc(1.5),
                 lambda: d.memset(0x7000, 256, 4), lambda: d.module_load_data(b""),
                 lambda: d.set_device(5), lambda: d.properties(-1),
                 lambda: d.launch(None, (1, 2, 3, 4), (1,), b""), lambda: d.launch(None, (0,), (1,), b"")):
        with pytest.raises((ValueError, TypeError)):
            call()
    assert not [c for c in lib.calls[n:] if c[0] not in ("hipGetDeviceCount", "hipSetDevice")]


def test_hip_no_device_is_zero_devices_not_an_error():
    d = make_driver(hip.HipDriver, fake_hip(init_status=100))
    assert d.device_count() == 0
    d = make_driver(hip.HipDriver, fake_hip(init_status=2))
    with pytest.raises(HipError, match=r"^hipInit\(0\) -> hipErrorOutOfMemory"):
        d.device_count()


@pytest.mark.parametrize("r0600,arch_at", [(True, 1160), (False, 396)])
def test_hip_properties_from_attributes_and_the_props_struct(r0600, arch_at):
    lib = fake_hip(r0600=r0600)
    d = make_driver(hip.HipDriver, lib)
    p = d.properties(0)
    a = {f: 1000 + hip.ATTRIBUTES[f][1] for f in hip.ATTRIBUTES}
    assert (p.name, p.arch, p.arch_full) == ("Fake MI2X", "gfx90a", ARCH_FULL.decode())
    assert p.features == {"sramecc": True, "xnack": False}
    assert p.wave_size == a["wave_size"] and p.compute_units == a["compute_units"]
    assert p.l2_cache_size == a["l2_cache_size"] and p.clock_khz == a["clock_khz"]
    assert p.max_shared_memory_per_block == a["max_shared_memory_per_block"]
    assert p.integrated is True and p.managed_memory is True
    assert p.total_memory == 64 << 30 and p.pci_bus_id == "0000:03:00.0"
    used = {c[0] for c in lib.calls}
    assert ("hipGetDevicePropertiesR0600" in used) == r0600
    assert ("hipGetDeviceProperties" in used) == (not r0600)
    assert d.runtime_version() == "6.4.43484"


def test_cuda_properties():
    d = make_driver(cuda.CudaDriver, fake_cuda())
    p = d.properties(0)
    assert (p.name, p.arch, p.arch_full, p.features) == ("Fake H200", "sm_90", "sm_90", {})
    assert p.wave_size == 1000 + cuda.ATTRIBUTES["wave_size"][1]
    assert p.total_memory == 141 << 30 and p.pci_bus_id == "0000:17:00.0"
    assert d.driver_version() == "13.0"
    assert d.runtime_version().startswith("13.0 (") and "driver" in d.runtime_version()


@pytest.mark.parametrize("cls,make,sym,end", [(hip.HipDriver, fake_hip, "hipModuleLaunchKernel", 3),
                                              (cuda.CudaDriver, fake_cuda, "cuLaunchKernel", 0)])
def test_launch_passes_the_blob_through_the_argument_buffer_list(cls, make, sym, end):
    lib = make()
    d = make_driver(cls, lib)
    blob = struct.pack("<f4xQQq", 2.0, 0x1000, 0x2000, 77)
    stream = table.Stream(0x5)
    d.launch(table.Function(table.Module(0x9), "k"), (3, 2), 128, blob, 64, stream)
    name, a = [c for c in lib.calls if c[0] == sym][-1]
    fn, gx, gy, gz, bx, by, bz, shm, st, params, extra = a
    assert (gx, gy, gz, bx, by, bz, shm) == (3, 2, 1, 128, 1, 1, 64) and st is stream and params is None
    words = ctypes.cast(extra, ctypes.POINTER(ctypes.c_void_p))
    assert words[0] == 1 and words[2] == 2 and (words[4] or 0) == end
    assert ctypes.string_at(words[1], len(blob)) == blob
    assert ctypes.c_size_t.from_address(words[3]).value == len(blob)
    d.launch(fn, (1, 1, 1), (1, 1, 1), b"")    # no arguments: no list at all
    assert [c for c in lib.calls if c[0] == sym][-1][1][10] is None


def test_event_query_not_ready_is_false():
    d = make_driver(hip.HipDriver, fake_hip())
    assert d.event_query(table.Event(0x1)) is False


def test_handles_destroy_themselves_silently():
    released = []
    s = table.Stream(0x42)
    s._release = lambda v: released.append(v) or 1 / 0    # a failing destroy must not escape
    del s
    assert released == [0x42]
    s = table.Stream(0x43)
    s._release = released.append
    assert table.take(s) == 0x43 and s.value is None
    del s
    assert released == [0x42]
    with pytest.raises(ValueError):
        table.take(table.Stream())


# --- library search and version strings --------------------------------------------------------

def test_hip_search_dirs_env_first_then_opt_rocm_newest_first():
    roots = ["/opt/rocm-6.1.0", "/opt/rocm", "/opt/rocm-6.10.1", "/opt/rocm-6.4.3"]
    dirs = hip.search_dirs({"ROCM_PATH": "/x/rocm", "HIP_PATH": "/y/hip"}, lambda pat: roots)
    assert dirs == ["/x/rocm/lib", "/y/hip/lib", "/opt/rocm/lib", "/opt/rocm-6.10.1/lib",
                    "/opt/rocm-6.4.3/lib", "/opt/rocm-6.1.0/lib"]


def test_parse_arch_and_versions():
    assert hip.parse_arch("gfx90a:sramecc+:xnack-") == ("gfx90a", {"sramecc": True, "xnack": False})
    assert hip.parse_arch("gfx1100") == ("gfx1100", {})
    assert hip.format_version(60443484) == "6.4.43484"
    assert hip.format_version(50731921) == "5.7.31921"
    assert cuda.format_version(12080) == "12.8"


def test_missing_library_is_a_clean_driver_unavailable(tmp_path):
    def nothing(path):
        raise OSError(f"{path}: cannot open shared object file: No such file or directory")

    (tmp_path / "lib").mkdir()
    with pytest.raises(DriverUnavailable) as ei:
        hip.HipDriver(env={"ROCM_PATH": str(tmp_path), "HIP_PATH": str(tmp_path / "nope")}, opener=nothing)
    tried = ei.value.tried
    assert tried[0] == f"{tmp_path}/lib: no libamdhip64.so*"
    assert tried[1] == f"{tmp_path}/nope/lib: no such directory"
    assert "libamdhip64.so.6 (loader search): cannot open shared object file: No such file or directory" in tried
    assert "ROCM_PATH" in str(ei.value)
    with pytest.raises(DriverUnavailable) as ei:
        cuda.CudaDriver(opener=nothing)
    assert [t.split(" ")[0] for t in ei.value.tried] == ["libcuda.so.1", "libcuda.so"]


def test_a_library_lacking_a_symbol_names_it():
    lib = fake_hip()
    d = make_driver(hip.HipDriver, lib)
    with pytest.raises(DriverUnavailable, match="does not export hipStreamCreateWithFlags"):
        d.stream_create()


# --- selection -------------------------------------------------------------------------------------

class FakeDriver(base.Driver):
    def __init__(self, name, devices=1):
        self.name, self.platform, self.library_path, self.devices = name, name, f"/fake/{name}.so", devices

    def device_count(self):
        return self.devices

    def runtime_version(self):
        return "1.0"

    def driver_version(self):
        return "2.0"


@pytest.fixture
def factories(monkeypatch):
    made = []

    def install(**spec):
        def factory_for(name, what):
            def factory():
                made.append(name)
                if isinstance(what, Exception):
                    raise what
                return FakeDriver(name, what)
            return factory

        for name, what in spec.items():
            monkeypatch.setitem(driver.FACTORIES, name, factory_for(name, what))
        return made

    monkeypatch.delenv("MLX_AMD_DRIVER", raising=False)
    driver.reset()
    yield install
    driver.reset()


def test_default_prefers_hip_and_never_picks_host(factories):
    made = factories(hip=1, cuda=1, host=1)
    assert driver.get_driver().name == "hip"
    assert driver.get_driver() is driver.get_driver()
    assert "host" not in made


def test_falls_back_to_cuda_when_hip_is_missing_or_has_no_device(factories):
    made = factories(hip=DriverUnavailable("no hip", ["/opt/rocm/lib: no such directory"]), cuda=1, host=1)
    assert driver.get_driver().name == "cuda"
    driver.reset()
    factories(hip=0, cuda=1)
    assert driver.get_driver().name == "cuda"
    assert "host" not in made


def test_nothing_usable_raises_with_every_path_tried(factories):
    factories(hip=DriverUnavailable("no hip", ["/a: x"]), cuda=DriverUnavailable("no cuda", ["/b: y"]), host=1)
    with pytest.raises(DriverUnavailable) as ei:
        driver.get_driver()
    assert ei.value.tried == ["/a: x", "/b: y"]
    assert "no hip" in str(ei.value) and "no cuda" in str(ei.value)


def test_env_forces_a_driver(factories, monkeypatch):
    factories(hip=1, cuda=1, host=1)
    monkeypatch.setenv("MLX_AMD_DRIVER", "host")
    assert driver.get_driver().name == "host"
    driver.reset()
    monkeypatch.setenv("MLX_AMD_DRIVER", " CUDA ")
    assert driver.get_driver().name == "cuda"
    driver.reset()
    factories(hip=DriverUnavailable("no hip", ["/a: x"]))
    monkeypatch.setenv("MLX_AMD_DRIVER", "hip")
    with pytest.raises(DriverUnavailable, match="MLX_AMD_DRIVER=hip"):
        driver.get_driver()
    monkeypatch.setenv("MLX_AMD_DRIVER", "metal")
    with pytest.raises(ValueError, match="MLX_AMD_DRIVER='metal'"):
        driver.get_driver()


def test_probe_never_raises(factories, monkeypatch):
    factories(hip=RuntimeError("broken install"), cuda=1)
    rep = driver.probe()
    assert rep["selected"] == "cuda" and rep["error"] is None
    hip_rec, cuda_rec = rep["drivers"]
    assert not hip_rec["loaded"] and "broken install" in hip_rec["error"]
    assert cuda_rec["device_count"] == 1 and cuda_rec["runtime_version"] == "1.0"
    monkeypatch.setenv("MLX_AMD_DRIVER", "metal")
    rep = driver.probe()
    assert rep["selected"] is None and "metal" in rep["error"] and rep["drivers"] == []


def test_probe_with_nothing_installed(tmp_path, monkeypatch):
    def nothing(path):
        raise OSError(f"{path}: cannot open shared object file: No such file or directory")

    monkeypatch.delenv("MLX_AMD_DRIVER", raising=False)
    monkeypatch.setitem(driver.FACTORIES, "hip",
                        lambda: hip.HipDriver(env={"ROCM_PATH": str(tmp_path)}, opener=nothing))
    monkeypatch.setitem(driver.FACTORIES, "cuda", lambda: cuda.CudaDriver(opener=nothing))
    driver.reset()
    try:
        rep = driver.probe()
    finally:
        driver.reset()
    assert rep["selected"] is None and rep["error"]
    assert [r["name"] for r in rep["drivers"]] == ["hip", "cuda"]
    assert all(not r["loaded"] and r["error"] and r["tried"] for r in rep["drivers"])
    assert f"{tmp_path}/lib: no such directory" in rep["drivers"][0]["tried"]


def test_driver_package_imports_only_the_standard_library():
    import subprocess
    import sys

    code = ("import sys, importlib, types\n"
            f"for n, p in (('mlx_amd', {REPO!r} + '/mlx_amd'), ('mlx_amd.runtime', {REPO!r} + '/mlx_amd/runtime')):\n"
            "    m = types.ModuleType(n); m.__path__ = [p]; sys.modules[n] = m\n"
            "for m in ('', '.hip', '.cuda', '.table'):\n"
            "    importlib.import_module('mlx_amd.runtime.driver' + m)\n"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('mlx', 'numpy')]\n"
            "assert not bad, bad\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


# --- CUDA prototypes and constants against cuda.h, where one is installed ------------------------------

def _cuda_header():
    cands = [os.path.join(os.environ[v], "include", "cuda.h") for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    cands += sorted(glob.glob("/usr/local/cuda*/include/cuda.h"), reverse=True) + ["/usr/include/cuda.h"]
    return next((c for c in cands if os.path.exists(c)), None)


def _checker():
    spec = importlib.util.spec_from_file_location("check_hip_bindings", os.path.join(REPO, "tools", "check_hip_bindings.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def cuda_h():
    path = _cuda_header()
    if path is None:
        pytest.skip("no cuda.h installed (CUDA_HOME, /usr/local/cuda*): CUDA prototypes not checked")
    return path


def test_cuda_table_matches_cuda_h(cuda_h):
    c = _checker()
    text = c.read_header([cuda_h])
    protos = c.prototypes(text, "CUresult")
    # CUdeviceptr is an integer address in cuda.h; the table passes it as a pointer (same ABI)
    over = {"CUdeviceptr": "ptr", "CUdeviceptr_v2": "ptr"}
    problems, checked = c.check_prototypes(table.TABLE, "cuda", protos, c.macro_aliases(text), c.typedefs(text), over)
    assert checked >= len([e for e in table.TABLE if e.cuda])
    assert not problems, "\n".join(problems)


def test_cuda_constants_match_cuda_h(cuda_h):
    text = open(cuda_h).read()
    want = {enum: v for enum, v in cuda.ATTRIBUTES.values()} | cuda.CONSTANTS
    for name, value in want.items():
        m = re.search(rf"\b{name}\s*=\s*(0x[0-9a-fA-F]+|\d+)", text) or \
            re.search(rf"#\s*define\s+{name}\s+\(?(0x[0-9a-fA-F]+|\d+)", text)
        assert m, f"{name} not found in {cuda_h}"
        assert int(m.group(1), 0) == value, f"{name}: cuda.py has {value}, cuda.h has {m.group(1)}"


def test_the_prototype_checker_catches_a_wrong_declaration(cuda_h):
    c = _checker()
    text = c.read_header([cuda_h])
    bad = [e._replace(argtypes=(table.P, ctypes.c_int)) if e.name == "mem_alloc" else e for e in table.TABLE]
    problems, _ = c.check_prototypes(bad, "cuda", c.prototypes(text, "CUresult"), c.macro_aliases(text),
                                     c.typedefs(text), {"CUdeviceptr": "ptr", "CUdeviceptr_v2": "ptr"})
    assert len(problems) == 1 and problems[0].startswith("mem_alloc (cuMemAlloc_v2)")


def test_cuda_kernel_node_layout_matches_cuda_h(cuda_h, tmp_path):
    """The graph executor fills CUDA_KERNEL_NODE_PARAMS_v2 by these offsets."""
    import shutil

    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler")
    c = _checker()
    struct, fields, size = cuda.KERNEL_NODE_PARAMS
    exprs = {f"sizeof": f"sizeof({struct})"}
    for key, (cfield, _) in fields.items():
        exprs[key] = f"offsetof({struct}, {cfield})"
    for d in "YZ":
        exprs[f"gridDim{d}"] = f"offsetof({struct}, gridDim{d})"
        exprs[f"blockDim{d}"] = f"offsetof({struct}, blockDim{d})"
    got = c.compile_and_print(exprs, ["cuda.h"], ["-I" + os.path.dirname(cuda_h)], str(tmp_path))
    assert got["sizeof"] == size
    for key, (_, off) in fields.items():
        assert got[key] == off, (key, got[key], off)
    assert got["gridDimY"] == got["grid"] + 4 and got["gridDimZ"] == got["grid"] + 8
    assert got["blockDimY"] == got["block"] + 4 and got["blockDimZ"] == got["block"] + 8
    assert cuda.CudaDriver.kernel_node_layout["size"] == size
