"""Benchmarks as a library: timing through the engine, references measured in the same run,
the results file schema, and the standard LLM set behind `mlx-amd bench`.

    from mlx_amd.bench import Bench           # (benchmarks/harness.py re-exports it)
    b = Bench("reduce_bandwidth")               # GPU runtime, roofline measured once
    ms = b.time_mlx(lambda x: mx.sum(x, axis=1), x)     # mlx-amd, inputs resident
    ref = b.time_torch(lambda: t.sum(1))                # None without a CUDA PyTorch
    b.row("sum f32 4096x32768 (row)", nbytes / ms, "GB/s", "copy roofline", b.roofline_gbps)
    b.write(args.out)   # <out>/reduce_bandwidth-h200.json

Rows follow benchmarks/results/README.md: name, value, unit, reference, reference_value,
ratio (> 1 better than the reference; for a roofline, our share of it).
"""

from __future__ import annotations

import datetime
import json
import os
import re
import statistics
import struct
import sys
import time
from typing import Optional

import mlx.core as mx

from mlx_amd.runtime.launch import Launch, run as run_launch

REPS = 20


def torch_cuda():
    """PyTorch when it can use a CUDA GPU here (the reference for many rows), else None."""
    try:
        import torch
    except Exception:
        return None
    try:
        return torch if torch.cuda.is_available() else None
    except Exception:
        return None


def _median_ms(fn, reps, warmup, sync):
    for _ in range(warmup):
        fn()
    sync()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


