"""Accelerator catalog: the one table of GPU and machine-type facts the program relies on.

Sources (checked 2026-11): GKE "About GPUs" and Compute Engine "GPU machine types" pages for
machine types and GPU counts; GPU memory is the total `nvidia-smi` reports on those machines;
compact placement from GKE "Define compact placement for GKE nodes" and Compute Engine
placement-policy docs (N1 is not supported); disk types and ways to buy each machine series in
MACHINE_SERIES below.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

MIB = 1024**2
GIB = 1024**3


@dataclass(frozen=True)
class MachineType:
    """A Compute Engine machine type that carries GPUs."""

    name: str
    gpus: int
    vcpus: int
    memory_gib: float
    local_ssd_count: int = 0
    """Local NVMe SSDs (375 GiB each) bundled with the machine type; 0 where none are bundled."""
    gpudirect: str = ""
    """The GPU-to-GPU network between nodes the machine offers beyond TCP on its primary NIC (GKE "Maximize GPU
    network bandwidth": GPUDirect-TCPX on A3 High, GPUDirect-TCPXO on A3 Mega, GPUDirect RDMA on A3 Ultra and A4)."""


@dataclass(frozen=True)
class Accelerator:
    """A GKE accelerator type and the machine types that carry it."""

    type: str
    display: str
    memory_mib: int
    machines: tuple[MachineType, ...]
    device_name: str
    """What the driver calls the GPU (torch.cuda.get_device_name, nvidia-smi's name): vLLM keys batch defaults on it
    (planner/engine.py batch_defaults)."""
    compact_placement: bool
    bfloat16: bool = True
    """bf16 arithmetic: compute capability 8.0 and up (NVIDIA CUDA GPUs list); the T4 (7.5) has none, and vLLM
    refuses --dtype bfloat16 there ("Bfloat16 is only supported on GPUs with compute capability of at least 8.0")."""
    memory_gb_s: float = 0.0
    """Peak memory bandwidth, GB/s (GPU_SPEEDS)."""
    tflops_16bit: float = 0.0
    """Peak dense fp16/bf16 tensor-core TFLOP/s (GPU_SPEEDS)."""
    link_gb_s: float = 0.0
    """GPU-to-GPU bandwidth inside a node per GPU and direction, GB/s: NVLink where the machine has it, else the
    PCIe link (GPU_SPEEDS)."""

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * MIB

    def gpu_counts(self) -> list[int]:
        return sorted({m.gpus for m in self.machines})

    def machine(self, name: str) -> MachineType | None:
        return next((m for m in self.machines if m.name == name), None)

    def default_machine(self, gpus: int) -> MachineType | None:
        """The first listed machine type with `gpus` GPUs (the list is ordered by preference)."""
        return next((m for m in self.machines if m.gpus == gpus), None)


def _m(name: str, gpus: int, vcpus: int, memory_gib: float, local_ssd_count: int = 0,
       gpudirect: str = "") -> MachineType:
    return MachineType(name, gpus, vcpus, memory_gib, local_ssd_count, gpudirect)


# Order inside `machines` matters: the first machine type with a given GPU count is the default
# for that count (e.g. g2-standard-8 rather than g2-standard-4 for one L4, since vLLM needs host
# memory to stage weights and for the CPU swap space).
GPU_SPEEDS: dict[str, tuple[float, float, float]] = {
    # (memory GB/s, dense 16-bit tensor TFLOP/s, GPU-to-GPU GB/s per direction). NVIDIA's datasheets (T4, L4, A100,
    # H100 SXM, H200 SXM, HGX B200; the dense figure is half the "with sparsity" one where only that is printed);
    # NVLink 3/4/5 = 600/900/1800 GB/s both directions together, halved here; T4 and L4 sit on PCIe Gen3/Gen4 x16
    # (16/32 GB/s per direction). As transcribed offline in 2026-11; only planner/throughput.py uses them, to rank
    # layouts, through the efficiencies it fits (bench/fit_layouts.py).
    "nvidia-tesla-t4": (320, 65, 16),
    "nvidia-l4": (300, 121, 32),
    "nvidia-tesla-a100": (1555, 312, 300),
    "nvidia-a100-80gb": (2039, 312, 300),
    "nvidia-h100-80gb": (3350, 989, 450),
    "nvidia-h100-mega-80gb": (3350, 989, 450),
    "nvidia-h200-141gb": (4800, 989, 450),
    "nvidia-b200": (8000, 2250, 900),
}

ACCELERATORS: dict[str, Accelerator] = {
    a.type: a
    for a in (
        Accelerator(
            "nvidia-tesla-t4", "NVIDIA T4", 15_360,
            (_m("n1-standard-8", 1, 8, 30), _m("n1-standard-4", 1, 4, 15),
             _m("n1-standard-16", 2, 16, 60), _m("n1-standard-32", 4, 32, 120)),
            device_name="Tesla T4",
            compact_placement=False, bfloat16=False,
        ),
        Accelerator(
            "nvidia-l4", "NVIDIA L4", 23_034,
            (_m("g2-standard-8", 1, 8, 32), _m("g2-standard-4", 1, 4, 16),
             _m("g2-standard-12", 1, 12, 48), _m("g2-standard-16", 1, 16, 64),
             _m("g2-standard-32", 1, 32, 128), _m("g2-standard-24", 2, 24, 96),
             _m("g2-standard-48", 4, 48, 192), _m("g2-standard-96", 8, 96, 384)),
            device_name="NVIDIA L4",
            compact_placement=True,
        ),
        Accelerator(
            "nvidia-tesla-a100", "NVIDIA A100 40GB", 40_960,
            (_m("a2-highgpu-1g", 1, 12, 85), _m("a2-highgpu-2g", 2, 24, 170),
             _m("a2-highgpu-4g", 4, 48, 340), _m("a2-highgpu-8g", 8, 96, 680),
             _m("a2-megagpu-16g", 16, 96, 1360)),
            device_name="NVIDIA A100-SXM4-40GB",
            compact_placement=True,
        ),
        Accelerator(
            "nvidia-a100-80gb", "NVIDIA A100 80GB", 81_920,
            (_m("a2-ultragpu-1g", 1, 12, 170, 1), _m("a2-ultragpu-2g", 2, 24, 340, 2),
             _m("a2-ultragpu-4g", 4, 48, 680, 4), _m("a2-ultragpu-8g", 8, 96, 1360, 8)),
            device_name="NVIDIA A100-SXM4-80GB",
            compact_placement=True,
        ),
        Accelerator(
            "nvidia-h100-80gb", "NVIDIA H100 80GB", 81_559,
            (_m("a3-highgpu-1g", 1, 26, 234, 2), _m("a3-highgpu-2g", 2, 52, 468, 4),
             _m("a3-highgpu-4g", 4, 104, 936, 8), _m("a3-highgpu-8g", 8, 208, 1872, 16, "GPUDirect-TCPX")),
            device_name="NVIDIA H100 80GB HBM3",
            compact_placement=True,
        ),
        Accelerator(
            "nvidia-h100-mega-80gb", "NVIDIA H100 80GB (Mega)", 81_559,
            (_m("a3-megagpu-8g", 8, 208, 1872, 16, "GPUDirect-TCPXO"),),
            device_name="NVIDIA H100 80GB HBM3",
            compact_placement=True,
        ),
        Accelerator(
            "nvidia-h200-141gb", "NVIDIA H200 141GB", 143_771,
            (_m("a3-ultragpu-8g", 8, 224, 2952, 32, "GPUDirect RDMA"),),
            device_name="NVIDIA H200",
            compact_placement=True,
        ),
        Accelerator(
            "nvidia-b200", "NVIDIA B200", 183_359,
            (_m("a4-highgpu-8g", 8, 224, 3968, 32, "GPUDirect RDMA"),),
            device_name="NVIDIA B200",
            compact_placement=True,
        ),
    )
}
ACCELERATORS = {name: replace(a, memory_gb_s=GPU_SPEEDS[name][0], tflops_16bit=GPU_SPEEDS[name][1],
                              link_gb_s=GPU_SPEEDS[name][2]) for name, a in ACCELERATORS.items()}


@dataclass(frozen=True)
class MachineSeries:
    """What Compute Engine accepts for a machine series: boot and data disk types, ways to buy it."""

    name: str
    prefixes: tuple[str, ...]
    """Machine type names of the series start with one of these."""
    boot_disk_types: tuple[str, ...]
    """Boot disk types, the one the node pool uses first."""
    data_disk_types: tuple[str, ...]
    """Disk types the series can attach (of those the weights disk may use)."""
    provisioning: tuple[str, ...]
    """Accepted accelerator.provisioning values, the default first."""


ON_DEMAND_ETC = ("on-demand", "spot", "reservation", "flex-start")
# Sources (checked 2026-11): Compute Engine "Accelerator-optimized machine family" (supported disk types per
# series: A3 Ultra and A4 attach Hyperdisk only and boot from Hyperdisk Balanced, A3 High/Mega also take
# Persistent Disk, G2 and A2 take Persistent Disk and Hyperdisk ML, N1 no Hyperdisk; Vertex AI's DiskSpec also
# defaults A3 Ultra boot disks to hyperdisk-balanced); Compute Engine "GPU machine types" and "Consumption
# options" (a3-highgpu-1g/2g/4g only as Spot or Flex-start VMs; A3 Ultra and A4 through reservations, Spot or
# Flex-start, not on demand); GKE "About flex-start provisioning" (flex-start node pools for G2, A2, A3, A4).
MACHINE_SERIES: tuple[MachineSeries, ...] = (
    MachineSeries("A3 High (1, 2, 4 GPUs)", ("a3-highgpu-1g", "a3-highgpu-2g", "a3-highgpu-4g"),
                  ("pd-ssd", "pd-balanced", "hyperdisk-balanced"),
                  ("pd-ssd", "pd-balanced", "hyperdisk-balanced", "hyperdisk-ml"), ("flex-start", "spot")),
    MachineSeries("A3 High", ("a3-highgpu-8g",), ("pd-ssd", "pd-balanced", "hyperdisk-balanced"),
                  ("pd-ssd", "pd-balanced", "hyperdisk-balanced", "hyperdisk-ml"), ON_DEMAND_ETC),
    MachineSeries("A3 Mega", ("a3-megagpu",), ("pd-ssd", "pd-balanced", "hyperdisk-balanced"),
                  ("pd-ssd", "pd-balanced", "hyperdisk-balanced", "hyperdisk-ml"), ON_DEMAND_ETC),
    MachineSeries("A3 Ultra", ("a3-ultragpu",), ("hyperdisk-balanced",), ("hyperdisk-balanced", "hyperdisk-ml"),
                  ("flex-start", "spot", "reservation")),
    MachineSeries("A4", ("a4-highgpu",), ("hyperdisk-balanced",), ("hyperdisk-balanced", "hyperdisk-ml"),
                  ("flex-start", "spot", "reservation")),
    MachineSeries("A2", ("a2-",), ("pd-ssd", "pd-balanced"), ("pd-ssd", "pd-balanced", "hyperdisk-ml"),
                  ON_DEMAND_ETC),
    MachineSeries("G2", ("g2-",), ("pd-ssd", "pd-balanced"), ("pd-ssd", "pd-balanced", "hyperdisk-ml"),
                  ON_DEMAND_ETC),
    MachineSeries("N1", ("n1-",), ("pd-ssd", "pd-balanced"), ("pd-ssd", "pd-balanced"),
                  ("on-demand", "spot", "reservation")),
)


def machine_series(machine_type: str) -> MachineSeries:
    """The series of a catalog machine type (the first whose prefix matches; specific prefixes come first)."""
    for series in MACHINE_SERIES:
        if machine_type.startswith(series.prefixes):
            return series
    raise KeyError(f"{machine_type}: no machine series in the catalog")


def machine_family(machine_type: str) -> str:
    """`a3-highgpu-8g` -> `a3`."""
    return machine_type.split("-", 1)[0]


@dataclass(frozen=True)
class DiskType:
    """Read-side facts of a Compute Engine disk type used for the weights image."""

    name: str
    max_readonly_attachments: int
    """How many VMs one disk may be attached to in read-only mode."""
    mib_s_per_gib: float
    """Read throughput a disk gets per provisioned GiB (0 where throughput is provisioned)."""
    baseline_mib_s: float
    """Read throughput every disk gets regardless of size."""
    vm_caps: tuple[tuple[int, float], ...]
    """Per-VM read caps: (vCPUs below which it applies, MiB/s), ascending; the last covers every larger VM."""
    max_size_gib: int
    usd_per_gib_month: float
    """List price of provisioned capacity (us-central1); the planner compares configurations with it."""
    usd_per_mib_s_month: float = 0.0
    """List price of provisioned throughput (Hyperdisk ML), per MiB/s and month."""

    def vm_read_cap(self, vcpus: int) -> float:
        """The read throughput one VM of `vcpus` vCPUs gets from this disk type at most."""
        return next((cap for below, cap in self.vm_caps if vcpus < below), self.vm_caps[-1][1])


# Figures from Compute Engine "Persistent Disk performance" / "Hyperdisk performance limits"
# (checked 2026-11): pd-balanced 0.28 MiB/s per GiB + 140 baseline, pd-ssd 0.48 MiB/s per GiB + 240 baseline,
# per-VM read caps by vCPU count ("Performance by machine type and vCPU count"): 240 MiB/s below 8 vCPUs
# (g2-standard-4, n1-standard-4), 800 below 16 (g2-standard-8/12, a2-*-1g), 1,200 from 16; a persistent disk
# attaches read-only to at most 10 VMs, a Hyperdisk ML volume to up to 2,500. Hyperdisk ML
# throughput is provisioned (we provision what the planner asks for) and capped per VM by the
# machine type; 2,400 / 4,000 MiB/s are the caps for G2/A2 and A3/A4 sizes respectively.
PD_VM_CAPS = ((8, 240.0), (16, 800.0), (1 << 30, 1_200.0))
DISK_TYPES: dict[str, DiskType] = {
    d.name: d
    for d in (
        DiskType("pd-balanced", 10, 0.28, 140, PD_VM_CAPS, 65_536, 0.10),
        # pd-ssd's baseline is 240 MiB/s ("About Persistent Disk performance": Balanced and SSD Persistent Disk
        # offer baseline performance, 140 and 240 MiB/s); it was 0 here, which oversized disks.
        DiskType("pd-ssd", 10, 0.48, 240, PD_VM_CAPS, 65_536, 0.17),
        DiskType("hyperdisk-ml", 2_500, 0.0, 0, ((16, 2_400), (1 << 30, 4_000)), 65_536, 0.08, 0.12),
    )
}

# Prices, us-central1, USD per month (Compute Engine "Disk and image pricing"): pd-ssd $0.17 per GiB (the page's own
# example: a 200 GB SSD Persistent Disk volume costs $34.00 a month), pd-balanced $0.10 per GiB. Hyperdisk ML
# ($0.08 per GiB of capacity, $0.12 per MiB/s of throughput) is as I remember that page: the search tool found no
# Hyperdisk ML price table to check it against (2026-11). They only rank configurations that all meet the load
# target; docs/architecture.md says so.

# Hyperdisk ML's read-only attach limit falls as the volume grows (Compute Engine "About
# Hyperdisk ML"): (largest size in GiB, max attached VMs).
HYPERDISK_ML_ATTACH_LIMITS: tuple[tuple[int, int], ...] = (
    (256, 2_500), (1_024, 600), (2_048, 300), (16_384, 128), (65_536, 30),
)


def readonly_attach_limit(disk_type: str, size_gib: int) -> int:
    """How many VMs may attach one read-only disk of this type and size."""
    if disk_type == "hyperdisk-ml":
        for max_size, limit in HYPERDISK_ML_ATTACH_LIMITS:
            if size_gib <= max_size:
                return limit
        return HYPERDISK_ML_ATTACH_LIMITS[-1][1]
    return DISK_TYPES[disk_type].max_readonly_attachments


@dataclass(frozen=True)
class GeneralMachine:
    """A machine type without GPUs (the system node pool)."""

    name: str
    vcpus: int
    memory_gib: float


SYSTEM_MACHINE = GeneralMachine("e2-standard-4", 4, 16)
"""The created cluster's untainted pool (Compute Engine E2 machine types: 4 vCPUs, 16 GB). On an existing
cluster, the README asks for an untainted pool of at least this size in the serving zone."""

EVICTION_THRESHOLD_GIB = 100 / 1024
"""GKE reserves 100 MiB of memory for kubelet's hard eviction threshold on top of the system reservation."""


def gke_allocatable(vcpus: float, memory_gib: float) -> tuple[float, float]:
    """(CPU cores, memory GiB) a GKE Standard node offers to pods, by GKE's published reservation formula
    (GKE "Plan node sizes": CPU 6% of the first core, 1% of the next, 0.5% of the next 2, 0.25% above 4;
    memory 25% of the first 4 GiB, 20% of the next 4, 10% of the next 8, 6% of the next 112, 2% above 128,
    plus the 100 MiB eviction threshold). Machines under 1 GiB (f1/g1) are out of scope here."""
    cpu = _tiered(vcpus, ((1, 0.06), (2, 0.01), (4, 0.005), (math.inf, 0.0025)))
    memory = _tiered(memory_gib, ((4, 0.25), (8, 0.20), (16, 0.10), (128, 0.06), (math.inf, 0.02)))
    return vcpus - cpu, memory_gib - memory - EVICTION_THRESHOLD_GIB


def _tiered(amount: float, tiers: tuple[tuple[float, float], ...]) -> float:
    """Sum of share x the part of `amount` inside each (upper bound, share) tier, tiers in ascending order."""
    total, lower = 0.0, 0.0
    for upper, share in tiers:
        total += max(0.0, min(amount, upper) - lower) * share
        lower = upper
    return total


MEASURED_ENGINE_START = "nvidia-h200-141gb"
ENGINE_START_SECONDS: dict[tuple[bool, bool], int] = {
    # (multi-node, warm compile cache) -> seconds from container start to /health, less the weights read, measured
    # on H200s (vLLM 0.25.1). One node: `bench/run.py levers` with today's launcher (Triton's cache carried, engine
    # core forked; docs/benchmarks.md "Engine start levers"): cold 77.7 and 89.7 s to /health (2.0 s of weights
    # each), warm 34.1-42.1 s over 8 starts on 3 hosts (~2.2 s of weights); before those two defaults it was 76.4 s
    # warm and 107.7-128.1 s cold. Two Ray nodes: `bench/run.py startup` ("Start-up: compile cache reuse"), 128.5 /
    # 100.3 s, with the engine core spawned and Triton's cache not carried (not re-measured).
    (False, False): 82, (False, True): 37, (True, False): 127, (True, True): 98,
}
"""Process start, imports, (Ray group,) torch.compile, profiling, KV allocation, CUDA graphs. Other GPU types use
the H200 figures until measured; the plan says so."""


T4_USD_HOUR = 0.35
"""N1 machines carry T4s as separately priced accelerators (Compute Engine GPU pricing, us-central1)."""
MACHINE_USD_HOUR: dict[str, float] = {
    # On-demand list price per hour in us-central1, the machine with its bundled GPUs (Compute Engine
    # "VM instance pricing" / "GPU pricing", as transcribed for this catalog in 2026-11 without network access to
    # re-check them): only the spare capacity of autoscaling.headroom is priced with them, in `make plan`. Machine
    # types missing here are shown as unpriced rather than guessed.
    "n1-standard-4": 0.19, "n1-standard-8": 0.38, "n1-standard-16": 0.76, "n1-standard-32": 1.52,
    "g2-standard-4": 0.7068, "g2-standard-8": 0.8536, "g2-standard-12": 1.0004, "g2-standard-16": 1.1472,
    "g2-standard-24": 2.0008, "g2-standard-32": 1.7340, "g2-standard-48": 4.0016, "g2-standard-96": 8.0032,
    "a2-highgpu-1g": 3.6733, "a2-highgpu-2g": 7.3466, "a2-highgpu-4g": 14.6932, "a2-highgpu-8g": 29.3864,
    "a2-megagpu-16g": 55.7395,
    "a2-ultragpu-1g": 5.0688, "a2-ultragpu-2g": 10.1376, "a2-ultragpu-4g": 20.2752, "a2-ultragpu-8g": 40.5504,
    "a3-highgpu-8g": 88.2522,
}


def machine_usd_hour(machine: MachineType) -> float | None:
    """On-demand list price of one node of `machine` per hour, GPUs included; None where the catalog has none."""
    base = MACHINE_USD_HOUR.get(machine.name)
    if base is None:
        return None
    return round(base + (T4_USD_HOUR * machine.gpus if machine.name.startswith("n1-") else 0.0), 4)
