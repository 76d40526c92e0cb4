"""Several zones, ways of buying and fallback machines (issue 32): each rung planned with the one pod shape, and
every refusal one line naming the rung's key, the value and what would work."""

from __future__ import annotations

import re

import pytest

from planner.compute_class import class_name, spec
from planner.config import ConfigError
from tests.helpers import model, settings, sizing

H100 = {"type": "nvidia-h100-80gb", "machineType": "a3-highgpu-8g"}
ZONES = ["us-central1-a", "us-central1-b", "us-central1-c"]
THREE_ZONES = {**H100, "zones": ZONES, "provisioning": ["reservation", "on-demand", "flex-start"],
               "reservation": "h100-serving", "reservationZone": "us-central1-a",
               "fallbacks": [{"type": "nvidia-h200-141gb", "provisioning": "flex-start"}]}
LLAMA_70B = model("Llama-3.1-70B-Instruct")


def ladder(**accelerator):
    return {"accelerator": {**THREE_ZONES, **accelerator}, "model": LLAMA_70B, "vllm": {"maxModelLen": 32768}}


REFUSED = [
    # a rung with another GPU count per node (and so another number of nodes per group)
    (ladder(fallbacks=[{"type": "nvidia-l4", "machineType": "g2-standard-8"}]), "accelerator.fallbacks[0].machineType",
     "must carry 8 GPUs per node"),
    (ladder(fallbacks=[{"type": "nvidia-a100-80gb", "machineType": "a2-ultragpu-4g"}]),
     "accelerator.fallbacks[0].machineType", "has 4 GPUs per node and the primary 8"),
    # a reservation rung without a reservation, and a reservation no rung uses
    (ladder(fallbacks=[{"type": "nvidia-h200-141gb", "provisioning": ["reservation"]}]),
     "accelerator.fallbacks[0].reservation", "is required"),
    (ladder(provisioning=["on-demand"]), "accelerator.reservation", "only used with provisioning: reservation"),
    # a reservation is zonal: its rung needs the reservation's zone, one of its own
    (ladder(reservationZone=None), "accelerator.reservationZone", "is required with several zones"),
    (ladder(reservationZone="us-central1-f"), "accelerator.reservationZone",
     "one of the rung's zones, us-central1-a, us-central1-b, us-central1-c"),
    (ladder(fallbacks=[{"type": "nvidia-h200-141gb", "provisioning": "flex-start",
                        "reservationZone": "us-central1-a"}]),
     "accelerator.fallbacks[0].reservationZone", "only used with provisioning: reservation"),
    # zones outside the cluster's region
    (ladder(zones=["us-central1-a", "us-east1-b"]), "accelerator.zones", "outside the cluster's region us-central1"),
    (ladder(fallbacks=[{"type": "nvidia-h200-141gb", "provisioning": "flex-start", "zones": ["europe-west4-a"]}]),
     "accelerator.fallbacks[0].zones", "outside the cluster's region us-central1"),
    # a way of buying the machine series is not sold as (A3 Ultra: no on-demand)
    (ladder(fallbacks=[{"type": "nvidia-h200-141gb", "provisioning": ["on-demand"]}]),
     "accelerator.fallbacks[0].provisioning", "accepted: flex-start, spot, reservation"),
    (ladder(provisioning=["on-demand", "on-demand"]), "accelerator.provisioning", "listed twice"),
    (ladder(zones=["us-central1-a", "us-central1-a"]), "accelerator.zones", "listed twice"),
    # weights: several zones share one volume only on Hyperdisk ML, and every machine must attach it
    (ladder() | {"weights": {"diskType": "pd-ssd"}}, "weights.diskType", "only on hyperdisk-ml"),
    ({"accelerator": {"type": "nvidia-tesla-t4", "zones": ZONES[:2]}, "model": model("Llama-3.2-1B-Instruct")},
     "accelerator.machineType", "cannot attach hyperdisk-ml"),
    # the auto-created pools install GKE's driver
    (ladder(driverVersion="INSTALLATION_DISABLED"), "accelerator.driverVersion", "use LATEST or DEFAULT"),
]


@pytest.mark.parametrize("overrides,key,accepted", REFUSED, ids=[f"{c[1]}:{i}" for i, c in enumerate(REFUSED)])
def test_each_refusal_is_one_line_naming_the_rung(overrides, key, accepted):
    with pytest.raises(ConfigError) as err:
        sizing("dev", **overrides)
    message = str(err.value)
    assert message.startswith(f"vllm-gke:{key}"), message
    assert accepted in message and "\n" not in message, message


