"""Family launchers: one module per kernel family, each with ``PRIMITIVES``, ``op_for``
and a pure ``plan(op, ins, out, device) -> Launch | None`` (see ``runtime/launch.py``)."""
