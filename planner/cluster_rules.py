"""What a real GKE cluster would refuse or break, checked on the rendered objects without a cluster.

Schema validation and Pulumi's mocks accept objects that a cluster's controllers, scheduler and kubelet
would not run as intended. Each rule here encodes one such class, with its source, and returns one line per
violation (an empty list when the objects pass):
- names:           no object the program creates collides with one a controller it relies on creates itself
                   (the LeaderWorkerSet controller's headless Services, GKE's own namespaces), and no Service
                   injects environment variables the server reads;
- scheduling:      every pod fits, by requests and limits, a node pool the stack declares (or the untainted pool the
                   README requires of an existing cluster), tolerates that pool's taints and matches its selectors;
- headroom:        placeholders never preempt, stand where a serving pod fits, hold what it needs, and a multi-node
                   spare slot stays in one zone and pool;
- compute classes: every rung of a ComputeClass fits the pod and is reached by the weights volume;
- groups:          a multi-node group on a ComputeClass stays in one zone and one pool;
- rungs:           each auto-created rule is sold its way, in the cluster's region, of the group's GPU count, Spot
                   only with the opt-in, a specific reservation in one zone;
- routing:         pool and picker select the leaders, references and ports resolve, one picker per prefix index;
- budgets:         startup probe >= join wait + load estimate; preStop + drain + Ray stop <= grace period; the
                   server's drain <= the launcher's; Job deadlines cover the transfer and the wait they exist for;
- images:          every image is pinned, and each third-party tag is recorded with a public listing;
- runtime:         non-root containers bind no privileged port and write only where they mount something;
- gce:             Compute Engine and GKE accept the GCP resources (boot disks, ways of buying, flex-start shape,
                   zonal reservations, per-zone starts, the control plane's minimum version);
- planner/router_rules.py: what Pulumi, the load balancer, RBAC, Envoy and the kubelet do with the routing objects.
Pure Python over plain dicts, importing facts only (planner/pods.py, labels, catalog, versions): no Pulumi import and
no component imports it, so tests, `bench/` and the policy pack can all use it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from planner import router_rules
from planner.catalog import ACCELERATORS, GIB, MIB, SYSTEM_MACHINE, gke_allocatable, machine_series
from planner.commands import flag_value
from planner.labels import (
    ACCELERATOR_LABEL,
    COMPUTE_CLASS_LABEL,
    GKE_NAMESPACES,
    GPU_TAINT_KEY,
    GPU_TAINT_VALUE,
    LWS_GROUP_KEY_LABEL,
    LWS_NAME_LABEL,
    LWS_WORKER_INDEX_LABEL,
    NODEPOOL_LABEL,
    SPOT_GROUPS_ANNOTATION,
    SPOT_LABEL,
    ZONE_LABEL,
)
from planner.pods import GCSFUSE_REQUESTS, PAGE_CACHE_LIMIT, injected_containers, quantity
from planner.router_rules import ObjectKey
from planner.versions import EPP_IMAGE, IMAGE_SOURCES, unmirrored

DAEMONSET_CPU, DAEMONSET_MEMORY_GIB = 0.5, 1.0
"""Room kept on every node for GKE's own DaemonSets (logging, metrics agent, PD CSI node, Dataplane V2, GPU
device plugin), on top of the allocatable formula. An allowance, not a published figure: their requests vary
by GKE version; 0.5 CPU / 1 GiB covers what kube-system DaemonSets request on current Standard nodes."""
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


@dataclass(frozen=True)
class Budget:
    """The planner's numbers the time-budget rule compares the objects with."""

    estimated_load_seconds: int
    """Weights read + engine start (+ Ray group start) per replica."""
    weights_bytes: float
    """Size of the weights the download Job transfers."""
    download_floor_mib_s: float
    """The slowest download rate the download Job's deadline must allow for."""


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


# ---------------------------------------------------------------------------------------------- names