def test_a_gpu_too_small_for_the_layout_planned_on_the_primary_is_refused():
    # Llama-3.1-70B on H200s plans tensor=2 (one pod per two GPUs); on H100s that layout holds about 8,200 KV
    # tokens, less than one 16,384-token sequence.
    overrides = {"accelerator": {"type": "nvidia-h200-141gb", "zones": ZONES[:1], "provisioning": "flex-start",
                                 "fallbacks": [{"type": "nvidia-h100-80gb", "provisioning": "flex-start"}]},
                 "model": LLAMA_70B, "vllm": {"maxModelLen": 16384}, "parallelism": {"minConcurrentSequences": 1}}
    assert sizing("dev", **{**overrides, "accelerator": {**overrides["accelerator"], "fallbacks": []}}
                  ).tensor_parallel_size == 2
    with pytest.raises(ConfigError) as err:
        sizing("dev", **overrides)
    message = str(err.value)
    assert message.startswith("vllm-gke:accelerator.fallbacks[0].type = nvidia-h100-80gb")
    held = re.search(r"holds only (\d+) KV tokens", message)
    assert held and 6000 < int(held.group(1)) < 16384 and "tensor=2" in message and "\n" not in message, message


def test_spot_for_a_multi_node_group_needs_the_opt_in():
    spot = {"type": "nvidia-h100-mega-80gb", "zones": ["us-central1-a"], "provisioning": ["on-demand", "spot"]}
    with pytest.raises(ConfigError) as err:
        sizing("prod", accelerator=spot)
    message = str(err.value)
    assert message.startswith("vllm-gke:accelerator.provisioning = spot") and "spotMultiNode" in message
    assert sizing("prod", accelerator={**spot, "spotMultiNode": True}).nodes_per_replica == 2


def test_every_rung_is_planned_and_shared_values_take_the_worst_rung():
    s = sizing("dev", **ladder())
    assert [(r.machine_type, r.provisioning) for r in s.rungs] == [
        ("a3-highgpu-8g", "reservation"), ("a3-highgpu-8g", "on-demand"), ("a3-highgpu-8g", "flex-start"),
        ("a3-ultragpu-8g", "flex-start")]
    h100, h200 = s.rungs[0], s.rungs[-1]
    assert h200.kv_tokens > h100.kv_tokens  # more memory per GPU, same layout
    assert s.kv_cache_tokens_per_replica == h100.kv_tokens
    assert s.hpa_target <= 0.9 * min(r.max_concurrent_sequences for r in s.rungs) or s.hpa_target == 3.0
    # the pod requests fit the smaller machine (a3-highgpu-8g: 208 vCPUs, 1,872 GB) and so the larger too
    alone = sizing("dev", accelerator={**H100, "zones": ZONES[:1]}, model=LLAMA_70B, vllm={"maxModelLen": 32768})
    assert (s.pod_cpu, s.pod_memory_gib) == (alone.pod_cpu, alone.pod_memory_gib)
    # TP=4: a replica takes half of an 8-GPU node, so half its list price
    assert s.tensor_parallel_size == 4 and all(r.usd_hour == 44.13 for r in s.rungs[:3]) and h200.usd_hour is None


def test_capacity_target_takes_the_rung_with_the_fewest_sequences():
    # batch target on capacity: an L4 fallback holds fewer sequences than an A100 primary, so the target follows it
    base = {"accelerator": {"type": "nvidia-a100-80gb", "machineType": "a2-ultragpu-1g", "zones": ["us-central1-a"],
                            "fallbacks": [{"type": "nvidia-l4", "machineType": "g2-standard-8"}]},
            "autoscaling": {"metric": "batch"}}
    s = sizing("dev", **base)
    worst = min(min(r.max_concurrent_sequences, r.max_num_seqs) for r in s.rungs)
    assert s.rungs[1].max_concurrent_sequences < s.rungs[0].max_concurrent_sequences
    assert s.hpa_target == max(1, int(worst * 0.9))


def test_the_class_lists_the_pool_first_then_every_other_rung_in_order():
    st = settings("dev", **ladder())
    rules = spec(st.accelerator, "gpu-pool-abc")["priorities"]
    assert rules[0] == {"nodepools": ["gpu-pool-abc"]}
    assert [("spot" in r, "flexStart" in r, r["machineType"]) for r in rules[1:]] == [
        (False, False, "a3-highgpu-8g"), (False, True, "a3-highgpu-8g"), (False, True, "a3-ultragpu-8g")]
    assert all(r["location"]["zones"] == ZONES and r["gpu"]["count"] == 8 for r in rules[1:])
    assert rules[3]["storage"]["bootDiskType"] == "hyperdisk-balanced"  # A3 Ultra boots from Hyperdisk only
    assert class_name("vllm-gke/dev").startswith("vllm-gpu-") and class_name("a") != class_name("b")


def test_one_zone_and_one_way_of_buying_makes_no_rungs():
    s = settings("dev")
    assert not s.accelerator.compute_class and len(s.accelerator.rungs) == 1
    assert sizing("dev").rungs == ()
    assert "rungs" not in sizing("dev").as_dict()
