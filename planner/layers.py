"""Per-layer structure of a config.json: which layers attend how, and a model cut to its first layers.

vLLM builds one KV cache spec per attention layer from the model's own config (sliding window, chunked
local attention, MLA, Mamba / linear-attention state); the planner reads the same per-layer pattern.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from planner.architecture import ATTENTION_KINDS, DSV4_RATIOS, EncoderInput
from planner.errors import ConfigError

PER_LAYER_LISTS = ("layer_types", "no_rope_layers", "layers_block_type", "mlp_layer_types", "block_configs")
"""Lists with one entry per decoder layer: cut with the layers."""
LAYER_INDEX_LISTS = ("mlp_only_layers", "moe_layers")
"""Lists of layer indices: entries past the cut are dropped."""


def plain_int(value: Any) -> bool:
    """An integer that is not a bool (config.json's true would otherwise count as 1)."""
    return isinstance(value, int) and not isinstance(value, bool)


def positive_int(value: Any) -> bool:
    """An integer above 0 that is not a bool (plain_int)."""
    return plain_int(value) and value > 0


def cut_layers(config: Mapping[str, Any], layers: int) -> dict[str, Any]:
    """The same model with only its first `layers` decoder layers (the per-layer pattern kept), for starting
    a model that does not fit one GPU whole. Multimodal wrappers are cut in their text_config."""
    out = dict(config)
    if isinstance(out.get("text_config"), Mapping):
        out["text_config"] = cut_layers(out["text_config"], layers)
        return out
    for key in ("num_hidden_layers", "n_layer", "num_layers", "n_layers"):  # n_layers: DBRX
        if isinstance(out.get(key), int):
            out[key] = min(out[key], layers)
    for key in PER_LAYER_LISTS:
        if isinstance(out.get(key), list):
            out[key] = out[key][:layers]
    for key in LAYER_INDEX_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [i for i in out[key] if isinstance(i, int) and i < layers]
    if isinstance(out.get("max_window_layers"), int):
        out["max_window_layers"] = min(out["max_window_layers"], layers)
    if isinstance(out.get("hybrid_override_pattern"), str):  # NemotronH: one character per block
        out["hybrid_override_pattern"] = out["hybrid_override_pattern"][:layers]
    linear = out.get("linear_attn_config")
    if isinstance(linear, Mapping):  # Kimi Linear: 1-based layer numbers
        out["linear_attn_config"] = {k: [i for i in v if isinstance(i, int) and i <= layers]
                                     if k in ("kda_layers", "full_attn_layers") and isinstance(v, list) else v
                                     for k, v in linear.items()}
    return out


# ----------------------------------------------------------------------------------------- layer kinds

KIND_NAMES = {"full_attention": "full", "sliding_attention": "sliding", "chunked_attention": "chunked",
              "linear_attention": "linear", "attention": "full", "indexed_attention": "indexed"}
MAMBA2_TYPES = frozenset({"nemotron_h", "granitemoehybrid"})
"""Mamba-2 hybrids the planner sizes (vllm/model_executor/models/nemotron_h.py, granitemoehybrid.py: MambaMixer2
layers beside attention, their state from MambaStateShapeCalculator.mamba2_state_shape). transformers 5 writes their
Mamba layers as "linear_attention" in layer_types / layers_block_type (NemotronHConfig, GraniteMoeHybridConfig), and
vLLM 0.32.0 reads those names (granitemoehybrid.py ALL_DECODER_LAYER_TYPES)."""
MAMBA1_TYPES = frozenset({"jamba"})
"""Mamba-1 hybrids the planner sizes (vllm/model_executor/models/jamba.py: MambaMixer layers beside attention every
attn_layer_period layers, experts every expert_layer_period; their state from MambaStateShapeCalculator.
mamba1_state_shape)."""
FALCON_H1_TYPES = frozenset({"falcon_h1"})
"""Parallel hybrids: attention and a Mamba-2 mixer side by side in every layer, their outputs summed
(vllm/model_executor/models/falcon_h1.py FalconH1ParallelHybrid; the mixer's state from the model class's
get_mamba_state_shape_from_config, intermediate mamba_d_ssm or mamba_expand x hidden_size)."""
NAS_TYPES = frozenset({"nemotron-nas"})
"""Heterogeneous NAS decoders (Llama-Nemotron Super and Ultra, DeciLM): block_configs gives each layer its attention
(a no-op, or num_attention_heads // n_heads_in_group KV heads) and its MLP (a no-op, or ffn_mult), as vLLM's
vllm/model_executor/models/nemotron_nas.py DeciLMDecoderLayer builds them (nas_blocks)."""
GLM5_NEXT_TYPES = frozenset({"glm5_next_text"})
DSV4_TYPES = frozenset({"deepseek_v4"})
"""DeepSeek V4 (vllm/models/deepseek_v4): in every layer a sliding-window latent cache, and where compress_ratios gives
the layer 4 or 128, a compressed latent cache, its compressor's state and at 4 a lightning indexer
(planner/kv_cache.py dsv4_layer); hyper-connections around attention and experts, a grouped low-rank output
projection. vLLM reads config.json through its own DeepseekV4Config, which keeps the file's keys as written (no
defaults but the context and the rotary base), so compress_ratios is read, not transformers' layer_types."""
"""GLM-5-Next (GLM-5.3): Kimi Delta Attention layers and sparse latent-attention layers (layer_types linear_attention
/ indexed_attention, transformers' Glm5NextTextConfig turning the checkpoint's full_attention into the latter), the
indexer's keys pooled index_kpool to one, hyper-connections of hc_mult streams (vllm/models/glm5next/common)."""
LFM2_TYPES = frozenset({"lfm2", "lfm2_moe"})
"""LFM2: short-convolution layers ("conv" in layer_types, transformers' Lfm2Config writing them from full_attn_idxs)
beside full attention (vllm/model_executor/models/lfm2.py, lfm2_moe.py: Lfm2ShortConvDecoderLayer, its state from
MambaStateShapeCalculator.short_conv_state_shape)."""
ZAMBA2_TYPES = frozenset({"zamba2"})
"""Zamba2 (vllm/model_executor/models/zamba2.py): a Mamba-2 mixer in every layer; a "hybrid" layer of
layers_block_type runs one of num_mem_blocks shared attention-and-MLP blocks before its mixer (Zamba2HybridLayer),
each such layer with a KV cache of its own (Zamba2Attention keeps one Attention per hybrid layer: num_attention_heads
heads and as many KV heads, of 2 x hidden_size / num_attention_heads), its own LoRA adapters and a hidden-size
linear. layer_kinds gives it two entries a layer, as Falcon-H1: the attention ("none" in a Mamba-only layer) and the
mixer."""
LONGCAT_TYPES = frozenset({"longcat_flash"})
"""LongCat-Flash (vllm/model_executor/models/longcat_flash.py FlashDecoderLayer): in each of num_layers layers two
latent-attention blocks (DeepseekV2MLAAttention, each with its own cache) and two dense MLPs of ffn_hidden_size
beside one expert block of n_routed_experts experts of expert_ffn_hidden_size; the router also scores
zero_expert_num zero-computation experts (zero_expert_type "identity"), which hold no weights. layer_kinds gives it
two entries a layer, as Falcon-H1."""
HRM_TYPES = frozenset({"hrm_text"})
"""HRM-Text (vllm/model_executor/models/hrm_text.py): two stacks (L and H) of num_layers_per_stack decoder layers,
the L stack run L_cycles times in each of H_cycles cycles and the H stack once, each run of a layer with a KV cache of
its own (HrmTextAttention.attn_per_step: one PrefillPrefixLMAttention per step). transformers' HrmTextConfig writes
num_hidden_layers as those runs (num_layers_per_stack x H_cycles x (L_cycles + 1)), which vLLM reads; the weights are
the two stacks' layers only (ModelArchitecture.weight_layers)."""
INKLING_TYPES = frozenset({"inkling_model", "inkling_mm_model"})
"""Inkling in vLLM's own config classes (vllm/models/inkling/configs.py: InklingModelConfig, and InklingMMConfig, which
reads its text_config through it; vllm/transformers_utils/config.py _CONFIG_REGISTRY takes them before transformers'
classes of the same name). Each decoder layer (vllm/models/inkling/nvidia/model.py InklingDecoderLayer) has an
attention over its own heads, full or, for local_layer_ids, a sliding window of sliding_window_size (swa_* heads), with
relative-position logits (d_rel per head, projected to rel_extent or the window), and an InklingConvState: the
short-convolution state of its K, V, attention-output and MLP-output streams kept as a sliding-window cache of
sconv_kernel_size tokens in blocks of that many (sconv_swa_attn.py). layer_kinds gives it two entries a layer, as
Falcon-H1: the attention and the conv state."""
INKLING_TEXT_READS = ("padded_vocab_size", "local_layer_ids", "dense_mlp_idx")
"""What vLLM 0.32.0's Inkling classes read from the config that transformers' InklingTextConfig (model_type
inkling_text, which vLLM reads through transformers' class) does not give: InklingModel builds its tables of
padded_vocab_size, its sliding layers from local_layer_ids and its dense layers below dense_mlp_idx; without them the
model does not build ("'InklingTextConfig' object has no attribute 'padded_vocab_size'")."""


def inkling_reads(text: Mapping[str, Any]) -> dict[str, Any]:
    """An Inkling text config as vLLM 0.32.0's InklingModelConfig reads it (its __init__ defaults, and the Hugging Face
    format's names mapped to its own: there intermediate_size is the dense MLP's and moe_intermediate_size the
    experts', conv_kernel_size the convolution's), in the names the planner reads: intermediate_size the dense MLP's
    width (dense_intermediate_size), moe_intermediate_size the experts' (its intermediate_size), vocab_size the tables'
    rows (padded_vocab_size), first_k_dense_replace dense_mlp_idx. layer_types is not read: a config without
    local_layer_ids has no sliding layer in vLLM."""
    def get(key: str, default: Any) -> Any:
        value = text.get(key)
        return default if value is None else value

    hidden, heads, kv = get("hidden_size", 1536), get("num_attention_heads", 12), get("num_key_value_heads", 4)
    head_dim = get("head_dim", hidden // heads if plain_int(hidden) and plain_int(heads) and heads else 0)
    inter, dense, moe = text.get("intermediate_size", 768), text.get("dense_intermediate_size"), \
        text.get("moe_intermediate_size")
    if moe is not None and inter is not None and dense is None:
        dense, inter = inter, moe
    padded, vocab = text.get("padded_vocab_size"), get("vocab_size", 201024)
    if padded is None:
        padded = vocab
    kernel = text.get("sconv_kernel_size")
    return {
        **{k: v for k, v in text.items() if k in ("torch_dtype", "dtype", "quantization_config", "architectures",
                                                    "max_position_embeddings", "model_max_length")},
        "model_type": "inkling_model", "hidden_size": hidden, "num_attention_heads": heads,
        "num_key_value_heads": kv, "head_dim": head_dim, "num_hidden_layers": get("num_hidden_layers", 16),
        "intermediate_size": inter if dense is None else dense, "moe_intermediate_size": inter,
        "vocab_size": padded, "tie_word_embeddings": False, "first_k_dense_replace": get("dense_mlp_idx", 0),
        "n_routed_experts": get("n_routed_experts", 0), "n_shared_experts": get("n_shared_experts", 0),
        "num_experts_per_tok": get("num_experts_per_tok", 1),
        # every layer dense (dense_mlp_idx past the last): no InklingMoE is built, whatever the routing keys say
        **({"n_routed_experts": 0, "num_experts_per_tok": 0} if get("dense_mlp_idx", 0) >= get("num_hidden_layers", 16)
           else {}),
        "sliding_window": get("sliding_window_size", 512),
        "local_layer_ids": get("local_layer_ids", []),
        "swa_num_attention_heads": get("swa_num_attention_heads", heads),
        "swa_num_key_value_heads": get("swa_num_key_value_heads", kv),
        "swa_head_dim": get("swa_head_dim", head_dim), "d_rel": get("d_rel", 16), "rel_extent": get("rel_extent", 1024),
        "sconv_kernel_size": kernel if kernel is not None else get("conv_kernel_size", 4),
        **{key: bool(text.get(key)) for key in ("q_bias", "o_bias", "use_embed_norm", "use_gate_bias",
                                                "use_global_scale")},
        **{key: get(key, default) for key, default in (("gate_activation", "sigmoid"), ("norm_after_topk", True),
                                                       ("shared_expert_sink", False),
                                                       ("inference_moe_w13_interleaved", True))},
    }


def inkling_kinds(cfg: Mapping[str, Any], layers: int, source: str) -> tuple[str, ...]:
    """Two entries a layer (INKLING_TYPES): its attention, "sliding" for local_layer_ids, else "full"; and its conv
    state, "sconv", or "sconv_local" for a sliding layer where the swa_* heads give its state another shape (vLLM
    groups layers of equal specs, kv_cache_utils.py _get_kv_cache_groups_uniform_page_size)."""
    local = cfg.get("local_layer_ids")
    if not isinstance(local, list) or not all(plain_int(i) for i in local):
        raise ConfigError(source, local, "local_layer_ids must be a list of layer indices (InklingModel builds a "
                                         "sliding-window layer for each)")
    own = (cfg["swa_num_key_value_heads"], cfg["swa_head_dim"]) != (cfg["num_key_value_heads"], cfg["head_dim"])
    chosen = set(local)
    return tuple(kind for i in range(layers) for kind in (
        ("sliding", "sconv_local" if own else "sconv") if i in chosen else ("full", "sconv")))


PURE_MAMBA_TYPES = {"mamba": "mamba1", "falcon_mamba": "mamba1", "mamba2": "mamba"}
"""Attention-free models, every layer one Mamba mixer and a norm, no MLP (vllm/model_executor/models/mamba.py
MambaDecoderLayer: MambaMixer, Falcon-Mamba's with weightless RMS norms on dt, B and C; mamba2.py Mamba2DecoderLayer:
MambaMixer2): model_type -> the layer kind. vLLM serves them without attention heads (IsAttentionFree), without
prefix caching by default (ModelConfig.is_prefix_caching_supported), and their state from the model class's
get_mamba_state_shape_from_config."""
OWN_LAYER_NAMES = GLM5_NEXT_TYPES | LFM2_TYPES
"""Families whose layer_types layer_kinds reads with the model class's own rule (every name but one is the other
kind), so no name in it marks a structure unsized_reason would need to flag."""
BAILING_V3_ARCHITECTURES = frozenset({"BailingMoeV3ForCausalLM"})
"""Ling 3.0 (vllm/model_executor/models/bailing_moe_v3.py), known by its architecture: its model_type bailing_hybrid
is Ling 2.5's too (BailingMoeV2_5ForCausalLM, bailing_moe_linear.py). Kimi Delta Attention layers of
num_attention_heads x head_dim with short_conv_kernel_size convolutions and full-width f / g projections
(no_kda_lora), latent attention on the last layer of each layer_group_size group and on a last partial group
(_is_kda_layer), whatever layer_types says."""
LIGHTNING_ARCHITECTURES = frozenset({"BailingMoeV2_5ForCausalLM"})
"""Ling 2.5 (vllm/model_executor/models/bailing_moe_linear.py, model_type bailing_hybrid as Ling 3.0's): linear
attention ("lightning": BailingMoELinearAttention, MiniMax's kernel) on every layer but the last of each
layer_group_size group (is_linear_layer; none where the group is 1 or less), latent attention there. Its state is
num_attention_heads x head_dim x head_dim per request (MambaStateShapeCalculator.linear_attention_state_shape) in the
conv-state dtype (linear_attention_state_dtype)."""
READ_AS_WRITTEN = {
    "BailingMoeV3ForCausalLM": ("layer_group_size", "short_conv_kernel_size", "head_dim", "no_kda_lora", "use_bias",
                                "moe_shared_expert_intermediate_size", "n_group", "topk_group",
                                "first_k_dense_replace"),
    "BailingMoeV2_5ForCausalLM": ("layer_group_size", "group_norm_size", "head_dim", "use_qk_norm", "use_bias",
                                  "use_qkv_bias", "moe_shared_expert_intermediate_size", "first_k_dense_replace",
                                  "moe_router_enable_expert_bias"),
}
"""Architectures whose checkpoints' config class is remote code (auto_map) and which vLLM's class reads by keys a
config.json writes: where config.json writes each listed key (those the class reads beyond the common ones, or with
a default a remote class could change), the planner reads it as vLLM's class does (remote_code_reason); where one is
left to the remote class, the model plans with the unverified warning."""
KDA_TYPES = frozenset({"kimi_linear"})
"""Kimi Delta Attention hybrids: KDA layers beside latent attention (vllm/models/kimi_k3: KimiLinearForCausalLM, its
state from MambaStateShapeCalculator.kda_state_shape)."""
NEMOTRON_H_BLOCKS = {"M": "mamba", "*": "full", "-": "none", "E": "none", "linear_attention": "mamba",
                     "mamba": "mamba", "full_attention": "full", "attention": "full", "mlp": "none", "moe": "none"}
"""NemotronH's blocks: a layer is one of Mamba-2 mixer, attention, MLP or experts (hybrid_override_pattern, or the
layers_block_type transformers 5 writes from it); only the first two hold a cache (vllm/model_executor/models/
nemotron_h.py ALL_DECODER_LAYER_TYPES)."""
MAMBA = "Mamba/SSM state"
UNSIZED_KEYS = {
    "layers_block_type": MAMBA, "hybrid_override_pattern": MAMBA, "mamba_d_state": MAMBA, "ssm_state_size": MAMBA,
    "mamba_expand": MAMBA, "attn_layer_indices": MAMBA,
    "kv_lora_rank_per_layer": "compressed attention", "compress_ratios": "compressed attention",
    "num_kv_shared_layers": "layers that reuse another layer's KV cache, with per-layer input embeddings",
    "zero_expert_num": "zero-computation experts in a family other than LongCat-Flash's",
    "moe_latent_size": "experts computed in a latent space",
    "rel_extent": "relative-position attention beside a short-convolution state in every layer (Inkling)",
    "H_cycles": "decoder layers run again in cycles (as HRM-Text's H_cycles) in a family other than HRM-Text",
}
"""config.json keys of families vLLM serves whose structure the planner does not size yet, and what each marks:
Mamba / SSM hybrids other than MAMBA2_TYPES, MAMBA1_TYPES, FALCON_H1_TYPES and ZAMBA2_TYPES, DeepSeek V4's
compressed attention, KV sharing outside SHARED_KV_TYPES, zero-computation experts outside LONGCAT_TYPES, NemotronH's
latent experts (moe_latent_size), Inkling in vLLM's own config format (vllm/models/inkling/configs.py
InklingModelConfig: rel_extent; every layer's InklingConvState is a sliding-window cache of its own block size,
vllm/models/inkling/nvidia/sconv_swa_attn.py). Read as any other decoder their numbers are unverified: they plan with
stated parallelism and a warning."""
GEMMA4_TYPES = frozenset({"gemma4_text", "gemma4_unified_text"})
"""Gemma 4's decoder (the gemma4 wrapper keeps it in text_config): sliding and full layers of their own head dims
and KV heads, the last num_kv_shared_layers reading an earlier layer's cache (vllm/model_executor/models/gemma4.py).
Gemma 4 Unified's (gemma4_unified_text) is the same Gemma4ForCausalLM (gemma4_unified.py builds it from its
text_config); its wrapper has no vision tower, only an encoder-free embedder (vision_parameters)."""
GEMMA3N_TYPES = frozenset({"gemma3n_text"})
"""Gemma 3n's decoder (the gemma3n wrapper keeps it in text_config; vllm/model_executor/models/gemma3n.py): sliding
and full layers of one head shape, the last num_kv_shared_layers reading the cache of the last earlier layer of their
type (Gemma3nAttention: kv_sharing_target_layer_name, first shared - 2 for a sliding layer, - 1 for a full one), the
per-layer input embeddings Gemma 4 took over, AltUp's altup_num_inputs predictions of the hidden state and a LAuReL
low-rank residual in every layer."""
SHARED_KV_TYPES = GEMMA4_TYPES | GEMMA3N_TYPES
"""Families whose num_kv_shared_layers the planner sizes (ModelArchitecture.kv_shared_layers)."""
MAMBA2_KEYS = frozenset({"layers_block_type", "hybrid_override_pattern", "mamba_d_state", "ssm_state_size",
                         "mamba_expand"})
"""The Mamba keys a MAMBA2_TYPES or MAMBA1_TYPES config has: sized there."""
SIZED_MAMBA_TYPES = MAMBA2_TYPES | MAMBA1_TYPES | FALCON_H1_TYPES | ZAMBA2_TYPES
SIZED_KEYS = {**dict.fromkeys(SIZED_MAMBA_TYPES, MAMBA2_KEYS),
              **dict.fromkeys(SHARED_KV_TYPES, frozenset({"num_kv_shared_layers"})),
              **dict.fromkeys(LONGCAT_TYPES, frozenset({"zero_expert_num"})),
              **dict.fromkeys(HRM_TYPES, frozenset({"H_cycles"})),
              **dict.fromkeys(DSV4_TYPES, frozenset({"compress_ratios"})),
              **dict.fromkeys(INKLING_TYPES, frozenset({"rel_extent"}))}
"""model_type -> the UNSIZED_KEYS its config has that the planner sizes for that family (MAMBA2_KEYS for the Mamba
hybrids, num_kv_shared_layers for SHARED_KV_TYPES, zero_expert_num for LongCat-Flash, H_cycles for HRM-Text)."""


def unsized_reason(cfg: Mapping[str, Any]) -> tuple[str, str] | None:
    """(key, what it marks) when the config has a layer structure the planner does not size yet, else None. Such a
    model is not refused (vLLM serves it): it plans with the parallelism the stack states and a warning naming what
    the plan could not verify (planner/sizing.py)."""
    sized_mamba = str(cfg.get("model_type")) in SIZED_MAMBA_TYPES
    sized = SIZED_KEYS.get(str(cfg.get("model_type")), frozenset())
    for key, what in UNSIZED_KEYS.items():
        if cfg.get(key) is not None and key not in sized:
            return key, f"{key} in the model config marks {what}"
    types = cfg.get("layer_types")
    if isinstance(types, list) and str(cfg.get("model_type")) not in OWN_LAYER_NAMES:
        known = {**KIND_NAMES, "mamba": "mamba"} if sized_mamba else dict(KIND_NAMES)
        if cfg.get("index_topk") is None or not cfg.get("kv_lora_rank"):
            known.pop("indexed_attention")  # an indexer the planner sizes sits beside latent attention
        unknown = sorted({str(t) for t in types if t not in known})
        if unknown:
            return "layer_types", f"layer_types holds {unknown[0]!r}"
    return None


def nas_blocks(cfg: Mapping[str, Any], layers: int, heads: int, hidden: int,
               source: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(KV heads of each layer, 0 where its attention is a no-op; MLP width of each layer, 0 where its MLP is a no-op)
    of a NAS_TYPES config, as vllm/model_executor/models/nemotron_nas.py builds them: KV heads num_attention_heads //
    n_heads_in_group, the MLP int(2 x ffn_mult x hidden_size / 3) rounded up to a multiple of 256
    (_ffn_mult_to_intermediate_size), or the block's own intermediate_size. A block vLLM cannot build (no
    n_heads_in_group, no width) is refused here as vLLM would fail on it."""
    blocks = cfg.get("block_configs")
    if not isinstance(blocks, list) or len(blocks) < layers:
        raise ConfigError(source, len(blocks) if isinstance(blocks, list) else blocks,
                          f"block_configs needs one entry per layer ({layers}) in a nemotron-nas config")
    kv_heads, widths = [], []
    for i, block in enumerate(blocks[:layers]):
        attention = block.get("attention") if isinstance(block, Mapping) else None
        ffn = block.get("ffn") if isinstance(block, Mapping) else None
        if not isinstance(attention, Mapping) or not isinstance(ffn, Mapping):
            raise ConfigError(source, block, f"block_configs[{i}] needs an attention and an ffn object")
        group = attention.get("n_heads_in_group")
        if attention.get("no_op") is True:
            kv_heads.append(0)
        elif positive_int(group) and heads % group == 0:
            kv_heads.append(heads // group)
        else:
            raise ConfigError(source, group, f"block_configs[{i}].attention.n_heads_in_group must divide "
                                             f"num_attention_heads ({heads}): vLLM builds the layer's KV heads as "
                                             "their quotient")
        mult, own = ffn.get("ffn_mult"), ffn.get("intermediate_size")
        if ffn.get("no_op") is True:
            widths.append(0)
        elif isinstance(mult, (int, float)) and not isinstance(mult, bool) and mult > 0:
            widths.append(-(-int(2 * mult * hidden / 3) // 256) * 256)
        elif positive_int(own):
            widths.append(own)
        else:
            raise ConfigError(source, mult, f"block_configs[{i}].ffn needs ffn_mult (a positive number) or "
                                            "intermediate_size unless it is a no_op")
    return tuple(kv_heads), tuple(widths)


def mamba2_blocks(cfg: Mapping[str, Any], layers: int, source: str) -> tuple[str, ...] | None:
    """Per layer of a MAMBA2_TYPES config: NemotronH's block ("mamba", "full", "none" for MLP / experts), or a
    GraniteMoeHybrid layer's mixer ("mamba" or "full"); None for another family."""
    model_type = str(cfg.get("model_type"))
    if model_type not in MAMBA2_TYPES:
        return None
    key = "layers_block_type" if model_type == "nemotron_h" else "layer_types"
    blocks = cfg.get(key)
    if model_type == "nemotron_h" and not isinstance(blocks, list):
        pattern = cfg.get("hybrid_override_pattern")
        key, blocks = "hybrid_override_pattern", list(pattern) if isinstance(pattern, str) else None
    if not isinstance(blocks, list):
        return ("mamba",) * layers if model_type == "granitemoehybrid" else None
    names = NEMOTRON_H_BLOCKS if model_type == "nemotron_h" else {"linear_attention": "mamba", "mamba": "mamba",
                                                                  "full_attention": "full", "attention": "full"}
    return named_kinds(blocks, names, layers, key, source)


def named_kinds(entries: list[Any], names: Mapping[str, str], layers: int, key: str,
                source: str, other: str = "") -> tuple[str, ...]:
    """The planner's kind of each of the first `layers` entries of a per-layer list `key`, by `names` (an entry it does
    not name is `other`, where the model class reads every other name so); an entry it does not name without
    `other`, or too few entries, is refused naming the key."""
    if other:
        names = {**{e: other for e in entries if isinstance(e, str)}, **names}
    bad = next((e for e in entries if e not in names), None)
    if bad is not None or len(entries) < layers:
        raise ConfigError(source, bad if bad is not None else len(entries),
                          f"{key} must name each of the {layers} layers, one of {', '.join(sorted(names))}")
    return tuple(names[e] for e in entries[:layers])


def first_architecture(cfg: Mapping[str, Any]) -> str:
    """The config's first architecture (the class vLLM builds), "" where it names none."""
    architectures = cfg.get("architectures")
    first = architectures[0] if isinstance(architectures, list) and architectures else ""
    return first if isinstance(first, str) else ""


def bailing_v3(cfg: Mapping[str, Any]) -> bool:
    """Whether the config is Ling 3.0's decoder (BAILING_V3_ARCHITECTURES)."""
    return first_architecture(cfg) in BAILING_V3_ARCHITECTURES


def lightning(cfg: Mapping[str, Any]) -> bool:
    """Whether the config is Ling 2.5's decoder (LIGHTNING_ARCHITECTURES)."""
    return first_architecture(cfg) in LIGHTNING_ARCHITECTURES


def layer_kinds(cfg: Mapping[str, Any], layers: int, source: str) -> tuple[tuple[str, ...], int]:
    """(kind per layer, window) as vLLM builds the layers (cited per rule)."""
    window = cfg.get("sliding_window")
    window = window if positive_int(window) else 0
    mamba = mamba2_blocks(cfg, layers, source)
    if mamba is not None:
        return mamba, 0
    if str(cfg.get("model_type")) in PURE_MAMBA_TYPES:
        return (PURE_MAMBA_TYPES[str(cfg.get("model_type"))],) * layers, 0
    if str(cfg.get("model_type")) in FALCON_H1_TYPES:  # attention and a Mamba-2 mixer in every layer
        return ("full", "mamba") * layers, 0
    if str(cfg.get("model_type")) in INKLING_TYPES:  # attention and a conv state in every layer
        return inkling_kinds(cfg, layers, source), window
    if str(cfg.get("model_type")) in LONGCAT_TYPES:  # two latent-attention blocks in every layer
        return ("full", "full") * layers, 0
    if str(cfg.get("model_type")) in ZAMBA2_TYPES:
        # zamba2.py Zamba2Model: a Zamba2HybridLayer (shared attention, then the mixer) where layers_block_type[i] is
        # "hybrid", a Zamba2MambaDecoderLayer for any other name ("mamba", transformers 5's "linear_attention")
        blocks = named_kinds(cfg.get("layers_block_type") or [], {"hybrid": "full"}, layers, "layers_block_type",
                             source, other="none")
        return tuple(kind for block in blocks for kind in (block, "mamba")), 0
    if bailing_v3(cfg):
        # bailing_moe_v3.py _is_kda_layer: Kimi Delta Attention unless the layer ends a layer_group_size group or lies
        # past the last whole group
        group = cfg.get("layer_group_size")
        if group is None and cfg.get("auto_map"):  # its remote config class supplies it: planned unsized
            return ("full",) * layers, 0  # (planner/model_config.py remote_code_reason)
        if not plain_int(group) or group == 0:  # 0: _is_kda_layer's ZeroDivisionError
            raise ConfigError(source, group, "layer_group_size must be a non-zero integer: BailingMoeV3ForCausalLM "
                                             "puts latent attention on the last layer of each group (a negative "
                                             "group is taken as vLLM's _is_kda_layer takes it)")
        whole = layers // group * group  # Python's floor division and modulo, as _is_kda_layer's
        return tuple("full" if (i + 1) % group == 0 or i >= whole else "kda" for i in range(layers)), 0
    if lightning(cfg):
        # bailing_moe_linear.py is_linear_layer: linear attention unless the layer ends a layer_group_size group (the
        # model reads getattr(config, "layer_group_size", 1)); a group of 1 or less (is_linear_layer's `> 0` test)
        # leaves every layer latent attention
        group = cfg.get("layer_group_size", 1)
        if not plain_int(group):
            raise ConfigError(source, group, "layer_group_size must be an integer: BailingMoeV2_5ForCausalLM puts "
                                             "latent attention on the last layer of each group")
        return tuple("lightning" if group > 0 and (i + 1) % group else "full" for i in range(layers)), 0
    if str(cfg.get("model_type")) in GLM5_NEXT_TYPES:
        # vllm/models/glm5next/common/model.py _is_kda_layer: layer_types[i] == "linear_attention" is KDA, every other
        # layer latent attention with an indexer when index_topk is set (Glm5NextMLAAttention: is_v32)
        # (the checkpoints' deepseek_sparse_attention, transformers' indexed_attention)
        latent = "indexed" if cfg.get("index_topk") is not None else "full"
        return named_kinds(cfg.get("layer_types") or [], {"linear_attention": "kda"}, layers, "layer_types", source,
                           other=latent), 0
    if cfg.get("index_topk") is not None and cfg.get("kv_lora_rank"):
        return indexed_layers(cfg, layers), 0
    if str(cfg.get("model_type")) in MAMBA1_TYPES:
        # transformers' JambaConfig.layers_block_type, which vLLM's jamba.py reads: attention where
        # i % attn_layer_period == attn_layer_offset, a Mamba-1 mixer elsewhere.
        period, offset = cfg.get("attn_layer_period"), cfg.get("attn_layer_offset")
        if not (positive_int(period) and plain_int(offset) and offset >= 0):
            raise ConfigError(source, period, "a Jamba config needs attn_layer_period (a positive integer) and "
                                              "attn_layer_offset")
        return tuple("full" if i % period == offset else "mamba1" for i in range(layers)), 0
    if str(cfg.get("model_type")) in LFM2_TYPES and isinstance(cfg.get("layer_types"), list):
        # vllm/model_executor/models/lfm2.py: layer i attends where layer_types[i] == "full_attention", else it is a
        # short-convolution layer
        return named_kinds(cfg["layer_types"], {"full_attention": "full"}, layers, "layer_types", source,
                           other="conv"), 0
    if str(cfg.get("model_type")) in KDA_TYPES and isinstance(cfg.get("layer_types"), list):
        # transformers' KimiLinearConfig writes linear_attn_config's 1-based kda_layers / full_attn_layers as
        # layer_types; vLLM's KimiLinearConfig.is_kda_layer reads the same lists.
        return named_kinds(cfg["layer_types"], {"linear_attention": "kda", "full_attention": "full"}, layers,
                           "layer_types", source), 0
    if str(cfg.get("model_type")) in DSV4_TYPES:
        if not window:
            raise ConfigError(source, cfg.get("sliding_window"), "sliding_window must be a positive integer: every "
                                                                 "DeepSeek V4 layer keeps a sliding-window cache of it "
                                                                 "(DeepseekV4SWACache)")
        return dsv4_kinds(cfg, layers, source), window
    types = cfg.get("layer_types")
    if isinstance(types, list):
        # vllm/model_executor/models/{llama,gpt_oss,gemma3,qwen3_next}.py: layer i is sliding when
        # config.layer_types[i] == "sliding_attention" (window config.sliding_window); qwen3_next's
        # "linear_attention" layers are Gated DeltaNet.
        if len(types) < layers:
            raise ConfigError(source, len(types), f"layer_types has {len(types)} entries for {layers} layers")
        kinds = tuple(KIND_NAMES.get(t, "full") for t in types[:layers])  # an unknown kind: unsized_reason
        chunk = cfg.get("attention_chunk_size")
        if "chunked" in kinds and positive_int(chunk):
            return kinds, chunk  # transformers' Llama4TextConfig writes layer_types; the window is the chunk
        if "sliding" in kinds and not window:
            raise ConfigError(source, cfg.get("sliding_window"), "layer_types has sliding_attention layers but "
                                                                 "sliding_window is not a positive integer")
        return kinds, window
    interval = cfg.get("full_attention_interval")
    if isinstance(interval, int) and interval > 0 and str(cfg.get("model_type")) == "qwen3_next":
        # transformers Qwen3NextConfig: layer i is full attention when (i + 1) % full_attention_interval == 0.
        return tuple("full" if (i + 1) % interval == 0 else "linear" for i in range(layers)), 0
    pattern = cfg.get("sliding_window_pattern")
    if isinstance(pattern, int) and pattern > 0 and window:
        # transformers Gemma2/3 configs: every pattern-th layer is global, the others slide.
        return tuple("full" if (i + 1) % pattern == 0 else "sliding" for i in range(layers)), window
    chunk = cfg.get("attention_chunk_size")
    nope = cfg.get("no_rope_layers")
    if isinstance(chunk, int) and chunk > 0 and isinstance(nope, list) and len(nope) >= layers:
        # vllm/model_executor/models/llama4.py: chunked local attention unless no_rope_layers[i] == 0.
        return tuple("full" if nope[i] == 0 else "chunked" for i in range(layers)), chunk
    if cfg.get("use_sliding_window") is True and window and isinstance(cfg.get("max_window_layers"), int):
        # transformers Qwen2Config: layers from max_window_layers on slide.
        first = cfg["max_window_layers"]
        return tuple("sliding" if i >= first else "full" for i in range(layers)), window
    if window:
        # A window with no per-layer types is the model's (Mistral v0.1, Ministral-8B, Starcoder2, Phi-3/4-mini):
        # vLLM sets CacheConfig.sliding_window to it when the config is not interleaved (vllm/engine/arg_utils.py
        # create_engine_config, 0.25.1 and 0.32.0), and every Attention layer given no window of its own takes that
        # one (vllm/model_executor/layers/attention/attention.py), so every layer slides.
        return ("sliding",) * layers, window
    return ("full",) * layers, 0


def dsv4_kinds(cfg: Mapping[str, Any], layers: int, source: str) -> tuple[str, ...]:
    """DeepSeek V4's layer kinds from compress_ratios as vLLM reads it (vllm/models/deepseek_v4/attention.py
    DeepseekV4Attention: max(1, compress_ratios[i]) for each decoder layer; the entries past num_hidden_layers are the
    MTP layers'): 1 the sliding window alone ("swa"), 4 with the indexer ("csa"), 128 ("hca"). Any other ratio is
    refused, as vLLM's CompressorStateCache asserts 4 or 128."""
    ratios = cfg.get("compress_ratios")
    if not isinstance(ratios, list) or len(ratios) < layers:
        raise ConfigError(source, ratios if ratios is None or not isinstance(ratios, list) else len(ratios),
                          f"compress_ratios must list one compress ratio for each of the {layers} layers: vLLM's "
                          "DeepseekV4Attention reads compress_ratios[i] (transformers' DeepseekV4Config writes "
                          "layer_types instead, which vLLM 0.32.0 does not read)")
    kinds = []
    for i, ratio in enumerate(ratios[:layers]):
        if not plain_int(ratio) or max(1, ratio) not in DSV4_RATIOS.values():
            raise ConfigError(source, ratio, f"compress_ratios[{i}] must be 0 or 1 (the sliding window alone), 4 or "
                                             "128: vLLM's DeepSeek V4 compressor takes those two ratios")
        kinds.append(next(kind for kind, r in DSV4_RATIOS.items() if r == max(1, ratio)))
    return tuple(kinds)


def indexed_layers(cfg: Mapping[str, Any], layers: int) -> tuple[str, ...]:
    """DeepSeek-V3.2-style sparse attention: latent attention in every layer, a lightning indexer (and its key cache)
    in each layer vLLM gives one: all, unless index_topk_freq or index_topk_pattern ("S": skip) says a layer reuses
    another's top-k (vllm/models/deepseek_v32/attention.py, DeepseekV32Attention: skip_topk)."""
    freq = cfg.get("index_topk_freq") or 1
    pattern = cfg.get("index_topk_pattern")
    offset = cfg.get("index_skip_topk_offset", 2)
    offset = offset if plain_int(offset) else 2
    kinds = []
    for i in range(layers):
        if isinstance(pattern, (list, str)):
            skip = i < len(pattern) and pattern[i] == "S"
        else:
            skip = isinstance(freq, int) and freq > 0 and max(i - offset + 1, 0) % freq != 0
        kinds.append("full" if skip else "indexed")
    return tuple(kinds)


def moe_layer_indices(cfg: Mapping[str, Any], layers: int, experts: int, first_dense: int) -> list[int]:
    """Decoder layers with routed experts."""
    if not experts:
        return []
    if str(cfg.get("model_type")) in MAMBA1_TYPES:  # JambaConfig.layers_num_experts
        period, offset = cfg.get("expert_layer_period"), cfg.get("expert_layer_offset")
        if positive_int(period) and isinstance(offset, int) and experts > 1:
            return [i for i in range(layers) if i % period == offset]
    mlp_types = cfg.get("mlp_layer_types")
    if isinstance(mlp_types, list) and mlp_types:  # transformers 5: "dense" / "sparse" per layer (DeepSeek-V3.2, Kimi)
        return [i for i, t in enumerate(mlp_types[:layers]) if t == "sparse"]
    if str(cfg.get("model_type")) == "nemotron_h":  # vllm/model_executor/models/nemotron_h.py: the "E" blocks
        blocks = cfg.get("layers_block_type") or list(str(cfg.get("hybrid_override_pattern") or ""))
        return [i for i, b in enumerate(blocks[:layers]) if b in ("moe", "E")]
    moe = cfg.get("moe_layers")
    if isinstance(moe, list):
        return sorted({i for i in moe if isinstance(i, int) and 0 <= i < layers})
    step = cfg.get("interleave_moe_layer_step")
    if isinstance(step, int) and step > 1:  # vllm/model_executor/models/llama4.py: (i + 1) % step == 0
        return [i for i in range(layers) if (i + 1) % step == 0]
    start = cfg.get("moe_layer_start_index")
    if plain_int(start):
        # vllm/model_executor/models/ernie45_moe.py: sparse when start <= i <= end and (i + 1) % interval == 0.
        end, interval = cfg.get("moe_layer_end_index"), cfg.get("moe_layer_interval")
        end = end if plain_int(end) else layers - 1
        interval = interval if isinstance(interval, int) and interval > 0 else 1
        return [i for i in range(layers) if start <= i <= end and (i + 1) % interval == 0]
    sparse = cfg.get("decoder_sparse_step")
    only = cfg.get("mlp_only_layers")
    if (isinstance(sparse, int) and sparse > 0) or (isinstance(only, list) and only):
        # vllm/model_executor/models/qwen3_moe.py / qwen2_moe.py / qwen3_next.py: a layer is sparse when it is not
        # in mlp_only_layers and (i + 1) % decoder_sparse_step == 0.
        dense = {i for i in (only or []) if isinstance(i, int)}
        step_n = sparse if isinstance(sparse, int) and sparse > 0 else 1
        return [i for i in range(layers) if i not in dense and (i + 1) % step_n == 0]
    return list(range(min(first_dense, layers), layers))


# ----------------------------------------------------------------------------------------- weights

MXFP4_BYTES_PER_PARAM = 0.5359
"""MXFP4 experts as vLLM 0.25.1 holds them on an H200: 4-bit values with an 8-bit scale per 32 (0.53125 bytes),
plus the scale layout of its Hopper MoE kernel; fitted to `Model loading took` of gpt-oss-20b and -120b
(docs/benchmarks.md "Planner calibration"), +0.9% over the format's own size."""
def _group_overhead(bits: float, group: Any, symmetric: bool) -> float:
    """Bytes per parameter of a group's 16-bit scale (and `bits`-wide zero point when asymmetric)."""
    if not isinstance(group, int) or group <= 0:
        return 0.0
    return (16 + (0 if symmetric else bits)) / 8 / group


PART_MODULES = {
    "attention": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                  "self_attn.q_a_proj", "self_attn.q_b_proj", "self_attn.kv_a_proj_with_mqa", "self_attn.kv_b_proj"),
    "linear": ("linear_attn.in_proj_qkvz", "linear_attn.in_proj_ba", "linear_attn.out_proj"),
    "mlp": ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"),
    "experts": ("mlp.experts.0.gate_proj", "mlp.experts.0.up_proj", "mlp.experts.0.down_proj"),
    "shared": ("mlp.shared_experts.gate_proj", "mlp.shared_experts.up_proj", "mlp.shared_experts.down_proj",
               "mlp.shared_expert.gate_proj", "mlp.shared_expert.up_proj", "mlp.shared_expert.down_proj"),
}
"""The checkpoint's module names of each linear part within decoder layer i (`model.layers.{i}.` before each):
what quantization configs name in targets / ignore lists (Hugging Face names; vLLM maps its fused qkv_proj and
gate_up_proj back to these shards when it matches: compressed_tensors.utils.match.match_name with `fused`)."""


def _compressed_tensors_match(name: str, pattern: str) -> bool:
    """compressed-tensors' rule for one target or ignore entry: `re:` is a regex matched from the start of the module
    name (re.match), anything else the whole name; `Linear` names the class every part here is."""
    if pattern.startswith("re:"):
        return re.match(pattern[3:], name) is not None
    return pattern == name or pattern == "Linear"


def _prefix_skipped(name: str, entries: list[str]) -> bool:
    """vLLM's is_layer_skipped for FP8 / AWQ / GPTQ: an entry names the module or a module it sits in
    (vllm/model_executor/layers/quantization/utils/quant_utils.py; AWQ's modules_to_not_convert by substring)."""
    return any(entry and (entry == name or entry in name) for entry in entries)


def part_layers(kinds: tuple[str, ...], moe_layers: set[int], ffn_free: frozenset[int] = frozenset()
                ) -> dict[str, list[int]]:
    """The decoder layers that hold each linear part (`ffn_free`: layers without MLP or experts). Mamba mixers are
    not a part here: their weights count in the model dtype."""
    return {"attention": [i for i, k in enumerate(kinds) if k in ATTENTION_KINDS],
            "linear": [i for i, k in enumerate(kinds) if k == "linear"],
            "mlp": [i for i in range(len(kinds)) if i not in moe_layers and i not in ffn_free],
            "experts": sorted(moe_layers), "shared": sorted(moe_layers)}


FUSED_SHARDS = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj", "gate_proj": "gate_up_proj",
                "up_proj": "gate_up_proj"}
