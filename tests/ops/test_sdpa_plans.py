"""SDPA family plans without a GPU: decode vs prefill choice, split-K sizing, every
kernel named exists, buffer references stay inside the node's inputs/output/temps,
declined inputs, and the argument blobs against the C structs of mlxa/sdpa_args.h."""

import math
import struct

import pytest

from mlx_amd.runtime import kernel_table as kt
from mlx_amd.runtime.driver.base import DeviceProperties
from mlx_amd.runtime.launch import Launch
from mlx_amd.runtime.ops import sdpa
from mlx_amd.runtime.plan import ZERO_BYTES, HostCall, Layout, Memset, Node
from cprobe import probe_output

R = Layout.row_major


def arch_props(arch, wave=32, cus=132):
    return DeviceProperties(0, "test", arch, arch, {}, wave, cus, 1 << 34, False,
                            0, 0, 0, 0, 1024, 65536, True, "0")


def props(wave=32, cus=132):
    return arch_props("sm_90", wave, cus)


def kv(B, H, L, D, dt, cap=None):
    cap = cap or L
    return Layout.strided((B, H, L, D), (H * cap * D, cap * D, D, 1), dt)


def node(B, Hq, Hkv, Lq, Lk, D, Dv=None, dt="bfloat16", mode="", sinks=False, cap=None,
         mask_dtype="bool", mask=None, sink_dtype=None):
    Dv = Dv or D
    ins = [R((B, Hq, Lq, D), dt), kv(B, Hkv, Lk, D, dt, cap), kv(B, Hkv, Lk, Dv, dt, cap)]
    if mode == "array":
        ins.append(mask if mask is not None else Layout.strided((B, Hq, Lq, Lk), (0, 0, Lk, 1), mask_dtype))
    if sinks:
        ins.append(R((Hq,), sink_dtype or dt))
    return Node("mlx_amd::SDPA", (1 / math.sqrt(D), mode, sinks), tuple(ins), (R((B, Hq, Lq, Dv), dt),))


def check_refs(plan, n):
    for s in plan.steps:
        refs = s.refs if isinstance(s, (Launch, HostCall)) else (s.ref,)
        for r in refs or ():
            if r.kind == "i":
                assert 0 <= r.index < len(n.ins), r
            elif r.kind == "o":
                assert r.index == 0, r
            elif r.kind == "z":
                assert r.index == 0 and r.offset < ZERO_BYTES, r
            else:
                assert r.kind == "t" and 0 <= r.index < len(plan.temps), r
            assert r.offset >= 0
        if isinstance(s, Launch):
            assert kt.has_kernel(s.family, s.kernel), s.kernel
            assert s.block[0] <= 512 and s.grid[0] >= 1


CASES = [
    (1, 32, 8, 1, 4096, 128), (1, 32, 8, 1, 32768, 128), (1, 32, 1, 1, 1000, 64),
    (2, 8, 8, 4, 77, 80), (1, 16, 4, 8, 513, 96), (1, 4, 4, 1, 10, 256),
]


