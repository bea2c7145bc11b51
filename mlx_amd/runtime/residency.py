"""Which side of each buffer is valid: the residency manager (DESIGN.md, "Memory model").

Every buffer the evaluator touches is identified by a *key*, the address of MLX's
buffer (its 8-byte size header, i.e. data - 8), which the bridge reports.

- Ours (``new_buffer``): outputs the evaluator attaches to MLX arrays. Discrete: a
  pinned host block that MLX sees plus a device block that kernels write. Unified:
  one managed block whose data pointer is also the device pointer; never copied.
  The token ``new_buffer`` returns *is* the key, and the bridge's deleter reports it
  to ``freed`` when MLX drops the buffer.
- MLX-owned (weights, numpy-born arrays, CPU-fallback outputs): uploaded on first
  ``device_ptr`` and kept resident until the bridge reports the host buffer
  ``expired``. The bridge must report an expiry before MLX can reuse the address
  (its CPU allocator is plain malloc); a record whose data pointer or size no longer
  match is dropped and uploaded afresh, but a reused address of the same size
  cannot be told apart here. In unified mode MLX-owned buffers are still copied once
  into managed memory: MLX's pageable host memory is only GPU-addressable on APUs
  with XNACK (MI300A) or after registering it, which the driver interface does not
  offer yet; the H200 test machine cannot address it at all.

Per buffer, one byte range ``[lo, hi)`` (the hull of the writes since the last
sync) marks where the device copy is newer than the host; ``dev_valid`` False means
the host is newer (MLX's CPU fallback wrote it). All copies go on the caller's
stream. The evaluator uses one stream, so a freed block may be handed out again at
once: whatever reuses it is queued after the kernels that used it.
"""

from __future__ import annotations

import ctypes
import os
import sys
import weakref
from typing import Iterable, Optional

from . import bridge as _bridge
from .memory import DevicePool, HostPool

HEADER = 8   # MLX's size header right before the data: key = data - 8

MODES = ("unified", "discrete")
SMALL_UPLOAD = 4096          # bytes: uploads up to this size are staged (see _staged)
STAGE_BYTES = 1 << 20
CONST_SLAB = 64 << 10        # bytes: device slab for small constants (upload_consts)
CONST_BYTES = 1 << 20        # slabs kept before the constant cache starts over (trim_consts)
COUNTER_RUN = 64             # a new position-like constant brings this many values (upload_consts)
COUNTER_MAX = 1 << 24        # ... when it is a 4-byte value below this (as an int32)
INVAL_LOG = 1 << 16          # invalidated keys kept for replay programs' leaf caches


class _Rec:
    __slots__ = ("key", "nbytes", "host_ptr", "dev_ptr", "host", "dev", "ours", "shared",
                 "lo", "hi", "dev_valid")

    def __init__(self, key, nbytes, host_ptr, dev_ptr, host, dev, ours, shared):
        self.key, self.nbytes, self.host_ptr, self.dev_ptr = key, nbytes, host_ptr, dev_ptr
        self.host, self.dev, self.ours, self.shared = host, dev, ours, shared
        self.lo = self.hi = 0          # device-newer range; empty when lo >= hi
        self.dev_valid = True

    def same_buffer(self, host_ptr: int, nbytes: int) -> bool:
        """Still this record's buffer: ours, or MLX's at the same host address and size."""
        return self.ours or (self.host_ptr == host_ptr and self.nbytes == nbytes)

    def current(self, host_ptr: int, nbytes: int) -> bool:
        """Its device copy serves as it is (device_ptr's hit, without the call)."""
        return self.dev_valid and self.same_buffer(host_ptr, nbytes)


def resolve_lazy(unified: bool) -> bool:
    """Write-back on read (True) or at the end of every evaluation (False).

    Lazy needs every path by which the host reads an array to go through mlx-amd: the
    patched array methods, mx.save & co., the CPU fallback and, from Python 3.12 on, the
    buffer protocol (before 3.12, ``np.array(a)`` reads host memory unseen). Unified memory
    copies nothing either way. ``MLX_AMD_WRITEBACK=eager|lazy`` overrides."""
    if unified:
        return False
    forced = os.environ.get("MLX_AMD_WRITEBACK", "").strip().lower()
    if forced in ("eager", "lazy"):
        return forced == "lazy"
    if forced:
        raise ValueError(f"MLX_AMD_WRITEBACK={forced!r}: expected eager or lazy")
    return sys.version_info >= (3, 12)


