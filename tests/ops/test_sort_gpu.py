"""Sort, ArgSort, Partition, ArgPartition and SearchSorted on the GPU against MLX's CPU.

Sort and ArgSort are fully determined (stable, NaNs last, -0.0 == +0.0 kept in input
order) and compared bit for bit; Partition/ArgPartition results are checked for the
partition property, the per-row multiset and MLX's kth value. Both the shared-memory
path (rows <= 4096) and the radix path (longer rows) run at both wave widths; the long-row
tests run once on our radix passes and once through the helper library (the vendor's radix
sort, runtime/sortlib.py) where the build carries it for the device."""

import mlx.core as mx
import numpy as np
import pytest

from oracle import check_gpu, plain_mlx

pytestmark = pytest.mark.gpu

DTYPES = ["bool", "uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64",
          "float16", "bfloat16", "float32", "float64"]
MX = {d: getattr(mx, d if d != "bool" else "bool_") for d in DTYPES}


def bits_view(a: mx.array) -> np.ndarray:
    """Exact bits (so -0.0, NaN payloads and order of equal keys are compared)."""
    with plain_mlx():
        a = mx.contiguous(a)
        if a.dtype in (mx.float16, mx.bfloat16):
            a = a.view(mx.uint16)
        elif a.dtype == mx.float32:
            a = a.view(mx.uint32)
        elif a.dtype == mx.float64:
            a = a.view(mx.uint64)
        return np.array(a)


def data(dtype, shape, seed=0, edge=True):
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    if dtype == "bool":
        return mx.array(rng.integers(0, 2, n).astype(np.bool_).reshape(shape))
    if dtype in ("float16", "bfloat16", "float32", "float64"):
        v = rng.integers(-20, 20, n).astype(np.float64) / 4   # many ties
        if edge and n >= 8:
            idx = rng.choice(n, size=max(8, n // 16), replace=False)
            pool = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e-30])
            v[idx] = pool[np.arange(len(idx)) % len(pool)]
        with plain_mlx():
            a = mx.array(v.reshape(shape).astype(np.float32 if dtype != "float64" else np.float64))
            if dtype == "float64":
                a = mx.array(v.reshape(shape))
            return a.astype(MX[dtype])
    info = np.iinfo(dtype)
    lo, hi = max(info.min, -1000), min(info.max, 1000)
    v = rng.integers(lo, hi, n, dtype=np.int64)
    if edge and n >= 4:
        v[:2] = [lo, hi]
        v = rng.permutation(v)
    a = v.astype(dtype).reshape(shape)
    if edge and n >= 4:
        a.reshape(-1)[0] = info.min
        a.reshape(-1)[1] = info.max
    return mx.array(a)


def run_both(fn, x):
    """(ours, MLX's) after asserting the node ran only on the GPU."""
    import mlx_amd
    with plain_mlx():
        mx.eval(x)
        ref = fn(x)
        mx.eval(ref)
    mlx_amd.stats(reset=True)
    got = fn(x)
    mx.eval(got)
    return got, ref, mlx_amd.stats()["by_primitive"]


def assert_gpu(by, prim):
    c = by.get(prim, {})
    assert c.get("cpu", 0) == 0 and c.get("gpu", 0) > 0, f"{prim}: {by}"


def assert_exact(fn, x, prim):
    got, ref, by = run_both(fn, x)
    assert_gpu(by, prim)
    assert got.shape == ref.shape and got.dtype == ref.dtype
    np.testing.assert_array_equal(bits_view(got), bits_view(ref))


# ---------------------------------------------------------------- block path
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,axis", [((1000,), 0), ((37, 65), 1), ((37, 65), 0), ((5, 3, 129), -1),
                                        ((4, 4096), 1), ((3, 3000), 1), ((2, 3, 1), 2), ((7, 2), 1)])
