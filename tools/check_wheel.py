#!/usr/bin/env python3
"""Check a built mlx-amd wheel: it carries the bridge, the kernel manifest and every kernel
file the manifest names (each with the manifest's sha256); print its size and targets.

    python tools/check_wheel.py dist/mlx_amd-*.whl
    python tools/check_wheel.py --targets gfx1100 dist/mlx_amd-*.whl   # exactly these targets
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import zipfile


def check(path: str, want=None) -> list:
    problems = []
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        if not any(n.startswith("mlx_amd/_bridge") and n.endswith(".so") for n in names):
            problems.append("no mlx_amd/_bridge*.so in the wheel")
        if "mlx_amd/kernels/manifest.json" not in names:
            return problems + ["no mlx_amd/kernels/manifest.json: the wheel carries no kernels"]
        man = json.loads(z.read("mlx_amd/kernels/manifest.json"))
        # (what, stored file, its manifest sha256) for every kernel file and helper library
        files = [(f"{t}/{fam}", e[role], e.get(sha))
                 for t, entry in sorted(man.get("targets", {}).items())
                 for fam, e in entry.get("families", {}).items()
                 for role, sha in (("file", "sha256"), ("ptx", "ptx_sha256")) if role in e]
        files += [(f"{t}/{name}", e["file"], e.get("sha256"))
                  for t, libs in sorted((man.get("libraries") or {}).items())
                  for name, e in libs.items() if "file" in e]   # none: did not compile at install
        kernels_bytes = 0
        for what, rel, sha in files:
            member = f"mlx_amd/kernels/{rel}"
            if member not in names:
                problems.append(f"{what}: {member} missing")
                continue
            data = z.read(member)
            kernels_bytes += len(data)
            if hashlib.sha256(data).hexdigest() != sha:
                problems.append(f"{what}: {member} does not match the manifest")
        targets = sorted(man.get("targets", {}))
        if want is not None and set(targets) != set(want):
            problems.append(f"kernel targets {targets}, expected {sorted(want)}")
    size = os.path.getsize(path)
    print(f"{os.path.basename(path)}: {size / 2**20:.1f} MiB, kernels {kernels_bytes / 2**20:.1f} MiB "
          f"(compressed) for {len(targets)} targets: {', '.join(targets)}")
    return problems


if __name__ == "__main__":
    args, want = sys.argv[1:], None
    if args[:1] == ["--targets"] and len(args) > 1:
        want, args = args[1].split(","), args[2:]
    bad = []
    for p in args:
        bad += check(p, want)
    for b in bad:
        print(f"check_wheel: {b}", file=sys.stderr)
    sys.exit(1 if bad or not args else 0)
