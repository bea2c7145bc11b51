"""What the LLM measurement tools share on their command line: the random-weight model
(--shape, --bits, --prompt; mlx_amd.llm.random_model) and the null runtime (--null, --cus;
tools/profile_engine.py). A tool in tools/ imports this from its own folder."""

import os
import sys


def model_args(ap, bits=0, prompt=128):
    """--shape, --bits and (unless ``prompt`` is None) --prompt."""
    ap.add_argument("--shape", default="llama-1b", help="random-weight model shape (mlx_amd.llm)")
    ap.add_argument("--bits", type=int, default=bits, help="quantized to this many bits (0: bfloat16)")
    if prompt is not None:
        ap.add_argument("--prompt", type=int, default=prompt, help="prompt tokens")


def null_args(ap, cus=None):
    """--null and --cus."""
    ap.add_argument("--null", action="store_true",
                    help="no GPU: the host driver with no-op kernels (tools/profile_engine.py); "
                         "host cost and replay behaviour only, results are garbage")
    ap.add_argument("--cus", type=int, default=cus,
                    help="with --null: the compute units the plans see (132: SDPA decode splits as "
                         "on the H200; none: the host's cores)")


def start_null(a):
    """With --null, install the null runtime (before mlx_amd is enabled)."""
    if a.null:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from profile_engine import make_runtime

        make_runtime(a.cus)