"""The checkpoint's shard names and the fused module vLLM builds of them (packed_modules_mapping)."""


def vllm_prefix(name: str) -> str:
    """The module prefix vLLM asks a quantization config about for a checkpoint module name: a routed expert's is its
    layer's fused experts (model.layers.i.mlp.experts), a q / k / v or gate / up shard's its fused module."""
    if ".experts." in name and ".shared_experts." not in name:
        return name[:name.index(".experts.")] + ".experts"
    head, _, last = name.rpartition(".")
    return f"{head}.{FUSED_SHARDS.get(last, last)}"


def _is_routed_expert(name: str) -> bool:
    return vllm_prefix(name).endswith(".experts")


def scope_predicate(quant: Mapping[str, Any], method: str) -> Callable[[str], bool]:
    """Whether vLLM 0.32.0 quantizes the checkpoint module `name` (the shard names of PART_MODULES under
    model.layers.i.), each method matching its config's scope as its own code does:
    compressed-tensors targets less ignore (compressed_tensors match_name); modelopt exclude_modules
    (modelopt.py is_layer_excluded); FP8 and MXFP4 ignored_layers (else modules_to_not_convert) by exact name, a
    routed expert skipped only where an ignored name containing "experts" contains its layer's experts prefix
    (fp8.py / mxfp4.py get_quant_method, utils/quant_utils.py is_layer_skipped match_mode "exact"); AWQ
    modules_to_not_convert by substring (auto_awq.py, match_mode "substring", the experts by their prefix). Both
    match a fused module's own name (qkv_proj, gate_up_proj) before its shards'. GPTQ
    the config's dynamic "-:" patterns matched at the fused module and modules_in_block_to_quantize by substring
    (auto_gptq.py, utils/gptq_utils.py get_dynamic_override, is_layer_gptq_quantized); GPTQ ignores
    modules_to_not_convert."""
    if method == "compressed-tensors":
        groups = quant.get("config_groups")
        targets = [str(t) for g in (groups.values() if isinstance(groups, Mapping) else ()) if isinstance(g, Mapping)
                   for t in (g.get("targets") or ["Linear"])]
        ignore = [str(p) for p in quant.get("ignore") or []]
        return lambda name: (any(_compressed_tensors_match(name, t) for t in targets)
                             and not any(_compressed_tensors_match(name, p) for p in ignore))
    if method.startswith("modelopt"):
        exclude = [str(p) for p in ((quant.get("quantization") or quant).get("exclude_modules") or [])]
        # modelopt.py is_layer_excluded: exact or substring, then wildcards
        return lambda name: not (_prefix_skipped(name, exclude) or any(fnmatch.fnmatchcase(name, p) for p in exclude))
    if method in ("gptq", "gptq_marlin"):
        dynamic = quant.get("dynamic") if isinstance(quant.get("dynamic"), Mapping) else {}
        negative = [str(k)[2:] for k in dynamic if str(k).startswith("-:")]
        in_block = [str(m) for group in quant.get("modules_in_block_to_quantize") or []
                    for m in (group if isinstance(group, list) else [group])]

        def gptq(name: str) -> bool:
            if any(re.match(pattern, vllm_prefix(name)) for pattern in negative):
                return False
            return _is_routed_expert(name) or not in_block or any(m in name for m in in_block)
        return gptq
    entries = [str(p) for p in (quant.get("ignored_layers") or quant.get("modules_to_not_convert") or [])]
    if method in ("awq", "awq_marlin"):  # a fused module's own name is matched first, then its shards
        return lambda name: not any(e in vllm_prefix(name) or (not _is_routed_expert(name) and e in name)
                                    for e in entries)

    def exact(name: str) -> bool:
        prefix = vllm_prefix(name)
        if _is_routed_expert(name):
            return not any("experts" in e and prefix in e for e in entries)
        return prefix not in entries and name not in entries
    return exact


