"""Model configs read as vLLM reads them (transformers' config classes) and quantization scope matched as declared,
on the published config.json files of checkpoints the planner was never fitted to."""

import json
from pathlib import Path

import pytest

from planner.engine import PROFILES, profile_for_image
from planner.errors import ConfigError
from planner.model_config import parse_hf_config
from tests.helpers import accel, model, sizing

ROOT = Path(__file__).resolve().parents[2]
GIB = 2**30


def config(name: str) -> dict:
    return json.loads((ROOT / "models" / f"{name}.json").read_text())


def test_gemma_3_takes_the_defaults_its_config_json_leaves_out():
    """google/gemma-3-27b-it's text_config has no vocab_size, max_position_embeddings, sliding_window_pattern or
    tie_word_embeddings: transformers' Gemma3TextConfig fills them in and vLLM reads that object."""
    a = parse_hf_config(config("gemma-3-27b-it"), "gemma-3-27b-it", "model.configFile")
    assert (a.vocab_size, a.max_position_embeddings, a.tie_word_embeddings) == (262_208, 131_072, True)
    assert a.kinds.count("sliding") == 52 and a.kinds.count("full") == 10 and a.window == 1024, \
        "every sixth layer is global (Gemma3TextConfig.layer_types), the others slide over 1024 tokens"
    assert a.kinds[5] == "full" and a.kinds[:5] == ("sliding",) * 5
    assert a.parameter_count() / 1e9 == pytest.approx(27.43, abs=0.02), "the tied embedding is counted once"


def test_kimi_k2_5_quantizes_only_the_routed_experts_as_its_ignore_list_says():
    a = parse_hf_config(config("Kimi-K2.5"), "Kimi-K2.5", "model.configFile")
    assert dict(a.quantized_share) == {"experts": 1.0}, \
        "re:.*self_attn.*, re:.*shared_experts.* and re:.*mlp\\.(gate|up|gate_up|down)_proj.* stay in 16 bits"
    assert a.weight_bytes_per_param == pytest.approx(0.5 + 2 / 32), "INT4 with a 16-bit scale per 32 weights"
    # The checkpoint's tensors add up to 554.27 GiB (its 64 safetensors files, a public listing of every tensor).
    assert a.weight_bytes(2.0) / GIB == pytest.approx(554.27, rel=0.01)


def test_kimi_k2_5_and_gemma_3_plan_with_their_weights():
    kimi = sizing(model=model("Kimi-K2.5"), accelerator=accel("nvidia-h200-141gb", "a3-ultragpu-8g"),
                  vllm={"maxModelLen": 8192})
    assert kimi.weights_gib == pytest.approx(554.27, rel=0.01)
    # data parallel attention over the node's 8 GPUs, 384 experts split 48 to a GPU (DeepSeek-V3's serving layout)
    assert (kimi.tensor_parallel_size, kimi.data_parallel_size, kimi.expert_parallel) == (1, 8, True)
    assert kimi.kv_cache_tokens_per_replica == 8 * kimi.kv_cache_tokens_per_engine >= 8 * 8192
    assert kimi.engine_profile == "0.32.0"
    gemma = sizing(model=model("gemma-3-27b-it"), accelerator=accel("nvidia-h100-80gb", "a3-highgpu-1g"),
                   vllm={"maxModelLen": 8192})
    assert gemma.weights_gib == pytest.approx(51.1, abs=0.1) and gemma.tensor_parallel_size == 1


def test_an_fp8_ignored_layers_list_keeps_those_layers_in_16_bits():
    cfg = config("Qwen3-30B-A3B")
    cfg["quantization_config"] = {"quant_method": "fp8", "weight_block_size": [128, 128],
                                  "ignored_layers": [f"model.layers.{i}.self_attn.q_proj" for i in range(12)]}
    a = parse_hf_config(cfg, "q", "model.configFile")
    share = dict(a.quantized_share)
    assert share["attention"] == pytest.approx(36 / 48) and share["experts"] == 1.0


def test_a_config_whose_class_is_remote_code_the_planner_has_no_reading_of_plans_unsized():
    """InternLM2 (vLLM serves InternLM2ForCausalLM with --trust-remote-code): read as config.json writes it, marked
    unsized naming the class, so the plan takes stated parallelism and model.weightsGib and says what it could not
    verify; a field the plan needs and the config leaves out is still one line naming it."""
    cfg = {"model_type": "internlm2", "architectures": ["InternLM2ForCausalLM"],
           "auto_map": {"AutoConfig": "configuration_internlm2.InternLM2Config"}, "hidden_size": 4096,
           "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32, "intermediate_size": 14336,
           "vocab_size": 92544, "max_position_embeddings": 32768}
    a = parse_hf_config(cfg, "internlm2", "model.configFile")
    assert a.remote_code == "configuration_internlm2.InternLM2Config" and "InternLM2Config" in a.unsized
    assert (a.num_layers, a.num_kv_heads, a.head_dim) == (32, 8, 128)
    with pytest.raises(ConfigError) as err:
        parse_hf_config({k: v for k, v in cfg.items() if k != "num_attention_heads"}, "x", "model.configFile")
    assert "num_attention_heads" in str(err.value)


def test_a_wrapper_transformers_has_no_class_for_is_read_through_its_decoder():
    cfg = config("Kimi-K2.5")
    cfg["model_type"] = "kimi_k99"
    a = parse_hf_config(cfg, "k", "model.configFile")
    assert a.kv_lora_rank == 512 and a.num_experts == 384


@pytest.mark.parametrize(("image", "version", "warned"), [
    ("vllm/vllm-openai:v0.32.0", "0.32.0", False), ("vllm/vllm-openai:v0.25.1", "0.25.1", False),
    ("vllm/vllm-openai:v0.30.2", "0.25.1", True), ("vllm/vllm-openai:v0.40.0", "0.32.0", True),
    ("vllm/vllm-openai:v0.20.0", "0.25.1", True),
    ("vllm/vllm-openai@sha256:" + "a" * 64, "0.32.0", True)])
def test_the_engine_profile_follows_vllm_image_and_says_when_it_has_none(image, version, warned):
    choice = profile_for_image(image)
    assert choice.profile is PROFILES[version]
    assert (choice.warning is not None) == warned
    if warned:
        assert choice.warning.startswith(f"vllm.image = {image}") and version in choice.warning


def test_the_plan_applies_the_profile_of_the_image_it_deploys():
    new = sizing(vllm={"maxModelLen": 8192})
    old = sizing(vllm={"maxModelLen": 8192, "image": "vllm/vllm-openai:v0.25.1"})
    assert (new.engine_profile, old.engine_profile) == ("0.32.0", "0.25.1")
    assert new.kv_cache_tokens_per_replica < old.kv_cache_tokens_per_replica, \
        "0.32.0 keeps the CUDA graphs of a dense model out of the KV cache; 0.25.1 did not"
    eager = sizing(vllm={"maxModelLen": 8192, "extraArgs": ["--enforce-eager"]})
    assert eager.cudagraph_gib_per_gpu == 0 and eager.kv_cache_tokens_per_replica > new.kv_cache_tokens_per_replica
    with pytest.raises(ConfigError) as err:
        sizing(vllm={"extraArgs": ["--max-num-seqs", "lots"]})
    assert err.value.key == "vllm.extraArgs" and "positive integer" in str(err.value)
