"""The one binding table both GPU drivers resolve their calls from.

Each row is (logical name, HIP symbol, CUDA symbol, restype, argtypes). Where the
two APIs correspond the row names both symbols and one prototype; vendor-only
calls name ``None`` for the other vendor. A symbol may be a tuple of names tried
in order (newest first). ``tools/check_hip_bindings.py`` checks every HIP row
against Debian's ROCm 6.4 headers and library; ``tests/driver/test_table.py``
checks the CUDA rows against ``cuda.h`` when one is installed.

Standard library only: this package must import without mlx or numpy.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import threading
from typing import Callable, NamedTuple, Optional, Sequence, Union

from .base import Driver, DriverError, DriverUnavailable

P = ctypes.c_void_p          # pointers and opaque handles (a CUdeviceptr is a 64-bit address)
S = ctypes.c_char_p          # C strings, or byte buffers the callee fills
I = ctypes.c_int             # status codes, enums, ordinals
U = ctypes.c_uint
Z = ctypes.c_size_t
Q = ctypes.c_ulonglong
B = ctypes.c_ubyte
pI = ctypes.POINTER(ctypes.c_int)
pP = ctypes.POINTER(ctypes.c_void_p)
pZ = ctypes.POINTER(ctypes.c_size_t)
pF = ctypes.POINTER(ctypes.c_float)
pS = ctypes.POINTER(ctypes.c_char_p)

Symbol = Union[None, str, tuple]


class Entry(NamedTuple):
    name: str
    hip: Symbol
    cuda: Symbol
    restype: object
    argtypes: tuple


TABLE: tuple[Entry, ...] = tuple(Entry(*row) for row in (
    # versions, devices
    ("init",                   "hipInit",                    "cuInit",                I, (U,)),
    ("driver_get_version",     "hipDriverGetVersion",        "cuDriverGetVersion",    I, (pI,)),
    ("runtime_get_version",    "hipRuntimeGetVersion",       None,                    I, (pI,)),
    ("device_get_count",       "hipGetDeviceCount",          "cuDeviceGetCount",      I, (pI,)),
    ("device_get",             "hipDeviceGet",               "cuDeviceGet",           I, (pI, I)),
    ("device_get_attribute",   "hipDeviceGetAttribute",      "cuDeviceGetAttribute",  I, (pI, I, I)),
    ("device_get_name",        "hipDeviceGetName",           "cuDeviceGetName",       I, (S, I, I)),
    ("device_total_mem",       "hipDeviceTotalMem",          "cuDeviceTotalMem_v2",   I, (pZ, I)),
    ("device_get_pci_bus_id",  "hipDeviceGetPCIBusId",       "cuDeviceGetPCIBusId",   I, (S, I, I)),
    # hipDeviceProp_t changed layout in ROCm 6; the plain name keeps the old (R0000) one
    ("device_get_properties",  "hipGetDevicePropertiesR0600", None,                   I, (P, I)),
    ("device_get_properties_r0000", "hipGetDeviceProperties", None,                   I, (P, I)),
    ("set_device",             "hipSetDevice",               None,                    I, (I,)),
    ("primary_ctx_retain",     None,                         "cuDevicePrimaryCtxRetain", I, (pP, I)),
    ("ctx_set_current",        None,                         "cuCtxSetCurrent",       I, (P,)),
    ("mem_get_info",           "hipMemGetInfo",              "cuMemGetInfo_v2",       I, (pZ, pZ)),
    ("device_synchronize",     "hipDeviceSynchronize",       "cuCtxSynchronize",      I, ()),
    # streams, events
    ("stream_create",          "hipStreamCreateWithFlags",   "cuStreamCreate",        I, (pP, U)),
    ("stream_destroy",         "hipStreamDestroy",           "cuStreamDestroy_v2",    I, (P,)),
    ("stream_synchronize",     "hipStreamSynchronize",       "cuStreamSynchronize",   I, (P,)),
    ("stream_wait_event",      "hipStreamWaitEvent",         "cuStreamWaitEvent",     I, (P, P, U)),
    ("event_create",           "hipEventCreateWithFlags",    "cuEventCreate",         I, (pP, U)),
    ("event_destroy",          "hipEventDestroy",            "cuEventDestroy_v2",     I, (P,)),
    ("event_record",           "hipEventRecord",             "cuEventRecord",         I, (P, P)),
    ("event_synchronize",      "hipEventSynchronize",        "cuEventSynchronize",    I, (P,)),
    ("event_query",            "hipEventQuery",              "cuEventQuery",          I, (P,)),
    ("event_elapsed_time",     "hipEventElapsedTime",
                               ("cuEventElapsedTime_v2", "cuEventElapsedTime"),   I, (pF, P, P)),
    # memory
    ("mem_alloc",              "hipMalloc",                  "cuMemAlloc_v2",         I, (pP, Z)),
    ("mem_free",               "hipFree",                    "cuMemFree_v2",          I, (P,)),
    ("mem_host_alloc",         "hipHostMalloc",              "cuMemHostAlloc",        I, (pP, Z, U)),
    ("mem_host_free",          "hipHostFree",                "cuMemFreeHost",         I, (P,)),
    ("mem_alloc_managed",      "hipMallocManaged",           "cuMemAllocManaged",     I, (pP, Z, U)),
    # the stream-ordered allocator: frees that neither synchronise nor unmap at once
    ("mem_alloc_async",        "hipMallocAsync",             "cuMemAllocAsync",       I, (pP, Z, P)),
    ("mem_free_async",         "hipFreeAsync",               "cuMemFreeAsync",        I, (P, P)),
    ("device_get_default_mem_pool", "hipDeviceGetDefaultMemPool", "cuDeviceGetDefaultMemPool", I, (pP, I)),
    ("memset_d8_async",        "hipMemsetD8Async",           "cuMemsetD8Async",       I, (P, B, Z, P)),
    ("memcpy_htod",            "hipMemcpyHtoD",              "cuMemcpyHtoD_v2",       I, (P, P, Z)),
    ("memcpy_dtoh",            "hipMemcpyDtoH",              "cuMemcpyDtoH_v2",       I, (P, P, Z)),
    ("memcpy_dtod",            "hipMemcpyDtoD",              "cuMemcpyDtoD_v2",       I, (P, P, Z)),
    ("memcpy_htod_async",      "hipMemcpyHtoDAsync",         "cuMemcpyHtoDAsync_v2",  I, (P, P, Z, P)),
    ("memcpy_dtoh_async",      "hipMemcpyDtoHAsync",         "cuMemcpyDtoHAsync_v2",  I, (P, P, Z, P)),
    ("memcpy_dtod_async",      "hipMemcpyDtoDAsync",         "cuMemcpyDtoDAsync_v2",  I, (P, P, Z, P)),
    # direction inferred from the addresses: HIP takes a kind argument, CUDA does not
    ("memcpy_kind",            "hipMemcpy",                  None,                    I, (P, P, Z, I)),
    ("memcpy_kind_async",      "hipMemcpyAsync",             None,                    I, (P, P, Z, I, P)),
    ("memcpy_unified",         None,                         "cuMemcpy",              I, (P, P, Z)),
    ("memcpy_unified_async",   None,                         "cuMemcpyAsync",         I, (P, P, Z, P)),
    # modules, launches
    ("module_load_data",       "hipModuleLoadData",          "cuModuleLoadData",      I, (pP, S)),
    ("module_unload",          "hipModuleUnload",            "cuModuleUnload",        I, (P,)),
    ("module_get_function",    "hipModuleGetFunction",       "cuModuleGetFunction",   I, (pP, P, S)),
    ("launch_kernel",          "hipModuleLaunchKernel",      "cuLaunchKernel",        I,
                               (P, U, U, U, U, U, U, U, P, P, P)),
    # graphs: a replayed program's launches as one graph (src/bridge/graphexec.h)
    ("graph_create",           "hipGraphCreate",             "cuGraphCreate",         I, (pP, U)),
    ("graph_destroy",          "hipGraphDestroy",            "cuGraphDestroy",        I, (P,)),
    ("graph_add_kernel_node",  "hipGraphAddKernelNode",
                               ("cuGraphAddKernelNode_v2", "cuGraphAddKernelNode"), I, (pP, P, pP, Z, P)),
    ("graph_instantiate",      "hipGraphInstantiateWithFlags", "cuGraphInstantiateWithFlags", I, (pP, P, Q)),
    ("graph_launch",           "hipGraphLaunch",             "cuGraphLaunch",         I, (P, P)),
    ("graph_exec_kernel_node_set_params", "hipGraphExecKernelNodeSetParams",
                               ("cuGraphExecKernelNodeSetParams_v2", "cuGraphExecKernelNodeSetParams"),
                                                                                      I, (P, P, P)),
    ("graph_exec_destroy",     "hipGraphExecDestroy",        "cuGraphExecDestroy",    I, (P,)),
    # errors: HIP returns the strings, CUDA writes them through an out-pointer
    ("get_error_name",         "hipGetErrorName",            None,                    S, (I,)),
    ("get_error_string",       "hipGetErrorString",          None,                    S, (I,)),
    ("get_error_name_out",     None,                         "cuGetErrorName",        I, (I, pS)),
    ("get_error_string_out",   None,                         "cuGetErrorString",      I, (I, pS)),
))

BY_NAME: dict[str, Entry] = {e.name: e for e in TABLE}

# Rows a runtime older than ROCm 6 lacks, and the row the driver falls back to there
# (the binding check accepts the absence when the fallback resolves).
HIP_OLDER_FALLBACKS = {"device_get_properties": "device_get_properties_r0000"}


def symbols(entry: Entry, vendor: str) -> tuple:
    """The vendor's candidate symbol names for an entry (empty when vendor-only for the other)."""
    sym = entry.hip if vendor == "hip" else entry.cuda
    if sym is None:
        return ()
    return sym if isinstance(sym, tuple) else (sym,)