def test_sort_argsort_block(gpu_runtime, wave, dtype, shape, axis):
    x = data(dtype, shape, seed=len(shape) + axis)
    assert_exact(lambda a: mx.sort(a, axis=axis), x, "Sort")
    assert_exact(lambda a: mx.argsort(a, axis=axis), x, "ArgSort")


@pytest.mark.parametrize("dtype", ["float32", "int32", "bfloat16"])
def test_sort_views(gpu_runtime, dtype):
    base = data(dtype, (64, 96), seed=3)
    assert_exact(lambda a: mx.sort(a.T, axis=1), base, "Sort")                  # transposed
    assert_exact(lambda a: mx.argsort(a[::2, 1::3], axis=1), base, "ArgSort")   # strided
    assert_exact(lambda a: mx.argsort(a[::-1], axis=0), base, "ArgSort")        # reversed
    assert_exact(lambda a: mx.sort(mx.broadcast_to(a[:1], (5, 64, 96)), axis=0), base, "Sort")
    assert_exact(lambda a: mx.sort(a, axis=None), base, "Sort")                 # flattened


def test_empty_and_single(gpu_runtime):
    x = mx.zeros((0, 5))
    got = mx.sort(x, axis=1)
    assert got.shape == (0, 5)
    assert_exact(lambda a: mx.argsort(a, axis=0), mx.array([[3.0, -0.0, 0.0]]), "ArgSort")


def test_signed_zero_and_nan_stability(gpu_runtime):
    # -0.0 / +0.0 equal and NaNs (any sign, any payload) last, both in input order
    raw = np.array([0x80000000, 0, 0x7FC00001, 0xFFC00000, 0x3F800000, 0x80000000, 0x7F800001,
                    0, 0xBF800000, 0x7F800000], dtype=np.uint32)
    x = mx.array(raw).view(mx.float32)
    assert_exact(lambda a: mx.sort(a), x, "Sort")
    assert_exact(lambda a: mx.argsort(a), x, "ArgSort")
    long = mx.array(np.tile(raw, 1000)).view(mx.float32)                       # radix path
    assert_exact(lambda a: mx.sort(a), long, "Sort")
    assert_exact(lambda a: mx.argsort(a), long, "ArgSort")


# ---------------------------------------------------------------- radix path, both widths
class SortPath:
    """Which long-row path a test asked for ("ours" or "library") and the library calls seen."""

    def __init__(self, name, available, why):
        self.name, self.available, self.why, self.calls = name, available, why, 0

    def check(self):
        """For a library-eligible shape: the library ran iff it is in this build for the
        device (a build that lists it must load it); ours never calls it."""
        if self.name == "ours" or not self.available:
            assert self.calls == 0, f"{self.name}: the sort library ran ({self.why})"
        else:
            assert self.calls > 0, "the sort library is available but was not used"


@pytest.fixture(params=["ours", "library"])
def sort_path(request, gpu_runtime, monkeypatch):
    import json

    from mlx_amd.runtime import modules, sortlib
    from mlx_amd.runtime.ops import sort as so

    arch = str(gpu_runtime.props.arch)
    available = sortlib.get(arch) is not None
    try:
        man = json.loads((modules.kernel_dir() / "manifest.json").read_text())
        listed = "sortlib" in (man.get("libraries") or {}).get(arch, {})
    except (OSError, ValueError):
        listed = False
    assert available or not listed, f"sortlib is built for {arch} but does not load: {sortlib.why_not(arch)}"
    path = SortPath(request.param, available, sortlib.why_not(arch) or "loaded")
    if request.param == "ours":
        monkeypatch.setattr(so, "LIBRARY_MAX_ROWS", 0)
    original = so.LibrarySort.__call__

    def counted(self, ptrs, stream, ctx):
        path.calls += 1
        return original(self, ptrs, stream, ctx)

    monkeypatch.setattr(so.LibrarySort, "__call__", counted)
    ev = gpu_runtime.evaluator
    ev.plans.clear()
    ev.drop_programs()
    yield path
    ev.plans.clear()
    ev.drop_programs()


