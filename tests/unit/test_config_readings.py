"""Configs that name their sizes their own way, read as vLLM reads them: each of these was refused or misread before
(found by planning the default config of every family vLLM 0.32.0 registers, tests/engine/test_every_vllm_family.py).
"""

import json
from pathlib import Path

import pytest
from transformers import CONFIG_MAPPING

from planner.architecture import DEFAULT_CONTEXT
from planner.errors import ConfigError
from planner.model_config import parse_hf_config
from tests.helpers import accel, sizing

ROOT = Path(__file__).resolve().parents[2]


def read(config: dict, name: str = "m"):
    return parse_hf_config(config, name, "model.configFile")


def default(model_type: str, architecture: str, **fields) -> dict:
    return {**CONFIG_MAPPING[model_type](**fields).to_dict(), "architectures": [architecture]}


def test_a_config_without_a_context_length_takes_what_vllm_takes(tmp_path):
    """BLOOM (ALiBi) names no position limit: vLLM assumes 2,048 tokens without --max-model-len and takes any it is
    given (vllm/config/model.py _get_and_verify_max_len). It was refused before ('context length is unknown')."""
    bloom = read(default("bloom", "BloomForCausalLM"), "bloom")
    assert bloom.max_position_embeddings == 0 and bloom.context == DEFAULT_CONTEXT == 2048
    path = tmp_path / "config.json"
    path.write_text(json.dumps(default("bloom", "BloomForCausalLM")))
    assert sizing(model={"id": "bigscience/bloom", "configFile": str(path)}, vllm=None).max_model_len == 2048
    assert sizing(model={"id": "bigscience/bloom", "configFile": str(path)},
                  vllm={"maxModelLen": 16384}).max_model_len == 16384


def test_a_stated_context_still_bounds_the_length(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(default("llama", "LlamaForCausalLM", max_position_embeddings=4096)))
    with pytest.raises(ConfigError, match=r"vllm\.maxModelLen = 8192.*at most 4096 tokens"):
        sizing(model={"id": "x/llama", "configFile": str(path)}, vllm={"maxModelLen": 8192})


def test_dbrx_is_read_through_its_attention_and_ffn_configs():
    """vllm/model_executor/models/dbrx.py: d_model, n_heads, n_layers, attn_config.kv_n_heads and the experts of
    ffn_config (moe_num_experts of ffn_hidden_size, moe_top_k); it was refused before (no num_hidden_layers)."""
    raw = {"model_type": "dbrx", "architectures": ["DbrxForCausalLM"], "d_model": 6144, "n_heads": 48, "n_layers": 40,
           "max_seq_len": 32768, "vocab_size": 100352,
           "attn_config": {"kv_n_heads": 8, "clip_qkv": 8, "rope_theta": 500000},
           "ffn_config": {"ffn_hidden_size": 10752, "moe_num_experts": 16, "moe_top_k": 4}}
    a = read(raw, "dbrx")
    assert (a.num_layers, a.hidden_size, a.num_attention_heads, a.num_kv_heads) == (40, 6144, 48, 8)
    assert (a.num_experts, a.experts_per_token, a.moe_intermediate_size) == (16, 4, 10752)
    assert a.max_position_embeddings == 32768
    h, head = 6144, 128
    layer = h * h + 2 * h * 8 * head + h * h + 16 * 3 * h * 10752 + h * 16 + 2 * h  # Wqkv, out, experts, router, norms
    assert a.parameter_count() == 40 * layer + 2 * 100352 * h + h, "DBRX-132B's count: 131.6B"
    assert a.parameter_count() / 1e9 == pytest.approx(131.6, abs=0.1)


@pytest.mark.parametrize(("fields", "kv_heads"), [
    ({}, 1), ({"multi_query": False}, 71), ({"new_decoder_architecture": True, "num_kv_heads": 8,
                                            "num_attention_heads": 128, "hidden_size": 8192}, 8)])
def test_falcon_kv_heads_follow_its_attention_flags(fields, kv_heads):
    """vllm/model_executor/models/falcon.py FalconAttention: num_kv_heads with new_decoder_architecture, else one
    with multi_query, else one per head (Falcon-7B was planned with 71 KV heads, 19% heavy)."""
    assert read(default("falcon", "FalconForCausalLM", **fields), "falcon").num_kv_heads == kv_heads


def test_a_decoder_kept_under_llm_config_or_a_thinker_is_read():
    """vLLM renames llm_config to text_config (_CONFIG_ATTRS_MAPPING); Qwen's Omni and ASR models keep the decoder
    in thinker_config.text_config. Both were refused before (no num_hidden_layers)."""
    qwen2 = CONFIG_MAPPING["qwen2"](num_hidden_layers=12).to_dict()
    bagel = read({"model_type": "bagel", "architectures": ["BagelForConditionalGeneration"], "llm_config": qwen2})
    assert bagel.num_layers == 12 and bagel.model_type == "qwen2"
    omni = read({"model_type": "qwen3_asr", "architectures": ["Qwen3ASRForConditionalGeneration"],
                 "thinker_config": {"text_config": {**qwen2, "num_hidden_layers": 7}}})
    assert omni.num_layers == 7


