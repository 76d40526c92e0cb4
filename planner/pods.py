"""Kubernetes pod facts that the builders (components/) and the checks (planner/cluster_rules.py) both read: what an
admission webhook adds to a pod, how a quantity reads, what a page-cache memory limit is marked with. Facts only: no
check and no builder lives here."""

from __future__ import annotations

import re
from typing import Any

GCSFUSE_VOLUMES = "gke-gcsfuse/volumes"
GCSFUSE_REQUESTS = {"cpu": "gke-gcsfuse/cpu-request", "memory": "gke-gcsfuse/memory-request"}
"""The Cloud Storage FUSE CSI driver's webhook injects a sidecar into pods annotated `gke-gcsfuse/volumes: "true"`,
with the requests these annotations set (GoogleCloudPlatform/gcs-fuse-csi-driver, pkg/webhook)."""


def injected_containers(annotations: dict[str, Any]) -> list[dict[str, Any]]:
    """Containers an admission webhook adds to a pod with these annotations, as the scheduler will see them."""
    if str(annotations.get(GCSFUSE_VOLUMES, "")).lower() != "true":
        return []
    requests = {resource: annotations[key] for resource, key in GCSFUSE_REQUESTS.items() if key in annotations}
    return [{"name": "gke-gcsfuse-sidecar", "resources": {"requests": requests}}]


_SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "m": 1e-3}


def quantity(value: Any) -> float:
    """A Kubernetes quantity ("250m", "8Gi", "4", 2) as a plain number (bytes for memory, cores for CPU)."""
    text = str(value).strip()
    match = re.fullmatch(r"([0-9.]+)([a-zA-Z]*)", text)
    if not match or (match.group(2) and match.group(2) not in _SUFFIXES):
        raise ValueError(f"not a Kubernetes quantity: {value!r}")
    return float(match.group(1)) * _SUFFIXES.get(match.group(2), 1)


PAGE_CACHE_LIMIT = "vllm-gke/memory-limit-is-page-cache"
"""Annotation of a pod template whose memory limit is there for page cache it reads (charged to its cgroup,
Linux memory cgroup accounting) rather than for memory it allocates."""