def implicit_services(objects: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """(namespace, name) of the Services the LeaderWorkerSet controller creates for each LeaderWorkerSet: a headless
    Service named after it (subdomainPolicy Shared, the default), or one per replica `<name>-<i>` for
    UniquePerReplica (kubernetes-sigs/lws pkg/controllers, CreateHeadlessServiceIfNotExists; KEP-173). The
    replica count reaches as far as an HPA scaling the set may take it."""
    max_replicas: dict[tuple[str, str], int] = {}
    for obj in objects:
        if obj.get("kind") == "HorizontalPodAutoscaler":
            ref, ns = obj["spec"].get("scaleTargetRef") or {}, obj["metadata"].get("namespace", "")
            if ref.get("kind") == "LeaderWorkerSet":
                max_replicas[(ns, ref.get("name", ""))] = int(obj["spec"].get("maxReplicas", 1))
    found = set()
    for obj in objects:
        if obj.get("kind") != "LeaderWorkerSet":
            continue
        ns, name = obj["metadata"].get("namespace", ""), obj["metadata"].get("name", "")
        found.add((ns, name))
        policy = ((obj["spec"].get("networkConfig") or {}).get("subdomainPolicy")) or "Shared"
        if policy == "UniquePerReplica":
            replicas = max(int(obj["spec"].get("replicas", 1)), max_replicas.get((ns, name), 0))
            found |= {(ns, f"{name}-{i}") for i in range(replicas)}
    return found


def service_link_variables(service: dict[str, Any]) -> set[str]:
    """The variables Kubernetes injects into every pod of the namespace (enableServiceLinks defaults to true) for a
    Service with a cluster IP: NAME_SERVICE_HOST/_PORT[_PORTNAME] and the Docker-link NAME_PORT[_P_PROTO[_*]]."""
    spec = service.get("spec") or {}
    if spec.get("clusterIP") == "None":
        return set()
    base = re.sub(r"[^A-Z0-9]", "_", service["metadata"]["name"].upper())
    names = {f"{base}_SERVICE_HOST", f"{base}_SERVICE_PORT", f"{base}_PORT"}
    for port in spec.get("ports") or []:
        if port.get("name"):
            names.add(f"{base}_SERVICE_PORT_{re.sub(r'[^A-Z0-9]', '_', port['name'].upper())}")
        prefix = f"{base}_PORT_{port.get('port')}_{port.get('protocol', 'TCP')}"
        names |= {prefix, f"{prefix}_PROTO", f"{prefix}_PORT", f"{prefix}_ADDR"}
    return names


def names(objects: list[dict[str, Any]], server_env: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """No declared object collides with one a controller creates; no Service injects a variable in `server_env`."""
    problems = []
    implicit = implicit_services(objects)
    for obj in objects:
        meta = obj.get("metadata") or {}
        key = (meta.get("namespace", ""), meta.get("name", ""))
        if obj.get("kind") == "Service":
            if key in implicit:
                problems.append(f"names: Service {key[0]}/{key[1]} is also the headless Service the LeaderWorkerSet "
                                "controller creates for the LeaderWorkerSet of that name; rename it")
            clash = sorted(service_link_variables(obj) & set(server_env))
            if clash:
                problems.append(f"names: Service {key[0]}/{key[1]} injects {', '.join(clash)} into every pod of "
                                "its namespace, which the server reads; rename it")
        if obj.get("kind") == "Namespace" and key[1] in GKE_NAMESPACES:
            problems.append(f"names: Namespace {key[1]} is created and owned by Kubernetes or GKE; use another")
    return problems


# ---------------------------------------------------------------------------------------------- budgets


def _probe_budget(probe: dict[str, Any]) -> int:
    """Seconds a probe tolerates failure before kubelet acts (defaults: period 10, threshold 3)."""
    return int(probe.get("initialDelaySeconds", 0)) + \
        int(probe.get("periodSeconds", 10)) * int(probe.get("failureThreshold", 3))


def _is_launcher(command: list[str], role: str) -> bool:
    return len(command) > 2 and command[1].endswith("launcher.py") and command[2] == role


def budgets(objects: list[dict[str, Any]], budget: Budget) -> list[str]:
    """Startup, termination and Job time budgets are consistent with each other and with the planner."""
    problems = []
    leader_startup = 0
    for template in pod_templates(objects):
        grace = int(template.spec.get("terminationGracePeriodSeconds", 30))
        for container in template.spec.get("containers") or []:
            command = container.get("command") or []
            where = f"{template.where} container {container.get('name')}"
            if _is_launcher(command, "leader"):
                nodes = int(flag_value(command, "--group-size") or 1)
                wait = float(flag_value(command, "--wait-timeout") or 0) if nodes > 1 else 0
                need = wait + budget.estimated_load_seconds
                startup = _probe_budget(container.get("startupProbe") or {})
                leader_startup = max(leader_startup, startup)
                if startup < need:
                    problems.append(f"budgets: {where}: startup probe allows {startup} s, less than the join wait "
                                    f"({wait:g} s) + the load estimate ({budget.estimated_load_seconds} s)")
                drain = float(flag_value(command, "--drain-timeout") or 0)
                server_drain = float(flag_value(command, "--shutdown-timeout") or 0)
                if server_drain > drain:
                    problems.append(f"budgets: {where}: the server drains for up to {server_drain:g} s but the "
                                    f"launcher kills it after {drain:g} s (--drain-timeout)")
                stop = drain + float(flag_value(command, "--ray-stop-timeout") or 0)
                pre_stop = int(((container.get("lifecycle") or {}).get("preStop") or {}).get("sleep", {})
                               .get("seconds", 0))
                if pre_stop + stop > grace:
                    problems.append(f"budgets: {where}: preStop {pre_stop} s + drain and Ray stop {stop:g} s exceed "
                                    f"terminationGracePeriodSeconds {grace} (the grace period counts from preStop)")
    for obj in objects:
        if obj.get("kind") != "Job":
            continue
        deadline = int(obj["spec"].get("activeDeadlineSeconds", 0)) or math.inf
        containers = obj["spec"]["template"]["spec"].get("containers") or [{}]
        command = containers[0].get("command") or []
        if "--min-bytes" in command:  # the weights download
            need = budget.weights_bytes / MIB / budget.download_floor_mib_s
            if deadline < need:
                problems.append(f"budgets: {_where(obj)}: activeDeadlineSeconds {deadline} is shorter than "
                                f"{budget.weights_bytes / GIB:.1f} GiB at {budget.download_floor_mib_s:g} MiB/s "
                                f"({need:.0f} s)")
        wait = flag_value(command, "--timeout")
        if wait is not None and leader_startup:  # the smoke Job waits for the server
            if float(wait) < leader_startup:
                problems.append(f"budgets: {_where(obj)}: waits {wait} s for the server, less than the leader's "
                                f"startup budget ({leader_startup} s)")
            if deadline < float(wait):
                problems.append(f"budgets: {_where(obj)}: activeDeadlineSeconds {deadline} ends it before its own "
                                f"{wait} s wait")
    return problems


# ---------------------------------------------------------------------------------------------- images

def images(objects: list[dict[str, Any]], own: Iterable[str] = ()) -> list[str]:
    """Every image pinned (a digest, or a tag other than latest); every third-party tag listed in IMAGE_SOURCES,
    except `own` (a stack's own vllm.image: the user's choice, which only has to be pinned)."""
    problems, own = [], set(own)
    for template in pod_templates(objects):
        for container in [*(template.spec.get("initContainers") or []), *(template.spec.get("containers") or [])]:
            image = container.get("image", "")
            name, _, tag = image.rpartition(":") if "@" not in image else (image, "", "digest")
            if not name or "/" in tag or tag in ("", "latest"):
                problems.append(f"images: {template.where}: {image!r} is not pinned to a tag or digest")
            elif not {image, unmirrored(image)} & (set(IMAGE_SOURCES) | own):
                problems.append(f"images: {template.where}: {image} has no public listing recorded in "
                                "planner/versions.py IMAGE_SOURCES")
    return problems


# ---------------------------------------------------------------------------------------------- runtime

PATH_FLAGS = ("--cert-dir", "--temp-dir", "--download-dir")
"""Flags naming a directory the process writes to at start."""
WRITABLE_ENV = ("HOME", "HF_HOME", "XDG_CACHE_HOME", "VLLM_CACHE_ROOT", "TRITON_CACHE_DIR")


def _run_as_root(pod: dict[str, Any], container: dict[str, Any]) -> bool:
    user = (container.get("securityContext") or {}).get("runAsUser",
                                                         (pod.get("securityContext") or {}).get("runAsUser"))
    return user in (None, 0)


def runtime(objects: Iterable[dict[str, Any]]) -> list[str]:
    """A non-root container with every capability dropped binds no port below 1024 (no NET_BIND_SERVICE); a Python
    container under a UID with no passwd entry names its user (USER/LOGNAME); and a container with a read-only
    root writes only under its writable mounts: every directory named by a path flag or a cache/home variable
    lies under a mount that is not read-only."""
    problems = []
    for template in pod_templates(objects):
        for container in template.spec.get("containers") or []:
            where = f"{template.where} container {container.get('name')}"
            security = container.get("securityContext") or {}
            dropped = "ALL" in ((security.get("capabilities") or {}).get("drop") or [])
            added = (security.get("capabilities") or {}).get("add") or []
            if dropped and "NET_BIND_SERVICE" not in added and not _run_as_root(template.spec, container):
                for port in container.get("ports") or []:
                    if int(port.get("containerPort", 1024)) < 1024:
                        problems.append(f"runtime: {where}: binds port {port['containerPort']} as a non-root user "
                                        "without NET_BIND_SERVICE; use a port >= 1024")
            command = container.get("command") or []
            names = {e.get("name") for e in container.get("env") or []}
            if command[:1] and command[0].startswith("python") and not _run_as_root(template.spec, container) \
                    and not names & {"USER", "LOGNAME"}:
                problems.append(f"runtime: {where}: runs Python as a UID without a passwd entry and sets neither USER "
                                "nor LOGNAME; getpass.getuser() raises KeyError (torch 2.11 dies at import)")
            if not security.get("readOnlyRootFilesystem"):
                continue
            writable = [m["mountPath"].rstrip("/") for m in container.get("volumeMounts") or []
                        if not m.get("readOnly")]
            paths = [value for flag in PATH_FLAGS if (value := flag_value(container.get("command") or [], flag))]
            paths += [e["value"] for e in container.get("env") or [] if e.get("name") in WRITABLE_ENV and "value" in e]
            for path in paths:
                if not any(path == root or path.startswith(root + "/") for root in writable):
                    problems.append(f"runtime: {where}: writes to {path}, which is on the read-only root "
                                    "filesystem (no writable volume is mounted there)")
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


def claim_zones(objects: list[dict[str, Any]]) -> dict[tuple[str, str], tuple[str, ...] | None]:
    """(namespace, claim) -> zones its PersistentVolume's node affinity allows (None: no zone constraint)."""
    volumes: dict[str, tuple[str, ...] | None] = {}
    for obj in objects:
        if obj.get("kind") != "PersistentVolume":
            continue
        zones: list[str] | None = None
        required = (((obj.get("spec") or {}).get("nodeAffinity") or {}).get("required") or {})
        for term in required.get("nodeSelectorTerms") or []:
            for expression in term.get("matchExpressions") or []:
                if expression.get("key") == ZONE_LABEL and expression.get("operator") == "In":
                    zones = [*(zones or []), *expression.get("values", [])]
        volumes[obj["metadata"]["name"]] = None if zones is None else tuple(zones)
    return {(o["metadata"].get("namespace", ""), o["metadata"]["name"]): volumes.get(o["spec"].get("volumeName"))
            for o in objects if o.get("kind") == "PersistentVolumeClaim" and (o.get("spec") or {}).get("volumeName")}


def compute_classes(objects: list[dict[str, Any]], pools: list[NodePool]) -> list[str]:
    """A pod that selects a ComputeClass may land on any of its rungs, so it must fit every pool of the class (not
    just one, as `scheduling` asks), and every volume it mounts must reach every zone those pools have nodes in: a
    PersistentVolume's node affinity is a hard scheduling constraint, and a rung whose zone the weights volume does
    not cover leaves the pod Pending on a node GKE created for it."""
    problems = []
    claims = claim_zones(objects)
    for template in pod_templates(objects):
        klass = (template.spec.get("nodeSelector") or {}).get(COMPUTE_CLASS_LABEL)
        if klass is None:
            continue
        members = [pool for pool in pools if pool.labels.get(COMPUTE_CLASS_LABEL) == klass]
        if not members:
            problems.append(f"compute class: {template.where} selects ComputeClass {klass}, which no declared pool or "
                            "rule provides")
        injected = injected_containers(template.annotations)
        namespace = template.owner.get("metadata", {}).get("namespace", "")
        for pool in members:
            if why := misfit(template.spec, pool, injected):
                problems.append(f"compute class: {template.where} does not fit {pool.name}: {why}")
            for volume in template.spec.get("volumes") or []:
                claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
                zones = claims.get((namespace, claim)) if claim else None
                if zones is None:
                    continue
                outside = sorted(set(pool.zones or ()) - set(zones)) if pool.zones else []
                if outside:
                    problems.append(f"compute class: {template.where} mounts {claim}, whose volume reaches "
                                    f"{', '.join(zones)}, but {pool.name} has nodes in {', '.join(outside)}")
    return problems


GROUP_TOPOLOGY_KEYS = (ZONE_LABEL, NODEPOOL_LABEL)


def groups(objects: list[dict[str, Any]]) -> list[str]:
    """The pods of one multi-node LeaderWorkerSet group on a ComputeClass must share a zone and a node pool: the
    class offers several of each, and nothing else keeps a group's workers where its leader is. Each template
    needs a required pod-affinity term per topology key whose matchLabelKeys holds the LWS group key (the label
    the LWS controller sets per group; matchLabelKeys is GA in Kubernetes 1.33)."""
    problems = []
    for obj in objects:
        if obj.get("kind") != "LeaderWorkerSet":
            continue
        lwt = (obj.get("spec") or {}).get("leaderWorkerTemplate") or {}
        if int(lwt.get("size", 1)) < 2:
            continue
        for role in ("leaderTemplate", "workerTemplate"):
            spec = ((lwt.get(role) or {}).get("spec")) or {}
            if COMPUTE_CLASS_LABEL not in (spec.get("nodeSelector") or {}):
                continue
            terms = (((spec.get("affinity") or {}).get("podAffinity") or {})
                     .get("requiredDuringSchedulingIgnoredDuringExecution") or [])
            kept = {t.get("topologyKey") for t in terms if LWS_GROUP_KEY_LABEL in (t.get("matchLabelKeys") or [])}
            missing = [key for key in GROUP_TOPOLOGY_KEYS if key not in kept]
            if missing:
                problems.append(f"groups: {_where(obj)} {role}: a group of {lwt['size']} pods on a ComputeClass is "
                                f"not kept in one {' and one '.join(missing)} (required podAffinity with "
                                f"matchLabelKeys [{LWS_GROUP_KEY_LABEL}])")
    return problems


def _rule_buying(rule: dict[str, Any]) -> str:
    """A ComputeClass rule's way of buying, in accelerator.provisioning's words."""
    if (rule.get("flexStart") or {}).get("enabled"):
        return "flex-start"
    if rule.get("spot"):
        return "spot"
    if (rule.get("reservations") or {}).get("affinity") == "Specific":
        return "reservation"
    return "on-demand"


def rungs(objects: list[dict[str, Any]], resources: Iterable[tuple[str, str, dict[str, Any]]] = ()) -> list[str]:
    """What GKE would refuse or break in a ComputeClass's auto-created rules, by the catalog's facts:
    - each rule's machine series is sold its way (planner/catalog.py MACHINE_SERIES: Compute Engine "Consumption
      options"); GKE cannot create an on-demand A3 Ultra node, so the autoscaler skips the rule every time;
    - each rule's zones are in the region of the cluster's GPU pool (a node pool's zones are its cluster's region's);
    - a multi-node group takes every GPU of each rung's nodes (one pod per node: a rung with more or fewer GPUs per
      node cannot hold the group's pods as planned);
    - Spot rules for a multi-node group only with the stack's opt-in (SPOT_GROUPS_ANNOTATION): a Spot VM gets 30 s
      of notice (Compute Engine "Spot VMs"), less than a group's drain, and its loss restarts the whole group.
    Flex-start with Spot in one rule and a Specific reservation without a name are the CRD's own CEL rules
    (tools/crds.py evaluates them)."""
    problems = []
    regions = {str(inputs.get("location", "")) for token, _, inputs in resources
               if token == "gcp:container/nodePool:NodePool" and (inputs.get("nodeConfig") or {}).get(
                   "guestAccelerators")}
    regions = {"-".join(r.split("-")[:2]) for r in regions if r}
    group_gpus = {}
    for obj in objects:
        if obj.get("kind") == "LeaderWorkerSet":
            lwt = (obj.get("spec") or {}).get("leaderWorkerTemplate") or {}
            if int(lwt.get("size", 1)) > 1:
                spec = ((lwt.get("workerTemplate") or {}).get("spec")) or {}
                klass = (spec.get("nodeSelector") or {}).get(COMPUTE_CLASS_LABEL)
                if klass:
                    group_gpus[klass] = (int(lwt["size"]), int(sum(
                        quantity(((c.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu", 0))
                        for c in spec.get("containers") or [])), _where(obj))
    for obj in objects:
        if obj.get("kind") != "ComputeClass":
            continue
        name = obj["metadata"]["name"]
        opted = ((obj["metadata"].get("annotations") or {}).get(SPOT_GROUPS_ANNOTATION) == "true")
        for index, rule in enumerate((obj.get("spec") or {}).get("priorities") or []):
            if "machineType" not in rule:
                continue
            machine, where = rule["machineType"], f"rungs: ComputeClass {name} rule {index} ({rule['machineType']})"
            series, mode = machine_series(machine), _rule_buying(rule)
            if mode not in series.provisioning:
                problems.append(f"{where}: bought {mode}; {series.name} is sold only as "
                                f"{', '.join(series.provisioning)}")
            if mode == "reservation" and len((rule.get("location") or {}).get("zones") or []) != 1:
                problems.append(f"{where}: a specific reservation over zones "
                                f"{', '.join((rule.get('location') or {}).get('zones') or []) or '(all)'}; a "
                                "reservation is zonal: name its zone alone")
            outside = [z for z in (rule.get("location") or {}).get("zones") or []
                       if regions and not any(z.startswith(f"{r}-") for r in regions)]
            if outside:
                problems.append(f"{where}: zones {', '.join(outside)} are outside the cluster's region "
                                f"{', '.join(sorted(regions))}")
            if name in group_gpus:
                size, per_pod, lws = group_gpus[name]
                count = int((rule.get("gpu") or {}).get("count", _machine(machine)[2]))
                if count != per_pod:
                    problems.append(f"{where}: nodes of {count} GPUs, but each pod of {lws} (a group of {size}) "
                                    f"takes {per_pod}: the group's layout does not fit this rung")
                if mode == "spot" and not opted:
                    problems.append(f"{where}: Spot for {lws}, a group of {size} nodes, without the opt-in "
                                    f"(accelerator.spotMultiNode, annotation {SPOT_GROUPS_ANNOTATION})")
    return problems


def _leader_selectors(objects: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """namespace/LWS name -> the labels that select exactly that LeaderWorkerSet's leader pods."""
    return {f"{(o.get('metadata') or {}).get('namespace', '')}/{(o.get('metadata') or {}).get('name')}":
            {LWS_NAME_LABEL: (o.get("metadata") or {}).get("name", ""), LWS_WORKER_INDEX_LABEL: "0"}
            for o in objects if o.get("kind") == "LeaderWorkerSet"}


def _leader_ports(objects: list[dict[str, Any]], namespace: str, lws_name: str) -> set[Any]:
    """Port numbers and names of the leader container(s) of a LeaderWorkerSet (its leaderTemplate, or the
    workerTemplate of a one-pod group, whose only pod is the leader)."""
    found: set[Any] = set()
    for obj in objects:
        meta = obj.get("metadata") or {}
        if obj.get("kind") != "LeaderWorkerSet" or (meta.get("namespace", ""), meta.get("name")) != \
                (namespace, lws_name):
            continue
        lwt = (obj.get("spec") or {}).get("leaderWorkerTemplate") or {}
        leader = lwt.get("leaderTemplate") or lwt.get("workerTemplate") or {}
        for container in (leader.get("spec") or {}).get("containers") or []:
            for port in container.get("ports") or []:
                found |= {port.get("containerPort"), port.get("name")}
    return found - {None}


def routing(objects: list[dict[str, Any]]) -> list[str]:
    """Inference-aware routing objects (serving.routing epp / gke-gateway) point where they must:
    - an InferencePool and a standalone EPP (`--endpoint-selector`) select exactly a LeaderWorkerSet's leaders
      (`leaderworkerset.sigs.k8s.io/worker-index: "0"`): a multi-node group's workers run Ray, not the API, and a
      request sent there fails (llm-d/llm-d-router issue #220; KServe's multi-node LLMInferenceService selects
      leaders the same way); the pool's target port is a port of the leader container;
    - the pool's endpointPickerRef names a Service of this namespace with that port; HTTPRoute backends and the
      HealthCheckPolicy / GCPBackendPolicy targets name an InferencePool that exists (GKE ignores a policy whose
      target is missing, and the load balancer then health-checks `/`, where vLLM answers 404);
    - more than one EPP replica never runs the approximate prefix scorer (its index lives in each pod: llm-d's
      guidance is one active replica for it).
    Pure checks over the rendered objects; planner/routing.py has the sources of the values."""
    from planner import routing as rt

    problems: list[str] = []
    leaders = _leader_selectors(objects)
    pools = {(o["metadata"].get("namespace", ""), o["metadata"].get("name")): o for o in objects
             if o.get("kind") == "InferencePool"}
    services = {(o["metadata"].get("namespace", ""), o["metadata"].get("name")): o for o in objects
                if o.get("kind") == "Service"}
    for (ns, _name), pool in pools.items():
        spec = pool.get("spec") or {}
        selector = (spec.get("selector") or {}).get("matchLabels") or {}
        if selector not in leaders.values():
            problems.append(f"routing: {_where(pool)} selects {selector}, not the leaders of a LeaderWorkerSet "
                            f"({', '.join(str(v) for v in leaders.values()) or 'none rendered'})")
            continue
        ports = _leader_ports(objects, ns, selector[LWS_NAME_LABEL])
        for target in spec.get("targetPorts") or []:
            if target.get("number") not in ports:
                problems.append(f"routing: {_where(pool)} targets port {target.get('number')}, which the leader "
                                "container does not declare")
        ref = spec.get("endpointPickerRef") or {}
        service = services.get((ns, ref.get("name")))
        number = (ref.get("port") or {}).get("number")
        if service is None or number not in {p.get("port") for p in (service.get("spec") or {}).get("ports") or []}:
            problems.append(f"routing: {_where(pool)} endpointPickerRef {ref.get('name')}:{number} is no Service "
                            "port of its namespace")
    for obj in objects:
        kind, ns = obj.get("kind"), (obj.get("metadata") or {}).get("namespace", "")
        refs = []
        if kind == "HTTPRoute":
            refs = [b for rule in (obj.get("spec") or {}).get("rules") or [] for b in rule.get("backendRefs") or []
                    if b.get("kind") == "InferencePool"]
        elif kind in ("HealthCheckPolicy", "GCPBackendPolicy"):
            refs = [(obj.get("spec") or {}).get("targetRef") or {}]
        for ref in refs:
            if (ref.get("namespace", ns), ref.get("name")) not in pools:
                problems.append(f"routing: {_where(obj)} refers to InferencePool {ref.get('name')}, which is not "
                                "rendered")
    configs = {(o["metadata"].get("namespace", ""), o["metadata"].get("name")): o.get("data") or {}
               for o in objects if o.get("kind") == "ConfigMap"}
    for template in pod_templates(objects):
        owner = template.owner
        ns = (owner.get("metadata") or {}).get("namespace", "")
        for container in template.spec.get("containers") or []:
            if unmirrored(container.get("image", "")) != unmirrored(EPP_IMAGE):
                continue
            args = container.get("args") or []
            selector = rt.selector_flag(args)
            if selector is not None and selector not in leaders.values():
                problems.append(f"routing: {template.where} endpoint picker selects {selector}, not the leaders of "
                                "a LeaderWorkerSet")
            volumes = {v.get("name"): (v.get("configMap") or {}).get("name") for v in template.spec.get("volumes")
                       or []}
            mounted = [volumes.get(m.get("name")) for m in container.get("volumeMounts") or []
                       if m.get("mountPath") == "/config"]
            text = "".join((configs.get((ns, cm)) or {}).get(rt.CONFIG_FILE, "") for cm in mounted)
            replicas = int((owner.get("spec") or {}).get("replicas", 1))
            if replicas > 1 and "prefix-cache-scorer" in text:
                problems.append(f"routing: {template.where} runs {replicas} endpoint pickers with the approximate "
                                "prefix scorer, whose index is per pod")
    return problems


NODE_POOL_TYPE = "gcp:container/nodePool:NodePool"
DISK_TYPE = "gcp:compute/disk:Disk"


def buying(config: dict[str, Any]) -> str:
    """How a node pool's nodeConfig buys its VMs, in accelerator.provisioning's words."""
    if config.get("flexStart"):
        return "flex-start"
    if config.get("spot"):
        return "spot"
    if (config.get("reservationAffinity") or {}).get("consumeReservationType") == "SPECIFIC_RESERVATION":
        return "reservation"
    return "on-demand"


def gce(resources: Iterable[tuple[str, str, dict[str, Any]]], objects: Iterable[dict[str, Any]] = ()) -> list[str]:
    """What Compute Engine and GKE would refuse or waste of the GCP resources (type token, logical name, inputs), by
    the machine series facts in planner/catalog.py: each GPU pool's boot disk type and way of buying its VMs, a
    flex-start pool's required shape (starts empty, no auto-repair, no reservation, location policy ANY: GKE
    "About flex-start provisioning"), a serving weights disk the GPU machines can attach; a pool that pins a
    specific reservation in its one zone (a reservation is zonal: Compute Engine "Reservations of Compute Engine
    zonal resources"); a pool's start within its planned minimum (initialNodeCount is per zone: pulumi_gcp
    NodePool.initialNodeCount, GKE node_count "per zone"); and a created cluster's control plane at least the GKE
    version the in-cluster objects need (`objects`: a ComputeClass that auto-creates pools, GKE "About node pool
    auto-creation"; an InferencePool, planner/routing.py GATEWAY_MIN_MASTER)."""
    from planner import routing as rt
    from planner.compute_class import AUTO_CREATION_MIN_GKE

    problems: list[str] = []
    resources = list(resources)
    objects = list(objects)
    needs = [(AUTO_CREATION_MIN_GKE, "a ComputeClass that creates node pools") for o in objects
             if o.get("kind") == "ComputeClass" and ((o.get("spec") or {}).get("nodePoolAutoCreation") or {}).get(
                 "enabled")][:1]
    needs += [(rt.GATEWAY_MIN_MASTER, "the InferencePool API") for o in objects if o.get("kind") == "InferencePool"][:1]
    for type_token, name, inputs in resources:
        if type_token != "gcp:container/cluster:Cluster":
            continue
        have = rt.gke_version_key(str(inputs.get("minMasterVersion") or ""))
        for version, why in needs:
            if have is None or have < rt.gke_version_key(version):
                problems.append(f"gce: cluster {name}: minMasterVersion {inputs.get('minMasterVersion') or '(unset)'}"
                                f"; {why} needs GKE {version} or later")
    gpu_machines = []
    for type_token, name, inputs in resources:
        config = inputs.get("nodeConfig") or {}
        if type_token != NODE_POOL_TYPE or not config.get("guestAccelerators"):
            continue
        machine = config.get("machineType", "")
        series = machine_series(machine)
        gpu_machines.append((machine, series))
        boot = config.get("diskType", "pd-standard")
        if boot not in series.boot_disk_types:
            problems.append(f"gce: node pool {name}: boot disk {boot} on {machine}; {series.name} boots only from "
                            f"{', '.join(series.boot_disk_types)}")
        mode = buying(config)
        if mode not in series.provisioning:
            problems.append(f"gce: node pool {name}: {machine} bought {mode}; {series.name} is sold only as "
                            f"{', '.join(series.provisioning)}")
        zones = list(inputs.get("nodeLocations") or [])
        if mode == "reservation" and len(zones) != 1:
            problems.append(f"gce: node pool {name} pins a specific reservation over zones "
                            f"{', '.join(zones) or '(all)'}; a reservation is zonal, so the pool must be in the "
                            "reservation's zone alone")
        floor = (inputs.get("autoscaling") or {}).get("totalMinNodeCount")
        start = int(inputs.get("initialNodeCount") or 0) * max(len(zones), 1)
        if floor is not None and start > int(floor):
            problems.append(f"gce: node pool {name} starts {int(inputs.get('initialNodeCount') or 0)} node(s) in "
                            f"each of {max(len(zones), 1)} zone(s) = {start}, above its planned minimum of "
                            f"{int(floor)}: "
                            "initialNodeCount is per zone")
        if mode == "flex-start":
            autoscaling, management = inputs.get("autoscaling") or {}, inputs.get("management") or {}
            shape = {"initialNodeCount": inputs.get("initialNodeCount") == 0,
                     "autoscaling.totalMinNodeCount": autoscaling.get("totalMinNodeCount") == 0,
                     "autoscaling.locationPolicy": autoscaling.get("locationPolicy") == "ANY",
                     "management.autoRepair": management.get("autoRepair") is False,
                     "reservationAffinity": (config.get("reservationAffinity") or {}).get(
                         "consumeReservationType") == "NO_RESERVATION"}
            wrong = [key for key, ok in shape.items() if not ok]
            if wrong:
                problems.append(f"gce: node pool {name}: a flex-start pool needs {', '.join(wrong)} as GKE requires "
                                "(0 nodes at start and minimum, ANY, no auto-repair, NO_RESERVATION)")
    for type_token, name, inputs in resources:
        if type_token != DISK_TYPE or not name.endswith("-serving"):
            continue
        for machine, series in gpu_machines:
            if inputs.get("type") not in series.data_disk_types:
                problems.append(f"gce: disk {name}: {machine} ({series.name}) cannot attach {inputs.get('type')}; "
                                f"it attaches {', '.join(series.data_disk_types)}")
    return problems


def check_all(objects: list[dict[str, Any]], pools: list[NodePool], budget: Budget,
              server_env: set[str] | frozenset[str] = frozenset(), own_images: Iterable[str] = (),
              gcp_resources: Iterable[tuple[str, str, dict[str, Any]]] = (),
              waits: Mapping[ObjectKey, set[ObjectKey]] | None = None) -> list[str]:
    """Every rule above over one stack's objects (and its GCP resources for the Compute Engine rules), and those of
    planner/router_rules.py (`waits`: what each object waits for, from the program's dependencies)."""
    gcp_resources = list(gcp_resources)
    return [*names(objects, server_env), *scheduling(objects, pools), *headroom(objects, pools),
            *compute_classes(objects, pools), *groups(objects), *rungs(objects, gcp_resources), *routing(objects),
            *budgets(objects, budget),
            *images(objects, own_images), *runtime(objects), *gce(gcp_resources, objects),
            *router_rules.check(objects, waits)]
