"""Sizing planner: pure functions from model architecture x accelerator to a serving layout.

Memory model per GPU (vLLM's own accounting, simplified):
    usable KV bytes = GPU memory x gpuMemoryUtilization - weights / (TP x PP) - RESERVE
    KV bytes per token = 2 x ceil(layers / PP) x max(kvHeads / TP, 1) x headDim x kv dtype bytes
    KV tokens per replica = usable / KV bytes per token
Layout rule: tensor parallel inside a node, pipeline parallel across nodes, replicas for
throughput. Every rejection is a ConfigError naming the smallest layout that would work.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, replace

from planner.architecture import ModelArchitecture
from planner.catalog import (
    ACCELERATORS,
    DISK_TYPES,
    ENGINE_START_SECONDS,
    GIB,
    MEASURED_ENGINE_START,
    MIB,
    MachineType,
    machine_usd_hour,
)
from planner.commands import DRAIN_SECONDS, RAY_JOIN_TIMEOUT
from planner.compute_class import AUTO_CREATION_MIN_GKE, FLEX_START_MIN_GKE
from planner.config import Rung, Settings
from planner.disks import DiskChoice, choose_weights_disk, disk_read_mib_s, weights_load_seconds
from planner.engine import (
    EngineChoice,
    EngineSettings,
    engine_settings,
)
from planner.errors import ConfigError
from planner.layers import GEMMA4_SOFT_TOKENS
from planner.layout import (
    MEASURED_CROSS_NODE_TCP,
    Compared,
    Fit,
    Layout,
    auto_layout,
    check_explicit_layout,
    engine_choice,
    fit,
    gib_text,
    stack_engine,
    unsized_layout,
)
from planner.memory import (
    cudagraph_bytes,
    default_engine,
    encoder_item,
    kv_dtype_bytes,
    model_weight_bytes,
    multimodal_inputs,
    with_item_floor,
)
from planner.memory_fit import FITTED, MemoryFit

NODE_PROVISIONING_TYPICAL_SECONDS = 150
"""A new GPU node until its GPUs are allocatable, typically: VM create and boot, joining the cluster, and ~30 s of
driver installation (GoogleCloudPlatform/ai-on-gke best-practices/startup-latency.md). An assumption, not measured
here; the worst case is NODE_PROVISIONING_SECONDS."""
IMAGE_PULL_STREAMING_SECONDS = 30
"""With GKE image streaming (the GPU pools enable it): the same study's 5.4 GB Triton image started end to end in
30 s instead of 191 s."""
IMAGE_PULL_SECONDS_PER_GB = 30
"""Without streaming, from that study: (191 - 30) s for 5.4 GB."""
VLLM_IMAGE_GB = 10
"""vllm/vllm-openai compressed size, roughly (components/gpu_node_pool.py sizes the boot disk for it)."""
MAX_NODES_PER_POOL = 1000
"""GKE's limit of nodes per node pool per zone: the pool cannot grow past it."""
PROBE_PERIOD_SECONDS = 10
DOWNLOAD_FLOOR_MIB_S = 50
"""The slowest weights download the Job's deadline allows for (Hugging Face or GCS into one pod)."""
DOWNLOAD_SLACK_SECONDS = 1800
"""Pod scheduling, node scale-up and the final sync on top of the transfer itself."""
def pod_resources(machine: MachineType, gpus_per_pod: int) -> tuple[int, int, int]:
    """(CPU cores, memory GiB, /dev/shm GiB) for a pod using `gpus_per_pod` of the machine's GPUs.

    GKE keeps roughly 6% of CPU and 10% of memory plus system daemons for itself; the rest is shared
    in proportion to the GPUs a pod takes, so replicas sharing a node all fit.
    """
    share = gpus_per_pod / machine.gpus
    cpu = max(1, math.floor((machine.vcpus * 0.94 - 1) * share))
    memory = max(4, math.floor((machine.memory_gib * 0.9 - 3) * share))
    shm = min(64, max(2, memory // 4))
    return cpu, memory, shm


def default_target(metric: str, max_concurrent_sequences: int, max_num_seqs: int = 256) -> float:
    """GKE's guidance: queue depth 3-5 per replica; batch size just under what a replica can hold (its KV cache or
    --max-num-seqs, whichever is smaller: vLLM never runs a larger batch)."""
    if metric == "queue":
        return 3.0
    capacity = min(max_num_seqs, max(1, max_concurrent_sequences))
    return float(max(1, int(capacity * 0.9)))


PAGE_CACHE_GIB_S = 6.0
"""Weights read from the node's page cache: 14.96 GiB in 1.80-2.60 s ("Loading weights took", 9 warm starts on an
H200 host, docs/benchmarks.md "Engine start levers"), rounded down."""
PLACEHOLDER_GRACE_SECONDS = 5
"""terminationGracePeriodSeconds of a headroom placeholder: it exits at once on SIGTERM (launcher.py placeholder)."""
HANDOVER_SECONDS = 10
"""A new serving pod on a placeholder's node: kube-scheduler preempts the placeholder (DefaultPreemption) and binds
once it is gone (at most its grace period), then the container starts from an image already on the node. An
allowance (no cluster here to time it), not a measurement."""
NODE_PROVISIONING_SECONDS = 900
"""The worst case for a new GPU node until its GPUs are allocatable: "up to 15 minutes" (kubernetes/autoscaler,
cluster-autoscaler/utils/gpu/gpu.go). The smoke Job's wait adds it and an image pull without streaming to the
startup budget."""
MIN_WEIGHT_FRACTION = 0.9
"""The download verifies at least this share of the planned weight bytes arrived (shards vary in overhead)."""


SPOT_NOTICE_SECONDS = 30
"""Compute Engine's preemption notice to a Spot VM ("Spot VMs": ACPI G2 soft off, then 30 s): shorter than a
group's drain, and the loss of one node restarts the whole LeaderWorkerSet group."""


@dataclass(frozen=True)
class LayoutOption:
    """One layout the automatic choice compared, as `make plan` prints it."""

    layout: str
    gpus: int
    kv_tokens_per_engine: int
    concurrency_per_engine: int
    """Typical requests one engine runs at once (planner/throughput.py)."""
    output_tokens_per_s_per_gpu: float
    usd_per_million_output_tokens: float | None
    chosen: bool

    def as_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class RungPlan:
    """One rung of the stack (planner/config.py Rung) planned with the stack's one pod shape."""

    key: str
    accelerator: str
    machine_type: str
    provisioning: str
    zones: tuple[str, ...]
    kv_tokens: int
    """KV-cache tokens per replica on this rung's GPUs, the layout planned on the primary."""
    max_concurrent_sequences: int
    max_num_seqs: int
    weights_load_seconds: int
    """One node's share of the weights at the read rate this machine gets from the weights disk."""
    usd_hour: float | None
    """One replica's share of the on-demand list price per hour (its GPUs' share of its nodes; None: not in the
    catalog). Spot and flex-start are billed below it, a reservation as committed."""

    def as_dict(self) -> dict[str, object]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class Sizing:
    accelerator: str
    machine_type: str
    gpus_per_node: int
    nodes_per_replica: int
    tensor_parallel_size: int
    pipeline_parallel_size: int
    gpus_per_replica: int
    gpus_per_pod: int
    parameter_count: int
    weights_gib: float
    weights_gib_per_gpu: float
    kv_cache_gib_per_gpu: float
    kv_cache_tokens_per_replica: int
    max_model_len: int
    max_concurrent_sequences: int
    engine_profile: str
    """The vLLM release whose rules sized the KV cache (planner/engine.py): vllm.image's version, or the profile
    named in the warnings when none exists for it."""
    max_num_seqs: int
    """--max-num-seqs the server runs with (vLLM's default for the GPU unless vllm.extraArgs sets it)."""
    max_num_batched_tokens: int
    cudagraph_gib_per_gpu: float
    """CUDA-graph memory the engine keeps before sizing the KV cache, beyond the family reserve."""
    estimated_load_seconds: int
    weights_load_seconds: int
    """The weights part of estimated_load_seconds: one node's share of the weights at the disk's read rate."""
    node_provisioning_seconds: int
    image_pull_seconds: int
    """With image streaming (the GPU pools enable it)."""
    image_pull_seconds_without_streaming: int
    engine_start_cold_seconds: int
    engine_start_warm_seconds: int
    """With the compile cache a replica of the same layout published (vllm.compileCache)."""
    engine_start_source: str
    time_to_ready_cold_seconds: int
    """A new replica on a new node: provisioning + image pull + weights + engine start, empty compile cache."""
    time_to_ready_warm_seconds: int
    headroom_slots: int
    """autoscaling.headroom: spare serving-shaped slots held by placeholder pods."""
    headroom_nodes: int
    """Nodes those slots keep (a multi-node group needs a placeholder per node)."""
    headroom_usd_hour: float | None
    """The spare nodes' on-demand list price per hour (None: the catalog has no price for the machine type)."""
    time_to_ready_headroom_seconds: int
    """A new replica on a spare slot: handover + weights from the page cache + engine start (warm when the compile
    cache is on)."""
    startup_probe_seconds: int
    download_deadline_seconds: int
    weights_disk_gib: int
    weights_disk_type: str
    provisioning: str
    disk_read_mib_s: int
    disk_provisioned_mib_s: int
    weights_disk_usd_month: float
    """The serving disk's list price per month (catalog prices, us-central1)."""
    min_nodes: int
    max_nodes: int
    layout_source: str
    pod_cpu: int
    pod_memory_gib: int
    pod_shm_gib: int
    hpa_target: float
    min_weight_bytes: int
    smoke_wait_seconds: int
    fingerprint: str
    data_parallel_size: int = 1
    """Engines per replica (--data-parallel-size): one API server balances over them."""
    expert_parallel: bool = False
    """--enable-expert-parallel."""
    kv_cache_tokens_per_engine: int = 0
    """What vLLM's log reports as its KV cache: one engine's (data-parallel rank's) tokens."""
    layouts_compared: tuple[LayoutOption, ...] = ()
    """The layouts the automatic choice weighed (empty when parallelism was stated or none fits a node)."""
    warnings: tuple[str, ...] = ()
    rungs: tuple[RungPlan, ...] = ()
    """Every rung, planned (stacks with a ComputeClass: several zones, ways of buying or machines)."""

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()
                                  if k not in ("rungs", "layouts_compared")}
        out["layouts_compared"] = [o.as_dict() for o in self.layouts_compared]
        if self.rungs:
            out["rungs"] = [r.as_dict() for r in self.rungs]
        return out


def plan_rungs(settings: Settings, choice: EngineChoice, layout: Layout, weights_bytes: float, kv_bytes: float,
               disk: DiskChoice) -> list[RungPlan]:
    """Each rung with the one pod shape planned on the primary: its KV tokens (refused when they do not hold one
    vllm.maxModelLen sequence), its weights load from the weights disk and its list price. Spot rungs for a
    multi-node group need accelerator.spotMultiNode."""
    arch, accs, vllm = settings.model.architecture, settings.accelerator, settings.vllm
    rungs = accs.rungs or (Rung("accelerator", accs.type, accs.machine_type, accs.provisioning, accs.zones),)
    planned = []
    for rung in rungs:
        if rung.provisioning == "spot" and layout.nodes > 1 and not accs.spot_multi_node:
            raise ConfigError(f"{rung.key}.provisioning", "spot",
                              f"a replica is a group of {layout.nodes} nodes: a Spot VM gets {SPOT_NOTICE_SECONDS} s "
                              f"of notice, less than the group's {DRAIN_SECONDS} s drain, and losing one node "
                              "restarts the whole group; set accelerator.spotMultiNode: true to accept that, or "
                              "drop spot")
        engine = engine_settings(choice.profile, rung.catalog, vllm.extra_args, vllm.dtype)
        got = fit(arch, rung.catalog, layout, vllm.gpu_memory_utilization, weights_bytes, kv_bytes,
                  vllm.max_model_len, engine)
        if rung.key != "accelerator" and got.kv_tokens < vllm.max_model_len and (not arch.unsized
                                                                                 or not got.weights_fit):
            held = (f"holds only {got.kv_tokens} KV tokens per replica" if got.weights_fit else
                    f"cannot hold {gib_text(got.weights_per_gpu)} of weights per GPU")
            raise ConfigError(f"{rung.key}.type", rung.type,
                              f"{rung.catalog.display} at {layout.describe()} (the pod shape planned on "
                              f"{accs.machine_type}) {held}, less than one vllm.maxModelLen ({vllm.max_model_len}) "
                              "sequence; use a larger GPU or drop this fallback")
        provisioned = disk.read_mib_s if DISK_TYPES[disk.disk_type].mib_s_per_gib == 0 else 0
        read = disk_read_mib_s(disk.disk_type, disk.size_gib, rung.machine, provisioned)
        price = machine_usd_hour(rung.machine)
        planned.append(RungPlan(
            rung.key, rung.type, rung.machine_type, rung.provisioning, rung.zones, got.replica_tokens,
            got.full_sequences(vllm.max_model_len), engine.max_num_seqs * layout.dp,
            round(weights_load_seconds(weights_bytes, layout.nodes, read)),
            None if price is None else round(price * layout.gpus / rung.machine.gpus, 2)))
    return planned


CHECKPOINT_COUNT_TOLERANCE = 0.03
"""The weights bound of the GPU calibration (docs/benchmarks.md): a count from config.json further than this from the
checkpoint's tensors is reported, since one of the two is not what vLLM loads."""


def unsized_under(settings: Settings, what: str) -> Settings:
    """The settings with the model planned as unsized (every layer's KV cache counted as full attention, the plan
    warning that it is not verified) where the engine release's rules for its caches are not the planner's: `what`
    names them. The weights stay as counted from the model's own layers."""
    arch = settings.model.architecture
    full = replace(arch, unsized=what, layer_kinds=("full",) * arch.num_layers, cache_slots=1)
    return replace(settings, model=replace(settings.model, architecture=full))


def plan(settings: Settings) -> Sizing:
    """The serving layout and its derived numbers for validated settings (raises ConfigError)."""
    arch, accs, par = settings.model.architecture, settings.accelerator, settings.parallelism
    params = arch.parameter_count()
    counted_bytes = None
    if settings.model.weights_gib is not None:
        weights_bytes = settings.model.weights_gib * GIB
    elif settings.model.checkpoint_bytes is not None:
        weights_bytes = settings.model.checkpoint_bytes
        if not arch.quantized_parts or arch.weight_bytes_per_param:
            counted_bytes = model_weight_bytes(arch, settings.vllm.dtype)
    else:
        if arch.quantized_parts and not arch.weight_bytes_per_param:
            raise ConfigError("model.weightsGib", None,
                              f"{arch.name} is quantized with quant_method {arch.quant_method!r}, which the planner "
                              "does not weigh yet (it reads fp8, fbgemm_fp8, mxfp4, awq, gptq and compressed-tensors); "
                              "set model.weightsGib to the checkpoint's size")
        weights_bytes = model_weight_bytes(arch, settings.vllm.dtype)
    weighed = ("model.weightsGib as stated" if settings.model.weights_gib is not None
               else f"the checkpoint's tensors ({settings.model.tensors_from})"
               if settings.model.checkpoint_bytes is not None
               else "weights counted from config.json as a plain decoder")
    choice = engine_choice(settings)
    if choice.profile.kv_pool != "grouped" and arch.compressed_attention:
        settings = unsized_under(settings, "DeepSeek V4's compressed caches as vLLM 0.25.1 groups them by rules of its "
                                           "own (group_and_unify_kv_cache_specs)")
        arch = settings.model.architecture
    engine = stack_engine(settings, choice)
    kv_bytes = kv_dtype_bytes(settings.vllm.kv_cache_dtype, settings.vllm.dtype, arch, engine)
    refuse_unsupported_soft_tokens(arch, engine)
    refuse_items_over_a_batch(arch, replace(engine, max_model_len=settings.vllm.max_model_len))

    compared: list[Compared] = []
    if par.tensor is None and par.pipeline is None and par.data is None and par.expert is None:
        chooser = unsized_layout if arch.unsized else auto_layout
        (layout, compared), source = chooser(settings, engine, weights_bytes, kv_bytes), "auto"
    else:
        expert = bool(par.expert) if par.expert is not None else bool(arch.num_experts and (par.data or 1) > 1)
        layout = check_explicit_layout(settings, engine, par.tensor or 1, par.pipeline or 1, weights_bytes, kv_bytes,
                                       par.data or 1, expert)
        source = "config"
    result = fit(arch, accs.catalog, layout, settings.vllm.gpu_memory_utilization, weights_bytes, kv_bytes,
                 settings.vllm.max_model_len, engine)

    warnings = list(settings.warnings)
    if par.expert and not arch.num_experts:
        warnings.append(f"parallelism.expert: {arch.name} has no routed experts, so there is nothing to split; "
                        "vLLM serves it as without the flag")
    if choice.warning:
        warnings.append(choice.warning)
    if counted_bytes is not None and abs(counted_bytes / weights_bytes - 1) > CHECKPOINT_COUNT_TOLERANCE:
        warnings.append(f"{settings.model.tensors_key}: the checkpoint's tensors weigh {gib_text(weights_bytes)} "
                        f"as vLLM loads them, the count from config.json {gib_text(counted_bytes)} "
                        f"({counted_bytes / weights_bytes - 1:+.1%}); the plan uses the tensors")
    if arch.unsized:
        taken = "as stated" if source == "config" else "chosen with every layer's KV cache counted as full attention"
        warnings.append(f"{arch.name}: {arch.unsized}, which the planner does not size yet; the plan takes "
                        f"parallelism (tensor={layout.tp}, pipeline={layout.pp}) {taken} and {weighed}, and "
                        f"does not verify the KV tokens per replica ({result.kv_tokens:,} as if every layer were "
                        "full attention), that one sequence fits, or an HPA target derived from them")
    if arch.uncounted_towers and weighed.startswith("weights counted") and multimodal_inputs(arch, engine):
        warnings.append(f"{arch.name}: {arch.uncounted_towers} are not in the weights counted from config.json (the "
                        f"decoder's alone, {gib_text(weights_bytes)}), so the KV tokens per replica "
                        f"({result.kv_tokens:,}) are over-stated by their weights and profile; set model.weightsGib, "
                        "give the checkpoint's tensors (model.tensorsFile), or serve it text-only with "
                        "vllm.extraArgs --language-model-only")
    if arch.vision_parameters and not arch.encoder_input and multimodal_inputs(arch, engine):
        tower = f"{arch.architecture}'s" if arch.architecture else "its"
        warnings.append(f"{arch.name}: the profile vLLM runs on {tower} vision encoder (its "
                        "largest dummy image or video batch, before the KV cache is sized) is not planned for this "
                        f"tower, so the KV tokens per replica ({result.kv_tokens:,}) may be over-stated by its "
                        "activations; vllm.extraArgs --language-model-only serves it text-only, with no encoder "
                        "profile")
    if unread_video_size(arch, engine):
        warnings.append(f"vllm.extraArgs: --mm-processor-kwargs sets the video size of {arch.name}, whose dummy "
                        "video the plan does not size (it takes the image as the encoder profile's item), so the KV "
                        f"tokens per replica ({result.kv_tokens:,}) are not verified against a larger video")
    concurrency = result.full_sequences(settings.vllm.max_model_len)
    if concurrency < par.min_concurrent_sequences and not arch.unsized:
        warnings.append(f"the KV cache holds {concurrency} full-length sequences per replica, fewer than "
                        f"parallelism.minConcurrentSequences ({par.min_concurrent_sequences})")
    if layout.nodes > 1 and not accs.catalog.compact_placement:
        warnings.append(f"{accs.machine_type} does not support compact placement; "
                        "pipeline stages will talk across the zone's network")
    if layout.nodes > 1 and accs.machine.gpudirect:
        warnings.append(f"{accs.machine_type} offers {accs.machine.gpudirect} for GPU traffic between nodes, which "
                        f"this program does not set up: the {layout.nodes} nodes of a replica talk over TCP on the "
                        f"primary NIC. Keep tensor parallelism inside a node ({MEASURED_CROSS_NODE_TCP})")

    if settings.weights.size_gib is not None and settings.weights.size_gib * GIB < weights_bytes:
        raise ConfigError("weights.sizeGib", settings.weights.size_gib,
                          f"smaller than the model's weights ({gib_text(weights_bytes)})")
    max_nodes = settings.autoscaling.max_replicas * layout.nodes
    if max_nodes > MAX_NODES_PER_POOL:
        raise ConfigError("autoscaling.maxReplicas", settings.autoscaling.max_replicas,
                          f"{max_nodes} nodes ({layout.nodes} per replica) exceed what one GKE node pool may grow "
                          f"to in a zone ({MAX_NODES_PER_POOL}); use at most {MAX_NODES_PER_POOL // layout.nodes}")
    disk, _ = choose_weights_disk(settings, weights_bytes, accs.machine, layout.nodes, max_nodes)
    if not disk.meets(settings.weights.load_seconds):
        warnings.append(f"no weights disk {accs.machine_type} attaches ({', '.join(settings.weights.disk_types)}) "
                        f"loads a node's {gib_text(weights_bytes / layout.nodes)} within weights.loadSeconds "
                        f"({settings.weights.load_seconds} s); the fastest, {disk.disk_type} at "
                        f"{disk.read_mib_s:,.0f} MiB/s per VM, takes {disk.load_seconds:.0f} s")
    disk_gib, read_mib_s, weights_load = disk.size_gib, disk.read_mib_s, disk.load_seconds
    rungs = plan_rungs(settings, choice, layout, weights_bytes, kv_bytes, disk)
    # Values every rung shares take the worst rung: the slowest weights load (startup probe, smoke wait), the
    # smallest batch capacity (HPA target), the smallest machine (pod requests).
    weights_load = max([weights_load, *(r.weights_load_seconds for r in rungs[1:])])
    worst_concurrency = min(concurrency, *(r.max_concurrent_sequences for r in rungs))
    worst_seqs = min(engine.max_num_seqs * layout.dp, *(r.max_num_seqs for r in rungs))
    if accs.compute_class and layout.nodes > 1 and len(accs.pool_zones) > 1 and accs.catalog.compact_placement:
        warnings.append(f"compact placement needs one zone: the node pool spans {', '.join(accs.pool_zones)}, so the "
                        f"{layout.nodes} nodes of a group are kept in one zone and pool (pod affinity) but not "
                        "placed close together; list one zone for compact placement")
    if accs.compute_class and not settings.cluster.create:
        warnings.append(f"the ComputeClass auto-creates node pools: an existing cluster must run GKE "
                        f"{AUTO_CREATION_MIN_GKE} or later (flex-start GPUs: {FLEX_START_MIN_GKE}), which "
                        "`pulumi preview` cannot check")
    multi = layout.nodes > 1
    cold, warm = ENGINE_START_SECONDS[(multi, False)], ENGINE_START_SECONDS[(multi, True)]
    if not settings.vllm.compile_cache:
        warm = cold
    engine_source = ("measured on H200 (docs/benchmarks.md)" if accs.type == MEASURED_ENGINE_START else
                     f"H200 measurement; not measured on {accs.type}")
    pull = IMAGE_PULL_STREAMING_SECONDS
    pull_plain = IMAGE_PULL_SECONDS_PER_GB * VLLM_IMAGE_GB
    load = weights_load + cold  # the startup probe's basis: a cold start
    # The leader's startup probe runs from its container start: a multi-node leader may first wait up to
    # RAY_JOIN_TIMEOUT for workers on nodes still being created, then load and start. A probe budget shorter
    # than that kills the leader mid-wait and the group is recreated, losing the launcher's diagnostic.
    join_wait = RAY_JOIN_TIMEOUT if layout.nodes > 1 else 0
    probe = int(math.ceil((join_wait + 2 * load + 60) / PROBE_PERIOD_SECONDS) * PROBE_PERIOD_SECONDS)
    download = max(3600, math.ceil(weights_bytes / MIB / DOWNLOAD_FLOOR_MIB_S) + DOWNLOAD_SLACK_SECONDS)

    spare_nodes = settings.autoscaling.headroom * layout.nodes
    price = machine_usd_hour(accs.machine)
    cached = weights_bytes / layout.nodes / GIB / PAGE_CACHE_GIB_S
    gpus_per_pod = layout.gpus if layout.nodes == 1 else accs.gpus_per_node
    machines = [accs.machine, *(r.machine for r in accs.rungs)]
    pod_cpu, pod_memory, pod_shm = (min(values) for values in zip(*(pod_resources(m, gpus_per_pod)
                                                                    for m in machines), strict=True))
    hpa_target = settings.autoscaling.target or default_target(settings.autoscaling.metric, worst_concurrency,
                                                                 worst_seqs)
    # Anything that changes what is served: the smoke Job is renamed (so re-run) when this changes.
    served = f"{settings.model.id}@{settings.model.revision}|{settings.vllm.image}|{layout.key()}|{settings.vllm}"
    return Sizing(
        accelerator=accs.type, machine_type=accs.machine_type, gpus_per_node=accs.gpus_per_node,
        nodes_per_replica=layout.nodes, tensor_parallel_size=layout.tp, pipeline_parallel_size=layout.pp,
        gpus_per_replica=layout.gpus, gpus_per_pod=gpus_per_pod,
        parameter_count=params, weights_gib=round(weights_bytes / GIB, 2),
        weights_gib_per_gpu=round(result.weights_per_gpu / GIB, 2),
        kv_cache_gib_per_gpu=round(result.usable_per_gpu / GIB, 2),
        kv_cache_tokens_per_replica=result.replica_tokens, max_model_len=settings.vllm.max_model_len,
        max_concurrent_sequences=concurrency, engine_profile=engine.profile.version,
        max_num_seqs=engine.max_num_seqs, max_num_batched_tokens=engine.max_num_batched_tokens,
        cudagraph_gib_per_gpu=round(cudagraph_bytes(arch, layout, engine) / GIB, 2),
        estimated_load_seconds=round(load),
        weights_load_seconds=round(weights_load), node_provisioning_seconds=NODE_PROVISIONING_TYPICAL_SECONDS,
        image_pull_seconds=pull, image_pull_seconds_without_streaming=pull_plain, engine_start_cold_seconds=cold,
        engine_start_warm_seconds=warm, engine_start_source=engine_source,
        time_to_ready_cold_seconds=round(NODE_PROVISIONING_TYPICAL_SECONDS + pull + weights_load + cold),
        time_to_ready_warm_seconds=round(NODE_PROVISIONING_TYPICAL_SECONDS + pull + weights_load + warm),
        headroom_slots=settings.autoscaling.headroom, headroom_nodes=spare_nodes,
        headroom_usd_hour=None if price is None else round(spare_nodes * price, 2),
        time_to_ready_headroom_seconds=round(HANDOVER_SECONDS + cached + warm),
        startup_probe_seconds=probe, download_deadline_seconds=download, weights_disk_gib=disk_gib,
        weights_disk_type=disk.disk_type, provisioning=accs.provisioning,
        disk_read_mib_s=int(read_mib_s), disk_provisioned_mib_s=disk.provisioned_mib_s,
        weights_disk_usd_month=disk.usd_month,
        min_nodes=settings.autoscaling.min_replicas * layout.nodes,
        max_nodes=max_nodes,
        layout_source=source, pod_cpu=pod_cpu, pod_memory_gib=pod_memory, pod_shm_gib=pod_shm,
        hpa_target=hpa_target, min_weight_bytes=int(weights_bytes * MIN_WEIGHT_FRACTION),
        smoke_wait_seconds=probe + NODE_PROVISIONING_SECONDS + pull_plain,
        fingerprint=hashlib.sha256(served.encode()).hexdigest()[:16], warnings=tuple(warnings),
        rungs=tuple(rungs) if accs.compute_class else (),
        data_parallel_size=layout.dp, expert_parallel=layout.ep, kv_cache_tokens_per_engine=result.kv_tokens,
        layouts_compared=tuple(layout_options(compared, layout, price, accs.gpus_per_node)),
    )


def layout_options(compared: list[Compared], chosen: Layout, node_usd_hour: float | None,
                   gpus_per_node: int) -> list[LayoutOption]:
    options = []
    for c in compared:
        rate = c.estimate.tokens_per_s_per_gpu
        usd = (node_usd_hour / gpus_per_node / (rate * 3600) * 1e6 if node_usd_hour is not None and rate > 0
               else None)
        options.append(LayoutOption(c.layout.describe(), c.layout.gpus, c.kv_tokens, c.estimate.concurrency,
                                    round(rate), None if usd is None else round(usd, 3), c.layout == chosen))
    return options


FAMILIES = (("mla", "MLA"), ("indexed", "sparse indexer"),
            ("csa", "compressed sparse attention"), ("linear", "hybrid linear attention"),
            ("mamba", "hybrid Mamba-2"), ("mamba1", "hybrid Mamba-1"), ("kda", "hybrid Kimi Delta Attention"),
            ("lightning", "hybrid lightning attention"), ("sliding", "sliding window"),
            ("chunked", "chunked local attention"), ("vision", "multimodal"), ("experts", "MoE"))


def families(arch: ModelArchitecture) -> list[str]:
    """The families a model belongs to, as the calibration table names them (quantization included)."""
    kinds = set(arch.kinds)
    found = [label for key, label in FAMILIES if (key == "mla" and arch.kv_lora_rank) or key in kinds
                 or (key == "vision" and arch.vision_parameters) or (key == "experts" and arch.num_experts)]
    if arch.quantized_parts:
        found.append(f"quantized {arch.quant_method}")
    return found or ["dense"]


def unread_video_size(arch: ModelArchitecture, engine: EngineSettings) -> bool:
    """Whether --mm-processor-kwargs sizes a video the plan does not size: a Qwen-VL family whose dummy video is left
    out of the encoder item (Qwen3-VL, Qwen3.5: planner/memory.py encoder_item) with the video scope's size set and
    video inputs on."""
    item = arch.encoder_input
    return (bool(item) and bool(item.unit) and not item.video_groups and multimodal_inputs(arch, engine)
            and "video" not in engine.modalities_off and engine.vision_sizes[1] != (None, None))


def refuse_items_over_a_batch(arch: ModelArchitecture, engine: EngineSettings) -> None:
    """vLLM's start-up refusal of a multimodal item larger than one batch where items are scheduled whole
    (vllm/v1/core/encoder_cache_manager.py compute_mm_encoder_budget: "Chunked MM input disabled but
    max_tokens_per_mm_item ... is larger than max_num_batched_tokens"): with --disable-chunked-mm-input, and for models
    that attend bidirectionally over an item, for which vLLM forces it (vllm/platforms/cuda.py; Gemma 3 with 20
    pan-and-scan crops at 2,048 batched tokens exited so on the GPU host's 0.25.1 too). The item is the plan's
    (planner/memory.py encoder_item); towers whose item is not read are not checked."""
    if not arch.encoder_input or not multimodal_inputs(arch, engine):
        return
    engine = with_item_floor(arch, engine)
    tokens = encoder_item(arch, engine)[1]
    if (arch.image_prefix_lm or not engine.chunked_mm_input) and tokens > engine.max_num_batched_tokens:
        why = ("--disable-chunked-mm-input schedules each multimodal item whole" if not engine.chunked_mm_input else
               f"vLLM schedules each multimodal item of {arch.name} whole (bidirectional attention over it)")
        raise ConfigError("vllm.extraArgs", f"--max-num-batched-tokens {engine.max_num_batched_tokens}",
                          f"{arch.name}'s largest multimodal item is {tokens:,} tokens and {why}, so vLLM refuses to "
                          f"start; give --max-num-batched-tokens {tokens} or more, or make the item smaller "
                          "(--mm-processor-kwargs: fewer pan-and-scan crops, a smaller max_pixels)")


def refuse_unsupported_soft_tokens(arch: ModelArchitecture, engine: EngineSettings) -> None:
    """vLLM's refusal of a Gemma 4 max_soft_tokens its processor does not take: Gemma4MultiModalProcessor raises
    'Unsupported max_soft_tokens value' while it builds the profile's dummy batch, so the server exits at start
    (vllm/model_executor/models/gemma4_mm.py, _SUPPORTED_SOFT_TOKENS)."""
    given = engine.max_soft_tokens
    if not arch.encoder_input or not arch.encoder_input.pool or given is None or not multimodal_inputs(arch, engine):
        return
    if given not in GEMMA4_SOFT_TOKENS:
        raise ConfigError("vllm.extraArgs", f"--mm-processor-kwargs max_soft_tokens={json.dumps(given)}",
                          f"{arch.name}'s processor takes max_soft_tokens of "
                          f"{', '.join(map(str, GEMMA4_SOFT_TOKENS))} only, and vLLM exits at start on any other")


def single_gpu_fit(arch: ModelArchitecture, accelerator: str, utilization: float, max_len: int,
                   dtype: str = "auto", kv_cache_dtype: str = "auto", tp: int = 1, pp: int = 1,
                   version: str = "0.25.1", fitted: MemoryFit = FITTED, runner: str = "default",
                   router_fake: bool = False, extra_args: tuple[str, ...] = ()) -> Fit:
    """The planner's numbers for one layout, as `bench/calibrate.py` and `bench/run.py` compare them with vLLM (the
    GPU hosts run 0.25.1, so that profile by default; `runner`: "v2" / "v1" with
    VLLM_USE_V2_MODEL_RUNNER=1 / =0;
    `router_fake`: with 0.32.0's fake of the fused router kernel registered, bench/calibrate.py --router-fake;
    `extra_args`: the vLLM flags the server gets beyond the defaults, bench/calibrate.py --extra)."""
    acc = ACCELERATORS[accelerator]
    nodes = 1 if tp * pp <= max(m.gpus for m in acc.machines) else pp
    engine = default_engine(acc, version, runner, router_fake, extra_args, dtype)
    return fit(arch, acc, Layout(tp, pp, nodes), utilization, model_weight_bytes(arch, dtype),
               kv_dtype_bytes(kv_cache_dtype, dtype, arch, engine), max_len, engine, fitted)
