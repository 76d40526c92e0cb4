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
import math
from dataclasses import dataclass

from planner.architecture import DTYPE_BYTES, ModelArchitecture
from planner.catalog import (
    ACCELERATORS,
    DISK_TYPES,
    ENGINE_START_SECONDS,
    GIB,
    MEASURED_ENGINE_START,
    MIB,
    Accelerator,
    MachineType,
    machine_usd_hour,
    readonly_attach_limit,
)
from planner.commands import DRAIN_SECONDS, RAY_JOIN_TIMEOUT
from planner.compute_class import AUTO_CREATION_MIN_GKE, FLEX_START_MIN_GKE
from planner.config import Rung, Settings
from planner.engine import (
    DEFAULT_PROFILE,
    PROFILES,
    EngineChoice,
    EngineProfile,
    EngineSettings,
    engine_settings,
    profile_for_image,
)
from planner.errors import ConfigError
from planner.stack_schema import VllmConfig

RESERVE_GIB = 2.0
"""Per-GPU memory outside weights and KV cache of a dense model where the parts model below does not apply (batch
settings other than the ones it was fitted at): 1.83-1.90 GiB measured on an H200 (vLLM 0.25.1)."""
RESERVE_MOE_GIB = 4.2
"""The same for a mixture-of-experts model (3.96-4.31 GiB measured on Qwen3-30B-A3B, Qwen3-Next, gpt-oss)."""
RESERVE_MLA_GIB = 12.5
"""The same for multi-head latent attention (DeepSeek V3, 128 heads: 12.48 GiB)."""

# Memory outside weights and KV cache, by parts (vLLM's MemoryProfilingResult: torch peak increase, non-torch
# increase, and the CUDA-graph memory the runner keeps out of the KV cache). Fitted by bench/fit.py on the 52
# started checkpoints (31 on an H200, 21 on an H100) and 2 ablations of vLLM 0.25.1 in docs/benchmarks/results.json
# (TP=1, --max-num-seqs 1024, --max-num-batched-tokens 8192): the rows each constant is fitted on are named there,
# tests/unit/test_fit.py holds these values to it, and docs/benchmarks.md "Planner calibration" keeps each
# validation batch as it was predicted before its run.
PEAK_FIT_SETTINGS = (1024, 8192)
"""(max_num_seqs, max_num_batched_tokens) of the runs the peak was fitted on; elsewhere the reserves above apply."""
PEAK_BASE_GIB = -1.0928
PEAK_PER_LOGITS = 2.1236
"""Per GiB of the sampler's float32 logits for max_num_seqs sequences (max_num_seqs x vocab x 4 bytes)."""
PEAK_PER_HIDDEN = 17.5904
"""Per GiB of one bf16 hidden-state tensor of max_num_batched_tokens tokens (tokens x hidden x 2 bytes). With the
two terms above: the peak while the profile samples (fitted_peak_gib)."""
FORWARD_BASE_GIB = 0.1541
FORWARD_PER_HIDDEN = 0.8541
FORWARD_PER_MLP = 1.6032
"""The peak while the profile runs the forward: a base, per GiB of the hidden-state tensor and per GiB of the
widest dense MLP's up-projection output (PeakFeatures.mlp). The dense peak is the larger of the two phases, since
V2's profile runs the forward, then the sampler (vllm/v1/worker/gpu/model_runner.py profile_run). On the 35 dense
rows the two lines leave residuals of -0.43..+0.32 GiB (-0.48..+0.40 leaving each out); one line over both phases
left -0.53..+0.39 on 26 of them, and over-promised 0.3-0.4 GiB where the MLP is wide for the vocabulary."""
PEAK_MARGIN_GIB = 0.35
"""Added to every fitted peak: the KV bound is asymmetric (never more than 0.5% over, up to 1% under), so the fit is
leaned to the safe side: the smallest margin in 0.01 GiB steps (with LOAD_OVERHEAD_GIB) under which no calibration
row and no row of a batch in the fit is over +0.5% (bench/fit.py smallest_margin prints it). The row that sets it is
GLM-4.5 cut to 6 layers (+0.50% at 0.34), whose V1 CUDA-graph estimate was 2.07 GiB against the 0.60 reserved
(GRAPHS_MOE_GIB)."""
V1_SAMPLER_PER_LOGITS = 1.5046
"""The V1 runner's profiled sampler, per GiB of the float32 logits, on top of the dense peak: V1 samples the profile
batch with top-k and top-p over the whole vocabulary (vllm/v1/worker/gpu_model_runner.py, _dummy_sampler_run: a sort
of the logits), V2 skips both (vllm/v1/worker/gpu/model_runner.py), and the dense rows ran on V2."""
V1_ATTENTION_PER_QUERY = 10.7812
"""The V1 runner's attention, per GiB of one bf16 query tensor of the batch on this GPU: V1's profile runs attention
(profile_run -> _dummy_run), V2's skips it (skip_attn=True). Measured directly by GLM-4.5-Air cut to 8 layers with 96
and with 64 heads (docs/benchmarks/results.json calibration_ablations: 4.64 against 4.32 GiB)."""
V1_WORKSPACE_REUSE = -0.7156
"""Per GiB of MoE workspace, what the V1 transients above give back (negative): the peak is a maximum over the
forward and the sampler, and a large persistent workspace leaves them blocks to reuse (Mixtral, 1.31 GiB of workspace,
shows almost no V1 excess). The three V1 terms are fitted together on every row the V1 runner served (MoE, MLA and
hybrid)."""
MOE_WORKSPACE_UNMANAGED = frozenset({"mxfp4"})
"""Quantization methods whose fused-MoE kernel on Hopper allocates its buffers inside the kernel, not in vLLM's
persistent workspace (vLLM's mxfp4 oracle picks OAITritonMxfp4ExpertsMonolithic), so nothing stays allocated."""
NON_TORCH_GIB = 0.2231
"""Memory outside torch's allocator that the profiled forward adds (0.22-0.24 GiB on every run; the mean)."""
BASELINE_GIB = 0.5403
"""What an H200 holds before vLLM profiles (CUDA context, allocator pools): gpuMemoryUtilization x total less the
logged non-KV total less the logged available KV memory on the V2 runs (no graph estimate subtracted), the mean."""
BASELINE_H100_GIB = 0.4222
"""The same on an H100 80GB: 0.41-0.42 GiB on the 18 V2 rows of validation batches 5-8, the mean. Set from batch 5
alone first (0.423), it held on the 14 rows of batches 6-8 before they joined the fit."""
BASELINE_BY_GPU = {"nvidia-h200-141gb": "BASELINE_GIB", "nvidia-h100-80gb": "BASELINE_H100_GIB"}
"""The GPUs the baseline was measured on, and the name of the constant that holds each (bench/fit.py fits one per
GPU under that name)."""
BASELINE_GIB_BY_GPU = {"nvidia-h200-141gb": BASELINE_GIB, "nvidia-h100-80gb": BASELINE_H100_GIB}
"""The same GPUs with their measured values."""

