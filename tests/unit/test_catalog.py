"""The accelerator catalog is one consistent table."""

import pytest

from planner.catalog import ACCELERATORS, DISK_TYPES, machine_series, readonly_attach_limit

ISSUE_TYPES = ["nvidia-tesla-t4", "nvidia-l4", "nvidia-tesla-a100", "nvidia-a100-80gb", "nvidia-h100-80gb",
               "nvidia-h100-mega-80gb", "nvidia-h200-141gb", "nvidia-b200"]


def test_catalog_covers_every_gke_accelerator_type_the_product_supports():
    assert sorted(ACCELERATORS) == sorted(ISSUE_TYPES)


@pytest.mark.parametrize("acc_type,mib", [("nvidia-l4", 23_034), ("nvidia-h100-80gb", 81_559),
                                          ("nvidia-h200-141gb", 143_771), ("nvidia-tesla-t4", 15_360)])
def test_gpu_memory_is_what_the_driver_reports(acc_type, mib):
    assert ACCELERATORS[acc_type].memory_mib == mib


def test_machine_type_names_are_unique_and_their_gpu_count_matches_the_name():
    names = [m.name for a in ACCELERATORS.values() for m in a.machines]
    assert len(names) == len(set(names)), "a machine type belongs to one accelerator"
    for acc in ACCELERATORS.values():
        for machine in acc.machines:
            if machine.name.endswith("g") and machine.name.split("-")[-1][:-1].isdigit():
                assert machine.gpus == int(machine.name.split("-")[-1][:-1]), machine.name


def test_every_gpu_count_has_a_default_machine_and_it_is_listed_first():
    for acc in ACCELERATORS.values():
        for count in acc.gpu_counts():
            first = next(m for m in acc.machines if m.gpus == count)
            assert acc.default_machine(count) is first


def test_n1_t4_supports_neither_compact_placement_nor_hyperdisk_ml():
    t4 = ACCELERATORS["nvidia-tesla-t4"]
    assert not t4.compact_placement
    assert all("hyperdisk-ml" not in machine_series(m.name).data_disk_types for m in t4.machines)
    assert all("hyperdisk-ml" in machine_series(m.name).data_disk_types
               for a in ACCELERATORS.values() if a.type != "nvidia-tesla-t4" for m in a.machines)


def test_every_catalog_machine_belongs_to_one_series_with_disks_and_ways_to_buy_it():
    for acc in ACCELERATORS.values():
        for machine in acc.machines:
            series = machine_series(machine.name)
            assert series.boot_disk_types and series.data_disk_types and series.provisioning
            assert set(series.provisioning) <= {"on-demand", "spot", "reservation", "flex-start"}
    # Compute Engine: A3 Ultra and A4 boot from Hyperdisk Balanced only and are not sold on demand; the small
    # A3 High shapes only as Spot or Flex-start.
    for name in ("a3-ultragpu-8g", "a4-highgpu-8g"):
        assert machine_series(name).boot_disk_types == ("hyperdisk-balanced",)
        assert "on-demand" not in machine_series(name).provisioning
        assert "pd-ssd" not in machine_series(name).data_disk_types
    for name in ("a3-highgpu-1g", "a3-highgpu-2g", "a3-highgpu-4g"):
        assert set(machine_series(name).provisioning) == {"spot", "flex-start"}
    assert "on-demand" in machine_series("a3-highgpu-8g").provisioning


def test_readonly_attach_limits_follow_disk_type_and_hyperdisk_ml_size():
    assert readonly_attach_limit("pd-ssd", 100) == 10
    assert readonly_attach_limit("hyperdisk-ml", 200) == 2_500
    assert readonly_attach_limit("hyperdisk-ml", 1_500) == 300
    assert readonly_attach_limit("hyperdisk-ml", 60_000) == 30
    assert set(DISK_TYPES) == {"pd-ssd", "pd-balanced", "hyperdisk-ml"}


def test_docker_hub_references_map_to_the_remote_repository_and_back():
    from planner.versions import docker_hub_path, mirrored, unmirrored

    assert docker_hub_path("vllm/vllm-openai:v0.32.0") == "vllm/vllm-openai:v0.32.0"
    assert docker_hub_path("docker.io/vllm/vllm-openai:v1") == "vllm/vllm-openai:v1"
    assert docker_hub_path("ubuntu:24.04") == "library/ubuntu:24.04"
    for other in ("gcr.io/x/y:1", "localhost/x:1", "registry:5000/x:1", "us-docker.pkg.dev/p/r/x:1"):
        assert docker_hub_path(other) is None and mirrored(other, "us-central1", "p", "r") == other
    image = mirrored("vllm/vllm-openai:v0.32.0", "us-central1", "proj", "vllm-gke-1234abcd")
    assert image == "us-central1-docker.pkg.dev/proj/vllm-gke-1234abcd/vllm/vllm-openai:v0.32.0"
    assert unmirrored(image) == "vllm/vllm-openai:v0.32.0"
    assert unmirrored(mirrored("ubuntu:24.04", "eu-west4", "p", "r")) == "ubuntu:24.04"


def test_persistent_disk_read_caps_follow_the_vcpu_count():
    """Compute Engine's per-VM PD read caps: 240 MiB/s (g2-standard-4), 800 (g2-standard-8/12, a2-*-1g),
    1,200 (larger G2, a2-*-8g, A3); main gave g2-standard-4 800."""
    for disk in ("pd-ssd", "pd-balanced"):
        caps = {m: DISK_TYPES[disk].vm_read_cap(v) for m, v in (("g2-standard-4", 4), ("g2-standard-8", 8),
                                                               ("a2-highgpu-1g", 12), ("g2-standard-16", 16),
                                                               ("a3-highgpu-8g", 208))}
        assert caps == {"g2-standard-4": 240, "g2-standard-8": 800, "a2-highgpu-1g": 800, "g2-standard-16": 1_200,
                        "a3-highgpu-8g": 1_200}
    assert DISK_TYPES["hyperdisk-ml"].vm_read_cap(8) == 2_400 and DISK_TYPES["hyperdisk-ml"].vm_read_cap(224) == 4_000
