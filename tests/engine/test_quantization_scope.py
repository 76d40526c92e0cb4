"""The quantization scope held to the quantization libraries' and vLLM 0.32.0's own matching: a compressed-tensors
checkpoint's targets and ignore patterns match module names as compressed_tensors' match_name does, and the FP8,
AWQ and GPTQ scopes as vLLM's is_layer_skipped / get_dynamic_override / is_layer_gptq_quantized decide them (they
import torch, so this lives in the engine tier)."""

from __future__ import annotations

import pytest

from planner.layers import PART_MODULES, _compressed_tensors_match, scope_predicate, vllm_prefix

pytest.importorskip("compressed_tensors")


@pytest.mark.parametrize("pattern", ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
                                     "re:.*mlp\\.(gate|up|gate_up|down)_proj.*", "re:model\\.layers\\.1\\..*",
                                     "model.layers.0.mlp.down_proj", "re:.*experts\\.0\\..*"])
def test_scope_patterns_match_as_compressed_tensors_matches_them(pattern):
    from compressed_tensors.utils.match import match_name

    names = ["lm_head", "model.embed_tokens"] + [f"model.layers.{i}.{m}" for i in (0, 1, 12)
                                                  for modules in PART_MODULES.values() for m in modules]
    for name in names:
        assert _compressed_tensors_match(name, pattern) == match_name(name, pattern), (name, pattern)


SCOPES = {
    # method: scope entries of a config.json, as checkpoints of 2025-2026 write them
    "fp8": [{"modules_to_not_convert": ["gate", "lm_head", "model.layers.0.self_attn.q_proj",
                                        "model.layers.0.self_attn.k_proj", "model.layers.0.self_attn.v_proj"]},
            {"ignored_layers": ["model.layers.1.mlp.experts.0.gate_proj", "self_attn",
                                "model.layers.12.mlp.shared_experts.down_proj"]},
            {"ignored_layers": ["model.layers.1.mlp.experts", "model.layers.0.mlp.gate_proj",
                                "model.layers.0.mlp.up_proj"]}],
    "awq": [{"modules_to_not_convert": ["gate", "self_attn.o_proj"]},
            {"modules_to_not_convert": ["model.layers.1.mlp.experts", "shared_expert"]}],
    "gptq": [{"dynamic": {"-:.*self_attn.*": {}, "-:model\\.layers\\.12\\.mlp\\.experts": {}}},
             {"modules_in_block_to_quantize": [["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"],
                                               ["mlp.down_proj"]], "modules_to_not_convert": ["mlp"]}],
}
FUSED = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}
NAMES = [f"model.layers.{i}.{m}" for i in (0, 1, 12) for modules in PART_MODULES.values() for m in modules]


def vllm_quantizes(method: str, scope: dict, name: str) -> bool:
    """vLLM 0.32.0's own decision for the module vLLM builds from checkpoint module `name`: its FP8 / AWQ / GPTQ
    config's matching functions on the prefix it asks them about (the fused module, or the layer's experts)."""
    import types

    from vllm.model_executor.layers.quantization.utils.gptq_utils import (
        get_dynamic_override,
        is_layer_gptq_quantized,
    )
    from vllm.model_executor.layers.quantization.utils.quant_utils import is_layer_skipped

    prefix = vllm_prefix(name)
    fused = {} if prefix.endswith(".experts") else FUSED
    if method == "gptq":
        config = types.SimpleNamespace(dynamic=scope.get("dynamic", {}))
        if get_dynamic_override(config, layer_name=prefix) is False:
            return False
        return prefix.endswith(".experts") or is_layer_gptq_quantized(
            prefix, scope.get("modules_in_block_to_quantize") or [], fused)
    entries = scope.get("ignored_layers") or scope.get("modules_to_not_convert") or []
    mode = "substring" if method == "awq" else "exact"
    return not is_layer_skipped(prefix, entries, fused, match_mode=mode)


CASES = [(method, n) for method, scopes in SCOPES.items() for n in range(len(scopes))]


@pytest.mark.parametrize(("method", "index"), CASES, ids=[f"{m}-{i}" for m, i in CASES])
def test_the_scope_of_each_method_is_matched_as_vllm_0_32_matches_it(method, index):
    """FP8 matches ignored_layers by exact name (a router named 'gate' does not unquantize the experts' gate_proj:
    the +91% weights of an FP8 256-expert MoE in issue 42), AWQ by substring, GPTQ by its dynamic negative patterns
    on the fused module and modules_in_block_to_quantize; each module's decision is vLLM 0.32.0's."""
    pytest.importorskip("vllm")
    scope = SCOPES[method][index]
    ours = scope_predicate(scope, method)
    for name in NAMES:
        assert ours(name) == vllm_quantizes(method, scope, name), (method, scope, name)


def test_a_substring_reading_of_an_fp8_scope_disagrees_with_vllm():
    """The planner's reading before: FP8 entries as substrings ('gate' in '...experts.0.gate_proj')."""
    pytest.importorskip("vllm")
    scope = SCOPES["fp8"][0]
    entries = scope["modules_to_not_convert"]
    differing = [name for name in NAMES if (not any(e in name for e in entries)) != vllm_quantizes("fp8", scope,
                                                                                                 name)]
    assert any(".experts." in name for name in differing)