GRAPHS_DENSE_BASE_GIB = 0.4316
GRAPHS_DENSE_PER_KHIDDEN_GIB = 0.1288
"""CUDA graphs as Model Runner V2 captures them (0.25.1, "Graph capturing finished ... took N GiB"): 0.48-2.56 GiB
on 36 runs, a line in the hidden width. vLLM 0.32.0 keeps them out of the KV cache; 0.25.1's V2 did not (its estimate
a stub); 0.32.0 itself cannot start here (its torch needs 2.13)."""
GRAPHS_MOE_GIB = 0.6000
"""The V1 runner's CUDA-graph estimate for MoE and hybrid models ("Estimated CUDA graph memory": 0.40-0.85 GiB on 7
runs, 2.07 on GLM-4.5; the median). It is the largest FULL graph's first capture plus the second capture's delta
times the further graphs, and that first capture moves in steps of the allocator's segments (512 MiB with 64 heads,
768 MiB with 96 on GLM-4.5-Air). The median, not the mean: on GLM-4.5 the second PIECEWISE capture took 26 MiB where
every other row took 1 MiB, so vLLM extrapolated 2.07 GiB for a capture that then took 1.04; the mean would take
0.18 GiB from every other MoE model for that one row."""
GRAPHS_MLA_PER_KHIDDEN_GIB = 0.5971
"""The V1 runner's CUDA-graph estimate for MLA models, per 1,000 of hidden size (4.28, 4.18 and 2.24 GiB at hidden
7168: DeepSeek-V3, Kimi-K2.5, Kimi-K2; 0.89 GiB at 2048: Moonlight). The largest ratio: Kimi-K2 and Kimi-K2.5 are
one shape and their estimates differ by 2 GiB, so the safe side is kept; a constant (4.28 GiB) reserved 3.4 GiB too
much for Moonlight."""
LOAD_OVERHEAD_GIB = 0.05
"""What vLLM's `Model loading took` counts beyond the parameters and the rotary caches (rotary_cache_bytes): -0.01 to
+0.18 GiB on the 43 started checkpoints, median 0.02; the unquantized ones up to 0.06 but Gemma 3 (0.15) and
Qwen2.5-VL (0.10), the quantized ones up to 0.18 (AWQ, kernel workspaces). 0.05 keeps every row within the 3%
weights bound (-2.5% on the AWQ 7B)."""


def baseline_gib(gpu: str) -> float:
    """What this GPU holds before vLLM profiles; on a GPU never measured, the largest measured value (the side that
    promises fewer KV tokens)."""
    measured = BASELINE_GIB_BY_GPU
    return measured.get(gpu, max(measured.values()))


def default_engine(acc: Accelerator, version: str = DEFAULT_PROFILE) -> EngineSettings:
    return engine_settings(PROFILES[version], acc.memory_bytes, acc.type)


def runner_v2(arch: ModelArchitecture, engine: EngineSettings) -> bool:
    """Whether the engine serves this model on Model Runner V2 (planner/engine.py, EngineProfile.runner_v2)."""
    return engine.profile.runner_v2(arch.architecture, bool(arch.num_experts), "linear" in arch.kinds)


