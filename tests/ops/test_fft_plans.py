"""FFT plans without a GPU: the argument structs against fft_args.h, the kernel table, the
declines, and every plan executed by a numpy model of its steps (copy kernels decoded from
their argument tails, library transforms by numpy.fft, our scale and Hermitian kernels)
against numpy's fftn/rfftn/irfftn over kinds, axes, sizes, layouts and offsets.

The model's complex-to-real library deliberately lets the imaginary parts of bin 0 and of
the Nyquist bin leak into the result, and scribbles over its input, as a real library may:
the plan must clean the bins and never hand it an input of the node."""

import os
import shutil
import struct
import subprocess

import numpy as np
import pytest

from mlx_amd.runtime import fft as fftlib
from mlx_amd.runtime import kernel_table as kt
from mlx_amd.runtime.launch import Launch
from mlx_amd.runtime.ops import fft as F
from mlx_amd.runtime.plan import HostCall, Layout, Memset, Node

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Dev:
    wave_size = 32
    compute_units = 132
    arch = "sm_90"


@pytest.fixture(autouse=True)
def library_present(monkeypatch):
    monkeypatch.setattr(fftlib, "available", lambda vendor: True)


# --- argument structs and kernel table --------------------------------------------------

@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_arg_structs_match_header(tmp_path):
    src = tmp_path / "s.cpp"
    src.write_text('#include <cstdio>\n#include <cstddef>\n#include "mlxa/fft_args.h"\n'
                   'int main(){printf("%zu %zu %zu %zu %zu %zu %zu\\n", sizeof(FftScaleArgs),'
                   ' offsetof(FftScaleArgs, n), offsetof(FftScaleArgs, scale), sizeof(FftHermitianArgs),'
                   ' offsetof(FftHermitianArgs, rows), offsetof(FftHermitianArgs, m),'
                   ' offsetof(FftHermitianArgs, zero_last));}\n')
    exe = tmp_path / "s"
    subprocess.run(["g++", "-std=c++17", "-I", os.path.join(REPO, "hip_kernels", "include"), str(src), "-o", str(exe)],
                   check=True)
    got = list(map(int, subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()))
    assert got == [F.ARG_STRUCTS["FftScaleArgs"][1], 8, 16, F.ARG_STRUCTS["FftHermitianArgs"][1], 8, 16, 24]


def test_kernel_table():
    names = kt.kernel_names("fft")
    assert names == [kt.table("fft").SCALE, kt.table("fft").HERMITIAN]
    src = kt.instantiation_source("fft")
    assert "MLXA_FFT_SCALE(fft_scale_float32)" in src and "MLXA_FFT_HERMITIAN(fft_hermitian_complex64)" in src
    assert kt.table("fft").BLOCK == kt.ELEMENTWISE_BLOCK    # grid_for's block is the kernels' bound


def test_module_flags():
    assert getattr(F, "VERIFIED", True) and F.FAMILY == "fft" and set(F.PRIMITIVES) == {"FFT"}


def test_inverse_scale_is_float32():
    assert F.inverse_scale(12) == np.float32(1) / np.float32(12)
    big = (1 << 25) + 1                   # not a float32: MLX converts it first
    assert F.inverse_scale(big) == np.float32(1) / np.float32(big)


# --- a numpy model of the steps ------------------------------------------------------------

NP = {"uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
      "float32": np.float32, "complex64": np.complex64, "int32": np.int32, "int64": np.int64,
      "float16": np.float16, "bfloat16": np.uint16, "float64": np.float64, "bool": np.bool_,
      "int8": np.int8, "int16": np.int16}
_V = struct.Struct("<q")
_G = struct.Struct(f"<q{kt.MAX_DIMS}q{kt.MAX_DIMS}i i i")
_T = struct.Struct("<6q")


def _dtypes(name):
    parts = name.split("_")
    if parts[-1] == "i64":
        parts = parts[:-1]
    return parts[1], parts[-2], parts[-1]


