"""What GKE and Compute Engine would refuse or waste in a stack's GPU capacity, checked without a cluster: the
ComputeClass rungs (sold that way, in the region, of the group's GPU count, Spot only with the opt-in, a specific
reservation in one zone), the weights volume reaching every rung, a multi-node group kept in one zone and pool, and
the GCP resources themselves (boot disks, ways of buying, flex-start shape, zonal reservations, per-zone starts, the
control plane's minimum version). Part of the cluster rules (planner/cluster_rules.py check_all)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from planner.catalog import machine_series
from planner.labels import (
    COMPUTE_CLASS_LABEL,
    LWS_GROUP_KEY_LABEL,
    SPOT_GROUPS_ANNOTATION,
    ZONE_LABEL,
)
from planner.pods import injected_containers, quantity
from planner.scheduling_rules import GROUP_TOPOLOGY_KEYS, NodePool, _machine, _where, misfit, pod_templates


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
