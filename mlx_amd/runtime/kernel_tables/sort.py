"""Kernel table of the sort family (hip_kernels/sort.hip). Kernels see unsigned keys of
the value's size, so variants go by size (u8, u16, u32, u64), not by dtype; the dtype
only picks the key transform, a runtime field."""

UINTS = {"u8": "uint8_t", "u16": "uint16_t", "u32": "uint32_t", "u64": "uint64_t"}
SIZE_NAME = {1: "u8", 2: "u16", 4: "u32", 8: "u64"}

# block sort: tile (elements in shared memory) -> threads; each thread holds
# tile / threads consecutive elements in registers (8 at most: 16 took 130-180 VGPRs on AMD)
BLOCK_TILES = {512: 128, 2048: 256, 4096: 512}
BLOCK_MAX = max(BLOCK_TILES)

RADIX_THREADS = 256
# (key, payload) pairs of the radix scatter; payload None: keys only
SCATTER = (("u8", None), ("u16", None), ("u32", None), ("u64", None),
           ("u8", "u32"), ("u16", "u32"), ("u32", "u32"), ("u64", "u32"),
           ("u16", "u16"), ("u64", "u64"))
WAVES = (32, 64)


_BYTES = {None: 0, "u8": 1, "u16": 2, "u32": 4, "u64": 8}


def radix_tile(key: str, payload, wave: int) -> int:
    """Elements per radix sub-tile (radix_tile<U, V, W> in sort.hip)."""
    return (2048 if _BYTES[key] + _BYTES[payload] <= 8 else 1024) // (2 if wave == 64 else 1)


def block_name(op: str, key: str, tile: int, w: int) -> str:
    return f"sort_block_{op}_{key}_t{tile}_w{w}"


def keys_name(key: str) -> str:
    return f"sort_keys_{key}"


def count_name(key: str) -> str:
    return f"sort_count_{key}"


def scan_name(w: int) -> str:
    return f"sort_scan_w{w}"


def scatter_name(key: str, payload, w: int) -> str:
    return f"sort_scatter_{key}_{payload or 'none'}_w{w}"


def search_name(key: str) -> str:
    return f"sort_search_{key}"


def entries(kt):
    for key, ct in UINTS.items():
        for tile, threads in BLOCK_TILES.items():
            for op, arg in (("sort", "false"), ("arg", "true")):
                for w in WAVES:
                    name = block_name(op, key, tile, w)
                    yield name, f"MLXA_SORT_BLOCK({name}, {ct}, {tile}, {threads}, {arg}, {w})"
        yield keys_name(key), f"MLXA_SORT_KEYS({keys_name(key)}, {ct})"
        yield count_name(key), f"MLXA_SORT_COUNT({count_name(key)}, {ct})"
        yield search_name(key), f"MLXA_SORT_SEARCH({search_name(key)}, {ct})"
    for w in WAVES:
        yield scan_name(w), f"MLXA_SORT_SCAN({scan_name(w)}, {w})"
        for key, pay in SCATTER:
            name = scatter_name(key, pay, w)
            v = UINTS[pay] if pay else "mlxa::srt::NoPayload"
            yield name, f"MLXA_SORT_SCATTER({name}, {w}, {UINTS[key]}, {v})"