def quantized_share(quant: Mapping[str, Any], method: str, layers: dict[str, list[int]],
                    shared: str = "shared_experts") -> dict[str, float]:
    """The share of each linear part's layers the checkpoint quantizes, by matching the part's module names in
    every layer against the config's scope as vLLM's method does (scope_predicate). A part counts as quantized in a
    layer when every one of its modules there is (vLLM gives the shards of a fused module one scheme)."""
    quantized = scope_predicate(quant, method)
    share = {}
    for part, indices in layers.items():
        if not indices:
            continue
        modules = PART_MODULES[part]
        if part == "shared":  # DeepSeek / Kimi name them mlp.shared_experts, Qwen mlp.shared_expert
            modules = tuple(m for m in modules if m.split(".")[1] == shared)
        hits = sum(all(quantized(f"model.layers.{i}.{m}") for m in modules) for i in indices)
        if hits:
            share[part] = hits / len(indices)
    return share


def read_quantization(cfg: Mapping[str, Any], dtype_bytes: float, source: str,
                      layers: dict[str, list[int]]) -> tuple[str, float, dict[str, float]]:
    """(method, bytes per parameter of the quantized parts, share of each part quantized) of a checkpoint, as vLLM
    loads it. An unknown method gives bytes 0: sizing then needs model.weightsGib."""
    shared = "shared_experts" if cfg.get("n_shared_experts") or cfg.get("moe_num_shared_experts") else "shared_expert"
    quant = cfg.get("quantization_config")
    every = {part: 1.0 for part, indices in layers.items() if indices}
    if not isinstance(quant, Mapping):
        bits = cfg.get("bits")
        if plain_int(bits) and 0 < bits < 16:
            return "bits", bits / 8, every
        return "", dtype_bytes, {}
    method = str(quant.get("quant_method", ""))
    if method in ("fp8", "fbgemm_fp8", "ptpc_fp8") or ("fp8" in str(quant.get("fmt", "")) and not method):
        # vllm/model_executor/layers/quantization/fp8.py: FP8 linear and MoE weights, block or channel scales.
        return method or "fp8", 1.0, quantized_share(quant, method, layers, shared)
    if method == "mxfp4":
        # vllm/model_executor/layers/quantization/mxfp4.py: only FusedMoE layers take the MXFP4 method;
        # every other linear layer is unquantized.
        share = quantized_share(quant, method, {"experts": layers["experts"]})
        return method, MXFP4_BYTES_PER_PARAM, share
    if method in ("awq", "awq_marlin", "gptq", "gptq_marlin"):
        bits = quant.get("bits") or quant.get("w_bit")
        if not plain_int(bits) or bits not in (2, 3, 4, 8):
            raise ConfigError(source, bits, f"quantization_config.bits of a {method} checkpoint must be 2, 3, 4 "
                                            "or 8")
        group = quant.get("group_size", quant.get("q_group_size", 128))
        symmetric = method.startswith("gptq") and quant.get("sym", True) is not False
        share = quantized_share(quant, method, layers, shared)
        return method, bits / 8 + _group_overhead(bits, group, symmetric), share
    if method == "compressed-tensors":
        groups = quant.get("config_groups")
        weights = next((g.get("weights") for g in groups.values() if isinstance(g, Mapping)
                        and isinstance(g.get("weights"), Mapping)), None) if isinstance(groups, Mapping) else None
        bits = weights.get("num_bits") if weights else None
        if not plain_int(bits) or not 1 < bits <= 16:
            raise ConfigError(source, bits, "quantization_config.config_groups.*.weights.num_bits of a "
                                            "compressed-tensors checkpoint must be an integer 2-16")
        overhead = 0.0
        if weights.get("strategy") == "group":
            overhead = _group_overhead(bits, weights.get("group_size"), weights.get("symmetric", True) is not False)
        return method, bits / 8 + overhead, quantized_share(quant, method, layers, shared)
    if method in ("modelopt", "modelopt_fp4"):
        # vllm/model_executor/layers/quantization/modelopt.py: FP8 (1 byte) or NVFP4 (4-bit values with an FP8 scale
        # per 16, 0.5625 bytes) for every linear layer that exclude_modules leaves in.
        algo = str((quant.get("quantization") or quant).get("quant_algo", "")).upper()
        per_param = {"FP8": 1.0, "NVFP4": MODELOPT_NVFP4_BYTES_PER_PARAM}.get(algo)
        if per_param is None:
            raise ConfigError(source, algo, "quantization_config.quant_algo of a modelopt checkpoint: the planner "
                                            "weighs FP8 and NVFP4; set model.weightsGib for another")
        return method, per_param, quantized_share(quant, method, layers, shared)
    return method or "unknown", 0.0, every


