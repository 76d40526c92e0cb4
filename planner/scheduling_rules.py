"""Where the rendered pods can run, checked without a cluster: the node pools a stack declares (and those its
ComputeClass would have GKE create) as the scheduler sees them, whether each pod template fits one (GKE's allocatable
formula, taints, selectors, webhook-injected sidecars), and whether headroom placeholders hold exactly what a
serving pod needs, where it needs it. Part of the cluster rules (planner/cluster_rules.py check_all)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from planner.catalog import ACCELERATORS, GIB, SYSTEM_MACHINE, gke_allocatable
from planner.labels import (
    ACCELERATOR_LABEL,
    COMPUTE_CLASS_LABEL,
    GPU_TAINT_KEY,
    GPU_TAINT_VALUE,
    NODEPOOL_LABEL,
    SPOT_LABEL,
    ZONE_LABEL,
)
from planner.pods import GCSFUSE_REQUESTS, PAGE_CACHE_LIMIT, injected_containers, quantity

DAEMONSET_CPU, DAEMONSET_MEMORY_GIB = 0.5, 1.0
"""Room kept on every node for GKE's own DaemonSets (logging, metrics agent, PD CSI node, Dataplane V2, GPU
device plugin), on top of the allocatable formula. An allowance, not a published figure: their requests vary
by GKE version; 0.5 CPU / 1 GiB covers what kube-system DaemonSets request on current Standard nodes."""
GROUP_TOPOLOGY_KEYS = (ZONE_LABEL, NODEPOOL_LABEL)
"""What a multi-node group (and a spare slot for one) must share on a ComputeClass: one zone and one node pool."""
EXISTING_CLUSTER_POOL = "untainted-pool (README: required of an existing cluster)"


@dataclass(frozen=True)
class NodePool:
    """What the scheduler sees of a node pool: one node's allocatable resources, labels and taints."""

    name: str
    cpu: float
    memory_gib: float
    gpus: int
    labels: dict[str, str]
    taints: tuple[tuple[str, str, str], ...] = ()
    """(key, value, effect) with Kubernetes' effect names (NoSchedule, NoExecute, PreferNoSchedule)."""
    zones: tuple[str, ...] | None = None
    """Zones the pool has nodes in; None = every zone of the cluster."""


@dataclass
class PodTemplate:
    """One pod template inside an object, with where it came from."""

    where: str
    spec: dict[str, Any]
    owner: dict[str, Any] = field(repr=False, default_factory=dict)
    annotations: dict[str, Any] = field(default_factory=dict)
    """The template's own annotations (what admission webhooks read, e.g. GCS FUSE's sidecar injection)."""


