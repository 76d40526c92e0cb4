"""GpuNodePool under Pulumi's mocks: machine type, GPUs, taint, provisioning, placement."""

import pytest

from planner.catalog import ACCELERATORS, machine_series
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
    series = machine_series(machine.name)
    flex = series.provisioning[0] == "flex-start"
    assert pool["autoscaling"]["totalMinNodeCount"] == (0 if flex else 1)
    assert pool["autoscaling"]["totalMaxNodeCount"] == 2
    assert cfg["diskType"] == series.boot_disk_types[0], "a boot disk type the series accepts"
    assert bool(cfg.get("flexStart")) == flex, "the default way to buy is one Compute Engine sells"
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
    assert pool["autoscaling"]["totalMaxNodeCount"] == 10, "2 replicas x 5 nodes"
    t4 = run_program(full_config(accelerator=accel("nvidia-tesla-t4"), parallelism={"tensor": 1, "pipeline": 2}))
    assert "placementPolicy" not in node_config(t4), "N1 does not support compact placement"


@pytest.mark.parametrize("machine", ["a3-ultragpu-8g", "a4-highgpu-8g"])
def test_a3_ultra_and_a4_pools_boot_from_hyperdisk_balanced(machine):
    """Main declared pd-ssd boot disks, which Compute Engine refuses for these series (Hyperdisk only)."""
    acc = next(a for a in ACCELERATORS.values() if a.machine(machine))
    cfg = node_config(run_program(full_config(accelerator=accel(acc.type, machine), model=model_for(acc.type),
                                              vllm={"maxModelLen": 4096})))["nodeConfig"]
    assert cfg["diskType"] == "hyperdisk-balanced"


def test_the_h100_default_machine_is_bought_flex_start_from_zero_without_a_reservation():
    """a3-highgpu-1g (the H100 default) is sold only as Spot or Flex-start; main asked for it on demand."""
    rec = run_program(full_config(accelerator=accel("nvidia-h100-80gb"), model=model_for("nvidia-h100-80gb")))
    pool = node_config(rec)
    assert pool["nodeConfig"]["machineType"] == "a3-highgpu-1g"
    assert pool["nodeConfig"]["flexStart"] is True and not pool["nodeConfig"].get("spot")
    assert pool["nodeConfig"]["reservationAffinity"]["consumeReservationType"] == "NO_RESERVATION"
    assert pool["initialNodeCount"] == 0 and pool["autoscaling"]["totalMinNodeCount"] == 0
    assert pool["autoscaling"]["locationPolicy"] == "ANY" and pool["management"]["autoRepair"] is False
