"""What every benchmark shares: timing through the engine, references measured in the same
run, and the results file schema.

    from harness import Bench
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
import statistics
import sys
import time

import mlx.core as mx

REPS = 20


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
    def __init__(self, name: str, reps: int = REPS):
        import mlx_amd
        from mlx_amd.runtime.context import get_runtime

        self.name, self.reps, self.rows = name, reps, []
        mlx_amd.enable()
        self.rt = get_runtime()
        self.drv = self.rt.driver
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

    def time_device(self, fn, warmup: int = 3) -> float:
        """Median ms of fn() between two device events on the default stream."""
        drv = self.drv
        e0, e1 = drv.event_create(), drv.event_create()
        for _ in range(warmup):
            fn()
        ts = []
        for _ in range(self.reps):
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

    def time_torch(self, fn, warmup: int = 3):
        """Median ms of a PyTorch CUDA callable with CUDA events, or None without torch."""
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

    def write(self, out_dir: str, device_tag: str = "h200") -> str:
        os.makedirs(out_dir, exist_ok=True)
        path = os.path.join(out_dir, f"{self.name}-{device_tag}.json")
        doc = {"benchmark": self.name, "device": self.props.name,
               "command": " ".join(["python"] + [os.path.relpath(sys.argv[0])] + sys.argv[1:]),
               "date": datetime.date.today().isoformat(), "rows": self.rows}
        with open(path, "w") as f:
            json.dump(doc, f, indent=1)
        return path
