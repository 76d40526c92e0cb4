"""A checkpoint's config.json read as vLLM reads it: the counts, context length, rotary caches, MLP and attention
shapes, quantization and per-layer kinds of planner/architecture.py's ModelArchitecture, from configFile, the inline
object or the Hugging Face Hub. Configs that need remote code are read through transformers' config class for their
model_type where vLLM does the same."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from planner.architecture import DTYPE_BYTES, ModelArchitecture
from planner.checkpoint import hub_offline
from planner.errors import ConfigError
from planner.layers import (
    DSV4_TYPES,
    FALCON_H1_TYPES,
    GEMMA3N_TYPES,
    GEMMA4_TYPES,
    GLM5_NEXT_TYPES,
    HRM_TYPES,
    INKLING_TEXT_READS,
    INKLING_TYPES,
    LFM2_TYPES,
    LONGCAT_TYPES,
    MXFP4_BYTES_PER_PARAM,
    NAS_TYPES,
    PURE_MAMBA_TYPES,
    READ_AS_WRITTEN,
    SHARED_KV_TYPES,
    UNCOUNTED_TOWERS,
    ZAMBA2_TYPES,
    bailing_v3,
    checkpoint_kv_cache_dtype,
    encoder_input,
    first_architecture,
    image_prefix_lm,
    inkling_reads,
    input_modalities,
    layer_kinds,
    lightning,
    moe_layer_indices,
    nas_blocks,
    part_layers,
    plain_int,
    positive_int,
    read_quantization,
    unsized_reason,
    vision_parameters,
)


def _count(cfg: Mapping[str, Any], source: str, names: tuple[str, ...], minimum: int = 1,
           default: int | None = None) -> int:
    """The first of `names` that config.json sets (null counts as unset). A value that is there but impossible (0 or
    negative where `minimum` is 1, a float, a string) is refused, never replaced by a default or by the next name:
    vLLM would fail on it at start. Unset: `default`, or an error when there is none."""
    for name in names:
        value = cfg.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ConfigError(source, value, f"{name} in the model config must be an integer >= {minimum}")
        return value
    if default is None:
        raise ConfigError(source, names[0], f"the model config has no {' / '.join(names)}")
    return default


CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")
"""The config.json keys vLLM derives the context length from, smallest wins, model_max_length overriding
(vllm/transformers_utils/model_arch_config_convertor.py, derive_max_model_len_and_key)."""
ROPE_KEEPS_LENGTH = frozenset({"su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling"})
"""RoPE scaling types whose factor vLLM does not apply to the derived length (vllm/config/model.py,
_get_and_verify_max_len): for the others, the length is multiplied by rope_scaling.factor."""


def context_length(cfg: Mapping[str, Any], source: str) -> int:
    """The longest sequence vLLM accepts for this config.json, derived the way vLLM derives it; 0 when the config
    has none of CONTEXT_KEYS (vLLM then sets no limit of its own: DEFAULT_CONTEXT)."""
    found = {}
    for key in CONTEXT_KEYS:
        value = cfg.get(key)
        if value is None:
            continue
        if not positive_int(value):
            raise ConfigError(source, value, f"{key} must be a positive integer")
        found[key] = value
    if not found:
        return 0  # vLLM then takes any max_model_len it is given, DEFAULT_CONTEXT without one
    length: float = found.get("model_max_length") or min(found.values())
    rope = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    if isinstance(rope, Mapping) and "gemma3" not in str(cfg.get("model_type", "")):
        kind = rope.get("rope_type") or rope.get("type") or "default"
        factor = rope.get("factor")
        if kind not in ROPE_KEEPS_LENGTH and isinstance(factor, (int, float)) and not isinstance(factor, bool):
            if factor <= 0:
                raise ConfigError(source, factor, "rope_scaling.factor must be positive")
            length *= factor
    return int(length)


def _dsv4_rotary_elements(cfg: Mapping[str, Any], positions: int) -> int:
    """DeepSeek V4's cos/sin caches in 16-bit units (each is float32, two units an element): vLLM 0.32.0 builds one
    for the sliding-window layers (rope_theta, no scaling: max_position_embeddings positions) and one for the
    compressed layers (compress_rope_theta, their scaling: original_max_position_embeddings x factor positions, or
    max_position_embeddings where the type is default), qk_rope_head_dim wide (vllm/models/deepseek_v4/common/rope.py
    build_deepseek_v4_rope; rotary_embedding/deepseek_scaling_rope.py DeepseekV4ScalingRotaryEmbedding keeps them in
    float32). A config's rope parameters may be nested per layer type ("main", "compress")."""
    width = int(cfg.get("qk_rope_head_dim") or 0)
    params = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    params = params if isinstance(params, Mapping) else {}
    compress = params.get("compress") if isinstance(params.get("compress"), Mapping) else params
    ratios = [r for r in (cfg.get("compress_ratios") or [])[:int(cfg.get("num_hidden_layers") or 0)] if plain_int(r)]
    lengths = []
    if any(r <= 1 for r in ratios):
        lengths.append(positions)
    if any(r > 1 for r in ratios):
        kind = compress.get("rope_type") or compress.get("type") or "default"
        original = compress.get("original_max_position_embeddings") or positions
        lengths.append(int(original * (compress.get("factor") or 1)) if kind != "default" else positions)
    return sum(lengths) * width * 2


def rotary_cache_elements(cfg: Mapping[str, Any], head_dim: int, full_head_dim: int = 0) -> int:
    """Elements of the cos/sin caches vLLM 0.32.0 keeps on each GPU from the load on
    (vllm/model_executor/layers/rotary_embedding/__init__.py get_rope: one cache per distinct set of parameters,
    shared by every layer that uses it; each is positions x rotary_dim, registered in the default dtype). The positions
    are max_position_embeddings, except: `linear` caches factor x that (linear_scaling_rope.py), `yarn` and
    `deepseek_yarn` original_max_position_embeddings x factor (yarn_scaling_rope.py, deepseek_scaling_rope.py),
    `longrope` a short and a long cache (phi3_long_rope_scaled_rope.py) and M-RoPE 4 x (mrope.py positions_factor).
    Gemma 3 keeps one parameter set per layer type (vllm/model_executor/models/gemma3.py); Gemma 4 too, its full
    layers at their own head size (`full_head_dim`, per_layer_config's), and their `proportional` cache is the whole
    head wide whatever share it rotates (gemma4_rope.py Gemma4RotaryEmbedding: rotary_dim = head_size). Latent
    attention rotates qk_rope_head_dim channels (deepseek_v2.py); Kimi Linear's rotates none (vllm/models/kimi_k3:
    NoPE-only MLA, no get_rope), nor do its delta-attention layers."""
    positions = cfg.get("max_position_embeddings")
    if not positive_int(positions) or cfg.get("model_type") == "kimi_linear":
        return 0
    if cfg.get("model_type") in DSV4_TYPES:
        return _dsv4_rotary_elements(cfg, positions)
    params = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    if not isinstance(params, Mapping):
        return 0
    nested = bool(params) and all(isinstance(v, Mapping) for v in params.values())
    sets = {json.dumps(p, sort_keys=True, default=str): p for p in (params.values() if nested else [params])}
    width = int(cfg.get("qk_rope_head_dim") or 0) or head_dim
    widths = dict.fromkeys(sets, width)
    if nested and full_head_dim and isinstance(params.get("full_attention"), Mapping):
        widths[json.dumps(params["full_attention"], sort_keys=True, default=str)] = full_head_dim
    total = 0
    for key, p in sets.items():
        partial = p.get("partial_rotary_factor", cfg.get("partial_rotary_factor")) or 1.0
        kind = p.get("rope_type") or p.get("type") or "default"
        rotary_dim = (widths[key] if kind == "proportional"
                      else int(p.get("rope_dim") or int(widths[key] * float(partial))))
        factor = p.get("factor") or 1
        original = p.get("original_max_position_embeddings") or positions
        if kind == "linear":
            length = positions * factor
        elif kind in ("yarn", "deepseek_yarn"):
            length = original * factor
        elif kind in ("longrope", "su"):
            length = original + positions
        elif "mrope_section" in p:
            length = positions * 4
        else:
            length = positions
        total += int(length) * rotary_dim
    return total


def _intermediate(cfg: Mapping[str, Any], layers: int, hidden: int, source: str) -> int:
    """The MLP width; a per-layer list (vLLM accepts one, one entry per layer) counts as its mean."""
    value = cfg.get("intermediate_size")
    if value is None:
        return 4 * hidden
    if isinstance(value, list):
        if len(value) != layers or not all(positive_int(v) for v in value):
            raise ConfigError(source, value, f"intermediate_size as a list needs {layers} positive integers, "
                                             "one per layer")
        return round(sum(value) / layers)
    if not positive_int(value):
        raise ConfigError(source, value, "intermediate_size must be a positive integer (or a list, one per layer)")
    return value


