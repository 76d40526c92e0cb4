"""The fitted constants of the memory vLLM keeps outside the KV cache: one frozen object, written by bench/fit.py.

`python bench/fit.py` fits them on the GPU rows in docs/benchmarks/results.json and prints `FITTED = MemoryFit(...)`
to paste here; tests/unit/test_fit.py holds FITTED to that fit, so a change of rows or of the model that is not
re-fitted fails `make test`. Nothing assigns to these values while the program runs: bench/fit.py's margin search
hands the planner a copy (dataclasses.replace) for each candidate. The model that reads them is planner/memory.py.

The rows: the started checkpoints (31 on an H200, 21 on an H100) and 2 ablations of vLLM 0.25.1 at TP=1,
--max-num-seqs 1024, --max-num-batched-tokens 8192 (PEAK_FIT_SETTINGS in planner/memory.py); bench/fit.py names the
rows each constant is fitted on, and docs/benchmarks.md "Planner calibration" keeps each validation batch as it was
predicted before its run.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MemoryFit:
    """The parts model's constants (GiB, or GiB per GiB of a feature of planner/memory.py PeakFeatures)."""

    sampler_base_gib: float
    """Model Runner V2's profile peaks in the sampler where neither the forward nor the first compile goes higher: the
    lm_head's bf16 logits and their float32 copy (v1/worker/gpu/sample/sampler.py apply_sampling_params), 1.5 x
    PeakFeatures.logits, on the MoE workspace (preallocated by the first MoE layer and kept), and this much more (the
    median over the V2 rows whose peak the sampler sets, dense and MoE, without a router compile hold). Allocator
    traces showed exactly these blocks at the peak (Qwen3-235B: workspace 1.00, logits 0.87, other 0.10 GiB)."""
    forward_base_gib: float
    """The forward phase beside the MLP's activations and three hidden states (planner/memory.py forward_line_gib):
    the median over the dense rows whose peak neither the sampler nor the first compile (compile_line_gib) reaches,
    narrow vocabularies beside wide MLPs (Mistral-7B, Mistral-Small-24B, Falcon3-10B, granite-3.3, the DeepSeek-Coder
    and Starcoder2 rows): 0.08-0.09 GiB on the gated ones, 0.12-0.14 on Starcoder2's un-gated MLP. The dense peak is
    the largest of the three phases: V2's profile compiles the forward as it first runs it, then samples
    (vllm/v1/worker/gpu/model_runner.py profile_run). On the 35 dense rows the three leave residuals of -0.05..+0.06
    GiB, but for Llama-3.1-70B cut to 40 layers (-0.49): its profile took 12.7 s where the others took 20-40, a
    compile served from the cache, so it had no compile block. The fitted sampling and forward lines these replace
    left -0.43..+0.32."""
    v1_attention_per_query: float
    """The V1 runner's forward beyond the forward line, per GiB of one bf16 query tensor of the batch on this GPU:
    V1's profile runs attention (profile_run -> _dummy_run), V2's skips it (skip_attn=True), so the query, key, value
    and output blocks of the batch are live beside the MLP's and the hidden states. The median over the V1 rows whose
    forward sets the peak (above the V1 sampler line; bench/fit.py)."""
    router_hold_per_query: float
    """Per GiB of one bf16 query tensor of the batch on this GPU, what vLLM 0.25.1's profile keeps of the first MoE
    layer's call stack when its router compile raises (EngineProfile.router_compile_hold, biased_grouped_router), on
    either runner: GLM-4.5-Air:8 profiled 3.40 GiB on V2 where the sampler, logits and workspace make 1.87, and its
    trace named the frames that held the rest; on the V1 runner GLM-4.5-Air:8 and GLM-4.5:6 kept 1.49 and 1.54 GiB
    that a full collection freed (run t6). Fitted through the origin on the Model Runner V2 rows that have the router;
    how much is held depends on when Python's collector runs (Moonlight, the same router, held none; GLM-4.5:6 on V1
    lost it before its sampler's softmax), so it is a 0.25.1 calibration term, not a plan for 0.32.0, which holds
    nothing: with 0.32.0's fake of the kernel registered in 0.25.1 (bench/calibrate.py --router-fake, validation 24)
    Kimi-K2 and GLM-4.5-Air held nothing and landed within -0.52..-0.39% KV."""
    non_torch_gib: float
    """Memory outside torch's allocator that the profiled forward adds (0.22-0.24 GiB on every run; the mean)."""
    baseline_gib_by_gpu: tuple[tuple[str, float], ...]
    """What each GPU type holds before vLLM profiles (CUDA context, allocator pools): gpuMemoryUtilization x total
    less the logged non-KV total less the logged available KV memory on the V2 runs on it (no graph estimate
    subtracted), the mean. H200: 0.54 GiB; H100 80GB: 0.41-0.42 GiB on the 18 V2 rows of validation batches 5-8 (set
    from batch 5 alone first, 0.423, it held on the 14 rows of batches 6-8 before they joined the fit)."""
    graphs_dense_base_gib: float
    graphs_dense_per_khidden_gib: float
    """CUDA graphs as Model Runner V2 captures them (0.25.1, "Graph capturing finished ... took N GiB"): 0.48-2.56
    GiB on 36 runs, a line in the hidden width. vLLM 0.32.0 keeps them out of the KV cache; 0.25.1's V2 did not (its
    estimate a stub); 0.32.0 itself cannot start here (its torch needs 2.13)."""
    graphs_plain_base_gib: float
    graphs_plain_per_khidden_gib: float
    graphs_plain_per_100_pieces_gib: float
    """The same capture for a model without experts or latent attention: a plane in the hidden width and the graph's
    pieces on one GPU (planner/memory.py graph_pieces: its attention and state layers), fitted on those rows of the
    line's alone (32). The capture grows about 9 MiB a piece: Llama-3.1-70B cut to 28 / 40 / 68 layers took 1.53 /
    1.63 / 1.89 GiB, Qwen2.5-72B at 12 / 64 layers 1.39 / 1.86, Mistral-Large at 8 / 42 1.90 / 2.20, and HRM-Text's
    128 attention runs 1.57 where the line gives 0.63 (validation 81). Added 2026-11-29 after that run; on the 54 dense
    V2 captures of the held-out batches, which neither was fitted on, the line missed by mean -0.08, sd 0.26, up to
    0.94 GiB short (HRM-Text), the plane by mean -0.02, sd 0.21, up to 0.37 short (tests/unit/test_fit.py
    test_dense_graphs_on_v2_...). Models with experts or latent attention keep the line and their own terms."""
    graphs_moe_v2_per_kquery_excess: float
    """On top of that line for a mixture-of-experts model on Model Runner V2, per 1,000 by which one token's query on
    a GPU (heads / TP x query head width) is wider than its hidden size (planner/memory.py query_excess). The
    captured graphs of the MoE rows run on V2 grow with it (GLM-4.5-Air, 96 query heads of 128 on 4,096: 1.93 GiB
    where the line gives 0.96), while the line, fitted on V2's default rows, where the few wide queries are dense,
    leaves them under; fitted through the origin on the non-MLA MoE rows on V2 (validation 18's forced-V2 rows carry
    it), checked on the 9 of validations 19-21, held out: -0.21..+0.20 GiB of the capture (tests/unit/test_fit.py).
    MLA keeps graphs_mla_per_khidden_gib on V2."""
    graphs_v1_growth_base_gib: float
    graphs_v1_growth_per_100_pieces_gib: float
    """The V1 runner's CUDA-graph estimate beyond the first FULL capture's split accumulators (planner/memory.py
    v1_graph_estimate_bytes): the second captures' growth times the further graphs, a line in the layers whose mixer
    is one of vLLM's splitting ops on a GPU (each splits the piecewise graph: attention, Mamba, short convolution,
    linear attention), as if each graph's own device memory grew with its pieces (not traced): 2 MiB a graph (1 for
    each mode) at up to 12 such layers, 9-14 at 64-88 (vLLM's debug lines). Fitted on the V1 rows of the fit (MoE and
    Qwen3-Next; not MLA, which kept its per-hidden line then) by the median of pairwise slopes (Theil-Sen), so that
    GLM-4.5:6's 26 MiB a graph (a segment torch's allocator kept for its dense gate-up output, not a function of the
    config) does not set the line; it stays over the line, with LFM2-1.2B (20 MiB) and Jamba:16 (14), as rows the plan
    over-counts (tests/engine/test_families.py OVER_COUNTED). Before: their median, 0.29 GiB, for any model."""
    graphs_mla_per_khidden_gib: float
    """The V1 runner's CUDA-graph estimate for MLA models, per 1,000 of hidden size (4.28, 4.18 and 2.24 GiB at
    hidden 7168: DeepSeek-V3, Kimi-K2.5, Kimi-K2; 0.89 GiB at 2048: Moonlight), the largest ratio. Used on Model
    Runner V2 (0.32.0) only, where the plan keeps the larger of this and the FlashAttention split buffers the capture
    keeps (planner/memory.py mla_graph_buffers). The V1 runner's own estimate is planned from its parts since traces
    v94 and v95 (planner/memory.py v1_graph_estimate_bytes: Kimi-K2 and Kimi-K2.5, one shape, differ by one split
    accumulator)."""
    peak_margin_gib: float
    """Added to every fitted peak of a model without experts on Model Runner V2 (every model vLLM 0.32.0 serves), to
    the safe side: at least the largest peak the parts model leaves under among those rows of the fit (bench/fit.py
    peak_floor), and more if a calibration row or a row of a batch in the fit that ran on V2 were still over +0.5% KV
    with it (with LOAD_OVERHEAD_GIB; bench/fit.py smallest_margin). A row's KV error scales with 1 / its pool, so the
    margin covers the largest miss whatever the pool. It was 0.20 GiB, one V2 margin for dense and MoE models, set
    by Mixtral-8x7B on V2: the dense rows' largest miss is a quarter of that (starcoder2-3b), and the 0.14 GiB more
    left dense rows of 8-20 GiB H100 pools 0.7-1.7% under (Qwen2.5-32B, Llama-3.1-70B:28)."""
    moe_peak_margin_gib: float
    """As peak_margin_gib, for a mixture-of-experts model on Model Runner V2: its peak stands on the fused-MoE
    workspace (planner/memory.py moe_workspace_bytes, from vLLM's source, not fitted) and leaves more under
    (Mixtral-8x7B on V2, +0.20 GiB; GLM-4.5-Air on V2, +0.09)."""
    v1_peak_margin_gib: float
    """Added to every fitted peak on the V1 runner (MoE, MLA and hybrid models on vLLM 0.25.1; 0.32.0 serves none
    there) without 0.25.1's router compile hold, as peak_margin_gib on V2: at least the largest V1 peak the parts
    leave under among those rows of the fit (Qwen3-235B-A22B-FP8:10, +0.04 GiB), and more if such a V1 row of the fit
    were still over +0.5% KV with it. It was 0.24 GiB, one V1 margin for both kinds, set by the hold's timing: on an
    H100 that alone left V1 rows of 14-40 GiB pools 0.6-1.7% under (validations 31-32, predicted with it)."""
    v1_hold_peak_margin_gib: float
    """The V1 margin of a model whose router takes 0.25.1's compile hold (PeakFeatures.router_hold): at least the
    largest such peak left under (GLM-4.5-Air with 64 heads, +0.23 GiB: the hold, fitted per query, is short at fewer
    heads, and how much is held depends on when Python's collector runs)."""

    def baseline_gib(self, gpu: str) -> float:
        """What this GPU holds before vLLM profiles; on a GPU never measured, the largest measured value (the side that
        promises fewer KV tokens)."""
        measured = dict(self.baseline_gib_by_gpu)
        return measured.get(gpu, max(measured.values()))


FITTED = MemoryFit(
    sampler_base_gib=0.0706,
    forward_base_gib=0.0847,
    v1_attention_per_query=4.5681,
    router_hold_per_query=7.3354,
    non_torch_gib=0.2231,
    baseline_gib_by_gpu=(("nvidia-h100-80gb", 0.4222), ("nvidia-h200-141gb", 0.5403)),
    graphs_dense_base_gib=0.4316,
    graphs_dense_per_khidden_gib=0.1288,
    graphs_plain_base_gib=0.0294,
    graphs_plain_per_khidden_gib=0.1387,
    graphs_plain_per_100_pieces_gib=0.8996,
    graphs_moe_v2_per_kquery_excess=0.1174,
    graphs_v1_growth_base_gib=0.0900,
    graphs_v1_growth_per_100_pieces_gib=0.6250,
    graphs_mla_per_khidden_gib=0.5971,
    peak_margin_gib=0.06,
    moe_peak_margin_gib=0.20,
    v1_peak_margin_gib=0.04,
    v1_hold_peak_margin_gib=0.24,
)
"""The fit of today's rows (python bench/fit.py)."""
