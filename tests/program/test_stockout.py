"""The stockout simulator (issue 32): random GPU availability per zone, machine and way of buying, walked the way
GKE's cluster autoscaler walks the rendered ComputeClass, with the rendered pods scheduled as kube-scheduler would.

The model, from GKE "About custom ComputeClasses" and the Kubernetes scheduler: a pending pod first binds to an
existing node it fits (nodeSelector, taints, requests, GPUs left, required pod affinity); otherwise the autoscaler
tries the class's priorities in order and, within a rule, its zones in any order (location policy ANY), and creates a
node in the first (rule, zone) that has capacity and where the pod's nodeSelector, taints, requests and affinity
would hold; with none, nothing is created (whenUnsatisfiable: DoNotScaleUp) and the pod stays Pending. The
autoscaler does not consult the weights volume's zones here, so the check that it reaches the node is a real one.

Whenever a node results: the serving pod fits it, the weights PV reaches its zone, and every pod of the group is in
one zone and one pool. The same walk without the group affinity is shown to break the last property.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, find, given, settings

from planner import cluster_rules as rules
from planner.labels import COMPUTE_CLASS_LABEL, LWS_GROUP_KEY_LABEL, LWS_NAME_LABEL, NODEPOOL_LABEL, ZONE_LABEL
from tests.helpers import full_config
from tools.mocks import run_program

ZONES = ["us-central1-a", "us-central1-b", "us-central1-c"]
STACKS = {
    # one-node replicas: H100 reservation, on-demand, flex-start in three zones, H200 flex-start fallback
    "multizone": lambda: full_config("multizone"),
    # two-node replicas (Llama-3.1-405B, TP=8 x PP=2) on A3 Mega in three zones, Spot allowed, H200 fallback
    "groups": lambda: full_config("prod", accelerator={
        "type": "nvidia-h100-mega-80gb", "zones": ZONES, "provisioning": ["on-demand", "flex-start", "spot"],
        "spotMultiNode": True, "fallbacks": [{"type": "nvidia-h200-141gb", "provisioning": ["flex-start"]}]}),
}


@dataclass
class Stack:
    rules: list[tuple[int, rules.NodePool, tuple[str, ...]]]
    """(priority, the pool a node of it belongs to, its zones) in the class's order."""
    pods: list[dict[str, Any]]
    """One group's pod specs, leader first, each with the labels the LWS controller gives it under "labels"."""
    weights_zones: dict[str, tuple[str, ...]]
    """claim -> zones its PersistentVolume reaches."""


@dataclass
class Node:
    pool: rules.NodePool
    zone: str
    priority: int
    gpus_free: int
    pods: list[dict[str, Any]] = field(default_factory=list)

    @property
    def labels(self) -> dict[str, str]:
        return {**self.pool.labels, ZONE_LABEL: self.zone}


@cache
def rendered(name: str) -> tuple[list[dict[str, Any]], list[tuple[str, str, dict[str, Any]]]]:
    rec = run_program(STACKS[name]())
    return rec.kubernetes_objects(), rec.rule_inputs()


def stack(name: str, without_affinity: bool = False) -> Stack:
    objects, resources = rendered(name)
    objects = copy.deepcopy(objects)
    pools = rules.node_pools(resources, objects)
    klass = next(o for o in objects if o["kind"] == "ComputeClass")
    members = [p for p in pools if p.labels.get(COMPUTE_CLASS_LABEL) == klass["metadata"]["name"]]
    managed = next(p for p in members if " rule " not in p.name)  # the Pulumi-managed pool: rule 0
    ladder = []
    for priority, rule in enumerate(klass["spec"]["priorities"]):
        pool = managed if "nodepools" in rule else next(p for p in members if p.name.startswith(
            f"{klass['metadata']['name']} rule {priority} "))
        ladder.append((priority, pool, tuple(pool.zones or ZONES)))
    lws = next(o for o in objects if o["kind"] == "LeaderWorkerSet")
    lwt = lws["spec"]["leaderWorkerTemplate"]
    size = int(lwt["size"])
    leader = lwt.get("leaderTemplate") or lwt["workerTemplate"]
    pods = []
    for index in range(size):
        template = copy.deepcopy(leader if index == 0 else lwt["workerTemplate"])
        spec = template["spec"]
        if without_affinity:
            spec.pop("affinity", None)
        spec["labels"] = {**template["metadata"]["labels"], LWS_NAME_LABEL: lws["metadata"]["name"],
                          LWS_GROUP_KEY_LABEL: "group-0", "leaderworkerset.sigs.k8s.io/worker-index": str(index)}
        pods.append(spec)
    claims = rules.claim_zones(objects)
    return Stack(ladder, pods, {claim: zones for (_, claim), zones in claims.items() if zones})


def gpus(pod: dict[str, Any]) -> int:
    return sum(int((c.get("resources") or {}).get("limits", {}).get("nvidia.com/gpu", 0)) for c in pod["containers"])