class Library:
    """A loaded vendor library whose table entries resolve on first attribute access.

    ``lib.mem_alloc`` is the typed ctypes function for the vendor's symbol; it is
    cached in the instance dict, so later accesses cost a plain attribute lookup.
    ``table`` ({logical name: row with hip/cuda/restype/argtypes}) is this module's
    driver table by default; the GEMM and run-time compiler tables bind through it too.
    """

    def __init__(self, cdll, vendor: str, path: str, table: Optional[dict] = None,
                 unavailable: type = DriverUnavailable):
        self._cdll, self.vendor, self.path = cdll, vendor, path
        self._table = BY_NAME if table is None else table
        self._unavailable = unavailable
        self.resolved: dict[str, str] = {}   # logical name -> symbol actually bound

    def symbol(self, name: str) -> str:
        """The vendor symbol bound (or to be bound) for a logical name; the name if none."""
        if name in self.resolved:
            return self.resolved[name]
        e = self._table.get(name)
        cands = symbols(e, self.vendor) if e is not None else ()
        return cands[0] if cands else name

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        entry = self._table.get(name)
        if entry is None:
            raise AttributeError(f"no binding table entry named {name!r}")
        cands = symbols(entry, self.vendor)
        if not cands:
            raise AttributeError(f"{name!r} has no {self.vendor} symbol in the binding table")
        for sym in cands:
            try:
                fn = self._cdll[sym]          # a fresh function object, typed below
            except AttributeError:
                continue
            fn.restype, fn.argtypes = entry.restype, list(entry.argtypes)
            self.__dict__[name] = fn
            self.resolved[name] = sym
            return fn
        raise self._unavailable(
            f"{self.path} does not export {' or '.join(cands)} (needed for {name}); "
            f"this {self.vendor} library is too old or not the vendor's", [self.path])


