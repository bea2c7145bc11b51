"""Kernel table of the random family (hip_kernels/random.hip): one kernel, RandomBits
writes bytes, so no dtype variants."""

BLOCK = 256
KERNELS = ("random_bits",)


def entries(kt):
    for name in KERNELS:
        yield name, f"MLXA_RANDOM_BITS({name})"