def cudagraph_bytes(arch: ModelArchitecture, layout: Layout, engine: EngineSettings) -> float:
    """CUDA-graph memory the engine keeps out of the KV cache on each GPU: Model Runner V2 measures the capture
    (vllm/v1/worker/gpu/cudagraph_utils.py, profile_cudagraph_memory; 0.25.1's V2 had a stub returning 0), the V1
    runner extrapolates from two captures (vllm/v1/worker/gpu_model_runner.py, profile_cudagraph_memory). MLA
    models keep the V1 estimate on V2 too (0.32.0: not measured here, the larger of the two kept). None with
    --enforce-eager."""
    if not engine.cudagraphs:
        return 0.0
    if arch.kv_lora_rank:
        mla = GRAPHS_MLA_PER_KHIDDEN_GIB * arch.hidden_size / 1000 * GIB
        return mla if engine.profile.cudagraph_reserved or not runner_v2(arch, engine) else 0.0
    if not runner_v2(arch, engine):
        return GRAPHS_MOE_GIB * GIB
    if not engine.profile.cudagraph_reserved:
        return 0.0
    return (GRAPHS_DENSE_BASE_GIB + GRAPHS_DENSE_PER_KHIDDEN_GIB * arch.hidden_size / 1000) * GIB


def moe_workspace_bytes(arch: ModelArchitecture, layout: Layout, engine: EngineSettings) -> float:
    """The fused-MoE workspace vLLM keeps allocated once the profiled forward has run (vllm/v1/worker/workspace.py,
    get_simultaneous; sized in fused_moe/modular_kernel.py from TritonExperts.workspace_shapes): M tokens x top-k x
    (max(I, K) + max(2I, K)) in the activation dtype, with M = max_num_batched_tokens, I the expert width on one GPU
    and K the hidden size (workspace13 at least M x K)."""
    if not arch.num_experts or arch.quant_method in MOE_WORKSPACE_UNMANAGED:
        return 0.0
    tokens, k = engine.max_num_batched_tokens, arch.hidden_size
    width = (arch.moe_intermediate_size or arch.intermediate_size) // layout.tp
    workspace13 = max(tokens * arch.experts_per_token * max(width, k), tokens * k)
    return (workspace13 + tokens * arch.experts_per_token * max(2 * width, k)) * 2.0


@dataclass(frozen=True)
class PeakFeatures:
    """What the profiled peak on one GPU is a function of, each in GiB (bench/fit.py fits on these)."""

    logits: float
    """The sampler's float32 logits for max_num_seqs sequences (max_num_seqs x vocab x 4 bytes)."""
    hidden: float
    """One bf16 hidden-state tensor of max_num_batched_tokens tokens."""
    query: float
    """One bf16 query tensor of max_num_batched_tokens tokens on this GPU (heads x query head width)."""
    workspace: float
    """The fused-MoE workspace (moe_workspace_bytes)."""
    mlp: float
    """The widest dense MLP's up (and gate) projection output for max_num_batched_tokens tokens on this GPU
    (dense_mlp_width): tokens x width x 2 (gated) or x 1 (un-gated) x 2 bytes. The matrices less one, not all three:
    the Starcoder2 rows (un-gated) fit that, their peak 0.05-0.13 GiB off, where counting the activation's output too
    put them 0.07-0.28 GiB under the fit and the forward line's hidden term below zero."""
    v1: bool
    """Served by the V1 model runner, whose profile runs attention and samples with top-k and top-p."""


def peak_features(arch: ModelArchitecture, layout: Layout, engine: EngineSettings) -> PeakFeatures:
    heads = arch.num_attention_heads / layout.tp
    width = (arch.qk_nope_head_dim or arch.head_dim - arch.qk_rope_head_dim) + arch.qk_rope_head_dim \
        if arch.kv_lora_rank else arch.head_dim
    return PeakFeatures(
        logits=engine.max_num_seqs * arch.vocab_size * 4 / GIB,
        hidden=engine.max_num_batched_tokens * arch.hidden_size * 2 / GIB,
        query=engine.max_num_batched_tokens * heads * width * 2 / GIB,
        workspace=moe_workspace_bytes(arch, layout, engine) / GIB,
        mlp=engine.max_num_batched_tokens * dense_mlp_width(arch) / layout.tp * (arch.mlp_matrices - 1) * 2 / GIB,
        v1=not runner_v2(arch, engine))


def dense_mlp_width(arch: ModelArchitecture) -> int:
    """The widest MLP outside the routed experts: intermediate_size where any layer is dense, and the shared
    expert(s) of MoE layers (shared_expert_intermediate_size, or n_shared_experts x moe_intermediate_size)."""
    if not arch.num_experts:
        return arch.intermediate_size
    dense_layers = arch.first_dense_layers > 0 or 0 <= arch.moe_layer_count < arch.num_layers
    shared = arch.shared_expert_intermediate_size or arch.num_shared_experts * arch.moe_intermediate_size
    return max(arch.intermediate_size if dense_layers else 0, shared)


