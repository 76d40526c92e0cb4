"""The tensors planner/checkpoint.py leaves out of the weights, held to vLLM 0.32.0's own rule
(vllm/model_executor/models/utils.py get_spec_layer_idx_from_weight_name, and Qwen3-Next's mapper of `mtp.`)."""

from __future__ import annotations

import types

import pytest

from planner import checkpoint

pytest.importorskip("vllm")

NAMES = [f"{prefix}{i}.{rest}" for prefix in ("model.layers.", "layers.", "model.language_model.layers.",
                                              "model.visual.layers.", "language_model.model.layers.")
         for i in (0, 60, 61, 62, 63) for rest in ("self_attn.kv_a_proj_with_mqa.weight", "eh_proj.weight")]


@pytest.mark.parametrize(("layers", "mtp"), [(61, 1), (61, 2), (61, 0), (92, 1)])
def test_spec_layers_are_skipped_as_vllm_skips_them(layers, mtp):
    from vllm.model_executor.models.utils import get_spec_layer_idx_from_weight_name

    config = types.SimpleNamespace(num_hidden_layers=layers, num_nextn_predict_layers=mtp)
    for name in NAMES:
        assert checkpoint.skipped_by_vllm(name, layers, mtp) == (
            get_spec_layer_idx_from_weight_name(config, name) is not None), name


def test_the_mtp_head_is_what_qwen3_next_maps_to_nothing():
    from vllm.model_executor.models.qwen3_next import Qwen3NextForCausalLM

    mapper = Qwen3NextForCausalLM.hf_to_vllm_mapper
    for name in ("mtp.fc.weight", "mtp.layers.0.mlp.gate.weight", "model.layers.0.mtp_proj.weight", "lm_head.weight"):
        assert checkpoint.skipped_by_vllm(name, 48, 0) == (mapper._map_name(name) is None), name


def test_a_one_rule_mutation_is_caught(monkeypatch):
    """Dropping one of vLLM's three prefixes makes the planner weigh a layer vLLM does not load."""
    from vllm.model_executor.models.utils import get_spec_layer_idx_from_weight_name

    original = checkpoint.skipped_by_vllm

    def without_bare_layers(name, layers, mtp):
        return False if name.startswith("layers.") else original(name, layers, mtp)

    monkeypatch.setattr(checkpoint, "skipped_by_vllm", without_bare_layers)
    config = types.SimpleNamespace(num_hidden_layers=61, num_nextn_predict_layers=1)
    assert any(checkpoint.skipped_by_vllm(n, 61, 1) != (get_spec_layer_idx_from_weight_name(config, n) is not None)
               for n in NAMES)