MODELOPT_NVFP4_BYTES_PER_PARAM = 0.5 + 1 / 16
"""NVFP4: a 4-bit value per weight and an FP8 (E4M3) scale per 16 weights; the per-tensor scales are negligible."""


def checkpoint_kv_cache_dtype(cfg: Mapping[str, Any]) -> str:
    """The KV-cache dtype a checkpoint declares, which vLLM 0.32.0 takes under --kv-cache-dtype auto: modelopt's
    kv_cache_quant_algo / kv_cache_scheme (vllm/utils/torch_utils.py, get_kv_cache_quant_algo_string and
    resolve_kv_cache_dtype_string) and compressed-tensors' kv_cache_scheme (vllm/model_executor/layers/attention/
    attention.py: fp8 whenever the scheme is set). "" where it declares none, or one the planner does not size
    (NVFP4 KV): the model dtype is then planned, which promises fewer tokens."""
    quant = cfg.get("quantization_config")
    if not isinstance(quant, Mapping):
        return ""
    method = str(quant.get("quant_method", ""))
    if method == "compressed-tensors":
        return "fp8" if quant.get("kv_cache_scheme") is not None else ""
    if not method.startswith("modelopt"):
        return ""
    inner = quant.get("quantization", quant)
    inner = inner if isinstance(inner, Mapping) else quant
    algo = (inner.get("kv_cache_scheme") or quant.get("kv_cache_scheme") or inner.get("kv_cache_quant_algo")
            or quant.get("kv_cache_quant_algo"))
    if isinstance(algo, Mapping):
        fp8 = algo.get("dynamic") is False and algo.get("num_bits") == 8 and algo.get("type") == "float"
        return "fp8" if fp8 else ""
    return "fp8" if isinstance(algo, str) and algo.lower() == "fp8" else ""