NON_GATED_MLP = frozenset({"starcoder2", "gpt_neox", "phi", "apertus", "arcee", "falcon", "gpt_bigcode", "gpt2",
                           "gptj", "opt", "nemotron", "nemotron_h", "bloom", "cosmos3_edge_text"})
"""Families whose MLP is two matrices, up and down, without a gate (vLLM: starcoder2.py c_fc/c_proj, gpt_neox.py
dense_h_to_4h/dense_4h_to_h, phi.py fc1/fc2, apertus.py and arcee.py up_proj/down_proj, falcon.py, gpt_bigcode.py,
gpt2.py, gpt_j.py fc_in/fc_out, opt.py fc1/fc2, nemotron.py and nemotron_h.py up_proj/down_proj with squared
ReLU, nemotron_h's experts too, bloom.py dense_h_to_4h/dense_4h_to_h, cosmos3_edge.py linear_fc1/linear_fc2 with
squared ReLU). Counted with three they were planned 21-57% heavier than transformers builds them."""
LLAMA4_TYPES = frozenset({"llama4", "llama4_text"})
SSM_DTYPE_FROM_CONFIG = frozenset({
    "ColQwen3_5", "Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForCausalLM",
    "Qwen3_5MoeForConditionalGeneration", "Qwen4ExpForCausalLM", "Qwen4ExpForConditionalGeneration"})
"""Architectures whose Gated DeltaNet state vLLM keeps in the config's mamba_ssm_dtype when the engine leaves
mamba_ssm_cache_dtype at auto (vllm/model_executor/models/config.py Qwen3_5ForConditionalGenerationConfig and the
classes built on it, by MODELS_CONFIG_MAP). Qwen3-Next is not one: its state is in the model dtype."""
GATED_ATTENTION_TYPES = frozenset({"qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text",
                                   "muse_glimmer_text", "afmoe"})
"""Families whose full-attention layers are vLLM's Qwen3NextAttention, which projects an output gate beside each
query unless the config sets attn_output_gate false (vllm/model_executor/models/qwen3_next.py; qwen3_5.py uses the
same class). Without it Qwen3.5's attention planned 134M parameters light per 8 full layers at hidden 4,096.
MuseGlimmer's attention has the same gate as output_gate_proj unless use_attn_output_gate is false
(vllm/model_executor/models/muse_glimmer.py _muse_glimmer_use_attn_output_gate), and AFMoE's (Arcee Trinity) as
the attention's gate_proj (afmoe.py), always."""
GATE_SWITCH = {"muse_glimmer_text": "use_attn_output_gate"}
"""The config key that turns a GATED_ATTENTION_TYPES family's gate off, where it is not attn_output_gate."""

EXPERTS_OPTIONAL = frozenset({"granitemoehybrid"})
"""Families whose layers build experts only when the config has some, whatever num_experts_per_tok says
(vllm/model_executor/models/granitemoehybrid.py: `num_local_experts > 0`; the dense Granite 4.0-H checkpoints)."""

WRAPPED_DECODERS = {"bailing_moe_v3_vl": "BailingMoeV3ForCausalLM"}
"""Wrappers whose decoder config is known by the architecture their config class gives it where text_config names
none (vllm/transformers_utils/configs/bailing_moe_v3_vl.py BailingMoeV3TextConfig: architectures defaults to
BailingMoeV3ForCausalLM, the class BailingMoeV3VLForConditionalGeneration builds)."""

WRAPPER_KEYS = ("quantization_config", "torch_dtype", "dtype", "tie_word_embeddings")
"""What a multimodal wrapper's top level sets for its decoder when text_config leaves it out."""


@functools.cache
def _config_classes() -> Mapping[str, Any]:
    """transformers' built-in config classes by model_type (no remote code is ever run): a mapping of its own kind over
    CONFIG_MAPPING_NAMES, without what a process registered since in transformers' CONFIG_MAPPING. vLLM's get_config
    registers its classes under transformers' names (AutoConfig.register with exist_ok: DeepseekV3Config as
    deepseek_v32 and as kimi_k2, vllm/transformers_utils/config.py _register_config_class), so in a process that has
    loaded such a config through vLLM, CONFIG_MAPPING would read DeepSeek-V3.2 through another class. The Pulumi
    program's environment has transformers without torch, which is enough for configs; its import-time notice about
    the missing torch is kept off the plan's output."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES, _LazyConfigMapping

    return _LazyConfigMapping(CONFIG_MAPPING_NAMES)


ARCHITECTURE_VALIDATOR = "validate_architecture"
"""transformers' class validator for a config's shape (e.g. DeepseekV2Config: the hidden size a multiple of the
heads). vLLM loads config.json through the same class, so a config it refuses never starts (vLLM 0.25.1 on the GPU
host: 'The hidden size (5120) is not a multiple of the number of attention heads (96)', validation 22)."""


def _filled(cls: Any, cfg: Mapping[str, Any], source: str) -> dict[str, Any] | None:
    """config.json through its transformers class: every default and derived field (vocab_size,
    tie_word_embeddings, layer_types, head_dim, rope_parameters) as vLLM's config object has it. None when the class
    refuses the values; the planner's own checks then name the key. A refusal of the architecture's shape
    (ARCHITECTURE_VALIDATOR), which no check of the planner's repeats, is refused here in one line."""
    try:
        filled = dict(cls(**{k: v for k, v in cfg.items() if k != "auto_map"}).to_dict())
    except Exception as exc:  # transformers raises many kinds on bad values; our checks below give the one line
        if ARCHITECTURE_VALIDATOR in str(exc):
            reason = str(exc).strip().splitlines()[-1].strip().removeprefix("ValueError: ")
            raise ConfigError(source, cfg.get("model_type"), f"transformers' {cls.__name__} refuses this config, "
                                                             f"so vLLM cannot load it: {reason}") from None
        return None
    # to_dict writes the class attribute, which vLLM's get_config reassigns in a process that loaded a config through
    # it (DeepseekV3Config.model_type = "kimi_k2"); the class's own model type is the one its module is named for
    own = _builtin_model_type(cls)
    return {**filled, "model_type": own} if own else filled


