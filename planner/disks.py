"""The serving disk of the weights: each type's read rate on a VM, the time a node takes to read its share, and the
cheapest type, size and throughput the machines attach that loads the weights within weights.loadSeconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.catalog import (
    DISK_TYPES,
    GIB,
    MIB,
    MachineType,
    readonly_attach_limit,
)
from planner.config import Settings
from planner.errors import ConfigError


def disk_read_mib_s(disk_type: str, disk_gib: int, machine: MachineType, provisioned_per_vm: float = 0) -> float:
    """Sustained read throughput one VM gets from the weights disk: Persistent Disk by its size, Hyperdisk ML by
    the throughput provisioned per VM; both capped by the machine's per-VM limit for the type."""
    disk = DISK_TYPES[disk_type]
    vm_cap = disk.vm_read_cap(machine.vcpus)
    if disk.mib_s_per_gib == 0:
        return min(vm_cap, provisioned_per_vm or vm_cap)
    return min(vm_cap, disk.baseline_mib_s + disk.mib_s_per_gib * disk_gib)


def weights_load_seconds(weights_bytes: float, nodes: int, read_mib_s: float) -> float:
    """The one estimate of a weights load: each node of a replica reads its share (1/nodes of the weights; pipeline
    stages hold different layers) at the rate its VM gets from the disk. The plan, the startup probe and the README
    all use this."""
    return weights_bytes / nodes / MIB / read_mib_s


def hyperdisk_throughput(read_mib_s: float, max_nodes: int) -> int:
    """Hyperdisk ML throughput is per disk and shared by every attached VM: provisioned for the VMs the pool may
    grow to, rounded up to a power of two of them. A volume accepts one throughput change per 4 hours (Compute
    Engine "Modify a Hyperdisk"), so a throughput that followed every maxReplicas edit failed a second edit within
    that window; rounded, it changes only when the pool doubles (and a change makes a new serving disk, see
    components/model_weights.py). 400 MiB/s is the smallest a volume takes, 1,200,000 the largest."""
    vms = 1 << max(0, max_nodes - 1).bit_length()
    return int(min(max(400, read_mib_s * vms), 1_200_000))


@dataclass(frozen=True)
class DiskChoice:
    """One weights-disk configuration the planner considered."""

    disk_type: str
    size_gib: int
    read_mib_s: float
    """What one VM reads from it."""
    provisioned_mib_s: int
    """Hyperdisk ML's provisioned throughput for the whole pool (0 for Persistent Disk)."""
    usd_month: float
    load_seconds: float

    def meets(self, target_seconds: int) -> bool:
        """Loads within the target (to the half second the plan rounds to)."""
        return self.load_seconds <= target_seconds + 0.5


def _round10(gib: float) -> int:
    return int(math.ceil(gib / 10) * 10)


def disk_option(disk_type: str, need_gib: int, size_gib: int | None, machine: MachineType, want_mib_s: float,
                max_nodes: int) -> tuple[int, float, int]:
    """(size GiB, per-VM read MiB/s, provisioned MiB/s) of the cheapest `disk_type` disk that gives one VM
    `want_mib_s`, or as close to it as the type and machine allow. A Persistent Disk reads faster the larger it is;
    Hyperdisk ML is sized for the weights and provisioned for the rate."""
    disk = DISK_TYPES[disk_type]
    vm_cap = disk.vm_read_cap(machine.vcpus)
    rate = min(want_mib_s, vm_cap)
    if disk.mib_s_per_gib:
        size = size_gib or min(disk.max_size_gib,
                               max(need_gib, _round10((rate - disk.baseline_mib_s) / disk.mib_s_per_gib)))
        return size, disk_read_mib_s(disk_type, size, machine), 0
    size = size_gib or need_gib
    provisioned = hyperdisk_throughput(rate, max_nodes)
    return size, disk_read_mib_s(disk_type, size, machine, rate), provisioned


def choose_weights_disk(settings: Settings, weights_bytes: float, machine: MachineType, nodes: int,
                        max_nodes: int) -> tuple[DiskChoice, list[DiskChoice]]:
    """The weights disk: among the types the machine attaches (or weights.diskType), the cheapest configuration
    whose read rate loads one node's share within weights.loadSeconds; when none does, the fastest. A type that
    cannot attach to the pool's VMs read-only is no option; forced (weights.diskType), it is a ConfigError.
    Returns the choice and every option considered."""
    w = settings.weights
    need = _round10((weights_bytes / GIB) * 1.15 + 10)
    want = weights_bytes / nodes / MIB / w.load_seconds
    options = []
    for disk_type in w.disk_types:
        size, rate, provisioned = disk_option(disk_type, need, w.size_gib, machine, want, max_nodes)
        attach_limit = readonly_attach_limit(disk_type, size)
        if max_nodes > attach_limit and w.disk_type:
            raise ConfigError("autoscaling.maxReplicas", settings.autoscaling.max_replicas,
                              f"{max_nodes} nodes ({nodes} per replica) would attach the read-only "
                              f"{disk_type} weights disk, which attaches to at most {attach_limit} VMs; "
                              "use weights.diskType: hyperdisk-ml (up to 2,500 VMs) or fewer replicas")
        if max_nodes > attach_limit:
            continue
        disk = DISK_TYPES[disk_type]
        cost = size * disk.usd_per_gib_month + provisioned * disk.usd_per_mib_s_month
        options.append(DiskChoice(disk_type, size, rate, provisioned, round(cost, 2),
                                  weights_load_seconds(weights_bytes, nodes, rate)))
    if not options:
        raise ConfigError("autoscaling.maxReplicas", settings.autoscaling.max_replicas,
                          f"{max_nodes} nodes would attach the read-only weights disk, more than any of "
                          f"{', '.join(w.disk_types)} attaches; use fewer replicas")
    meeting = [o for o in options if o.meets(w.load_seconds)]
    if meeting:
        return min(meeting, key=lambda o: (o.usd_month, o.load_seconds)), options
    return min(options, key=lambda o: (o.load_seconds, o.usd_month)), options


