"""vllm-gke's Pulumi component resources, one per file, each file named after its class."""

from __future__ import annotations

from typing import Any


def parent_depends_on(opts: Any) -> list[Any]:
    """The `depends_on` a component was created with, as a list. A component hands it on to the children that
    must wait for it, so the ordering is an explicit edge on each of them and does not rest on how an SDK
    version treats a parent's dependencies."""
    value = getattr(opts, "depends_on", None)
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]