def fitted_peak_gib(f: PeakFeatures, c: dict[str, float]) -> float:
    """The parts model with constants `c` (planner/sizing.py's, or bench/fit.py's while fitting): the dense peak
    (Model Runner V2's profile: the forward without attention, then a sampler without top-k/top-p), the MoE workspace
    (from vLLM's source, not fitted), and the V1 runner's own terms where it serves the model (its profile runs
    attention and sorts the logits for top-k/top-p, and those transients partly reuse the workspace's memory). Latent
    attention needs no term of its own: its query is heads x (qk_nope + qk_rope) wide (a per-head term fitted on the
    four MLA rows after these came out at -0.002 GiB per head)."""
    sampling = c["PEAK_BASE_GIB"] + c["PEAK_PER_LOGITS"] * f.logits + c["PEAK_PER_HIDDEN"] * f.hidden
    forward = c["FORWARD_BASE_GIB"] + c["FORWARD_PER_HIDDEN"] * f.hidden + c["FORWARD_PER_MLP"] * f.mlp
    peak = max(sampling, forward) + f.workspace
    if f.v1:
        peak += (c["V1_SAMPLER_PER_LOGITS"] * f.logits + c["V1_ATTENTION_PER_QUERY"] * f.query
                 + c["V1_WORKSPACE_REUSE"] * f.workspace)
    return peak


PEAK = {"PEAK_BASE_GIB": PEAK_BASE_GIB, "PEAK_PER_LOGITS": PEAK_PER_LOGITS, "PEAK_PER_HIDDEN": PEAK_PER_HIDDEN,
        "FORWARD_BASE_GIB": FORWARD_BASE_GIB, "FORWARD_PER_HIDDEN": FORWARD_PER_HIDDEN,
        "FORWARD_PER_MLP": FORWARD_PER_MLP, "V1_SAMPLER_PER_LOGITS": V1_SAMPLER_PER_LOGITS,
        "V1_ATTENTION_PER_QUERY": V1_ATTENTION_PER_QUERY, "V1_WORKSPACE_REUSE": V1_WORKSPACE_REUSE}
"""The fitted peak's constants by name, as fitted_peak_gib and bench/fit.py name them."""
PEAK_CONSTANTS = tuple(PEAK)


def activation_peak_bytes(arch: ModelArchitecture, layout: Layout, engine: EngineSettings,
                          margin_gib: float = PEAK_MARGIN_GIB) -> float:
    """vLLM's profiled `torch peak memory increase` on one GPU (fitted at PEAK_FIT_SETTINGS by bench/fit.py), leaned
    `margin_gib` (PEAK_MARGIN_GIB; bench/fit.py's margin search passes its candidates) to the safe side."""
    return (fitted_peak_gib(peak_features(arch, layout, engine), PEAK) + margin_gib) * GIB


def outside_kv_bytes(arch: ModelArchitecture, layout: Layout, engine: EngineSettings,
                     margin_gib: float = PEAK_MARGIN_GIB) -> float:
    """Per-GPU memory outside weights and KV cache: activation peak + non-torch + CUDA graphs where the batch
    settings are the fitted ones; the measured family reserves (plus 0.32.0's dense graphs) elsewhere."""
    graphs = cudagraph_bytes(arch, layout, engine)
    if (engine.max_num_seqs, engine.max_num_batched_tokens) == PEAK_FIT_SETTINGS:
        return (activation_peak_bytes(arch, layout, engine, margin_gib)
                + (NON_TORCH_GIB + baseline_gib(engine.gpu)) * GIB + graphs)
    measured_with_graphs = bool(arch.num_experts or arch.kv_lora_rank or "linear" in arch.kinds)
    return reserve_bytes(arch) + (0.0 if measured_with_graphs else graphs)


def reserve_bytes(arch: ModelArchitecture) -> float:
    """Per-GPU memory outside weights and KV cache for this model's family (vLLM 0.25.1, measured)."""
    if arch.kv_lora_rank:
        return RESERVE_MLA_GIB * GIB
    return (RESERVE_MOE_GIB if arch.num_experts else RESERVE_GIB) * GIB


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
DEFAULT_UTILIZATION: float = VllmConfig.model_fields["gpu_memory_utilization"].default
"""vllm.gpuMemoryUtilization's declared default: the level a too-low setting is compared with."""
MAX_NODES_PER_REPLICA = 64
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
MEASURED_CROSS_NODE_TCP = ("measured on 2x H200 over TCP sockets (docs/benchmarks.md): pipeline parallel across "
                           "nodes 3,690 output tok/s per GPU, tensor parallel across nodes 496")


@dataclass(frozen=True)
class Layout:
    tp: int
    pp: int
    nodes: int

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    def describe(self, machine: MachineType | None = None) -> str:
        text = f"tensor={self.tp}, pipeline={self.pp}"
        where = f"{self.nodes} node{'s' if self.nodes > 1 else ''}"
        if machine is not None:
            where += f" of {machine.name}"
        return f"{text} on {where}"


SPOT_NOTICE_SECONDS = 30
"""Compute Engine's preemption notice to a Spot VM ("Spot VMs": ACPI G2 soft off, then 30 s): shorter than a
group's drain, and the loss of one node restarts the whole LeaderWorkerSet group."""


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
class Fit:
    weights_per_gpu: float
    usable_per_gpu: float
    kv_bytes_per_token: float
    kv_tokens: int

    @property
    def weights_fit(self) -> bool:
        return self.usable_per_gpu > 0


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
    warnings: tuple[str, ...] = ()
    rungs: tuple[RungPlan, ...] = ()
    """Every rung, planned (stacks with a ComputeClass: several zones, ways of buying or machines)."""

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()
                                  if k != "rungs"}
        if self.rungs:
            out["rungs"] = [r.as_dict() for r in self.rungs]
        return out