@pytest.mark.parametrize("dtype", DTYPES)
def test_sort_argsort_radix(gpu_runtime, wave, sort_path, dtype):
    x = data(dtype, (3, 9000), seed=11)
    assert_exact(lambda a: mx.sort(a, axis=1), x, "Sort")
    assert_exact(lambda a: mx.argsort(a, axis=1), x, "ArgSort")
    sort_path.check()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.large
def test_radix_subtiles(gpu_runtime, wave, sort_path, dtype):
    """Rows long enough that each radix block walks several sub-tiles (the count of them
    scales with the rows' total size against the device's multiprocessors), the last
    range partial."""
    x = data(dtype, (2, (1 << 21) + 77), seed=12)
    assert_exact(lambda a: mx.sort(a, axis=1), x, "Sort")
    assert_exact(lambda a: mx.argsort(a, axis=1), x, "ArgSort")
    sort_path.check()


@pytest.mark.parametrize("shape,axis", [((1 << 20,), 0), ((5000, 3), 0), ((2, 12289, 2), 1), ((9, 5000), 1),
                                        pytest.param(((1 << 22) + 1000,), 0, marks=pytest.mark.large)])
def test_radix_shapes(gpu_runtime, wave, sort_path, shape, axis):
    from mlx_amd.runtime.ops import sort as so

    rng = np.random.default_rng(5)
    x = mx.array(rng.standard_normal(shape).astype(np.float32))
    assert_exact(lambda a: mx.sort(a, axis=axis), x, "Sort")
    assert_exact(lambda a: mx.argsort(a, axis=axis), x, "ArgSort")
    xi = mx.array(rng.integers(-5, 5, shape).astype(np.int32))   # heavy ties: stability
    assert_exact(lambda a: mx.argsort(a, axis=axis), xi, "ArgSort")
    rows = int(np.prod(shape)) // shape[axis]
    if axis == len(shape) - 1 and rows <= so.LIBRARY_MAX_ROWS:
        sort_path.check()
    else:   # along another axis or too many rows: our passes, whatever was asked
        assert sort_path.calls == 0


@pytest.mark.parametrize("subtiles", [1, 16])
def test_radix_block_settings(gpu_runtime, wave, subtiles, monkeypatch):
    """The planner's other block shapes (tools/sort_variants.py sweeps them): one sub-tile a
    block, and blocks walking up to 16 in order."""
    from mlx_amd.runtime.ops import sort as so

    monkeypatch.setattr(so, "RADIX_MAX_SUBTILES", subtiles)
    monkeypatch.setattr(so, "LIBRARY_MAX_ROWS", 0)
    ev = gpu_runtime.evaluator
    ev.plans.clear()
    ev.drop_programs()
    try:
        rng = np.random.default_rng(6)
        x = mx.array(rng.standard_normal((2, 150001)).astype(np.float32))
        assert_exact(lambda a: mx.sort(a, axis=1), x, "Sort")
        xi = mx.array(rng.integers(-3, 3, (2, 150001)).astype(np.int32))
        assert_exact(lambda a: mx.argsort(a, axis=1), xi, "ArgSort")
    finally:
        ev.plans.clear()
        ev.drop_programs()


def test_radix_views(gpu_runtime, sort_path):
    base = data("float32", (6000, 4), seed=9)
    assert_exact(lambda a: mx.argsort(a.T, axis=1), base, "ArgSort")
    assert_exact(lambda a: mx.sort(a[::-2, 1], axis=0), base, "Sort")
    sort_path.check()