class Bench:
    SPIN_CYCLES = 400_000   # ~0.2 ms of GPU clock: longer than the host takes to queue a plan

    def __init__(self, name: str, reps: int = REPS):
        import mlx_amd
        from mlx_amd.runtime.context import get_runtime

        self.name, self.reps, self.rows = name, reps, []
        mlx_amd.enable()
        self.rt = get_runtime()
        self.drv = self.rt.driver
        # timed runs wait on the GPU behind this kernel (_spin); the host driver runs none
        self._spin_launch = None if self.drv.platform == "host" else Launch(
            "smoke", "smoke_spin", (1, 1, 1), (1, 1, 1), 0, 0, struct.pack("<q", self.SPIN_CYCLES), refs=())
        self.props = self.rt.props
        self.roofline_gbps = self._copy_roofline()
        print(f"{name} on {self.props.name}: device copy {self.roofline_gbps:.0f} GB/s")

    def _copy_roofline(self, nbytes: int = 1 << 30) -> float:
        a, b = self.drv.malloc(nbytes), self.drv.malloc(nbytes)
        try:
            self.drv.memset(a, 0x3c, nbytes)
            ms = self.time_device(lambda: self.drv.memcpy_dtod(b, a, nbytes))
        finally:
            self.drv.free(a)
            self.drv.free(b)
        return 2 * nbytes / (ms * 1e-3) / 1e9

    def _spin(self, stream=None) -> None:
        """Queue the spin kernel on ``stream``: what is queued after it waits on the GPU, so
        events around that work time the GPU alone, not the host's launches."""
        if self._spin_launch is not None:
            run_launch(self._spin_launch, self.rt.modules, self.drv, (), stream)

    def time_device(self, fn, warmup: int = 3) -> float:
        """Median ms of fn() (launches on the default stream) between two device events
        there, each run queued behind the spin kernel."""
        drv = self.drv
        e0, e1 = drv.event_create(), drv.event_create()
        for _ in range(warmup):
            fn()
        ts = []
        for _ in range(self.reps):
            self._spin()
            drv.event_record(e0)
            fn()
            drv.event_record(e1)
            drv.event_synchronize(e1)
            ts.append(drv.event_elapsed_ms(e0, e1))
        return statistics.median(ts)

    def time_mlx(self, fn, *args, warmup: int = 3) -> float:
        """Median wall ms of mx.eval(fn(*args)) under mlx-amd (inputs evaluated and resident
        first; includes the engine's host work, which large ops amortise)."""
        mx.eval(*args)
        return _median_ms(lambda: mx.eval(fn(*args)), self.reps, warmup, lambda: None)

    def device_ptr(self, a) -> int:
        """Device address of an array's element 0 (evaluated and made resident first)."""
        from mlx_amd.runtime import bridge

        mx.eval(a)
        inf = bridge.buffer_info(a)
        ev = self.rt.evaluator
        return self.rt.residency.device_ptr(inf[0], inf[1], inf[5], ev.stream) + inf[2]

    def time_node(self, family, prim, params, ins, out_shapes, out_dtypes):
        """Median ms of one node's plan on the evaluator's stream, device events around it:
        the kernels (and library calls) alone, on resident inputs ``ins`` (mx arrays, any
        layout) and fresh outputs. Plans exactly as the evaluator does. Each timed run is
        queued behind a spin kernel, so the events see the GPU's time, not the host's
        launch latency (which would add ~5-10 us to every short kernel)."""
        from mlx_amd.runtime.plan import ITEMSIZE, Layout, Node

        lays = []
        for a in ins:
            mx.eval(a)
            from mlx_amd.runtime import bridge

            inf = bridge.buffer_info(a)
            lays.append(Layout(tuple(a.shape), tuple(inf[3]), str(a.dtype).split(".")[-1], inf[4], inf[6], inf[8]))
        outs = tuple(Layout.row_major(s, d) for s, d in zip(out_shapes, out_dtypes))
        plan = family.plan_node(Node(prim, tuple(params), tuple(lays), outs), self.props)
        if plan is None:
            raise RuntimeError(f"{prim}: no GPU plan for {[(l.shape, l.dtype) for l in lays]}")
        in_ptrs = [self.device_ptr(a) for a in ins]
        pool = self.rt.residency.device_pool
        blocks = [pool.alloc(o.size * ITEMSIZE[o.dtype]) for o in outs]
        ev = self.rt.evaluator
        drv, stream = self.drv, ev.stream
        e0, e1 = drv.event_create(), drv.event_create()
        try:
            run = lambda: ev.run_plan(plan, in_ptrs, [b.data for b in blocks])  # noqa: E731
            for _ in range(3):
                run()
            ts = []
            for _ in range(self.reps):
                self._spin(stream)
                drv.event_record(e0, stream)
                run()
                drv.event_record(e1, stream)
                drv.event_synchronize(e1)
                ts.append(drv.event_elapsed_ms(e0, e1))
        finally:
            drv.stream_synchronize(stream)
            for b in blocks:
                pool.free(b)
        return statistics.median(ts)

    def time_torch(self, fn, warmup: int = 3):
        """Median ms of a PyTorch CUDA callable with CUDA events (queued behind a spin, like
        time_node), or None without torch."""
        try:
            import torch

            if not torch.cuda.is_available():
                return None
        except Exception:
            return None
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(warmup):
            fn()
        ts = []
        for _ in range(self.reps):
            torch.cuda._sleep(self.SPIN_CYCLES)   # as time_node: the GPU's time, not the launch's
            s.record()
            fn()
            e.record()
            e.synchronize()
            ts.append(s.elapsed_time(e))
        return statistics.median(ts)

    def row(self, name, value, unit, reference, reference_value, higher_is_better=True):
        ratio = None
        if value and reference_value:
            ratio = value / reference_value if higher_is_better else reference_value / value
        self.rows.append({"name": name, "value": value, "unit": unit, "reference": reference,
                          "reference_value": reference_value, "ratio": ratio})
        rv = "-" if reference_value is None else f"{reference_value:.4g}"
        rt = "-" if ratio is None else f"{ratio:.2f}"
        print(f"  {name:44s} {value:10.4g} {unit:8s} vs {reference} {rv} -> {rt}")

    def write(self, out_dir: str, device_tag: Optional[str] = None) -> str:
        """Write ``<out_dir>/<name>-<tag>.json``; the tag names the card that ran (h200, h100,
        mi300x, ...), so a result of another card never lands under the test machine's name."""
        os.makedirs(out_dir, exist_ok=True)
        device_tag = device_tag or device_tag_of(self.props.name)
        path = os.path.join(out_dir, f"{self.name}-{device_tag}.json")
        doc = {"benchmark": self.name, "device": self.props.name,
               "command": " ".join(["python"] + [os.path.relpath(sys.argv[0])] + sys.argv[1:]),
               "date": datetime.date.today().isoformat(), "rows": self.rows}
        with open(path, "w") as f:
            json.dump(doc, f, indent=1)
        return path