def unquantized_bytes(dtype: str) -> float:
    """vLLM's `--dtype auto` keeps bf16/fp16 checkpoints and serves fp32 ones in 16 bits."""
    return 2.0 if dtype == "auto" else DTYPE_BYTES[dtype]


def rotary_cache_bytes(arch: ModelArchitecture) -> float:
    """The rotary cos/sin caches every GPU holds from the load on (planner/architecture.py rotary_cache_elements),
    in the 16-bit serving dtype; vLLM's `Model loading took` counts them with the weights (gemma-3-12b: 0.56 GiB)."""
    return arch.rotary_cache_elements * 2.0


def model_weight_bytes(arch: ModelArchitecture, dtype: str) -> float:
    """The checkpoint's weights as vLLM holds them: quantized parts at their format's rate (the dtype flag sets
    activations only there), the rest at the serving dtype."""
    return arch.weight_bytes(unquantized_bytes(dtype))


def resolved_kv_cache_dtype(kv_cache_dtype: str, arch: ModelArchitecture | None, profile: EngineProfile) -> str:
    """The KV-cache dtype the engine runs with: vllm.kvCacheDtype, or under auto the dtype the checkpoint declares
    where the profile takes it (EngineProfile.checkpoint_kv_dtype); "auto" still means the model dtype."""
    if kv_cache_dtype == "auto" and arch is not None and profile.checkpoint_kv_dtype and arch.checkpoint_kv_dtype:
        return arch.checkpoint_kv_dtype
    return kv_cache_dtype


def kv_dtype_bytes(kv_cache_dtype: str, dtype: str, arch: ModelArchitecture | None = None,
                   engine: EngineSettings | None = None) -> float:
    """Bytes per KV-cache element of the resolved KV-cache dtype (the model dtype's under auto)."""
    if engine is not None:
        kv_cache_dtype = resolved_kv_cache_dtype(kv_cache_dtype, arch, engine.profile)
    if kv_cache_dtype != "auto":
        return DTYPE_BYTES[kv_cache_dtype]
    return 4.0 if dtype == "float32" else 2.0


def valid_tensor_sizes(arch: ModelArchitecture, limit: int) -> list[int]:
    """TP sizes vLLM accepts: dividing the attention heads, and the KV heads dividing or divisible."""
    return [tp for tp in range(1, limit + 1)
            if arch.num_attention_heads % tp == 0
            and (arch.num_kv_heads % tp == 0 or tp % arch.num_kv_heads == 0)]


def fit(arch: ModelArchitecture, acc: Accelerator, layout: Layout, utilization: float,
        weights_bytes: float, kv_bytes: float, max_len: int = 0, engine: EngineSettings | None = None,
        margin_gib: float = PEAK_MARGIN_GIB) -> Fit:
    """Weights and KV tokens per GPU under `engine` (default: the default profile's settings for this GPU);
    `max_len` (vllm.maxModelLen) matters where layers hold less than the whole sequence (sliding window, chunked,
    linear attention): vLLM reports those tokens per max_len-long request."""
    engine = engine or default_engine(acc)
    per_gpu = weights_bytes / layout.gpus + LOAD_OVERHEAD_GIB * GIB + rotary_cache_bytes(arch)
    usable = acc.memory_bytes * utilization - per_gpu - outside_kv_bytes(arch, layout, engine, margin_gib)
    length = max_len or arch.max_position_embeddings
    if not engine.profile.grouped_kv:
        tokens = arch.kv_tokens(layout.tp, layout.pp, kv_bytes, usable, length, engine.max_num_batched_tokens)
    else:
        tokens = arch.kv_tokens_grouped(layout.tp, layout.pp, kv_bytes, usable, length,
                                        engine.in_flight_tokens(layout.pp), engine.state_blocks)
    per_token = usable / tokens if tokens else arch.kv_bytes_per_token(layout.tp, layout.pp, kv_bytes)
    return Fit(per_gpu, usable, per_token, tokens)


def place(tp: int, pp: int, gpus_per_node: int) -> int | None:
    """Nodes a TP x PP replica needs: one when it fits a node, else whole nodes with TP inside one."""
    gpus = tp * pp
    if gpus <= gpus_per_node:
        return 1
    if tp > gpus_per_node or gpus % gpus_per_node:
        return None
    return gpus // gpus_per_node


def candidate_layouts(arch: ModelArchitecture, gpus_per_node: int) -> list[Layout]:
    """Every layout with TP inside a node, ordered smallest first (GPUs, then nodes, then larger TP)."""
    layouts = []
    for tp in valid_tensor_sizes(arch, gpus_per_node):
        for pp in range(1, arch.num_layers + 1):
            nodes = place(tp, pp, gpus_per_node)
            if nodes is not None and nodes <= MAX_NODES_PER_REPLICA:
                layouts.append(Layout(tp, pp, nodes))
            if tp * pp >= gpus_per_node * MAX_NODES_PER_REPLICA:
                break
    return sorted(layouts, key=lambda lay: (lay.gpus, lay.nodes, -lay.tp))


def smallest_working(arch: ModelArchitecture, acc: Accelerator, gpus_per_node: int, utilization: float,
                     weights_bytes: float, kv_bytes: float, tokens_needed: int, max_len: int = 0,
                     engine: EngineSettings | None = None) -> Layout | None:
    for layout in candidate_layouts(arch, gpus_per_node):
        if fit(arch, acc, layout, utilization, weights_bytes, kv_bytes, max_len, engine).kv_tokens >= tokens_needed:
            return layout
    return None