def _builtin_model_type(cls: Any) -> str | None:
    """The model_type transformers gives a built-in config class: the CONFIG_MAPPING_NAMES key naming it whose module
    defines it (GPT2Config: gpt2, not gpt-sw3, which maps to it too), None for a class outside transformers.models."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES, model_type_to_module_name

    parts = cls.__module__.split(".")
    if parts[:2] != ["transformers", "models"] or len(parts) < 3:
        return None
    return next((key for key, name in CONFIG_MAPPING_NAMES.items()
                 if name == cls.__name__ and model_type_to_module_name(key) == parts[2]), None)


ALIASED = ("num_hidden_layers", "hidden_size", "num_attention_heads", "max_position_embeddings", "intermediate_size",
           "moe_intermediate_size")
"""The sizes read through a config class's attribute_map where the config names them its own way (_aliased;
LongCat-Flash: ffn_hidden_size and expert_ffn_hidden_size, which vLLM's longcat_flash.py reads as intermediate_size
and moe_intermediate_size)."""


def _aliased(cls: Any, cfg: dict[str, Any]) -> dict[str, Any]:
    """The names a decoder's size needs (ALIASED) where the config class maps them to its own (attribute_map:
    DBRX's n_layers and d_model, BLOOM's n_head), as vLLM reads them through the config object. Other aliases are
    left as the config writes them (NemotronH's layer_types is its layers_block_type, read there)."""
    for common, own in getattr(cls, "attribute_map", {}).items():
        if common in ALIASED and cfg.get(common) is None and cfg.get(own) is not None:
            cfg[common] = cfg[own]
    return _own_names(cfg)


NEEDS_AN_MOE_LAYER = frozenset({"Glm4MoeForCausalLM", "Glm4MoeLiteForCausalLM", "Glm4vMoeForConditionalGeneration",
                                "AfmoeForCausalLM", "HYV3ForCausalLM", "SarvamMLAForCausalLM",
                                "PanguUltraMoEForCausalLM", "PanguProMoEV2ForCausalLM"})
"""vLLM 0.32.0 classes that refuse to build when no decoder layer on a GPU has routed experts: their expert-
parallel setup takes an example MoE layer and raises RuntimeError("No ... layer found in model.layers.") without one
(glm4_moe.py Glm4MixtureOfExperts.extract_moe_parameters, which Glm4MoeLite and GLM-4.5V's language model share;
afmoe.py, hy_v3.py, sarvam.py, openpangu.py). vLLM 0.25.1 refused GLM-4.5 cut to its three dense layers so
(validation 30). DeepSeek-V2/V3, ERNIE 4.5 and Llama 4 only warn. Held to 0.32.0's classes in
tests/engine/test_vllm_refusals.py."""

ENGINE_UNSEEN_EXPERTS = "vllm-gke:experts-renamed"
"""Marks a config whose experts _own_names brought to the top level: vLLM's ModelConfig does not count them
(vllm/transformers_utils/model_arch_config_convertor.py get_num_experts reads num_experts, moe_num_experts,
n_routed_experts or num_local_experts at the top, or block_configs), so it treats the model as dense where that
decides (vLLM 0.25.1 chose Model Runner V2 for DBRX, docs/benchmarks.md validation 14 and 15)."""


def _own_names(cfg: dict[str, Any]) -> dict[str, Any]:
    """Families whose config names its KV heads or experts its own way, named here as the others name them.
    DBRX keeps its KV heads in attn_config and its experts in ffn_config, where vllm/model_executor/models/dbrx.py
    reads them (attn_config.kv_n_heads; ffn_config.moe_num_experts, moe_top_k and ffn_hidden_size, each expert a
    gated MLP of that width). Falcon's KV heads are num_kv_heads with new_decoder_architecture, else 1 with
    multi_query, else one per head (vllm/model_executor/models/falcon.py FalconAttention)."""
    if cfg.get("model_type") == "falcon" and cfg.get("num_key_value_heads") is None:
        kv = (cfg.get("num_kv_heads") if cfg.get("new_decoder_architecture") else
              1 if cfg.get("multi_query") else cfg.get("num_attention_heads"))
        return {**cfg, "num_key_value_heads": kv}
    attn, ffn = cfg.get("attn_config"), cfg.get("ffn_config")
    if cfg.get("model_type") != "dbrx" or not isinstance(attn, Mapping) or not isinstance(ffn, Mapping):
        return cfg
    return {**cfg, "num_key_value_heads": attn.get("kv_n_heads"), "num_local_experts": ffn.get("moe_num_experts"),
            "num_experts_per_tok": ffn.get("moe_top_k"), "moe_intermediate_size": ffn.get("ffn_hidden_size"),
            "intermediate_size": ffn.get("ffn_hidden_size"), ENGINE_UNSEEN_EXPERTS: True}



def _architecture_type(architectures: Any, classes: Mapping[str, Any]) -> str | None:
    """The model_type of transformers' own class for the config's first architecture, if it has one."""
    if not isinstance(architectures, list) or not architectures or not isinstance(architectures[0], str):
        return None
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    by_class = {name: model_type for model_type, name in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items()}
    found = by_class.get(architectures[0])
    return found if found in classes else None


VLLM_CONFIG_TYPES = frozenset({
    "RefinedWeb", "RefinedWebModel", "bagel", "bailing_moe_v3_vl", "chatglm", "colpali", "colqwen3", "cosmos3_edge",
    "deepseek_v32", "deepseek_v4", "deepseek_v41", "deepseek_vl_v2", "dots3_note", "eagle", "funaudiochat", "hy_v4",
    "hyperclovax", "inkling_mm_model", "inkling_model", "isaac", "k3_dspark", "kimi_k2", "kimi_k25", "kimi_k3",
    "kimi_linear", "kimi_vl", "medusa", "midashenglm", "minimax_m3_mtp", "minimax_m3_vl", "mlp_speculator",
    "modernvbert", "moondream3", "moss_transcribe_diarize", "muse_glimmer", "muse_glimmer_assistant",
    "muse_glimmer_text", "muse_glimmer_vision", "openvla", "ops_colqwen3", "ovis", "qianfan_ocr", "qwen3_asr",
    "qwen3_vl_nemotron_embed", "speculators", "step3_text", "step3_vl", "step3p5", "ultravox", "unlimited-ocr",
    "unlimited_ocr"})
"""The model types vLLM 0.32.0 reads with a config class of its own (vllm/transformers_utils/config.py
_CONFIG_REGISTRY; tests/engine/test_vllm_reads_configs.py holds the set equal to the installed vLLM's): a config of
such a type starts without --trust-remote-code even where it names remote code (Kimi-K2's auto_map)."""

AS_WRITTEN = {"deepseek_v4": {"max_position_embeddings": 1048576, "rope_theta": 10000.0}}
"""Model types vLLM 0.32.0 reads through a config class of its own that keeps config.json's keys as written, with the
defaults it sets (vllm/transformers_utils/configs/deepseek_v4.py DeepseekV4Config: the context and the rotary base):
transformers' class for the same type rewrites the file (DeepseekV4Config folds compress_ratios into layer_types),
which vLLM's model does not read."""

REMOTE_CONFIG_BASES = {"nemotron-nas": "llama"}
"""Remote-code config classes the planner reads without running them: the transformers class each one extends, whose
defaults fill what config.json leaves out (Llama-Nemotron's configuration_decilm.py: DeciLMConfig(LlamaConfig),
model_type nemotron-nas; its block_configs are read by planner/layers.py as vLLM's nemotron_nas.py reads them)."""


def remote_code(cfg: Mapping[str, Any]) -> str:
    """The class config.json's auto_map names where vLLM 0.32.0 starts the model only with --trust-remote-code,
    else "": its model_type has neither a transformers class nor one of vLLM's (VLLM_CONFIG_TYPES), so vLLM loads it
    through AutoConfig, which runs the repository's code or raises (HFConfigParser.parse: "consider setting
    `trust_remote_code=True` ... or using the `--trust-remote-code` flag")."""
    auto_map = cfg.get("auto_map")
    named = auto_map.get("AutoConfig") if isinstance(auto_map, Mapping) else None
    model_type = cfg.get("model_type")
    if not isinstance(named, str) or not named or model_type in VLLM_CONFIG_TYPES:
        return ""
    return "" if isinstance(model_type, str) and model_type in _config_classes() else named


def remote_code_reason(cfg: Mapping[str, Any], named: str) -> tuple[str, str] | None:
    """(key, what it marks) where the config class `named` (remote_code) is remote code the planner has no reading
    of (neither a transformers class for its architecture nor REMOTE_CONFIG_BASES): it is read as config.json writes
    it, so the plan takes the stated parallelism and says what it could not verify, as for an unsized layer kind."""
    if not named or cfg.get("model_type") in REMOTE_CONFIG_BASES \
            or _architecture_type(cfg.get("architectures"), _config_classes()) is not None:
        return None
    architecture = first_architecture(cfg)
    if architecture in READ_AS_WRITTEN and all(cfg.get(key) is not None for key in READ_AS_WRITTEN[architecture]):
        return None  # every key vLLM's class reads beyond the common ones is written: read as the class reads it
    return "auto_map", (f"auto_map names the config class {named}, remote code the planner does not run (the "
                        "fields config.json leaves out take none of its defaults)")


def as_vllm_reads(cfg: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The config as vLLM reads it: vLLM loads config.json through transformers' config class for its model_type
    (vllm/transformers_utils/config.py, get_config), so fields a published config.json leaves out take that class's
    defaults. A model_type transformers has no class for is read through its text_config's class when that one is
    known (a wrapper around a known decoder); a remote-code config (auto_map) through transformers' class for its
    first architecture when there is one (Kimi-K2: DeepseekV3ForCausalLM) or the class REMOTE_CONFIG_BASES names,
    and as config.json writes it otherwise (no defaults filled: the model plans unsized, remote_code_reason)."""
    model_type = cfg.get("model_type")
    if model_type in INKLING_TYPES:  # read by vLLM's own class (_inkling), which transformers' of that name is not
        return dict(cfg)
    if model_type in AS_WRITTEN:  # vLLM's own class keeps config.json's keys (transformers' would rewrite them)
        return {**AS_WRITTEN[model_type], **cfg}
    classes = _config_classes()
    if isinstance(model_type, str) and model_type in classes:
        return _aliased(classes[model_type], _filled(classes[model_type], cfg, source) or dict(cfg))
    text = cfg.get("text_config")
    if isinstance(text, Mapping) and isinstance(text.get("model_type"), str) and text["model_type"] in classes:
        inner = classes[text["model_type"]]
        return {**cfg, "text_config": _aliased(inner, _filled(inner, text, source) or dict(text))}
    if model_type in REMOTE_CONFIG_BASES:  # remote code the planner reads through the class it extends
        base = classes[REMOTE_CONFIG_BASES[model_type]]
        return {**(_filled(base, cfg, source) or dict(cfg)), "model_type": model_type}
    known = _architecture_type(cfg.get("architectures"), classes)
    if known is not None:  # remote code whose architecture transformers implements (Kimi-K2: DeepseekV3ForCausalLM)
        return _filled(classes[known], {**cfg, "model_type": known}, source) or dict(cfg)
    return dict(cfg)  # a remote-code class the planner does not run: config.json's own fields (parse_hf_config
    # marks the model unsized, remote_code_reason)


def _dsv4_fields(cfg: Mapping[str, Any], experts: int, method: str, source: str) -> dict[str, Any]:
    """DeepSeek V4's fields as its vLLM model reads them from config.json (vllm/models/deepseek_v4: attention.py,
    nvidia/model.py DeepseekV4MoE and DeepseekV4DecoderLayer), each key required as vLLM's class has no default for it:
    the lightning indexer's heads and head dim, the hyper-connections' streams, the grouped output projection, the
    hash-routed MoE layers (a router score bias in the others, none in the shared expert). An FP8 checkpoint's routed
    experts are MXFP4 unless expert_dtype is "fp8" (quant_config.py DeepseekV4FP8Config, which refuses any other)."""
    fields: dict[str, Any] = {
        "indexer": (_count(cfg, source, ("index_n_heads",)), _count(cfg, source, ("index_head_dim",))),
        "hyper_connections": _count(cfg, source, ("hc_mult",)), "o_groups": _count(cfg, source, ("o_groups",)),
        "o_lora_rank": _count(cfg, source, ("o_lora_rank",)),
        "hash_layers": _count(cfg, source, ("num_hash_layers",), minimum=0),
        "router_bias": bool(experts), "shared_expert_gate": False}
    if method == "fp8":
        expert_dtype = cfg.get("expert_dtype", "fp4")
        if expert_dtype not in ("fp4", "fp8"):
            raise ConfigError(source, expert_dtype, "expert_dtype must be fp4 or fp8: vLLM's DeepseekV4FP8Config "
                                                    "refuses any other (\"Unsupported DeepSeek V4 expert_dtype\")")
        if expert_dtype == "fp4":
            fields["expert_bytes_per_param"] = MXFP4_BYTES_PER_PARAM
    return fields


def _per_modality_experts(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    """ERNIE 4.5 VL's MoE layers hold text experts and as many vision experts (moe_num_experts and
    moe_intermediate_size as [text, vision] lists; vllm/model_executor/models/ernie45_vl_moe.py asserts the counts
    equal, shared experts of the text width): read as one set of experts as wide as both, which holds their weights."""
    widths, counts = cfg.get("moe_intermediate_size"), cfg.get("moe_num_experts")
    if not isinstance(widths, list) or not widths or not all(positive_int(w) for w in widths):
        return cfg
    out = {**cfg, "moe_intermediate_size": sum(widths)}
    if isinstance(counts, list) and counts and all(positive_int(c) for c in counts):
        out["moe_num_experts"] = counts[0]
    if positive_int(cfg.get("moe_num_shared_experts")):  # shared experts are text-wide: in units of the summed width
        out["moe_num_shared_experts"] = 0
        out["shared_expert_intermediate_size"] = cfg["moe_num_shared_experts"] * widths[0]
    return out


def _text_config_named(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    """A wrapper whose decoder config sits under another name, with it as text_config: llm_config as vLLM renames it
    (vllm/transformers_utils/config.py _CONFIG_ATTRS_MAPPING: BAGEL, InternVL-style checkpoints), and the thinker's
    text_config of Qwen's Omni and ASR models (their get_text_config)."""
    if isinstance(cfg.get("text_config"), Mapping):
        return cfg
    if isinstance(cfg.get("llm_config"), Mapping):
        return {**cfg, "text_config": cfg["llm_config"]}
    thinker = cfg.get("thinker_config")
    if isinstance(thinker, Mapping) and isinstance(thinker.get("text_config"), Mapping):
        return {**cfg, "text_config": thinker["text_config"]}
    return cfg