def format_arg(a) -> str:
    if isinstance(a, (bytes, bytearray, memoryview)):
        return f"<{len(a)} bytes>"
    if isinstance(a, ctypes.c_void_p):
        return hex(a.value) if a.value else "NULL"
    if a is None:
        return "NULL"
    return str(a)


def make_check(error_cls: type, describe: Callable[[int], tuple],
               rename: Callable[[str], str] = str) -> Callable:
    """Build ``check(status, call, *args)`` raising ``error_cls`` on a non-zero status.

    ``call`` is a function name (``rename`` maps a logical table name to the vendor
    symbol; with ``args`` the text reads ``hipMalloc(17179869184)``) or the whole
    call text. The message is only formatted on failure: the hot path costs one test.
    """

    def check(status: int, call: str, *args) -> None:
        if status:
            sym = rename(call)
            text = f"{sym}({', '.join(map(format_arg, args))})" if args or sym != call else call
            name, message = describe(status)
            raise error_cls(text, status, name, message)

    return check


def open_library(dirs: Sequence[str], names: Sequence[str], opener: Callable = ctypes.CDLL):
    """dlopen the first library that loads: ``(cdll, path, tried)``.

    Each folder in ``dirs`` is searched for ``names`` in order (only files that
    exist are opened), then each bare name goes through the dynamic loader's own
    search (LD_LIBRARY_PATH, ld.so.cache). ``tried`` holds one "where: why" line
    per place looked at; ``(None, None, tried)`` when nothing loads.
    """
    tried: list[str] = []
    cands: list[str] = []
    for d in dirs:
        if not os.path.isdir(d):
            tried.append(f"{d}: no such directory")
            continue
        found = [os.path.join(d, n) for n in names if os.path.exists(os.path.join(d, n))]
        if not found:
            tried.append(f"{d}: no {names[0]}*")
        cands += found
    cands += list(names)
    for cand in cands:
        try:
            return opener(cand), cand, tried
        except OSError as e:
            why = str(e).removeprefix(f"{cand}: ")
            tried.append(f"{cand}{'' if os.path.isabs(cand) else ' (loader search)'}: {why}")
    return None, None, tried