def _where(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{obj.get('kind')} {meta.get('namespace', '')}/{meta.get('name', '?')}".replace(" /", " ")


def pod_templates(objects: Iterable[dict[str, Any]]) -> Iterator[PodTemplate]:
    """Every pod template of Deployments, Jobs, Pods and LeaderWorkerSets (leader and worker templates)."""
    for obj in objects:
        kind, spec = obj.get("kind"), obj.get("spec") or {}
        if kind in ("Deployment", "Job", "StatefulSet", "DaemonSet"):
            template = spec.get("template") or {}
            yield PodTemplate(_where(obj), template.get("spec") or {}, obj, _annotations(template))
        elif kind == "Pod":
            yield PodTemplate(_where(obj), spec, obj, _annotations(obj))
        elif kind == "LeaderWorkerSet":
            lwt = spec.get("leaderWorkerTemplate") or {}
            for role in ("leaderTemplate", "workerTemplate"):
                if role in lwt:
                    template = lwt[role] or {}
                    yield PodTemplate(f"{_where(obj)} {role}", template.get("spec") or {}, obj, _annotations(template))


def _annotations(obj: dict[str, Any]) -> dict[str, Any]:
    return (obj.get("metadata") or {}).get("annotations") or {}


# ---------------------------------------------------------------------------------------------- node pools

def _machine(name: str) -> tuple[float, float, int]:
    """(vCPUs, memory GiB, GPUs) of a machine type the catalog knows."""
    if name == SYSTEM_MACHINE.name:
        return SYSTEM_MACHINE.vcpus, SYSTEM_MACHINE.memory_gib, 0
    for acc in ACCELERATORS.values():
        machine = acc.machine(name)
        if machine is not None:
            return machine.vcpus, machine.memory_gib, machine.gpus
    raise KeyError(f"machine type {name} is not in the catalog")


_EFFECTS = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute", "PREFER_NO_SCHEDULE": "PreferNoSchedule"}


def node_pools(resources: Iterable[tuple[str, str, dict[str, Any]]],
               objects: Iterable[dict[str, Any]] = ()) -> list[NodePool]:
    """The node pools a stack declares, from (type token, resource name, inputs) of its GCP resources, with the
    labels GKE adds by itself (gke-nodepool, gke-accelerator on GPU nodes, gke-spot on Spot nodes: GKE "About
    node labels"), and the pools a ComputeClass among `objects` would have GKE create (compute_class_pools).
    Without a created cluster, the untainted pool the README requires of an existing cluster stands in."""
    pools, created = compute_class_pools(objects), False
    for type_token, resource_name, inputs in resources:
        if type_token == "gcp:container/cluster:Cluster":
            created = True
        if type_token != "gcp:container/nodePool:NodePool":
            continue
        config = inputs.get("nodeConfig") or {}
        vcpus, memory, gpus = _machine(config.get("machineType", ""))
        cpu, mem = gke_allocatable(vcpus, memory)
        name = inputs.get("name") or resource_name
        labels = {**(config.get("labels") or {}), NODEPOOL_LABEL: name}
        for accelerator in config.get("guestAccelerators") or []:
            labels[ACCELERATOR_LABEL] = accelerator.get("type", "")
        if config.get("spot"):
            labels[SPOT_LABEL] = "true"
        taints = tuple((t.get("key", ""), t.get("value", ""), _EFFECTS.get(t.get("effect", ""), t.get("effect", "")))
                       for t in config.get("taints") or [])
        zones = tuple(inputs["nodeLocations"]) if inputs.get("nodeLocations") else None
        pools.append(NodePool(name, cpu, mem, gpus, labels, taints, zones))
    if not created:
        cpu, mem = gke_allocatable(SYSTEM_MACHINE.vcpus, SYSTEM_MACHINE.memory_gib)
        pools.append(NodePool(EXISTING_CLUSTER_POOL, cpu, mem, 0, {}))
    return pools


def _tolerates(tolerations: list[dict[str, Any]], taint: tuple[str, str, str]) -> bool:
    key, value, effect = taint
    for tol in tolerations:
        if tol.get("effect") and tol["effect"] != effect:
            continue
        if tol.get("operator") == "Exists":
            if not tol.get("key") or tol["key"] == key:
                return True
        elif tol.get("key") == key and tol.get("value", "") == value:
            return True
    return False


def misfit(pod: dict[str, Any], pool: NodePool, injected: list[dict[str, Any]] = ()) -> str | None:
    """Why `pod` (with the `injected` sidecars) cannot run on a node of `pool`, or None when it can."""
    for key, value in (pod.get("nodeSelector") or {}).items():
        if key == ZONE_LABEL:
            if pool.zones is not None and value not in pool.zones:
                return f"nodeSelector {key}={value} but the pool is in {', '.join(pool.zones)}"
        elif pool.labels.get(key) != value:
            return f"nodeSelector {key}={value} does not match the pool's labels"
    for taint in pool.taints:
        if taint[2] in ("NoSchedule", "NoExecute") and not _tolerates(pod.get("tolerations") or [], taint):
            return f"does not tolerate the taint {taint[0]}={taint[1]}:{taint[2]}"
    cpu = memory = limit_memory = 0.0
    gpus = 0
    for container in [*(pod.get("containers") or []), *injected]:
        resources = container.get("resources") or {}
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        cpu += quantity(requests.get("cpu", 0))
        memory += quantity(requests.get("memory", limits.get("memory", 0)))
        limit_memory += quantity(limits.get("memory", requests.get("memory", 0)))
        gpus += int(quantity(limits.get("nvidia.com/gpu", requests.get("nvidia.com/gpu", 0))))
    if gpus > pool.gpus:
        return f"asks for {gpus} GPU(s); a node has {pool.gpus}"
    per_node = pool.gpus // gpus if gpus else 1
    free_cpu, free_mem = pool.cpu - DAEMONSET_CPU, pool.memory_gib - DAEMONSET_MEMORY_GIB
    if cpu * per_node > free_cpu:
        return (f"{per_node} pod(s) per node x {cpu:g} CPU requested exceed the {free_cpu:.2f} CPU a node offers "
                f"after GKE's reservation and its DaemonSets")
    for what, amount in (("requested", memory), ("limited to", limit_memory)):
        if amount * per_node / GIB > free_mem:
            return (f"{per_node} pod(s) per node x {amount / GIB:.2f} GiB memory {what} exceed the {free_mem:.2f} GiB "
                    "a node offers after GKE's reservation and its DaemonSets")
    return None


def scheduling(objects: Iterable[dict[str, Any]], pools: list[NodePool]) -> list[str]:
    """Every pod template fits some declared node pool (GKE's allocatable formula, catalog.gke_allocatable)."""
    problems = []
    for template in pod_templates(objects):
        injected = injected_containers(template.annotations)
        missing = [key for key in GCSFUSE_REQUESTS.values() if injected and key not in template.annotations]
        if missing:
            problems.append(f"scheduling: {template.where} gets the GCS FUSE sidecar without {', '.join(missing)}: "
                            "its requests would be the driver's defaults, which this check cannot see")
        reasons = {pool.name: misfit(template.spec, pool, injected) for pool in pools}
        if all(reasons.values()):
            why = "; ".join(f"{name}: {reason}" for name, reason in reasons.items())
            problems.append(f"scheduling: {template.where} fits no node pool ({why})")
    return problems


def _requests(pod: dict[str, Any], injected: list[dict[str, Any]] = ()) -> dict[str, float]:
    """CPU, memory and GPUs a pod asks the scheduler for (requests, else limits), sidecars included."""
    total = {"cpu": 0.0, "memory": 0.0, "nvidia.com/gpu": 0.0}
    for container in [*(pod.get("containers") or []), *injected]:
        resources = container.get("resources") or {}
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        for key in total:
            total[key] += quantity(requests.get(key, limits.get(key, 0)))
    return total


def headroom(objects: list[dict[str, Any]], pools: list[NodePool]) -> list[str]:
    """Spare capacity works only if a serving pod always fits where a placeholder was: placeholders (pods of a
    negative PriorityClass) never preempt (preemptionPolicy Never), select and tolerate exactly what the serving
    pods do, and request at least what a serving pod and its injected sidecars request. kube-scheduler's
    DefaultPreemption then frees a placeholder's node for a serving pod (it evicts only lower-priority pods, and
    only where the preemptor fits once they are gone: kubernetes/kubernetes pkg/scheduler/framework/plugins/
    defaultpreemption). DaemonSet pods run beside the serving pod on every node they select, so serving pod plus
    DaemonSet pods must fit one node."""
    problems = []
    classes = {o["metadata"]["name"]: o for o in objects if o.get("kind") == "PriorityClass"}
    templates = list(pod_templates(objects))
    serving = [t for t in templates if t.owner.get("kind") == "LeaderWorkerSet"]
    for t in templates:
        klass = classes.get(t.spec.get("priorityClassName", ""))
        if klass is None or int(klass.get("value", 0)) >= 0:
            continue
        if klass.get("preemptionPolicy") != "Never":
            problems.append(f"headroom: PriorityClass {klass['metadata']['name']} of {t.where} may preempt other "
                            "pods; set preemptionPolicy: Never")
        held = _requests(t.spec)
        for s in serving:
            if t.owner["metadata"].get("namespace") != s.owner["metadata"].get("namespace"):
                continue
            for key in ("nodeSelector", "tolerations"):
                if (t.spec.get(key) or None) != (s.spec.get(key) or None):
                    problems.append(f"headroom: {t.where} has another {key} than {s.where}: it may hold a node the "
                                    "serving pod cannot use")
            need = _requests(s.spec, injected_containers(s.annotations))
            short = [k for k in need if need[k] > held[k] + 1e-9]
            if short:
                problems.append(f"headroom: {t.where} requests less {', '.join(short)} than {s.where} with its "
                                "sidecars: preempting it may not free enough for the serving pod")
            for pool in pools:
                if misfit(t.spec, pool) is None and (why := misfit(s.spec, pool, injected_containers(s.annotations))):
                    problems.append(f"headroom: {t.where} fits {pool.name} where {s.where} does not ({why})")
    for d in (t for t in templates if t.owner.get("kind") == "DaemonSet"):
        for s in serving:
            for pool in pools:
                if misfit(d.spec, pool) or misfit(s.spec, pool, injected_containers(s.annotations)):
                    continue
                beside = d.spec.get("containers") or []
                if d.annotations.get(PAGE_CACHE_LIMIT) == "true":
                    # its limit holds clean page cache, which the kernel reclaims before it kills anything: what
                    # the node must hold for it is its request
                    beside = [{**c, "resources": {"requests": (c.get("resources") or {}).get("requests") or {}}}
                              for c in beside]
                both = {"containers": [*(s.spec.get("containers") or []), *beside],
                        "nodeSelector": s.spec.get("nodeSelector"), "tolerations": s.spec.get("tolerations")}
                if why := misfit(both, pool, injected_containers(s.annotations)):
                    problems.append(f"headroom: {d.where} beside {s.where} on {pool.name}: {why}")
    return problems + _slots(templates, classes, serving)


def _slots(templates: list[PodTemplate], classes: dict[str, Any], serving: list[PodTemplate]) -> list[str]:
    """A spare slot for a multi-node group on a ComputeClass holds nodes a group can use together: one zone and one
    node pool, as the group's own pod affinity requires (groups). Each slot is one Deployment of group-size
    placeholders whose required pod affinity, per GROUP_TOPOLOGY_KEYS, selects that Deployment's pods alone."""
    sizes = [int(((s.owner.get("spec") or {}).get("leaderWorkerTemplate") or {}).get("size", 1)) for s in serving
             if COMPUTE_CLASS_LABEL in (s.spec.get("nodeSelector") or {})]
    size = max(sizes, default=1)
    if size < 2:
        return []
    holders = [t for t in templates if int((classes.get(t.spec.get("priorityClassName", "")) or {}).get("value", 0))
               < 0 and t.owner.get("kind") == "Deployment"]
    labels = {t.where: ((t.owner["spec"].get("template") or {}).get("metadata") or {}).get("labels") or {}
              for t in holders}
    problems = []
    for t in holders:
        replicas = int((t.owner.get("spec") or {}).get("replicas", 1))
        if replicas != size:
            problems.append(f"headroom: {t.where} holds {replicas} placeholder(s) for groups of {size} nodes: a "
                            "slot is one Deployment of a group's size, or its nodes are not kept together")
        terms = (((t.spec.get("affinity") or {}).get("podAffinity") or {})
                 .get("requiredDuringSchedulingIgnoredDuringExecution") or [])
        kept = set()
        for term in terms:
            wanted = (term.get("labelSelector") or {}).get("matchLabels") or {}
            own = all(labels[t.where].get(k) == v for k, v in wanted.items())
            others = [w for w, other in labels.items() if w != t.where and all(other.get(k) == v
                                                                                for k, v in wanted.items())]
            if own and not others:
                kept.add(term.get("topologyKey"))
        missing = [key for key in GROUP_TOPOLOGY_KEYS if key not in kept]
        if missing:
            problems.append(f"headroom: {t.where} stands in for groups of {size} on a ComputeClass but its "
                            f"placeholders are not kept in one {' and one '.join(missing)}: a spare slot's nodes "
                            "could land where no group can use them together")
    return problems


# ---------------------------------------------------------------------------------------------- compute classes

def compute_class_pools(objects: Iterable[dict[str, Any]]) -> list[NodePool]:
    """The node pools GKE would create for each auto-created rule of a ComputeClass: the rule's machine type with
    its GPUs, the class's node label and NoSchedule taint on every node (GKE "About custom ComputeClasses"), GKE's
    GPU taint, the Spot label on Spot rules, and the rule's zones."""
    pools = []
    for obj in objects:
        if obj.get("kind") != "ComputeClass":
            continue
        name = (obj.get("metadata") or {}).get("name", "")
        for index, rule in enumerate((obj.get("spec") or {}).get("priorities") or []):
            if "machineType" not in rule:
                continue
            vcpus, memory, gpus = _machine(rule["machineType"])
            cpu, mem = gke_allocatable(vcpus, memory)
            labels = {COMPUTE_CLASS_LABEL: name, NODEPOOL_LABEL: f"{name}-rule{index}"}
            taints = [(COMPUTE_CLASS_LABEL, name, "NoSchedule")]
            if rule.get("gpu"):
                labels[ACCELERATOR_LABEL] = rule["gpu"].get("type", "")
                gpus = int(rule["gpu"].get("count", gpus))
                taints.append((GPU_TAINT_KEY, GPU_TAINT_VALUE, "NoSchedule"))
            if rule.get("spot"):
                labels[SPOT_LABEL] = "true"
            zones = tuple((rule.get("location") or {}).get("zones") or ()) or None
            pools.append(NodePool(f"{name} rule {index} ({rule['machineType']})", cpu, mem, gpus, labels,
                                  tuple(taints), zones))
    return pools