# ---------------------------------------------------------------- partitions
def check_partition(vals: np.ndarray, src: np.ndarray, kth: int, ref_kth: np.ndarray, what):
    """Rows along the last axis: vals[..., kth] equals MLX's, left <= it <= right
    (NaN greatest) and each row holds the input's multiset."""
    def key(a):
        a = a.astype(np.float64)
        return np.where(np.isnan(a), np.inf, a), np.isnan(a)
    k, nan = key(vals)
    kv, knan = k[..., kth:kth + 1], nan[..., kth:kth + 1]
    np.testing.assert_array_equal(np.where(np.isnan(ref_kth.astype(np.float64)), np.inf, ref_kth),
                                  k[..., kth], err_msg=what)
    left_ok = (k[..., :kth] <= kv) & ~(nan[..., :kth] & ~knan)
    right_ok = (k[..., kth + 1:] >= kv) & ~(knan & ~nan[..., kth + 1:])
    assert left_ok.all() and right_ok.all(), what
    srt = lambda a: np.sort(np.where(np.isnan(a.astype(np.float64)), np.inf, a.astype(np.float64)), axis=-1)
    np.testing.assert_array_equal(srt(vals), srt(src), err_msg=what)


@pytest.mark.parametrize("dtype", ["float32", "int32", "bfloat16", "uint8", "float64"])
@pytest.mark.parametrize("n,kth", [(100, 7), (4096, 100), (4096, -1), (10000, 4321)])
def test_partition(gpu_runtime, dtype, n, kth):
    x = data(dtype, (6, n), seed=n)
    got, ref, by = run_both(lambda a: mx.partition(a, kth, axis=1), x)
    assert_gpu(by, "Partition")
    with plain_mlx():
        g, r, s = (np.array(t.astype(mx.float64) if t.dtype in (mx.float16, mx.bfloat16) else t)
                   for t in (got, ref, x))
    k = kth % n
    check_partition(g, s, k, r[:, k], f"partition {dtype} n={n} kth={kth}")

    gi, ri, by = run_both(lambda a: mx.argpartition(a, kth, axis=1), x)
    assert_gpu(by, "ArgPartition")
    idx = np.array(gi).astype(np.int64)
    assert (np.sort(idx, axis=1) == np.arange(n)).all(), "argpartition is a permutation"
    check_partition(np.take_along_axis(s, idx, 1), s, k, r[:, k], f"argpartition {dtype}")


def test_argpartition_topk_like(gpu_runtime):
    x = data("float32", (64, 4096), seed=1, edge=False)
    gi, _, by = run_both(lambda a: mx.argpartition(-a, 99, axis=-1)[:, :100], x)
    assert_gpu(by, "ArgPartition")
    s = np.array(x)
    top = np.take_along_axis(s, np.array(gi).astype(np.int64), 1)
    np.testing.assert_array_equal(np.sort(top, 1), np.sort(s, 1)[:, ::-1][:, :100][:, ::-1])


# ---------------------------------------------------------------- searchsorted
@pytest.mark.parametrize("dtype", ["float32", "int32", "uint8", "float16", "bfloat16", "int64", "float64"])
@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted(gpu_runtime, dtype, side):
    with plain_mlx():
        seq = mx.sort(data(dtype, (257,), seed=2))
        vals = data(dtype, (9, 31), seed=4)
    check_gpu(lambda a, v: mx.searchsorted(a, v, side=side), seq, vals, prims=("SearchSorted",))
    check_gpu(lambda a, v: mx.searchsorted(a, v.T, side=side), seq, vals, prims=("SearchSorted",))
    check_gpu(lambda a, v: mx.searchsorted(a[::2], v[0], side=side), seq, vals, prims=("SearchSorted",))


def test_long_rows_in_replayed_steps(gpu_runtime, sort_path):
    """The same long-row sort graph evaluated again and again (a recorded program replays from
    its second sighting; the library call is a host step inside it) with new data each time."""
    rng = np.random.default_rng(21)
    for step in range(4):
        x = mx.array(rng.integers(-50, 50, (2, 20000)).astype(np.float32))
        assert_exact(lambda a: mx.argsort(a * 2.0 + 1.0, axis=-1), x, "ArgSort")
        assert_exact(lambda a: mx.sort(a - 3.0, axis=-1), x, "Sort")
    sort_path.check()