def loaded_path(basename_prefix: str) -> Optional[str]:
    """The file the loader actually mapped for a library opened by bare name."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rstrip("\n").split(None, 5)[-1]
                if os.path.basename(path).startswith(basename_prefix):
                    return path
    except OSError:
        pass
    return None


class Handle(ctypes.c_void_p):
    """A stream, event, module or function: passes straight into ctypes calls.

    Streams, events and modules free themselves when collected unless destroyed
    explicitly; failures there are ignored (a destructor must never raise, and at
    interpreter shutdown the library may already be gone).
    """

    _release = None    # ctypes function taking the handle, set by the driver

    # is_finalizing is bound as a default: at shutdown this module's globals may be None
    def __del__(self, _finalizing=sys.is_finalizing):
        release, value = self._release, self.value
        if release is None or not value or _finalizing():
            return
        try:
            release(value)
        except Exception:
            pass

    def __repr__(self):
        return f"<{type(self).__name__} {hex(self.value) if self.value else 'NULL'}>"


class Stream(Handle):
    pass


class Event(Handle):
    pass


class Module(Handle):
    pass


class Function(Handle):
    """A kernel; keeps its module alive and its name for error messages."""

    def __init__(self, module: Module, name: str):
        super().__init__()
        self.module, self.kernel_name = module, name


def take(handle: Handle) -> int:
    """Detach a handle for explicit destruction: returns its value, leaves it NULL."""
    if not isinstance(handle, Handle) or not handle.value:
        raise ValueError(f"not a live driver handle: {handle!r}")
    value = handle.value
    handle.value = None
    return value


def as_dims(v, what: str) -> tuple[int, int, int]:
    """(x, y, z) from an int or a 1-3 tuple of positive ints."""
    if isinstance(v, int):
        v = (v,)
    try:
        t = tuple(int(x) for x in v)
    except TypeError:
        raise TypeError(f"{what} must be an int or a tuple of 1-3 ints, got {v!r}") from None
    if not 1 <= len(t) <= 3 or any(x < 1 or x >= 1 << 32 for x in t):
        raise ValueError(f"{what} must have 1-3 dimensions, each in [1, 2**32), got {v!r}")
    return (t + (1, 1))[:3]


class _ThreadState(threading.local):
    """Per-thread state: which device this thread is bound to, and its launch scratch.

    The ``extra`` array is the argument-buffer list handed to the launch call:
    {BUFFER_POINTER, <blob>, BUFFER_SIZE, &size, END}. Building it once per thread
    leaves two assignments per launch and keeps concurrent launches from threads apart.
    """

    device = -1

    def __init__(self, end: int):
        self.size = ctypes.c_size_t(0)
        extra = (ctypes.c_char_p * 5)()
        extra[0] = LAUNCH_PARAM_BUFFER_POINTER
        extra[2] = LAUNCH_PARAM_BUFFER_SIZE
        extra[3] = ctypes.addressof(self.size)
        extra[4] = end or None
        self.extra = extra


# The same values in hip_runtime_api.h and cuda.h; only END differs (HIP 3, CUDA 0).
LAUNCH_PARAM_BUFFER_POINTER = 1
LAUNCH_PARAM_BUFFER_SIZE = 2

EVENT_DISABLE_TIMING = 2     # hipEventDisableTiming == CU_EVENT_DISABLE_TIMING
MEM_ATTACH_GLOBAL = 1        # hipMemAttachGlobal == CU_MEM_ATTACH_GLOBAL
ERROR_NOT_READY = 600        # hipErrorNotReady == CUDA_ERROR_NOT_READY


def _size(nbytes, what: str = "nbytes") -> int:
    if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes < 0:
        raise ValueError(f"{what} must be a non-negative int, got {nbytes!r}")
    return nbytes


def _drained(method):
    """A driver call that touches the GPU: first the launch thread issues what was posted to
    it (src/bridge/launcher.h), so the call lands behind it on the device as it would have
    without the thread."""
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        if self.launcher is not None:
            self.launcher.launcher_wait()
        return method(self, *args, **kwargs)
    return call


class TableDriver(Driver):
    """What the HIP and CUDA drivers share: every ``Driver`` method on table entries.

    Subclasses provide versions, devices, properties, errors, the direction-free
    copies and ``_bind_thread`` (make ``self._device`` current in this thread).
    Conventions: ``stream=None`` is the default stream; memset and the directional
    copies with ``stream=None`` return once done, with a stream they are queued on
    it; launches are always queued. The current device is process-wide: every
    thread binds to it on its next call.
    """

    error_class: type = DriverError
    vendor = "abstract"
    launch_param_end = 0
    error_no_device = -1       # the vendor's "no device" status
    init_no_device: tuple = ()  # statuses of init() that mean "no device here" (not a failure)
    attributes: dict = {}      # property field -> (vendor enum name, value)
    # the bridge module while the launch thread runs (Evaluator._start_launcher): calls that
    # touch the GPU drain it first (_drained); the read-back copies and event records of an
    # evaluation's end are posted to it instead
    launcher = None

    @staticmethod
    def format_version(v: int) -> str:
        raise NotImplementedError

    def __init__(self, lib: Library, tried: Sequence[str] = ()):
        self.lib = lib
        self.library_path = lib.path
        self.tried = list(tried)
        self.check = make_check(self.error_class, self.error_string, self._symbol)
        self._device = 0
        self._count: Optional[int] = None
        self._tls = _ThreadState(self.launch_param_end)
        self._event_seq: dict = {}   # event -> the launch thread's job that records it

    def _symbol(self, logical: str) -> str:
        entry = BY_NAME.get(logical)
        if entry is None:
            return logical
        return self.lib.resolved.get(logical) or (symbols(entry, self.vendor) or (logical,))[0]

    def driver_version(self) -> str:
        v = ctypes.c_int()
        self.check(self.lib.driver_get_version(ctypes.byref(v)), "driver_get_version", "&version")
        return self.format_version(v.value)

    def device_count(self) -> int:
        """0 when the runtime says there is no device; other init failures raise."""
        if self._count is None:
            if self._init_status in self.init_no_device:
                self._count = 0
            else:
                self.check(self._init_status, "init", 0)
                n = ctypes.c_int()
                status = self.lib.device_get_count(ctypes.byref(n))
                if status == self.error_no_device:
                    n.value = 0
                else:
                    self.check(status, "device_get_count", "&count")
                self._count = n.value
        return self._count

    def _attribute(self, field: str, device: int) -> int:
        v = ctypes.c_int()
        attr = self.attributes[field]
        self.check(self.lib.device_get_attribute(ctypes.byref(v), attr[1], device),
                   "device_get_attribute", "&value", attr[0], device)
        return v.value

    def _bind(self) -> None:
        if self._tls.device != self._device:
            self._bind_thread()
            self._tls.device = self._device

    def _bind_thread(self) -> None:
        raise NotImplementedError

    def _check_device(self, device) -> int:
        n = self.device_count()
        if not isinstance(device, int) or not 0 <= device < n:
            raise ValueError(f"device must be an int in [0, {n}), got {device!r}")
        return device

    # --- devices ----------------------------------------------------------------
    def set_device(self, device: int) -> None:
        self._device = self._check_device(device)
        self._bind()

    def current_device(self) -> int:
        return self._device

    def mem_info(self) -> tuple[int, int]:
        self._bind()
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self.check(self.lib.mem_get_info(ctypes.byref(free), ctypes.byref(total)), "mem_get_info")
        return free.value, total.value

    @_drained
    def synchronize(self) -> None:
        self._bind()
        self.check(self.lib.device_synchronize(), "device_synchronize")

    # --- streams and events -------------------------------------------------------
    def stream_create(self) -> Stream:
        self._bind()
        s = Stream()
        self.check(self.lib.stream_create(ctypes.byref(s), 0), "stream_create", "&stream", 0)
        s._release = self.lib.stream_destroy
        return s

    @_drained
    def stream_destroy(self, stream) -> None:
        v = take(stream)
        self.check(self.lib.stream_destroy(v), "stream_destroy", hex(v))

    @_drained
    def stream_synchronize(self, stream=None) -> None:
        self._bind()
        self.check(self.lib.stream_synchronize(stream), "stream_synchronize", stream)

    def event_create(self, timing: bool = True) -> Event:
        self._bind()
        e = Event()
        flags = 0 if timing else EVENT_DISABLE_TIMING
        self.check(self.lib.event_create(ctypes.byref(e), flags), "event_create", "&event", flags)
        e._release = self.lib.event_destroy
        return e

    def event_destroy(self, event) -> None:
        v = take(event)
        self.check(self.lib.event_destroy(v), "event_destroy", hex(v))

    def _posted(self, stream, post) -> bool:
        """An evaluation's last stream work (its read-back copies, its completion event): while
        the launch thread still has launches to issue, ``post(stream)`` queues it behind them
        there (True); otherwise the thread is drained and the caller issues it (False)."""
        if self.launcher is None:
            return False
        if stream is not None and self.launcher.launcher_busy():
            post(stream.value or 0)
            return True
        self.launcher.launcher_wait()
        return False

    def event_record(self, event, stream=None) -> None:
        def post(s):   # a wait on the event first waits for this record (_event_issued)
            self._event_seq[event.value] = self.launcher.launcher_post_record(event.value, s)

        if self._posted(stream, post):
            return
        self._bind()
        self.check(self.lib.event_record(event, stream), "event_record", event, stream)

    def _event_issued(self, event, done: bool) -> None:
        """The launch thread has issued this event's record, if one was posted to it."""
        seq = self._event_seq.pop(event.value, None) if done else self._event_seq.get(event.value)
        if seq is not None:
            self.launcher.launcher_wait(seq)

    def event_synchronize(self, event) -> None:
        if self.launcher is not None:
            self._event_issued(event, True)
        self.check(self.lib.event_synchronize(event), "event_synchronize", event)

    def event_query(self, event) -> bool:
        if self.launcher is not None:
            self._event_issued(event, False)
        status = self.lib.event_query(event)
        if status == ERROR_NOT_READY:
            return False
        self.check(status, "event_query", event)
        return True

    def event_elapsed_ms(self, start, end) -> float:
        ms = ctypes.c_float()
        self.check(self.lib.event_elapsed_time(ctypes.byref(ms), start, end),
                   "event_elapsed_time", "&ms", start, end)
        return ms.value

    @_drained
    def stream_wait_event(self, stream, event) -> None:
        self._bind()
        self.check(self.lib.stream_wait_event(stream, event, 0), "stream_wait_event", stream, event, 0)

    # --- memory -------------------------------------------------------------------
    def _alloc(self, logical: str, nbytes: int, *flags) -> int:
        if _size(nbytes) == 0:
            raise ValueError("cannot allocate 0 bytes")
        self._bind()
        p = ctypes.c_void_p()
        self.check(getattr(self.lib, logical)(ctypes.byref(p), nbytes, *flags), logical, nbytes, *flags)
        return p.value

    def malloc(self, nbytes: int) -> int:
        return self._alloc("mem_alloc", nbytes)

    @_drained
    def free(self, ptr: int) -> None:
        self._bind()
        self.check(self.lib.mem_free(ptr), "mem_free", hex(ptr))

    def host_alloc(self, nbytes: int) -> int:
        return self._alloc("mem_host_alloc", nbytes, 0)

    @_drained
    def host_free(self, ptr: int) -> None:
        self._bind()
        self.check(self.lib.mem_host_free(ptr), "mem_host_free", hex(ptr))

    def malloc_managed(self, nbytes: int) -> int:
        return self._alloc("mem_alloc_managed", nbytes, MEM_ATTACH_GLOBAL)

    # The stream-ordered allocator, on the legacy default stream (None), which every
    # stream of ours (created blocking) is ordered with: a block freed there is reused by
    # the next allocation at once, and handed back to the system at the next
    # synchronisation (the device's default pool keeps its release threshold of 0).
    def async_alloc_supported(self) -> bool:
        """Whether malloc_async/free_async serve (the device has a default memory pool)."""
        self._bind()
        pool = ctypes.c_void_p()
        try:
            return self.lib.device_get_default_mem_pool(ctypes.byref(pool), self._device_handle()) == 0 and bool(pool.value)
        except DriverUnavailable:     # a runtime without the entry points
            return False

    def _device_handle(self) -> int:
        """What the vendor's device calls take for the current device (HIP: the ordinal)."""
        return self._device

    @_drained
    def malloc_async(self, nbytes: int) -> int:
        return self._alloc("mem_alloc_async", nbytes, None)

    @_drained
    def free_async(self, ptr: int) -> None:
        self._bind()
        self.check(self.lib.mem_free_async(ptr, None), "mem_free_async", hex(ptr), None)

    @_drained
    def memset(self, ptr: int, value: int, nbytes: int, stream=None) -> None:
        if not isinstance(value, int) or not 0 <= value <= 255:
            raise ValueError(f"memset value must be a byte (0-255), got {value!r}")
        if _size(nbytes) == 0:
            return
        self._bind()
        self.check(self.lib.memset_d8_async(ptr, value, nbytes, stream),
                   "memset_d8_async", hex(ptr), value, nbytes, stream)
        if stream is None:
            self.stream_synchronize(None)

    def _copy(self, direction: str, dst: int, src: int, nbytes: int, stream) -> None:
        if _size(nbytes) == 0:
            return
        if direction == "memcpy_dtoh":
            if self._posted(stream, lambda s: self.launcher.launcher_post_copy_dtoh(dst, src, nbytes, s)):
                return
        elif self.launcher is not None:
            self.launcher.launcher_wait()
        self._bind()
        if stream is None:
            self.check(getattr(self.lib, direction)(dst, src, nbytes), direction, hex(dst), hex(src), nbytes)
        else:
            name = direction + "_async"
            self.check(getattr(self.lib, name)(dst, src, nbytes, stream),
                       name, hex(dst), hex(src), nbytes, stream)

    def memcpy_htod(self, dst: int, src: int, nbytes: int, stream=None) -> None:
        self._copy("memcpy_htod", dst, src, nbytes, stream)

    def memcpy_dtoh(self, dst: int, src: int, nbytes: int, stream=None) -> None:
        self._copy("memcpy_dtoh", dst, src, nbytes, stream)

    def host_copy(self, dst: int, src: int, nbytes: int) -> None:
        ctypes.memmove(dst, src, nbytes)

    def memcpy_dtod(self, dst: int, src: int, nbytes: int, stream=None) -> None:
        self._copy("memcpy_dtod", dst, src, nbytes, stream)
        if stream is None:     # device-to-device copies do not wait for completion themselves
            self.stream_synchronize(None)

    # --- modules and launches -------------------------------------------------------
    def module_load_data(self, image: bytes) -> Module:
        if not isinstance(image, (bytes, bytearray, memoryview)) or len(image) == 0:
            raise ValueError(f"module image must be non-empty bytes, got {type(image).__name__}")
        self._bind()
        image = bytes(image)
        m = Module()
        self.check(self.lib.module_load_data(ctypes.byref(m), image), "module_load_data", "&module", image)
        m._release = self.lib.module_unload
        return m

    @_drained
    def module_unload(self, module) -> None:
        v = take(module)
        self.check(self.lib.module_unload(v), "module_unload", hex(v))

    def module_get_function(self, module, name: str) -> Function:
        if not isinstance(module, Module) or not module.value:
            raise ValueError(f"not a loaded module: {module!r}")
        if not isinstance(name, str) or not name:
            raise ValueError(f"kernel name must be a non-empty str, got {name!r}")
        f = Function(module, name)
        self.check(self.lib.module_get_function(ctypes.byref(f), module, name.encode()),
                   "module_get_function", "&function", module, repr(name))
        return f

    def launch_entry(self) -> tuple:
        """(address of the launch entry point, LAUNCH_PARAM_END) for native launchers; binds
        this thread to the device first (as ``launch`` does)."""
        if self._tls.device != self._device:
            self._bind()
        fn = self.lib.launch_kernel
        return ctypes.cast(fn, ctypes.c_void_p).value, self.launch_param_end

    def launcher_entries(self) -> Optional[dict]:
        """The launch thread's entry points (src/bridge/launcher.h): launch, device-to-host
        copy, event record, and how a new thread binds to the device (``_thread_bind``)."""
        self.ensure_bound()
        addr = lambda f: ctypes.cast(f, ctypes.c_void_p).value  # noqa: E731
        try:
            bind, bind_arg, takes_int = self._thread_bind()
            return dict(launch=addr(self.lib.launch_kernel), param_end=self.launch_param_end,
                        copy_dtoh_async=addr(self.lib.memcpy_dtoh_async),
                        event_record=addr(self.lib.event_record), bind=addr(bind),
                        bind_arg=bind_arg, bind_takes_int=takes_int)
        except (AttributeError, DriverUnavailable):
            return None

    def _thread_bind(self) -> tuple:
        """(entry point, its one argument, whether that is an int) making a new thread's
        calls reach this device: what ``_bind_thread`` does, for native threads."""
        raise NotImplementedError

    # the graph calls the native executor makes (src/bridge/graphexec.h)
    GRAPH_CALLS = ("graph_create", "graph_destroy", "graph_add_kernel_node", "graph_instantiate",
                   "graph_launch", "graph_exec_kernel_node_set_params", "graph_exec_destroy")

    def graph_api(self) -> Optional[tuple]:
        """(entry point address per graph call, the kernel-node parameter struct's layout)
        for the native graph executor; None when the library lacks one of the calls."""
        entries = {}
        for name in self.GRAPH_CALLS:
            try:
                fn = getattr(self.lib, name)
            except (AttributeError, DriverUnavailable):
                return None
            entries[name] = ctypes.cast(fn, ctypes.c_void_p).value
        return entries, dict(self.kernel_node_layout)

    def ensure_bound(self) -> None:
        """Bind the calling thread to the device when it is not yet (cheap when it is)."""
        if self._tls.device != self._device:
            self._bind()

    def launch_failed(self, status: int, function, grid, block, args, shared_mem, stream) -> None:
        """Raise the error a launch returning ``status`` gets (native launches report here)."""
        name = getattr(function, "kernel_name", function)
        self.check(status, f"{self._symbol('launch_kernel')}({name}, grid={grid}, block={block}, "
                   f"shared_mem={shared_mem}, stream={format_arg(stream)}, args=<{len(args or b'')} bytes>)")

    @_drained
    def launch(self, function, grid, block, args: bytes, shared_mem: int = 0, stream=None) -> None:
        if self._tls.device != self._device:
            self._bind()
        t = self._tls
        if type(grid) is not tuple or len(grid) != 3:
            grid = as_dims(grid, "grid")
        if type(block) is not tuple or len(block) != 3:
            block = as_dims(block, "block")
        if args:
            if type(args) is not bytes:
                args = bytes(args)
            t.extra[1] = args       # the array keeps the blob alive until the next launch
            t.size.value = len(args)
            extra = t.extra
        else:
            extra = None
        status = self.lib.launch_kernel(function, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                                        shared_mem, stream, None, extra)
        if status:
            self.launch_failed(status, function, grid, block, args, shared_mem, stream)


__all__ = ["TABLE", "BY_NAME", "Entry", "Library", "make_check", "open_library", "symbols",
           "Handle", "Stream", "Event", "Module", "Function", "TableDriver"]