def _inkling(cfg: Mapping[str, Any], source: str) -> tuple[Mapping[str, Any], tuple[str, str] | None]:
    """(the config, an unsized reason or None). Inkling's configs as vLLM 0.32.0 reads them: an inkling_model or
    inkling_mm_model config through vLLM's own classes (planner/layers.py inkling_reads; the multimodal wrapper's
    text_config, its towers built where their config sets decoder_dmodel, inkling_vision_enabled, and not counted
    here); transformers' inkling_text format refused where vLLM's classes find none of what they read
    (INKLING_TEXT_READS)."""
    model_type = cfg.get("model_type")
    if model_type == "inkling_text":
        missing = next((key for key in INKLING_TEXT_READS if cfg.get(key) is None), None)
        if missing:
            raise ConfigError(source, model_type, f"vLLM 0.32.0 serves Inkling from its own config format "
                                                  f"(model_type inkling_model or inkling_mm_model): with "
                                                  f"transformers' InklingTextConfig its InklingForCausalLM does not "
                                                  f"build, lacking {missing}")
        return cfg, None
    if model_type not in INKLING_TYPES:
        return cfg, None
    if model_type == "inkling_model":
        return inkling_reads(cfg), None
    text = cfg.get("text_config")
    flat = inkling_reads(text if isinstance(text, Mapping) else {})
    flat.update({k: v for k, v in cfg.items() if k in (*WRAPPER_KEYS, "architectures") and flat.get(k) is None})
    flat["model_type"] = "inkling_mm_model"
    towers = [name for name in ("vision_config", "audio_config")
              if isinstance(cfg.get(name), Mapping) and cfg[name].get("decoder_dmodel") is not None]
    return flat, ((towers[0], f"{towers[0]}.decoder_dmodel builds Inkling's {towers[0].split('_')[0]} tower, whose "
                               "weights the planner does not count") if towers else None)


def _inkling_fields(cfg: Mapping[str, Any], moe: bool, source: str) -> dict[str, Any]:
    """ModelArchitecture.inkling for an Inkling config read by inkling_reads; an output bias refused as vLLM's
    RowParallelLinear refuses it, and an MoE layer's settings where vLLM's InklingMoE asserts them
    (vllm/models/inkling/nvidia/moe.py: a sigmoid gate renormalized after top-k, shared sink experts, interleaved w13
    rows)."""
    if moe:
        for key, wanted in (("gate_activation", "sigmoid"), ("norm_after_topk", True), ("shared_expert_sink", True),
                            ("inference_moe_w13_interleaved", True)):
            if cfg.get(key) != wanted:
                raise ConfigError(source, cfg.get(key), f"{key} must be {json.dumps(wanted)}: vLLM's InklingMoE "
                                                        "asserts it")
        if not positive_int(cfg.get("n_shared_experts")):
            raise ConfigError(source, cfg.get("n_shared_experts"), "n_shared_experts must be at least 1: vLLM's "
                                                                   "InklingMoE asserts shared sink experts")
    if cfg.get("o_bias") is True:
        raise ConfigError(source, True, "o_bias must be false: vLLM's InklingAttention builds its output projection "
                                        "unreduced (wo_ud, reduce_results=False), and RowParallelLinear refuses a "
                                        "bias there (\"When not reduce the results, adding bias to the results can "
                                        "lead to incorrect results\")")
    counts = [_count(cfg, source, (key,)) for key in ("d_rel", "rel_extent", "sconv_kernel_size",
                                                      "swa_num_attention_heads", "swa_num_key_value_heads",
                                                      "swa_head_dim")]
    flags = [int(cfg.get(key) is True) for key in ("q_bias", "use_embed_norm", "use_gate_bias", "use_global_scale")]
    return {"inkling": (*counts, *flags)}