@pytest.mark.parametrize("dt", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("shape", CASES)
@pytest.mark.parametrize("mode", ["", "causal", "array"])
@pytest.mark.parametrize("force", ["", "fma", "mma"])
def test_decode_plans(dt, shape, mode, force, monkeypatch):
    monkeypatch.setenv("MLX_AMD_SDPA_DECODE", force)
    n = node(*shape, dt=dt, mode=mode, sinks=True, cap=shape[4] + 100)
    p = sdpa.plan_node(n, props())
    check_refs(p, n)
    kernels = [s.kernel for s in p.steps]
    B, Hq, Hkv, Lq, Lk, D = shape
    # the matrix-unit kernel (16 rows a block, 2 waves) for 16-bit dtypes and head dims to
    # 128, from 8192 keys unless forced
    mma = (force == "mma" or (not force and Lk >= 8192)) and dt != "float32" and D <= 128
    rows, block = (16, 64) if mma else (4, 256)
    assert kernels[0] == (f"sdpa_decode_mma_d{D}_{dt}" if mma else f"sdpa_decode_d{D}_r4_{dt}")
    assert p.steps[0].block == (block, 1, 1)
    splits, kps = sdpa.decode_splits(sdpa.problem(n), props())
    assert (splits - 1) * kps < Lk <= splits * kps        # no empty split
    chunks = -(-(Hq // Hkv * Lq) // rows)
    assert p.steps[0].grid == (splits * chunks, Hkv, B)
    assert len(kernels) == 1       # a split-K decode combines in its last block: one launch
    counters = p.steps[0].refs[8]
    if splits > 1:
        # one arrival counter per (batch, kv head, row chunk), in the zeroed scratch
        assert counters == ("z", 0, 0) and B * Hkv * chunks * 4 <= ZERO_BYTES
        cap = sdpa.decode_max_splits(sdpa.problem(n), props())   # room to rebind to any length
        assert splits <= cap <= sdpa.DECODE_MAX_SPLITS
        assert p.temps == (cap * B * Hq * Lq * D * 4, cap * B * Hq * Lq * 8)
    else:
        assert p.temps == () and counters.kind != "z"


def test_decode_rebind_switches_kernel_once_at_the_matrix_unit_threshold():
    # a bf16 cache growing past DECODE_MMA_MIN_KEYS: the FMA plan stops rebinding there (the
    # node is planned once more), the matrix-unit plan made then rebinds to every longer length
    dev = props()
    limit = sdpa.DECODE_MMA_MIN_KEYS
    short = sdpa.plan_node(node(1, 32, 8, 1, limit - 1, 128, cap=4 * limit), dev)
    assert short.steps[0].kernel == "sdpa_decode_d128_r4_bfloat16"
    at = node(1, 32, 8, 1, limit, 128, cap=4 * limit)
    assert short.rebind([x.shape for x in at.ins], [x.strides for x in at.ins]) is None
    long = sdpa.plan_node(at, dev)
    assert long.steps[0].kernel == "sdpa_decode_mma_d128_bfloat16"
    for Lk in (limit + 1, 2 * limit, 4 * limit):
        n = node(1, 32, 8, 1, Lk, 128, cap=4 * limit)
        fresh = sdpa.plan_node(n, dev)
        assert long.rebind([x.shape for x in n.ins], [x.strides for x in n.ins]) == \
            [(s.grid, s.tail) for s in fresh.steps]


def test_decode_refuses_an_unknown_forced_kernel(monkeypatch):
    monkeypatch.setenv("MLX_AMD_SDPA_DECODE", "wmma")
    with pytest.raises(ValueError, match="MLX_AMD_SDPA_DECODE"):
        sdpa.plan_node(node(1, 32, 8, 1, 300, 128), props())


def test_decode_fills_the_device():
    n = node(1, 32, 8, 1, 32768, 128)
    p = sdpa.plan_node(n, props(cus=132))
    assert p.steps[0].grid[0] * p.steps[0].grid[1] >= 132 * 2
    # short caches are not split below DECODE_MIN_KEYS keys
    s, k = sdpa.decode_splits(sdpa.problem(node(1, 32, 8, 1, 300, 128)), props())
    assert k >= min(300, sdpa.DECODE_MIN_KEYS) or s == 1


@pytest.mark.parametrize("wave", [32, 64])
@pytest.mark.parametrize("dt", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("args", [
    dict(B=1, Hq=32, Hkv=8, Lq=1024, Lk=1024, D=128, mode="causal"),
    dict(B=1, Hq=32, Hkv=8, Lq=4096, Lk=4096, D=128, mode="causal"),
    dict(B=2, Hq=4, Hkv=1, Lq=33, Lk=90, D=80, mode="array"),
    dict(B=1, Hq=4, Hkv=2, Lq=50, Lk=77, D=256, mode="array", sinks=True, mask_dtype="float32"),
    dict(B=1, Hq=4, Hkv=2, Lq=20, Lk=40, D=64, Dv=32),
    dict(B=1, Hq=2, Hkv=1, Lq=600, Lk=600, D=64, mode="causal"),
    dict(B=1, Hq=4, Hkv=4, Lq=1, Lk=50, D=32),          # decode shape, head dim without a kernel
])
def test_prefill_plans(wave, dt, args, monkeypatch):
    monkeypatch.delenv("MLX_AMD_WAVE", raising=False)
    monkeypatch.setenv("MLX_AMD_SDPA_PREFILL", "gemm")      # the GEMM path, also where flash serves
    n = node(dt=dt, **args)
    p = sdpa.plan_node(n, props(wave))
    assert p is not None
    check_refs(p, n)
    pr = sdpa.problem(n)
    kernels = [s.kernel for s in p.steps if isinstance(s, Launch) and s.family == "sdpa"]
    assert not any(k.startswith("sdpa_decode") for k in kernels)
    c = sdpa.chunk_rows(pr)
    n_chunks = -(-pr.Lq // c)
    assert kernels.count(f"sdpa_rows_{dt}_w{wave}") == n_chunks
    gemms = [s for s in p.steps if isinstance(s, HostCall) or s.family in ("gemv", "gemm")]
    assert len(gemms) == 2 * n_chunks
    # the score chunk stays within the budget
    assert pr.B * pr.Hq * c * pr.Lk * sdpa.ITEM[dt] <= max(sdpa.CHUNK_BYTES, pr.B * pr.Hq * pr.Lk * 4)
    if pr.causal and n_chunks > 1:
        # the first chunk's GEMMs stop at its last visible key
        first = next(s for s in p.steps if isinstance(s, Launch) and s.kernel.startswith("sdpa_rows"))
        assert struct.unpack_from("<i", first.tail, 56)[0] == c + pr.Lk - pr.Lq


@pytest.mark.parametrize("dt", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("args", [
    dict(B=1, Hq=32, Hkv=8, Lq=511, Lk=511, D=64, mode="causal"),
    dict(B=2, Hq=4, Hkv=1, Lq=33, Lk=90, D=80, mode="array"),
    dict(B=1, Hq=4, Hkv=2, Lq=50, Lk=77, D=96, mode="array", sinks=True, mask_dtype="float32"),
    dict(B=1, Hq=32, Hkv=8, Lq=40, Lk=1000, D=128, mode="causal", cap=4096),
    dict(B=1, Hq=8, Hkv=8, Lq=300, Lk=300, D=256),
])
def test_flash_plans(dt, args, monkeypatch):
    """One launch, grid (query tiles, Hq, B), q/k/v strides and the problem in the blob;
    float32 at head dim 256 (no tile fits the shared memory) takes the GEMM path."""
    monkeypatch.setenv("MLX_AMD_SDPA_PREFILL", "flash")
    n = node(dt=dt, **args)
    pr = sdpa.problem(n)
    cfg = kt.table("sdpa").flash_config(dt, pr.D)
    p = sdpa.plan_node(n, props())
    check_refs(p, n)
    if cfg is None:
        assert dt == "float32" and pr.D == 256
        assert not any(getattr(s, "kernel", "").startswith("sdpa_flash") for s in p.steps)
        return
    assert len(p.steps) == 1 and not p.temps
    st = p.steps[0]
    assert st.kernel == f"sdpa_flash_d{pr.D}_{dt}"
    tiles = -(-pr.Lq // (16 * cfg[0]))
    assert st.grid == (tiles, pr.Hq, pr.B) and st.block == (sdpa.FLASH_BLOCK, 1, 1)
    f = struct.unpack_from("<3q3q3q4qq9if", st.tail)
    assert f[0:3] == n.ins[0].strides[:3] and f[3:6] == n.ins[1].strides[:3] and f[6:9] == n.ins[2].strides[:3]
    assert f[14:20] == (pr.B, pr.Hq, pr.Hkv, pr.Lq, pr.Lk, tiles)
    assert f[20:23] == (pr.mask_kind, pr.sink_kind, int(pr.causal))
    assert f[23] == pytest.approx(pr.scale * math.log2(math.e))


def test_flash_by_size(monkeypatch):
    """Left to choose without matrix units: flash up to FLASH_MAX_WORK pairs and
    FLASH_MAX_KEYS keys, GEMMs beyond."""
    monkeypatch.delenv("MLX_AMD_SDPA_PREFILL", raising=False)
    monkeypatch.setenv("MLX_AMD_MATRIX_UNITS", "0")

    def kernels(*a, **kw):
        return [getattr(s, "kernel", "gemm") for s in sdpa.plan_node(node(*a, **kw), props()).steps]

    assert kernels(1, 32, 8, 511, 511, 64, mode="causal") == ["sdpa_flash_d64_bfloat16"]
    assert kernels(1, 32, 8, 512, 512, 128, mode="causal") == ["sdpa_flash_d128_bfloat16"]
    assert "sdpa_flash_d128_bfloat16" not in kernels(1, 32, 8, 1024, 1024, 128, mode="causal")
    assert "sdpa_flash_d128_bfloat16" not in kernels(1, 32, 8, 40, 2000, 128, mode="causal")
    monkeypatch.setenv("MLX_AMD_SDPA_PREFILL", "auto")
    assert kernels(1, 32, 8, 511, 511, 64, mode="causal") == ["sdpa_flash_d64_bfloat16"]


@pytest.mark.parametrize("arch,block", [("sm_90", 128), ("gfx942:sramecc+:xnack-", 256), ("gfx90a", 256),
                                        ("gfx1100", 128), ("gfx1151", 128), ("gfx1201", 128)])
@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_flash_mma_plans(arch, block, dt, monkeypatch):
    """Where the arch has a matrix-tile backend: one launch of the matrix-unit kernel at any
    size, 64 query rows per block, four of the backend's own waves (64 lanes on CDNA,
    whatever wave the launchers emulate), the twin's argument struct."""
    monkeypatch.delenv("MLX_AMD_SDPA_PREFILL", raising=False)
    monkeypatch.delenv("MLX_AMD_MATRIX_UNITS", raising=False)
    d = arch_props(arch, wave=64 if arch.startswith("gfx9") else 32)
    for args in ((1, 32, 8, 511, 511, 64), (1, 32, 8, 4096, 4096, 128), (2, 8, 2, 129, 129, 80), (1, 4, 1, 70, 20, 96)):
        n = node(*args, dt=dt, mode="causal")
        p = sdpa.plan_node(n, d)
        check_refs(p, n)
        assert len(p.steps) == 1 and not p.temps
        st = p.steps[0]
        pr = sdpa.problem(n)
        assert st.kernel == f"sdpa_flash_mma_d{pr.D}_{dt}" and st.block == (block, 1, 1)
        assert st.grid == (-(-pr.Lq // 64), pr.Hq, pr.B)
        f = struct.unpack_from("<3q3q3q4qq9if", st.tail)
        assert f[14:20] == (pr.B, pr.Hq, pr.Hkv, pr.Lq, pr.Lk, -(-pr.Lq // 64))


def test_flash_mma_declines(monkeypatch):
    """The twin or the GEMM path: float32, head dim 256, gfx1030 (no matrix unit), gfx908 with
    bfloat16 (its bf16 MFMA steps k by 8), MLX_AMD_MATRIX_UNITS=0, a forced "flash", and few
    query tiles against many keys (no split over the keys yet)."""
    monkeypatch.delenv("MLX_AMD_SDPA_PREFILL", raising=False)
    monkeypatch.delenv("MLX_AMD_MATRIX_UNITS", raising=False)

    def kernels(n, d):
        return [getattr(s, "kernel", "gemm") for s in sdpa.plan_node(n, d).steps]

    sm90 = arch_props("sm_90")
    assert kernels(node(1, 8, 2, 300, 300, 64, dt="float32", mode="causal"), sm90) == ["sdpa_flash_d64_float32"]
    assert kernels(node(1, 8, 2, 300, 300, 256, mode="causal"), sm90) == ["sdpa_flash_d256_bfloat16"]
    assert kernels(node(1, 8, 2, 300, 300, 64, mode="causal"), arch_props("gfx1030")) == ["sdpa_flash_d64_bfloat16"]
    assert kernels(node(1, 8, 2, 300, 300, 64, mode="causal"), arch_props("gfx908", 64)) == ["sdpa_flash_d64_bfloat16"]
    assert kernels(node(1, 8, 2, 300, 300, 64, dt="float16", mode="causal"),
                   arch_props("gfx908", 64)) == ["sdpa_flash_mma_d64_float16"]
    assert "sdpa_flash_mma_d128_bfloat16" not in kernels(node(1, 32, 8, 40, 2000, 128, mode="causal"), sm90)
    monkeypatch.setenv("MLX_AMD_SDPA_PREFILL", "mma")     # forced: taken there too
    assert kernels(node(1, 32, 8, 40, 2000, 128, mode="causal"), sm90) == ["sdpa_flash_mma_d128_bfloat16"]
    # K's rows 2^26 elements apart: a key tile's per-thread copy offsets would overflow 32 bits,
    # so not even a forced "mma" takes it
    base = node(1, 8, 2, 300, 300, 64, mode="causal")
    far = Layout.strided((1, 2, 300, 64), (0, 300 * 64, 1 << 26, 1), "bfloat16")
    wide = Node(base.prim, base.params, (base.ins[0], far, base.ins[2]), base.outs)
    assert "sdpa_flash_mma_d64_bfloat16" not in kernels(wide, sm90)
    assert kernels(base, sm90) == ["sdpa_flash_mma_d64_bfloat16"]
    monkeypatch.setenv("MLX_AMD_SDPA_PREFILL", "flash")
    assert kernels(node(1, 8, 2, 300, 300, 64, mode="causal"), sm90) == ["sdpa_flash_d64_bfloat16"]
    monkeypatch.delenv("MLX_AMD_SDPA_PREFILL")
    monkeypatch.setenv("MLX_AMD_MATRIX_UNITS", "0")
    assert kernels(node(1, 8, 2, 300, 300, 64, mode="causal"), sm90) == ["sdpa_flash_d64_bfloat16"]
    monkeypatch.setenv("MLX_AMD_MATRIX_UNITS", "yes")
    with pytest.raises(ValueError, match="MLX_AMD_MATRIX_UNITS='yes'"):
        sdpa.plan_node(node(1, 8, 2, 300, 300, 64, mode="causal"), sm90)


def test_matrix_tiles_capability():
    """kernel_table.matrix_tiles, the host twin of mlxa/mma.h's backend choice (the macros
    themselves are checked per arch against the ROCm compiler in test_sources)."""
    assert kt.matrix_tiles("sm_90", "bfloat16") == "mma_sync" and kt.matrix_tiles("sm_75", "float16") is None
    assert kt.matrix_tiles("gfx942:sramecc+:xnack-", "bfloat16") == "mfma"
    assert kt.matrix_tiles("gfx908", "float16") == "mfma" and kt.matrix_tiles("gfx908", "bfloat16") is None
    assert kt.matrix_tiles("gfx1100", "float16") == "wmma" and kt.matrix_tiles("gfx1201", "bfloat16") == "wmma_gfx12"
    assert kt.matrix_tiles("gfx1030", "float16") is None and kt.matrix_tiles("gfx942", "float32") is None


def test_prefill_switch_rejects_a_misspelt_value(monkeypatch):
    """A typo in the switch is an error naming it, not a silent "choose by size"."""
    monkeypatch.setenv("MLX_AMD_SDPA_PREFILL", "flsh")
    with pytest.raises(ValueError, match="MLX_AMD_SDPA_PREFILL='flsh'"):
        sdpa.plan_node(node(1, 4, 2, 20, 40, 64), props())


def test_flash_declines_what_it_cannot_read(monkeypatch):
    monkeypatch.setenv("MLX_AMD_SDPA_PREFILL", "flash")
    d = props()
    # Dv != D, and a K with a non-unit last stride: the GEMM path
    for n in (node(1, 4, 2, 20, 40, 64, Dv=32),):
        assert not any(getattr(s, "kernel", "").startswith("sdpa_flash") for s in sdpa.plan_node(n, d).steps)
    n = node(1, 4, 2, 20, 40, 64)
    kt_ = Layout.strided((1, 2, 40, 64), (2 * 40 * 64, 40 * 64, 1, 40), "bfloat16")
    n = Node(n.prim, n.params, (n.ins[0], kt_, n.ins[2]), n.outs)
    assert not any(getattr(s, "kernel", "").startswith("sdpa_flash") for s in sdpa.plan_node(n, d).steps)


def test_strided_cache_is_read_in_place():
    n = node(1, 32, 8, 1, 1000, 128, cap=4096)
    p = sdpa.plan_node(n, props())
    assert p.steps[0].kernel.startswith("sdpa_decode")       # no copy of K/V
    f = struct.unpack_from("<4q3q3q", p.steps[0].tail)
    assert f[4:7] == (8 * 4096 * 128, 4096 * 128, 128)


def test_declined():
    d = props()
    assert sdpa.plan_node(node(1, 4, 2, 1, 10, 64, dt="float64"), d) is None
    assert sdpa.plan_node(node(1, 4, 2, 1, 10, 64, mode="array", mask_dtype="int32"), d) is None
    bad = Layout.strided((1, 3, 1, 10), (0, 10, 10, 1), "bool")   # 3 heads against 4
    assert sdpa.plan_node(node(1, 4, 2, 1, 10, 64, mode="array", mask=bad), d) is None
    assert sdpa.plan_node(node(1, 4, 2, 1, 10, 64, sinks=True, sink_dtype="int32"), d) is None
    assert sdpa.plan_node(Node("Softmax", (False,), (R((2, 2), "float32"),), (R((2, 2), "float32"),)), d) is None
    # an empty key axis: zeros
    p = sdpa.plan_node(node(1, 4, 2, 3, 0, 64), d)
    assert len(p.steps) == 1 and isinstance(p.steps[0], Memset)
    # a K whose rows are not in 16-byte vectors takes the prefill path
    n = node(1, 4, 2, 1, 10, 64)
    odd = Layout.strided((1, 2, 10, 64), (2 * 10 * 65, 10 * 65, 65, 1), "bfloat16")
    n = Node(n.prim, n.params, (n.ins[0], odd, odd), n.outs)
    p = sdpa.plan_node(n, d)
    assert p is not None and not any(getattr(s, "kernel", "").startswith("sdpa_decode") for s in p.steps)


def test_mask_broadcast_strides():
    assert sdpa._mask_strides(Layout.strided((1, 1, 5, 7), (0, 0, 7, 1), "bool"), 2, 4, 5, 7) == (0, 0, 7, 1)
    assert sdpa._mask_strides(R((5, 7), "bool"), 2, 4, 5, 7) == (0, 0, 7, 1)
    assert sdpa._mask_strides(R((4, 1, 7), "bool"), 2, 4, 5, 7) == (0, 7, 0, 1)
    assert sdpa._mask_strides(R((3, 7), "bool"), 2, 4, 5, 7) is None


# ---------------------------------------------------------------- sdpa_args.h, byte for byte
_PROBE = r"""
#include <cstddef>
#include <cstdio>
#include "mlxa/sdpa_args.h"
#define F(S, f) std::printf(#S "." #f " %zu\n", offsetof(S, f));
int main() {
  std::printf("SdpaDecodeArgs %zu\nSdpaRowsArgs %zu\nSdpaScatterArgs %zu\n",
              sizeof(SdpaDecodeArgs), sizeof(SdpaRowsArgs), sizeof(SdpaScatterArgs));
  std::printf("SdpaFlashArgs %zu\n", sizeof(SdpaFlashArgs));
  F(SdpaFlashArgs, q_strides) F(SdpaFlashArgs, v_strides) F(SdpaFlashArgs, mask_strides)
  F(SdpaFlashArgs, sink_stride) F(SdpaFlashArgs, B) F(SdpaFlashArgs, q_tiles) F(SdpaFlashArgs, causal)
  F(SdpaFlashArgs, scale_log2)
  F(SdpaDecodeArgs, q_strides) F(SdpaDecodeArgs, k_strides) F(SdpaDecodeArgs, mask_strides)
  F(SdpaDecodeArgs, sink_stride) F(SdpaDecodeArgs, B) F(SdpaDecodeArgs, Lk) F(SdpaDecodeArgs, n_splits)
  F(SdpaDecodeArgs, causal) F(SdpaDecodeArgs, scale_log2)
  F(SdpaDecodeArgs, counters)
  F(SdpaRowsArgs, ld) F(SdpaRowsArgs, rows) F(SdpaRowsArgs, n) F(SdpaRowsArgs, causal)
  F(SdpaScatterArgs, total) F(SdpaScatterArgs, c) F(SdpaScatterArgs, l0)
  std::printf("kinds %d %d %d %d %d %d\n", MLXA_SDPA_MASK_BOOL, MLXA_SDPA_MASK_ADD_T, MLXA_SDPA_MASK_ADD_F32,
              MLXA_SDPA_SINK_NONE, MLXA_SDPA_SINK_T, MLXA_SDPA_SINK_F32);
}
"""


def test_args_match_c(tmp_path):
    out = probe_output(_PROBE, tmp_path)
    c = {}
    for line in out.splitlines():
        k, *v = line.split()
        c[k] = tuple(int(x) for x in v) if k == "kinds" else int(v[0])
    for name, size in sdpa.ARG_SIZES.items():
        assert c[name] == size, name
    assert c["kinds"] == (sdpa.MASK_BOOL, sdpa.MASK_ADD_T, sdpa.MASK_ADD_F32, sdpa.SINK_NONE, sdpa.SINK_T, sdpa.SINK_F32)
    assert c["SdpaDecodeArgs.counters"] == 64   # the 9th of the leading pointers
    blob = bytes(72) + sdpa.decode_tail((1, 2, 3, 4), (5, 6, 7), (8, 9, 10), (11, 12, 13, 14), 15, 16, 17, 18, 19,
                                        20, 21, 22, 23, 24, True, 0.5)
    assert len(blob) == c["SdpaDecodeArgs"]
    assert struct.unpack_from("<4q", blob, c["SdpaDecodeArgs.q_strides"]) == (1, 2, 3, 4)
    assert struct.unpack_from("<3q", blob, c["SdpaDecodeArgs.k_strides"]) == (5, 6, 7)
    assert struct.unpack_from("<4q", blob, c["SdpaDecodeArgs.mask_strides"]) == (11, 12, 13, 14)
    assert struct.unpack_from("<q", blob, c["SdpaDecodeArgs.sink_stride"])[0] == 15
    assert struct.unpack_from("<i", blob, c["SdpaDecodeArgs.B"])[0] == 16
    assert struct.unpack_from("<i", blob, c["SdpaDecodeArgs.Lk"])[0] == 20
    assert struct.unpack_from("<i", blob, c["SdpaDecodeArgs.n_splits"])[0] == 22
    assert struct.unpack_from("<i", blob, c["SdpaDecodeArgs.causal"])[0] == 1
    assert struct.unpack_from("<f", blob, c["SdpaDecodeArgs.scale_log2"])[0] == 0.5
    blob = bytes(24) + sdpa.rows_tail(9, (1, 2, 3, 4), 5, 6, 7, 8, 10, 11, 12, 13, 14, 1, 2, True)
    assert len(blob) == c["SdpaRowsArgs"]
    assert struct.unpack_from("<q", blob, c["SdpaRowsArgs.ld"])[0] == 9
    assert struct.unpack_from("<q", blob, c["SdpaRowsArgs.rows"])[0] == 6
    assert struct.unpack_from("<i", blob, c["SdpaRowsArgs.n"])[0] == 7
    assert struct.unpack_from("<i", blob, c["SdpaRowsArgs.causal"])[0] == 1
    assert c["SdpaRowsArgs.n"] - 24 == 56      # the offset test_prefill_plans reads n at
    blob = bytes(16) + sdpa.scatter_tail(100, 3, 4, 5, 6, 7)
    assert len(blob) == c["SdpaScatterArgs"]
    assert struct.unpack_from("<q", blob, c["SdpaScatterArgs.total"])[0] == 100
    assert struct.unpack_from("<i", blob, c["SdpaScatterArgs.c"])[0] == 3
    assert struct.unpack_from("<i", blob, c["SdpaScatterArgs.l0"])[0] == 7
    blob = bytes(48) + sdpa.flash_tail((1, 2, 3), (4, 5, 6), (7, 8, 9), (10, 11, 12, 13), 14, 15, 16, 17, 18,
                                       19, 20, 1, 2, True, 0.25)
    assert len(blob) == c["SdpaFlashArgs"]
    assert struct.unpack_from("<3q", blob, c["SdpaFlashArgs.q_strides"]) == (1, 2, 3)
    assert struct.unpack_from("<3q", blob, c["SdpaFlashArgs.v_strides"]) == (7, 8, 9)
    assert struct.unpack_from("<4q", blob, c["SdpaFlashArgs.mask_strides"]) == (10, 11, 12, 13)
    assert struct.unpack_from("<q", blob, c["SdpaFlashArgs.sink_stride"])[0] == 14
    assert struct.unpack_from("<i", blob, c["SdpaFlashArgs.B"])[0] == 15
    assert struct.unpack_from("<i", blob, c["SdpaFlashArgs.q_tiles"])[0] == 20
    assert struct.unpack_from("<i", blob, c["SdpaFlashArgs.causal"])[0] == 1
    assert struct.unpack_from("<f", blob, c["SdpaFlashArgs.scale_log2"])[0] == 0.25


@pytest.mark.parametrize("mode,sinks", [("", False), ("causal", False), ("", True)])
@pytest.mark.parametrize("Lq", [1, 4])
def test_decode_rebind_equals_a_fresh_plan(mode, sinks, Lq):
    # a replay rebinds the recorded plan to the next KV lengths of a decode: the grids and
    # argument tails it gives must be exactly what planning the node afresh gives
    base = sdpa.plan_node(node(1, 32, 8, Lq, 300, 128, mode=mode, sinks=sinks, cap=4096), props())
    assert base.rebind is not None
    rebound = 0
    for Lk in list(range(290, 330)) + [511, 512, 1000, 2049, 4000]:
        n = node(1, 32, 8, Lq, Lk, 128, mode=mode, sinks=sinks, cap=4096)
        fresh = sdpa.plan_node(n, props())
        got = base.rebind([x.shape for x in n.ins], [x.strides for x in n.ins])
        if got is None:    # another split structure or more partials than planned
            continue
        rebound += 1
        assert [(s.grid, s.tail) for s in fresh.steps] == got, f"Lk={Lk}"
        assert len(fresh.temps) == len(base.temps)
        if base.temps:     # the recorded temporaries hold this many partials
            s0 = sdpa.decode_splits(sdpa.problem(n), props())[0]
            rows = 32 * Lq
            assert base.temps[0] >= s0 * rows * 128 * 4 and base.temps[1] >= s0 * rows * 2 * 4
    assert rebound >= 30


@pytest.mark.parametrize("shape,cus", [((1, 32, 8, 1, 128), 132), ((1, 32, 8, 1, 64), 132),
                                       ((1, 32, 1, 4, 128), 304), ((2, 16, 4, 2, 256), 60)])
def test_decode_rebinds_to_every_longer_kv_length(shape, cus):
    # an LLM decode: the plan recorded at a short cache (two or more splits) rebinds to every
    # later length, the split count growing to the device's fill target, and never needs
    # another plan (each rebind equal to a fresh plan's steps)
    B, Hq, Hkv, Lq, D = shape
    dev = props(cus=cus)
    n70 = node(B, Hq, Hkv, Lq, 70, D, cap=8192)
    base = sdpa.plan_node(n70, dev)
    assert len(base.steps) == 1 and sdpa.decode_splits(sdpa.problem(n70), dev)[0] > 1
    seen = set()
    for Lk in range(70, 8192, 7):
        n = node(B, Hq, Hkv, Lq, Lk, D, cap=8192)
        fresh = sdpa.plan_node(n, dev)
        got = base.rebind([x.shape for x in n.ins], [x.strides for x in n.ins])
        assert got == [(s.grid, s.tail) for s in fresh.steps], f"Lk={Lk}"
        seen.add(sdpa.decode_splits(sdpa.problem(n), dev)[0])
    assert max(seen) == sdpa.decode_max_splits(sdpa.problem(n), dev) and len(seen) > 2


def test_decode_rebind_refuses_other_nodes():
    base = sdpa.plan_node(node(1, 32, 8, 1, 300, 128, cap=4096), props())
    other_q = node(1, 32, 8, 2, 300, 128, cap=4096)          # another query length
    assert base.rebind([x.shape for x in other_q.ins], [x.strides for x in other_q.ins]) is None
    other_cap = node(1, 32, 8, 1, 301, 128, cap=8192)        # other strides (cache size)
    assert base.rebind([x.shape for x in other_cap.ins], [x.strides for x in other_cap.ins]) is None
    masked = sdpa.plan_node(node(1, 32, 8, 1, 300, 128, mode="array", cap=4096), props())
    if masked is not None and masked.rebind is not None:
        n = node(1, 32, 8, 1, 301, 128, mode="array", cap=4096)
        assert masked.rebind([x.shape for x in n.ins], [x.strides for x in n.ins]) is None
