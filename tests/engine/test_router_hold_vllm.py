"""vLLM 0.25.1's router compile hold (planner/engine.py EngineProfile.router_compile_hold) held to vLLM 0.32.0's own
code: grouped_topk is still compiled at its first call and takes the fused kernel where the router has a bias, but
0.32.0 registers that kernel's fake implementation, so dynamo's trace does not raise and keeps no call stack. And the
model types planner/model_config.py BIASED_ROUTERS names do route through grouped_topk with a bias in 0.32.0."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from planner.engine import PROFILES
from planner.model_config import BIASED_ROUTERS, biased_grouped_router

pytest.importorskip("vllm")
VLLM = Path(importlib.util.find_spec("vllm").submodule_search_locations[0])


def _source(relative: str) -> str:
    return (VLLM / relative).read_text()


def _decorators(tree: ast.Module, name: str) -> list[str]:
    [func] = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name]
    return [ast.unparse(d) for d in func.decorator_list]


def test_0_32_registers_the_fused_router_kernels_fake_so_only_0_25_holds():
    custom_ops = ast.parse(_source("_custom_ops.py"))
    fakes = [ast.unparse(d) for n in ast.walk(custom_ops) if isinstance(n, ast.FunctionDef) for d in n.decorator_list
             if "register_fake" in ast.unparse(d)]
    assert "register_fake('_moe_C::grouped_topk')" in fakes
    assert PROFILES["0.32.0"].router_compile_hold is False
    assert PROFILES["0.25.1"].router_compile_hold is True


def test_grouped_topk_is_compiled_at_its_first_call_and_takes_the_fused_kernel_with_a_bias():
    router = _source("model_executor/layers/fused_moe/router/grouped_topk_router.py")
    tree = ast.parse(router)
    assert any(d.startswith("torch.compile(") for d in _decorators(tree, "grouped_topk"))
    [func] = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "grouped_topk"]
    first = ast.unparse(func.body[0])
    assert first.startswith("if envs.VLLM_USE_FUSED_MOE_GROUPED_TOPK")
    for condition in ("num_expert_group <= 32", "topk <= 32", "e_score_correction_bias is not None"):
        assert condition in first, condition
    assert "return fused_grouped_topk(" in first
    # an invalid grouping (experts not above and divisible by the groups) goes to fused_topk_bias, not compiled
    assert "return num_experts % self.num_expert_group == 0" in router
    assert "if num_experts <= self.num_expert_group:" in router


MODULES = {"glm4_moe": "glm4_moe.py", "glm4v_moe": "glm4_moe.py", "deepseek_v3": "deepseek_v2.py",
           "kimi_k2": "deepseek_v2.py", "deepseek_v2": "deepseek_v2.py", "lfm2_moe": "lfm2_moe.py",
           "bailing_hybrid": "bailing_moe_linear.py"}
"""Under vllm/model_executor/models; Kimi Linear's module moved to vllm/models/kimi_k3 in 0.32.0 (KIMI_LINEAR)."""
KIMI_LINEAR = "models/kimi_k3/nvidia/model.py"


def _module(model_type: str) -> str:
    return _source(KIMI_LINEAR if model_type == "kimi_linear" else f"model_executor/models/{MODULES[model_type]}")


