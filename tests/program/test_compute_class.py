"""Several zones, ways of buying and fallbacks (issue 32), as the program renders them under Pulumi's mocks: the
ComputeClass (upstream schema and CEL rules), the pool that joins it, the pods that select it, the multi-node group
affinity and the multi-zone weights volume; and each cluster rule shown to catch a broken object."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from planner import cluster_rules as rules
from planner.compute_class import class_name
from planner.labels import COMPUTE_CLASS_LABEL, LWS_GROUP_KEY_LABEL, NODEPOOL_LABEL, SPOT_GROUPS_ANNOTATION, ZONE_LABEL
from tests.helpers import full_config
from tests.k8s_schema import validate_object
from tools import crds
from tools.mocks import Recording, run_program

ZONES = ["us-central1-a", "us-central1-b", "us-central1-c"]
MULTI_NODE = {"type": "nvidia-h100-mega-80gb", "zones": ZONES, "provisioning": ["on-demand", "flex-start"],
              "fallbacks": [{"type": "nvidia-h200-141gb", "provisioning": ["flex-start"]}]}


@pytest.fixture(scope="module")
def multizone() -> Recording:
    return run_program(full_config("multizone"))


@pytest.fixture(scope="module")
def groups() -> Recording:
    return run_program(full_config("prod", accelerator=MULTI_NODE))


def objects(rec: Recording) -> list[dict[str, Any]]:
    return copy.deepcopy(rec.kubernetes_objects())


def find(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [o for o in objs if o["kind"] == kind]
    assert len(found) == 1, [o["metadata"]["name"] for o in found]
    return found[0]


def lws_templates(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    lwt = find(objs, "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]
    return [lwt[role]["spec"] for role in ("leaderTemplate", "workerTemplate") if role in lwt]


def test_every_object_is_valid_against_its_upstream_schema_cel_rules_included(multizone, groups):
    for rec in (multizone, groups):
        for obj in rec.kubernetes_objects():
            validate_object(obj)  # ComputeClass: tools/crds.py (both vendored schemas, CEL)


def test_the_compute_class_is_the_pool_then_the_other_rungs_and_pulumi_waits_on_no_unnamed_condition(multizone):
    objs = objects(multizone)
    klass = find(objs, "ComputeClass")
    pool = multizone.one("gcp:container/nodePool:NodePool", "gpu-pool")
    assert klass["metadata"]["name"] == class_name(f"vllm-gke/{multizone.stack}")
    # No upstream text names the condition GKE reports; a wait on a guessed one would fail every `pulumi up`.
    assert "pulumi.com/waitFor" not in (klass["metadata"].get("annotations") or {})
    spec = klass["spec"]
    assert spec["whenUnsatisfiable"] == "DoNotScaleUp" and spec["activeMigration"] == {"optimizeRulePriority": False}
    assert spec["nodePoolAutoCreation"] == {"enabled": True}
    # rule 0 is the Pulumi-managed pool (it holds the reservation), by the name Pulumi gives it
    assert list(spec["priorities"][0]) == ["nodepools"]
    assert spec["priorities"][0]["nodepools"][0].startswith("gpu-pool-")  # Pulumi's auto-name of the pool
    assert pool.inputs["nodeConfig"]["reservationAffinity"]["values"] == ["h100-serving"]
    assert [(r["machineType"], "flexStart" in r) for r in spec["priorities"][1:]] == [
        ("a3-highgpu-8g", False), ("a3-highgpu-8g", True), ("a3-ultragpu-8g", True)]
    klass_res = multizone.one("kubernetes:cloud.google.com/v1:ComputeClass")
    assert pool.urn in klass_res.dependencies
    lws = multizone.one("kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet")
    assert klass_res.urn in lws.dependencies


def test_the_pool_joins_the_class_with_its_label_and_taint_in_its_rungs_zones(multizone, groups):
    name = class_name(f"vllm-gke/{multizone.stack}")
    config = multizone.one("gcp:container/nodePool:NodePool", "gpu-pool").inputs
    # a reservation is zonal: the reserved pool is in the reservation's zone alone, the other rungs span all three
    assert config["nodeLocations"] == ["us-central1-a"]
    assert config["nodeConfig"]["reservationAffinity"]["consumeReservationType"] == "SPECIFIC_RESERVATION"
    assert config["nodeConfig"]["labels"][COMPUTE_CLASS_LABEL] == name
    assert {"key": COMPUTE_CLASS_LABEL, "value": name, "effect": "NO_SCHEDULE"} in config["nodeConfig"]["taints"]
    assert [r["location"]["zones"] for r in find(objects(multizone), "ComputeClass")["spec"]["priorities"][1:]] == \
        [ZONES] * 3
    # an on-demand pool spans the zones and starts empty: initialNodeCount is per zone, the autoscaler adds the
    # planned minimum where the group lands
    spread = groups.one("gcp:container/nodePool:NodePool", "gpu-pool").inputs
    assert spread["nodeLocations"] == ZONES
    assert spread["initialNodeCount"] == 0 and spread["autoscaling"]["totalMinNodeCount"] == 2


def test_serving_pods_placeholders_and_the_weights_cache_select_the_class(groups):
    objs = objects(groups)
    name = class_name(f"vllm-gke/{groups.stack}")
    templates = [t.spec for t in rules.pod_templates(objs)
                 if t.owner["kind"] in ("LeaderWorkerSet", "DaemonSet")
                 or "-headroom" in t.owner["metadata"]["name"]]
    assert len(templates) >= 2
    for spec in templates:
        assert spec["nodeSelector"] == {COMPUTE_CLASS_LABEL: name}
        assert {"key": COMPUTE_CLASS_LABEL, "operator": "Equal", "value": name,
                "effect": "NoSchedule"} in spec["tolerations"]


def test_a_multi_node_group_is_kept_in_one_zone_and_one_pool(groups):
    objs = objects(groups)
    for spec in lws_templates(objs):
        terms = spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert {t["topologyKey"] for t in terms} == {ZONE_LABEL, NODEPOOL_LABEL}
        for term in terms:
            assert term["matchLabelKeys"] == [LWS_GROUP_KEY_LABEL]
            assert LWS_GROUP_KEY_LABEL not in term["labelSelector"].get("matchLabels", {})
    # compact placement is one zone only: the three-zone pool has none
    assert groups.one("gcp:container/nodePool:NodePool", "gpu-pool").inputs.get("placementPolicy") is None


def test_weights_are_on_hyperdisk_ml_in_every_zone_behind_one_multi_zone_volume(multizone):
    disks = [r for r in multizone.of_type("gcp:compute/disk:Disk") if r.name.endswith("-serving")]
    assert sorted(d.inputs["zone"] for d in disks) == ZONES
    assert len({d.inputs["name"] for d in disks}) == 1
    for disk in disks:
        assert disk.inputs["type"] == "hyperdisk-ml" and disk.inputs["accessMode"] == "READ_ONLY_MANY"
        assert disk.inputs["labels"]["goog-gke-multi-zone"] == "true"
    staging = next(r for r in multizone.of_type("gcp:compute/disk:Disk") if r.name.endswith("-staging"))
    assert staging.inputs["zone"] == ZONES[0]
    objs = objects(multizone)
    pv = next(o for o in objs if o["kind"] == "PersistentVolume" and o["spec"]["accessModes"] == ["ReadOnlyMany"])
    assert pv["spec"]["csi"]["volumeHandle"] == (f"projects/my-gcp-project/zones/multi-zone/disks/"
                                                 f"{disks[0].inputs['name']}")
    assert pv["spec"]["csi"]["readOnly"] is True
    zones = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"]
    assert zones == ZONES
    job = next(o for o in objs if o["kind"] == "Job" and o["metadata"]["name"].endswith("-download"))
    assert job["spec"]["template"]["spec"]["nodeSelector"] == {ZONE_LABEL: ZONES[0]}


# ----------------------------------------------------------------- each rule shown to catch a broken object

def test_the_cel_rules_refuse_flex_start_with_spot_and_a_pool_rule_with_more(multizone):
    klass = find(objects(multizone), "ComputeClass")
    assert crds.problems(klass) == []
    flex = next(r for r in klass["spec"]["priorities"] if "flexStart" in r)
    flex["spot"] = True
    klass["spec"]["priorities"][0]["spot"] = True
    found = crds.problems(klass)
    assert any("Flex Start provisioning model is incompatible with Spot" in line for line in found), found
    assert any("Nodepool field cannot be set along with other fields" in line for line in found), found
    bare = find(objects(multizone), "ComputeClass")
    bare["spec"]["priorities"][1]["reservations"] = {"affinity": "Specific"}
    assert any("At least 1 specific reservation required" in line for line in crds.problems(bare))


def test_the_schema_refuses_a_field_the_crd_does_not_have(multizone):
    klass = find(objects(multizone), "ComputeClass")
    klass["spec"]["priorities"][1]["gpu"]["driverVersion"] = "LATEST"
    assert any("'LATEST' is not one of ['default', 'latest']" in line for line in crds.problems(klass))


def test_a_rung_the_pod_does_not_fit_is_a_violation(multizone):
    objs = objects(multizone)
    pools = rules.node_pools(multizone.rule_inputs(), objs)
    assert rules.compute_classes(objs, pools) == []
    # a pod that asks for more memory than the smaller machine of the class offers
    for spec in lws_templates(objs):
        spec["containers"][0]["resources"]["requests"]["memory"] = "2000Gi"
        spec["containers"][0]["resources"]["limits"]["memory"] = "2000Gi"
    found = rules.compute_classes(objs, pools)
    assert any("does not fit" in line and "a3-highgpu-8g" in line for line in found), found


def test_a_weights_volume_that_misses_a_rungs_zone_is_a_violation(multizone):
    objs = objects(multizone)
    pools = rules.node_pools(multizone.rule_inputs(), objs)
    pv = next(o for o in objs if o["kind"] == "PersistentVolume" and o["spec"]["accessModes"] == ["ReadOnlyMany"])
    pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] = ZONES[:2]
    found = rules.compute_classes(objs, pools)
    assert any("has nodes in us-central1-c" in line for line in found), found


def test_a_group_without_the_affinity_is_a_violation(groups):
    objs = objects(groups)
    assert rules.groups(objs) == []
    for spec in lws_templates(objs):
        terms = spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        terms[:] = [t for t in terms if t["topologyKey"] != ZONE_LABEL]
    found = rules.groups(objs)
    assert len(found) == 2 and all(f"not kept in one {ZONE_LABEL}" in line for line in found), found


@pytest.fixture(scope="module")
def spot_groups() -> Recording:
    accelerator = {**MULTI_NODE, "provisioning": ["on-demand", "spot"], "spotMultiNode": True}
    return run_program(full_config("prod", accelerator=accelerator))


def test_the_rung_rules_hold_on_the_rendered_stacks(multizone, groups, spot_groups):
    for rec in (multizone, groups, spot_groups):
        assert rules.rungs(objects(rec), rec.rule_inputs()) == []


def test_a_rung_bought_a_way_its_series_is_not_sold_is_a_violation(multizone):
    objs = objects(multizone)
    h200 = find(objs, "ComputeClass")["spec"]["priorities"][3]
    del h200["flexStart"]  # on-demand A3 Ultra
    found = rules.rungs(objs, multizone.rule_inputs())
    assert found == [f"rungs: ComputeClass {find(objs, 'ComputeClass')['metadata']['name']} rule 3 (a3-ultragpu-8g): "
                     "bought on-demand; A3 Ultra is sold only as flex-start, spot, reservation"]


def test_a_rung_outside_the_region_is_a_violation(multizone):
    objs = objects(multizone)
    find(objs, "ComputeClass")["spec"]["priorities"][1]["location"]["zones"] = ["europe-west4-a"]
    found = rules.rungs(objs, multizone.rule_inputs())
    assert len(found) == 1 and "europe-west4-a are outside the cluster's region us-central1" in found[0], found


def test_a_rung_with_another_gpu_count_for_a_group_is_a_violation(groups):
    objs = objects(groups)
    find(objs, "ComputeClass")["spec"]["priorities"][1]["gpu"]["count"] = 4
    found = rules.rungs(objs, groups.rule_inputs())
    assert len(found) == 1 and "nodes of 4 GPUs, but each pod" in found[0] and "takes 8" in found[0], found


def test_spot_for_a_group_without_the_opt_in_is_a_violation(spot_groups):
    objs = objects(spot_groups)
    klass = find(objs, "ComputeClass")
    assert klass["metadata"]["annotations"][SPOT_GROUPS_ANNOTATION] == "true"
    del klass["metadata"]["annotations"][SPOT_GROUPS_ANNOTATION]
    found = rules.rungs(objs, spot_groups.rule_inputs())
    assert len(found) == 1 and "Spot for LeaderWorkerSet" in found[0] and "without the opt-in" in found[0], found


# ------------------------------------------------ issue 40: zonal reservations, per-zone starts, GKE versions

def gce(rec: Recording) -> list[str]:
    return rules.gce(rec.rule_inputs(), rec.kubernetes_objects())


def pool_inputs(rec: Recording) -> dict[str, Any]:
    return next(inputs for token, name, inputs in rec.rule_inputs() if name == "gpu-pool")


def test_a_reserved_pool_over_several_zones_is_a_violation(multizone):
    assert gce(multizone) == []
    inputs = copy.deepcopy(multizone.rule_inputs())
    pool = next(i for token, name, i in inputs if name == "gpu-pool")
    pool["nodeLocations"] = ZONES  # what shipped: the reservation pinned on a three-zone pool
    found = rules.gce(inputs, multizone.kubernetes_objects())
    assert any("pins a specific reservation over zones us-central1-a, us-central1-b, us-central1-c" in p
               for p in found), found


def test_a_pool_starting_more_nodes_than_planned_is_a_violation(groups):
    assert gce(groups) == []
    inputs = copy.deepcopy(groups.rule_inputs())
    pool = next(i for token, name, i in inputs if name == "gpu-pool")
    pool["initialNodeCount"] = 2  # the plan's minimum, read as a total, is per zone: 6 A3 Mega VMs
    found = rules.gce(inputs, groups.kubernetes_objects())
    assert any("starts 2 node(s) in each of 3 zone(s) = 6, above its planned minimum of 2" in p for p in found)


def test_a_compute_class_rule_reserving_over_several_zones_is_a_violation(multizone):
    objs = objects(multizone)
    klass = find(objs, "ComputeClass")
    klass["spec"]["priorities"][1] = {**klass["spec"]["priorities"][1],
                                      "reservations": {"affinity": "Specific", "specific": [{"name": "r"}]}}
    found = rules.rungs(objs, multizone.rule_inputs())
    assert any("rule 1 (a3-highgpu-8g): a specific reservation over zones" in p for p in found), found


def test_a_created_cluster_runs_the_gke_version_its_compute_class_and_gateway_need():
    from planner import routing
    from planner.compute_class import AUTO_CREATION_MIN_GKE

    rec = run_program(full_config("multizone"))
    cluster = rec.one("gcp:container/cluster:Cluster").inputs
    assert cluster["minMasterVersion"] == AUTO_CREATION_MIN_GKE
    assert gce(rec) == []
    both = run_program(full_config("multizone", serving={"routing": "gke-gateway",
                                                         "proxySubnetCidr": "10.129.0.0/23"}))
    assert both.one("gcp:container/cluster:Cluster").inputs["minMasterVersion"] == routing.GATEWAY_MIN_MASTER
    inputs = copy.deepcopy(rec.rule_inputs())
    next(i for token, name, i in inputs if token == "gcp:container/cluster:Cluster").pop("minMasterVersion")
    found = rules.gce(inputs, rec.kubernetes_objects())
    assert found == [f"gce: cluster vllm-cluster: minMasterVersion (unset); a ComputeClass that creates node pools "
                     f"needs GKE {AUTO_CREATION_MIN_GKE} or later"]


def test_an_existing_cluster_too_old_for_pool_auto_creation_fails_the_preview_in_one_line():
    import pulumi

    config = full_config("dev", accelerator={"type": "nvidia-l4", "machineType": "g2-standard-8",
                                             "zones": ["us-central1-a"], "provisioning": ["on-demand", "spot"]})
    with pytest.raises(pulumi.RunError) as info:
        run_program(config, cluster={"masterVersion": "1.32.4-gke.1000"}, preview=True)
    message = str(info.value)
    assert message.startswith("vllm-gke:cluster.name = ml-dev: cluster ml-dev runs GKE 1.32.4-gke.1000; a "
                              "ComputeClass creates node pools from 1.33.3-gke.1136000"), message
    assert "\n" not in message
    assert run_program(config, cluster={"masterVersion": "1.33.5-gke.1080000"}).kubernetes_objects()


@pytest.fixture(scope="module")
def spare_groups() -> Recording:
    return run_program(full_config("prod", accelerator=MULTI_NODE, autoscaling={"minReplicas": 1, "maxReplicas": 3,
                                                                                "headroom": 2}))


def placeholder_deployments(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # registration order varies run to run (Pulumi resolves outputs concurrently): by name
    return sorted((o for o in objs if o["kind"] == "Deployment" and "-headroom" in o["metadata"]["name"]),
                  key=lambda o: o["metadata"]["name"])


def test_a_spare_slot_for_a_multi_node_group_is_kept_in_one_zone_and_one_pool(spare_groups):
    objs = objects(spare_groups)
    slots = placeholder_deployments(objs)
    assert [d["metadata"]["name"] for d in slots] == ["vllm-headroom-0", "vllm-headroom-1"]
    for slot in slots:
        assert slot["spec"]["replicas"] == 2  # one slot = one group of two nodes
        labels = slot["spec"]["template"]["metadata"]["labels"]
        terms = slot["spec"]["template"]["spec"]["affinity"]["podAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]
        assert {t["topologyKey"] for t in terms} == {ZONE_LABEL, NODEPOOL_LABEL}
        assert all(t["labelSelector"]["matchLabels"] == labels for t in terms)
    pools = rules.node_pools(spare_groups.rule_inputs(), objs)
    assert rules.headroom(objs, pools) == []


def test_placeholders_of_a_multi_node_slot_without_the_affinity_or_in_one_deployment_are_violations(spare_groups):
    objs = objects(spare_groups)
    pools = rules.node_pools(spare_groups.rule_inputs(), objs)
    first, second = placeholder_deployments(objs)
    del first["spec"]["template"]["spec"]["affinity"]  # what shipped: a slot's nodes anywhere in the class
    second["spec"]["replicas"] = 4
    found = rules.headroom(objs, pools)
    assert any("Deployment vllm/vllm-headroom-0" in p and "not kept in one" in p for p in found), found
    assert any("vllm-headroom-1 holds 4 placeholder(s) for groups of 2 nodes" in p for p in found), found
    objs = objects(spare_groups)
    for slot in placeholder_deployments(objs):  # one selector for every slot: all spare nodes in one zone
        for term in slot["spec"]["template"]["spec"]["affinity"]["podAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"]:
            term["labelSelector"]["matchLabels"].pop("vllm-gke/slot")
    assert len([p for p in rules.headroom(objs, pools) if "not kept in one" in p]) == 2
