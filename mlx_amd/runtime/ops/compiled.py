"""mx.compile's ``Compiled`` nodes: one fused elementwise kernel generated at run time.

The bridge describes the node's fused tape (``src/bridge/compiled.cpp``):
``("tape", inputs, nodes, outputs, arrays)`` with inputs ``(id, is_constant)``, nodes
``(primitive, params, input ids, output ids)``, output ids and ``(shape, dtype)`` per id.
MLX fuses only elementwise primitives and Broadcast into a Compiled node, and every
output has the broadcast shape of all inputs, so each output element depends on each
input at that element's broadcast position: Broadcast is the identity inside the kernel
and the tape's own shapes (the trace's, under shapeless compilation) are never used —
real shapes come from the node's layouts, and the source depends only on the tape,
the dtypes and the number of inputs/outputs. So shapeless functions recompile only
when ranks or dtypes change (a new Compiled node), and a plan per layout only re-packs
the arguments.

One source holds two kernels: ``_c`` (every input dense in the output's order or a
scalar: flat index times a 0/1 stride) and ``_g`` (collapsed shape and strides in the
arguments, broadcasts as zero strides). ``_c`` takes 16 bytes of the widest operand a
thread (``vector_width``: 8 bfloat16 values) in one access per operand wherever the
buffers' addresses allow it, and the rest element by element. Values are kept in their
tape dtype between ops (float16/bfloat16 rounded after each op, as MLX's own evaluation
does) and each op computes in float for floating types, in the integer type otherwise;
float16 converts in hardware on the GPU (bit by bit on the host, for the tests that run
the generated kernels there).

The op semantics repeat the functors of ``hip_kernels/unary.hip`` / ``binary.hip`` (the
generated source can include no header: see ``runtime/jit.py``). Moving those functors
into a dependency-free ``include/mlxa/*_ops.h`` would let both use one definition.

A tape the generator does not cover (float64, complex, an op it lacks) runs node by
node through the other families' plans with temporaries for intermediate arrays; only
when some tape node has no GPU plan does the node go to MLX's CPU fallback. ``STATS``
counts which path each planned signature took.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import struct

from .. import plan as _plan
from ..launch import Launch
from ..plan import Layout, Plan
from . import elementwise as ew

FAMILY = "compiled"
PRIMITIVES = {"Compiled": "compiled"}
MAX_DIMS = 8
MAX_POINTERS = 32         # buffers per fused kernel: 256 bytes of pointers in its arguments
BLOCK = 256
VECTOR = True             # False: the _c kernel goes element by element (the A/B of compiled_bandwidth)

STATS = collections.Counter()   # "fused", "by_node", "cpu", "jit_error"


class Unsupported(Exception):
    """The fused generator does not cover this tape (the message says why)."""


# ---------------------------------------------------------------- the tape
@dataclasses.dataclass(frozen=True)
class Tape:
    inputs: tuple      # (id, is_constant) per Compiled input
    nodes: tuple       # (prim, params, in_ids, out_ids)
    outputs: tuple     # id per output
    arrays: tuple      # (shape, dtype) per id


def parse(params) -> Tape:
    if not (isinstance(params, tuple) and len(params) == 5 and params[0] == "tape"):
        raise Unsupported(f"not a tape description: {params!r:.80}")
    _, ins, nodes, outs, arrays = params
    return Tape(tuple(ins), tuple(nodes), tuple(outs), tuple(arrays))


def _norm(p):
    """A tape node's params as plan_node expects them (the evaluator's rule)."""
    return p if isinstance(p, tuple) else (() if p is None else (p,))


def swiglu_gate(params):
    """The input (0 or 1) that is the gate when the tape is silu(gate) * up and nothing else
    (mlx-lm's compiled swiglu: a sigmoid, the gate times it, that times up; Broadcasts aside)
    on two distinct non-constant 16-bit float inputs of one dtype with one output; else None.
    The quantized family makes that product as its down projection stages x (qmv_h2g)."""
    try:
        tape = parse(params)
    except Unsupported:
        return None
    if len(tape.inputs) != 2 or len(tape.outputs) != 1 or any(c for _, c in tape.inputs):
        return None
    dts = {a[1] for a in tape.arrays}
    if len(dts) != 1 or not dts <= {"float16", "bfloat16"}:
        return None
    alias = {}

    def real(i):
        while i in alias:
            i = alias[i]
        return i

    ops = []
    for prim, _p, ins, outs in tape.nodes:
        if len(outs) != 1 or not ins:
            return None
        if prim == "Broadcast":
            alias[outs[0]] = ins[0]
        else:
            ops.append((prim, tuple(real(i) for i in ins), outs[0]))
    if [o[0] for o in ops] != ["Sigmoid", "Multiply", "Multiply"]:
        return None
    (_, gs, s), (_, m1, t), (_, m2, y) = ops
    ids = [i for i, _ in tape.inputs]
    if len(gs) != 1 or len(m1) != 2 or len(m2) != 2 or sorted(m1) != sorted((gs[0], s)) or t not in m2:
        return None
    g, u = gs[0], (m2[1] if m2[0] == t else m2[0])
    if y != real(tape.outputs[0]) or g not in ids or u not in ids or g == u:
        return None
    return ids.index(g)


# ---------------------------------------------------------------- C types
CTYPE = {
    "bool": "bool", "uint8": "unsigned char", "uint16": "unsigned short", "uint32": "unsigned int",
    "uint64": "unsigned long long", "int8": "signed char", "int16": "short", "int32": "int",
    "int64": "long long", "float16": "h16", "bfloat16": "b16", "float32": "float",
}
ITEMSIZE = {"bool": 1, "uint8": 1, "int8": 1, "uint16": 2, "int16": 2, "float16": 2, "bfloat16": 2,
            "uint32": 4, "int32": 4, "float32": 4, "uint64": 8, "int64": 8}
FLOATS = ("float16", "bfloat16", "float32")
SIGNED = ("int8", "int16", "int32", "int64")
UNSIGNED = ("uint8", "uint16", "uint32", "uint64")
UCTYPE = {"int8": "unsigned char", "int16": "unsigned short", "int32": "unsigned int",
          "int64": "unsigned long long"}

PRELUDE = r"""// generated by mlx_amd/runtime/ops/compiled.py (self-contained: no includes)
#if defined(__CUDACC_RTC__) || defined(__HIPCC_RTC__) || defined(__CUDACC__) || defined(__HIP__)
#define JD __device__ __forceinline__
#else
#include <cmath>
#define JD inline
#endif
struct h16 { unsigned short b; };
struct b16 { unsigned short b; };
union FU { float f; unsigned int u; };
JD unsigned int f2u(float f) { FU x; x.f = f; return x.u; }
JD float u2f(unsigned int u) { FU x; x.u = u; return x.f; }
// float16 <-> float, round to nearest even; NaNs as MLX's x86 build encodes them
// (float -> float16: sign|0x7D00; float16 -> float keeps the payload, quiet bit set).
// On a GPU the hardware converts everything else (the bit-by-bit versions cost ~12
// instructions each and made float16 tapes compute-bound: a fused gelu_approx ran at 7 % of
// the copy bandwidth); the host build (tests) keeps those.
#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
#define MLXA_HW_F16 1
JD float h2f_hw(unsigned short b) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(b)); return f; }
JD unsigned short f2h_hw(float f) { unsigned short r; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(f)); return r; }
#elif defined(__HIPCC_RTC__) || defined(__HIP__)
#define MLXA_HW_F16 1
JD float h2f_hw(unsigned short b) { return (float)__builtin_bit_cast(_Float16, b); }
JD unsigned short f2h_hw(float f) { return __builtin_bit_cast(unsigned short, (_Float16)f); }
#endif
JD float h2f(h16 h) {
#ifdef MLXA_HW_F16
  if ((h.b & 0x7c00u) != 0x7c00u) return h2f_hw(h.b);
#endif
  unsigned int s = (unsigned int)(h.b & 0x8000u) << 16, e = (h.b >> 10) & 0x1fu, m = h.b & 0x3ffu;
  if (e == 0x1fu) return u2f(m ? (s | 0x7fc00000u | (m << 13)) : (s | 0x7f800000u));
  if (e == 0u) { float v = (float)m * 5.9604644775390625e-8f; return s ? -v : v; }
  return u2f(s | ((e + 112u) << 23) | (m << 13));
}
JD h16 f2h(float f) {
  unsigned int u = f2u(f), s = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return h16{(unsigned short)(s | 0x7d00u)};
#ifdef MLXA_HW_F16
  return h16{f2h_hw(f)};
#endif
  if (a >= 0x477ff000u) return h16{(unsigned short)(s | 0x7c00u)};
  if (a < 0x38800000u) return h16{(unsigned short)(s | (unsigned int)rintf(u2f(a) * 16777216.0f))};
  return h16{(unsigned short)(s | ((a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u) >> 13))};
}
JD float bf2f(b16 b) { return u2f((unsigned int)b.b << 16); }
JD b16 f2bf(float f) {
  unsigned int u = f2u(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return b16{0x7fc0};
  return b16{(unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}
// float -> integer as MLX's x86 build: truncation; NaN/out of range give the minimum
JD int f2i_int32(float x) { return (x >= -2147483648.0f && x < 2147483648.0f) ? (int)x : (int)0x80000000u; }
JD long long f2i_int64(float x) {
  return (x >= -9223372036854775808.0f && x < 9223372036854775808.0f) ? (long long)x : (long long)(1ull << 63);
}
JD signed char f2i_int8(float x) { return (signed char)f2i_int32(x); }
JD short f2i_int16(float x) { return (short)f2i_int32(x); }
JD unsigned char f2i_uint8(float x) { return (unsigned char)f2i_int32(x); }
JD unsigned short f2i_uint16(float x) { return (unsigned short)f2i_int32(x); }
JD unsigned int f2i_uint32(float x) {
  return x >= 2147483648.0f ? ((unsigned int)f2i_int32(x - 2147483648.0f) ^ 0x80000000u) : (unsigned int)f2i_int32(x);
}
JD unsigned long long f2i_uint64(float x) { return (unsigned long long)f2i_int64(x); }
JD bool f2i_bool(float x) { return x != 0.0f; }
JD float sigmoid_f(float x) { const float y = 1.0f / (1.0f + expf(fabsf(x))); return x < 0.0f ? y : 1.0f - y; }
JD bool isnan_f(float x) { return x != x; }
JD float max_f(float a, float b) { return isnan_f(a) ? a : (a > b ? a : b); }
JD float min_f(float a, float b) { return isnan_f(a) ? a : (a < b ? a : b); }
JD float logaddexp_f(float a, float b) {
  const float hi = max_f(a, b), lo = min_f(a, b);
  if (lo == -u2f(0x7f800000u) || hi == u2f(0x7f800000u)) return hi;
  return hi + log1pf(expf(lo - hi));
}
JD float rem_f(float a, float b) { float r = remainderf(a, b); if (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) r += b; return r; }
template <typename T> JD T max_i(T a, T b) { return a > b ? a : b; }
template <typename T> JD T min_i(T a, T b) { return a < b ? a : b; }
template <typename T, typename U> JD T wadd(T a, T b) { return (T)((U)a + (U)b); }
template <typename T, typename U> JD T wsub(T a, T b) { return (T)((U)a - (U)b); }
template <typename T, typename U> JD T wmul(T a, T b) { return (T)((U)a * (U)b); }
// integer division: x / 0 is 0 and MIN / -1 wraps (signed), as MLX computes them
template <typename T, typename U> JD T div_s(T a, T b) { return b == 0 ? (T)0 : (b == (T)-1 ? wsub<T, U>((T)0, a) : (T)(a / b)); }
template <typename T> JD T div_u(T a, T b) { return b == 0 ? (T)0 : (T)(a / b); }
template <typename T> JD T rem_i(T a, T b) {
  if (b == 0) return a;
  if (b == (T)-1) return (T)0;
  T r = (T)(a % b);
  if (r != (T)0 && ((r < (T)0) != (b < (T)0))) r = (T)(r + b);
  return r;
}
template <typename T, typename U> JD T pow_i(T base, T e) {
  if (e < (T)0) return (T)0;
  T r = (T)1;
  while (e) { if (e & (T)1) r = wmul<T, U>(r, base); e = (T)(e >> 1); base = wmul<T, U>(base, base); }
  return r;
}
"""


def _kind(dt: str) -> str:
    return "float" if dt in FLOATS else ("bool" if dt == "bool" else "int")


def _widen(v: str, dt: str) -> str:
    return f"h2f({v})" if dt == "float16" else f"bf2f({v})" if dt == "bfloat16" else v


def _narrow(expr: str, kind: str, out: str) -> str:
    """A compute value of ``kind`` stored as dtype ``out`` (mlxa::cast's rules)."""
    if out == "bool":
        return expr if kind == "bool" else f"(({expr}) != 0)"
    if out == "float16":
        return f"f2h((float)({expr}))"
    if out == "bfloat16":
        return f"f2bf((float)({expr}))"
    if out == "float32":
        return f"(float)({expr})"
    if kind == "float":
        return f"f2i_{out}({expr})"
    return f"({CTYPE[out]})({expr})"


def _convert(v: str, src: str, out: str) -> str:
    if src == out:
        return v
    if src == "float16" and out == "uint32":   # MLX converts this pair through int64
        return f"(unsigned int)f2i_int64(h2f({v}))"
    return _narrow(_widen(v, src), _kind(src), out)


_FLOAT_UNARY = {
    "Exp": "expf", "Expm1": "expm1f", "Log1p": "log1pf", "Sin": "sinf", "Cos": "cosf",
    "Tan": "tanf", "Tanh": "tanhf", "Sinh": "sinhf", "Cosh": "coshf", "ArcSin": "asinf",
    "ArcCos": "acosf", "ArcTan": "atanf", "ArcSinh": "asinhf", "ArcCosh": "acoshf",
    "ArcTanh": "atanhf", "Erf": "erff", "ErfInv": "erfinvf", "Sigmoid": "sigmoid_f",
}
_ROUNDING = {"Floor": "floorf", "Ceil": "ceilf", "Round": "rintf"}
_LOG = {0: "log2f", 1: "log10f", 2: "logf"}
_COMPARE = {"Equal": "==", "NotEqual": "!=", "Less": "<", "LessEqual": "<=", "Greater": ">",
            "GreaterEqual": ">="}
_BITWISE = {0: "&", 1: "|", 2: "^", 3: "<<", 4: ">>"}
OPS = (set(_FLOAT_UNARY) | set(_ROUNDING) | set(_COMPARE) | {
    "Log", "Sqrt", "Abs", "Negative", "Square", "Sign", "LogicalNot", "BitwiseInvert", "AsType",
    "Add", "Subtract", "Multiply", "Divide", "Maximum", "Minimum", "Power", "Remainder",
    "ArcTan2", "LogAddExp", "LogicalAnd", "LogicalOr", "BitwiseBinary", "Select", "Broadcast"})


def _unary(prim, params, v, dt):
    """(expression, kind) of a one-input op on stored value v of dtype dt."""
    k = _kind(dt)
    x = _widen(v, dt)
    if prim in _FLOAT_UNARY or prim in ("Log", "Sqrt"):
        if k != "float":
            raise Unsupported(f"{prim} on {dt}")
        if prim == "Log":
            fn = _LOG.get(params[0] if params else 2)
            if fn is None:
                raise Unsupported(f"Log base {params!r}")
            return f"{fn}({x})", k
        if prim == "Sqrt":
            return (f"(1.0f / sqrtf({x}))" if params and params[0] else f"sqrtf({x})"), k
        return f"{_FAMILY_FN(prim)}({x})", k
    if prim in _ROUNDING:
        return (f"{_ROUNDING[prim]}({x})" if k == "float" else x), k
    if prim == "LogicalNot":
        return f"(!({x}))", "bool"
    if k == "bool":
        if prim == "Abs":
            return x, k
        raise Unsupported(f"{prim} on bool")
    c = CTYPE[dt]
    if prim == "Abs":
        if k == "float":
            return f"fabsf({x})", k
        return (f"({x} < 0 ? wsub<{c}, {UCTYPE[dt]}>(({c})0, {x}) : {x})" if dt in SIGNED else x), k
    if prim == "Negative":
        if k == "float":
            return f"(-({x}))", k
        u = UCTYPE.get(dt, c)
        return f"wsub<{c}, {u}>(({c})0, {x})", k
    if prim == "Square":
        if k == "float":
            return f"(({x}) * ({x}))", k
        return f"wmul<{c}, {UCTYPE.get(dt, c)}>({x}, {x})", k
    if prim == "Sign":
        if k == "float":
            return f"({x} < 0.0f ? -1.0f : ({x} > 0.0f ? 1.0f : 0.0f))", k
        if dt in UNSIGNED:
            return f"(({c})({x} != 0))", k
        return f"(({c})({x} < 0 ? -1 : ({x} > 0 ? 1 : 0)))", k
    if prim == "BitwiseInvert" and k == "int":
        return f"(({c})(~{x}))", k
    raise Unsupported(f"{prim} on {dt}")


def _FAMILY_FN(prim):
    return _FLOAT_UNARY[prim]


def _binary(prim, params, a, b, dt):
    k = _kind(dt)
    x, y = _widen(a, dt), _widen(b, dt)
    if prim in _COMPARE:
        e = f"({x} {_COMPARE[prim]} {y})"
        if prim == "Equal" and params and params[0] and k == "float":
            e = f"({e} || (isnan_f({x}) && isnan_f({y})))"
        return e, "bool"
    if prim in ("LogicalAnd", "LogicalOr"):
        return f"(({x}) {'&&' if prim == 'LogicalAnd' else '||'} ({y}))", "bool"
    if prim == "BitwiseBinary":
        op = _BITWISE.get(params[0] if params else None)
        if op is None or k == "float" or (k == "bool" and op in ("<<", ">>")):
            raise Unsupported(f"BitwiseBinary {params!r} on {dt}")
        return f"(({CTYPE[dt]})({x} {op} {y}))", k
    if k == "float":
        f = {"Add": "({x} + {y})", "Subtract": "({x} - {y})", "Multiply": "({x} * {y})",
             "Divide": "({x} / {y})", "Maximum": "max_f({x}, {y})", "Minimum": "min_f({x}, {y})",
             "Power": "powf({x}, {y})", "Remainder": "rem_f({x}, {y})", "ArcTan2": "atan2f({x}, {y})",
             "LogAddExp": "logaddexp_f({x}, {y})"}.get(prim)
        if f is None:
            raise Unsupported(f"{prim} on {dt}")
        return f.format(x=x, y=y), k
    c = CTYPE[dt]
    u = UCTYPE.get(dt, c)
    if k == "bool":
        f = {"Add": "({x} || {y})", "Multiply": "({x} && {y})", "Maximum": "({x} || {y})",
             "Minimum": "({x} && {y})"}.get(prim)
        if f is None:
            raise Unsupported(f"{prim} on bool")
        return f.format(x=x, y=y), k
    f = {"Add": f"wadd<{c}, {u}>", "Subtract": f"wsub<{c}, {u}>", "Multiply": f"wmul<{c}, {u}>",
         "Maximum": f"max_i<{c}>", "Minimum": f"min_i<{c}>", "Remainder": f"rem_i<{c}>",
         "Power": f"pow_i<{c}, {u}>",
         "Divide": f"div_s<{c}, {u}>" if dt in SIGNED else f"div_u<{c}>"}.get(prim)
    if f is None:
        raise Unsupported(f"{prim} on {dt}")
    return f"{f}({x}, {y})", k


# ---------------------------------------------------------------- source generation
def vector_width(dtypes) -> int:
    """Elements a thread of the ``_c`` kernel takes at once: 16 bytes of the widest operand
    (an element a thread moved 2 bytes per load for bfloat16 and held a fused SwiGLU at a
    third of the copy bandwidth); 1 when no operand is known."""
    widest = max((ITEMSIZE[d] for d in dtypes if d in ITEMSIZE), default=16)
    return max(16 // widest, 1)


def signature(tape: Tape, in_dtypes: tuple, out_dtypes: tuple) -> str:
    """What the source depends on, without shapes (Broadcast's target shape and the
    tape's array shapes are the trace's): a short stable hash for the kernel name. A
    retrace at new shapes (non-shapeless compile) so gives the same source again."""
    nodes = tuple((p, None if p == "Broadcast" else pa, i, o) for p, pa, i, o in tape.nodes)
    text = repr((tape.inputs, nodes, tape.outputs, tuple(dt for _, dt in tape.arrays),
                 in_dtypes, out_dtypes))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def fused_source(tape: Tape, in_dtypes: tuple, out_dtypes: tuple):
    """(source, kernel base name) of the fused kernel; raises Unsupported."""
    ni, no = len(tape.inputs), len(tape.outputs)
    if ni != len(in_dtypes) or no != len(out_dtypes):
        raise Unsupported("tape and node disagree on inputs/outputs")
    dtypes = {i: dt for i, (_, dt) in enumerate(tape.arrays)}
    vals: dict = {}     # id -> (C variable, dtype)
    loads, lines = [], []
    for k, ((aid, _const), dt) in enumerate(zip(tape.inputs, in_dtypes)):
        if dt not in CTYPE:
            raise Unsupported(f"input dtype {dt}")
        loads.append(f"  const {CTYPE[dt]} v{aid} = ((const {CTYPE[dt]}*)a.p[{k}])[off[{k}]];")
        vals[aid] = (f"v{aid}", dt)
    for prim, params, ins, outs in tape.nodes:
        params = _norm(params)
        if len(outs) != 1 or prim not in OPS:
            raise Unsupported(f"tape node {prim}")
        oid = outs[0]
        odt = dtypes.get(oid)
        if odt not in CTYPE:
            raise Unsupported(f"{prim} gives {odt}")
        if any(i not in vals for i in ins):
            raise Unsupported(f"{prim} reads an array the tape does not define")
        args = [vals[i] for i in ins]
        if prim == "Broadcast":
            # shapeless tapes give Broadcast the other operands too (for their shapes):
            # the value is input 0
            if not args or args[0][1] != odt:
                raise Unsupported("Broadcast changing dtype")
            vals[oid] = args[0]
            continue
        if prim == "AsType":
            expr = _convert(args[0][0], args[0][1], odt)
        elif prim == "Select":
            if len(args) != 3 or args[1][1] != odt or args[2][1] != odt:
                raise Unsupported("Select operand dtypes")
            cv, cdt = args[0]
            cond = cv if cdt == "bool" else f"({_widen(cv, cdt)} != 0)"
            expr = f"({cond} ? {args[1][0]} : {args[2][0]})"
        elif len(args) == 1:
            e, kind = _unary(prim, params, args[0][0], args[0][1])
            expr = _narrow(e, kind, odt)
        elif len(args) == 2:
            if args[0][1] != args[1][1]:
                raise Unsupported(f"{prim} on {args[0][1]} and {args[1][1]}")
            e, kind = _binary(prim, params, args[0][0], args[1][0], args[0][1])
            expr = _narrow(e, kind, odt)
        else:
            raise Unsupported(f"{prim} with {len(args)} inputs")
        lines.append(f"  const {CTYPE[odt]} v{oid} = {expr};")
        vals[oid] = (f"v{oid}", odt)
    stores = []
    for j, (oid, dt) in enumerate(zip(tape.outputs, out_dtypes)):
        if oid not in vals or vals[oid][1] != dt:
            raise Unsupported(f"output {j} is not computed as {dt}")
        stores.append(f"  (({CTYPE[dt]}*)a.p[{ni + j}])[i] = {vals[oid][0]};")
    # the vector body: V elements a thread, each operand's V values in one access (a scalar
    # input's one value repeated); the same per-element code in between
    V = vector_width(tuple(in_dtypes) + tuple(out_dtypes))
    vloads, vfront, vstores, vcheck = [], [], [], []
    for k, ((aid, _const), dt) in enumerate(zip(tape.inputs, in_dtypes)):
        t = CTYPE[dt]
        vloads.append(f"  VN<{t}> w{k};\n  if (a.st[{k}][0]) w{k} = ((const VN<{t}>*)a.p[{k}])[g];\n"
                      f"  else {{ const {t} s = ((const {t}*)a.p[{k}])[0];\n"
                      f"#pragma unroll\n    for (int e = 0; e < V; ++e) w{k}.v[e] = s; }}")
        vfront.append(f"    const {t} v{aid} = w{k}.v[e];")
        vcheck.append(f"(a.st[{k}][0] == 0 || ((unsigned long long)a.p[{k}] % sizeof(VN<{t}>)) == 0)")
    for j, (oid, dt) in enumerate(zip(tape.outputs, out_dtypes)):
        t = CTYPE[dt]
        vloads.append(f"  VN<{t}> r{j};")
        vstores.append(f"  ((VN<{t}>*)a.p[{ni + j}])[g] = r{j};")
        vcheck.append(f"((unsigned long long)a.p[{ni + j}] % sizeof(VN<{t}>)) == 0")
    velem = vfront + ["  " + ln for ln in lines] + [
        f"    r{j}.v[e] = {vals[oid][0]};" for j, oid in enumerate(tape.outputs)]
    name = f"mlxa_jit_{signature(tape, tuple(in_dtypes), tuple(out_dtypes))}"
    nis = max(ni, 1)
    src = PRELUDE + f"""
struct Args {{
  void* p[{ni + no}];
  long long n;
  int ndim, pad;
  int shape[{MAX_DIMS}];               // innermost first
  long long st[{nis}][{MAX_DIMS}];       // per input, elements, innermost first
}};

// Every load comes before every store: an output may take over a dense input.
JD void body(const Args& a, long long i, const long long* off) {{
{chr(10).join(loads + lines + stores)}
}}

// V consecutive elements (group g) in one access per operand.
constexpr int V = {V};
template <typename T> struct alignas(sizeof(T) * V) VN {{ T v[V]; }};
JD void body_v(const Args& a, long long g) {{
{chr(10).join(vloads)}
#pragma unroll
  for (int e = 0; e < V; ++e) {{
{chr(10).join(velem)}
  }}
{chr(10).join(vstores)}
}}

// Whole groups of V where every dense operand's address allows it (a buffer at an odd
// element offset does not), then the rest element by element.
extern "C" __global__ void {name}_c(Args a) {{
  const long long step = (long long)gridDim.x * blockDim.x, t0 = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  long long done = 0;
  if ({" && ".join(vcheck) if VECTOR else "false"}) {{
    const long long groups = a.n / V;
    for (long long g = t0; g < groups; g += step) body_v(a, g);
    done = groups * V;
  }}
  for (long long i = done + t0; i < a.n; i += step) {{
    long long off[{nis}];
#pragma unroll
    for (int k = 0; k < {ni}; ++k) off[k] = i * a.st[k][0];
    body(a, i, off);
  }}
}}

// Tiles of 4 * blockDim elements: decompose the index once, then step along the
// innermost dimension until it wraps.
extern "C" __global__ void {name}_g(Args a) {{
  const long long bd = blockDim.x, tile = bd * 4, inner = a.shape[0];
  for (long long base = (long long)blockIdx.x * tile; base < a.n; base += (long long)gridDim.x * tile) {{
    long long i = base + threadIdx.x, c0 = inner;
    long long off[{nis}];
    for (int it = 0; it < 4 && i < a.n; ++it, i += bd, c0 += bd) {{
      if (c0 >= inner) {{
        long long rest = i;
#pragma unroll
        for (int k = 0; k < {ni}; ++k) off[k] = 0;
#pragma unroll
        for (int d = 0; d < {MAX_DIMS}; ++d) {{
          if (d < a.ndim) {{
            const long long s = a.shape[d], c = rest % s;
            if (d == 0) c0 = c;
#pragma unroll
            for (int k = 0; k < {ni}; ++k) off[k] += c * a.st[k][d];
            rest /= s;
          }}
        }}
      }} else {{
#pragma unroll
        for (int k = 0; k < {ni}; ++k) off[k] += bd * a.st[k][0];
      }}
      body(a, i, off);
    }}
  }}
}}
"""
    return src, name


def broadcast_strides(lay: Layout, shape: tuple) -> tuple:
    """The input's strides over the output's shape (missing/size-1 dims: 0)."""
    pad = len(shape) - lay.ndim
    if pad < 0:
        raise Unsupported("input of higher rank than the output")
    st = []
    for d, n in enumerate(shape):
        if d < pad:
            st.append(0)
            continue
        ld, ls = lay.shape[d - pad], lay.strides[d - pad]
        if ld == n:
            st.append(ls if n != 1 else 0)
        elif ld == 1:
            st.append(0)
        else:
            raise Unsupported(f"input shape {lay.shape} does not broadcast to {shape}")
    return tuple(st)


_TAIL_HEAD = struct.Struct(f"<q i i {MAX_DIMS}i")


def fused_launch(node, device, source_name, function=None):
    """(Launch, mode) for the node's layouts; ``function`` is the compiled kernel."""
    out = node.out
    n = out.size
    shape = out.shape
    ni = len(node.ins)
    for o in node.outs:
        if o.shape != shape:
            raise Unsupported("outputs of different shapes")
    bst = [broadcast_strides(l, shape) for l in node.ins]
    dense = all(ew.is_scalar(l) or ew.is_dense_like(l, out) for l in node.ins)
    if dense:
        mode, cshape = "c", (max(n, 1),)
        cst = [(0 if ew.is_scalar(l) and not ew.is_dense_like(l, out) else 1,) for l in node.ins]
        items = n
    else:
        mode = "g"
        cshape, cst = ew.collapse_dims(shape, *bst)
        if len(cshape) > MAX_DIMS:
            raise Unsupported(f"{len(cshape)} dimensions after collapse")
        items = n
    tail = _TAIL_HEAD.pack(n, len(cshape), 0, *(list(reversed(cshape)) + [1] * (MAX_DIMS - len(cshape))))
    for k in range(max(ni, 1)):
        s = list(reversed(cst[k])) if k < ni else []
        tail += struct.pack(f"<{MAX_DIMS}q", *(s + [0] * (MAX_DIMS - len(s))))
    if n == 0:
        grid = (0, 1, 1)
    else:
        per_block = BLOCK * (4 if mode == "g" else
                             vector_width(tuple(l.dtype for l in node.ins) + tuple(o.dtype for o in node.outs)))
        cap = _plan.compute_units(device) * 16
        grid = (min(-(-items // per_block), cap), 1, 1)
    refs = tuple(_plan.inp(k) for k in range(ni)) + tuple(_plan.out(j) for j in range(len(node.outs)))
    return Launch(FAMILY, f"{source_name}_{mode}", grid, (BLOCK, 1, 1), 0, len(refs), tail,
                  refs=refs, function=function), mode


def _compile(source: str, name: str):
    """The function handle of kernel ``name``: through the current runtime's driver."""
    from .. import context, jit

    rt = context.current()
    if rt is None or rt.driver.platform not in ("nvidia", "amd"):
        raise Unsupported("no GPU driver to compile for")
    return jit.function(rt.driver, rt.props, source, name)


def fused_plan(node, device, compile=_compile):
    tape = parse(node.params)
    if len(node.ins) + len(node.outs) > MAX_POINTERS:
        raise Unsupported(f"{len(node.ins) + len(node.outs)} buffers (launch.py packs {MAX_POINTERS})")
    src, name = fused_source(tape, tuple(l.dtype for l in node.ins), tuple(o.dtype for o in node.outs))
    launch, mode = fused_launch(node, device, name)
    if not launch.empty:
        launch = dataclasses.replace(launch, function=compile(src, launch.kernel))
    # dense inputs of the same element size may give their buffer to an output
    donate = tuple((j, k) for j, o in enumerate(node.outs) for k, l in enumerate(node.ins)
                   if not tape.inputs[k][1] and l.itemsize == o.itemsize and ew.is_dense_like(l, node.out))
    return Plan((launch,), donate=donate)


# ---------------------------------------------------------------- node by node
def by_node_plan(node, device, table=None):
    """Each tape node through its own family's plan; intermediates in temporaries.
    None when some tape node has no GPU plan."""
    if table is None:
        from . import dispatch_table

        table = dispatch_table()
    tape = parse(node.params)
    shape = node.out.shape
    dtypes = {i: dt for i, (_, dt) in enumerate(tape.arrays)}
    where: dict = {}      # id -> (Ref, Layout)
    for k, ((aid, _), lay) in enumerate(zip(tape.inputs, node.ins)):
        if lay.shape == shape:
            where[aid] = (_plan.inp(k), lay)
        else:
            st = broadcast_strides(lay, shape)
            where[aid] = (_plan.inp(k), Layout(shape, st, lay.dtype, lay.data_size, False, lay.data_size == 1))
    out_of = {}
    for j, oid in enumerate(tape.outputs):
        if oid in out_of:
            return None   # one array as two outputs: would need a copy
        out_of[oid] = j
    steps, temps = [], []
    for prim, params, ins, outs in tape.nodes:
        if len(outs) != 1 or any(i not in where for i in ins):
            return None
        oid = outs[0]
        if prim == "Broadcast":
            if oid in out_of:
                return None
            where[oid] = where[ins[0]]
            continue
        fam = table.get(prim)
        if fam is None or fam.FAMILY == FAMILY:
            return None
        olay = Layout.row_major(shape, dtypes[oid])
        if oid in out_of:
            target = _plan.out(out_of[oid])
        else:
            target = _plan.tmp(len(temps))
            temps.append(max(olay.nbytes, 1))
        sub_ins = tuple(where[i][1] for i in ins)
        sub = fam.plan_node(_plan.Node(prim, _norm(params), sub_ins, (olay,)), device)
        if sub is None:
            return None
        base = len(temps)
        mapping = {("i", k): where[i][0] for k, i in enumerate(ins)}
        mapping[("o", 0)] = target
        # we never donate: the init steps always run
        sub_steps = _plan.embed(sub, mapping, lambda i, n: base + i, inline_init=True)
        if sub_steps is None:
            return None
        temps.extend(sub.temps)
        steps += sub_steps
        where[oid] = (target, olay)
    if any(where.get(oid, (None,))[0] != _plan.out(j) for j, oid in enumerate(tape.outputs)):
        return None   # an output that is an input or a broadcast of one
    return Plan(tuple(steps), temps=tuple(temps))


# ---------------------------------------------------------------- entry point
def plan_node(node, device, compile=_compile):
    try:
        plan = fused_plan(node, device, compile)
        STATS["fused"] += 1
        return plan
    except Unsupported:
        pass
    except Exception as e:  # a compiler rejecting the source must not lose the node
        from .. import jit

        if not isinstance(e, jit.JitError):
            raise
        STATS["jit_error"] += 1
        _last_error[0] = str(e)
    try:
        plan = by_node_plan(node, device)
    except Unsupported:
        plan = None
    STATS["by_node" if plan is not None else "cpu"] += 1
    return plan


_last_error = [""]


def last_jit_error() -> str:
    return _last_error[0]