def resolve_mode(props, mode: Optional[str] = None) -> str:
    """``mode``, else ``MLX_AMD_MEMORY``, else unified on integrated GPUs."""
    if mode is None:
        mode, src = os.environ.get("MLX_AMD_MEMORY"), "MLX_AMD_MEMORY"
        if not mode:
            mode, src = ("unified" if props.integrated else "discrete"), "default for this device"
    else:
        src = "mode"
    if not isinstance(mode, str):
        raise TypeError(f"{src} must be a string, got {type(mode).__name__}")
    mode = mode.strip().lower()
    if mode not in MODES:
        raise ValueError(f"{src}={mode!r}: expected one of {', '.join(MODES)}")
    if mode == "unified" and not props.managed_memory:
        raise ValueError(f"{src}=unified, but {props.name} does not support managed memory")
    return mode


class Residency:
    def __init__(self, driver, props, mode: Optional[str] = None):
        self.driver = driver
        self.mode = resolve_mode(props, mode)
        self.unified = self.mode == "unified"
        self.lazy = resolve_lazy(self.unified)
        if self.unified:
            # one pool of managed blocks serves our outputs, uploads and temporaries
            self.host_pool = HostPool(driver, managed=True)
            self.device_pool = self.host_pool
        else:
            self.host_pool = HostPool(driver, pageable_large=self.lazy)
            self.device_pool = DevicePool(driver)
        self._recs: dict[int, _Rec] = {}
        # keys whose device copy went away or went stale, in order: replay programs cache
        # leaf addresses natively and forget these (sync_leaf_cache); _inval_base is the
        # log position of _inval[0]
        self._inval: list = []
        self._inval_base = 0
        # a replay's fresh output buffers, native until adopted (adopt)
        self.outputs = _bridge.Outputs(self.host_pool.core, self.device_pool.core)
        self._dirty: set[int] = set()      # keys whose device copy is newer somewhere
        self.uploads = self.upload_bytes = 0
        self.writebacks = self.writeback_bytes = 0
        # Small uploads (Python scalars become 4-byte MLX arrays in every `x * 2.0`) go
        # through a pinned staging arena: a CPU copy plus an asynchronous H2D copy, instead
        # of a synchronous copy from pageable memory. Slots are reused only after the
        # evaluator has synchronised the stream (``synchronized``).
        self._stage = None
        self._stage_off = 0
        # Device copies of small MLX constants by value (bridge ConstCache; replays look
        # them up natively): slabs from the device pool, [(block, host bytes kept until the
        # slab goes)], all dropped at once past CONST_BYTES
        self.consts = _bridge.ConstCache()
        self._const_slabs: list = []
        self._const_off = CONST_SLAB

    # --- our outputs --------------------------------------------------------------
    def new_buffer(self, nbytes: int) -> tuple[int, int, int]:
        """A buffer for an output: (token == key, host data pointer, device pointer)."""
        host = self.host_pool.alloc(nbytes)
        if self.unified:
            dev, dev_ptr = None, host.data
        else:
            try:
                dev = self.device_pool.alloc(nbytes)
            except BaseException:
                self.host_pool.free(host)
                raise
            dev_ptr = dev.data
        key = host.data - HEADER
        self._recs[key] = _Rec(key, nbytes, host.data, dev_ptr, host, dev, True, self.unified)
        return key, host.data, dev_ptr

    def adopt(self) -> int:
        """Records for the outputs a replay attached (``outputs``, src/bridge/pool.h) that
        are still alive, each written in full by the device. The ones MLX dropped before
        this were recycled natively by ``drain_freed`` and never reach Python. Returns how
        many were adopted."""
        items = self.outputs.adopt()
        if not items:
            return 0
        recs, dirty, unified = self._recs, self._dirty, self.unified
        hblock, dblock = self.host_pool.block, self.device_pool.block
        for key, host, dev_ptr, n in items:
            rec = _Rec(key, n, host, dev_ptr, hblock(host, n), None if unified else dblock(dev_ptr, n),
                       True, unified)
            if n:
                rec.hi = n
                dirty.add(key)
            recs[key] = rec
        return len(items)

    def device_ptrs(self, leaves, stream=None) -> list:
        """``device_ptr`` for many (key, host data pointer, buffer bytes), the common case
        (tracked, valid on the device, same host buffer) without a call each."""
        recs, out = self._recs, []
        for key, host, nbytes in leaves:
            rec = recs.get(key)
            if rec is not None and rec.current(host, nbytes):
                out.append(rec.dev_ptr)
            else:
                out.append(self.device_ptr(key, host, nbytes, stream))
        return out

    def key_of(self, token: int) -> int:
        return token

    def owns(self, token: int) -> bool:
        """True for a live buffer of ours (``new_buffer``) that has not been freed."""
        rec = self._recs.get(token)
        return (rec is not None and rec.ours) or self.outputs.has(token)

    def freed(self, tokens: Iterable[int]) -> None:
        """The bridge's deleters reported these buffers of ours dead: recycle their blocks."""
        unknown = []
        recs = self._recs
        for t in tokens:
            rec = recs.get(t)
            if rec is None or not rec.ours:
                unknown.append(t)
                continue
            del recs[t]
            self._invalidate(t)
            self._dirty.discard(t)
            self.host_pool.free(rec.host)
            if rec.dev is not None:
                self.device_pool.free(rec.dev)
        if unknown:
            raise ValueError(f"freed(): {len(unknown)} token(s) are not live buffers of ours "
                             f"(double free?): {', '.join(hex(t) for t in unknown[:8])}")

    # --- any tracked buffer ----------------------------------------------------------
    def device_ptr(self, key: int, host_data_ptr: int, buffer_nbytes: int, stream=None) -> int:
        """Device address of a buffer's data, uploading MLX-owned host data on first use."""
        rec = self._recs.get(key)
        if rec is not None:
            if rec.same_buffer(host_data_ptr, buffer_nbytes):
                if not rec.dev_valid:
                    self._upload(rec, stream)
                return rec.dev_ptr
            self._drop(rec)          # the address was reused by another MLX buffer
        if not host_data_ptr and buffer_nbytes:
            raise ValueError(f"device_ptr(key={key:#x}): null host data pointer for {buffer_nbytes} bytes")
        dev = self.device_pool.alloc(buffer_nbytes)
        rec = _Rec(key, buffer_nbytes, host_data_ptr, dev.data, None, dev, False, False)
        self._upload(rec, stream)
        self._recs[key] = rec
        return rec.dev_ptr

    def _upload(self, rec: _Rec, stream) -> None:
        n = rec.nbytes
        if n:
            src = rec.host_ptr
            if n <= SMALL_UPLOAD and stream is not None and not self.unified:
                src = self._staged(src, n, stream)
            self.driver.memcpy_htod(rec.dev_ptr, src, n, stream)
        rec.dev_valid = True
        rec.lo = rec.hi = 0
        self._dirty.discard(rec.key)
        self.uploads += 1
        self.upload_bytes += rec.nbytes

    def _staged(self, host_ptr: int, n: int, stream) -> int:
        dst = self._staged_region(n, stream)
        self.driver.host_copy(dst, host_ptr, n)
        return dst

    def _staged_region(self, n: int, stream) -> int:
        """n bytes of the pinned staging arena, free of copies still reading them."""
        if self._stage is None:   # pinned whatever the pool's policy for its size
            self._stage = self.host_pool.pinned(STAGE_BYTES)
            weakref.finalize(self, self.host_pool.free_pinned, self._stage).atexit = False
        off = (self._stage_off + 255) & ~255
        if off + n > STAGE_BYTES:   # full: wait for the copies still reading it
            self.driver.stream_synchronize(stream)
            off = 0
        self._stage_off = off + n
        return self._stage + off

    def synchronized(self) -> None:
        """The evaluator's stream is idle: the staging arena can be reused from the start."""
        self._stage_off = 0

    def written(self, key: int, byte_range: Optional[tuple] = None) -> None:
        """A kernel wrote the device copy (all of it, or bytes [lo, hi))."""
        rec = self._recs.get(key)
        if rec is None:
            raise KeyError(f"written(): buffer {key:#x} is not tracked")
        if byte_range is None:
            lo, hi = 0, rec.nbytes
        else:
            lo, hi = byte_range
            if not 0 <= lo <= hi <= rec.nbytes:
                raise ValueError(f"written({key:#x}): range [{lo}, {hi}) outside the buffer's {rec.nbytes} bytes")
            if lo == hi:
                return
        self._widen(key, rec, lo, hi)

    def _widen(self, key, rec, lo, hi) -> None:
        """The device copy is newer in [lo, hi) too (a valid, non-empty range)."""
        if rec.lo < rec.hi:
            lo, hi = min(lo, rec.lo), max(hi, rec.hi)
        else:
            self._dirty.add(key)
        rec.lo, rec.hi = lo, hi

    def written_ranges(self, items) -> None:
        """``written`` for each (key, lo, hi) in order (lo < 0: the whole buffer), as a replay
        reports them (a decode step's KV-cache writes): the common cases inline, the rest
        (unknown keys, bad or empty ranges) through ``written`` itself, errors included."""
        recs, widen = self._recs, self._widen
        for key, lo, hi in items:
            rec = recs.get(key)
            if rec is None:
                self.written(key, None if lo < 0 else (lo, hi))
            elif lo < 0:
                widen(key, rec, 0, rec.nbytes)
            elif 0 <= lo < hi <= rec.nbytes:
                widen(key, rec, lo, hi)
            else:
                self.written(key, (lo, hi))

    def host_written(self, key: int) -> None:
        """MLX's CPU fallback wrote the host copy: the device copy is stale."""
        rec = self._recs.get(key)
        if rec is not None:
            rec.lo = rec.hi = 0
            self._dirty.discard(key)
            if not rec.shared:
                rec.dev_valid = False
                self._invalidate(key)

    def _download(self, rec: _Rec, stream) -> int:
        """Queue the D2H copy of the stale range; returns bytes copied."""
        n = 0
        if not rec.shared:
            n = rec.hi - rec.lo
            self.driver.memcpy_dtoh(rec.host_ptr + rec.lo, rec.dev_ptr + rec.lo, n, stream)
            self.writebacks += 1
            self.writeback_bytes += n
        rec.lo = rec.hi = 0
        self._dirty.discard(rec.key)
        return n

    def ensure_host(self, keys: Iterable[int], stream=None) -> int:
        """Make the host copies of ``keys`` valid (used before MLX's CPU code reads them);
        returns bytes copied. The copies are queued together and waited for once (a CPU
        fallback node with several device-made inputs syncs once, not per input); waits
        whenever the device wrote a buffer, even in unified mode."""
        return self.writeback(list(keys), stream)

    def writeback(self, keys_alive: Optional[Iterable[int]] = None, stream=None,
                  sync: bool = True, collect: Optional[list] = None) -> int:
        """At the end of an evaluation: copy back the stale ranges of the buffers still alive
        (``None``: every tracked buffer, right after ``freed`` has removed the dead ones).
        Returns bytes copied; ``collect`` receives the keys copied; ``sync=False`` leaves
        the copies queued (the caller tracks their completion)."""
        n, copied = 0, False
        recs = self._recs
        for key in list(self._dirty) if keys_alive is None else keys_alive:
            rec = recs.get(key)
            if rec is not None and rec.lo < rec.hi:
                n += self._download(rec, stream)
                copied = True
                if collect is not None:
                    collect.append(key)
        if copied and sync:
            self.driver.stream_synchronize(stream)
        return n

    # --- replay programs' leaf caches ----------------------------------------------------
    def _invalidate(self, key: int) -> None:
        self._inval.append(key)
        if len(self._inval) > INVAL_LOG:          # programs that fell behind clear instead
            half = len(self._inval) // 2
            del self._inval[:half]
            self._inval_base += half

    def sync_leaf_cache(self, program, seen: int) -> int:
        """Make a replay program's native leaf cache forget every key invalidated since log
        position ``seen`` (all of them if the log moved past it); returns the new position."""
        end = self._inval_base + len(self._inval)
        if seen == end:
            return end
        if seen < self._inval_base:
            program.clear_leaves()
        else:
            program.forget_leaves(self._inval[seen - self._inval_base:])
        return end

    # --- MLX-owned buffers ---------------------------------------------------------------
    def _drop(self, rec: _Rec) -> None:
        self._invalidate(rec.key)
        del self._recs[rec.key]
        self._dirty.discard(rec.key)
        self.device_pool.free(rec.dev)

    def upload_consts(self, items, stream) -> list:
        """Device addresses for small MLX-owned constants [(key, host_data_ptr, nbytes)]
        (``Graph.leaves`` says which leaves are such and how many of their bytes count):
        each distinct value is copied once into a constant slab (one copy for the batch)
        and registered in ``consts``, where the next replay finds it.
        No records: the device copy belongs to the value, not to MLX's buffer (kernels
        never write MLX's buffers, so its host bytes stay the truth)."""
        values = [ctypes.string_at(hp, n) for _, hp, n in items]
        known, offs, total = {}, {}, 0
        find = self.consts.find
        counters = []
        for v in values:
            if v in known or v in offs:
                continue
            d = find(v)
            if d is not None:
                known[v] = d
                continue
            total = (total + 15) & ~15   # element alignment for every dtype
            offs[v] = total
            total += len(v)
            if len(v) == 4 and len(counters) < 4:
                c = int.from_bytes(v, "little")
                if 0 < c < COUNTER_MAX:   # (0: float 0.0 and int 0, the commonest constant)
                    counters.append(c)
        if not offs:
            return [known[v] for v in values]
        asked, asked_bytes = len(offs), total   # the stats count what was asked for
        # A position counter (a decode step's RoPE offset: a fresh int32 scalar, one more each
        # step) would come here every step: its next values go in the same copy, so the next
        # COUNTER_RUN - 1 steps find theirs in the cache natively (Graph.leaves). Cached by
        # bytes like any constant, so a guess that is never used costs only its slot.
        for c in counters:
            nxt = (c + 1).to_bytes(4, "little")
            if nxt in offs or find(nxt) is not None:
                continue
            for k in range(c + 1, c + COUNTER_RUN):
                v = k.to_bytes(4, "little")
                if v not in offs:
                    total = (total + 15) & ~15
                    offs[v] = total
                    total += 4
        if self._const_off + total > CONST_SLAB:
            block = self.device_pool.alloc(max(CONST_SLAB, total))
            self._const_slabs.append([block, []])
            self._const_off = 0
        slab = self._const_slabs[-1]
        base = slab[0].data + self._const_off
        blob = bytearray(total)
        for v, off in offs.items():
            blob[off:off + len(v)] = v
        src = (ctypes.c_char * total).from_buffer(blob)
        if stream is not None and not self.unified and total <= STAGE_BYTES // 2:
            stage = self._staged_region(total, stream)     # pinned: the copy is asynchronous
            self.driver.host_copy(stage, ctypes.addressof(src), total)
            self.driver.memcpy_htod(base, stage, total, stream)
        else:
            self.driver.memcpy_htod(base, ctypes.addressof(src), total, stream)
            slab[1].append(blob)   # the source outlives any copy still reading it
        self._const_off += (total + 255) & ~255
        self.consts.add([(v, base + off) for v, off in offs.items()])
        self.uploads += asked
        self.upload_bytes += asked_bytes
        return [known[v] if v in known else base + offs[v] for v in values]

    def trim_consts(self) -> None:
        """Past CONST_BYTES of slabs, the constant cache starts over. Called before a
        replay looks constants up, so no queued launch of it reads a dropped slab; the slabs
        go back to the pool in stream order."""
        if len(self._const_slabs) * CONST_SLAB > CONST_BYTES:
            self._drop_consts()

    def _drop_consts(self) -> None:
        self.consts.clear()
        for block, _ in self._const_slabs:
            self.device_pool.free(block)
        self._const_slabs = []
        self._const_off = CONST_SLAB

    def expired(self, keys: Iterable[int]) -> None:
        """MLX-owned host buffers died: drop their device copies (unknown keys are ignored)."""
        recs = self._recs
        for key in keys:
            rec = recs.get(key)
            if rec is not None and not rec.ours:
                self._drop(rec)

    def clear(self, stream=None) -> None:
        """Drop every MLX-owned device copy, writing back what kernels wrote into them
        first: once the runtime is disabled MLX may mutate or donate them unseen."""
        theirs = [r for r in self._recs.values() if not r.ours]
        self.writeback([r.key for r in theirs], stream)
        for rec in theirs:
            self._drop(rec)
        self._drop_consts()

    def is_tracked(self, key: int) -> bool:
        return key in self._recs

    def stats(self) -> dict:
        resident = sum(1 for r in self._recs.values() if not r.ours)
        return {
            "mode": self.mode, "writeback": "lazy" if self.lazy else "eager",
            "uploads": self.uploads, "upload_bytes": self.upload_bytes,
            "writebacks": self.writebacks, "writeback_bytes": self.writeback_bytes,
            "resident_buffers": resident, "our_buffers": len(self._recs) - resident,
            "device_pool": self.device_pool.stats(),
            "host_pool": self.host_pool.stats(),
        }
