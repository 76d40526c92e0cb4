"""A model's architecture, read from its Hugging Face `config.json`.

Only the fields the planner needs: depth, widths, attention and KV heads, experts, vocabulary,
context length and the checkpoint's dtype / quantization.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

ATTENTION_KINDS = ("full", "sliding", "chunked", "indexed", "swa", "csa", "hca")
"""Layer kinds with attention weights and a per-token KV cache ("indexed": latent attention with a sparse indexer's
key cache beside it, DeepSeek-V3.2 and GLM-5; "swa", "csa", "hca": DeepSeek V4's sliding-window layer and its
compressed ones at ratio 4, with an indexer, and 128)."""
DSV4_RATIOS = {"swa": 1, "csa": 4, "hca": 128}
"""DeepSeek V4's layer kinds by compress ratio (compress_ratios: 0 or 1 the sliding window alone, 4 compressed sparse
attention with an indexer, 128 heavily compressed attention)."""
STATE_KINDS = ("linear", "mamba", "mamba1", "kda", "conv", "lightning")
"""Layer kinds with a fixed state per request: Gated DeltaNet ("linear"), Mamba-2 ("mamba"), Mamba-1 ("mamba1"), Kimi
Delta Attention ("kda"), LFM2's short convolution ("conv") and Ling 2.5's linear attention ("lightning"). A layer of
kind "none" holds neither (NemotronH's MLP and expert layers)."""
DTYPE_BYTES = {"float32": 4.0, "float": 4.0, "bfloat16": 2.0, "float16": 2.0, "half": 2.0,
               "fp8": 1.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0, "float8_e4m3fn": 1.0}


FIRST_STAGE, LAST_STAGE, EVERY_STAGE, TIED_HEAD = -1, -2, -3, -4
"""TensorGroup positions other than a decoder layer's index: the first pipeline stage (input embeddings), the last
(final norm, lm_head), every stage (multimodal encoders), and the last stage only where it is not also the first
(the copy of tied input embeddings lm_head uses)."""


class EncoderInput(NamedTuple):
    """The largest multimodal item vLLM profiles a vision tower with (planner/layers.py encoder_input)."""

    patches: int
    values: int
    """Input values per patch (channels x temporal_patch_size x patch^2)."""
    width: int
    """The tower's hidden size."""
    tokens: int
    """The item's tokens in the decoder."""
    out: int
    """The width of the encoder's output per token (deepstack features included)."""
    held: int
    """The width per token the tower keeps while its later blocks run (Qwen3-VL's deepstack features)."""
    video_groups: int
    """The most temporal groups of such images vLLM's dummy video holds where it can be the larger item; 0 where it
    cannot (planner/memory.py encoder_item)."""
    windowed: bool
    """Window attention in the tower (window_size in its config: Qwen2.5-VL), which holds more per patch
    (planner/memory.py ENCODER_WINDOW_STATES)."""
    patch: int = 0
    """A Qwen-VL tower's patch side in pixels; 0 where the item's size is fixed (Gemma 3)."""
    unit: int = 0
    """A Qwen-VL tower's side of one token (patch x spatial_merge_size), in pixels."""
    pixels: tuple[int, int] = (0, 0)
    """The published processor's (min, max) pixels of an image, which --mm-processor-kwargs overrides
    (planner/memory.py encoder_item)."""
    side: int = 0
    """Gemma 3's image side in pixels, which pan-and-scan crops (--mm-processor-kwargs) repeat; 0 for other towers."""
    pool: int = 0
    """Gemma 4's pooling kernel side: a soft token pools pool^2 patches, and the tower runs every image and video frame
    padded to its most patches (max_soft_tokens x pool^2); 0 for other towers (planner/memory.py gemma4_items)."""
    positions: int = 0
    """Gemma 4's position_embedding_size, by which vLLM sizes the chunks it runs the tower in (planner/memory.py
    tower_chunk)."""
    mlp: float = 0.0
    """Gemma 4's gated MLP in tower widths per patch: its gate's activation, its up projection and their product live
    together (3 x intermediate / width; planner/memory.py gemma4_tower_bytes); 0 for other towers."""


@dataclass(frozen=True)
class TensorGroup:
    """Bytes of a checkpoint's tensors that sit in one place of a layout (planner/checkpoint.py tensor_groups)."""

    position: int
    """The decoder layer they belong to, or FIRST_STAGE / LAST_STAGE / EVERY_STAGE / TIED_HEAD."""
    rule: str
    """How tensor parallelism divides it (planner/memory.py group_bytes_per_rank): evenly over the tensor ranks
    ("split"), not at all ("replicated"), as KV heads ("kv": a whole head on each rank where there are fewer heads
    than ranks), as a vocabulary table padded to 64 rows ("vocab"), or as routed experts ("routed", expert_shard)."""
    bytes: float
    rows: int = 0
    """A vocabulary table's rows (rule "vocab")."""


DEFAULT_CONTEXT = 2048
"""vLLM's max_model_len for a config with none of CONTEXT_KEYS (BLOOM's ALiBi, Falcon's RefinedWeb): it warns,
assumes this length, and takes any --max-model-len it is given instead (vllm/config/model.py,
_get_and_verify_max_len)."""


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
    """The longest sequence vLLM accepts (planner/model_config.py context_length); 0 when config.json names none,
    where vLLM takes any vllm.maxModelLen and assumes DEFAULT_CONTEXT without one (`context`)."""
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
    """Per decoder layer (planner/layers.py): one of ATTENTION_KINDS (full, sliding, chunked, indexed), one of
    STATE_KINDS (linear, mamba, mamba1, kda), or none (neither attention nor state: NemotronH's MLP and expert
    layers); empty means all full attention. With cache_slots > 1, that many entries per decoder layer."""
    cache_slots: int = 1
    """Caches per decoder layer: 2 for Falcon-H1, whose every layer runs attention and a Mamba-2 mixer side by side
    (vllm/model_executor/models/falcon_h1.py FalconH1ParallelHybrid), layer_kinds then ("full", "mamba") per layer;
    a pipeline stage takes whole layers (planner/kv_cache.py stage_bounds)."""
    layer_kv_heads: tuple[int, ...] = ()
    """Per decoder layer of a NAS decoder (planner/layers.py nas_blocks): its KV heads, 0 where attention is a no-op;
    empty for every other family (num_kv_heads in every attention layer)."""
    layer_mlp_widths: tuple[int, ...] = ()
    """Per decoder layer of a NAS decoder: its MLP width, 0 where the MLP is a no-op."""
    engine_counts_experts: bool = True
    """Whether vLLM's ModelConfig counts the experts (is_moe), which decides 0.25.1's model runner: False for DBRX,
    whose experts sit in ffn_config where ModelConfig does not look (planner/model_config.py ENGINE_UNSEEN_EXPERTS)."""
    expert_routers: int = 1
    """Routers per MoE layer: 2 for ERNIE 4.5 VL, a text and a vision one over its per-modality experts
    (vllm/model_executor/models/ernie45_vl_moe.py)."""
    biased_grouped_router: bool = False
    """vLLM routes this model's experts with grouped_topk and an e_score_correction_bias, through the fused
    `_moe_C::grouped_topk` kernel (fused_moe/router/grouped_topk_router.py: GLM-4.5, DeepSeek-V3-style noaux_tc,
    LFM2-MoE with use_expert_bias; groups that divide the experts, at most 32 groups and 32 experts a token).
    grouped_topk is a function under its own torch.compile, compiled at its first call: the profile's first MoE
    layer (planner/engine.py EngineProfile.router_compile_hold)."""
    router_scales: bool = False
    """Gemma 4's router: a per-dimension input scale (hidden_size) and a per-expert output scale beside its
    projection (vllm/model_executor/models/gemma4.py Gemma4Router)."""
    mamba_norm: bool = True
    """The Mamba-2 mixer's gated RMSNorm has a weight (MambaMixer2 use_rms_norm; Falcon-H1's mamba_rms_norm)."""
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
    """The vision tower and its projector (multimodal wrappers), loaded beside the decoder; Gemma 4's audio tower and
    projector with them (planner/layers.py audio_parameters)."""
    encoder_input: EncoderInput | tuple[()] = ()
    """The largest multimodal item vLLM profiles the encoder with (planner/layers.py encoder_input); () where not
    read."""
    modalities: tuple[str, ...] = ()
    """The input modalities vLLM supports for the family (planner/layers.py input_modalities); () where not read."""
    image_prefix_lm: bool = False
    """Bidirectional attention over a multimodal item (vLLM's is_mm_prefix_lm: Gemma 3, PaliGemma, ...;
    planner/layers.py image_prefix_lm), for which vLLM turns chunked multimodal input off."""
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
    mtp_layers: int = 0
    """Multi-token-prediction layers the checkpoint stores after the decoder (num_nextn_predict_layers), which vLLM
    does not load without speculative decoding (planner/checkpoint.py)."""
    indexer: tuple[int, int] = (0, 0)
    """A sparse-attention indexer's heads and head dim (index_n_heads, index_head_dim) in each "indexed" layer."""
    indexer_pool: int = 1
    """Tokens one indexer key stands for (GLM-5-Next's index_kpool: keys pooled 16 to 1, their pooling weights in the
    layer; vllm/models/glm5next/common/attention.py Glm5NextIndexerCache tokens_per_state); 1 for DeepSeek-V3.2's."""
    o_groups: int = 0
    """DeepSeek V4's grouped output projection: o_groups groups of heads, each projected to o_lora_rank
    (vllm/models/deepseek_v4/attention.py wo_a, wo_b); 0 for every other model."""
    o_lora_rank: int = 0
    hash_layers: int = 0
    """DeepSeek V4's first num_hash_layers MoE layers route by a table of top-k experts per vocabulary token
    (DeepseekV4MoE gate.tid2eid) in place of the router's score bias."""
    expert_bytes_per_param: float = 0.0
    """Bytes per parameter of the routed experts where they are quantized apart from the other linear layers
    (DeepSeek V4's FP8 checkpoints: MXFP4 experts under expert_dtype fp4, vllm/models/deepseek_v4/quant_config.py);
    0: weight_bytes_per_param."""
    hyper_connections: int = 0
    """Residual streams of manifold hyper-connections (hc_mult, GLM-5-Next): each layer mixes them before attention
    and before its MLP, (2 + n) x n weights per stream x hidden, float32 (vllm/models/glm5next/common/model.py
    Glm5NextDecoderLayer hc_attn_* / hc_ffn_*); 0 for a plain residual."""
    short_conv: tuple[int, int, int] = (0, 0, 0)
    """LFM2's short-convolution layers (kind "conv"): channels (conv_dim), kernel (conv_L_cache), biases (1/0), as
    vllm/model_executor/layers/mamba/short_conv.py ShortConv builds them: in_proj to 3 x channels, a depthwise conv,
    out_proj."""
    kda: tuple[int, int, int] = (0, 0, 0)
    """Kimi Delta Attention layers: heads, head dim, short-conv kernel (linear_attn_config num_heads, head_dim,
    short_conv_kernel_size)."""
    lightning: tuple[int, int, int, int] = (0, 0, 0, 0)
    """Ling 2.5's linear-attention layers (kind "lightning"): heads, head dim, q / k norms (1/0: use_qk_norm), and the
    group_norm_size its gated output norm is split in, which a TP size must not exceed and must divide
    (vllm/model_executor/layers/mamba/linear/bailing_linear_attn.py BailingMoELinearAttention asserts both)."""
    kda_state_flag: bool = True
    """Whether a Kimi Delta Attention layer's recurrent state follows --mamba-ssm-cache-dtype (Kimi's: kda_state_dtype
    receives it); Ling 3.0's keeps it float32 whatever the flag (bailing_moe_v3.py get_state_dtype passes the conv
    dtype only, so vLLM neither follows nor refuses the flag)."""
    kda_full_gates: bool = False
    """Whether a Kimi Delta Attention layer's f and g projections are hidden x heads x head_dim matrices (Ling 3.0's
    no_kda_lora: bailing_moe_v3.py f_proj, g_proj) rather than Kimi's low-rank pairs through head_dim (f_a / f_b,
    g_a / g_b)."""
    mla_output_gate: int = 0
    """Latent attention's sigmoid output gate, its width per head: 1 head-wise, v_head_dim element-wise (Ling 3.0's
    gated_attention_proj_granularity_type: bailing_moe_v3.py g_proj); 0 without one."""
    router_bias: bool = False
    """Whether each MoE layer's router has a per-expert bias beside its weight (Ling 3.0: gate.expert_bias)."""
    mamba: tuple[int, ...] = ()
    """Mamba-2 mixer layers (kind "mamba"): intermediate size, groups, heads, head dim, state size, conv kernel, conv
    bias (1/0), projection bias (1/0), as planner/model_config.py _mamba2_fields reads them per family."""
    mamba1: tuple[int, ...] = ()
    """Mamba-1 mixer layers (kind "mamba1", Jamba, Mamba, Falcon-Mamba): intermediate size, state size, conv kernel,
    dt rank, conv bias (1/0), projection bias (1/0), weighted dt / B / C norms (1/0: Jamba's; Falcon-Mamba's carry no
    weight, Mamba's are none)."""
    mamba_ssm_dtype: str = ""
    """The dtype vLLM keeps a Mamba layer's SSM state in ("" : the model's; NemotronH: the config's
    mamba_ssm_cache_dtype, float32 by default)."""
    ffn_free_layers: int = 0
    """Decoder layers without an MLP or experts (NemotronH: a layer is one block, a mixer or an MLP or experts)."""
    expert_matrices: int = 3
    """Weight matrices of one routed or shared expert: 3 gated, 2 where the family's experts are not (NemotronH)."""
    norms_per_layer: int = 2
    shared_expert_gate: bool = True
    """Whether the shared expert of shared_expert_intermediate_size has a sigmoid gate (Qwen: hidden_size weights);
    GraniteMoeHybrid's shared MLP and NemotronH's shared experts have none."""
    global_attention: tuple[int, int] = (0, 0)
    """(KV heads, head dim) of the full-attention layers where they differ from the sliding ones (Gemma 4:
    per_layer_config, num_global_key_value_heads, global_head_dim); (0, 0) where every layer has num_kv_heads x
    head_dim."""
    kv_shared_layers: int = 0
    """The last layers that read an earlier layer's KV cache and allocate none (Gemma 4 num_kv_shared_layers)."""
    per_layer_input: tuple[int, int] = (0, 0)
    """Gemma 4's per-layer input embeddings: (vocab_size_per_layer_input, hidden_size_per_layer_input)."""
    double_wide_mlp: bool = False
    """Gemma 4: the KV-shared layers' MLP is twice intermediate_size (use_double_wide_mlp)."""
    uncounted_towers: str = ""
    """The multimodal towers config.json's count leaves out (planner/layers.py UNCOUNTED_TOWERS); "" where every tower
    is counted (vision_parameters) or there is none."""
    altup_inputs: int = 0
    """Gemma 3n's AltUp: the hidden state is carried as this many predictions (altup_num_inputs); 0 without AltUp."""
    laurel_rank: int = 0
    """Gemma 3n's LAuReL block: a low-rank residual of this rank beside each layer's attention; 0 without."""
    mlps_beside_experts: int = 0
    """Dense MLPs of intermediate_size in every layer beside its expert block (LongCat-Flash: 2, longcat_flash.py
    FlashDecoderLayer.mlps); 0 elsewhere."""
    zero_experts: int = 0
    """Zero-computation experts the router scores beside the routed ones (LongCat-Flash's zero_expert_num): they hold
    no weights, but the router's classifier and its e_score_correction_bias are num_experts + this wide."""
    weight_layers: int = 0
    """Decoder layers that hold weights where fewer than num_layers, the layers holding a KV cache (HRM-Text: its two
    stacks' 2 x num_layers_per_stack layers, run num_hidden_layers times in all, each run with its own cache); 0 where
    every layer holds its own weights."""
    shared_blocks: tuple[int, int, int] = (0, 0, 0)
    """Zamba2's shared transformer blocks (vllm/model_executor/models/zamba2.py): (num_mem_blocks, adapter_rank, 1
    where the shared attention has q / k / v adapters); (0, 0, 0) for other families. Each block is an attention over
    2 x hidden_size and a gated MLP of intermediate_size, run by every num_mem_blocks-th hybrid layer ("full" in
    kinds), which holds its own adapters and a hidden-size linear."""
    inkling: tuple[int, ...] = ()
    """Inkling's layers beside num_attention_heads x num_kv_heads x head_dim (its full layers'; planner/layers.py
    INKLING_TYPES): d_rel, rel_extent, sconv_kernel_size, the sliding layers' swa_num_attention_heads,
    swa_num_key_value_heads and swa_head_dim, then 1/0 for q_bias, use_embed_norm, use_gate_bias and use_global_scale
    (o_bias is refused: planner/model_config.py _inkling_fields); () for every other family."""
    checkpoint_groups: tuple[TensorGroup, ...] = ()
    """The checkpoint's tensors as vLLM places them (planner/checkpoint.py tensor_groups) where they were read (the
    Hub's headers or model.tensorsFile); (): not read, the count decides."""
    remote_code: str = ""
    """The config class config.json's auto_map names where vLLM starts the model only with --trust-remote-code
    (planner/model_config.py remote_code); "" where it does not."""
    unsized: str = ""
    """What in the config marks a layer structure the planner does not size yet (planner/layers.py unsized_reason);
    "" for a model it sizes. Such a model plans with its KV cache counted as full attention
    and reported as unverified."""

    @property
    def quantized_parts(self) -> frozenset[str]:
        return frozenset(part for part, share in self.quantized_share if share > 0)

    @property
    def kinds(self) -> tuple[str, ...]:
        return self.layer_kinds or ("full",) * self.num_layers

    @property
    def mla_nope_dim(self) -> int:
        """Latent attention's per-head query/key width without position (qk_nope_head_dim, else head_dim less the
        rotary part)."""
        return self.qk_nope_head_dim or self.head_dim - self.qk_rope_head_dim

    @property
    def mla_v_dim(self) -> int:
        """Latent attention's per-head value width (v_head_dim, else head_dim)."""
        return self.v_head_dim or self.head_dim

    @property
    def context(self) -> int:
        """The max_model_len vLLM takes without --max-model-len."""
        return self.max_position_embeddings or DEFAULT_CONTEXT

    def admits(self, max_len: int) -> bool:
        """Whether vLLM starts the model at this max_model_len: no longer than max_position_embeddings where
        config.json names one (vllm/config/model.py _get_and_verify_max_len refuses "User-specified max_model_len ...
        greater than the derived max_model_len" unless VLLM_ALLOW_LONG_MAX_MODEL_LEN is set)."""
        return not self.max_position_embeddings or max_len <= self.max_position_embeddings

    @property
    def attention_kv_heads(self) -> tuple[int, ...]:
        """The KV-head counts of the attention layers: each NAS layer's own, else num_kv_heads."""
        if self.inkling:  # its sliding layers' own
            return tuple(sorted({self.num_kv_heads, self.inkling[4]}))
        return tuple(sorted({kv for kv in self.layer_kv_heads if kv})) or (self.num_kv_heads,)

    @property
    def compressed_attention(self) -> bool:
        """Whether any layer is DeepSeek V4's (DSV4_RATIOS)."""
        return any(kind in DSV4_RATIOS for kind in self.kinds)

    @property
    def has_state_layers(self) -> bool:
        """A hybrid whose state layers (STATE_KINDS) keep a fixed state per request."""
        return any(kind in STATE_KINDS for kind in self.kinds)

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
        if self.inkling:  # its own layers (inkling_layer)
            return self._inkling_parts()
        h = self.hidden_size
        kinds = self.kinds
        attention_layers = self.weight_layers or sum(kind in ATTENTION_KINDS for kind in kinds)
        if self.kv_lora_rank:
            nope, rope, v_dim = self.mla_nope_dim, self.qk_rope_head_dim, self.mla_v_dim
            heads = self.num_attention_heads
            q = (h * self.q_lora_rank + self.q_lora_rank * heads * (nope + rope) if self.q_lora_rank
                 else h * heads * (nope + rope))
            attention = (q + h * (self.kv_lora_rank + rope) + self.kv_lora_rank * heads * (nope + v_dim)
                         + heads * v_dim * h + self.q_lora_rank + self.kv_lora_rank  # + q_a / kv_a layernorms
                         + h * heads * self.mla_output_gate)
        else:
            q_width = self.num_attention_heads * self.head_dim * (2 if self.gated_attention else 1)
            kv_width = self.num_kv_heads * self.head_dim
            attention = h * q_width + 2 * h * kv_width + self.num_attention_heads * self.head_dim * h
        k_heads, v_heads, k_dim, v_dim_l, kernel = self.linear_attention
        key, value = k_heads * k_dim, v_heads * v_dim_l
        linear = h * (2 * key + 2 * value) + h * 2 * v_heads + (2 * key + value) * kernel + value * h
        moe_layers = self.moe_layers
        dense_layers = (self.weight_layers or self.num_layers) - moe_layers - self.ffn_free_layers
        indexer = self.indexer_parameters()
        streams = self.hyper_connections
        mix = (2 + streams) * streams
        hyper = 2 * (mix * streams * h + mix + 3) if streams else 0
        kda_heads, kda_dim, kda_kernel = self.kda  # vllm/models/kimi_k3/nvidia/model.py, KimiDeltaAttention
        width = kda_heads * kda_dim
        gates = 2 * h * width if self.kda_full_gates else 2 * (h * kda_dim + kda_dim * width)  # f and g
        kda = 3 * h * width + 3 * width * kda_kernel + width + kda_heads + gates + h * kda_heads + kda_dim + width * h
        l_heads, l_dim, l_norms, _ = self.lightning  # bailing_linear_attn.py: query_key_value (MHA), g_proj, dense,
        inner = l_heads * l_dim  # the gated output norm, the q / k norms
        lightning = 3 * h * inner + h * inner + inner * h + inner + 2 * l_dim * l_norms
        channels, conv_kernel, conv_biases = self.short_conv
        short_conv = 3 * h * channels + channels * conv_kernel + channels * h + conv_biases * (5 * channels)
        inner, groups, m_heads, _, state, m_kernel, conv_bias, proj_bias = self.mamba or (0,) * 8
        conv_dim = inner + 2 * groups * state
        mamba = (h * (inner + conv_dim + m_heads) + conv_dim * (m_kernel + conv_bias) + 3 * m_heads
                 + inner * self.mamba_norm + inner * h + proj_bias * (inner + conv_dim + m_heads + h))
        m1_inner, m1_state, m1_kernel, dt_rank, m1_conv_bias, m1_bias, m1_norms = self.mamba1 or (0,) * 7
        mamba1 = (h * 2 * m1_inner + m1_inner * (m1_kernel + m1_conv_bias) + m1_inner * (dt_rank + 2 * m1_state)
                  + dt_rank * m1_inner + m1_inner + m1_inner * m1_state + m1_inner + m1_inner * h
                  + m1_norms * (dt_rank + 2 * m1_state) + m1_bias * (2 * m1_inner + h))  # vLLM's MambaMixer
        expert_inter = self.moe_intermediate_size or self.intermediate_size
        shared = self.num_shared_experts * self.expert_matrices * h * expert_inter + (
            self.expert_matrices * h * self.shared_expert_intermediate_size + h * self.shared_expert_gate
            if self.shared_expert_intermediate_size else 0)
        attention *= attention_layers
        if self.o_groups:  # DeepSeek V4: its attention, compressors and indexers layer by layer
            attention = sum(self._dsv4_attention(kind) for kind in kinds)
        mlp_layers = dense_layers + self.num_layers * self.mlps_beside_experts
        mlp = mlp_layers * self.mlp_matrices * h * self.intermediate_size
        norms = (self.weight_layers or self.num_layers) * self.norms_per_layer * h + h  # + the final norm
        if self.layer_kv_heads:  # NAS: each layer its own KV heads and MLP width, a norm before each it has
            q_width = self.num_attention_heads * self.head_dim
            attention = sum(2 * h * q_width + 2 * h * kv * self.head_dim for kv in self.layer_kv_heads if kv)
            mlp = sum(self.mlp_matrices * h * width for width in self.layer_mlp_widths)
            norms = h * (1 + sum(bool(kv) + bool(width)
                                 for kv, width in zip(self.layer_kv_heads, self.layer_mlp_widths, strict=True)))
        if self.global_attention != (0, 0):  # Gemma 4 (vllm/model_executor/models/gemma4.py)
            attention, mlp = self._gemma4_attention_and_mlp()
        # Gemma 4's per-layer inputs: an embedding of layers x width per token, its projection from the hidden state
        # and norm, and in each layer a gate, a projection back and a norm.
        vocab_pl, width = self.per_layer_input
        layers = self.num_layers
        per_layer = (vocab_pl * layers * width + h * layers * width + width + layers * (2 * h * width + h)
                     if width else 0)
        # Gemma 3n (vllm/model_executor/models/gemma3n.py): each layer's AltUp (correction and prediction
        # coefficients, modality router, correct_output_scale) and LAuReL (two low-rank projections); the model's
        # altup_projections and altup_unembed_projections, n - 1 square projections each.
        n, rank = self.altup_inputs, self.laurel_rank
        altup = (layers * (n * n + n ** 3 + h * n + h + 2 * h * rank) + 2 * (n - 1) * h * h) if n else 0
        if self.shared_blocks[0]:
            attention, mlp, norms = self._zamba2_shared(attention_layers, norms)
        return {
            "attention": attention + kinds.count("indexed") * indexer,
            "altup": altup,
            "linear": (kinds.count("linear") * linear + kinds.count("conv") * short_conv
                       + kinds.count("lightning") * lightning),
            "mamba": kinds.count("mamba") * mamba + kinds.count("mamba1") * mamba1,
            "kda": kinds.count("kda") * kda,
            "mlp": mlp,
            "per_layer_input": per_layer,
            "experts": moe_layers * self.num_experts * self.expert_matrices * h * expert_inter,
            "shared": moe_layers * shared,
            "router": moe_layers * (self.expert_routers * h * self.num_experts + self.num_experts * self.router_bias
                                    + (h + self.num_experts) * self.router_scales
                                    + (h + 1) * self.zero_experts + self.num_experts * bool(self.zero_experts))
            + self.hash_layers * (self.vocab_size * self.experts_per_token - self.num_experts * self.router_bias),
            "embeddings": self.vocab_size * h * (1 if self.tie_word_embeddings else 2),
            "vision": self.vision_parameters,
            "norms": norms,
            "hyper_connections": self.num_layers * hyper + (streams * streams * h + streams + 1
                                                            if streams and self.o_groups else 0),
        }

    def indexer_parameters(self) -> int:
        """An "indexed" layer's lightning indexer (vllm/models/deepseek_v32/attention.py DeepseekV32Indexer: wq_b, the
        fused wk / weights_proj, k_norm; GLM-5-Next's adds its pooling's position embedding and gate,
        index_kpool_compress_ape / _gate), which every tensor rank holds whole (ReplicatedLinear, disable_tp)."""
        i_heads, i_dim = self.indexer
        pooled = self.indexer_pool * i_dim + i_dim * self.hidden_size if self.indexer_pool > 1 else 0
        return self.q_lora_rank * i_heads * i_dim + self.hidden_size * (i_dim + i_heads) + 2 * i_dim + pooled

    def _dsv4_attention_parts(self, kind: str) -> dict[str, int]:
        """A DeepSeek V4 layer's attention parameters (vllm/models/deepseek_v4/attention.py) by where vLLM keeps them
        and how it stores them: "split", the linear layers its tensor ranks divide (wq_b, the grouped output
        projection: wo_a, each of o_groups groups of heads to o_lora_rank, and wo_b back to the hidden size), at the
        checkpoint's rate; "sink", the attention sink, one float32 per head, divided; "whole", the linear layers every
        rank holds whole at the checkpoint's rate (the fused q_a / kv projection, disable_tp; the indexer's wq_b,
        ReplicatedLinear); "whole_16", those it holds whole unquantized (quant_config None: the compressors' kv and gate
        projections, the indexer's weights_proj; the norms); "whole_32", the compressors' float32 position bias. At
        ratio 4 or 128 the compressor (compressor.py DeepseekCompressor: kv and gate projections of coff x head_dim,
        coff 2 at ratio 4, their position bias of ratio x that, a norm); at 4 the lightning indexer (DeepseekV4Indexer:
        wq_b, weights_proj and a compressor of its own head dim)."""
        h, heads, dim, q = self.hidden_size, self.num_attention_heads, self.head_dim, self.q_lora_rank
        parts = {"split": q * heads * dim + heads * dim * self.o_lora_rank + self.o_groups * self.o_lora_rank * h,
                 "sink": heads, "whole": h * (q + dim), "whole_16": q + dim, "whole_32": 0}
        ratio = DSV4_RATIOS.get(kind, 1)
        if ratio == 1:
            return parts
        coff = 2 if ratio == 4 else 1
        widths = [self.head_dim]
        if ratio == 4:
            i_heads, i_dim = self.indexer
            parts["whole"] += q * i_heads * i_dim
            parts["whole_16"] += h * i_heads
            widths.append(i_dim)
        for width in widths:  # a compressor of each width
            parts["whole_16"] += 2 * h * coff * width + width
            parts["whole_32"] += ratio * coff * width
        return parts

    def _dsv4_attention(self, kind: str) -> int:
        """A DeepSeek V4 layer's attention parameters, compressors and indexer included (_dsv4_attention_parts)."""
        return sum(self._dsv4_attention_parts(kind).values())

    def dsv4_layer_bytes(self, kind: str, unquantized_bytes: float) -> tuple[float, float]:
        """(bytes divided over tensor ranks, bytes every rank holds whole) of a DeepSeek V4 layer of `kind` beside its
        routed experts, as vLLM 0.32.0 builds it (vllm/models/deepseek_v4): its attention by _dsv4_attention_parts, the
        shared experts divided, the hyper-connections (float32) and the layer's two norms whole. The router (its
        float32 score bias, or a hash layer's int32 token table) is counted by planner/memory.py dsv4_groups."""
        parts = self._dsv4_attention_parts(kind)
        rate, h = self.part_rate("attention", unquantized_bytes), self.hidden_size
        split = (rate * parts["split"] + 4.0 * parts["sink"]
                 + self.part_rate("shared", unquantized_bytes) * self.num_shared_experts * 3 * h
                 * self.moe_intermediate_size)
        whole = rate * parts["whole"] + unquantized_bytes * (parts["whole_16"] + 2 * h) + 4.0 * parts["whole_32"]
        streams = self.hyper_connections
        mix = (2 + streams) * streams
        whole += 4.0 * 2 * (mix * streams * h + mix + 3) if streams else 0.0
        return split, whole

    def _gemma4_attention_and_mlp(self) -> tuple[int, int]:
        """Gemma 4's attention and MLP weights over all layers, as vLLM allocates them: the full-attention layers'
        own KV heads and head dim, q / k / v / o and q / k norms (vLLM keeps a V projection for attention_k_eq_v
        layers too, loading K into it), the KV-shared layers' q / o and q norm only, and their MLP twice as wide
        under use_double_wide_mlp."""
        h, heads = self.hidden_size, self.num_attention_heads
        first_shared = self.num_layers - self.kv_shared_layers
        attention = mlp = 0
        for i, kind in enumerate(self.kinds):
            kv, dim = self.global_attention if kind == "full" else (self.num_kv_heads, self.head_dim)
            shared = self.kv_shared_layers and i >= first_shared
            attention += 2 * h * heads * dim + dim + (0 if shared else 2 * h * kv * dim + dim)
            mlp += self.mlp_matrices * h * self.intermediate_size * (2 if shared and self.double_wide_mlp else 1)
        return attention, mlp

    def inkling_layer(self, index: int) -> dict[str, int]:
        """Inkling's decoder layer `index` as vLLM 0.32.0 builds it (vllm/models/inkling/nvidia), by part and where each
        rank keeps it: "attention", the fused q / k / v / relative projection (qkvr: heads x d_rel relative logits
        beside q, k and v, with its bias where q_bias) and wo_ud, divided; "conv", the K and V short convolutions (KV
        heads x head dim x kernel) and those of the attention and MLP outputs (hidden x kernel), divided; "whole", the
        relative-logit projection (d_rel x rel_extent, the window on sliding layers), q / k norms and the layer's two
        norms, every rank whole; below dense_mlp_idx "mlp", a dense gated MLP, divided; else "experts" (routed),
        "shared" (the n_shared_experts sink experts of the expert width, InklingSinkExperts, divided) and "router", the
        gate of routed + shared rows padded to a multiple of 8 (InklingGate, a plain parameter: whole), with a float32
        score bias per routed expert under use_gate_bias; a global scale per MLP under use_global_scale."""
        h, heads, kv, dim = self.hidden_size, self.num_attention_heads, self.num_kv_heads, self.head_dim
        d_rel, extent, kernel, s_heads, s_kv, s_dim, q_bias, _, gate_bias, scale = self.inkling
        local = self.kinds[index * self.cache_slots] == "sliding"
        n, k, d, e = (s_heads, s_kv, s_dim, self.window) if local else (heads, kv, dim, extent)
        parts = {"attention": (h + q_bias) * (n * d + 2 * k * d + n * d_rel) + n * d * h,
                 "conv": 2 * k * d * kernel + 2 * h * kernel, "whole": d_rel * e + 2 * d + 2 * h}
        if index < self.num_layers - self.moe_layers:
            return {**parts, "mlp": 3 * h * self.intermediate_size, "mlp_scale": scale}
        width, shared = self.moe_intermediate_size, self.num_shared_experts
        rows = self.num_experts + shared
        return {**parts, "experts": self.num_experts * 3 * h * width, "shared": shared * 3 * h * width,
                "router": (rows + -rows % 8) * h, "router_32": scale + gate_bias * self.num_experts}

    def _inkling_parts(self) -> dict[str, int]:
        """Inkling's parameters (inkling_layer for each layer), the embedding and lm_head of vocab_size rows
        (padded_vocab_size), the final norm and an embedding norm under use_embed_norm."""
        layers = [self.inkling_layer(i) for i in range(self.num_layers)]

        def total(*keys: str) -> int:
            return sum(layer.get(key, 0) for layer in layers for key in keys)

        h = self.hidden_size
        return {
            **dict.fromkeys(("altup", "linear", "mamba", "kda", "per_layer_input", "vision", "hyper_connections"), 0),
            "attention": total("attention"), "mlp": total("mlp", "mlp_scale"), "experts": total("experts"),
            "shared": total("shared"), "router": total("router", "router_32"), "embeddings": 2 * self.vocab_size * h,
            "norms": total("conv", "whole") + h + self.inkling[7] * h,
        }

    def _zamba2_block(self) -> tuple[int, int]:
        """(attention, MLP) weights of one of Zamba2's shared blocks (zamba2.py Zamba2AttentionDecoderLayer): a q / k
        / v projection from and to 2 x hidden_size and an output projection to hidden_size; a gated MLP of
        intermediate_size (without its biases)."""
        h = self.hidden_size
        return 2 * h * 6 * h + 2 * h * h, self.mlp_matrices * h * self.intermediate_size

    def _zamba2_shared(self, hybrid_layers: int, norms: int) -> tuple[int, int, int]:
        """Zamba2's attention, MLP and norm weights as vLLM allocates them (zamba2.py): num_mem_blocks shared blocks
        (_zamba2_block; the MLP's biases with add_bias_linear) with two norms each (2 x hidden_size and hidden_size
        wide); in each hybrid layer a hidden-size linear, an MLP adapter (hidden_size -> rank -> 2 x
        intermediate_size) and, with use_shared_attention_adapter, q / k / v adapters (2 x hidden_size -> rank ->
        2 x hidden_size)."""
        h, inter = self.hidden_size, self.intermediate_size
        blocks, rank, attention_adapters = self.shared_blocks
        bias = self.mamba[7] if self.mamba else 0  # add_bias_linear: the MLP's biases too
        block_attention, block_mlp = self._zamba2_block()
        attention = blocks * block_attention + hybrid_layers * (
            h * h + attention_adapters * 3 * (2 * h * rank + rank * 2 * h))
        mlp = blocks * (block_mlp + bias * (2 * inter + h)) + hybrid_layers * (h * rank + rank * 2 * inter)
        return attention, mlp, norms + blocks * 3 * h

    def rerun_parameters(self) -> int:
        """Parameters a token's forward multiplies by more than once, counted once for each further run: HRM-Text's
        stack layers, run num_layers times in all against weight_layers that hold them (hrm_text.py), and Zamba2's
        shared blocks, run by every hybrid layer against num_mem_blocks that hold them (zamba2.py). 0 elsewhere."""
        if self.weight_layers:
            parts = self.parameter_parts()
            per_layer = (parts["attention"] + parts["mlp"]) / self.weight_layers
            return round(per_layer * (self.num_layers - self.weight_layers))
        blocks = self.shared_blocks[0]
        if blocks:
            return sum(self._zamba2_block()) * (self.kinds.count("full") - blocks)
        return 0

    def weight_bytes(self, unquantized_bytes: float) -> float:
        """Bytes of all weights: the quantized parts at the checkpoint's rate, the rest at `unquantized_bytes`."""
        return sum(self.part_bytes(unquantized_bytes).values())

    def part_bytes(self, unquantized_bytes: float) -> dict[str, float]:
        """Bytes of each part (parameter_parts): its quantized share at the checkpoint's rate, the rest at
        `unquantized_bytes`."""
        return {part: count * self.part_rate(part, unquantized_bytes) for part, count in self.parameter_parts().items()}

    def part_rate(self, part: str, unquantized_bytes: float) -> float:
        """Bytes per parameter of a part (parameter_parts): its quantized share at the checkpoint's rate (the routed
        experts' own where they have one, expert_bytes_per_param), the rest at `unquantized_bytes`."""
        share = dict(self.quantized_share).get(part, 0.0)
        quantized = self.expert_bytes_per_param if part == "experts" and self.expert_bytes_per_param \
            else self.weight_bytes_per_param
        return share * quantized + (1 - share) * unquantized_bytes

    def routed_share(self, unquantized_bytes: float = 2.0) -> float:
        """The fraction of the weights in routed experts, as counted."""
        total = self.weight_bytes(unquantized_bytes)
        return self.routed_expert_bytes(unquantized_bytes) / total if self.num_experts and total else 0.0

    def routed_expert_bytes(self, unquantized_bytes: float) -> float:
        """Bytes of the routed experts alone (weight_bytes' "experts" part): what expert parallelism splits whole."""
        return self.part_bytes(unquantized_bytes)["experts"]

    def parameter_count(self) -> int:
        """Parameters of the whole checkpoint vLLM loads (every expert counted, vision tower included)."""
        return sum(self.parameter_parts().values())
