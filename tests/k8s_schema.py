"""Validate Kubernetes objects against the upstream JSON schemas (kubernetes-validate, strict)."""

from __future__ import annotations

import functools
from typing import Any

import kubernetes_validate
import kubernetes_validate.utils

from tools import crds

# kubernetes_validate reads and parses the schema files (one per kind, and the 1.5 MB _definitions.json) on every
# validate(); the files do not change while the tests run, so each is read once. Validation itself is the library's.
kubernetes_validate.utils.schema_contents = functools.cache(kubernetes_validate.utils.schema_contents)

K8S_VERSION = "1.35.0"
"""A current GKE minor (REGULAR channel, 2026-11)."""

CRD_POD_TEMPLATES = {
    "LeaderWorkerSet": lambda o: [o["spec"]["leaderWorkerTemplate"].get("leaderTemplate"),
                                  o["spec"]["leaderWorkerTemplate"]["workerTemplate"]],
}
CRD_KINDS = {"LeaderWorkerSet", "PodMonitoring", "ClusterPodMonitoring"}


def validate_object(obj: dict[str, Any]) -> None:
    """Raise kubernetes_validate.ValidationError when obj (or a CRD's pod templates) is invalid; a custom resource
    with a vendored upstream schema (tools/crds.py) raises AssertionError with its schema and CEL problems."""
    kind = obj["kind"]
    if (obj.get("apiVersion"), kind) in crds.checked_kinds():
        problems = crds.problems(obj)
        assert not problems, problems
        return
    if kind in CRD_KINDS:
        for template in CRD_POD_TEMPLATES.get(kind, lambda o: [])(obj):
            if template is not None:
                kubernetes_validate.validate(
                    {"apiVersion": "v1", "kind": "PodTemplate",
                     "metadata": {"name": obj["metadata"]["name"], "namespace": obj["metadata"].get("namespace")},
                     "template": template}, K8S_VERSION, strict=True)
        return
    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