def engine_choice(settings: Settings) -> EngineChoice:
    """The engine profile for the stack's vllm.image (planner/engine.py)."""
    return profile_for_image(settings.vllm.image)


def stack_engine(settings: Settings, choice: EngineChoice) -> EngineSettings:
    """The batch and cache settings the stack's server runs with: its image's profile, its GPU, vllm.extraArgs."""
    acc = settings.accelerator.catalog
    return engine_settings(choice.profile, acc.memory_bytes, acc.type, settings.vllm.extra_args)


def _suggestion(settings: Settings, engine: EngineSettings, weights_bytes: float, kv_bytes: float,
                tokens_needed: int) -> str:
    arch, accs = settings.model.architecture, settings.accelerator
    util = settings.vllm.gpu_memory_utilization
    options = []
    here = smallest_working(arch, accs.catalog, accs.gpus_per_node, util, weights_bytes, kv_bytes, tokens_needed,
                            settings.vllm.max_model_len, engine)
    if here is not None:
        options.append(here.describe(accs.machine))
    for machine in accs.catalog.machines:
        if machine.gpus <= accs.gpus_per_node or machine is not accs.catalog.default_machine(machine.gpus):
            continue
        other = smallest_working(arch, accs.catalog, machine.gpus, util, weights_bytes, kv_bytes, tokens_needed,
                                 settings.vllm.max_model_len, engine)
        if other is not None and other.nodes == 1 and (here is None or here.nodes > 1):
            options.append(f"{other.describe(machine)} (accelerator.machineType: {machine.name})")
            break
    if not options:
        return (f"no layout of up to {MAX_NODES_PER_REPLICA} nodes fits; use a larger accelerator, "
                "an FP8 kv cache (vllm.kvCacheDtype: fp8) or a smaller vllm.maxModelLen")
    return "a layout that fits: " + "; or ".join(options)


def _gib(value: float) -> str:
    return f"{value / GIB:.2f} GiB"


def _check_explicit(settings: Settings, engine: EngineSettings, layout_tp: int, layout_pp: int, weights_bytes: float,
                    kv_bytes: float) -> Layout:
    arch, accs = settings.model.architecture, settings.accelerator
    gpn = accs.gpus_per_node
    tp_key = "parallelism.tensor" if settings.parallelism.tensor is not None else "parallelism.pipeline"
    if arch.num_attention_heads % layout_tp or not (arch.num_kv_heads % layout_tp == 0
                                                    or layout_tp % arch.num_kv_heads == 0):
        valid = valid_tensor_sizes(arch, max(8, gpn))
        listed = ", ".join(str(v) for v in valid[:-1]) + f" or {valid[-1]}" if len(valid) > 1 else str(valid[0])
        raise ConfigError("parallelism.tensor", layout_tp,
                          f"{arch.name} has {arch.num_attention_heads} attention heads and {arch.num_kv_heads} "
                          f"KV heads, which {layout_tp} does not divide; use {listed}")
    if layout_pp > arch.num_layers:
        raise ConfigError("parallelism.pipeline", layout_pp,
                          f"{arch.name} has only {arch.num_layers} layers; use at most {arch.num_layers}")
    nodes = place(layout_tp, layout_pp, gpn)
    if nodes is None:
        if layout_tp > gpn:
            raise ConfigError("parallelism.tensor", layout_tp,
                              f"tensor parallelism must stay inside one node ({accs.machine_type} has {gpn} GPUs); "
                              f"use tensor={gpn} and pipeline={layout_tp * layout_pp // gpn} across nodes")
        raise ConfigError("parallelism.pipeline", layout_pp,
                          f"tensor x pipeline = {layout_tp * layout_pp} GPUs does not fill whole nodes of "
                          f"{gpn} ({accs.machine_type}); use a multiple of {gpn}")
    if nodes > MAX_NODES_PER_REPLICA:
        raise ConfigError("parallelism.pipeline", layout_pp,
                          f"needs {nodes} nodes per replica; at most {MAX_NODES_PER_REPLICA} are supported")
    layout = Layout(layout_tp, layout_pp, nodes)
    result = fit(arch, accs.catalog, layout, settings.vllm.gpu_memory_utilization, weights_bytes, kv_bytes,
                 settings.vllm.max_model_len, engine)
    max_len = settings.vllm.max_model_len
    if not result.weights_fit:
        budget = accs.catalog.memory_bytes * settings.vllm.gpu_memory_utilization
        raise ConfigError(tp_key, layout_tp if tp_key == "parallelism.tensor" else layout_pp,
                          f"{arch.name} needs {_gib(result.weights_per_gpu)} of weights per GPU at {layout.describe()}"
                          f" but an {accs.type} offers {_gib(budget)} ({_gib(accs.catalog.memory_bytes)} x "
                          f"{settings.vllm.gpu_memory_utilization} gpuMemoryUtilization) less a "
                          f"{outside_kv_bytes(arch, layout, engine) / GIB:.2f} GiB "
                          f"reserve; {_suggestion(settings, engine, weights_bytes, kv_bytes, max_len)}")
    if result.kv_tokens < max_len:
        alternative = _suggestion(settings, engine, weights_bytes, kv_bytes, max_len).removeprefix(
            "a layout that fits: ")
        raise ConfigError("vllm.maxModelLen", max_len,
                          f"the KV cache at {layout.describe()} holds only {result.kv_tokens} tokens per replica "
                          f"({_gib(result.usable_per_gpu)} per GPU), less than one sequence, so vLLM would refuse "
                          f"to start; lower vllm.maxModelLen to {result.kv_tokens} or less, or use "
                          f"{alternative}")
    return layout


