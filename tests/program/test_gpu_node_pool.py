"""GpuNodePool under Pulumi's mocks: machine type, GPUs, taint, provisioning, placement."""

import pytest

from planner.catalog import ACCELERATORS
from tests.helpers import NODE_POOL, accel, full_config, model, node_config
from tools.mocks import run_program


def model_for(acc_type):
    """A model whose automatic layout is single-node on every accelerator."""
    return model("Qwen2.5-7B-Instruct") if acc_type != "nvidia-tesla-t4" else {
        **model("Qwen2.5-7B-Instruct"), "weightsGib": 5.0}


@pytest.mark.parametrize("acc_type", sorted(ACCELERATORS))
def test_node_pool_matches_the_catalog_for_every_accelerator(acc_type):
    acc = ACCELERATORS[acc_type]
    machine = acc.machines[-1]
    rec = run_program(full_config(accelerator=accel(acc_type, machine.name), model=model_for(acc_type),
                                  vllm={"maxModelLen": 4096}))
    pool = node_config(rec)
    cfg = pool["nodeConfig"]
    assert cfg["machineType"] == machine.name
    gpu = cfg["guestAccelerators"][0]
    assert (gpu["type"], gpu["count"]) == (acc_type, machine.gpus)
    assert gpu["gpuDriverInstallationConfig"]["gpuDriverVersion"] == "LATEST"
    assert {"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"} in cfg["taints"]
    assert cfg["labels"]["cloud.google.com/gke-accelerator"] == acc_type
    assert pool["nodeLocations"] == ["us-central1-a"]
    assert pool["autoscaling"]["totalMinNodeCount"] == 1 and pool["autoscaling"]["totalMaxNodeCount"] == 2
    assert cfg["workloadMetadataConfig"]["mode"] == "GKE_METADATA"
    assert cfg["gvnic"]["enabled"] is True
    assert "placementPolicy" not in pool, "single-node replicas need no compact placement"
    assert bool(cfg.get("ephemeralStorageLocalSsdConfig")) == (machine.local_ssd_count > 0)
    assert {"initialNodeCount", "nodeCount"} <= set(rec.one(NODE_POOL, "gpu").ignore_changes)


def test_spot_nodes_are_spot_and_labelled_so_pods_can_select_them():
    cfg = node_config(run_program(full_config(accelerator=accel("nvidia-l4", provisioning="spot"))))["nodeConfig"]
    assert cfg["spot"] is True and cfg["labels"]["cloud.google.com/gke-spot"] == "true"


def test_reservation_nodes_consume_the_named_reservation():
    cfg = node_config(run_program(full_config(
        accelerator=accel("nvidia-l4", provisioning="reservation", reservation="l4-res"))))["nodeConfig"]
    assert cfg["reservationAffinity"] == {"consumeReservationType": "SPECIFIC_RESERVATION",
                                          "key": "compute.googleapis.com/reservation-name", "values": ["l4-res"]}
    assert cfg["spot"] is False


def test_compact_placement_only_for_multi_node_replicas_on_supporting_machines():
    multi = run_program(full_config(accelerator=accel("nvidia-l4", "g2-standard-24"),
                                    model=model("Llama-3.1-70B-Instruct")))
    pool = node_config(multi)
    assert pool["placementPolicy"] == {"type": "COMPACT"}
    assert pool["autoscaling"]["totalMaxNodeCount"] == 8, "2 replicas x 4 nodes"
    t4 = run_program(full_config(accelerator=accel("nvidia-tesla-t4"), parallelism={"tensor": 1, "pipeline": 2}))
    assert "placementPolicy" not in node_config(t4), "N1 does not support compact placement"
