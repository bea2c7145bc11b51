"""Kernel table of the scan family (hip_kernels/scan.hip): MLX's Scan primitive.
Loaded by path by kernel_table.py (standard library only).

Names: ``scan_r_<op>_<in>_<out>_w<W>`` (row kernel, wave-width dependent) and
``scan_c_<op>_<in>_<out>`` (column kernel). Sums and products wrap identically for
signed and unsigned integers of one size, so the signed dtypes (and bool products, whose
values are 0/1) run the unsigned kernels (``KERNEL_DTYPE``); bool sums give int32.
"""

WAVES = (32, 64)
OPS = ("sum", "prod", "max", "min", "logaddexp")
# MLX's Scan::ReduceType enumerators
REDUCE_TYPES = {0: "max", 1: "min", 2: "sum", 3: "prod", 4: "logaddexp"}

FLOATS = ("float16", "bfloat16", "float32", "float64")
_UNSIGNED = ("uint8", "uint16", "uint32", "uint64")
_SIGNED = ("int8", "int16", "int32", "int64")

# accumulator C type by dtype: sums/products of integers in 32/64-bit unsigned
_WRAP_ACC = {"bool": "uint32_t", "uint8": "uint32_t", "uint16": "uint32_t", "uint32": "uint32_t",
             "uint64": "uint64_t"}
_CMP_ACC = {"bool": "uint32_t", "uint8": "uint32_t", "uint16": "uint32_t", "uint32": "uint32_t",
            "uint64": "uint64_t", "int8": "int32_t", "int16": "int32_t", "int32": "int32_t",
            "int64": "int64_t"}
_FLOAT_ACC = {"float16": "float", "bfloat16": "float", "float32": "float", "float64": "double"}

# op -> [(in dtype, out dtype)] compiled
PAIRS = {
    "sum": [("bool", "int32")] + [(d, d) for d in _UNSIGNED + FLOATS],
    "prod": [(d, d) for d in _UNSIGNED + FLOATS],
    "max": [(d, d) for d in _UNSIGNED + _SIGNED + FLOATS],
    "min": [(d, d) for d in ("bool",) + _UNSIGNED + _SIGNED + FLOATS],
    "logaddexp": [(d, d) for d in FLOATS],
}

# (op, MLX input dtype, MLX output dtype) -> the kernel's (in, out) dtypes
def kernel_dtypes(op, in_dtype, out_dtype):
    if op in ("sum", "prod"):
        if op == "sum" and in_dtype == "bool":
            pair = ("bool", "int32") if out_dtype == "int32" else None
        elif in_dtype != out_dtype:
            pair = None
        elif in_dtype == "bool":
            pair = ("uint8", "uint8")          # 0/1 products stay 0/1
        elif in_dtype in _SIGNED:
            u = "u" + in_dtype
            pair = (u, u)
        else:
            pair = (in_dtype, in_dtype)
    elif op == "max" and in_dtype == "bool" and out_dtype == "bool":
        pair = ("uint8", "uint8")              # max of 0/1 with identity 0
    else:
        pair = (in_dtype, out_dtype) if in_dtype == out_dtype else None
    return pair if pair in PAIRS.get(op, ()) else None


_FUNCTOR = {"sum": "Sum", "prod": "Prod", "logaddexp": "LogAddExp"}


def _functor(op, dtype):
    if op in ("max", "min"):
        return ("F" if dtype in FLOATS else "I") + op.capitalize()
    return _FUNCTOR[op]


def _acc(op, dtype):
    if dtype in FLOATS:
        return _FLOAT_ACC[dtype]
    return (_WRAP_ACC if op in ("sum", "prod") else _CMP_ACC)[dtype]


def row_kernel(kt, op, in_dtype, out_dtype, wave):
    return kt.kernel_name("scan", "r", op, in_dtype, out_dtype) + f"_w{int(wave)}"


def col_kernel(kt, op, in_dtype, out_dtype):
    return kt.kernel_name("scan", "c", op, in_dtype, out_dtype)


def entries(kt):
    for op in OPS:
        for src, dst in PAIRS[op]:
            f, a = _functor(op, src), _acc(op, src)
            ct, ci, co = kt.CTYPES[src], kt.CTYPES[src], kt.CTYPES[dst]
            for w in WAVES:
                name = row_kernel(kt, op, src, dst, w)
                yield name, f"MLXA_SCAN_ROWS({name}, {f}, {ct}, {a}, {ci}, {co}, {w})"
            name = col_kernel(kt, op, src, dst)
            yield name, f"MLXA_SCAN_COLS({name}, {f}, {ct}, {a}, {ci}, {co})"