def _auto(settings: Settings, engine: EngineSettings, weights_bytes: float, kv_bytes: float) -> Layout:
    arch, accs = settings.model.architecture, settings.accelerator
    acc, gpn, util = accs.catalog, accs.gpus_per_node, settings.vllm.gpu_memory_utilization
    max_len = settings.vllm.max_model_len
    wanted = settings.parallelism.min_concurrent_sequences * max_len
    tps = valid_tensor_sizes(arch, gpn)
    for tp in tps:  # (a) smallest TP on one node that holds the wanted concurrency
        layout = Layout(tp, 1, 1)
        if fit(arch, acc, layout, util, weights_bytes, kv_bytes, max_len, engine).kv_tokens >= wanted:
            return layout
    tp_max = tps[-1]
    if fit(arch, acc, Layout(tp_max, 1, 1), util, weights_bytes, kv_bytes, max_len, engine).kv_tokens >= max_len:
        return Layout(tp_max, 1, 1)  # (b) the whole node holds at least one full sequence
    for nodes in range(2, MAX_NODES_PER_REPLICA + 1):  # (c) fewest nodes, PP across them
        pp = nodes * gpn // tp_max
        if pp > arch.num_layers:
            break
        layout = Layout(tp_max, pp, nodes)
        if fit(arch, acc, layout, util, weights_bytes, kv_bytes, max_len, engine).kv_tokens >= max_len:
            return layout
    for higher in (DEFAULT_UTILIZATION,):  # a utilization set below the default may be all that is in the way
        if higher > util:
            layout = smallest_working(arch, acc, gpn, higher, weights_bytes, kv_bytes, max_len, max_len, engine)
            if layout is not None:
                raise ConfigError("vllm.gpuMemoryUtilization", util,
                                  f"leaves too little GPU memory for {arch.name} ({_gib(weights_bytes)} of weights) "
                                  f"with vllm.maxModelLen {max_len} on {accs.machine_type}; at {higher:g} it fits "
                                  f"with {layout.describe(accs.machine)}: raise vllm.gpuMemoryUtilization")
    raise ConfigError("model.id", settings.model.id,
                      f"{arch.name} ({_gib(weights_bytes)} of weights) with vllm.maxModelLen {max_len} does not fit "
                      f"on up to {MAX_NODES_PER_REPLICA} nodes of {accs.machine_type}; "
                      f"{_suggestion(settings, engine, weights_bytes, kv_bytes, max_len)}")


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
        engine = engine_settings(choice.profile, rung.catalog.memory_bytes, rung.type, vllm.extra_args)
        got = fit(arch, rung.catalog, layout, vllm.gpu_memory_utilization, weights_bytes, kv_bytes,
                  vllm.max_model_len, engine)
        if rung.key != "accelerator" and got.kv_tokens < vllm.max_model_len:
            held = (f"holds only {got.kv_tokens} KV tokens per replica" if got.weights_fit else
                    f"cannot hold {_gib(got.weights_per_gpu)} of weights per GPU")
            raise ConfigError(f"{rung.key}.type", rung.type,
                              f"{rung.catalog.display} at {layout.describe()} (the pod shape planned on "
                              f"{accs.machine_type}) {held}, less than one vllm.maxModelLen ({vllm.max_model_len}) "
                              "sequence; use a larger GPU or drop this fallback")
        provisioned = disk.read_mib_s if DISK_TYPES[disk.disk_type].mib_s_per_gib == 0 else 0
        read = disk_read_mib_s(disk.disk_type, disk.size_gib, rung.machine, provisioned)
        price = machine_usd_hour(rung.machine)
        planned.append(RungPlan(
            rung.key, rung.type, rung.machine_type, rung.provisioning, rung.zones, got.kv_tokens,
            got.kv_tokens // vllm.max_model_len, engine.max_num_seqs,
            round(weights_load_seconds(weights_bytes, layout.nodes, read)),
            None if price is None else round(price * layout.gpus / rung.machine.gpus, 2)))
    return planned