# ----------------------------------------------------------------------------------------- vision towers

def first_int(source: Mapping[str, Any], *names: str, default: int = 0) -> int:
    """The first of `names` that `source` sets to a positive integer (positive_int), else `default`."""
    for name in names:
        value = source.get(name)
        if positive_int(value):
            return value
    return default


def tower_widths(vision: Mapping[str, Any], text_hidden: int) -> tuple[int, int]:
    """A vision tower's width and the width of its output per token (the projector's, into the decoder; the decoder's
    hidden size where the config names none). Qwen2-VL's vision config names the tower's width embed_dim and the
    decoder's width hidden_size."""
    if str(vision.get("model_type", "")) == "qwen2_vl_vision":
        return (first_int(vision, "embed_dim", "hidden_size", "vt_hidden_size"),
                first_int(vision, "hidden_size", default=text_hidden))
    return (first_int(vision, "hidden_size", "embed_dim", "vt_hidden_size"),
            first_int(vision, "out_hidden_size", "text_hidden_size", default=text_hidden))


QWEN_VL_MAX_PIXELS = {"qwen2_vl": 12_845_056, "qwen2_5_vl": 12_845_056, "qwen3_vl": 16_777_216,
                      "qwen3_vl_moe": 16_777_216, "qwen3_5": 16_777_216, "qwen3_5_moe": 16_777_216}
