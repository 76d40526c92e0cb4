"""The organisation's rules for what vllm-gke deploys, as plain functions over a resource's type token and
properties (no Pulumi imports): pack.py wraps them for `pulumi preview --policy-pack policy`, the tests
call them directly on the objects the program renders and on violating variants.

Each rule returns a list of violation messages; an empty list means compliant.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

GPU_RESOURCE = "nvidia.com/gpu"
GPU_TAINT_KEY = "nvidia.com/gpu"
ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
INTERNAL_LB_ANNOTATIONS = {"networking.gke.io/load-balancer-type": "Internal",
                           "cloud.google.com/load-balancer-type": "Internal"}
RAY_PORTS = {6379, 8076, 8077, 8265, 10001, 52365}
"""GCS, the node and object managers vllm-gke pins, dashboard, client server, dashboard agent."""
SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|CREDENTIAL|PRIVATE_?KEY)", re.IGNORECASE)
SECRET_VALUE = re.compile(
    r"^(hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,}|AKIA[0-9A-Z]{16}|-----BEGIN [A-Z ]*PRIVATE KEY)")
SECRET_FLAGS = ("--api-key", "--hf-token", "--token")

WORKLOADS = {
    "kubernetes:core/v1:Pod": ("spec",),
    "kubernetes:apps/v1:Deployment": ("spec", "template", "spec"),
    "kubernetes:apps/v1:StatefulSet": ("spec", "template", "spec"),
    "kubernetes:apps/v1:DaemonSet": ("spec", "template", "spec"),
    "kubernetes:apps/v1:ReplicaSet": ("spec", "template", "spec"),
    "kubernetes:batch/v1:Job": ("spec", "template", "spec"),
    "kubernetes:batch/v1:CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}
LWS_TYPE = "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet"
SERVICE_TYPE = "kubernetes:core/v1:Service"


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def pod_specs(resource_type: str, props: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(where, pod spec) for every pod template a workload resource carries."""
    if resource_type in WORKLOADS:
        spec = _get(props, *WORKLOADS[resource_type])
        if isinstance(spec, Mapping):
            yield ".".join(WORKLOADS[resource_type]), spec
    elif resource_type == LWS_TYPE:
        template = _get(props, "spec", "leaderWorkerTemplate") or {}
        for part in ("leaderTemplate", "workerTemplate"):
            spec = _get(template, part, "spec")
            if isinstance(spec, Mapping):
                yield f"spec.leaderWorkerTemplate.{part}.spec", spec


def _containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [c for key in ("initContainers", "containers") for c in (pod.get(key) or []) if isinstance(c, Mapping)]


def _gpus(container: Mapping[str, Any]) -> str | None:
    resources = container.get("resources") or {}
    return (resources.get("limits") or {}).get(GPU_RESOURCE) or (resources.get("requests") or {}).get(GPU_RESOURCE)


def _tolerates_gpu_taint(pod: Mapping[str, Any]) -> bool:
    for tol in pod.get("tolerations") or []:
        if tol.get("key") == GPU_TAINT_KEY and tol.get("effect") in (None, "", "NoSchedule") and (
                tol.get("operator") == "Exists" or tol.get("value") == "present"):
            return True
        if tol.get("operator") == "Exists" and not tol.get("key"):
            return True
    return False


def gpu_pods(resource_type: str, props: Mapping[str, Any], config: Mapping[str, Any] | None = None) -> list[str]:
    """Pods that select GPU nodes or ask for GPUs request nvidia.com/gpu in limits and tolerate the GPU taint."""
    out = []
    for where, pod in pod_specs(resource_type, props):
        selects = ACCELERATOR_LABEL in (pod.get("nodeSelector") or {})
        asking = [c.get("name", "?") for c in _containers(pod) if _gpus(c)]
        if not (selects or asking):
            continue
        if not _tolerates_gpu_taint(pod):
            out.append(f"{where}: runs on GPU nodes but does not tolerate the {GPU_TAINT_KEY}=present:NoSchedule taint")
        if selects and not asking:
            out.append(f"{where}: selects {ACCELERATOR_LABEL} nodes but no container requests {GPU_RESOURCE}")
        for c in _containers(pod):
            limits = (c.get("resources") or {}).get("limits") or {}
            if _gpus(c) and GPU_RESOURCE not in limits:
                out.append(f"{where}: container {c.get('name')!r} must set {GPU_RESOURCE} in resources.limits")
    return out


GATEWAY_TYPE = "kubernetes:gateway.networking.k8s.io/v1:Gateway"
EXTERNAL_GATEWAY_CLASSES = ("gke-l7-regional-external-managed", "gke-l7-global-external-managed", "gke-l7-gxlb",
                            "gke-l7-global-external-managed-mc", "gke-l7-gxlb-mc")
"""GKE GatewayClasses with an internet-facing address (GKE "GatewayClass capabilities")."""