def plan(settings: Settings) -> Sizing:
    """The serving layout and its derived numbers for validated settings (raises ConfigError)."""
    arch, accs, par = settings.model.architecture, settings.accelerator, settings.parallelism
    params = arch.parameter_count()
    if settings.model.weights_gib is not None:
        weights_bytes = settings.model.weights_gib * GIB
    else:
        if arch.quantized_parts and not arch.weight_bytes_per_param:
            raise ConfigError("model.weightsGib", None,
                              f"{arch.name} is quantized with quant_method {arch.quant_method!r}, which the planner "
                              "does not weigh yet (it reads fp8, fbgemm_fp8, mxfp4, awq, gptq and compressed-tensors); "
                              "set model.weightsGib to the checkpoint's size")
        weights_bytes = model_weight_bytes(arch, settings.vllm.dtype)
    choice = engine_choice(settings)
    engine = stack_engine(settings, choice)
    kv_bytes = kv_dtype_bytes(settings.vllm.kv_cache_dtype, settings.vllm.dtype, arch, engine)

    if par.tensor is None and par.pipeline is None:
        layout, source = _auto(settings, engine, weights_bytes, kv_bytes), "auto"
    else:
        layout = _check_explicit(settings, engine, par.tensor or 1, par.pipeline or 1, weights_bytes, kv_bytes)
        source = "config"
    result = fit(arch, accs.catalog, layout, settings.vllm.gpu_memory_utilization, weights_bytes, kv_bytes,
                 settings.vllm.max_model_len, engine)

    warnings = list(settings.warnings)
    if choice.warning:
        warnings.append(choice.warning)
    concurrency = result.kv_tokens // settings.vllm.max_model_len
    if concurrency < par.min_concurrent_sequences:
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
                          f"smaller than the model's weights ({_gib(weights_bytes)})")
    max_nodes = settings.autoscaling.max_replicas * layout.nodes
    if max_nodes > MAX_NODES_PER_POOL:
        raise ConfigError("autoscaling.maxReplicas", settings.autoscaling.max_replicas,
                          f"{max_nodes} nodes ({layout.nodes} per replica) exceed what one GKE node pool may grow "
                          f"to in a zone ({MAX_NODES_PER_POOL}); use at most {MAX_NODES_PER_POOL // layout.nodes}")
    disk, _ = choose_weights_disk(settings, weights_bytes, accs.machine, layout.nodes, max_nodes)
    if not disk.meets(settings.weights.load_seconds):
        warnings.append(f"no weights disk {accs.machine_type} attaches ({', '.join(settings.weights.disk_types)}) "
                        f"loads a node's {_gib(weights_bytes / layout.nodes)} within weights.loadSeconds "
                        f"({settings.weights.load_seconds} s); the fastest, {disk.disk_type} at "
                        f"{disk.read_mib_s:,.0f} MiB/s per VM, takes {disk.load_seconds:.0f} s")
    disk_gib, read_mib_s, weights_load = disk.size_gib, disk.read_mib_s, disk.load_seconds
    rungs = plan_rungs(settings, choice, layout, weights_bytes, kv_bytes, disk)
    # Values every rung shares take the worst rung: the slowest weights load (startup probe, smoke wait), the
    # smallest batch capacity (HPA target), the smallest machine (pod requests).
    weights_load = max([weights_load, *(r.weights_load_seconds for r in rungs[1:])])
    worst_concurrency = min(concurrency, *(r.max_concurrent_sequences for r in rungs))
    worst_seqs = min(engine.max_num_seqs, *(r.max_num_seqs for r in rungs))
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
    served = f"{settings.model.id}@{settings.model.revision}|{settings.vllm.image}|{layout}|{settings.vllm}"
    return Sizing(
        accelerator=accs.type, machine_type=accs.machine_type, gpus_per_node=accs.gpus_per_node,
        nodes_per_replica=layout.nodes, tensor_parallel_size=layout.tp, pipeline_parallel_size=layout.pp,
        gpus_per_replica=layout.gpus, gpus_per_pod=gpus_per_pod,
        parameter_count=params, weights_gib=round(weights_bytes / GIB, 2),
        weights_gib_per_gpu=round(result.weights_per_gpu / GIB, 2),
        kv_cache_gib_per_gpu=round(result.usable_per_gpu / GIB, 2),
        kv_cache_tokens_per_replica=result.kv_tokens, max_model_len=settings.vllm.max_model_len,
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
    )


FAMILIES = (("mla", "MLA"), ("linear", "hybrid linear attention"), ("sliding", "sliding window"),
            ("chunked", "chunked local attention"), ("vision", "multimodal"), ("experts", "MoE"))


def families(arch: ModelArchitecture) -> list[str]:
    """The families a model belongs to, as the calibration table names them (quantization included)."""
    kinds = set(arch.kinds)
    found = [label for key, label in FAMILIES if (key == "mla" and arch.kv_lora_rank) or key in kinds
                 or (key == "vision" and arch.vision_parameters) or (key == "experts" and arch.num_experts)]
    if arch.quantized_parts:
        found.append(f"quantized {arch.quant_method}")
    return found or ["dense"]


def single_gpu_fit(arch: ModelArchitecture, accelerator: str, utilization: float, max_len: int,
                   dtype: str = "auto", kv_cache_dtype: str = "auto", tp: int = 1, pp: int = 1,
                   version: str = "0.25.1", margin_gib: float = PEAK_MARGIN_GIB) -> Fit:
    """The planner's numbers for one layout, as `bench/calibrate.py` and `bench/run.py` compare them with vLLM (the
    GPU hosts run 0.25.1, so that profile by default)."""
    acc = ACCELERATORS[accelerator]
    nodes = 1 if tp * pp <= max(m.gpus for m in acc.machines) else pp
    engine = default_engine(acc, version)
    return fit(arch, acc, Layout(tp, pp, nodes), utilization, model_weight_bytes(arch, dtype),
               kv_dtype_bytes(kv_cache_dtype, dtype, arch, engine), max_len, engine, margin_gib)
