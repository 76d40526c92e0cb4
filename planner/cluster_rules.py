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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from planner import router_rules
from planner.capacity_rules import DISK_TYPE, NODE_POOL_TYPE, claim_zones, compute_classes, gce, groups, rungs
from planner.catalog import GIB, MIB
from planner.commands import flag_value
from planner.labels import ACCELERATOR_LABEL, GKE_NAMESPACES, ZONE_LABEL
from planner.router_rules import ObjectKey
from planner.scheduling_rules import (
    NodePool,
    PodTemplate,
    _where,
    headroom,
    misfit,
    node_pools,
    pod_templates,
    scheduling,
)
from planner.versions import IMAGE_SOURCES, unmirrored


@dataclass(frozen=True)
class Budget:
    """The planner's numbers the time-budget rule compares the objects with."""

    estimated_load_seconds: int
    """Weights read + engine start (+ Ray group start) per replica."""
    weights_bytes: float
    """Size of the weights the download Job transfers."""
    download_floor_mib_s: float
    """The slowest download rate the download Job's deadline must allow for."""


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


def check_all(objects: list[dict[str, Any]], pools: list[NodePool], budget: Budget,
              server_env: set[str] | frozenset[str] = frozenset(), own_images: Iterable[str] = (),
              gcp_resources: Iterable[tuple[str, str, dict[str, Any]]] = (),
              waits: Mapping[ObjectKey, set[ObjectKey]] | None = None) -> list[str]:
    """Every rule above over one stack's objects (and its GCP resources for the Compute Engine rules), and those of
    planner/router_rules.py (`waits`: what each object waits for, from the program's dependencies)."""
    gcp_resources = list(gcp_resources)
    return [*names(objects, server_env), *scheduling(objects, pools), *headroom(objects, pools),
            *compute_classes(objects, pools), *groups(objects), *rungs(objects, gcp_resources),
            *router_rules.selection(objects), *budgets(objects, budget),
            *images(objects, own_images), *runtime(objects), *gce(gcp_resources, objects),
            *router_rules.check(objects, waits)]


routing = router_rules.selection
"""The routing objects' selection rule (planner/router_rules.py selection), under the name the tests use."""

__all__ = ["ACCELERATOR_LABEL", "DISK_TYPE", "NODE_POOL_TYPE", "ZONE_LABEL", "Budget", "NodePool", "PodTemplate",
           "budgets", "check_all", "claim_zones", "compute_classes", "gce", "groups", "headroom", "images", "misfit",
           "names", "node_pools", "pod_templates", "routing", "rungs", "runtime", "scheduling",
           "service_link_variables"]
"""What the tests, tools/plan.py and the policy pack read from here; each rule lives in its module."""