"""The largest image, in pixels, of each Qwen-VL family's published image processor (preprocessor_config.json:
Qwen2-VL and Qwen2.5-VL max_pixels; Qwen3-VL, whose processor Qwen3.5 uses, size.longest_edge): vLLM profiles the
encoder with one image of that size (vllm/model_executor/models/qwen2_vl.py get_image_size_with_most_features)."""
QWEN_VL_MIN_PIXELS = {"qwen2_vl": 3_136, "qwen2_5_vl": 3_136, "qwen3_vl": 65_536, "qwen3_vl_moe": 65_536,
                      "qwen3_5": 65_536, "qwen3_5_moe": 65_536}
"""The smallest image, in pixels, of the same processors (min_pixels; Qwen3-VL's size.shortest_edge)."""
QWEN2_VL_VIDEO_FRAMES = 14
"""The most frames of vLLM's dummy video for Qwen2-VL and Qwen2.5-VL (vllm/model_executor/models/qwen2_vl.py
_MAX_FRAMES_PER_VIDEO): frames of the largest image, as many as max_model_len holds, so from 2 x that image's tokens of
context on the video is the item the encoder profile runs (memory.py encoder_item). Qwen3-VL's and Qwen3.5's
dummy video is 2 frames under the video processor's own size (qwen3_vl.py get_max_video_tokens: 12,288 tokens as
published), never more tokens than their largest image."""


