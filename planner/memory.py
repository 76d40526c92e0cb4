"""What vLLM keeps on one GPU besides the KV cache, and the bytes weights and KV tokens take.

The memory outside weights and KV cache is a parts model fitted by bench/fit.py on GPU runs (vLLM's
MemoryProfilingResult: torch peak increase, non-torch increase, CUDA graphs), with measured family reserves where
the batch settings differ from the fitted ones; tests/unit/test_fit.py holds the constants to the fit. Pure
functions of the model, the layout and the engine settings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from planner.architecture import DTYPE_BYTES, ModelArchitecture
from planner.catalog import (
    GIB,
    Accelerator,
)
from planner.engine import (
    DEFAULT_PROFILE,
    PROFILES,
    EngineProfile,
    EngineSettings,
    engine_settings,
)

if TYPE_CHECKING:
    from planner.layout import Layout


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
    """The parts model with constants `c` (this module's, or bench/fit.py's while fitting): the dense peak
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


