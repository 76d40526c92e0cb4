"""Spare serving capacity (autoscaling.headroom): placeholder pods shaped like serving pods at a negative priority,
and a weights cache on every GPU node that keeps the weights disk mounted and in the page cache.

Why two objects: the placeholders hold the GPUs (the cluster autoscaler keeps a node for each, GKE "Provision extra
compute capacity for rapid Pod scaling"), and their image pull leaves the vLLM image on the node. The weights must
survive the handover too, but the placeholder is preempted: when the last pod using a volume on a node goes, kubelet
unmounts it (UnmountDevice) and the filesystem's page cache goes with the unmount. A small DaemonSet pod that is
never preempted keeps the mount, and the cache it filled, for the serving pod that replaces a placeholder."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components import parent_depends_on
from planner.catalog import MIB
from planner.commands import LAUNCHER_DIR
from planner.compute_class import GROUP_TOPOLOGIES
from planner.config import Stack
from planner.labels import COMPUTE_CLASS_LABEL
from planner.pods import PAGE_CACHE_LIMIT, injected_containers, quantity
from planner.security import PART_OF, PART_OF_LABEL, container_security_context, identity_env, pod_security_context
from planner.sizing import PLACEHOLDER_GRACE_SECONDS, Sizing

PRIORITY = -10
"""Below every pod's default 0: any serving pod preempts a placeholder; preemptionPolicy Never keeps placeholders
from ever preempting anything themselves (kube-scheduler DefaultPreemption only evicts lower-priority pods)."""
SLOT_LABEL = "vllm-gke/slot"
"""The spare slot a placeholder of a multi-node slot belongs to."""
CACHE_CPU, CACHE_MEMORY_MIB = "10m", 64
"""The weights cache pod's requests: it reads once, then sleeps."""
CACHE_MEMORY_MARGIN_GIB = 1
"""Above the node's share of the weights: the page cache a pod reads is charged to its memory cgroup, and a limit
below the weights would make the kernel drop what was just read."""


@dataclass(frozen=True)
class HeadroomArgs:
    """Inputs of Headroom."""

    namespace: pulumi.Input[str]
    """Namespace of the serving objects."""
    image: pulumi.Input[str]
    """The serving image (what the placeholders pull)."""
    placeholders: int
    """Placeholder pods: headroom x nodes per replica."""
    pod_shape: dict[str, Any]
    """The serving pod's resources, nodeSelector, tolerations and template annotations (RayVllmServer.pod_shape)."""
    launcher: pulumi.Input[str]
    """The launcher ConfigMap."""
    weights_claim: pulumi.Input[str]
    """Read-only PVC with the weights."""
    weights_mount: str
    """Where the weights volume is mounted (as in the serving pods)."""
    weights_gib_per_node: float
    """One node's share of the weights (what its page cache must hold)."""
    slot_nodes: int = 1
    """Nodes of one spare slot (a serving group's size): a multi-node slot on a ComputeClass is one Deployment whose
    placeholders stay in one zone and one node pool, where a group can use them."""

    @classmethod
    def from_plan(cls, stack: Stack, sizing: Sizing, namespace: pulumi.Input[str], image: pulumi.Input[str],
                  server: Any, weights_claim: pulumi.Input[str], weights_mount: str) -> HeadroomArgs:
        """`server`: the RayVllmServer whose pods the placeholders stand in for (its pod shape and launcher)."""
        return cls(namespace=namespace, image=image, placeholders=sizing.headroom_nodes, pod_shape=server.pod_shape,
                   launcher=server.launcher_name, weights_claim=weights_claim, weights_mount=weights_mount,
                   weights_gib_per_node=sizing.weights_gib / sizing.nodes_per_replica,
                   slot_nodes=sizing.nodes_per_replica)


def placeholder_resources(shape: dict[str, Any]) -> dict[str, Any]:
    """The serving pod's requests and limits plus what admission webhooks inject into it (the GCS FUSE sidecar):
    a node that held a placeholder has room for the serving pod once the placeholder is gone."""
    requests = dict(shape["resources"]["requests"])
    for container in injected_containers(shape.get("annotations") or {}):
        for resource, value in container["resources"]["requests"].items():
            total = quantity(requests.get(resource, 0)) + quantity(value)
            requests[resource] = f"{math.ceil(total * 1000)}m" if resource == "cpu" else f"{math.ceil(total / MIB)}Mi"
    limits = dict(shape["resources"]["limits"])
    limits["memory"] = requests["memory"]
    return {"requests": requests, "limits": limits}