def most_features_image(max_pixels: int, unit: int) -> tuple[int, int]:
    """(height, width) in pixels of the image vLLM's Qwen-VL processing info builds for the encoder profile under
    `max_pixels` (vllm/model_executor/models/qwen2_vl.py get_image_size_with_most_features): the most tokens of
    unit x unit pixels that fit, as the factor pair closest to a square whose sides are at most 200:1 apart, one token
    fewer at a time until such a pair exists."""
    for tokens in range(max(max_pixels // (unit * unit), 1), 0, -1):
        short = next(d for d in range(math.isqrt(tokens), 0, -1) if tokens % d == 0)
        if tokens // short / short <= 200:
            return unit * short, unit * (tokens // short)
    return unit, unit


def resized_image(height: int, width: int, unit: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """(height, width) a Qwen-VL processor resizes an image to (transformers' qwen2_vl smart_resize, which vLLM's
    _get_vision_info calls): each side rounded to the unit; scaled down to within max_pixels, or up to min_pixels,
    keeping the aspect."""
    h, w = round(height / unit) * unit, round(width / unit) * unit
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        return max(unit, math.floor(height / beta / unit) * unit), max(unit, math.floor(width / beta / unit) * unit)
    if h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        return math.ceil(height * beta / unit) * unit, math.ceil(width * beta / unit) * unit
    return h, w


GEMMA3_PAN_AND_SCAN = (False, 4, 256, 1.2)
"""Gemma 3's processor defaults for do_pan_and_scan, pan_and_scan_max_num_crops, pan_and_scan_min_crop_size and
pan_and_scan_min_ratio_to_activate (transformers' Gemma3ProcessorKwargs._defaults): no crops unless asked."""


def pan_and_scan_crops(side: int, do: bool, most: int, least_side: int, ratio: float) -> int:
    """The crops Gemma 3's processor adds to vLLM's dummy image, side x most tall and side wide (vLLM 0.32.0
    gemma3_mm.py get_image_size_with_most_features and get_num_crops, after transformers' pan_and_scan): none without
    pan-and-scan or where the image is not `ratio` times taller than wide; else the rounded aspect, at least 2 and at
    most `most`, none where a crop would be under `least_side` pixels."""
    height = side * most
    if not do or height / side < ratio:
        return 0
    crops = min(most, max(2, min(height // least_side, math.floor(height / side + 0.5))))
    return crops if min(side, math.ceil(height / crops)) >= least_side else 0


MM_PREFIX_LM_TYPES = frozenset({"bagel", "gemma3", "molmo2", "moondream3", "paligemma"})
"""Model types vLLM 0.32.0 serves with bidirectional attention over each multimodal item where the config does not say
(vllm/transformers_utils/model_arch_config_convertor.py is_mm_prefix_lm, MM_PREFIX_LM_MODELS)."""


GEMMA4_SOFT_TOKENS = (70, 140, 280, 560, 1120)
"""The max_soft_tokens values Gemma 4's processor takes (vllm/model_executor/models/gemma4_mm.py
_SUPPORTED_SOFT_TOKENS): any other in --mm-processor-kwargs makes vLLM raise while it builds the profile's dummy
batch."""
GEMMA4_IMAGE_SOFT_TOKENS = 280
"""Gemma 4's soft tokens of an image where the vision config names no default_output_length."""
GEMMA4_VIDEO_FRAMES = 32
GEMMA4_FRAME_SOFT_TOKENS = 70
GEMMA4_FRAME_MARKERS = 8
"""Gemma 4's dummy video: 32 frames (_VIDEO_MAX_FRAMES), each through the vision tower at 70 soft tokens
(_VIDEO_MAX_SOFT_TOKENS) and counted with 8 more tokens (its begin and end markers and about 6 of timestamp) in
Gemma4ProcessingInfo.get_mm_max_tokens_per_item: 2,496 tokens a video."""


def image_prefix_lm(wrapper: Mapping[str, Any]) -> bool:
    """Whether vLLM attends bidirectionally over a multimodal item of this config (is_mm_prefix_lm: the config's own
    is_mm_prefix_lm where it has one, Gemma 4's text_config use_bidirectional_attention "vision", DeepSeek-V4 with
    vision layers, else MM_PREFIX_LM_TYPES): vLLM then forces chunked multimodal input off
    (vllm/platforms/cuda.py), so one item must fit max_num_batched_tokens."""
    if "is_mm_prefix_lm" in wrapper:
        return bool(wrapper["is_mm_prefix_lm"])
    kind = str(wrapper.get("model_type", ""))
    text = wrapper.get("text_config") if isinstance(wrapper.get("text_config"), Mapping) else {}
    if kind in ("gemma4", "gemma4_unified"):  # model_arch_config_convertor.py Gemma4ModelArchConfigConvertor
        return text.get("use_bidirectional_attention") == "vision"
    if kind == "deepseek_v4":
        return first_int(wrapper, "vision_n_layers") > 0
    return kind in MM_PREFIX_LM_TYPES


def input_modalities(wrapper: Mapping[str, Any]) -> tuple[str, ...]:
    """The input modalities vLLM's processing info of the family supports (get_supported_mm_limits in
    vllm/model_executor/models/<family>.py: qwen2_vl.py for every Qwen-VL family, gemma3_mm.py, gemma4_mm.py with
    audio where the config has an audio tower), or () where not read (ModelArchitecture.modalities)."""
    kind = str(wrapper.get("model_type", ""))
    if kind in QWEN_VL_MAX_PIXELS:
        return "image", "video"
    if kind == "gemma3":
        return ("image",)
    if kind == "gemma3n":  # gemma3n_mm.py
        return "image", "audio"
    if kind == "gemma4":
        return ("image", "audio", "video") if wrapper.get("audio_config") else ("image", "video")
    return ()


def encoder_input(vision: Mapping[str, Any], wrapper: Mapping[str, Any],
                  text_hidden: int) -> EncoderInput | tuple[()]:
    """What vLLM's encoder profile runs for one multimodal item of the largest kind (ModelArchitecture.encoder_input),
    or () for a tower whose profile input is not read yet. The Qwen-VL families: one image of the processor's
    largest size, max_pixels / (patch x merge)^2 tokens of merge^2 patches each, each patch channels x
    temporal_patch_size x patch^2 values; the output is out_hidden_size wide, once more per deepstack layer: Qwen3-VL's
    tower keeps each deepstack merger's output from its block on and concatenates them at the end
    (vllm/model_executor/models/qwen3_vl.py Qwen3_VisionTransformer.forward, deepstack_feature_lists). Gemma 3: a SigLIP
    image of image_size^2 pixels, mm_tokens_per_image tokens of the decoder's width
    (vllm/model_executor/models/gemma3_mm.py: no pan-and-scan by default). Gemma 4 (gemma4_mm.py): an image of
    default_output_length soft tokens, pooling_kernel_size^2 patches each, the tower's output projected to the
    decoder's width; its dummy video is sized from the same fields (planner/memory.py gemma4_items). Not read where
    the config has an audio tower, whose profile is not planned."""
    kind = str(wrapper.get("model_type", ""))
    width, out = tower_widths(vision, text_hidden)
    if not width:
        return ()
    patch = first_int(vision, "patch_size", default=14)
    if kind in QWEN_VL_MAX_PIXELS:
        merge = first_int(vision, "spatial_merge_size", default=2)
        tokens = QWEN_VL_MAX_PIXELS[kind] // (patch * merge) ** 2
        values = first_int(vision, "in_chans", "in_channels", default=3) * \
            first_int(vision, "temporal_patch_size", default=2) * patch ** 2
        deepstack = vision.get("deepstack_visual_indexes")
        held = out * (len(deepstack) if isinstance(deepstack, list) else 0)
        groups = QWEN2_VL_VIDEO_FRAMES // first_int(vision, "temporal_patch_size", default=2) \
            if kind in ("qwen2_vl", "qwen2_5_vl") else 0
        return EncoderInput(tokens * merge * merge, values, width, tokens, out + held, held, groups,
                            "window_size" in vision, patch, patch * merge,
                            (QWEN_VL_MIN_PIXELS[kind], QWEN_VL_MAX_PIXELS[kind]))
    if kind == "gemma4" and not wrapper.get("audio_config"):
        pool, inter = first_int(vision, "pooling_kernel_size", default=3), first_int(vision, "intermediate_size")
        tokens = first_int(vision, "default_output_length", default=GEMMA4_IMAGE_SOFT_TOKENS)
        return EncoderInput(tokens * pool * pool, first_int(vision, "num_channels", default=3) * patch ** 2, width,
                            tokens, out, 0, 0, False, pool=pool,
                            positions=first_int(vision, "position_embedding_size", default=10_240),
                            mlp=3 * inter / width)
    side, tokens = first_int(vision, "image_size"), first_int(wrapper, "mm_tokens_per_image", default=256)
    if kind == "gemma3" and side:
        return EncoderInput((side // patch) ** 2, first_int(vision, "num_channels", default=3) * patch ** 2, width,
                            tokens, out, 0, 0, False, side=side)
    return ()


UNCOUNTED_TOWERS = {"gemma3n": "the MobileNetV5 vision tower (built by timm from vision_config.architecture) and the "
                               "Conformer audio tower"}
"""Wrappers whose towers the planner does not count from config.json, by model_type, and what they are (vLLM 0.32.0
gemma3n_mm.py builds both with AutoModel.from_config): the decoder alone is counted, and the plan says so where
the towers are served (planner/sizing.py); the checkpoint's tensors or model.weightsGib weigh them."""


def audio_parameters(audio: object, text_hidden: int) -> int:
    """Gemma 4's audio tower (transformers' Gemma4AudioModel, which vLLM builds with AutoModel.from_config) and its
    projection into the decoder: conformer blocks (two feed-forward modules 4 x hidden wide, attention with a
    relative-position key projection and a per-dimension scale, a gated depthwise convolution module, their norms),
    the two-layer convolutional subsampler, the output projection to output_proj_dims and Gemma4MultimodalEmbedder's
    projection; 0 without an audio config."""
    if not isinstance(audio, Mapping):
        return 0
    h, layers = first_int(audio, "hidden_size", default=1024), first_int(audio, "num_hidden_layers", default=12)
    head = h // max(1, first_int(audio, "num_attention_heads", default=8))
    kernel, out = first_int(audio, "conv_kernel_size", default=5), first_int(audio, "output_proj_dims", default=1536)
    channels = audio.get("subsampling_conv_channels")
    first, second = channels if isinstance(channels, list) and len(channels) == 2 else (128, 32)
    blocks = layers * (24 * h * h + 9 * h + kernel * h + head)
    subsampler = first * 9 + first + second * first * 9 + second + first // 4 * second * h
    return blocks + subsampler + h * out + out + out * text_hidden


def vision_parameters(vision: Mapping[str, Any], text_hidden: int, wrapper: Mapping[str, Any] | None = None) -> int:
    """A vision tower's parameters (transformer blocks, patch embedding, projector into the decoder), as vLLM builds
    the tower of each family (vllm/model_executor/models/<family>.py; transformers builds the same). Gated (SwiGLU)
    MLPs where the tower uses SiLU, as Qwen2.5-VL's does, and in Pixtral's and GLM-4V's; a two-matrix MLP for
    CLIP/SigLIP towers. `wrapper`: the multimodal config around it (Mistral 3 keeps its merge size there; Gemma 4 its
    audio tower, counted here with the vision tower: audio_parameters)."""
    def integer(*names: str, default: int = 0, source: Mapping[str, Any] = vision) -> int:
        return first_int(source, *names, default=default)

    kind = str(vision.get("model_type", ""))
    if kind == "gemma4_unified_vision":
        # gemma4_unified.py Gemma4UnifiedVisionEmbedder (no tower): a LayerNorm over a model patch's pixels
        # (model_patch_size = patch_size x pooling_kernel_size, 3 channels), a dense projection to mm_embed_dim, a
        # LayerNorm, factorized 2-D position embeddings (mm_posemb_size x 2 x mm_embed_dim), a LayerNorm; then
        # Gemma4MultimodalEmbedder's projection into the decoder (its norm has no weight), and the audio's where the
        # config has audio (its raw frames of audio_embed_dim projected alike)
        pixels = 3 * (integer("patch_size", default=16) * integer("pooling_kernel_size", default=3)) ** 2
        width = integer("mm_embed_dim", default=3840)
        audio = (wrapper or {}).get("audio_config")
        frames = first_int(audio, "audio_embed_dim", default=640) if isinstance(audio, Mapping) else 0
        return (2 * pixels + pixels * width + width + 4 * width + integer("mm_posemb_size", default=1120) * 2 * width
                + integer("output_proj_dims", default=width) * text_hidden + frames * text_hidden)
    h, out = tower_widths(vision, text_hidden)
    depth = integer("depth", "num_hidden_layers", "vt_num_hidden_layers") + integer("num_global_layers")
    if not h or not depth:
        return 0
    inter = integer("intermediate_size", "vt_intermediate_size", default=4 * h)
    gated = str(vision.get("hidden_act", "")) == "silu" or kind == "pixtral"
    block_inter = out if kind == "glm4v_vision" else inter  # GLM-4V: blocks out_hidden_size wide, merger inter
    patch = integer("patch_size", "spatial_patch_size", default=14)
    blocks = depth * (4 * h * h + (3 if gated else 2) * h * block_inter + 4 * h)
    embed = integer("in_chans", "num_channels", "in_channels", default=3) * integer("temporal_patch_size", default=1) \
        * patch ** 2 * h
    kernel = vision.get("merge_kernel_size")  # Kimi's MoonViT: a [2, 2] patch merger
    merge = integer("spatial_merge_size") or (kernel[0] if isinstance(kernel, list) and kernel
                                              and isinstance(kernel[0], int) else 0)
    positions = (integer("image_size", default=0) // patch) ** 2
    if kind == "gemma4_vision":  # transformers' Gemma4VisionModel, which vLLM builds (AutoModel.from_config)
        heads = integer("num_attention_heads", default=1)
        head, kv_heads = integer("head_dim", default=h // max(1, heads)), integer("num_key_value_heads", default=heads)
        attention = 2 * h * head * (heads + kv_heads) + 2 * head  # q, k, v, o and the q and k norms
        blocks = depth * (attention + 3 * h * inter + 4 * h)  # a gated MLP, four norms
        return (blocks + 3 * patch ** 2 * h + 2 * integer("position_embedding_size") * h + h * out
                + audio_parameters((wrapper or {}).get("audio_config"), out))
    if kind == "glm4v_vision":  # a merge x merge downsampling conv, then a gated MLP of intermediate_size
        return blocks + embed + positions * h + h * out * merge * merge + out * out + 3 * out * inter
    if kind == "pixtral":  # Mistral 3's projector: patch merger, then two linear layers into the decoder
        wrapped = integer("spatial_merge_size", default=2, source=wrapper or {})
        return blocks + embed + h * h * wrapped * wrapped + h * out + out * out
    if merge and (wrapper or {}).get("model_type") == "bailing_moe_v3_vl":
        # bailing_moe_v3_vl.py: Qwen3's tower without its deepstack mergers, a patch merger that is a LayerNorm only,
        # then a projector of two linear layers with biases into the decoder's width
        width = h * merge * merge
        return (blocks + embed + integer("num_position_embeddings") * h + 2 * h
                + width * text_hidden + text_hidden * text_hidden + 2 * text_hidden)
    if merge:  # Qwen2-VL family: merger MLP over merge x merge patches (Qwen3-VL: one more per deepstack layer)
        width = h * merge * merge
        deepstack = vision.get("deepstack_visual_indexes")
        mergers = 1 + (len(deepstack) if isinstance(deepstack, list) else 0)
        return blocks + embed + integer("num_position_embeddings") * h + mergers * (width * width + width * out)
    embed += positions * h
    projector = integer("vision_output_dim", default=h) * out
    tiles = vision.get("supported_aspect_ratios")
    if isinstance(tiles, list):  # Mllama: a tile embedding per aspect ratio, tile and patch
        embed += (len(tiles) + 1) * integer("max_num_tiles") * (positions + 1) * h
    return blocks + embed + projector