def device_tag_of(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'h100', 'AMD Radeon RX 7900 XTX' -> '7900'; none -> 'gpu'."""
    m = re.search(r"\b([A-Z]{0,3}\d{3,4}[A-Z]*)\b", name or "")
    return m.group(1).lower() if m else "gpu"


# ---------------------------------------------------------------- the standard LLM set
def llm_decode(b: Bench, shapes=("llama-1b",), tokens: int = 64, plain_tokens: int = 4,
               plain_prompt: int = 16, prompt_tokens: int = 128, out_dir=None, progress=print) -> None:
    """Prefill and decode of random-weight models of public shapes through mlx-lm's own
    loop (bf16, greedy), against the bandwidth bound (weight bytes per token over the device
    copy bandwidth) and, with plain_tokens > 1, plain MLX on the CPU in the same run (a
    short prompt: it is slow). Rows go into ``b``; written after each model when out_dir."""
    from mlx.utils import tree_flatten

    import mlx_amd

    from . import llm

    for shape in shapes:
        progress(f"{shape}: building the model (random weights)")
        model = llm.random_model(shape, "bfloat16")
        weight_bytes = sum(v.nbytes for _, v in tree_flatten(model.parameters()))
        prompt = mx.random.randint(0, model.args.vocab_size, (prompt_tokens,), key=mx.random.key(1))
        progress(f"{shape}: warm-up")
        llm.generate(model, prompt, 4)                  # plans, uploads, run-time compiles
        progress(f"{shape}: {tokens} tokens")
        toks, ttft, rest = llm.generate(model, prompt, tokens)
        decode, prefill = (len(toks) - 1) / rest, prompt.size / ttft
        st = mlx_amd.stats()
        cpu = {p: c["cpu"] for p, c in st["by_primitive"].items() if c.get("cpu")}
        progress(f"{shape}: decode {decode:.1f} tok/s, prefill {prefill:.0f} tok/s (TTFT {ttft:.3f} s); "
                 f"CPU-fallback nodes {cpu or 'none'}")
        b.row(f"decode {shape} bf16 vs bandwidth bound", decode, "tok/s",
              "weight bytes / device copy bandwidth", b.roofline_gbps * 1e9 / weight_bytes)
        if out_dir:
            b.write(out_dir)
        if plain_tokens > 1:
            progress(f"{shape}: plain MLX reference ({plain_tokens} tokens, {plain_prompt}-token prompt)")
            short = prompt[:plain_prompt]
            mlx_amd.disable()
            try:
                ptoks, pttft, prest = llm.generate(model, short, plain_tokens)
            finally:
                mlx_amd.enable()
            b.row(f"decode {shape} bf16", decode, "tok/s", "plain MLX 0.32.4 CPU, same run",
                  (len(ptoks) - 1) / prest if len(ptoks) > 1 else None)
            b.row(f"prefill {shape} bf16 ({plain_prompt} vs {prompt_tokens} tokens)", prefill, "tok/s",
                  "plain MLX 0.32.4 CPU, same run", short.size / pttft)
            if out_dir:
                b.write(out_dir)
        del model


def chart(rows, path: str) -> bool:
    """A PNG bar chart of each row's value against its reference (matplotlib, when
    installed); False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:
        return False
    rows = [r for r in rows if r.get("reference_value")]
    fig, ax = plt.subplots(figsize=(9, 0.6 * len(rows) + 1.5))
    y = range(len(rows))
    ax.barh([i + 0.2 for i in y], [r["value"] for r in rows], height=0.4, label="mlx-amd")
    ax.barh([i - 0.2 for i in y], [r["reference_value"] for r in rows], height=0.4, label="reference")
    ax.set_yticks(list(y), [f"{r['name']}\n(vs {r['reference']})" for r in rows], fontsize=7)
    ax.set_xscale("log")   # references span orders of magnitude (bandwidth bound vs CPU)
    ax.set_xlabel(rows[0]["unit"] if rows else "")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