@pytest.mark.parametrize("model_type", sorted(BIASED_ROUTERS))
def test_each_biased_router_family_routes_through_grouped_topk_with_its_bias(model_type):
    """Each switch as the family's vLLM module reads it: always grouped with a bias, or grouped with the bias under
    topk_method noaux_tc / use_expert_bias; Kimi Linear grouped where use_grouped_topk, in num_expert_group groups,
    with a bias always; Ling 2.5 grouped where n_group and topk_group are set, with a bias under
    moe_router_enable_expert_bias."""
    text = _module(model_type)
    switch = BIASED_ROUTERS[model_type]
    if switch == "use_grouped_topk":
        assert "use_grouped_topk=config.use_grouped_topk" in text
        assert "num_expert_group=config.num_expert_group" in text
        assert "self.gate.e_score_correction_bias = nn.Parameter(" in text
        return
    if switch == "moe_router_enable_expert_bias":
        assert "self.use_grouped_topk = self.n_group is not None and self.topk_group is not None" in text
        assert "use_grouped_topk=self.use_grouped_topk" in text and "num_expert_group=self.n_group" in text
        assert 'if getattr(config, "moe_router_enable_expert_bias", False):' in text
        assert "e_score_correction_bias=correction_bias" in text
        return
    assert "use_grouped_topk=True" in text
    assert "e_score_correction_bias = nn.Parameter(" in text
    if switch == "noaux_tc":
        assert 'if getattr(config, "topk_method", None) == "noaux_tc":' in text
    elif switch == "use_expert_bias":
        assert "if config.use_expert_bias:" in text
    else:
        assert "noaux_tc" not in text and "use_expert_bias" not in text


@pytest.mark.parametrize("cfg, experts, top_k, expected", [
    ({"model_type": "glm4_moe", "n_group": 1}, 128, 8, True),
    ({"model_type": "deepseek_v3", "topk_method": "noaux_tc", "n_group": 8}, 256, 8, True),
    ({"model_type": "deepseek_v2", "topk_method": "group_limited_greedy", "n_group": 8}, 160, 6, False),
    ({"model_type": "deepseek_v3", "topk_method": "noaux_tc", "n_group": 64}, 256, 8, False),  # > 32 groups
    ({"model_type": "deepseek_v3", "topk_method": "noaux_tc", "n_group": 3}, 256, 8, False),  # does not divide
    ({"model_type": "glm4_moe", "n_group": 1}, 128, 40, False),  # > 32 experts a token
    ({"model_type": "lfm2_moe", "use_expert_bias": True}, 32, 4, True),
    ({"model_type": "lfm2_moe", "use_expert_bias": False}, 32, 4, False),
    ({"model_type": "qwen3_moe"}, 128, 8, False),
    ({"model_type": "kimi_linear", "use_grouped_topk": True, "num_expert_group": 1}, 256, 8, True),
    ({"model_type": "kimi_linear", "use_grouped_topk": False, "num_expert_group": 1}, 256, 8, False),
    ({"model_type": "kimi_linear", "use_grouped_topk": True, "num_expert_group": 3}, 256, 8, False),
    ({"model_type": "bailing_hybrid", "moe_router_enable_expert_bias": True, "n_group": 8, "topk_group": 4}, 256, 8,
     True),
    ({"model_type": "bailing_hybrid", "moe_router_enable_expert_bias": False, "n_group": 8, "topk_group": 4}, 256, 8,
     False),
    ({"model_type": "bailing_hybrid", "moe_router_enable_expert_bias": True, "n_group": 8}, 256, 8, False),
])
def test_the_fused_path_is_read_as_grouped_topk_decides_it(cfg, experts, top_k, expected):
    assert biased_grouped_router(cfg, experts, top_k) is expected


def test_a_run_with_the_fake_registered_is_planned_without_the_hold():
    """bench/calibrate.py --router-fake registers 0.32.0's fake in a 0.25.1 server: its rows are predicted with the
    0.25.1 profile less the hold, which moves GLM-4.5-Air (biased grouped router) and not Qwen3-30B-A3B."""
    import json

    from planner.engine import with_router_fake
    from planner.layers import cut_layers
    from planner.model_config import parse_hf_config
    from planner.sizing import single_gpu_fit

    assert with_router_fake(PROFILES["0.25.1"]).router_compile_hold is False
    models = Path(__file__).resolve().parents[2] / "models"
    for name, moves in (("GLM-4.5-Air", True), ("Qwen3-30B-A3B", False)):
        a = parse_hf_config(cut_layers(json.loads((models / f"{name}.json").read_text()), 8), name, "test")
        held, fake = (single_gpu_fit(a, "nvidia-h200-141gb", 0.9, 8192, runner="v2", router_fake=f).kv_tokens
                      for f in (False, True))
        assert (fake > held) is moves and fake >= held, name