class Headroom(pulumi.ComponentResource):
    """PriorityClass, placeholder Deployment and weights-cache DaemonSet of autoscaling.headroom."""

    priority_class: str

    def __init__(self, name: str, args: HeadroomArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("vllm-gke:serving:Headroom", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        depends = parent_depends_on(opts)
        labels = {"app.kubernetes.io/name": "vllm-headroom", "app.kubernetes.io/instance": name,
                  PART_OF_LABEL: PART_OF}
        self.priority_class = f"{name}-headroom"
        priority = k8s.scheduling.v1.PriorityClass(
            f"{name}-priority", metadata={"name": self.priority_class, "labels": labels}, value=PRIORITY,
            preemption_policy="Never", global_default=False,
            description="vllm-gke placeholders: spare serving capacity that any serving pod preempts", opts=child)
        shape = args.pod_shape
        launcher_volume = {"name": "launcher", "configMap": {"name": args.launcher, "defaultMode": 0o555}}
        tmp = {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}
        base_mounts = [{"name": "launcher", "mountPath": LAUNCHER_DIR, "readOnly": True},
                       {"name": "tmp", "mountPath": "/tmp"}]
        env = [*identity_env(), {"name": "HOME", "value": "/tmp/home"}, {"name": "PYTHONUNBUFFERED", "value": "1"}]

        def pod(role: str, container: dict[str, Any], volumes: list[dict[str, Any]], annotations: dict | None = None,
                **extra: Any) -> dict[str, Any]:
            meta: dict[str, Any] = {"labels": {**labels, "vllm-gke/role": role}}
            if annotations:
                meta["annotations"] = annotations
            return {"metadata": meta, "spec": {
                **extra, "automountServiceAccountToken": False, "enableServiceLinks": False,
                "terminationGracePeriodSeconds": PLACEHOLDER_GRACE_SECONDS,
                "nodeSelector": shape["nodeSelector"], "tolerations": shape["tolerations"],
                "securityContext": pod_security_context(fs_group=True), "containers": [container],
                "volumes": volumes}}

        holder = {"name": "placeholder", "image": args.image,
                  "command": ["python3", f"{LAUNCHER_DIR}/launcher.py", "placeholder"], "env": env,
                  "resources": placeholder_resources(shape), "volumeMounts": base_mounts,
                  "securityContext": container_security_context()}

        def placeholders(resource: str, object_name: str, replicas: int, slot: str | None) -> k8s.apps.v1.Deployment:
            selector = {**labels, "vllm-gke/role": "placeholder", **({SLOT_LABEL: slot} if slot else {})}
            extra: dict[str, Any] = {"priorityClassName": self.priority_class}
            if slot is not None:
                # A group's pods share a zone and a pool (compute_class.group_affinity); so do a slot's placeholders.
                # The slot's first pod matches only its own terms, which the scheduler accepts.
                extra["affinity"] = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": selector}, "topologyKey": key} for key in GROUP_TOPOLOGIES]}}
            template = pod("placeholder", holder, [launcher_volume, tmp], **extra)
            template["metadata"]["labels"] = selector
            return k8s.apps.v1.Deployment(
                resource, metadata={"name": object_name, "namespace": args.namespace, "labels": labels},
                spec={"replicas": replicas, "selector": {"matchLabels": selector},
                      # A preempted placeholder is replaced at once: pending, it asks the autoscaler for the next node.
                      "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%", "maxSurge": 0}},
                      "template": template},
                opts=pulumi.ResourceOptions(parent=self, depends_on=[priority, *depends]))

        grouped = args.slot_nodes > 1 and COMPUTE_CLASS_LABEL in (shape.get("nodeSelector") or {})
        if grouped:
            self.deployments = [placeholders(f"{name}-placeholders-{slot}", f"{name}-headroom-{slot}",
                                             args.slot_nodes, str(slot))
                                for slot in range(args.placeholders // args.slot_nodes)]
        else:
            self.deployments = [placeholders(f"{name}-placeholders", f"{name}-headroom", args.placeholders, None)]

        cache_limit = math.ceil(args.weights_gib_per_node + CACHE_MEMORY_MARGIN_GIB)
        reader = {"name": "weights-cache", "image": args.image,
                  "command": ["python3", f"{LAUNCHER_DIR}/launcher.py", "placeholder", "--read", args.weights_mount],
                  "env": env,
                  "resources": {"requests": {"cpu": CACHE_CPU, "memory": f"{CACHE_MEMORY_MIB}Mi"},
                                "limits": {"memory": f"{cache_limit}Gi"}},
                  "volumeMounts": [{"name": "weights", "mountPath": args.weights_mount, "readOnly": True},
                                   *base_mounts],
                  "securityContext": container_security_context()}
        weights = {"name": "weights", "persistentVolumeClaim": {"claimName": args.weights_claim, "readOnly": True}}
        cache_selector = {**labels, "vllm-gke/role": "weights-cache"}
        self.daemon_set = k8s.apps.v1.DaemonSet(
            f"{name}-weights-cache",
            metadata={"name": f"{name}-weights-cache", "namespace": args.namespace, "labels": labels},
            spec={"selector": {"matchLabels": cache_selector},
                  "template": pod("weights-cache", reader, [weights, launcher_volume, tmp],
                                  annotations={PAGE_CACHE_LIMIT: "true"})},
            opts=pulumi.ResourceOptions(parent=self, depends_on=depends))
        self.register_outputs({"placeholders": [d.metadata.name for d in self.deployments],
                               "weights_cache": self.daemon_set.metadata.name})