class Machine:
    """Byte buffers; a pointer is (buffer, byte offset)."""

    def __init__(self, in_bytes, in_offset, out_bytes, temps):
        self.bufs = {("i", 0): in_bytes, ("o", 0): np.full(_round(out_bytes), 0xFF, np.uint8)}
        for i, t in enumerate(temps):
            self.bufs[("t", i)] = np.full(_round(t), 0xFF, np.uint8)
        self.in_offset = in_offset
        self.fft_calls = []

    def ptr(self, ref):
        off = ref.offset + (self.in_offset if ref.kind == "i" else 0)
        return self.bufs[(ref.kind, ref.index)], off

    @staticmethod
    def elems(p, dt):
        buf, off = p
        isz = np.dtype(NP[dt]).itemsize
        assert off % isz == 0
        return buf.view(NP[dt]), off // isz

    def run(self, plan):
        for st in plan.steps:
            if isinstance(st, Memset):
                buf, off = self.ptr(st.ref)
                buf[off:off + st.nbytes] = st.value
            elif isinstance(st, HostCall):
                self.fft(st)
            elif st.family == "copy":
                self.copy(st, self.ptr(st.refs[0]), self.ptr(st.refs[1]))
            elif st.kernel == kt.table("fft").SCALE:
                n, scale, _ = F._SCALE.unpack(st.tail)
                a, o = self.elems(self.ptr(st.refs[0]), "float32")
                a[o:o + n] *= np.float32(scale)
                assert st.grid[0] * st.block[0] * 4 >= 1
            elif st.kernel == kt.table("fft").HERMITIAN:
                rows, m, zl = F._HERM.unpack(st.tail)
                a, o = self.elems(self.ptr(st.refs[0]), "complex64")
                v = a[o:o + rows * m].reshape(rows, m)
                v[:, 0] = v[:, 0].real
                if zl:
                    v[:, m - 1] = v[:, m - 1].real
            else:
                raise AssertionError(st)

    def copy(self, st, src, dst):
        lay, sdt, ddt = _dtypes(st.kernel)
        s, so = self.elems(src, sdt)
        d, do = self.elems(dst, ddt)
        if lay == "v":
            (n,) = _V.unpack(st.tail)
            vals = s[so:so + n]
        elif lay == "g":
            f = _G.unpack(st.tail)
            n, strides, shape, nd = f[0], f[1:1 + kt.MAX_DIMS], f[1 + kt.MAX_DIMS:1 + 2 * kt.MAX_DIMS], f[-2]
            shape, strides = list(reversed(shape[:nd])), list(reversed(strides[:nd]))
            idx = so + sum(np.arange(dd).reshape([-1 if j == i else 1 for j in range(nd)]) * ss
                           for i, (dd, ss) in enumerate(zip(shape, strides)))
            vals = s[np.asarray(idx)].ravel()
            assert vals.size == n
        else:
            rows, cols, batch, rs, cs, bs = _T.unpack(st.tail)
            idx = so + (np.arange(batch)[:, None, None] * bs + np.arange(rows)[None, :, None] * rs
                        + np.arange(cols)[None, None, :] * cs)
            vals = s[idx].ravel()
            n = vals.size
        if sdt == "complex64" and ddt == "float32":
            vals = vals.real
        d[do:do + n] = vals.astype(NP[ddt])

    def fft(self, st):
        call = st.fn
        t = call.transform
        assert 1 <= len(t.n) <= F.MAX_RANK and t.batch >= 1
        src, dst = (self.ptr(r) for r in st.refs)
        if call.stage is not None:
            assert st.refs[0].kind == "i"
        half = t.n[:-1] + (t.n[-1] // 2 + 1,)
        ish = (t.batch,) + (t.n if t.kind != "c2r" else half)
        s, so = self.elems(src, "float32" if t.kind == "r2c" else "complex64")
        x = s[so:so + int(np.prod(ish))].reshape(ish).astype(np.complex128 if t.kind != "r2c" else np.float64)
        ax = tuple(range(1, len(t.n) + 1))
        if t.kind == "c2c":
            y = np.fft.ifftn(x, axes=ax) * np.prod(t.n) if t.inverse else np.fft.fftn(x, axes=ax)
        elif t.kind == "r2c":
            y = np.fft.rfftn(x, axes=ax)
        else:
            assert len(t.n) == 1 and st.refs[0].kind == "t", "c2r: 1-D, on a temporary of ours"
            N = t.n[0]
            y = np.fft.irfft(x, n=N, axis=-1) * N
            # a library that trusts the Hermitian input: the bins' imaginary parts leak
            y = y + 7.0 * x[..., :1].imag + (7.0 * x[..., -1:].imag if N % 2 == 0 else 0.0)
            s[so:so + x.size] = np.nan                      # and may overwrite its input
        d, do = self.elems(dst, "complex64" if t.kind != "c2r" else "float32")
        d[do:do + y.size] = y.astype(d.dtype).ravel()
        self.fft_calls.append(t)


def _round(n):
    return max(16, -(-int(n) // 16) * 16)


def storage(val, kind, rng):
    """(byte buffer, byte offset of element 0, strides in elements) of ``val`` in a layout."""
    isz = val.itemsize
    if kind == "row":
        st = np.ascontiguousarray(val)
        view = st
    elif kind == "T":                     # stored with the axes reversed
        st = np.ascontiguousarray(np.transpose(val))
        view = np.transpose(st)
    elif kind == "slice":                 # every other element of a wider last axis, offset
        big = np.zeros(val.shape[:-1] + (2 * val.shape[-1] + 1,), val.dtype)
        big[..., 1::2] = val
        st = big
        view = big[..., 1::2]
    elif kind == "neg":                   # axis 0 reversed
        st = np.ascontiguousarray(val[::-1])
        view = st[::-1]
    elif kind == "bcast":                 # axis 0 broadcast
        st = np.ascontiguousarray(val[:1])
        view = np.broadcast_to(st, val.shape)
    else:
        raise ValueError(kind)
    np.testing.assert_array_equal(view, val)
    base = st.__array_interface__["data"][0]
    off = view.__array_interface__["data"][0] - base
    pad = 16                              # element 0 not at a 16-byte boundary when it is odd
    raw = np.zeros(_round(pad + st.nbytes + 16), np.uint8)
    raw[pad:pad + st.nbytes] = np.frombuffer(st.tobytes(), np.uint8)
    return raw, pad + off, tuple(s // isz for s in view.strides)


def rand(shape, complex_, rng):
    v = rng.standard_normal(shape).astype(np.float32)
    if complex_:
        v = (v + 1j * rng.standard_normal(shape).astype(np.float32)).astype(np.complex64)
    return v


def run_fft(val, axes, inverse, real, out_shape, kind="row", rng=None):
    rng = rng or np.random.default_rng(0)
    if kind == "bcast":
        val = np.broadcast_to(val[:1], val.shape).copy()
    raw, off, strides = storage(val, kind, rng)
    dt = "complex64" if val.dtype == np.complex64 else "float32"
    lay = Layout.strided(val.shape, strides, dt)
    odt = "float32" if (real and inverse) else "complex64"
    o = Layout.row_major(out_shape, odt)
    plan = F.plan_node(Node("FFT", (tuple(axes), inverse, real, False), (lay,), (o,)), Dev())
    assert plan is not None
    m = Machine(raw.copy(), off, o.nbytes, plan.temps)
    m.run(plan)
    np.testing.assert_array_equal(m.bufs[("i", 0)], raw, err_msg="the input was modified")
    got = m.bufs[("o", 0)].view(np.complex64 if odt == "complex64" else np.float32)[:o.size].reshape(out_shape)
    return plan, got, m, val


def expect(val, axes, inverse, real, out_shape):
    v = val.astype(np.complex128 if val.dtype == np.complex64 else np.float64)
    if not real:
        return (np.fft.ifftn if inverse else np.fft.fftn)(v, axes=axes)
    s = [out_shape[a] for a in axes] if inverse else [val.shape[a] for a in axes]
    return (np.fft.irfftn if inverse else np.fft.rfftn)(v, s=s, axes=axes)


def check(got, want, n):
    tol = 2e-6 * max(1.0, np.log2(max(n, 2))) * max(1.0, np.abs(want).max())
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * 4)


CASES = [
    # (shape, axes, inverse, real)
    ((8, 16), (1,), False, False),
    ((8, 16), (1,), True, False),
    ((8, 16), (0,), False, False),
    ((5, 12), (0, 1), False, False),
    ((4, 6, 10), (0, 2), True, False),
    ((3, 4, 5, 6), (0, 1, 2, 3), False, False),       # four axes: two library stages
    ((2, 3, 4, 5, 3), (0, 1, 2, 3, 4), True, False),
    ((7,), (0,), False, True),
    ((6, 10), (1,), False, True),
    ((6, 10), (0,), False, True),
    ((4, 6, 9), (0, 1, 2), False, True),
    ((3, 4, 5, 6), (0, 1, 2, 3), False, True),
    ((4, 6, 9), (2, 0), False, True),                 # the real axis is the last *given*
    ((8, 9), (1,), True, True),                       # irfft to 16
    ((8, 8), (1,), True, True),                       # irfft to 15 (odd)
    ((6, 5, 7), (0, 1, 2), True, True),
    ((6, 5, 7), (1, 0), True, True),
    ((3, 4, 5, 4), (0, 1, 2, 3), True, True),
    ((1, 16), (0, 1), False, False),                  # a length-1 axis is an identity
    ((4, 1), (1,), False, True),                      # real length 1: a conversion
    ((4, 1), (0, 1), True, True),
    ((4, 3), (0,), False, False),
    ((1,), (0,), False, False),
]


def _out_shape(shape, axes, inverse, real, odd=False):
    o = list(shape)
    if real:
        last = axes[-1]
        o[last] = (2 * (shape[last] - 1) + (1 if odd else 0)) if inverse else shape[last] // 2 + 1
    return tuple(o)


@pytest.mark.parametrize("kind", ["row", "T", "slice", "neg", "bcast"])
@pytest.mark.parametrize("shape,axes,inverse,real", CASES)
def test_plan_matches_numpy(shape, axes, inverse, real, kind):
    rng = np.random.default_rng(hash((shape, axes, inverse, real)) % 2**32)
    complex_in = not (real and not inverse)
    odd = real and inverse and shape == (8, 8)
    if real and inverse and shape[axes[-1]] == 1:
        out_shape = tuple(1 if d == axes[-1] else s for d, s in enumerate(shape))
    else:
        out_shape = _out_shape(shape, axes, inverse, real, odd)
    val = rand(shape, complex_in, rng)
    plan, got, m, val = run_fft(val, axes, inverse, real, out_shape, kind, rng)
    want = expect(val, axes, inverse, real, out_shape)
    check(got, want, int(np.prod([out_shape[a] for a in axes])))


def test_contiguous_last_axis_reads_in_place_and_writes_the_output():
    val = rand((8, 64), True, np.random.default_rng(1))
    plan, got, m, _ = run_fft(val, (1,), False, False, (8, 64))
    assert len(plan.steps) == 1 and isinstance(plan.steps[0], HostCall) and plan.temps == ()
    assert plan.steps[0].refs[0].kind == "i" and plan.steps[0].refs[1].kind == "o"
    assert m.fft_calls == [fftlib.Transform("c2c", (64,), 8, False)]
    check(got, np.fft.fft(val.astype(np.complex128), axis=1), 64)


def test_transposed_fft2_reads_in_place():
    # a transposed dense input: the axes ordered by stride make it contiguous, no input copy
    val = rand((12, 10), True, np.random.default_rng(2))
    plan, got, m, _ = run_fft(val, (0, 1), False, False, (12, 10), kind="T")
    assert plan.steps[0].refs[0].kind == "i"
    assert [type(s).__name__ for s in plan.steps] == ["HostCall", "Launch"]    # transform, copy back
    assert m.fft_calls[0].n == (10, 12)


def test_inverse_is_scaled_once():
    val = rand((4, 32), True, np.random.default_rng(3))
    plan, got, m, _ = run_fft(val, (1,), True, False, (4, 32))
    scales = [s for s in plan.steps if isinstance(s, Launch) and s.kernel == kt.table("fft").SCALE]
    assert len(scales) == 1
    n, sc, _ = F._SCALE.unpack(scales[0].tail)
    assert n == 4 * 32 * 2 and sc == F.inverse_scale(32)


def test_c2r_copies_and_cleans_its_input():
    val = rand((3, 9), True, np.random.default_rng(4))
    plan, got, m, _ = run_fft(val, (1,), True, True, (3, 16))
    kinds = [s.kernel if isinstance(s, Launch) else "fft" for s in plan.steps]
    assert kinds[1] == kt.table("fft").HERMITIAN and kinds[2] == "fft"
    assert plan.steps[0].refs[1].kind == "t"


def test_misaligned_input_carries_a_staging_copy():
    val = rand((4, 16), False, np.random.default_rng(5))
    raw, off, strides = storage(val, "row", None)
    lay = Layout.strided(val.shape, strides, "float32")
    plan = F.plan_node(Node("FFT", ((1,), False, True, False), (lay,), (Layout.row_major((4, 9), "complex64"),)), Dev())
    call = plan.steps[0].fn
    assert call.stage is not None and call.stage_bytes == 4 * 16 * 4 and call.stage.family == "copy"


def test_empty_output_is_an_empty_plan():
    lay = Layout.row_major((0, 8), "complex64")
    plan = F.plan_node(Node("FFT", ((1,), False, False, False), (lay,), (lay,)), Dev())
    assert plan is not None and plan.steps == ()


def test_large_batch_uses_64_bit_sizes():
    lay = Layout.row_major((1 << 20, 4096), "complex64")      # 2^32 elements
    plan = F.plan_node(Node("FFT", ((1,), False, False, False), (lay,), (lay,)), Dev())
    t = plan.steps[0].fn.transform
    assert t.batch == 1 << 20 and t.n == (4096,)


@pytest.mark.parametrize("desc,node", [
    ("float64 input", Node("FFT", ((0,), False, False, False), (Layout.row_major((8,), "float64"),),
                           (Layout.row_major((8,), "complex64"),))),
    ("r2c with complex input", Node("FFT", ((0,), False, True, False), (Layout.row_major((8,), "complex64"),),
                                    (Layout.row_major((5,), "complex64"),))),
    ("wrong r2c output", Node("FFT", ((0,), False, True, False), (Layout.row_major((8,), "float32"),),
                              (Layout.row_major((8,), "complex64"),))),
    ("wrong c2r input", Node("FFT", ((0,), True, True, False), (Layout.row_major((8,), "complex64"),),
                             (Layout.row_major((8,), "float32"),))),
    ("duplicate axes", Node("FFT", ((0, 0), False, False, False), (Layout.row_major((8,), "complex64"),),
                            (Layout.row_major((8,), "complex64"),))),
    ("axis out of range", Node("FFT", ((1,), False, False, False), (Layout.row_major((8,), "complex64"),),
                               (Layout.row_major((8,), "complex64"),))),
    ("no axes", Node("FFT", ((), False, False, False), (Layout.row_major((8,), "complex64"),),
                     (Layout.row_major((8,), "complex64"),))),
    ("other primitive", Node("Abs", (), (Layout.row_major((8,), "complex64"),),
                             (Layout.row_major((8,), "complex64"),))),
])
def test_declines(desc, node):
    assert F.plan_node(node, Dev()) is None, desc


def test_declines_without_the_library(monkeypatch):
    monkeypatch.setattr(fftlib, "available", lambda vendor: False)
    lay = Layout.row_major((8,), "complex64")
    assert F.plan_node(Node("FFT", ((0,), False, False, False), (lay,), (lay,)), Dev()) is None


def test_env_switch_and_vendor(monkeypatch):
    monkeypatch.undo()
    monkeypatch.setenv(fftlib.ENV, "none")
    assert fftlib.available("hip") is False
    assert fftlib.vendor_of("sm_90") == "cuda" and fftlib.vendor_of("nvidia") == "cuda"
    assert fftlib.vendor_of("gfx942") == "hip" and fftlib.vendor_of("amd") == "hip"
