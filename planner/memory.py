"""What vLLM keeps on one GPU besides the KV cache, and the bytes weights and KV tokens take.

The memory outside weights and KV cache is a parts model fitted by bench/fit.py on GPU runs (vLLM's
MemoryProfilingResult: torch peak increase, non-torch increase, CUDA graphs), with measured family reserves where
the batch settings differ from the fitted ones. The fitted constants are one frozen object (planner/memory_fit.py
FITTED) that tests/unit/test_fit.py holds to the fit; every function here takes it as an argument, defaulting to
FITTED. Pure functions of the model, the layout, the engine settings and those constants.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from planner.architecture import (
    ATTENTION_KINDS,
    DTYPE_BYTES,
    EVERY_STAGE,
    FIRST_STAGE,
    LAST_STAGE,
    TIED_HEAD,
    ModelArchitecture,
    TensorGroup,
)
from planner.catalog import (
    ACCELERATORS,
    GIB,
    Accelerator,
)
from planner.checkpoint import HEAD_ON_EVERY_STAGE, INPUT_ON_EVERY_STAGE
from planner.engine import (
    DEFAULT_PROFILE,
    PROFILES,
    RUNNERS,
    EngineProfile,
    EngineSettings,
    engine_settings,
    with_router_fake,
)
from planner.kv_cache import layer_specs, pool_block_tokens, pp_stages, stage_bounds
from planner.layers import (
    GEMMA3_PAN_AND_SCAN,
    GEMMA4_FRAME_MARKERS,
    GEMMA4_FRAME_SOFT_TOKENS,
    GEMMA4_SOFT_TOKENS,
    GEMMA4_VIDEO_FRAMES,
    most_features_image,
    pan_and_scan_crops,
    resized_image,
)
from planner.memory_fit import FITTED, MemoryFit

if TYPE_CHECKING:
    from planner.layout import Layout


RESERVE_GIB = 2.0
"""Per-GPU memory outside weights and KV cache of a dense model where the parts model below does not apply (more
sequences or other batched tokens than it was fitted at): 1.83-1.90 GiB measured on an H200 (vLLM 0.25.1)."""
RESERVE_MOE_GIB = 4.2
"""The same for a mixture-of-experts model (3.96-4.31 GiB measured on Qwen3-30B-A3B, Qwen3-Next, gpt-oss)."""
RESERVE_MLA_GIB = 12.5
"""The same for multi-head latent attention (DeepSeek V3, 128 heads: 12.48 GiB)."""

# Memory outside weights and KV cache, by parts (vLLM's MemoryProfilingResult: torch peak increase, non-torch
# increase, and the CUDA-graph memory the runner keeps out of the KV cache), with the constants bench/fit.py fits
# (planner/memory_fit.py FITTED).
PEAK_FIT_SETTINGS = (1024, 8192)
"""(max_num_seqs, max_num_batched_tokens) of the runs the peak was fitted on; it applies with fewer sequences too
(parts_model_applies); elsewhere the reserves above apply."""
MOE_WORKSPACE_UNMANAGED = frozenset({"mxfp4"})
"""Quantization methods whose fused-MoE kernel on Hopper allocates its buffers inside the kernel, not in vLLM's
persistent workspace (vLLM's mxfp4 oracle picks OAITritonMxfp4ExpertsMonolithic), so nothing stays allocated."""

LOAD_OVERHEAD_GIB = 0.05
"""What vLLM's `Model loading took` counts beyond the parameters and the rotary caches (rotary_cache_bytes): -0.01 to
+0.18 GiB on the 43 started checkpoints, median 0.02; the unquantized ones up to 0.06 but Gemma 3 (0.15) and
Qwen2.5-VL (0.10), the quantized ones up to 0.18 (AWQ, kernel workspaces). 0.05 keeps every row within the 3%
weights bound (-2.5% on the AWQ 7B)."""


def default_engine(acc: Accelerator, version: str = DEFAULT_PROFILE, runner: str = "default",
                   router_fake: bool = False, extra_args: tuple[str, ...] = (), dtype: str = "auto") -> EngineSettings:
    """The default batch settings of a vLLM release on this GPU, less what `extra_args` (vLLM flags) change;
    `runner`: "v2" / "v1" as run with VLLM_USE_V2_MODEL_RUNNER=1 / =0 (planner/engine.py RUNNERS); `router_fake`:
    with the fused router kernel's fake registered (with_router_fake); `dtype`: --dtype."""
    profile = RUNNERS[runner](PROFILES[version])
    return engine_settings(with_router_fake(profile) if router_fake else profile, acc, extra_args, dtype)


def runner_v2(arch: ModelArchitecture, engine: EngineSettings) -> bool:
    """Whether the engine serves this model on Model Runner V2 (planner/engine.py, EngineProfile.runner_v2)."""
    return engine.profile.runner_v2(arch.architecture, bool(arch.num_experts) and arch.engine_counts_experts,
                                    arch.has_state_layers)


def cudagraph_bytes(arch: ModelArchitecture, layout: Layout, engine: EngineSettings,
                    fitted: MemoryFit = FITTED) -> float:
    """CUDA-graph memory the engine keeps out of the KV cache on each GPU: what Model Runner V2's capture takes
    (capture_bytes) and what vLLM 0.32.0's estimate of it adds (full_graph_extrapolation_bytes); the V1 runner's own
    estimate (v1_graph_estimate_bytes). None with --enforce-eager."""
    captured = capture_bytes(arch, layout, engine, fitted)
    if engine.cudagraphs and engine.profile.cudagraph_reserved and runner_v2(arch, engine):
        return captured + full_graph_extrapolation_bytes(arch, layout, engine)
    return captured


def capture_bytes(arch: ModelArchitecture, layout: Layout, engine: EngineSettings,
                  fitted: MemoryFit = FITTED) -> float:
    """What the CUDA-graph capture takes on each GPU: Model Runner V2 measures the capture
    (vllm/v1/worker/gpu/cudagraph_utils.py, profile_cudagraph_memory; 0.25.1's V2 had a stub returning 0), the V1
    runner extrapolates from two captures (v1_graph_estimate_bytes). MLA models on V2: the dense line plus the decode
    split buffers the capture keeps (mla_graph_buffers x split_buffer_bytes), or the V1 runner's former per-hidden
    line (graphs_mla_per_khidden_gib) where that is larger (tensor-parallel layouts, unmeasured). A model without
    experts or latent attention: a plane in the hidden width and the graph's pieces on one GPU (graphs_plain_*). The
    lines are fitted on 0.25.1's `Graph capturing finished ... took`, the whole capture (bench/fit.py).
    None with --enforce-eager."""
    if not engine.cudagraphs:
        return 0.0
    if not runner_v2(arch, engine):
        return v1_graph_estimate_bytes(arch, layout, engine, fitted)
    if not engine.profile.cudagraph_reserved:
        return 0.0
    if not arch.num_experts and not arch.kv_lora_rank:  # the plane in the width and the pieces on one GPU
        return (fitted.graphs_plain_base_gib + fitted.graphs_plain_per_khidden_gib * arch.hidden_size / 1000
                + fitted.graphs_plain_per_100_pieces_gib * graph_pieces(arch, layout) / 100) * GIB
    dense = (fitted.graphs_dense_base_gib + fitted.graphs_dense_per_khidden_gib * arch.hidden_size / 1000) * GIB
    if arch.kv_lora_rank:
        return max(fitted.graphs_mla_per_khidden_gib * arch.hidden_size / 1000 * GIB,
                   dense + mla_graph_buffers(arch) * split_buffer_bytes(arch, layout, engine))
    moe = fitted.graphs_moe_v2_per_kquery_excess * query_excess(arch, layout) / 1000 if arch.moe_layers else 0.0
    return dense + moe * GIB


FULL_GRAPH_SAMPLE_FLOOR = 1 << 20
"""vLLM 0.32.0's _MIN_PER_GRAPH_BYTES (v1/worker/gpu/cudagraph_utils.py): the least each further FULL graph is
taken to cost when its estimate extrapolates."""
WARMUP_ACCUMULATORS = 2
"""How many split-KV accumulators of the second-largest FULL decode the cache held when that graph's capture began:
its eager warm-up allocates them (the same splits as the graph), torch's graph entry empties the cache. Samples of
Model Runner V2's capture (bench/calibrate.py --sample-graphs, vLLM 0.25.1 on an H200, validation 76): 124 MiB
released for Llama-3.2-1B (1.00 accumulator of 124), 516 for Qwen3-8B (2.08 of 248); the larger count is kept, so
that no plan promises the KV memory the estimate takes."""
WARMUP_ACCUMULATORS_MLA = 1
"""The same for FlashAttention MLA's latent accumulators: 514 MiB released for DeepSeek-V2-Lite (1.04 of 496)."""


def full_graph_extrapolation_bytes(arch: ModelArchitecture, layout: Layout, engine: EngineSettings) -> float:
    """What vLLM 0.32.0's CUDA-graph estimate counts beyond the capture it stands for. profile_cudagraph_memory
    captures the two largest FULL decode graphs and reads free device memory around each (CudaGraphManager.capture);
    torch.cuda.graph's entry empties the allocator's cache after that reading, so the second sample is the graph's
    own growth (about none: the pool the first left serves it) less what the graph's eager warm-up had cached, its
    split-KV accumulators (WARMUP_ACCUMULATORS, or WARMUP_ACCUMULATORS_MLA, times split_buffer_bytes at that
    batch). The estimate, measured - the samples + first + (FULL graphs - 1) x max(second, FULL_GRAPH_SAMPLE_FLOOR)
    (_extrapolate_full_graph_memory), thus adds the released accumulators back and a floor for each further graph.
    None with fewer than two FULL graphs (no second sample)."""
    sizes = full_graph_sizes(engine)
    if len(sizes) < 2:
        return 0.0
    count = WARMUP_ACCUMULATORS_MLA if arch.kv_lora_rank else WARMUP_ACCUMULATORS
    released = count * split_buffer_bytes(arch, layout, engine, batch=sizes[-2])
    return released + (len(sizes) - 1) * FULL_GRAPH_SAMPLE_FLOOR


def v1_graph_estimate_bytes(arch: ModelArchitecture, layout: Layout, engine: EngineSettings,
                            fitted: MemoryFit = FITTED) -> float:
    """What the V1 runner subtracts for CUDA graphs (vllm/v1/worker/gpu_model_runner.py profile_cudagraph_memory, the
    same in 0.25.1 and 0.32.0): per capture mode, the largest graph's first capture plus the second capture's growth
    times the further graphs; the modes' largest first capture counts once. The first FULL capture holds
    FlashAttention's split accumulators (split_buffer_bytes): 768.00 MiB logged with 96 heads of 128, 512.00 with 64,
    384.00 with 48, 160-162 with 20, 128 with 16, 1,046 for Kimi-Linear's 32 latent heads (the debug lines of the V1
    rows in docs/benchmarks/results.json, graph_estimate_lines; 26 runs, 0-4 MiB over the accumulators with attention
    but gpt-oss, which kept none). The growths (1-27 MiB per graph, 50 further graphs): a line in the graph's
    pieces on one GPU (graph_pieces; fitted.graphs_v1_growth_base_gib, graphs_v1_growth_per_100_pieces_gib). Latent
    attention the same, with FlashAttention MLA's accumulators (v1_mla_accumulators of them). The line is
    the growth at DEFAULT_GRAPHS a mode (bench/fit.py fits it on rows run at vLLM's default sizes); other capture
    sizes scale it by their further graphs (graph_scale: vLLM logged 11 + 7 graphs at 32 sequences, 19 + 11 at 64,
    35 + 19 at 128)."""
    growth = (fitted.graphs_v1_growth_base_gib
              + fitted.graphs_v1_growth_per_100_pieces_gib * graph_pieces(arch, layout) / 100)
    return v1_mla_accumulators(arch) * split_buffer_bytes(arch, layout, engine) + growth * graph_scale(engine) * GIB


def v1_mla_accumulators(arch: ModelArchitecture) -> int:
    """The split accumulators the V1 estimate's first FULL capture of a latent-attention model takes: one (the graph
    pool's), two where the warm-up's accumulator segment stays reserved through the capture. The V1 graph traces
    (docs/benchmarks.md "V1 CUDA-graph estimate traces", v94 and v95, vLLM 0.25.1, H200) saw both: Kimi-K2:4 (FP8)
    kept one 2 GiB segment of its PIECEWISE captures (the latent context's, as large as the accumulator: 65,536 rows
    x 64 heads x 256 x 2 bytes against 32 splits x 512 x 64 x 512 x 4), which its FULL warm-up then reused, and took
    2,080 MiB; Kimi-K2.5:4, whose experts are 4-bit integers (the Marlin kernels of compressed-tensors WNA16), kept
    none there and both of its FULL capture's (4,128 MiB). The allocation that pins the segment was not traced; the
    rows with debug lines on bf16 experts (Moonlight, Kimi Linear, Ling 2.5: 514, 1,044-1,046 and 1,064-1,066 MiB)
    took one. Two, the safe side, for routed experts stored as sub-byte integers (GPTQ, AWQ, compressed-tensors);
    one otherwise, and one without latent attention (split_buffer_bytes' accumulator, which every other kind's first
    FULL capture kept)."""
    if not arch.kv_lora_rank:
        return 1
    integer_experts = (arch.num_experts and dict(arch.quantized_share).get("experts", 0.0) > 0
                       and arch.weight_bytes_per_param < 1.0
                       and arch.quant_method in ("compressed-tensors", "gptq", "gptq_marlin", "awq", "awq_marlin"))
    return 2 if integer_experts else 1


def graph_scale(engine: EngineSettings) -> float:
    """The V1 estimate's further graphs (each mode's count less its first) against DEFAULT_GRAPHS'; 1.0 at vLLM's
    default sizes on an H100 or H200."""
    return sum(max(n - 1, 0) for n in graph_counts(engine)) / (2 * (DEFAULT_GRAPHS - 1))


def graph_pieces(arch: ModelArchitecture, layout: Layout) -> int:
    """Layers on one GPU whose mixer is one of vLLM's splitting ops, each of which splits the piecewise CUDA graph
    (attention of every kind, Mamba, short convolution, linear attention, KDA; CompilationConfig.splitting_ops): every
    layer kind but "none" (NemotronH's MLP and MoE blocks, a NAS layer without attention), Falcon-H1's two per layer.
    With a pipeline, the stage with the most (stage_bounds: vLLM's get_pp_indices)."""
    kinds = arch.kinds
    return max(sum(kind != "none" for kind in kinds[start:stop])
               for start, stop in stage_bounds(len(kinds), layout.pp, arch.cache_slots))


SPLITS_FOR_GRAPHS = 32
"""vLLM's FlashAttention decode under full CUDA graphs is captured with this many KV splits
(config/attention.py flash_attn_max_num_splits_for_cuda_graph; v1/attention/backends/flash_attn.py and
mla/flashattn_mla.py set max_num_splits from it so that the split buffers are allocated inside the graph)."""
CAPTURE_LIMIT = 512
"""The largest batch vLLM 0.32.0 captures a graph for by default: min(2 x max_num_seqs, 512, max_num_batched_tokens),
1,024 in place of 512 on data-center Blackwell (config/vllm.py _set_cudagraph_sizes, without speculative tokens)."""
CAPTURE_LIMIT_BY_GPU = {"nvidia-b200": 1024}
DEFAULT_GRAPHS = 51
"""The graphs of each mode at vLLM's default sizes on an H100 or H200 (1, 2, 4, 8..248 by 8, 256..512 by 16): what
the V1 growth line (v1_graph_estimate_bytes) was fitted at."""


def capture_sizes(engine: EngineSettings) -> tuple[int, ...]:
    """The batch sizes vLLM 0.32.0 captures CUDA graphs for (config/vllm.py _set_cudagraph_sizes, one token a
    decode step): --cudagraph-capture-sizes as given, up to max_num_batched_tokens; else 1, 2, 4, every 8 below 256
    and every 16 from 256 up to the limit (--max-cudagraph-capture-size, else min(2 x max_num_seqs, CAPTURE_LIMIT)),
    never above max_num_batched_tokens, which is added where it is under the limit, as is max_num_seqs where the
    limit is the default. PIECEWISE graphs are captured for every size, FULL (decode) graphs for the sizes up to
    max_num_seqs (graph_counts). None with --enforce-eager.

    Not planned: vLLM's gpt-oss hook sets the limit to 1,024 when no capture flag is given
    (model_executor/models/config.py GptOssForCausalLMConfig; 83 graphs a mode logged in validations 29 and 33).
    Both gpt-oss rows are in the V1 growth line's fit at 51 graphs, so taking it moves every fitted V1 constant."""
    if not engine.cudagraphs:
        return ()
    tokens = engine.max_num_batched_tokens
    if engine.capture_list is not None:
        return tuple(sorted({s for s in engine.capture_list if s <= tokens}))
    limit = engine.max_capture
    decode = []
    if limit is None:
        limit = min(2 * engine.max_num_seqs, CAPTURE_LIMIT_BY_GPU.get(engine.gpu, CAPTURE_LIMIT))
        decode = [engine.max_num_seqs] if engine.max_num_seqs <= limit else []
    limit = min(limit, tokens)
    grid = [*(s for s in (1, 2, 4) if s <= limit), *range(8, min(limit + 1, 256), 8), *range(256, limit + 1, 16)]
    extra = [tokens] if tokens <= limit else []
    return tuple(sorted({*grid, *extra, *(s for s in decode if s <= tokens)}))


def graph_counts(engine: EngineSettings) -> tuple[int, int]:
    """(PIECEWISE, FULL) graphs the V1 runner captures and its estimate counts (`Estimated PIECEWISE CUDA graph
    memory: ... + (N-1)`): every capture size, and the decode sizes up to max_num_seqs
    (v1/cudagraph_dispatcher.py)."""
    return len(capture_sizes(engine)), len(full_graph_sizes(engine))


def full_graph_sizes(engine: EngineSettings) -> tuple[int, ...]:
    """The decode batches FULL graphs are captured for, ascending: the capture sizes up to max_num_seqs
    (v1/cudagraph_dispatcher.py)."""
    return tuple(s for s in capture_sizes(engine) if s <= engine.max_num_seqs)


def largest_capture(engine: EngineSettings) -> int:
    """The largest batch a CUDA graph is captured for (capture_sizes); 0 without graphs."""
    return max(capture_sizes(engine), default=0)


def profiling_cache_blocks(arch: ModelArchitecture, engine: EngineSettings) -> int:
    """The KV-cache blocks vLLM allocates before the real cache to estimate its CUDA graphs, "the smallest KV cache
    that still lets every graph be captured": 0.32.0, min(max_num_seqs, the largest capture)
    (vllm/v1/worker/gpu/cudagraph_utils.py _init_minimal_kv_cache_for_profiling); 0.25.1's V1 runner, the largest
    capture (gpu_model_runner.py _init_minimal_kv_cache_for_profiling); 0.25.1's Model Runner V2, whose estimate was
    a stub, and --enforce-eager (no graphs), none. Every layer that holds a cache gets its pages for each block, so
    for Mamba-style states this is that many whole states a layer (Mamba-Codestral-7B: 64 layers x 512 states of
    2.06 MiB, 66 GiB, which with its 13.6 GiB of weights an H100 could not hold: validation 34)."""
    if not engine.cudagraphs:
        return 0
    if engine.profile.cudagraph_reserved:
        return min(engine.max_num_seqs, largest_capture(engine))
    return 0 if runner_v2(arch, engine) else largest_capture(engine)


def split_buffer_bytes(arch: ModelArchitecture, layout: Layout, engine: EngineSettings,
                       batch: int | None = None) -> float:
    """FlashAttention's split-KV accumulator in the largest captured FULL graph on one GPU: under full CUDA graphs the
    attention metadata fixes num_splits at SPLITS_FOR_GRAPHS, and the kernel's intermediate buffers are
    [num_splits, num_heads, num_tokens, head_size] in float32 (v1/attention/backends/flash_attn.py, "Setting
    num_splits > 1 may increase the memory usage"; flashattn_mla.py the same with the latent width): splits x batch x
    heads x width x 4 bytes, width the latent rank (kv_lora_rank) with MLA, else the widest attention head. 4.0 GiB
    for 128 latent heads (the segments the capture's graph pool kept in the traces of docs/benchmarks.md "Peak
    traces"), 768 MiB for 96 heads of 128 (GLM-4.5-Air's first FULL capture). None without attention layers. gpt-oss
    (attention sinks, sliding and full layers) kept none in its first FULL capture (validation 29); the plan keeps
    them. Measured on H200 and H100; B200 runs other kernels, for which the same size is kept unmeasured. The full
    graphs are decode batches, captured up to max_num_seqs (v1/cudagraph_dispatcher.py: capture sizes <=
    uniform_decode_query_len x max_num_seqs), so below 512 sequences the batch is max_num_seqs, not the largest
    piecewise capture (Kimi-Linear at 32 sequences, validation 36: FULL largest 32, PIECEWISE 64, 64 MiB taken).
    `batch`: another decode batch than the largest."""
    if not any(kind in ATTENTION_KINDS for kind in arch.kinds):
        return 0.0
    batch = batch or min(largest_capture(engine), engine.max_num_seqs)
    heads = -(-arch.num_attention_heads // layout.tp)
    width = arch.kv_lora_rank or max(arch.head_dim, arch.global_attention[1])
    return SPLITS_FOR_GRAPHS * batch * heads * width * 4.0


def mla_graph_buffers(arch: ModelArchitecture) -> int:
    """How many split-buffer-sized blocks the CUDA-graph capture of a latent-attention model on Model Runner V2 keeps
    (vLLM 0.25.1 `Graph capturing finished ... took`; 0.32.0's estimate of the capture adds
    full_graph_extrapolation_bytes): two (the graph pool held two segments of that size for DeepSeek-V2-shaped and
    Kimi-K2 BF16 in the traces), three with FP8 block weights (DeepSeek-V2-shaped FP8 took 3.93 GiB more than BF16,
    outside the pool). Refuted as a safe-side rule by validation 22 (held out): 80 heads took 2.7 buffers beyond the
    dense line, 1.79 GiB more than planned; the count is not a function of the heads alone (1.9 at 128, 1.5 at 64)."""
    return 3 if arch.quant_method == "fp8" else 2


MLA_PREFILL_ROWS = 64 * 1024
"""vLLM's chunked-prefill workspace rows for latent attention (MLACommonMetadataBuilder.
determine_chunked_prefill_workspace_size): min(max(8 x max_model_len, 4 x max_num_seqs x block_size), 65,536), the
cap whenever max_model_len >= 8,192 or, at the fitted 1,024 sequences, for any KV block of 16 or more."""


def mla_workspace_rows(arch: ModelArchitecture, layout: Layout, engine: EngineSettings) -> int:
    """The rows of latent attention's chunked-prefill workspace, which its layer allocates as the worst-case
    up-projected context while vLLM profiles (mla_attention.py forward with no attention metadata): min(max(8 x
    max_model_len, 4 x max_num_seqs x block), 65,536), then on 0.25.1 at least max_num_seqs x block (its
    determine_chunked_prefill_workspace_size), on 0.32.0 rounded up to a block
    (align_mla_chunked_context_workspace_size).
    The block is cache_config.block_size: a hybrid's grown block (kv_cache.pool_block_tokens; its attention page in
    the model dtype), so beside a state at 1,024 sequences 0.25.1 takes far more than the cap (Ling 2.5's 912-token
    block: 933,888 rows; Kimi Linear's 1,888: 1,933,312, validation 35's 29.5 GiB). 0 without latent attention, or
    where no layer on the GPU runs it (a hybrid's cut of linear-attention layers only)."""
    if not latent_layers(arch):
        return 0
    specs = layer_specs(arch, layout.tp, engine.states.model_bytes, engine.states)
    block = pool_block_tokens(specs, layout.pp, engine.profile.kv_pool, arch.cache_slots)
    seqs = engine.max_num_seqs
    rows = min(max(8 * engine.max_model_len, 4 * seqs * block), MLA_PREFILL_ROWS)
    if engine.profile.mla_workspace_floor:
        return max(rows, seqs * block)
    return -(-max(rows, block) // block) * block


def latent_layers(arch: ModelArchitecture) -> bool:
    """Whether any layer runs latent attention: a kv_lora_rank and an attention layer (a hybrid's layers of linear
    attention or Kimi Delta Attention run none)."""
    return bool(arch.kv_lora_rank) and any(kind in ATTENTION_KINDS for kind in arch.kinds)


def mla_workspace_excess_bytes(arch: ModelArchitecture, layout: Layout, engine: EngineSettings) -> float:
    """What the profile's workspace (mla_workspace_rows) takes beyond MLA_PREFILL_ROWS rows on one GPU, rows x heads
    x (qk_nope + v) in bf16: the fitted V1 lines hold a latent layer at the cap (every MLA row of the fit was a plain
    decoder at 1,024 sequences with blocks of at most 64, so at it), and Model Runner V2's floor (mla_profile_bytes)
    counts the cap's rows; the rest is on top."""
    return max(mla_workspace_rows(arch, layout, engine) - MLA_PREFILL_ROWS, 0) * mla_context_row_bytes(arch, layout)


def mla_context_row_bytes(arch: ModelArchitecture, layout: Layout) -> float:
    """One row of latent attention's up-projected context on one GPU: heads / TP (rounded up) x (qk_nope + v), in
    bf16 (mla_attention.py forward_impl's profile-time torch.empty)."""
    return -(-arch.num_attention_heads // layout.tp) * (arch.mla_nope_dim + arch.mla_v_dim) * 2.0


def attention_after_experts(arch: ModelArchitecture) -> bool:
    """Whether an attention layer runs after the first MoE layer, i.e. while the fused-MoE workspace (allocated by
    that layer, kept since) is held: every full model; not a cut whose last layer is its only MoE layer."""
    return bool(arch.num_experts) and arch.moe_layers > 0 and arch.num_layers > arch.first_dense_layers + 1


def mla_profile_bytes(arch: ModelArchitecture, layout: Layout, engine: EngineSettings) -> float:
    """What a latent-attention layer holds while Model Runner V2 profiles, on one GPU: with no attention metadata
    (the profile skips attention) vLLM's MLA layer allocates the worst-case up-projected context,
    MLA_PREFILL_ROWS x heads x (qk_nope + v) in bf16 (model_executor/layers/attention/mla_attention.py forward_impl,
    `_ = torch.empty(...)`, in 0.25.1 and 0.32.0), beside the layer's own tensors for the batch (query, output,
    hidden state, the fused q/kv down-projection) and the MoE workspace when an MoE layer came before
    (attention_after_experts). 4.0 GiB for DeepSeek-V2's 128 heads: its traced peak was exactly this sum."""
    if not latent_layers(arch):
        return 0.0
    heads, v = -(-arch.num_attention_heads // layout.tp), arch.mla_v_dim
    tokens = engine.max_num_batched_tokens
    transient = max(mla_workspace_rows(arch, layout, engine), MLA_PREFILL_ROWS) * mla_context_row_bytes(arch, layout)
    down = arch.q_lora_rank + arch.kv_lora_rank + arch.qk_rope_head_dim
    live = tokens * (heads * (query_width(arch) + v) + arch.hidden_size + down) * 2.0
    workspace = moe_workspace_bytes(arch, layout, engine) if attention_after_experts(arch) else 0.0
    return transient + live + workspace


def query_width(arch: ModelArchitecture) -> int:
    """One query head's width: head_dim, or with MLA the no-position and rotary parts (qk_nope + qk_rope)."""
    if arch.kv_lora_rank:
        return arch.mla_nope_dim + arch.qk_rope_head_dim
    return arch.head_dim


def query_excess(arch: ModelArchitecture, layout: Layout) -> float:
    """How much wider one token's query on one GPU (heads / TP x query_width) is than its hidden state, or 0."""
    return max(arch.num_attention_heads / layout.tp * query_width(arch) - arch.hidden_size, 0.0)


@dataclass(frozen=True)
class ExpertShard:
    """How vLLM 0.32.0 places a mixture-of-experts layer's routed experts on one GPU of a layout
    (vllm/model_executor/layers/fused_moe/config.py FusedMoEParallelConfig.make): the MoE layer's tensor-parallel
    group is flattened over data x tensor ranks; with expert parallelism each GPU owns whole experts
    (expert_map_manager.py determine_expert_map: E // ep each, one more on the first E % ep ranks), without it every
    expert's width is sharded over the flattened group. With data parallelism every rank's tokens are all-gathered
    before the experts and reduce-scattered after (all2all_utils.py: naive_dp_ep, the allgather_reducescatter
    default; device_communicators/all2all.py AgRsAll2AllManager gathers over the DP group)."""

    experts: int
    """Routed experts on the most loaded GPU."""
    width: int
    """Each of its experts' intermediate width on that GPU."""
    token_ranks: int
    """Data-parallel ranks whose tokens the experts of one GPU see in one forward (1 without DP)."""


def expert_shard(arch: ModelArchitecture, layout: Layout) -> ExpertShard:
    width = arch.moe_intermediate_size or arch.intermediate_size
    group = layout.dp * layout.tp
    if layout.ep and group > 1:
        experts = arch.num_experts // group + (1 if arch.num_experts % group else 0)
        return ExpertShard(experts, width, layout.dp)
    return ExpertShard(arch.num_experts, width // group, layout.dp)


def weights_split(arch: ModelArchitecture, layout: Layout, weights_bytes: float) -> tuple[float, float]:
    """(other weights, routed experts) the most loaded GPU of `layout` holds: each group of the checkpoint's tensors
    (arch.checkpoint_groups), else of the count (counted_groups), as vLLM places it (checkpoint_stages' fullest
    stage; each data-parallel rank keeps its own copy), scaled to `weights_bytes` where the total came from elsewhere
    (model.weightsGib)."""
    groups = arch.checkpoint_groups or counted_groups(arch)
    other, routed = checkpoint_split(arch, layout, groups)
    # the tied head is a second copy of the input table on a pipeline's last stage, not bytes of the checkpoint
    scale = weights_bytes / sum(g.bytes for g in groups if g.position != TIED_HEAD)
    return other * scale, routed * scale


def counted_groups(arch: ModelArchitecture, unquantized_bytes: float = 2.0) -> tuple[TensorGroup, ...]:
    """The counted weights (parameter_parts) placed as tensor_groups places a checkpoint's tensors, for a plan without
    them: each decoder layer's share on its stage, the routed experts on the MoE layers (the last moe_layers, after
    the first dense ones), the input table on the first stage and the head on the last (every stage for the families
    of INPUT_ON_EVERY_STAGE / HEAD_ON_EVERY_STAGE; a tied head's copy on the last), and the vision tower and its
    projector on every stage, since vLLM builds them outside make_layers. Every group but the routed experts and the
    lightning indexers (whole on every rank) is split over tensor ranks (no vocabulary padding or KV-head
    replication: the count does not know the tensors). Inkling's and DeepSeek V4's layers are placed by their own
    rules (inkling_groups, dsv4_groups)."""
    if arch.inkling:  # its own placement, tables on every stage
        return tuple(g for g in inkling_groups(arch, unquantized_bytes) if g.bytes)
    parts = arch.part_bytes(unquantized_bytes)
    routed = parts["experts"] if arch.num_experts else 0.0
    table = parts["embeddings"] / (1 if arch.tie_word_embeddings else 2)
    vision = parts["vision"]
    # an "indexed" layer's lightning indexer is whole on every tensor rank (ReplicatedLinear, disable_tp)
    indexer = arch.indexer_parameters() * arch.part_rate("attention", unquantized_bytes)
    indexed = [i for i, kind in enumerate(arch.kinds) if kind == "indexed"]
    layer = (sum(parts.values()) - routed - vision - parts["embeddings"] - indexer * len(indexed)) / arch.num_layers
    first_moe = arch.num_layers - arch.moe_layers
    groups = [TensorGroup(i, "split", layer) for i in range(arch.num_layers)]
    groups += [TensorGroup(i, "replicated", indexer) for i in indexed]
    if arch.o_groups:  # DeepSeek V4: what each layer keeps whole beside what it divides (dsv4_layer_bytes)
        groups = dsv4_groups(arch, unquantized_bytes)
    groups += [TensorGroup(i, "routed", routed / arch.moe_layers) for i in range(first_moe, arch.num_layers)
               if routed]
    groups.append(TensorGroup(EVERY_STAGE if arch.architecture in INPUT_ON_EVERY_STAGE else FIRST_STAGE, "split",
                              table))
    if arch.tie_word_embeddings:
        if arch.architecture not in INPUT_ON_EVERY_STAGE:  # the table every stage holds serves as the head too
            groups.append(TensorGroup(TIED_HEAD, "split", table))
    else:
        groups.append(TensorGroup(EVERY_STAGE if arch.architecture in HEAD_ON_EVERY_STAGE else LAST_STAGE, "split",
                                  table))
    if vision:
        groups.append(TensorGroup(EVERY_STAGE, "split", vision))
    return tuple(g for g in groups if g.bytes)


def dsv4_groups(arch: ModelArchitecture, unquantized_bytes: float) -> list[TensorGroup]:
    """A DeepSeek V4 model's counted layers beside its routed experts (ModelArchitecture.dsv4_layer_bytes), each layer
    in two groups, divided over tensor ranks and whole on every rank; the hash layers' token tables (int32, whole) and
    the routers' float32 score biases; the final norm on the last stage and the head's hyper-connection mixer
    (float32), which DeepseekV4Model builds on every stage."""
    groups = []
    for i, kind in enumerate(arch.kinds):
        split, whole = arch.dsv4_layer_bytes(kind, unquantized_bytes)
        router = (4.0 * arch.vocab_size * arch.experts_per_token if i < arch.hash_layers else 4.0 * arch.num_experts)
        groups += [TensorGroup(i, "split", split),
                   TensorGroup(i, "replicated", whole + unquantized_bytes * arch.hidden_size * arch.num_experts
                               + router)]
    streams, h = arch.hyper_connections, arch.hidden_size
    groups += [TensorGroup(LAST_STAGE, "replicated", unquantized_bytes * h),
               TensorGroup(EVERY_STAGE, "replicated", 4.0 * (streams * streams * h + streams + 1))]
    return groups


def inkling_groups(arch: ModelArchitecture, unquantized_bytes: float) -> list[TensorGroup]:
    """An Inkling model's counted weights as vLLM 0.32.0 places them (vllm/models/inkling/nvidia/model.py): each layer
    in three groups (ModelArchitecture.inkling_layer), divided, whole on every tensor rank (the relative-logit
    projection, norms, the gate; float32 for the gate's score bias and scale) and its routed experts; and on every
    pipeline stage, since InklingModel and its causal LM build them under no test of the rank: the input table, whole
    on every tensor rank (InklingReplicatedEmbedding), the embedding and final norms, and the head (ParallelLMHead,
    its rows padded to 64 and divided)."""
    rate = arch.part_rate
    groups = []
    for i in range(arch.num_layers):
        part = arch.inkling_layer(i)
        split = (rate("attention", unquantized_bytes) * part["attention"] + unquantized_bytes * part["conv"]
                 + rate("mlp", unquantized_bytes) * part.get("mlp", 0)
                 + rate("shared", unquantized_bytes) * part.get("shared", 0))
        whole = (unquantized_bytes * (part["whole"] + part.get("router", 0) + part.get("mlp_scale", 0))
                 + 4.0 * part.get("router_32", 0))
        groups += [TensorGroup(i, "split", split), TensorGroup(i, "replicated", whole),
                   TensorGroup(i, "routed", rate("experts", unquantized_bytes) * part.get("experts", 0))]
    h, vocab = arch.hidden_size, arch.vocab_size
    norms = (1 + arch.inkling[7]) * h
    return [*groups, TensorGroup(EVERY_STAGE, "replicated", unquantized_bytes * (vocab * h + norms)),
            TensorGroup(EVERY_STAGE, "vocab", unquantized_bytes * vocab * h, vocab)]


def routed_fraction(arch: ModelArchitecture, layout: Layout) -> float:
    """The share of each routed expert layer's bytes on the most loaded GPU (expert_shard)."""
    shard = expert_shard(arch, layout)
    full_width = arch.moe_intermediate_size or arch.intermediate_size
    return shard.experts / arch.num_experts * shard.width / full_width


def group_bytes_per_rank(group: TensorGroup, tp: int, kv_heads: int) -> float:
    """What one tensor rank holds of a group other than routed experts, as vLLM 0.32.0 divides it: "split" evenly;
    "kv" by whole KV heads, one per rank where there are fewer heads than ranks (QKVParallelLinear
    num_kv_head_replicas); "vocab" by rows padded to a multiple of 64 (VocabParallelEmbedding); "replicated" whole."""
    if group.rule == "split":
        return group.bytes / tp
    if group.rule == "kv":
        return group.bytes * max(kv_heads // tp, 1) / kv_heads if kv_heads else group.bytes / tp
    if group.rule == "vocab":
        return group.bytes / group.rows * padded_vocab(group.rows) / tp
    return group.bytes


VOCAB_PADDING = 64
"""vLLM pads a vocabulary table to a multiple of this many rows (vocab_parallel_embedding.py
DEFAULT_VOCAB_PADDING_SIZE)."""


def checkpoint_stages(arch: ModelArchitecture, layout: Layout,
                      groups: tuple[TensorGroup, ...] | None = None) -> list[tuple[float, float]]:
    """(other weights, routed experts) of each pipeline stage (pp_stages: vLLM's get_pp_indices) on its first tensor
    rank (the one that holds the extra expert where they do not divide evenly), of the checkpoint's groups or
    `groups`."""
    stages = pp_stages(arch.num_layers, layout.pp)
    routed_share = routed_fraction(arch, layout) if arch.num_experts else 1.0 / (layout.tp * layout.dp)
    held = []
    for index, (start, stop) in enumerate(stages):
        first, last = index == 0, index == len(stages) - 1
        other = routed = 0.0
        for group in arch.checkpoint_groups if groups is None else groups:
            p = group.position
            if not (start <= p < stop or p == EVERY_STAGE or (p == FIRST_STAGE and first)
                    or (p == LAST_STAGE and last) or (p == TIED_HEAD and last and not first)):
                continue
            if group.rule == "routed":
                routed += group.bytes * routed_share
            else:
                other += group_bytes_per_rank(group, layout.tp, arch.num_kv_heads)
        held.append((other, routed))
    return held


def checkpoint_split(arch: ModelArchitecture, layout: Layout,
                     groups: tuple[TensorGroup, ...] | None = None) -> tuple[float, float]:
    """checkpoint_stages of the stage that holds the most."""
    return max(checkpoint_stages(arch, layout, groups), key=sum)


def weights_per_gpu_bytes(arch: ModelArchitecture, layout: Layout, weights_bytes: float) -> float:
    """The weights one GPU of `layout` holds (weights_split)."""
    return sum(weights_split(arch, layout, weights_bytes))


def moe_workspace_bytes(arch: ModelArchitecture, layout: Layout, engine: EngineSettings) -> float:
    """The fused-MoE workspace vLLM keeps allocated once the profiled forward has run (vllm/v1/worker/workspace.py,
    get_simultaneous; sized in fused_moe/modular_kernel.py from TritonExperts.workspace_shapes): M tokens x top-k x
    (max(I, K) + max(2I, K)) in the activation dtype, with M = max_num_batched_tokens (times the data-parallel ranks
    whose tokens are gathered, expert_shard), I the expert width on one GPU and K the hidden size (workspace13 at
    least M x K). With data parallelism the gathered hidden states and router logits (M x (K + experts)) come on
    top. None where no layer has routed experts (an MoE checkpoint cut to its first dense layers): the workspace is
    allocated at its first request (_ensure_workspace_size)."""
    if not arch.moe_layers or arch.quant_method in MOE_WORKSPACE_UNMANAGED:
        return 0.0
    shard = expert_shard(arch, layout)
    tokens, k = engine.max_num_batched_tokens * shard.token_ranks, arch.hidden_size
    width = shard.width
    workspace13 = max(tokens * arch.experts_per_token * max(width, k), tokens * k)
    gathered = tokens * (k + arch.num_experts) if shard.token_ranks > 1 else 0
    return (workspace13 + tokens * arch.experts_per_token * max(2 * width, k) + gathered) * 2.0


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
    """The widest dense MLP's activations live at the forward's peak for max_num_batched_tokens tokens on this GPU
    (dense_mlp_width), in bf16: a gated MLP's gate-up output (2 x width) and its activation's (width), 3 x width; an
    un-gated one's up-projection output, width, its elementwise activation taken as written in place (not traced; the
    three Starcoder2 rows sit 0.03-0.06 GiB above the line so counted). The gated blocks traced on
    Mistral-Large-2407:8 (validation 26: 0.875 and 0.4375 GiB)."""
    v1: bool
    """Served by the V1 model runner, whose profile runs attention and samples with top-k and top-p."""
    moe: bool = False
    """A mixture-of-experts model (routed experts)."""
    mla: float = 0.0
    """A latent-attention layer's profile-time holdings (mla_profile_bytes), a floor under the peak."""
    mla_hold: bool = False
    """V1 runner only: a hybrid (latent attention beside linear-attention or other state layers) whose router takes
    0.25.1's compile hold: the hold is live at the latent layer's peak too, on top of PeakFeatures.mla. The profile
    runs traced on vLLM 0.25.1 (v91 Kimi-Linear:6 at 32 sequences, v92 Ling-2.5-shaped:8; docs/benchmarks.md "Peak
    traces") peaked in the latent layer at its context workspace, the fused-MoE workspace, its own tensors and 0.95 /
    0.63 GiB of the earlier layers' buffers that a generation-2 collection gave back after it, with the router's
    grouped_topk outputs among them. Plain latent-attention decoders (DeepSeek-V3, Kimi-K2, Moonlight) peak on the
    fitted lines, which hold their rows (tests/unit/test_fit.py); DeepSeek-V3:5's peak leaves at most 0.95 GiB for a
    hold at its latent layer where the per-query term would put 2.75."""
    router_hold: bool = False
    """An engine whose first router compile keeps the call stack's tensors (EngineProfile.router_compile_hold), on
    either runner, and a model whose router takes that path (biased_grouped_router) in at least one layer."""
    embedding: float = 0.0
    """The input embedding's table on this GPU in the 16-bit serving dtype (vocabulary padded as vLLM pads it, split
    over the tensor ranks as VocabParallelEmbedding splits it): the size of the block the first compile holds
    (compile_line_gib). 0 for a multimodal model served with its multimodal inputs (embeds_outside_graph)."""
    encoder: float = 0.0
    """The multimodal encoder's profile on its largest dummy batch (encoder_profile_gib), a phase of its own before
    the decoder's dummy run; 0 where the runner profiles no encoder or the model takes no multimodal inputs."""
    encoder_outputs: float = 0.0
    """The encoder's outputs for that batch, which the runner keeps (its encoder cache) through the decoder's dummy
    run and the sampler: on top of every decoder phase."""
    mla_excess: float = 0.0
    """V1 runner only: latent attention's profile workspace beyond the cap the fit holds (mla_workspace_excess_bytes),
    live at the latent layer in the forward phase."""
    topk_buffer: float = 0.0
    """V1 runner only: the top-k/top-p sampler's per-program buffer, one float32 row of the vocabulary per streaming
    multiprocessor (v1/sample/ops/topk_topp_triton.py apply_top_k_top_p_triton: min(next_power_of_2(programs),
    num_sm) rows, cached for the process), GPU_SMS."""


GPU_SMS = {"nvidia-tesla-t4": 40, "nvidia-l4": 58, "nvidia-tesla-a100": 108, "nvidia-a100-80gb": 108,
           "nvidia-h100-80gb": 132, "nvidia-h100-mega-80gb": 132, "nvidia-h200-141gb": 132, "nvidia-b200": 148}
"""Streaming multiprocessors per GPU (NVIDIA's datasheets: T4, L4, A100, H100 SXM5, H200 SXM, B200); the H200's 132
is what the traced buffer gives (0.0747 GiB for a 151,936-token vocabulary, run t6)."""


def peak_features(arch: ModelArchitecture, layout: Layout, engine: EngineSettings) -> PeakFeatures:
    heads, width, v2 = arch.num_attention_heads / layout.tp, query_width(arch), runner_v2(arch, engine)
    return PeakFeatures(
        logits=engine.max_num_seqs * arch.vocab_size * 4 / GIB,
        hidden=engine.max_num_batched_tokens * arch.hidden_size * 2 / GIB,
        query=engine.max_num_batched_tokens * heads * width * 2 / GIB,
        workspace=moe_workspace_bytes(arch, layout, engine) / GIB,
        mlp=engine.max_num_batched_tokens * dense_mlp_width(arch) / layout.tp * (3 if arch.mlp_matrices == 3 else 1)
        * 2 / GIB,
        v1=not v2, moe=bool(arch.num_experts), mla=mla_profile_bytes(arch, layout, engine) / GIB,
        router_hold=engine.profile.router_compile_hold and arch.biased_grouped_router and arch.moe_layers > 0,
        embedding=0.0 if embeds_outside_graph(arch, engine) else
        padded_vocab(arch.vocab_size) / layout.tp * arch.hidden_size * 2 / GIB,
        topk_buffer=0.0 if v2 else GPU_SMS.get(engine.gpu, max(GPU_SMS.values())) * arch.vocab_size * 4 / GIB,
        mla_excess=0.0 if v2 else mla_workspace_excess_bytes(arch, layout, engine) / GIB,
        mla_hold=not v2 and latent_layers(arch) and arch.has_state_layers,
        **encoder_profile_gib(arch, engine, v2))


ENCODER_HIDDEN_STATES = 12.5
"""Tensors of the vision tower's width live at the encoder profile's peak, per patch of the dummy batch, beside its
input values: in a Qwen3-VL-style tower's attention the qkv output (3), the rotary outputs of q and k and their
contiguous copies (4), the block's input, its norm, the position embeddings, the attention output and the projection
(about 5). Set from one allocator trace (Qwen3.5-0.8B-shaped, vision width 768, 50,176 patches, run t51a: 1.04 GiB
with 0.144 of input values); a tower's MLP phase (3 x intermediate wide for a gated MLP, 2 x for an un-gated one,
plus the residual) stays under it for the towers read (intermediate 2.7-4 x the width)."""


ENCODER_WINDOW_STATES = 0.85
"""Tower-width states per patch a windowed tower (EncoderInput.windowed: Qwen2.5-VL) holds beyond
ENCODER_HIDDEN_STATES: its profile peaks took 13.19-13.35 widths per patch beside the input values on five H200 rows
of 65,536-262,144 patches (validations 55, 58-61: 2.23, 2.23, 4.43, 6.63, 8.82 GiB), the largest kept. Set from
those rows; its window reordering gathers the hidden states and rotary tables per block, where the cause was not
traced."""


def encoder_item(arch: ModelArchitecture, engine: EngineSettings) -> tuple[int, int]:
    """(patches, decoder tokens) of the one item the encoder profile runs, of the modality with the most tokens per
    item among those --limit-mm-per-prompt leaves on (MultiModalBudget.get_modality_with_max_tokens, the image on a
    tie). Gemma 3: its image and the crops pan-and-scan adds to it where --mm-processor-kwargs turns it on
    (pan_and_scan_crops). The Qwen-VL families (vllm/model_executor/models/qwen2_vl.py): the image of
    most tokens under the image scope's max_pixels (most_features_image) as the processor resizes it (resized_image,
    min and max pixels of --mm-processor-kwargs over the published processor's: engine.vision_sizes); Qwen2-VL's
    and Qwen2.5-VL's dummy video is frames of that image resized by the video scope, as many as max_model_len holds,
    at most EncoderInput.video_groups temporal groups (get_num_frames_with_most_features), so from 2 x an image's
    tokens of context on it is the item. Qwen3-VL's and Qwen3.5's video is left out: at their processors' sizes it
    holds fewer tokens than the image (layers.py QWEN2_VL_VIDEO_FRAMES)."""
    item = arch.encoder_input
    if item.pool:
        tokens, units, patches = gemma4_items(arch, engine)[gemma4_modality(arch, engine)]
        return units * patches, tokens
    if item.side:
        settings = tuple(given if given is not None else default
                         for given, default in zip(engine.pan_and_scan, GEMMA3_PAN_AND_SCAN, strict=True))
        images = 1 + pan_and_scan_crops(item.side, *settings)
        return item.patches * images, item.tokens * images
    if not item.unit:
        return item.patches, item.tokens
    (image_min, image_max), (video_min, video_max) = engine.vision_sizes
    unit, (least, most) = item.unit, item.pixels
    height, width = most_features_image(image_max or most, unit)
    candidates = {}
    if "image" not in engine.modalities_off:
        h, w = resized_image(height, width, unit, image_min or least, image_max or most)
        candidates["image"] = h * w // unit ** 2
    if item.video_groups and "video" not in engine.modalities_off:
        h, w = resized_image(height, width, unit, video_min or least, video_max or most)
        group = h * w // unit ** 2
        candidates["video"] = group * max(1, min(engine.max_model_len // group, item.video_groups))
    tokens = max(candidates.values(), default=item.tokens)
    return tokens * (unit // item.patch) ** 2, tokens


def gemma4_items(arch: ModelArchitecture, engine: EngineSettings) -> dict[str, tuple[int, int, int]]:
    """Gemma 4's items as vLLM 0.32.0 sizes them (vllm/model_executor/models/gemma4_mm.py): per modality, (the tokens
    of one item, as Gemma4ProcessingInfo.get_mm_max_tokens_per_item counts them; the images or frames of one item the
    tower runs; the patches of each, padded to max_soft_tokens x pool^2 as Gemma4ImagePixelInputs holds them). An
    image: max_soft_tokens of --mm-processor-kwargs where it is one of GEMMA4_SOFT_TOKENS, else the config's
    default_output_length. A video: GEMMA4_VIDEO_FRAMES frames at GEMMA4_FRAME_SOFT_TOKENS each, fewer where
    --limit-mm-per-prompt's video num_frames is fewer (EngineSettings.video_frames)."""
    item, given = arch.encoder_input, engine.max_soft_tokens
    soft = given if isinstance(given, int) and given in GEMMA4_SOFT_TOKENS else item.tokens
    square = item.pool * item.pool
    frames = min(GEMMA4_VIDEO_FRAMES, engine.video_frames or GEMMA4_VIDEO_FRAMES)
    return {"image": (soft, 1, soft * square),
            "video": (frames * (GEMMA4_FRAME_SOFT_TOKENS + GEMMA4_FRAME_MARKERS), frames,
                      GEMMA4_FRAME_SOFT_TOKENS * square)}


def gemma4_modality(arch: ModelArchitecture, engine: EngineSettings) -> str:
    """The modality of Gemma 4's encoder profile: of those --limit-mm-per-prompt leaves on, the one of the most
    tokens an item (MultiModalBudget.get_modality_with_max_tokens), the image where none is left on."""
    items = gemma4_items(arch, engine)
    served = [m for m in ("image", "video") if m not in engine.modalities_off] or ["image"]
    return max(served, key=lambda m: items[m][0])


def with_item_floor(arch: ModelArchitecture, engine: EngineSettings) -> EngineSettings:
    """The engine with vLLM's floor on a defaulted max_num_batched_tokens: for a multimodal model that attends
    bidirectionally over an item (ModelArchitecture.image_prefix_lm) and whose processing info gives per-item token
    ceilings (Gemma 4), vLLM raises it to the most tokens of one item of any modality the model supports, whatever
    --limit-mm-per-prompt leaves on (vllm/engine/arg_utils.py _get_min_mm_batched_tokens, the same in 0.25.1 and
    0.32.0), so that an item fits one batch. Given --max-num-batched-tokens, the flag stands."""
    item = arch.encoder_input
    if engine.batched_tokens_given or not arch.image_prefix_lm or not item or not item.pool:
        return engine
    most = max(tokens for tokens, _, _ in gemma4_items(arch, engine).values())
    return replace(engine, max_num_batched_tokens=max(engine.max_num_batched_tokens, most))


TOWER_CHUNK_SHARE = 10
"""vLLM 0.32.0 runs Gemma 4's tower over as many images or frames at a time as fit min(half the free memory, 1/10
of the GPU's) at `patches x 4 x position_embedding_size x 8` bytes each (gemma4_mm.py _encoder_chunk). The plan
takes the tenth: half the free memory is less only where weights and the profile hold over 80% of the GPU, and then
vLLM runs smaller chunks than planned (the safe side)."""


def tower_chunk(arch: ModelArchitecture, engine: EngineSettings, patches: int) -> int:
    """The images or frames of `patches` patches each that vLLM runs Gemma 4's tower over at once (TOWER_CHUNK_SHARE),
    at least one; every one of them at once where the GPU is not named (the safe side)."""
    acc = ACCELERATORS.get(engine.gpu)
    cost = patches * 4 * arch.encoder_input.positions * 8
    if acc is None or not cost:
        return sys.maxsize
    return max(1, acc.memory_bytes // TOWER_CHUNK_SHARE // cost)


def encoder_items(arch: ModelArchitecture, engine: EngineSettings) -> int:
    """Items of the largest kind in the encoder profile's dummy batch: as many as the encoder budget
    (max_num_batched_tokens, at least one item's tokens) holds, at least one (vllm/multimodal/encoder_budget.py
    MultiModalBudget._get_max_items with chunked prefill on; the decoder's bound, max_num_seqs x the items a prompt
    of max_model_len holds, does not bind at vLLM's defaults and is not applied)."""
    tokens = encoder_item(arch, engine)[1]
    return max(1, max(engine.max_num_batched_tokens, tokens) // tokens)


def encoder_profile_gib(arch: ModelArchitecture, engine: EngineSettings, v2: bool) -> dict[str, float]:
    """PeakFeatures.encoder and .encoder_outputs: the dummy batch's input values in the 16-bit serving dtype,
    ENCODER_HIDDEN_STATES of the tower's width per patch and what the tower keeps through its later blocks (Qwen3-VL's
    deepstack features: allocated 2.29 GiB of Qwen3-VL-8B's profile, validation 55, where the rest of the term gave
    1.95); the outputs, the items' decoder tokens at the output width.
    Nothing where the model takes no multimodal inputs (multimodal_inputs), where the encoder input is not
    read (ModelArchitecture.encoder_input), or on a V2 runner that profiles no encoder (0.25.1's)."""
    if not arch.encoder_input or not multimodal_inputs(arch, engine) or (v2 and not engine.profile.v2_encoder_profile):
        return {}
    item = arch.encoder_input
    items = encoder_items(arch, engine)
    patches, tokens = encoder_item(arch, engine)
    outputs = items * tokens * item.out * 2 / GIB
    if item.pool:
        return {"encoder": gemma4_tower_bytes(arch, engine, items) / GIB, "encoder_outputs": outputs}
    per_patch = item.values + (ENCODER_HIDDEN_STATES + (ENCODER_WINDOW_STATES if item.windowed else 0.0)) * item.width
    return {"encoder": items * (patches * per_patch + tokens * item.held) * 2 / GIB, "encoder_outputs": outputs}


GEMMA4_MLP_HELD = 4
"""Tower-width tensors per patch of the chunk held while a block of Gemma 4's tower (transformers' Gemma4VisionModel,
which vLLM 0.32.0 runs) is in its MLP: the chunk's patch embeddings, which vLLM's loop holds until the tower returns,
the block's input, which the encoder's loop holds, the residual after attention and its normed copy (the allocator
trace of bench/tower_peak.py --trace, docs/benchmarks.md "Gemma 4's tower")."""
GEMMA4_ATTENTION_HELD = 7
"""The same in a block's attention: the patch embeddings, the block's input and its normed copy, the query and key
after their norms and rotary embedding, the value after its norm, and the attention's output (the same trace)."""
GEMMA4_MASK_BYTES = 3
"""Bytes per element of a chunk's patches x patches attention mask live in a block's attention: the boolean mask
transformers builds for SDPA from the padding (masking_utils.py create_bidirectional_mask, 1 byte, held through the
tower) and the 16-bit additive copy SDPA makes of it for its memory-efficient kernel (2); 1 in the MLP."""


def gemma4_tower_bytes(arch: ModelArchitecture, engine: EngineSettings, items: int) -> float:
    """Gemma 4's encoder profile (vllm/model_executor/models/gemma4_mm.py _process_image_input,
    _process_video_input): every image or frame of the dummy batch as input values in the 16-bit dtype, the tower run
    over a chunk of them at a time (tower_chunk) while the outputs of the chunks before are held, at the larger of a
    block's attention (GEMMA4_ATTENTION_HELD widths and GEMMA4_MASK_BYTES of mask per element) and its MLP
    (GEMMA4_MLP_HELD widths, EncoderInput.mlp and the mask); then the outputs of all (a video's frames gathered into
    one tensor beside the list of them)."""
    item, modality = arch.encoder_input, gemma4_modality(arch, engine)
    _, units, patches = gemma4_items(arch, engine)[modality]
    units *= items
    chunk = min(units, tower_chunk(arch, engine, patches))
    width = item.width * 2

    def running(size: int) -> float:
        attention = GEMMA4_ATTENTION_HELD * width * patches + GEMMA4_MASK_BYTES * patches * patches
        mlp = (GEMMA4_MLP_HELD + item.mlp) * width * patches + patches * patches
        return size * max(attention, mlp)

    full, rest = divmod(units, chunk)
    chunks = max(running(chunk) + (full - 1) * chunk * patches * width,
                 running(rest) + full * chunk * patches * width if rest else 0.0)
    gathered = (2 if modality == "video" else 1) * units * patches * width
    return units * patches * item.values * 2 + max(chunks, gathered)


def embeds_outside_graph(arch: ModelArchitecture, engine: EngineSettings) -> bool:
    """Whether the compiled forward takes inputs_embeds, so no piece of it holds the input embedding: a multimodal
    wrapper (a vision tower loaded) served with multimodal inputs, whose runner embeds the tokens eagerly before the
    compiled model (vLLM 0.32.0 v1/worker/gpu_model_runner.py _dummy_run: _prepare_mm_inputs when
    supports_mm_inputs; Model Runner V2 model_runner.py: dummy_inputs_embeds when uses_inputs_embeds). The allocator
    trace of Qwen3-VL-8B-Instruct at 128 sequences on an H200 (run t50, cold) peaked at 0.78 GiB in its forward (the
    MLP's 0.375 + 0.1875 and three 0.0625 hidden states) with no embedding-sized block, where the compile line was
    1.28."""
    return bool(arch.vision_parameters) and multimodal_inputs(arch, engine)


def multimodal_inputs(arch: ModelArchitecture, engine: EngineSettings) -> bool:
    """Whether vLLM serves the model's multimodal inputs (ModelConfig._supports_multimodal_inputs): not with
    --language-model-only, nor with --limit-mm-per-prompt at 0 for every modality the model supports
    (ModelArchitecture.modalities; where those are not read, every modality the flag names is taken as all of
    them). A modality the flag does not name keeps vLLM's limit of 999."""
    if engine.text_only:
        return False
    supported = set(arch.modalities) or set(engine.modalities_named)
    return not supported or not supported <= engine.modalities_off


def padded_vocab(rows: int) -> int:
    """A vocabulary table's rows as vLLM allocates them (VOCAB_PADDING)."""
    return -(-rows // VOCAB_PADDING) * VOCAB_PADDING


def dense_mlp_width(arch: ModelArchitecture) -> int:
    """The widest MLP outside the routed experts: intermediate_size where any layer is dense, and the shared
    expert(s) of MoE layers (shared_expert_intermediate_size, or n_shared_experts x moe_intermediate_size)."""
    if not arch.num_experts:
        return arch.intermediate_size
    dense_layers = arch.first_dense_layers > 0 or 0 <= arch.moe_layer_count < arch.num_layers
    shared = arch.shared_expert_intermediate_size or arch.num_shared_experts * arch.moe_intermediate_size
    return max(arch.intermediate_size if dense_layers else 0, shared)


SAMPLER_LOGITS_COPIES = 1.5
"""The sampler's logits at Model Runner V2's profile peak, in PeakFeatures.logits (float32) units: the lm_head's bf16
output (0.5) and apply_sampling_params' float32 copy of it (1.0; v1/worker/gpu/sample/sampler.py), both live."""

COMPILE_HIDDEN_COPIES = 2
"""Hidden-state tensors of max_num_batched_tokens tokens live beside the embedding-sized block at the compile's peak
(the first piece's outputs: docs/benchmarks.md "Peak traces", run t5)."""


FORWARD_HIDDEN_COPIES = 3
"""Hidden-state tensors of the batch live beside the MLP's activations at the forward's peak (the residual, the
layer's input and its normed copy: three 0.1875 GiB blocks in Mistral-Large-2407:8's trace, validation 26)."""


def forward_line_gib(f: PeakFeatures, c: MemoryFit) -> float:
    """The forward phase of the peak (without attention, without the workspace): the MLP's activations
    (PeakFeatures.mlp), FORWARD_HIDDEN_COPIES hidden states and c.forward_base_gib."""
    return c.forward_base_gib + f.mlp + FORWARD_HIDDEN_COPIES * f.hidden


def sampler_line_gib(f: PeakFeatures, c: MemoryFit) -> float:
    """The sampling phase of Model Runner V2's profile: the logits (SAMPLER_LOGITS_COPIES) and c.sampler_base_gib."""
    return SAMPLER_LOGITS_COPIES * f.logits + c.sampler_base_gib


V1_SAMPLER_LOGITS_COPIES = 3.5
"""The V1 runner's profile sampler at its peak, in PeakFeatures.logits (float32) units: the lm_head's bf16 output
(0.5), its float32 copy (v1/sample/sampler.py `logits.to(torch.float32)`), and the top-k/top-p sampler's softmax
probabilities and exponential noise (v1/sample/ops/topk_topp_sampler.py forward_native, empty_exponential_noise_like),
all live (allocator traces of Qwen3-235B-A22B-FP8:10 and GLM-4.5-Air:8, run t6)."""


def v1_sampler_line_gib(f: PeakFeatures, c: MemoryFit) -> float:
    """The sampling phase of the V1 runner's profile: the logits (V1_SAMPLER_LOGITS_COPIES), the top-k/top-p buffer
    and c.sampler_base_gib, the same constant as Model Runner V2's sampler."""
    return V1_SAMPLER_LOGITS_COPIES * f.logits + f.topk_buffer + c.sampler_base_gib


def compile_line_gib(f: PeakFeatures) -> float:
    """The first torch.compile of the profiled forward: inside inductor's standalone_compile of the piece that holds
    the input embedding, vLLM 0.25.1 (torch 2.11) allocates one block the size of the embedding table on the GPU and
    two hidden-state tensors (allocator traces of eight dense models on an H200, equal to the logged peak on each:
    docs/benchmarks.md "Peak traces", runs t5 and v26). Nothing fitted. It precedes the first MoE layer, so the
    workspace is not under it. A start whose compile artifacts are cached (the compile cache,
    components/compile_cache.py) skips the compile and peaks lower: the plan takes the cold start (validation 27:
    Llama-3.1-70B:40 profiled 2.21 GiB cold, 1.72 from the cache)."""
    return f.embedding + COMPILE_HIDDEN_COPIES * f.hidden


def fitted_peak_gib(f: PeakFeatures, c: MemoryFit) -> float:
    """The parts model with constants `c` (FITTED, or bench/fit.py's while fitting): the larger of the profile's
    phases. On Model Runner V2 the sampler (sampler_line_gib) or the forward (forward_line_gib); on the V1 runner, whose
    profile samples with top-k and top-p and runs attention, its sampler (v1_sampler_line_gib) or the forward with
    its attention blocks (c.v1_attention_per_query); either on the MoE workspace (from vLLM's source, not fitted), with
    0.25.1's router compile hold where the router takes that path (c.router_hold_per_query); the first compile
    (compile_line_gib); on V2 a latent attention layer's profile context (PeakFeatures.mla, from vLLM's source);
    the encoder's outputs on top of all of them, and the multimodal encoder's own profile before them
    (PeakFeatures.encoder).
    Latent attention needs no term of its own in the lines: its query is heads x (qk_nope + qk_rope) wide."""
    if f.v1:
        phases = max(v1_sampler_line_gib(f, c),
                     forward_line_gib(f, c) + c.v1_attention_per_query * f.query + f.mla_excess)
    else:
        phases = max(sampler_line_gib(f, c), forward_line_gib(f, c))
    peak = phases + f.workspace
    hold = c.router_hold_per_query * f.query if f.router_hold else 0.0
    latent = f.mla + (hold if f.mla_hold else 0.0)
    return max(max(peak + hold, compile_line_gib(f), latent) + f.encoder_outputs, f.encoder)


def activation_peak_bytes(arch: ModelArchitecture, layout: Layout, engine: EngineSettings,
                          fitted: MemoryFit = FITTED) -> float:
    """vLLM's profiled `torch peak memory increase` on one GPU (fitted at PEAK_FIT_SETTINGS by bench/fit.py), leaned
    the margin of its kind (margin_kind) to the safe side."""
    f = peak_features(arch, layout, engine)
    return (fitted_peak_gib(f, fitted) + getattr(fitted, MARGIN_FIELDS[margin_kind(f)])) * GIB


MARGIN_FIELDS = {"v2": "peak_margin_gib", "v2-moe": "moe_peak_margin_gib", "v1": "v1_peak_margin_gib",
                 "v1-hold": "v1_hold_peak_margin_gib"}
"""The MemoryFit field of each margin kind: Model Runner V2 without experts, and with them (on the fused-MoE
workspace), the V1 runner, the V1 runner with 0.25.1's router compile hold (whose size depends on when Python's
collector runs)."""


def margin_kind(f: PeakFeatures) -> str:
    """Which margin a peak takes (MARGIN_FIELDS)."""
    if not f.v1:
        return "v2-moe" if f.moe else "v2"
    return "v1-hold" if f.router_hold else "v1"


MOE_GROUP_GIB = 0.55
"""Per GPU, a mixture-of-experts model whose MoE layers span more than one GPU (tensor or data parallel) keeps this
much more outside the KV cache than the parts model (fitted at TP=1) gives: Qwen3-30B-A3B at TP=2 on 2x H100 (vLLM
0.25.1, issue 43's table) left 0.52 GiB less KV cache than predicted, where Llama-3.1-8B at TP=2 on H200 was within
0.23%. Fitted on that one row (to the safe side); docs/benchmarks.md "Layouts" checks it on rows it was not fitted
on."""
MOE_DATA_PARALLEL_GIB = 1.15
"""On top of MOE_GROUP_GIB where the MoE layers gather the tokens of several data-parallel ranks (the DP and EP
groups' communicators and buffers the profile does not count): Qwen3-30B-A3B at DP=2 + EP (issue 43's table) left
1.67 GiB less KV cache per rank than the parts model with the gathered workspace (moe_workspace_bytes). Fitted on
that one row, checked like MOE_GROUP_GIB."""


def moe_parallel_bytes(arch: ModelArchitecture, layout: Layout) -> float:
    if not arch.moe_layers or layout.dp * layout.tp == 1:
        return 0.0
    return (MOE_GROUP_GIB + (MOE_DATA_PARALLEL_GIB if layout.dp > 1 else 0.0)) * GIB


def outside_kv_bytes(arch: ModelArchitecture, layout: Layout, engine: EngineSettings,
                     fitted: MemoryFit = FITTED) -> float:
    """Per-GPU memory outside weights and KV cache: activation peak + non-torch + CUDA graphs where the batch
    settings are within the fitted ones (parts_model_applies); the measured family reserves (plus 0.32.0's dense
    graphs) elsewhere, or a vision encoder's profile phase where larger (the reserves were measured on text models;
    the default batch settings of GPUs under 70 GiB and of the A100 take this path); the MoE groups' memory of a
    multi-GPU layout on top (moe_parallel_bytes)."""
    graphs = cudagraph_bytes(arch, layout, engine, fitted)
    parallel = moe_parallel_bytes(arch, layout)
    floor = (fitted.non_torch_gib + fitted.baseline_gib(engine.gpu)) * GIB
    if parts_model_applies(engine):
        return activation_peak_bytes(arch, layout, engine, fitted) + floor + graphs + parallel
    measured_with_graphs = bool(arch.num_experts or arch.kv_lora_rank or arch.has_state_layers)
    reserve = reserve_bytes(arch)
    if encoder := encoder_profile_gib(arch, engine, runner_v2(arch, engine)):
        # the text models' reserve does not hold a vision encoder's profile: where that phase is larger than the
        # reserve's activations, it takes their place, and its outputs stay on top (fitted_peak_gib's rule)
        reserve = max(reserve, floor + encoder["encoder"] * GIB) + encoder["encoder_outputs"] * GIB
    return reserve + (0.0 if measured_with_graphs else graphs) + parallel


def parts_model_applies(engine: EngineSettings) -> bool:
    """The parts model holds at the fitted batch settings and at fewer sequences with the same batched tokens: the
    parts that scale with max_num_seqs are sized from it as vLLM sizes them (the sampler's logits, the captured
    graphs and the graph-estimate cache), the others do not move. Kimi-Linear at 32 sequences (validation 36, seen
    before this rule was written): -0.37% and -0.86% with it, -8.75% and -28.7% with the family reserve."""
    seqs, tokens = PEAK_FIT_SETTINGS
    return engine.max_num_batched_tokens == tokens and engine.max_num_seqs <= seqs


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