def test_ernie_vl_experts_hold_text_and_vision_experts():
    """ERNIE 4.5 VL lists [text, vision] expert widths; both sets sit in every MoE layer (vllm ernie45_vl_moe.py);
    it was refused before (moe_intermediate_size must be an integer)."""
    text = {"model_type": "ernie4_5_moe", "hidden_size": 2560, "intermediate_size": 12288, "num_hidden_layers": 28,
            "num_attention_heads": 20, "num_key_value_heads": 4, "vocab_size": 103424,
            "max_position_embeddings": 131072, "moe_num_experts": [64, 64], "moe_intermediate_size": [1536, 512],
            "moe_k": 6, "moe_num_shared_experts": 2}
    a = read(text, "ernie-vl")
    assert (a.num_experts, a.moe_intermediate_size, a.shared_expert_intermediate_size) == (64, 2048, 2 * 1536)


def test_latent_attention_ignores_a_head_dim_of_zero():
    """GLM-5-Next's config writes head_dim 0 (its latent heads are qk_nope_head_dim + qk_rope_head_dim, which vLLM's
    MLA reads); it was refused before (head_dim must be an integer >= 1)."""
    glm = read(default("glm5_next", "Glm5NextForConditionalGeneration"), "glm")
    assert glm.kv_lora_rank == 512 and glm.num_layers == 45
    with pytest.raises(ConfigError, match="head_dim in the model config must be an integer >= 1"):
        read(default("llama", "LlamaForCausalLM", head_dim=0))


def test_glm5_next_plans_on_its_node(tmp_path):
    """Its KDA and sparse latent layers are sized (planner/kv_cache.py packed_caches), so no unsized warning."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(default("glm5_next", "Glm5NextForConditionalGeneration")))
    s = sizing(model={"id": "zai-org/GLM-5.3-Flash", "configFile": str(path)},
               accelerator=accel("nvidia-h200-141gb", "a3-ultragpu-8g"), vllm={"maxModelLen": 32768})
    assert s.kv_cache_tokens_per_replica >= 32768 and not any("does not size" in w for w in s.warnings)


def test_glm5_next_layers_are_read_as_vllm_builds_them():
    """vllm/models/glm5next/common/model.py _is_kda_layer: "linear_attention" is KDA, any other entry latent
    attention, with an indexer where index_topk is set; the checkpoints write deepseek_sparse_attention."""
    raw = default("glm5_next", "Glm5NextForConditionalGeneration")
    text = raw["text_config"]
    text["layer_types"] = ["deepseek_sparse_attention" if t == "indexed_attention" else t for t in text["layer_types"]]
    a = read(raw, "glm")
    assert a.kinds.count("kda") == 34 and a.kinds.count("indexed") == 11 and a.kinds[3] == "indexed"
    assert (a.kda, a.indexer, a.indexer_pool, a.hyper_connections) == ((64, 128, 4), (32, 128), 16, 4)
    assert not a.unsized
    dense = read({**raw, "text_config": {**text, "index_topk": None}}, "glm")
    assert dense.kinds.count("full") == 11, "without an indexer the latent layers are plain latent attention"
    no_hc = read({**raw, "text_config": {**text, "mhc": False}}, "glm")
    assert no_hc.hyper_connections == 0



def test_lfm2_layers_and_mlp_are_read_as_vllm_builds_them():
    """LFM2-1.2B: short convolutions where layer_types says "conv" (transformers writes them from full_attn_idxs),
    the MLP two thirds of block_ff_dim rounded up to block_multiple_of (vllm lfm2.py Lfm2MLP). Before, every layer
    was read as attention and the MLP as 12,288 wide: 1.66B parameters for a 1.17B model."""
    raw = json.loads((ROOT / "bench" / "configs" / "lfm2-1.2b.json").read_text())
    a = read(raw, "lfm2")
    assert a.kinds.count("conv") == 10 and [i for i, k in enumerate(a.kinds) if k == "full"] == [2, 5, 8, 10, 12, 14]
    assert a.intermediate_size == 8192 and a.short_conv == (2048, 3, 0) and not a.unsized
    assert a.parameter_count() / 1e9 == pytest.approx(1.170, abs=0.001)
    fixed = read({**raw, "block_auto_adjust_ff_dim": False}, "lfm2")
    assert fixed.intermediate_size == 12288
    moe = read(json.loads((ROOT / "bench" / "configs" / "lfm2-8b-a1b.json").read_text()), "lfm2-moe")
    assert (moe.first_dense_layers, moe.moe_layers, moe.intermediate_size) == (2, 22, 7168), \
        "lfm2_moe.py: the first num_dense_layers layers hold a dense MLP of intermediate_size, unadjusted"
    assert moe.parameter_count() / 1e9 == pytest.approx(8.340, abs=0.001)