def public_load_balancer(resource_type: str, props: Mapping[str, Any],
                         config: Mapping[str, Any] | None = None) -> list[str]:
    """A LoadBalancer Service is internal, and a Gateway uses an internal GKE class, unless the policy config sets
    allowPublicLoadBalancer."""
    if (config or {}).get("allowPublicLoadBalancer"):
        return []
    if resource_type == GATEWAY_TYPE:
        gateway_class = _get(props, "spec", "gatewayClassName")
        if gateway_class in EXTERNAL_GATEWAY_CLASSES:
            return [f"spec.gatewayClassName: {gateway_class} gives the model an internet-facing address; use "
                    "gke-l7-rilb or set allowPublicLoadBalancer in the policy config"]
        return []
    if resource_type != SERVICE_TYPE or _get(props, "spec", "type") != "LoadBalancer":
        return []
    annotations = _get(props, "metadata", "annotations") or {}
    if any(annotations.get(k) == v for k, v in INTERNAL_LB_ANNOTATIONS.items()):
        return []
    return ["spec.type: LoadBalancer without networking.gke.io/load-balancer-type: Internal exposes the model "
            "to the internet; use an internal load balancer or set allowPublicLoadBalancer in the policy config"]


def _image_pinned(image: str) -> bool:
    if "@sha256:" in image:
        return True
    last = image.rsplit("/", 1)[-1]
    return ":" in last and last.rsplit(":", 1)[1] not in ("", "latest")


def pinned_images(resource_type: str, props: Mapping[str, Any], config: Mapping[str, Any] | None = None) -> list[str]:
    """Every container image names a tag other than latest, or a digest."""
    return [f"{where}: container {c.get('name')!r} image {c.get('image')!r} is not pinned (give a version tag "
            "or @sha256 digest, never latest)"
            for where, pod in pod_specs(resource_type, props) for c in _containers(pod)
            if not _image_pinned(str(c.get("image") or ""))]


def ray_ports_in_services(resource_type: str, props: Mapping[str, Any],
                          config: Mapping[str, Any] | None = None) -> list[str]:
    """Ray's ports execute arbitrary code for whoever reaches them: never behind a Service."""
    if resource_type != SERVICE_TYPE:
        return []
    out = []
    for port in _get(props, "spec", "ports") or []:
        values = {port.get("port"), port.get("targetPort")}
        names = [str(v) for v in (port.get("name"), port.get("targetPort")) if isinstance(v, str)]
        if values & RAY_PORTS or any(n.startswith("ray") for n in names):
            out.append(f"spec.ports: {port.get('name') or port.get('port')!r} exposes a Ray port "
                       f"({port.get('port')} -> {port.get('targetPort')}); only the API port may be in a Service")
    return out


def plain_secrets(resource_type: str, props: Mapping[str, Any], config: Mapping[str, Any] | None = None) -> list[str]:
    """Secrets reach containers through secretKeyRef, never as literal env values or command-line flags."""
    out = []
    for where, pod in pod_specs(resource_type, props):
        for c in _containers(pod):
            name = c.get("name")
            for env in c.get("env") or []:
                value = env.get("value")
                if value and (SECRET_NAME.search(str(env.get("name", ""))) or SECRET_VALUE.match(str(value))):
                    out.append(f"{where}: container {name!r} env {env.get('name')!r} holds a literal secret; "
                               "use valueFrom.secretKeyRef")
            args = [str(a) for a in [*(c.get("command") or []), *(c.get("args") or [])]]
            for i, arg in enumerate(args):
                flag = arg.split("=", 1)[0]
                if flag in SECRET_FLAGS and ("=" in arg or i + 1 < len(args)):
                    out.append(f"{where}: container {name!r} passes {flag} on the command line; "
                               "read it from a Secret-backed env var")
    return out


def weights_read_only(resource_type: str, props: Mapping[str, Any],
                      config: Mapping[str, Any] | None = None) -> list[str]:
    """Serving pods mount the shared weights claim read-only (volume and every mount of it)."""
    if resource_type != LWS_TYPE:
        return []
    out = []
    for where, pod in pod_specs(resource_type, props):
        claims = {v.get("name"): v for v in pod.get("volumes") or [] if v.get("persistentVolumeClaim")}
        for name, volume in claims.items():
            if not volume["persistentVolumeClaim"].get("readOnly"):
                out.append(f"{where}: volume {name!r} mounts claim "
                           f"{volume['persistentVolumeClaim'].get('claimName')!r} writable; set readOnly: true")
        for c in _containers(pod):
            for mount in c.get("volumeMounts") or []:
                if mount.get("name") in claims and not mount.get("readOnly"):
                    out.append(f"{where}: container {c.get('name')!r} mounts {mount.get('name')!r} at "
                               f"{mount.get('mountPath')} writable; set readOnly: true")
    return out


RULES = {
    "gpu-pods-tolerate-taint-and-request-gpus": gpu_pods,
    "no-public-load-balancer": public_load_balancer,
    "images-pinned": pinned_images,
    "no-ray-ports-in-services": ray_ports_in_services,
    "no-secrets-in-plain-env": plain_secrets,
    "weights-volumes-read-only": weights_read_only,
}
