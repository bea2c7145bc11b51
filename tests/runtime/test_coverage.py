"""The coverage table is generated from the launchers' own tables and committed current."""

import os

import mlx_amd
from mlx_amd.runtime import coverage
from mlx_amd.runtime.evaluator import VIEW_PRIMITIVES
from mlx_amd.runtime.ops import dispatch_table

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                   "docs", "coverage.md")


def test_every_dispatched_primitive_is_listed_with_its_family():
    cov = mlx_amd.coverage()
    for prim, mod in dispatch_table().items():
        assert cov[prim]["path"] == "gpu" and cov[prim]["family"] == mod.FAMILY, prim
    views = {p for p, c in cov.items() if c["path"] == "view"}
    assert views == set(VIEW_PRIMITIVES) - set(dispatch_table())


def test_mlx_primitives_are_read_from_the_headers():
    names = coverage.mlx_primitives()
    assert {"Add", "Matmul", "Reduce", "Compiled", "fast::RMSNorm"} <= set(names)
    cov = mlx_amd.coverage()
    assert set(names) <= set(cov)


def test_committed_table_is_current():
    assert open(DOC).read() == coverage.markdown(), \
        "docs/coverage.md is stale: python -m mlx_amd.runtime.coverage > docs/coverage.md"
