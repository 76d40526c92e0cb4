"""A model's architecture, read from its Hugging Face `config.json`.

Only the fields the planner needs: depth, widths, attention and KV heads, experts, vocabulary,
context length and the checkpoint's dtype / quantization.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.errors import ConfigError

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
    """1.0 for FP8 checkpoints, 0.5 for 4-bit ones; otherwise the bytes of torch_dtype."""

    def parameter_count(self) -> int:
        """Parameters of a dense or MoE decoder (every expert counted, since all are loaded)."""
        h, layers = self.hidden_size, self.num_layers
        if self.kv_lora_rank:
            attention = h * self.num_attention_heads * self.head_dim * 3  # q, kv up/down, o; MLA approx.
        else:
            q_o = 2 * h * self.num_attention_heads * self.head_dim
            kv = 2 * h * self.num_kv_heads * self.head_dim
            attention = q_o + kv
        dense_mlp = 3 * h * self.intermediate_size  # gate, up, down projections
        if self.num_experts:
            expert_inter = self.moe_intermediate_size or self.intermediate_size
            moe_mlp = ((self.num_experts + self.num_shared_experts) * 3 * h * expert_inter
                       + h * self.num_experts)  # router
            dense_layers = min(self.first_dense_layers, layers)
            mlp_total = dense_layers * dense_mlp + (layers - dense_layers) * moe_mlp
        else:
            mlp_total = layers * dense_mlp
        norms = layers * 2 * h + h
        embeddings = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return layers * attention + mlp_total + norms + embeddings

    def kv_bytes_per_token(self, tp: int, pp: int, kv_dtype_bytes: float) -> float:
        """KV-cache bytes one token occupies on one GPU of a TP x PP replica."""
        layers_per_stage = math.ceil(self.num_layers / pp)
        if self.kv_lora_rank:
            # MLA caches one latent vector per token and layer, replicated on every TP rank.
            return layers_per_stage * (self.kv_lora_rank + self.qk_rope_head_dim) * kv_dtype_bytes
        kv_heads_per_gpu = max(self.num_kv_heads / tp, 1)
        return 2 * layers_per_stage * kv_heads_per_gpu * self.head_dim * kv_dtype_bytes


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


def parse_hf_config(cfg: Mapping[str, Any], name: str, source: str) -> ModelArchitecture:
    """Build a ModelArchitecture from a Hugging Face config.json mapping.

    `source` is the config key the mapping came from, so errors name it.
    """
    if not isinstance(cfg, Mapping):
        raise ConfigError(source, cfg, "expected a Hugging Face config.json object")
    if isinstance(cfg.get("text_config"), Mapping):  # multimodal wrappers keep the decoder here
        cfg = {**cfg["text_config"], **{k: v for k, v in cfg.items() if k == "quantization_config"}}
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
    experts = _count(cfg, source, ("num_local_experts", "n_routed_experts", "num_experts"), minimum=0, default=0)
    top_k = _count(cfg, source, ("num_experts_per_tok", "moe_topk"), minimum=0, default=-1)  # -1: not given
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
                           "qk_rope_head_dim")}
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    if dtype not in DTYPE_BYTES:
        raise ConfigError(source, dtype, f"unsupported torch_dtype; accepted: {', '.join(sorted(DTYPE_BYTES))}")
    weight_bytes = DTYPE_BYTES[dtype]
    quant = cfg.get("quantization_config")
    if isinstance(quant, Mapping):
        method = str(quant.get("quant_method", ""))
        bits = quant.get("bits") or quant.get("w_bit")
        if method in ("fp8", "fbgemm_fp8") or "fp8" in str(quant.get("fmt", "")):
            weight_bytes = 1.0
        elif isinstance(bits, int) and bits > 0:
            weight_bytes = bits / 8
    return ModelArchitecture(
        name=name, model_type=str(cfg.get("model_type", "unknown")), num_layers=layers, hidden_size=hidden,
        num_attention_heads=heads, num_kv_heads=kv_heads, head_dim=int(head_dim), intermediate_size=int(inter),
        vocab_size=vocab, max_position_embeddings=max_pos,
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)), num_experts=experts,
        moe_intermediate_size=counts["moe_intermediate_size"], num_shared_experts=counts["n_shared_experts"],
        first_dense_layers=counts["first_k_dense_replace"], kv_lora_rank=counts["kv_lora_rank"],
        qk_rope_head_dim=counts["qk_rope_head_dim"],
        torch_dtype=dtype, weight_bytes_per_param=weight_bytes,
    )


def _fetch_from_hub(model_id: str, revision: str) -> dict[str, Any]:
    """config.json from the Hugging Face Hub (token from HF_TOKEN or the local login)."""
    try:
        from huggingface_hub import hf_hub_download

        path = hf_hub_download(model_id, "config.json", revision=revision)
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
