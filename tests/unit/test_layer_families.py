"""Families planned layer by layer since issue 42 round 3. Falcon-H1: attention and a Mamba-2 mixer side by side in
every layer (vllm/model_executor/models/falcon_h1.py), read as two caches per layer, weighed with both mixers and
split over pipeline stages by whole layers. Gemma 4's MoE variant: an expert block beside every layer's MLP. NAS
decoders (nemotron-nas): each layer's attention and MLP from block_configs, either one a no-op. Their
KV tokens are held to vLLM 0.32.0's own KV-cache code in tests/engine/test_engine_kv_vllm.py and their parameters
to the models transformers builds in tests/engine/test_parameter_counts.py."""

from __future__ import annotations

import json
from dataclasses import replace

from planner import kv_cache
from planner.config import PROJECT_DIR
from planner.model_config import parse_hf_config
from tests.helpers import sizing

FALCON = json.loads((PROJECT_DIR / "bench" / "configs" / "falcon-h1-7b.json").read_text())


def test_every_layer_holds_an_attention_cache_and_a_mamba_state():
    arch = parse_hf_config(FALCON, "falcon-h1-7b", "model.configFile")
    assert not arch.unsized and arch.cache_slots == 2 and arch.num_layers == 44
    assert arch.kinds == ("full", "mamba") * 44
    assert arch.mamba[0] == FALCON["mamba_d_ssm"] and not arch.mamba_norm  # mamba_rms_norm false: no norm weight
    normed = parse_hf_config({**FALCON, "mamba_rms_norm": True}, "f", "x")
    assert normed.parameter_count() - arch.parameter_count() == 44 * FALCON["mamba_d_ssm"]


def test_a_pipeline_stage_takes_whole_layers():
    # 44 layers over 7 stages: vLLM 0.32.0's get_pp_indices gives the third stage layers 12-17, so caches 24-35,
    # where an even split of the 88 caches would end it half-way through layer 18 (its attention without its Mamba).
    assert kv_cache.stage_bounds(88, 7, 2)[2] == (24, 36) and kv_cache.pp_stages(88, 7)[2] == (24, 37)
    # vLLM 0.25.1's rule sizes the first stage alone: ceil(44 / 7) = 7 whole layers, 14 caches (not 13).
    arch = parse_hf_config(FALCON, "falcon-h1-7b", "model.configFile")
    specs = kv_cache.layer_specs(arch, 1, 2.0)
    admission = kv_cache.Admission(8192, 1)
    whole = kv_cache.pool_first_stage(specs, 7, 20 * 2**30, 32768, admission, slots=2)
    assert whole == kv_cache.pool_first_stage(specs[:14], 1, 20 * 2**30, 32768, admission)


def test_a_falcon_h1_stack_plans_without_stated_parallelism():
    s = sizing(model={"id": "tiiuae/Falcon-H1-7B-Instruct", "configFile": "bench/configs/falcon-h1-7b.json"},
               vllm={"maxModelLen": 32768})
    assert s.layout_source == "auto" and not any("does not size" in w for w in s.warnings)
    assert s.kv_cache_tokens_per_replica > 32768
    flat = replace(parse_hf_config(FALCON, "f", "x"), cache_slots=1)
    assert flat.kinds == ("full", "mamba") * 44  # the kinds alone do not say which caches share a layer


def test_a_gemma_4_moe_plans_its_experts_and_chooses_its_layout():
    section = {"id": "google/gemma-4-26B-A4B-it", "configFile": "bench/configs/gemma-4-26b-a4b.json"}
    s = sizing(model=section, vllm={"maxModelLen": 32768})
    assert s.layout_source == "auto" and not any("does not size" in w for w in s.warnings)
    arch = parse_hf_config(json.loads((PROJECT_DIR / section["configFile"]).read_text()), "g", "x")
    assert (arch.num_experts, arch.experts_per_token, arch.moe_layers, arch.norms_per_layer) == (128, 8, 30, 7)
    plain = parse_hf_config({**json.loads((PROJECT_DIR / section["configFile"]).read_text()), "num_experts": None,
                             "top_k_experts": None}, "g", "x")
    assert plain.num_experts == 0 and plain.norms_per_layer == 4  # vLLM builds the block only where num_experts is set


NAS_FILE = "bench/configs/nemotron-super-49b.json"
NAS = json.loads((PROJECT_DIR / NAS_FILE).read_text())


def test_a_nas_decoder_plans_each_layer_as_its_block_says():
    arch = parse_hf_config(NAS, "nas", "model.configFile")
    blocks = NAS["block_configs"]
    assert arch.kinds == tuple("none" if b["attention"]["no_op"] else "full" for b in blocks)
    assert arch.layer_kv_heads[0] == 8 and arch.layer_kv_heads[75] == 4 and arch.layer_mlp_widths[60] == 0
    assert arch.layer_mlp_widths[72] == 10752  # int(2 x 1.95 x 8192 / 3) = 10,649, up to a multiple of 256
    s = sizing(model={"id": "nvidia/Llama-3_3-Nemotron-Super-49B-v1", "configFile": NAS_FILE},
               accelerator={"type": "nvidia-h100-80gb", "machineType": "a3-highgpu-8g", "zones": ["us-central1-a"]},
               vllm={"maxModelLen": 32768})
    assert s.layout_source == "auto" and s.kv_cache_tokens_per_replica > 32768


def test_a_nas_block_vllm_cannot_build_is_one_line_naming_it():
    import pytest

    from planner.errors import ConfigError

    five = {"attention": {"no_op": False, "n_heads_in_group": 5}, "ffn": {"ffn_mult": 2.0}}
    broken = {**NAS, "block_configs": [*NAS["block_configs"][:3], five, *NAS["block_configs"][4:]]}
    with pytest.raises(ConfigError) as err:
        parse_hf_config(broken, "nas", "model.configFile")
    assert "block_configs[3].attention.n_heads_in_group" in str(err.value) and "\n" not in str(err.value)
