"""The ComputeClass of a stack whose GPUs may come from several zones, ways of buying or machine types (issue 32).

GKE's cluster autoscaler walks a custom ComputeClass's `priorities` in order and moves to the next rule at once on a
stockout or quota error (GKE "About custom ComputeClasses", "Consumption options"). Rule 0 is the Pulumi-managed
node pool (the home of a named reservation or of compact placement); every further rung of the stack
(planner/config.py Rung) is an auto-created rule, in the configured order. `whenUnsatisfiable: DoNotScaleUp` keeps
the autoscaler from creating nodes outside the class, and active migration stays off: moving a pod to a better rule
evicts it, and an eviction restarts a whole LeaderWorkerSet group.

Pure Python over plain dicts (no Pulumi import): the component, `make plan`, the cluster rules and the stockout
simulator (tests/unit/test_stockout.py) all read the same objects from here.
"""

from __future__ import annotations

import hashlib
from typing import Any

from planner.catalog import machine_series
from planner.config import AcceleratorSettings, Rung
from planner.labels import COMPUTE_CLASS_LABEL, LWS_GROUP_KEY_LABEL, LWS_NAME_LABEL, NODEPOOL_LABEL, ZONE_LABEL

COMPUTE_CLASS_API = "cloud.google.com/v1"
AUTO_CREATION_MIN_GKE = "1.33.3-gke.1136000"
"""nodePoolAutoCreation in a ComputeClass without cluster-wide node auto-provisioning (GKE "About node pool
auto-creation")."""
FLEX_START_MIN_GKE = "1.32.2-gke.1652000"
"""Flex-start VMs for GPUs in auto-created pools (GKE "About flex-start provisioning")."""
FLEX_START_MAX_SECONDS = 7 * 24 * 3600
"""A flex-start node runs at most seven days; the CRD caps nodeRecycling.leadTimeSeconds there too."""
DRIVER_VERSIONS = {"LATEST": "latest", "DEFAULT": "default"}
"""accelerator.driverVersion in a rule's gpu.driverVersion (the CRD's enum: default, latest)."""


def auto_creates(accelerator: AcceleratorSettings) -> bool:
    """The stack's ComputeClass has GKE create node pools (rules past the Pulumi-managed pool's)."""
    return accelerator.compute_class and len(accelerator.rungs) > 1


def min_master_version(settings: Any) -> str | None:
    """The oldest GKE control plane a created cluster may run for this stack (its min_master_version), or None:
    node-pool auto-creation from a ComputeClass (AUTO_CREATION_MIN_GKE) and GKE Inference Gateway's InferencePool CRD
    (routing.GATEWAY_MIN_MASTER), the later of those the stack uses."""
    from planner import routing

    needed = ([AUTO_CREATION_MIN_GKE] if auto_creates(settings.accelerator) else []) + \
        ([routing.GATEWAY_MIN_MASTER] if settings.serving.routing == routing.GATEWAY else [])
    return max(needed, key=routing.gke_version_key) if needed else None


def class_name(stack: str) -> str:
    """The stack's ComputeClass (cluster-scoped, so one per stack): `vllm-gpu-<8 hex of project/stack>`. GKE
    refuses names that start with gke or autopilot."""
    return f"vllm-gpu-{hashlib.sha256(stack.encode()).hexdigest()[:8]}"


def rule(rung: Rung, gpus: int, driver_version: str, lead_seconds: int = 0) -> dict[str, Any]:
    """One auto-created rule: the machine type with its GPUs, the rung's zones and its way of buying."""
    body: dict[str, Any] = {
        "machineType": rung.machine_type,
        "gpu": {"type": rung.type, "count": gpus, "driverVersion": DRIVER_VERSIONS[driver_version]},
        "location": {"zones": list(rung.zones)},
        "storage": {"bootDiskType": machine_series(rung.machine_type).boot_disk_types[0]},
    }
    if rung.provisioning == "spot":
        body["spot"] = True
    elif rung.provisioning == "flex-start":
        body["flexStart"] = {"enabled": True}
        if lead_seconds:
            # The autoscaler looks for a replacement this long before the node's seven days end: a new replica is
            # serving by then (the worst rung's cold time to ready).
            body["flexStart"]["nodeRecycling"] = {"leadTimeSeconds": min(lead_seconds, FLEX_START_MAX_SECONDS)}
    elif rung.provisioning == "reservation":
        body["reservations"] = {"affinity": "Specific", "specific": [{"name": rung.reservation}]}
    return body


def spec(accelerator: AcceleratorSettings, pool_name: Any, lead_seconds: int = 0) -> dict[str, Any]:
    """The ComputeClass spec: the Pulumi-managed pool first, then every other rung in order."""
    rules: list[dict[str, Any]] = [{"nodepools": [pool_name]}]
    rules += [rule(rung, accelerator.gpus_per_node, accelerator.driver_version, lead_seconds)
              for rung in accelerator.rungs[1:]]
    return {"priorities": rules, "nodePoolAutoCreation": {"enabled": auto_creates(accelerator)},
            "whenUnsatisfiable": "DoNotScaleUp", "activeMigration": {"optimizeRulePriority": False}}


def node_selector(name: str) -> dict[str, str]:
    return {COMPUTE_CLASS_LABEL: name}


def toleration(name: str) -> dict[str, str]:
    return {"key": COMPUTE_CLASS_LABEL, "operator": "Equal", "value": name, "effect": "NoSchedule"}


def pool_taint(name: str) -> tuple[str, str, str]:
    """(key, value, effect) the Pulumi-managed pool carries to join the class."""
    return COMPUTE_CLASS_LABEL, name, "NoSchedule"


GROUP_TOPOLOGIES = (ZONE_LABEL, NODEPOOL_LABEL)
"""A multi-node group stays in one zone (Ray and NCCL across zones is slow and billed) and one node pool (one
machine type, one way of buying: the rungs' pools differ)."""


def group_affinity(lws_name: str) -> dict[str, Any]:
    """Required pod affinity that keeps the pods of one LeaderWorkerSet group in one zone and one pool: each term
    selects this LeaderWorkerSet's pods and, through matchLabelKeys (GA in Kubernetes 1.33), only those of the pod's
    own group. The key may not also be in labelSelector (the API server refuses "exists in both matchLabelKeys and
    labelSelector"). The group's first pod matches no running pod but its own terms, which the scheduler accepts."""
    terms = [{"labelSelector": {"matchLabels": {LWS_NAME_LABEL: lws_name}}, "matchLabelKeys": [LWS_GROUP_KEY_LABEL],
              "topologyKey": key} for key in GROUP_TOPOLOGIES]
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": terms}}
