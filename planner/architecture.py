"""A model's architecture, read from its Hugging Face `config.json`.

Only the fields the planner needs: depth, widths, attention and KV heads, experts, vocabulary,
context length and the checkpoint's dtype / quantization.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.errors import ConfigError
from planner.layers import (
    checkpoint_kv_cache_dtype,
    layer_kinds,
    moe_layer_indices,
    part_layers,
    read_quantization,
    refuse_unsized,
    vision_parameters,
)

DTYPE_BYTES = {"float32": 4.0, "float": 4.0, "bfloat16": 2.0, "float16": 2.0, "half": 2.0,
               "fp8": 1.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0, "float8_e4m3fn": 1.0}


@dataclass(frozen=True)
class ModelArchitecture:
    """What the planner needs to know about a decoder-only transformer."""

    name: str
    model_type: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool = False
    num_experts: int = 0
    moe_intermediate_size: int = 0
    num_shared_experts: int = 0
    first_dense_layers: int = 0
    kv_lora_rank: int = 0
    """Multi-head latent attention (DeepSeek): the cache holds kv_lora_rank + rope dims per layer."""
    qk_rope_head_dim: int = 0
    torch_dtype: str = "bfloat16"
    weight_bytes_per_param: float = 2.0
    """Bytes per parameter of the quantized linear layers (1.0 FP8/INT8, ~0.52 4-bit with group scales, ~0.54
    MXFP4); the bytes of torch_dtype when the checkpoint is not quantized."""
    quantized_share: tuple[tuple[str, float], ...] = ()
    """(part, share of its layers quantized) for the linear parts the checkpoint's quantization scope covers
    (attention, linear, mlp, experts, shared); embeddings, lm_head, routers, norms and vision towers stay in 16 bits
    in vLLM for every method read here."""
    quant_method: str = ""
    layer_kinds: tuple[str, ...] = ()
    """Per decoder layer: full, sliding, chunked or linear (planner/layers.py); empty means all full attention."""
    window: int = 0
    """sliding_window (sliding layers) or attention_chunk_size (chunked layers), in tokens."""
    moe_layer_count: int = -1
    """Decoder layers with routed experts (-1: every layer after first_dense_layers)."""
    shared_expert_intermediate_size: int = 0
    q_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    gated_attention: bool = False
    """Qwen3-Next's and Qwen3.5's full-attention layers project a gate beside each query (q_proj is twice as wide)."""
    linear_attention: tuple[int, int, int, int, int] = (0, 0, 0, 0, 0)
    """Gated DeltaNet layers: key heads, value heads, key head dim, value head dim, conv kernel."""
    vision_parameters: int = 0
    """The vision tower and its projector (multimodal wrappers), loaded beside the decoder."""
    architecture: str = ""
    """The config's first `architectures` entry (the wrapper's for multimodal models): the class vLLM loads, which
    decides the model runner in some releases (planner/engine.py)."""
    experts_per_token: int = 0
    """Routed experts per token (num_experts_per_tok); 0 for dense models."""
    checkpoint_kv_dtype: str = ""
    """The KV-cache dtype the checkpoint's quantization config declares ("fp8"), which vLLM takes under
    --kv-cache-dtype auto (planner/layers.py checkpoint_kv_cache_dtype); "" for none."""
    mlp_matrices: int = 3
    """Weight matrices of a dense layer's MLP: 3 gated (gate, up, down), 2 where the family's MLP is not gated
    (NON_GATED_MLP)."""
    rotary_cache_elements: int = 0
    """Elements of the rotary cos/sin caches vLLM builds at load, in the model dtype (rotary_cache_elements)."""

    @property
    def quantized_parts(self) -> frozenset[str]:
        return frozenset(part for part, share in self.quantized_share if share > 0)

    @property
    def kinds(self) -> tuple[str, ...]:
        return self.layer_kinds or ("full",) * self.num_layers

    @property
    def moe_layers(self) -> int:
        if not self.num_experts:
            return 0
        if self.moe_layer_count >= 0:
            return self.moe_layer_count
        return self.num_layers - min(self.first_dense_layers, self.num_layers)

    def parameter_parts(self) -> dict[str, int]:
        """Parameters by part (every expert counted, since all are loaded): attention, linear (attention), mlp
        (dense layers), experts (routed and shared), router, embeddings, vision, norms."""
        h = self.hidden_size
        kinds = self.kinds
        attention_layers = sum(kind != "linear" for kind in kinds)
        if self.kv_lora_rank:
            nope, rope = self.qk_nope_head_dim or self.head_dim - self.qk_rope_head_dim, self.qk_rope_head_dim
            v_dim = self.v_head_dim or self.head_dim
            heads = self.num_attention_heads
            q = (h * self.q_lora_rank + self.q_lora_rank * heads * (nope + rope) if self.q_lora_rank
                 else h * heads * (nope + rope))
            attention = (q + h * (self.kv_lora_rank + rope) + self.kv_lora_rank * heads * (nope + v_dim)
                         + heads * v_dim * h)
        else:
            q_width = self.num_attention_heads * self.head_dim * (2 if self.gated_attention else 1)
            kv_width = self.num_kv_heads * self.head_dim
            attention = h * q_width + 2 * h * kv_width + self.num_attention_heads * self.head_dim * h
        k_heads, v_heads, k_dim, v_dim_l, kernel = self.linear_attention
        key, value = k_heads * k_dim, v_heads * v_dim_l
        linear = h * (2 * key + 2 * value) + h * 2 * v_heads + (2 * key + value) * kernel + value * h
        moe_layers = self.moe_layers
        dense_layers = self.num_layers - moe_layers
        expert_inter = self.moe_intermediate_size or self.intermediate_size
        shared = self.num_shared_experts * 3 * h * expert_inter + (
            3 * h * self.shared_expert_intermediate_size + h if self.shared_expert_intermediate_size else 0)
        return {
            "attention": attention_layers * attention,
            "linear": (len(kinds) - attention_layers) * linear,
            "mlp": dense_layers * self.mlp_matrices * h * self.intermediate_size,
            "experts": moe_layers * self.num_experts * 3 * h * expert_inter,
            "shared": moe_layers * shared,
            "router": moe_layers * h * self.num_experts,
            "embeddings": self.vocab_size * h * (1 if self.tie_word_embeddings else 2),
            "vision": self.vision_parameters,
            "norms": self.num_layers * 2 * h + h,
        }

    def weight_bytes(self, unquantized_bytes: float) -> float:
        """Bytes of all weights: the quantized parts at the checkpoint's rate, the rest at `unquantized_bytes`."""
        share = dict(self.quantized_share)
        return sum(count * (share.get(part, 0.0) * self.weight_bytes_per_param
                            + (1 - share.get(part, 0.0)) * unquantized_bytes)
                   for part, count in self.parameter_parts().items())

    def parameter_count(self) -> int:
        """Parameters of the whole checkpoint vLLM loads (every expert counted, vision tower included)."""
        return sum(self.parameter_parts().values())

    def kv_bytes_per_token(self, tp: int, pp: int, kv_dtype_bytes: float) -> float:
        """KV-cache bytes one token occupies on one GPU of a TP x PP replica."""
        return math.ceil(self.num_layers / pp) * self.attention_bytes_per_token(tp, kv_dtype_bytes)


    def attention_bytes_per_token(self, tp: int, kv_dtype_bytes: float) -> float:
        """One attention layer's KV bytes per token on one GPU."""
        if self.kv_lora_rank:
            # MLA caches one latent vector per token and layer, replicated on every TP rank.
            return (self.kv_lora_rank + self.qk_rope_head_dim) * kv_dtype_bytes
        return 2 * max(self.num_kv_heads / tp, 1) * self.head_dim * kv_dtype_bytes

    def linear_state_bytes(self, tp: int, state_bytes: float) -> float:
        """One Gated DeltaNet layer's state per sequence on one GPU: the conv state of (kernel - 1) steps over
        2 x key + value channels and the v_heads x v_dim x k_dim recurrent state, in the model's dtype
        (vllm/model_executor/layers/mamba/mamba_utils.py, gated_delta_net_state_shape / _mamba_state_dtype)."""
        k_heads, v_heads, k_dim, v_dim, kernel = self.linear_attention
        conv = (2 * k_heads * k_dim + v_heads * v_dim) / tp * (kernel - 1)
        return (conv + v_heads / tp * v_dim * k_dim) * state_bytes

    def kv_tokens(self, tp: int, pp: int, kv_dtype_bytes: float, available: float, max_len: int,
                  batched_tokens: int, state_bytes: float = 2.0) -> int:
        """The `GPU KV cache size: N tokens` vLLM reports for `available` bytes of KV memory per GPU.

        All full attention: available / bytes per token. Otherwise vLLM 0.25.1's hybrid manager
        (vllm/v1/core/kv_cache_utils.py): layers of one kind form groups of `group_size` layers (the smallest
        kind's count, or the largest when it is under 1.5 x the smallest: _get_kv_cache_groups_uniform_page_size),
        every group shares one pool of pages of the same size, and the reported size is max concurrency x
        max_model_len (get_kv_cache_capacity), a request holding per group: full attention ceil(len / block)
        blocks; sliding window ceil(min(window - 1 + max_num_batched_tokens, len) / block) + 1; chunked local
        ceil(min(chunk + max_num_batched_tokens, len) / block); a linear-attention state one block
        (vllm/v1/kv_cache_interface.py, max_admission_blocks_per_request / MambaSpec, mamba_cache_mode none).
        With linear layers the attention block grows until its page holds one state
        (vllm/platforms/interface.py, _align_hybrid_block_size)."""
        if available <= 0:
            return 0
        kinds = self.kinds[:math.ceil(self.num_layers / pp)]
        per_token = self.attention_bytes_per_token(tp, kv_dtype_bytes)
        counts = {kind: kinds.count(kind) for kind in dict.fromkeys(kinds)}
        if set(counts) == {"full"}:
            return int(available // (per_token * counts["full"]))
        block = 16
        if "linear" in counts:
            block *= math.ceil(self.linear_state_bytes(tp, state_bytes) / (16 * per_token))
        page = block * per_token
        group = min(counts.values())
        if max(counts.values()) < 1.5 * group:
            group = max(counts.values())
        blocks = available // (page * group)
        per_kind = {"full": math.ceil(max_len / block),
                    "sliding": math.ceil(min(self.window - 1 + batched_tokens, max_len) / block) + 1,
                    "chunked": math.ceil(min(self.window + batched_tokens, max_len) / block),
                    "linear": 1}
        per_request = sum(math.ceil(count / group) * per_kind[kind] for kind, count in counts.items())
        return int(blocks / per_request * max_len)

    def attention_block_tokens(self, tp: int, kv_dtype_bytes: float, state_bytes: float = 2.0) -> int:
        """Tokens per KV block: 16, or with linear-attention layers the smallest multiple of 16 whose attention page
        holds one layer's state (vllm/platforms/interface.py, _align_hybrid_block_size; FlashAttention's kernel
        blocks are multiples of 16)."""
        if "linear" not in self.kinds:
            return 16
        per_token = self.attention_bytes_per_token(tp, kv_dtype_bytes)
        return 16 * math.ceil(self.linear_state_bytes(tp, state_bytes) / (16 * per_token))

    def kv_tokens_grouped(self, tp: int, pp: int, kv_dtype_bytes: float, available: float, max_len: int,
                          in_flight_tokens: int, state_blocks: int, state_bytes: float = 2.0) -> int:
        """`GPU KV cache size: N tokens` as vLLM 0.32.0 computes it (vllm/v1/core/kv_cache_utils.py,
        get_kv_cache_configs): the whole model's layers of one kind form groups of `group_size` layers (the smallest
        kind's count, or the largest when under 1.5 x the smallest; a kind's layers dealt round-robin into
        cdiv(count, group_size) groups: _get_kv_cache_groups_uniform_page_size; one group when every layer is of one
        kind); each pipeline stage (vllm/distributed/utils.py, get_pp_indices) needs page x its largest group's
        layers per block, and the stage with the fewest blocks sets the pool; the size reported is
        num_blocks / blocks per request x max_model_len (get_kv_cache_capacity), a request holding per group: full
        cdiv(len, block); sliding cdiv(min(window - 1 + in-flight tokens, len), block) + 1; chunked
        cdiv(min(chunk + in-flight tokens, len), block); linear `state_blocks` (vllm/v1/kv_cache_interface.py,
        max_admission_blocks_per_request / MambaSpec.max_memory_usage_bytes)."""
        if available <= 0:
            return 0
        kinds = self.kinds
        block = self.attention_block_tokens(tp, kv_dtype_bytes, state_bytes)
        page = block * self.attention_bytes_per_token(tp, kv_dtype_bytes)
        by_kind: dict[str, list[int]] = {}
        for index, kind in enumerate(kinds):
            by_kind.setdefault(kind, []).append(index)
        if len(by_kind) == 1:
            groups = [list(range(len(kinds)))]
            group_kinds = [kinds[0]]
        else:
            counts = [len(v) for v in by_kind.values()]
            size = max(counts) if max(counts) < min(counts) * 1.5 else min(counts)
            groups, group_kinds = [], []
            for kind, layers in by_kind.items():
                n = math.ceil(len(layers) / size)
                for i in range(n):
                    groups.append(layers[i::n])
                    group_kinds.append(kind)
        blocks = min(int(available // (page * max(sum(1 for layer in g if start <= layer < stop) for g in groups)))
                     for start, stop in pp_stages(len(kinds), pp))
        per_kind = {"full": math.ceil(max_len / block),
                    "sliding": math.ceil(min(self.window - 1 + in_flight_tokens, max_len) / block) + 1,
                    "chunked": math.ceil(min(self.window + in_flight_tokens, max_len) / block),
                    "linear": state_blocks}
        per_request = sum(per_kind[kind] for kind in group_kinds)
        return int(blocks / per_request * max_len)


def pp_stages(layers: int, pp: int) -> list[tuple[int, int]]:
    """[start, stop) of each pipeline stage's layers: an even split with the remainder on the stages before the last
    (vllm/distributed/utils.py, get_pp_indices)."""
    parts = [layers // pp] * pp
    for i in range(2, layers % pp + 2):
        parts[-i] += 1
    bounds, start = [], 0
    for part in parts:
        bounds.append((start, start + part))
        start += part
    return bounds


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


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def context_length(cfg: Mapping[str, Any], source: str) -> int:
    """The longest sequence vLLM accepts for this config.json, derived the way vLLM derives it."""
    found = {}
    for key in CONTEXT_KEYS:
        value = cfg.get(key)
        if value is None:
            continue
        if not _positive_int(value):
            raise ConfigError(source, value, f"{key} must be a positive integer")
        found[key] = value
    if not found:
        raise ConfigError(source, "max_position_embeddings",
                          f"the model config has none of {', '.join(CONTEXT_KEYS)}, so its context length is unknown")
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


def rotary_cache_elements(cfg: Mapping[str, Any], head_dim: int) -> int:
    """Elements of the cos/sin caches vLLM 0.32.0 keeps on each GPU from the load on
    (vllm/model_executor/layers/rotary_embedding/__init__.py get_rope: one cache per distinct set of parameters,
    shared by every layer that uses it; each is positions x rotary_dim, registered in the default dtype). The positions
    are max_position_embeddings, except: `linear` caches factor x that (linear_scaling_rope.py), `yarn` and
    `deepseek_yarn` original_max_position_embeddings x factor (yarn_scaling_rope.py, deepseek_scaling_rope.py),
    `longrope` a short and a long cache (phi3_long_rope_scaled_rope.py) and M-RoPE 4 x (mrope.py positions_factor).
    Gemma 3 keeps one parameter set per layer type (vllm/model_executor/models/gemma3.py). Latent attention
    rotates qk_rope_head_dim channels (deepseek_v2.py)."""
    positions = cfg.get("max_position_embeddings")
    if not _positive_int(positions):
        return 0
    params = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    if not isinstance(params, Mapping):
        return 0
    nested = bool(params) and all(isinstance(v, Mapping) for v in params.values())
    sets = {json.dumps(p, sort_keys=True, default=str): p for p in (params.values() if nested else [params])}
    width = int(cfg.get("qk_rope_head_dim") or 0) or head_dim
    total = 0
    for p in sets.values():
        partial = p.get("partial_rotary_factor", cfg.get("partial_rotary_factor")) or 1.0
        rotary_dim = int(p.get("rope_dim") or int(width * float(partial)))
        kind = p.get("rope_type") or p.get("type") or "default"
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
        if len(value) != layers or not all(_positive_int(v) for v in value):
            raise ConfigError(source, value, f"intermediate_size as a list needs {layers} positive integers, "
                                             "one per layer")
        return round(sum(value) / layers)
    if not _positive_int(value):
        raise ConfigError(source, value, "intermediate_size must be a positive integer (or a list, one per layer)")
    return value


NON_GATED_MLP = frozenset({"starcoder2", "gpt_neox", "phi", "apertus", "arcee", "falcon", "gpt_bigcode", "gpt2",
                           "gptj", "opt", "nemotron"})
"""Families whose MLP is two matrices, up and down, without a gate (vLLM: starcoder2.py c_fc/c_proj, gpt_neox.py
dense_h_to_4h/dense_4h_to_h, phi.py fc1/fc2, apertus.py and arcee.py up_proj/down_proj, falcon.py, gpt_bigcode.py,
gpt2.py, gpt_j.py fc_in/fc_out, opt.py fc1/fc2, nemotron.py up_proj/down_proj with squared ReLU). Counted with three
they were planned 21-57% heavier than transformers builds them."""
LLAMA4_TYPES = frozenset({"llama4", "llama4_text"})
GATED_ATTENTION_TYPES = frozenset({"qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"})
"""Families whose full-attention layers are vLLM's Qwen3NextAttention, which projects an output gate beside each
query unless the config sets attn_output_gate false (vllm/model_executor/models/qwen3_next.py; qwen3_5.py uses the
same class). Without it Qwen3.5's attention planned 134M parameters light per 8 full layers at hidden 4,096."""

WRAPPER_KEYS = ("quantization_config", "torch_dtype", "dtype", "tie_word_embeddings")
"""What a multimodal wrapper's top level sets for its decoder when text_config leaves it out."""


def _config_classes() -> Mapping[str, Any]:
    """transformers' registry of built-in config classes by model_type (no remote code is ever run). The Pulumi
    program's environment has transformers without torch, which is enough for configs; its import-time notice
    about the missing torch is kept off the plan's output."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from transformers import CONFIG_MAPPING

    return CONFIG_MAPPING


def _filled(cls: Any, cfg: Mapping[str, Any]) -> dict[str, Any] | None:
    """config.json through its transformers class: every default and derived field (vocab_size,
    tie_word_embeddings, layer_types, head_dim, rope_parameters) as vLLM's config object has it. None when the class
    refuses the values; the planner's own checks then name the key."""
    try:
        return dict(cls(**{k: v for k, v in cfg.items() if k != "auto_map"}).to_dict())
    except Exception:  # transformers raises many kinds on bad values; our checks below give the one line
        return None


def _architecture_type(architectures: Any, classes: Mapping[str, Any]) -> str | None:
    """The model_type of transformers' own class for the config's first architecture, if it has one."""
    if not isinstance(architectures, list) or not architectures or not isinstance(architectures[0], str):
        return None
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    by_class = {name: model_type for model_type, name in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items()}
    found = by_class.get(architectures[0])
    return found if found in classes else None


def as_vllm_reads(cfg: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The config as vLLM reads it: vLLM loads config.json through transformers' config class for its model_type
    (vllm/transformers_utils/config.py, get_config), so fields a published config.json leaves out take that class's
    defaults. A model_type transformers has no class for is read through its text_config's class when that one is
    known (a wrapper around a known decoder); a remote-code config (auto_map) through transformers' class for its
    first architecture when there is one (Kimi-K2: DeepseekV3ForCausalLM), and refused otherwise."""
    model_type = cfg.get("model_type")
    classes = _config_classes()
    if isinstance(model_type, str) and model_type in classes:
        return _filled(classes[model_type], cfg) or dict(cfg)
    text = cfg.get("text_config")
    if isinstance(text, Mapping) and isinstance(text.get("model_type"), str) and text["model_type"] in classes:
        return {**cfg, "text_config": _filled(classes[text["model_type"]], text) or dict(text)}
    known = _architecture_type(cfg.get("architectures"), classes)
    if known is not None:  # remote code whose architecture transformers implements (Kimi-K2: DeepseekV3ForCausalLM)
        return _filled(classes[known], {**cfg, "model_type": known}) or dict(cfg)
    if cfg.get("auto_map"):
        raise ConfigError(source, model_type, "this config needs remote code (auto_map) and transformers has no "
                                              f"config class for model_type {model_type!r}; set model.architecture "
                                              "to the config of the architecture it implements (a model_type "
                                              "transformers knows), or model.weightsGib with parallelism.tensor")
    return dict(cfg)


def parse_hf_config(cfg: Mapping[str, Any], name: str, source: str) -> ModelArchitecture:
    """Build a ModelArchitecture from a Hugging Face config.json mapping.

    `source` is the config key the mapping came from, so errors name it.
    """
    if not isinstance(cfg, Mapping):
        raise ConfigError(source, cfg, "expected a Hugging Face config.json object")
    raw_text = cfg.get("text_config")
    architectures = cfg.get("architectures")
    refuse_unsized(raw_text if isinstance(raw_text, Mapping) else cfg, source)  # before transformers rewrites them
    cfg = as_vllm_reads(cfg, source)
    vision, wrapper = cfg.get("vision_config"), cfg
    if isinstance(cfg.get("text_config"), Mapping):  # multimodal wrappers keep the decoder here
        text = cfg["text_config"]
        outer = {k: v for k, v in cfg.items() if k in WRAPPER_KEYS and text.get(k) is None}
        cfg = {**text, **outer}
    refuse_unsized(cfg, source)
    layers = _count(cfg, source, ("num_hidden_layers", "n_layer", "num_layers"))
    hidden = _count(cfg, source, ("hidden_size", "n_embd", "d_model"))
    heads = _count(cfg, source, ("num_attention_heads", "n_head"))
    kv_heads = _count(cfg, source, ("num_key_value_heads",), default=heads)
    if heads % kv_heads:
        raise ConfigError(source, kv_heads, f"num_key_value_heads must divide num_attention_heads ({heads})")
    head_dim = _count(cfg, source, ("head_dim",), default=hidden // heads)
    if not head_dim:
        raise ConfigError(source, hidden, f"hidden_size is smaller than num_attention_heads ({heads}) and no "
                                          "head_dim is given")
    inter = _intermediate(cfg, layers, hidden, source)
    vocab = _count(cfg, source, ("vocab_size",))
    max_pos = context_length(cfg, source)
    experts = _count(cfg, source, ("num_local_experts", "n_routed_experts", "num_experts", "moe_num_experts"),
                     minimum=0, default=0)
    top_k = _count(cfg, source, ("num_experts_per_tok", "moe_topk", "moe_k"), minimum=0, default=-1)  # -1: not given
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
                           "shared_expert_intermediate_size", "moe_num_shared_experts")}
    if counts["moe_num_shared_experts"]:  # vllm/model_executor/models/ernie45_moe.py: shared, of the expert width
        counts["n_shared_experts"] = counts["moe_num_shared_experts"]
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
    moe = moe_layer_indices(cfg, layers, experts, counts["first_k_dense_replace"])
    method, weight_bytes, share = read_quantization(cfg, DTYPE_BYTES[dtype], source, part_layers(kinds, set(moe)))
    linear = tuple(_count(cfg, source, (name,), default=0) for name in (
        "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
        "linear_conv_kernel_dim"))
    if "linear" in kinds and not all(linear):
        raise ConfigError(source, "linear_num_key_heads", "linear-attention layers need linear_num_key_heads, "
                          "linear_num_value_heads, linear_key_head_dim, linear_value_head_dim and "
                          "linear_conv_kernel_dim in the model config")
    return ModelArchitecture(
        name=name, model_type=str(cfg.get("model_type", "unknown")), num_layers=layers, hidden_size=hidden,
        num_attention_heads=heads, num_kv_heads=kv_heads, head_dim=int(head_dim), intermediate_size=int(inter),
        vocab_size=vocab, max_position_embeddings=max_pos,
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)), num_experts=experts,
        moe_intermediate_size=counts["moe_intermediate_size"], num_shared_experts=counts["n_shared_experts"],
        first_dense_layers=counts["first_k_dense_replace"], kv_lora_rank=counts["kv_lora_rank"],
        qk_rope_head_dim=counts["qk_rope_head_dim"],
        torch_dtype=dtype, weight_bytes_per_param=weight_bytes, quantized_share=tuple(sorted(share.items())),
        quant_method=method,
        layer_kinds=kinds if set(kinds) != {"full"} else (), window=window,
        moe_layer_count=len(moe), q_lora_rank=counts["q_lora_rank"],
        qk_nope_head_dim=counts["qk_nope_head_dim"], v_head_dim=counts["v_head_dim"],
        shared_expert_intermediate_size=counts["shared_expert_intermediate_size"],
        gated_attention=(str(cfg.get("model_type")) in GATED_ATTENTION_TYPES
                         and cfg.get("attn_output_gate") is not False),
        linear_attention=linear,  # type: ignore[arg-type]
        vision_parameters=vision_parameters(vision, hidden, wrapper) if isinstance(vision, Mapping) else 0,
        architecture=str(architectures[0]) if isinstance(architectures, list) and architectures else "",
        experts_per_token=max(top_k, 0) if experts else 0,
        mlp_matrices=2 if str(cfg.get("model_type")) in NON_GATED_MLP else 3,
        checkpoint_kv_dtype=checkpoint_kv_cache_dtype(cfg),
        rotary_cache_elements=rotary_cache_elements(cfg, int(head_dim)),
    )


def _fetch_from_hub(model_id: str, revision: str) -> dict[str, Any]:
    """config.json from the Hugging Face Hub (token from HF_TOKEN or the local login). HF_HUB_OFFLINE is read when
    the call is made: huggingface_hub reads it once, at its import, and would otherwise retry the Hub for tens of
    seconds in a process that set it later."""
    offline = os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")
    try:
        from huggingface_hub import hf_hub_download

        path = hf_hub_download(model_id, "config.json", revision=revision, local_files_only=offline)
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
