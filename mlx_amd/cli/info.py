"""``mlx-amd info``: runtime versions, devices and whether this installation has kernels for them.

Uses only the driver package and the kernel manifest, never mlx: it must answer
quickly, and also on a machine where something else is broken.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

MANIFEST = Path(__file__).resolve().parents[1] / "kernels" / "manifest.json"

# LLVM's generic targets and the processors whose code objects they can replace.
GENERIC_TARGETS = {
    "gfx9-4-generic": ("gfx940", "gfx941", "gfx942", "gfx950"),
    "gfx10-3-generic": ("gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036"),
    "gfx11-generic": ("gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153"),
    "gfx12-generic": ("gfx1200", "gfx1201"),
}


def read_manifest(path: Path = MANIFEST) -> dict:
    """{"path", "found", "error", "targets": {target: {"families": n, "kernels": n}}}; never raises."""
    out = {"path": str(path), "found": False, "error": None, "targets": {}}
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        out["error"] = f"no kernel manifest at {path}: this installation carries no GPU kernels"
        return out
    except (OSError, ValueError) as e:
        out["error"] = f"unreadable kernel manifest {path}: {e}"
        return out
    targets = data.get("targets") if isinstance(data, dict) else None
    if not isinstance(targets, dict):
        out["error"] = f"kernel manifest {path} has no 'targets' table"
        return out
    out["found"] = True
    for target, entry in targets.items():
        fams = entry.get("families") if isinstance(entry, dict) else None
        fams = fams if isinstance(fams, dict) else {}
        kernels = sum(len(f.get("kernels") or ()) for f in fams.values() if isinstance(f, dict))
        out["targets"][str(target)] = {"families": len(fams), "kernels": kernels}
    return out


def coverage(manifest: dict, arch: str, features: Optional[dict] = None) -> dict:
    """Which manifest target serves a device: exact arch (features agreeing) first, then generic."""
    features = features or {}

    def serves(target: str) -> bool:
        base, *feats = target.split(":")
        for f in feats:          # "gfx90a:xnack-" only serves devices in that mode
            if f[:-1] in features and features[f[:-1]] != (f[-1] == "+"):
                return False
        return base == arch or arch in GENERIC_TARGETS.get(base, ())

    exact = [t for t in manifest["targets"] if t.split(":")[0] == arch and serves(t)]
    generic = [t for t in manifest["targets"] if t not in exact and serves(t)]
    for t in exact + generic:
        info = manifest["targets"][t]
        if info["families"]:
            return {"available": True, "target": t, **info}
    return {"available": False, "target": None, "families": 0, "kernels": 0}


def _version() -> str:
    try:
        from importlib.metadata import version
        return version("mlx-amd")
    except Exception:   # running from a source tree
        return getattr(sys.modules.get("mlx_amd"), "__version__", None) or "unknown"


def collect(manifest_path: Path = MANIFEST) -> dict:
    """Everything ``info`` shows, as JSON-able data. Never raises for a missing or broken GPU."""
    from mlx_amd.runtime.driver import DriverError, load, probe

    report = probe()
    manifest = read_manifest(manifest_path)
    out = {"mlx_amd_version": _version(), "driver": report["selected"], "runtime_version": None,
           "driver_version": None, "rocm_version": None, "library": None, "devices": [],
           "probe": report, "kernels": manifest}
    if report["selected"] is None:
        return out
    drv = load(report["selected"])
    rec = next(r for r in report["drivers"] if r["name"] == report["selected"])
    out.update(runtime_version=rec["runtime_version"], driver_version=rec["driver_version"],
               library=rec["library"])
    rocm = getattr(drv, "rocm_version", None)
    out["rocm_version"] = rocm() if callable(rocm) else None
    for i in range(rec["device_count"]):
        dev: dict = {"index": i}
        try:
            p = drv.properties(i)
            dev.update(p.as_dict())
            try:
                drv.set_device(i)
                dev["free_memory"], _ = drv.mem_info()
            except DriverError as e:
                dev["free_memory"], dev["memory_error"] = None, str(e)
            dev["kernels"] = coverage(manifest, p.arch, p.features)
            dev["matrix_units"] = matrix_units(p.arch)
        except DriverError as e:
            dev["error"] = str(e)
        out["devices"].append(dev)
    return out


def matrix_units(arch: str) -> dict:
    """{dtype: mlxa/mma.h backend or None} for the 16-bit dtypes on ``arch``."""
    from mlx_amd.runtime import kernel_table as kt

    return {dt: kt.matrix_tiles(arch, dt) for dt in ("float16", "bfloat16")}


def _gib(n) -> str:
    return "?" if n is None else f"{n / 2**30:.1f} GiB"


def render(info: dict) -> str:
    lines = [f"mlx-amd {info['mlx_amd_version']}"]
    rep = info["probe"]
    if info["driver"] is None:
        lines.append(f"No usable GPU found ({rep['error']}): MLX programs run on MLX's CPU backend.")
    for r in rep["drivers"]:
        mark = "selected" if r["name"] == info["driver"] else ("loaded" if r["loaded"] else "not loaded")
        lines.append(f"{r['name']} driver: {mark}" + (f" ({r['library']})" if r["library"] else ""))
        if r["name"] != info["driver"]:
            if r["error"]:
                lines.append(f"  {r['error']}")
            if not r["loaded"] and r["tried"]:
                lines.append("  looked in:")
                lines += [f"    {t}" for t in r["tried"]]
    if info["driver"] is not None:
        label = {"hip": "HIP", "cuda": "CUDA"}.get(info["driver"], info["driver"])
        lines.append(f"  {label} runtime {info['runtime_version']}, driver {info['driver_version']}"
                     + (f", ROCm {info['rocm_version']}" if info["rocm_version"] else ""))
        lines.append(f"Devices: {len(info['devices'])}")
    for d in info["devices"]:
        if "error" in d:
            lines.append(f"  [{d['index']}] error: {d['error']}")
            continue
        feats = ", ".join(f"{k}{'+' if v else '-'}" for k, v in d["features"].items()) or "none"
        lines.append(f"  [{d['index']}] {d['name']}: {d['arch']} ({d['arch_full']}), features: {feats}")
        lines.append(f"      wave size {d['wave_size']}, {d['compute_units']} CUs, memory "
                     f"{_gib(d['total_memory'])} ({_gib(d.get('free_memory'))} free), "
                     f"{'APU (integrated, shared memory)' if d['integrated'] else 'discrete'}, "
                     f"PCI {d['pci_bus_id'] or '?'}")
        k = d["kernels"]
        if k["available"]:
            lines.append(f"      kernels: yes, target {k['target']} ({k['families']} families, {k['kernels']} kernels)")
        else:
            lines.append(f"      kernels: NONE for {d['arch']} in this installation")
        mu = d.get("matrix_units") or {}
        have = {dt: be for dt, be in mu.items() if be}
        if have:
            names = sorted(set(have.values()))
            from mlx_amd.runtime import kernel_table as kt

            qmv = kt.table("quantized").QMV_MMA_BACKENDS
            uses = "attention" + (" and 2-8-row 4-bit matmuls" if any(be in qmv for be in names) else "")
            lines.append(f"      matrix units: {', '.join(names)} for {', '.join(have)} {uses} "
                         f"(checked against the portable kernels at first use)")
        else:
            lines.append("      matrix units: none used (portable kernels)")
    man = info["kernels"]
    if man["found"]:
        ts = ", ".join(f"{t} ({v['families']} families)" for t, v in sorted(man["targets"].items()))
        lines.append(f"Kernels in this installation: {ts or 'none'}")
    else:
        lines.append(f"Kernels in this installation: none ({man['error']})")
    return "\n".join(lines)


def run(as_json: bool = False, manifest: Optional[str] = None) -> int:
    info = collect(Path(manifest) if manifest else MANIFEST)
    print(json.dumps(info, indent=2, default=str) if as_json else render(info))
    # no GPU is a normal answer (0); a bad MLX_AMD_DRIVER value, where nothing was tried, is not
    return 1 if info["probe"]["error"] and not info["probe"]["drivers"] else 0