def parse_hf_config(cfg: Mapping[str, Any], name: str, source: str) -> ModelArchitecture:
    """Build a ModelArchitecture from a Hugging Face config.json mapping.

    `source` is the config key the mapping came from, so errors name it.
    """
    if not isinstance(cfg, Mapping):
        raise ConfigError(source, cfg, "expected a Hugging Face config.json object")
    cfg = _text_config_named(cfg)
    cfg, towers = _inkling(cfg, source)
    raw_text = cfg.get("text_config")
    architectures = cfg.get("architectures")
    unsized = unsized_reason(raw_text if isinstance(raw_text, Mapping) else cfg)  # before transformers rewrites them
    needs_code = remote_code(cfg)
    unsized = unsized or remote_code_reason(cfg, needs_code)
    cfg = as_vllm_reads(cfg, source)
    if cfg.get("model_type") == "gemma4_unified" and not isinstance(cfg.get("vision_config"), Mapping):
        raise ConfigError(source, cfg.get("vision_config"), "a gemma4_unified config needs a vision_config: vLLM's "
                                                            "Gemma4UnifiedForConditionalGeneration raises without one "
                                                            "(\"Gemma4 Unified requires a vision configuration\")")
    vision, wrapper = cfg.get("vision_config"), cfg
    if isinstance(cfg.get("text_config"), Mapping):  # multimodal wrappers keep the decoder here
        text = cfg["text_config"]
        if cfg.get("model_type") in WRAPPED_DECODERS and not text.get("architectures"):
            text = {**text, "architectures": [WRAPPED_DECODERS[str(cfg["model_type"])]]}
        group = text.get("layer_group_size")
        if cfg.get("model_type") == "bailing_moe_v3_vl" and isinstance(group, int | float) and group <= 0:
            raise ConfigError(source, group, "text_config.layer_group_size of a bailing_moe_v3_vl config must be "
                                             "positive: vLLM's BailingMoeV3VLConfig raises on it (_build_layer_types)")
        outer = {k: v for k, v in cfg.items() if k in WRAPPER_KEYS and text.get(k) is None}
        cfg = {**text, **outer}
    unsized = unsized or unsized_reason(cfg) or towers
    per_modality = isinstance(cfg.get("moe_intermediate_size"), list)
    cfg = _per_modality_experts(cfg)
    blocks = cfg.get("layers_block_type")  # NemotronHConfig 5.x keeps no num_hidden_layers: it is this list's length
    longcat = str(cfg.get("model_type")) in LONGCAT_TYPES  # its layers are num_layers (num_hidden_layers: 2 x that)
    layers = _count(cfg, source, ("num_layers",) if longcat else ("num_hidden_layers", "n_layer", "num_layers"),
                    default=len(blocks) if isinstance(blocks, list) and blocks else None)
    hidden = _count(cfg, source, ("hidden_size", "n_embd", "d_model"))
    pure_mamba = str(cfg.get("model_type")) in PURE_MAMBA_TYPES
    if pure_mamba:  # attention-free: vLLM counts no attention heads (its config has none) and no head size
        heads = kv_heads = head_dim = 0
        inter = _pure_mamba_inner(cfg, hidden, source)
    else:
        heads = _count(cfg, source, ("num_attention_heads", "n_head"))
        kv_heads = _count(cfg, source, ("num_key_value_heads",), default=heads)
        if heads % kv_heads:
            raise ConfigError(source, kv_heads, f"num_key_value_heads must divide num_attention_heads ({heads})")
        # Latent attention sizes its heads from qk_nope_head_dim / qk_rope_head_dim / v_head_dim, not head_dim,
        # which some such configs write as 0 (GLM-5-Next); vLLM's MLA layers never read it
        latent = bool(cfg.get("kv_lora_rank")) and cfg.get("head_dim") == 0
        head_dim = _count(cfg, source, ("head_dim",), default=hidden // heads) if not latent else hidden // heads
        if str(cfg.get("model_type")) in ZAMBA2_TYPES:
            head_dim, kv_heads = _zamba2_heads(hidden, heads, source)
        if str(cfg.get("model_type")) in HRM_TYPES:  # hrm_text.py: "HF main hardcodes MHA", so does vLLM
            kv_heads = heads
        if not head_dim:
            raise ConfigError(source, hidden, f"hidden_size is smaller than num_attention_heads ({heads}) and no "
                                              "head_dim is given")
        inter = _intermediate(cfg, layers, hidden, source)
    vocab = _count(cfg, source, ("vocab_size",))
    max_pos = context_length(cfg, source)
    experts = _count(cfg, source, ("num_local_experts", "n_routed_experts", "num_experts", "moe_num_experts"),
                     minimum=0, default=0)
    top_k = _count(cfg, source, ("num_experts_per_tok", "num_experts_per_token", "moe_topk", "moe_k", "top_k_experts"),
                   minimum=0, default=-1)  # -1: not given
    if experts == 0 and top_k > 0 and str(cfg.get("model_type")) in EXPERTS_OPTIONAL:
        top_k = 0
    if experts == 0 and top_k > 0:
        named = next((n for n in ("num_local_experts", "n_routed_experts", "num_experts") if cfg.get(n) is not None),
                     "num_local_experts")
        raise ConfigError(source, 0, f"{named} in the model config is 0 (or unset) while num_experts_per_tok is "
                                     f"{top_k}; an MoE model needs at least {top_k} experts")
    if top_k > experts or (experts and top_k == 0):
        raise ConfigError(source, top_k, f"num_experts_per_tok must be between 1 and the number of experts "
                                         f"({experts}); a dense model routes to none and has none")
    counts = {name: _count(cfg, source, (name,), minimum=int(name == "moe_intermediate_size" and experts > 0),
                           default=0)
              for name in ("moe_intermediate_size", "n_shared_experts", "first_k_dense_replace", "kv_lora_rank",
                           "qk_rope_head_dim", "q_lora_rank", "qk_nope_head_dim", "v_head_dim",
                           "shared_expert_intermediate_size", "moe_num_shared_experts", "num_shared_experts")}
    if counts["moe_num_shared_experts"]:  # vllm/model_executor/models/ernie45_moe.py: shared, of the expert width
        counts["n_shared_experts"] = counts["moe_num_shared_experts"]
    if str(cfg.get("model_type")) in ("lfm2_moe", "afmoe"):  # lfm2_moe.py, afmoe.py: below num_dense_layers, dense
        counts["first_k_dense_replace"] = _count(cfg, source, ("num_dense_layers",), minimum=0, default=0)
    if counts["num_shared_experts"] and not counts["n_shared_experts"]:  # Kimi Linear's name for them
        counts["n_shared_experts"] = counts["num_shared_experts"]
    if str(cfg.get("model_type")) in LLAMA4_TYPES and experts:
        # vllm/model_executor/models/llama4.py: MoE layers hold the routed experts and one shared expert, both of
        # intermediate_size; dense layers (interleave_moe_layer_step > 1) are intermediate_size_mlp wide.
        counts["moe_intermediate_size"] = counts["moe_intermediate_size"] or int(inter)
        counts["n_shared_experts"] = 1
        inter = _count(cfg, source, ("intermediate_size_mlp",), default=int(inter))
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    if dtype not in DTYPE_BYTES:
        raise ConfigError(source, dtype, f"unsupported torch_dtype; accepted: {', '.join(sorted(DTYPE_BYTES))}")
    kinds, window = layer_kinds(cfg, layers, source)
    if str(cfg.get("model_type")) in GEMMA4_TYPES and cfg.get("use_bidirectional_attention") == "all" and window:
        # transformers' Gemma4TextConfig / Gemma4UnifiedTextConfig __post_init__ (which vLLM's config object runs, and
        # to_dict does not show): bidirectional attention halves the window, "due to fa we set exclusive bounds"
        window = window // 2 + 1
    moe = moe_layer_indices(cfg, layers, experts, counts["first_k_dense_replace"])
    # NemotronH: a layer is one block, so its mixer blocks hold no MLP or experts
    nemotron_h = str(cfg.get("model_type")) == "nemotron_h"
    ffn_free = frozenset(i for i, kind in enumerate(kinds) if kind != "none") if nemotron_h else frozenset()
    nas: dict[str, Any] = {}
    if str(cfg.get("model_type")) in NAS_TYPES:  # each layer its own attention and MLP, either a no-op
        layer_kv, widths = nas_blocks(cfg, layers, heads, hidden, source)
        nas = {"layer_kv_heads": layer_kv, "layer_mlp_widths": widths}
        kinds = tuple("full" if kv else "none" for kv in layer_kv)  # a no-op attention block holds no cache
        kv_heads = next((kv for kv in layer_kv if kv), kv_heads)
        inter = max(widths, default=0) or inter  # the widest MLP sets the activation peak
        ffn_free = frozenset(i for i, width in enumerate(widths) if not width)
    zamba2 = str(cfg.get("model_type")) in ZAMBA2_TYPES
    if zamba2:  # its MLPs are in the shared blocks (ModelArchitecture.shared_blocks), none in a decoder layer
        ffn_free = frozenset(range(layers))
    slots = 2 if str(cfg.get("model_type")) in FALCON_H1_TYPES | ZAMBA2_TYPES | LONGCAT_TYPES | INKLING_TYPES \
        else 1  # cache_slots
    method, weight_bytes, share = read_quantization(cfg, DTYPE_BYTES[dtype], source,
                                                    part_layers(kinds[::slots], set(moe), ffn_free))
    linear = tuple(_count(cfg, source, (name,), default=0) for name in (
        "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
        "linear_conv_kernel_dim"))
    if "linear" in kinds and not all(linear):
        unsized = unsized or ("linear_num_key_heads", "linear-attention layers without Gated DeltaNet's "
                              "linear_num_key_heads, linear_num_value_heads, linear_key_head_dim, "
                              "linear_value_head_dim and linear_conv_kernel_dim (another linear-attention kind)")
    if unsized:
        kinds, window, slots = ("full",) * layers, 0, 1  # sized as full attention, and said to be unverified
    hybrid = _mamba2_fields(cfg, kinds, hidden, source) if "mamba" in kinds and not pure_mamba else {}
    if pure_mamba:
        hybrid.update(_pure_mamba_fields(cfg, layers, hidden, int(inter), source))
    if str(cfg.get("model_type")) in SHARED_KV_TYPES and not unsized:
        hybrid.update(_gemma4_fields(cfg, kinds, head_dim, kv_heads, source))
    if str(cfg.get("model_type")) in GEMMA3N_TYPES and not unsized:
        hybrid.update(_gemma3n_fields(cfg, source))
    if "mamba1" in kinds and not pure_mamba:  # vllm/model_executor/models/jamba.py JambaMambaDecoderLayer
        hybrid["mamba1"] = (_count(cfg, source, ("mamba_expand",)) * hidden, _count(cfg, source, ("mamba_d_state",)),
                            _count(cfg, source, ("mamba_d_conv",)), _dt_rank(cfg, "mamba_dt_rank", hidden, source),
                            int(cfg.get("mamba_conv_bias", True) is not False), int(bool(cfg.get("mamba_proj_bias"))),
                            1)  # MambaMixer(use_rms_norm=True): dt, B and C norms with weights
    architecture = str(architectures[0]) if isinstance(architectures, list) and architectures else ""
    if "linear" in kinds and not unsized and architecture in SSM_DTYPE_FROM_CONFIG \
            and cfg.get("mamba_ssm_dtype") is not None:
        hybrid["mamba_ssm_dtype"] = _state_dtype(str(cfg["mamba_ssm_dtype"]), "mamba_ssm_dtype", source)
    if "kda" in kinds and bailing_v3(cfg):
        if cfg.get("no_kda_lora") is not True:  # bailing_moe_v3.py BailingMoeV3KimiDeltaAttention raises without it
            raise ConfigError(source, cfg.get("no_kda_lora"), "no_kda_lora must be true: vLLM's BailingMoeV3 Kimi "
                                                              "Delta Attention builds full-width f and g projections "
                                                              "only (\"BailingMoeV3 KDA currently expects "
                                                              "no_kda_lora=True\")")
        hybrid.update(kda=(heads, int(head_dim), _count(cfg, source, ("short_conv_kernel_size",))),
                      kda_full_gates=True, kda_state_flag=False)
    elif "kda" in kinds:
        hybrid["kda"] = tuple(_count(cfg, source, (name,)) for name in (
            "linear_num_heads", "linear_head_dim", "linear_conv_kernel_dim"))
    if bailing_v3(cfg):  # bailing_moe_v3.py: the latent attention's output gate, the router's expert_bias
        granularity = cfg.get("gated_attention_proj_granularity_type")
        if granularity not in (None, "head_wise", "element_wise"):
            raise ConfigError(source, granularity, "gated_attention_proj_granularity_type must be head_wise, "
                                                   "element_wise or unset")
        hybrid.update(mla_output_gate={"head_wise": 1, "element_wise": counts["v_head_dim"]}.get(granularity, 0),
                      router_bias=bool(experts), shared_expert_gate=False)
        _one_shared_mlp(counts, cfg, source, bool(experts), default=0)  # BailingMoeV3MoE
    if lightning(cfg) and not unsized:  # bailing_moe_linear.py BailingMoeV25, BailingMoELinearAttention
        if "lightning" in kinds:
            hybrid["lightning"] = (heads, int(head_dim), int(cfg.get("use_qk_norm") is True),
                                   _count(cfg, source, ("group_norm_size",), default=1))
        hybrid.update(router_bias=bool(experts) and cfg.get("moe_router_enable_expert_bias") is True,
                      shared_expert_gate=False)
        _one_shared_mlp(counts, cfg, source, bool(experts), default=counts["moe_intermediate_size"])
    if "indexed" in kinds:
        hybrid["indexer"] = (_count(cfg, source, ("index_n_heads",)), _count(cfg, source, ("index_head_dim",)))
    if str(cfg.get("model_type")) in LFM2_TYPES:
        if str(cfg.get("model_type")) == "lfm2":  # lfm2_moe.py's dense layers take intermediate_size as it is
            inter = _lfm2_mlp_width(cfg, int(inter))
        if "conv" in kinds:
            hybrid["short_conv"] = (_count(cfg, source, ("conv_dim",), default=hidden),
                                    _count(cfg, source, ("conv_L_cache",)), int(cfg.get("conv_bias") is True))
    if str(cfg.get("model_type")) in GLM5_NEXT_TYPES:
        hybrid["indexer_pool"] = _count(cfg, source, ("index_kpool",), default=1)
        if cfg.get("mhc", True) is not False:
            hybrid["hyper_connections"] = _count(cfg, source, ("hc_mult",), minimum=0, default=0)
    if str(cfg.get("model_type")) in DSV4_TYPES and not unsized:
        hybrid.update(_dsv4_fields(cfg, experts, method, source))
    if nemotron_h:
        experts, top_k = (experts, top_k) if moe else (0, 0)  # its class defaults to 8 experts that no "E" block uses
        hybrid.update(ffn_free_layers=len(ffn_free), norms_per_layer=1, expert_matrices=2,
                      shared_expert_gate=False)
        _one_shared_mlp(counts, cfg, source, bool(moe), default=0)
    if zamba2 and not unsized:
        hybrid.update(_zamba2_fields(cfg, source), ffn_free_layers=layers, norms_per_layer=1)
    if str(cfg.get("model_type")) in INKLING_TYPES and not unsized:
        hybrid.update(_inkling_fields(cfg, bool(moe), source), norms_per_layer=2)
    if longcat:
        _longcat_keys(cfg, source)
    if str(cfg.get("model_type")) in HRM_TYPES and not unsized:
        # hrm_text.py: the L and H stacks' layers hold the weights, their norms have none (RMSNorm has_weight=False);
        # z_L_init, one hidden-size vector, in the place of a final norm
        hybrid.update(weight_layers=2 * _count(cfg, source, ("num_layers_per_stack",)), norms_per_layer=0)
    if longcat and not unsized:  # longcat_flash.py FlashDecoderLayer: two MLPs and four norms beside the experts
        hybrid.update(mlps_beside_experts=2, norms_per_layer=4,
                      zero_experts=_count(cfg, source, ("zero_expert_num",), minimum=0, default=0))
    if per_modality:  # ernie45_vl_moe.py: a router per modality, the shared experts without a gate
        hybrid.update(expert_routers=2, shared_expert_gate=False)
    if str(cfg.get("model_type")) == "granitemoehybrid":  # vllm granitemoehybrid.py: GraniteMoeSharedMLP
        shared_inter = _count(cfg, source, ("shared_intermediate_size",), minimum=0, default=0)
        if experts:
            counts["shared_expert_intermediate_size"] = shared_inter
            hybrid["shared_expert_gate"] = False
        elif shared_inter:
            inter = shared_inter  # no experts: the shared MLP is the layer's MLP
    if experts and not moe and architecture in NEEDS_AN_MOE_LAYER:
        raise ConfigError(source, layers, f"num_hidden_layers {layers} leaves {architecture} no layer with routed "
                          f"experts (its first {counts['first_k_dense_replace']} are dense), and vLLM's {architecture} "
                          "refuses to build without one (\"No MoE layer found in model.layers\"); use more layers "
                          "than the dense ones")
    return ModelArchitecture(
        name=name, model_type=str(cfg.get("model_type", "unknown")), num_layers=layers, hidden_size=hidden,
        num_attention_heads=heads, num_kv_heads=kv_heads, head_dim=int(head_dim), intermediate_size=int(inter),
        vocab_size=vocab, max_position_embeddings=max_pos,
        tie_word_embeddings=(bool(cfg.get("tie_word_embeddings", False)) or zamba2)
        and not (bailing_v3(cfg) or lightning(cfg)),  # both build their own lm_head whatever the config says
        num_experts=experts,
        moe_intermediate_size=counts["moe_intermediate_size"], num_shared_experts=counts["n_shared_experts"],
        first_dense_layers=counts["first_k_dense_replace"], kv_lora_rank=counts["kv_lora_rank"],
        qk_rope_head_dim=counts["qk_rope_head_dim"],
        torch_dtype=dtype, weight_bytes_per_param=weight_bytes, quantized_share=tuple(sorted(share.items())),
        quant_method=method,
        layer_kinds=kinds if set(kinds) != {"full"} or len(kinds) != layers else (), window=window, cache_slots=slots,
        moe_layer_count=len(moe), q_lora_rank=counts["q_lora_rank"],
        qk_nope_head_dim=counts["qk_nope_head_dim"], v_head_dim=counts["v_head_dim"],
        shared_expert_intermediate_size=counts["shared_expert_intermediate_size"],
        gated_attention=(str(cfg.get("model_type")) in GATED_ATTENTION_TYPES
                         and cfg.get(GATE_SWITCH.get(str(cfg.get("model_type")), "attn_output_gate")) is not False)
        or str(cfg.get("model_type")) in HRM_TYPES,  # hrm_text.py gqkv_proj: a sigmoid gate beside every query
        linear_attention=linear,  # type: ignore[arg-type]
        vision_parameters=vision_parameters(vision, hidden, wrapper) if isinstance(vision, Mapping) else 0,
        encoder_input=encoder_input(vision, wrapper, hidden) if isinstance(vision, Mapping) else (),
        modalities=input_modalities(wrapper) if isinstance(vision, Mapping) else (),
        uncounted_towers=UNCOUNTED_TOWERS.get(str(wrapper.get("model_type")), "") if isinstance(vision, Mapping)
        else "",
        image_prefix_lm=image_prefix_lm(wrapper),
        architecture=architecture,
        experts_per_token=max(top_k, 0) if experts else 0,
        mlp_matrices=2 if str(cfg.get("model_type")) in NON_GATED_MLP else 3,
        checkpoint_kv_dtype=checkpoint_kv_cache_dtype(cfg),
        rotary_cache_elements=rotary_cache_elements(cfg, int(head_dim), hybrid.get("global_attention", (0, 0))[1]),
        unsized=unsized[1] if unsized else "", remote_code=needs_code,
        engine_counts_experts=not cfg.get(ENGINE_UNSEEN_EXPERTS),
        mtp_layers=_count(cfg, source, ("num_nextn_predict_layers",), minimum=0, default=0),
        biased_grouped_router=biased_grouped_router(cfg, experts, top_k),
        **hybrid, **nas,
    )


BIASED_ROUTERS = {"glm4_moe": None, "glm4v_moe": None, "deepseek_v3": "noaux_tc", "kimi_k2": "noaux_tc",
                  "deepseek_v2": "noaux_tc", "lfm2_moe": "use_expert_bias", "kimi_linear": "use_grouped_topk",
                  "bailing_hybrid": "moe_router_enable_expert_bias"}
"""The model types whose vLLM MoE layer passes use_grouped_topk=True with an e_score_correction_bias, and what makes
the bias: always (None; glm4_moe.py), topk_method == "noaux_tc" (deepseek_v2.py, which DeepSeek-V3 and Kimi-K2 load
through), use_expert_bias (lfm2_moe.py, one group); Kimi Linear (0.25.1's kimi_linear.py KimiMoE, 0.32.0's
vllm/models/kimi_k3: a bias always, grouped where use_grouped_topk, num_expert_group groups); Ling 2.5
(bailing_moe_linear.py BailingMoeV25: grouped where n_group and topk_group are set, a bias where
moe_router_enable_expert_bias; Ling 3.0 shares the model type and is read the same, though only 0.32.0, which holds
nothing, serves it). The two last were found by allocator traces v91 and v92 (vLLM 0.25.1): a generation-2
collection gave back 0.95 and 0.63 GiB held since their routers' _moe_C::grouped_topk compile. Other grouped-topk
families are not read for it (their profile is planned without the 0.25.1 compile hold)."""


def _one_shared_mlp(counts: dict[str, int], cfg: Mapping[str, Any], source: str, routed: bool, default: int) -> None:
    """Families whose shared experts are one ungated MLP num_shared_experts x moe_shared_expert_intermediate_size wide
    (`default` where the key is absent): NemotronH's (nemotron_h.py), Ling 3.0's (bailing_moe_v3.py BailingMoeV3MoE)
    and Ling 2.5's (bailing_moe_linear.py BailingMoeV25, moe_intermediate_size by default). Counted as
    shared_expert_intermediate_size in place of per-expert shared experts; none without routed experts."""
    width = _count(cfg, source, ("moe_shared_expert_intermediate_size",), minimum=0, default=default)
    counts["shared_expert_intermediate_size"] = counts["n_shared_experts"] * width if routed else 0
    counts["n_shared_experts"] = 0


def biased_grouped_router(cfg: Mapping[str, Any], experts: int, top_k: int) -> bool:
    """Whether vLLM's grouped_topk takes the fused kernel for this model (ModelArchitecture.biased_grouped_router):
    a bias, num_expert_group groups that divide the experts with more experts than groups (GroupedTopKRouter
    valid_grouping; otherwise fused_topk_bias, not compiled), and at most 32 groups and 32 experts a token
    (grouped_topk's condition for fused_grouped_topk)."""
    model_type = str(cfg.get("model_type"))
    if not experts or model_type not in BIASED_ROUTERS:
        return False
    switch = BIASED_ROUTERS[model_type]
    if switch == "noaux_tc" and cfg.get("topk_method") != "noaux_tc":
        return False
    if switch in ("use_expert_bias", "use_grouped_topk") and cfg.get(switch) is not True:
        return False
    if switch == "moe_router_enable_expert_bias" and not (
            cfg.get(switch) and cfg.get("n_group") is not None and cfg.get("topk_group") is not None):
        return False
    groups = {"lfm2_moe": 1, "kimi_linear": cfg.get("num_expert_group") or 1}.get(model_type, cfg.get("n_group") or 1)
    if not plain_int(groups):
        return False
    return experts > groups and experts % groups == 0 and groups <= 32 and top_k <= 32


def _lfm2_mlp_width(cfg: Mapping[str, Any], width: int) -> int:
    """LFM2's MLP width as vllm/model_executor/models/lfm2.py Lfm2MLP derives it from intermediate_size (the
    checkpoints' block_ff_dim): with block_auto_adjust_ff_dim, two thirds of it, times block_ffn_dim_multiplier,
    rounded up to a multiple of block_multiple_of."""
    if cfg.get("block_auto_adjust_ff_dim") is False:
        return width
    width = int(2 * width / 3)
    multiplier = cfg.get("block_ffn_dim_multiplier")
    if isinstance(multiplier, (int, float)) and not isinstance(multiplier, bool):
        width = int(multiplier * width)
    multiple = cfg.get("block_multiple_of") if positive_int(cfg.get("block_multiple_of")) else 256
    return multiple * -(-width // multiple)


def _gemma4_fields(cfg: Mapping[str, Any], kinds: tuple[str, ...], head_dim: int, kv_heads: int,
                   source: str) -> dict[str, Any]:
    """Gemma 4's per-layer attention as vLLM builds it (vllm/model_executor/models/gemma4.py Gemma4DecoderLayer:
    config.per_layer_config[i].head_dim / num_key_value_heads, which transformers' Gemma4TextConfig fills for the
    full-attention layers from global_head_dim and num_global_key_value_heads), the KV-shared last layers, the
    per-layer input embeddings and the double-wide MLP of the shared layers."""
    overrides = cfg.get("per_layer_config") or {}
    full = set()
    for index, layer in (overrides.items() if isinstance(overrides, Mapping) else ()):
        if not (str(index).isdigit() and int(index) < len(kinds) and isinstance(layer, Mapping)):
            raise ConfigError(source, index, "per_layer_config keys must be layer indices")
        if kinds[int(index)] != "full":
            raise ConfigError(source, index, "per_layer_config overrides a sliding layer; the planner reads "
                                             "overrides of the full-attention layers only")
        full.add((_count(layer, source, ("num_key_value_heads",), default=kv_heads),
                  _count(layer, source, ("head_dim",), default=head_dim)))
    if len(full) > 1:
        raise ConfigError(source, sorted(full), "per_layer_config gives the full-attention layers different shapes")
    shared = _count(cfg, source, ("num_kv_shared_layers",), minimum=0, default=0)
    if shared >= len(kinds):
        raise ConfigError(source, shared, f"num_kv_shared_layers must be below num_hidden_layers ({len(kinds)})")
    width = _count(cfg, source, ("hidden_size_per_layer_input",), minimum=0, default=0)
    # An expert block beside every layer's MLP where num_experts is set (Gemma4DecoderLayer.enable_moe_block): its
    # router's input and per-expert scales (Gemma4Router) and three more norms a layer.
    moe = cfg.get("num_experts") is not None
    return {"global_attention": full.pop() if full else (kv_heads, head_dim), "kv_shared_layers": shared,
            "per_layer_input": (_count(cfg, source, ("vocab_size_per_layer_input",)), width) if width else (0, 0),
            "double_wide_mlp": cfg.get("use_double_wide_mlp") is True, "norms_per_layer": 7 if moe else 4,
            "router_scales": moe}


def _gemma3n_fields(cfg: Mapping[str, Any], source: str) -> dict[str, Any]:
    """What Gemma 3n's decoder has beyond Gemma 4's shape (vllm/model_executor/models/gemma3n.py): AltUp's
    altup_num_inputs predictions of the hidden state and LAuReL's laurel_rank residual in every layer (their weights,
    ModelArchitecture.parameter_parts "altup"), six norms a layer (input, post-attention, pre- and post-feed-forward,
    post-LAuReL, AltUp's router norm)."""
    return {"altup_inputs": _count(cfg, source, ("altup_num_inputs",), default=4),
            "laurel_rank": _count(cfg, source, ("laurel_rank",), default=64), "norms_per_layer": 6}


def _pure_mamba_inner(cfg: Mapping[str, Any], hidden: int, source: str) -> int:
    """The mixer's width: intermediate_size (Mamba-1, MambaDecoderLayer), or expand x hidden_size (Mamba-2,
    Mamba2ForCausalLM.get_mamba_state_shape_from_config; Mamba2DecoderLayer reads intermediate_size first, which
    transformers' Mamba2Config does not keep). It stands in for the MLP width in the activation peak: the mixer's
    in_proj output is tokens x 2 x this wide, as a gated MLP's gate and up are (planner/memory.py dense_mlp_width)."""
    if str(cfg.get("model_type")) == "mamba2" or cfg.get("intermediate_size") is None:
        return _count(cfg, source, ("expand",)) * hidden
    return _count(cfg, source, ("intermediate_size",))


def _pure_mamba_fields(cfg: Mapping[str, Any], layers: int, hidden: int, inner: int,
                       source: str) -> dict[str, Any]:
    """An attention-free model's mixer as vLLM builds it (PURE_MAMBA_TYPES): Mamba-1's MambaMixer (time_step_rank,
    _dt_rank; the dt / B / C norms Falcon-Mamba's has carry no weight)
    or Mamba-2's MambaMixer2 (n_groups, num_heads, head_dim, its gated norm weighted); each layer one norm and no
    MLP."""
    def count(*names: str) -> int:
        return _count(cfg, source, names)

    conv_bias, bias = int(cfg.get("use_conv_bias", True) is not False), int(bool(cfg.get("use_bias")))
    fields: dict[str, Any] = {"ffn_free_layers": layers, "norms_per_layer": 1}
    if str(cfg.get("model_type")) == "mamba2":
        fields["mamba"] = (inner, count("n_groups"), count("num_heads"), count("head_dim"), count("state_size"),
                           count("conv_kernel"), conv_bias, bias)
        return fields
    fields["mamba1"] = (inner, count("state_size"), count("conv_kernel"),
                        _dt_rank(cfg, "time_step_rank", hidden, source), conv_bias, bias, 0)
    return fields


def _dt_rank(cfg: Mapping[str, Any], key: str, hidden: int, source: str) -> int:
    """A Mamba-1 mixer's dt rank: the config's `key`, or ceil(hidden_size / 16) where it says "auto" (transformers'
    JambaConfig and MambaConfig)."""
    return -(-hidden // 16) if cfg.get(key) == "auto" else _count(cfg, source, (key,))


def _state_dtype(value: str, key: str, source: str) -> str:
    """A config's SSM-state dtype (`key`), refused in one line where it is not one the planner weighs."""
    if value not in DTYPE_BYTES:
        raise ConfigError(source, value, f"{key} must be one of {', '.join(sorted(DTYPE_BYTES))}")
    return value


def _mamba2_fields(cfg: Mapping[str, Any], kinds: tuple[str, ...], hidden: int, source: str) -> dict[str, Any]:
    """A Mamba-2 hybrid's mixer dimensions and state dtype, read as vLLM's model class reads them
    (vllm/model_executor/models/nemotron_h.py NemotronHMambaDecoderLayer: intermediate mamba_num_heads x
    mamba_head_dim; granitemoehybrid.py: mamba_expand x hidden_size; falcon_h1.py: mamba_d_ssm where set) and its
    SSM-state dtype
    (vllm/model_executor/models/config.py NemotronHForCausalLMConfig: the config's mamba_ssm_cache_dtype, float32 when
    unset; other families the model dtype)."""
    def count(*names: str) -> int:
        return _count(cfg, source, names)

    if str(cfg.get("model_type")) == "nemotron_h":
        heads, head_dim = count("mamba_num_heads"), count("mamba_head_dim")
        dims = (heads * head_dim, count("n_groups"), heads, head_dim, count("ssm_state_size"), count("conv_kernel"),
                int(cfg.get("use_conv_bias", True) is not False), int(bool(cfg.get("use_bias"))))
        ssm = str(cfg.get("mamba_ssm_cache_dtype") or "float32")
    elif str(cfg.get("model_type")) in ZAMBA2_TYPES:  # zamba2.py Zamba2MambaDecoderLayer
        inner = count("mamba_expand") * hidden
        heads = count("n_mamba_heads")
        dims = (inner, count("mamba_ngroups"), heads, inner // heads, count("mamba_d_state"), count("mamba_d_conv"),
                int(cfg.get("use_conv_bias", True) is not False), int(bool(cfg.get("add_bias_linear"))))
        ssm = ""
    else:  # Falcon-H1 states the mixer's width as mamba_d_ssm where it is not mamba_expand x hidden_size
        inner = count("mamba_d_ssm") if cfg.get("mamba_d_ssm") is not None else count("mamba_expand") * hidden
        dims = (inner, count("mamba_n_groups"), count("mamba_n_heads"), count("mamba_d_head"),
                count("mamba_d_state"), count("mamba_d_conv"), int(cfg.get("mamba_conv_bias", True) is not False),
                int(bool(cfg.get("mamba_proj_bias"))))
        ssm = ""
    if ssm:
        _state_dtype(ssm, "mamba_ssm_cache_dtype", source)
    if str(cfg.get("model_type")) in FALCON_H1_TYPES:  # falcon_h1.py: MambaMixer2(use_rms_norm=mamba_rms_norm)
        return {"mamba": dims, "mamba_ssm_dtype": ssm, "mamba_norm": cfg.get("mamba_rms_norm") is True}
    return {"mamba": dims, "mamba_ssm_dtype": ssm}


LONGCAT_REQUIRED = {
    "zero_expert_type": "vLLM's LongcatMoe asserts it is set (the published checkpoints say \"identity\")",
    "mla_scale_q_lora": "vLLM's longcat_flash.py reads it to scale the query LoRA norm (published checkpoints: true)",
    "mla_scale_kv_lora": "vLLM's longcat_flash.py reads it to scale the KV LoRA norm (published checkpoints: true)",
}
"""Keys a LongCat-Flash config.json must set for vLLM 0.32.0 to build the model: transformers' LongcatFlashConfig has
no default for them, and vLLM's class fails without them (tests/engine/test_every_vllm_family.py NOT_DEPLOYABLE)."""


def _longcat_keys(cfg: Mapping[str, Any], source: str) -> None:
    for key, why in LONGCAT_REQUIRED.items():
        if cfg.get(key) is None:
            raise ConfigError(source, None, f"a LongCat-Flash config needs {key}: {why}")


def _zamba2_heads(hidden: int, heads: int, source: str) -> tuple[int, int]:
    """(head dim, KV heads) of Zamba2's shared attention as vLLM builds it (vllm/model_executor/models/zamba2.py
    Zamba2Attention): attention over the concatenated hidden state and input embedding, attention_hidden_size
    2 x hidden_size (transformers' Zamba2Config sets it so), split in num_attention_heads heads of
    attention_head_dim = 2 x hidden_size / num_attention_heads, with as many KV heads as heads (its QKVParallelLinear
    is given no KV-head count); vLLM refuses heads that do not divide it."""
    if (2 * hidden) % heads:
        raise ConfigError(source, heads, f"num_attention_heads must divide 2 x hidden_size ({2 * hidden}): vLLM's "
                                         "Zamba2Attention splits attention_hidden_size into that many heads")
    return 2 * hidden // heads, heads


def _zamba2_fields(cfg: Mapping[str, Any], source: str) -> dict[str, Any]:
    """Zamba2's shared blocks (ModelArchitecture.shared_blocks): num_mem_blocks, adapter_rank, and whether its
    attention has q / k / v adapters (use_shared_attention_adapter); every hybrid layer has an MLP adapter
    (zamba2.py Zamba2MLP)."""
    return {"shared_blocks": (_count(cfg, source, ("num_mem_blocks",)), _count(cfg, source, ("adapter_rank",)),
                              int(cfg.get("use_shared_attention_adapter") is True))}


def _fetch_from_hub(model_id: str, revision: str) -> dict[str, Any]:
    """config.json from the Hugging Face Hub (token from HF_TOKEN or the local login); with HF_HUB_OFFLINE
    (planner/checkpoint.py hub_offline) from the local cache only."""
    try:
        from huggingface_hub import hf_hub_download

        path = hf_hub_download(model_id, "config.json", revision=revision, local_files_only=hub_offline())
        return json.loads(Path(path).read_text())
    except Exception as exc:  # any network, auth or not-found error ends in the same advice
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError("model.id", model_id,
                          f"could not fetch config.json at revision {revision} from Hugging Face ({reason}); "
                          "when offline or for gated models without HF_TOKEN, set model.configFile "
                          "(a local config.json) or model.architecture") from None


def load_architecture(model_id: str, revision: str, config_file: str | None, inline: Mapping[str, Any] | None,
                      project_dir: Path) -> tuple[ModelArchitecture, str | None]:
    """Resolve the architecture from configFile, the inline object, or the Hub; returns a note on the source."""
    name = model_id.rsplit("/", 1)[-1]
    if config_file and inline:
        raise ConfigError("model.architecture", dict(inline), "set either model.configFile or model.architecture")
    if inline is not None:
        return parse_hf_config(inline, name, "model.architecture"), None
    if config_file:
        path = Path(config_file)
        path = path if path.is_absolute() else project_dir / path
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raise ConfigError("model.configFile", config_file, f"no such file ({path})") from None
        except OSError as exc:
            raise ConfigError("model.configFile", config_file, f"not readable ({exc.strerror})") from None
        if raw[:2] == b"\x1f\x8b":
            raise ConfigError("model.configFile", config_file, "is gzip-compressed; give the plain config.json")
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigError("model.configFile", config_file, f"not a UTF-8 JSON file ({exc})") from None
        if not isinstance(data, Mapping):
            raise ConfigError("model.configFile", config_file,
                              f"holds a JSON {type(data).__name__ if data is not None else 'null'}, "
                              "not a config.json object")
        return parse_hf_config(data, name, "model.configFile"), None
    data = _fetch_from_hub(model_id, revision)
    return (parse_hf_config(data, name, "model.id"),
            f"model architecture fetched from Hugging Face ({model_id}@{revision}); "
            "commit it as model.configFile for reproducible offline plans")
