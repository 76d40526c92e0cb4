"""The quantization scope held to the quantization libraries' own matching: a compressed-tensors checkpoint's
targets and ignore patterns match module names as compressed_tensors' match_name does (it imports torch, so this
lives in the engine tier)."""

from __future__ import annotations

import pytest

from planner.layers import PART_MODULES, _compressed_tensors_match

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