def affinity_allows(pod: dict[str, Any], labels: dict[str, str], nodes: list[Node]) -> bool:
    """Required pod affinity as kube-scheduler's InterPodAffinity evaluates it, matchLabelKeys merged into the
    selector; a term no placed pod matches is satisfied when the pod matches it itself (its group's first pod)."""
    terms = ((pod.get("affinity") or {}).get("podAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or []
    for term in terms:
        selector = {**(term.get("labelSelector") or {}).get("matchLabels", {}),
                    **{key: pod["labels"][key] for key in term.get("matchLabelKeys") or []}}
        matched = [n for n in nodes for p in n.pods if all(p["labels"].get(k) == v for k, v in selector.items())]
        if not matched:
            if all(pod["labels"].get(k) == v for k, v in selector.items()):
                continue
            return False
        if labels.get(term["topologyKey"]) not in {n.labels.get(term["topologyKey"]) for n in matched}:
            return False
    return True


def feasible(pod: dict[str, Any], pool: rules.NodePool, zone: str, nodes: list[Node]) -> bool:
    labels = {**pool.labels, ZONE_LABEL: zone}
    return rules.misfit(pod, pool) is None and affinity_allows(pod, labels, nodes)


def walk(s: Stack, capacity: dict[tuple[int, str], int], existing: list[tuple[int, str]],
         zone_order: list[str]) -> tuple[list[Node], list[tuple[dict[str, Any], Node]]]:
    """Schedule one group's pods; returns the nodes and (pod, node) bindings made before a pod stayed Pending."""
    by_priority = {priority: (pool, zones) for priority, pool, zones in s.rules}
    nodes = [Node(by_priority[p][0], z, p, by_priority[p][0].gpus) for p, z in existing if z in by_priority[p][1]]
    capacity = dict(capacity)
    bound = []
    for pod in s.pods:
        need = gpus(pod)
        target = next((n for n in nodes if n.gpus_free >= need and feasible(pod, n.pool, n.zone, nodes)), None)
        if target is None:  # the autoscaler walks the class
            for priority, pool, zones in s.rules:
                for zone in (z for z in zone_order if z in zones):
                    if capacity.get((priority, zone), 0) > 0 and feasible(pod, pool, zone, nodes):
                        capacity[(priority, zone)] -= 1
                        target = Node(pool, zone, priority, pool.gpus)
                        nodes.append(target)
                        break
                if target is not None:
                    break
        if target is None:
            break  # Pending: DoNotScaleUp
        target.gpus_free -= need
        target.pods.append(pod)
        bound.append((pod, target))
    return nodes, bound


def broken(s: Stack, bound: list[tuple[dict[str, Any], Node]]) -> list[str]:
    """What a real cluster would get wrong for these bindings."""
    problems = []
    for pod, node in bound:
        if why := rules.misfit(pod, node.pool):
            problems.append(f"pod does not fit {node.pool.name}: {why}")
        for volume in pod.get("volumes") or []:
            claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
            if claim in s.weights_zones and node.zone not in s.weights_zones[claim]:
                problems.append(f"weights volume {claim} does not reach {node.zone}")
    if len({n.zone for _, n in bound}) > 1 or len({n.labels[NODEPOOL_LABEL] for _, n in bound}) > 1:
        problems.append(f"group split over {sorted({(n.zone, n.labels[NODEPOOL_LABEL]) for _, n in bound})}")
    return problems


def availability(s: Stack) -> st.SearchStrategy:
    keys = [(priority, zone) for priority, _, zones in s.rules for zone in zones]
    return st.tuples(
        st.fixed_dictionaries({key: st.integers(0, 2) for key in keys}),
        st.lists(st.sampled_from(keys), max_size=3),
        st.permutations(ZONES))


@pytest.mark.parametrize("name", sorted(STACKS))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_whatever_is_in_stock_the_group_lands_whole_where_it_fits_and_its_weights_are(name, data):
    s = stack(name)
    capacity, existing, order = data.draw(availability(s))
    _, bound = walk(s, capacity, existing, order)
    assert broken(s, bound) == []


@pytest.mark.parametrize("name", sorted(STACKS))
def test_with_room_on_any_one_rung_the_whole_group_lands_there(name):
    s = stack(name)
    size = len(s.pods)
    for priority, _, zones in s.rules:
        for zone in zones:
            _, bound = walk(s, {(priority, zone): size}, [], ZONES)
            assert len(bound) == size and {(n.priority, n.zone) for _, n in bound} == {(priority, zone)}
            assert broken(s, bound) == []


def test_the_rungs_are_tried_in_order():
    s = stack("multizone")
    everything = {(p, z): 1 for p, _, zones in s.rules for z in zones}
    for sold_out in range(len(s.rules)):
        left = {k: v for k, v in everything.items() if k[0] >= sold_out}
        _, bound = walk(s, left, [], ZONES)
        assert [n.priority for _, n in bound] == [sold_out]
    _, bound = walk(s, {}, [], ZONES)
    assert bound == []  # every rung sold out: nothing is created outside the class


def test_without_the_group_affinity_a_stockout_splits_a_group():
    s = stack("groups", without_affinity=True)
    counterexample = find(availability(s), lambda drawn: bool(broken(s, walk(s, *drawn)[1])),
                          settings=settings(max_examples=2000, deadline=None, database=None))
    _, bound = walk(s, *counterexample)
    assert any("group split" in line for line in broken(s, bound))
