"""The KV cache as vLLM lays it out: one class per layer kind, and the pool rules that turn per-GPU bytes into the
`GPU KV cache size: N tokens` vLLM reports.

vLLM builds one KVCacheSpec per attention layer (vllm/v1/kv_cache_interface.py: FullAttentionSpec, MLAAttentionSpec,
SlidingWindowSpec, ChunkedLocalAttentionSpec, MambaSpec for Gated DeltaNet and Mamba-2 states; none for a layer
without attention or state, as NemotronH's MLP blocks); each spec has a page size (the bytes of one block of one
layer) and the blocks one request of max_model_len tokens may hold (max_admission_blocks_per_request). The classes
below are those specs as the planner needs them; `layer_specs` reads a model's per-layer pattern into them. The pool
rules (how layers share pages and how the stages of a pipeline split them) differ between vLLM releases: an engine
profile (planner/engine.py) names the one its release applies (`POOL_RULES`).

Adding a layer kind: one class here with its page and request blocks, its entry in `layer_specs`, and a case in
tests/engine/test_engine_kv_vllm.py that builds vLLM's own spec for it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from planner.architecture import ATTENTION_KINDS, DSV4_RATIOS, DTYPE_BYTES

if TYPE_CHECKING:
    from planner.architecture import ModelArchitecture

BLOCK_TOKENS = 16
"""vLLM's default block size on GPUs; FlashAttention's kernel blocks are multiples of it."""


INDEXER_PAGE_STATES = 32
"""DeepGEMM's smallest paged-MQA page, in cache entries, on Hopper and Blackwell data-center GPUs (vllm/utils/
deep_gemm.py get_paged_mqa_page_sizes: 32 and 64; only 64 on SM120, which the catalog has none of)."""


MLA_HYBRID_BLOCK_TOKENS = 128
"""vLLM 0.32.0 grows a latent-attention hybrid's block in steps of 128 tokens, which the TRTLLM / FlashInfer MLA
decode kernels need (vllm/platforms/interface.py, _align_hybrid_block_size: kernel_block_alignment_size 128 with
use_mla); 0.25.1 in steps of 16 (Kimi Linear cut to 12 layers on an H200: 'Setting attention block size to 1888
tokens', docs/benchmarks.md validation 12)."""


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Admission:
    """What a request may hold beyond its own tokens, by the engine settings (planner/engine.py EngineSettings)."""

    in_flight_tokens: int
    """Tokens scheduled but not yet computed that a sliding or chunked layer keeps (max_in_flight_tokens)."""
    state_blocks: int
    """Blocks a Mamba-style state takes per request (MambaSpec.max_memory_usage_bytes: 2 under 'align', else 1)."""


@dataclass(frozen=True)
class LayerSpec:
    """One decoder layer's cache on one GPU: `token_bytes` per token of an attention layer, `state_bytes` per request
    of a state layer."""

    kind = ""
    """The name planner/layers.py gives this kind in ModelArchitecture.layer_kinds."""
    token_bytes: float = 0.0

    def page_bytes(self, block: int) -> float:
        """Bytes of one block of this layer (KVCacheSpec.page_size_bytes)."""
        return block * self.token_bytes

    def request_blocks(self, max_len: int, block: int, admission: Admission) -> int:
        """Blocks one request of `max_len` tokens may hold (max_admission_blocks_per_request)."""
        raise NotImplementedError


@dataclass(frozen=True)
class FullAttention(LayerSpec):
    """FullAttentionSpec: K and V of every token, KV heads split over TP (a head replicated where TP exceeds them)."""

    kind = "full"

    def request_blocks(self, max_len: int, block: int, admission: Admission) -> int:
        return cdiv(max_len, block)


@dataclass(frozen=True)
class MLAAttention(FullAttention):
    """MLAAttentionSpec: one latent vector (kv_lora_rank + rope dims) per token, the same on every TP rank; admitted
    as full attention (it subclasses FullAttentionSpec)."""


@dataclass(frozen=True)
class IndexedMLA(MLAAttention):
    """Sparse latent attention (DeepSeek-V3.2, GLM-5): the layer's latent vector and, beside it, its lightning
    indexer's key cache, a second MLAAttentionSpec of index_head_dim FP8 bytes and a 4-byte scale per 128
    (vllm/model_executor/models/deepseek_v2.py DeepseekV32IndexerCache: uint8, head_dim + head_dim // 128 x 4).
    Both admit full attention's blocks, so vLLM keeps them in one group (UniformTypeKVCacheSpecs) and a block of
    this layer takes both pages: `token_bytes` is their sum."""

    kind = "indexed"
    latent_bytes: float = 0.0
    """The latent vector's bytes per token alone (the attention page vLLM pads a state to, _align_hybrid_block_size);
    0: token_bytes (no state layer beside it)."""
    tail_bytes: float = 0.0
    """GLM-5-Next's pooled indexer (vllm/models/glm5next/common/attention.py): its key cache holds one key per
    index_kpool tokens (Glm5NextIndexerCache, tokens_per_state), which token_bytes counts as that share, and the pool
    being filled sits in a ring of its own, one block per request (Glm5NextTailCache, a CircularBufferSpec of
    index_kpool slots x 2 x index_head_dim in bf16): its page. 0 for DeepSeek-V3.2's indexer."""
    kernel_block: int = 0
    """The indexer kernel's smallest block (Glm5NextIndexerBackend: index_kpool x 32, DeepGEMM's smallest paged-MQA
    page on Hopper and Blackwell): vLLM grows a hybrid's block to a multiple of it."""

    @property
    def attention_token_bytes(self) -> float:
        return self.latent_bytes or self.token_bytes


@dataclass(frozen=True)
class SlidingWindow(LayerSpec):
    """SlidingWindowSpec: a request keeps its window less one token, the tokens in flight, and one block more for a
    window that does not start on a block boundary."""

    kind = "sliding"
    window: int = 0

    def request_blocks(self, max_len: int, block: int, admission: Admission) -> int:
        return cdiv(min(self.window - 1 + admission.in_flight_tokens, max_len), block) + 1


@dataclass(frozen=True)
class ConvWindow(SlidingWindow):
    """Inkling's InklingConvState (vllm/models/inkling/nvidia/sconv_swa_attn.py): a SlidingWindowSpec of its own
    block_size, sliding_window = block_size = sconv_kernel_size, holding the K, V, attention-output and MLP-output
    convolution streams of the layer's KV heads on this rank, each head's width padded to a power of two (conv_state
    _bytes); admitted as any sliding window."""

    kind: str = "sconv"
    own_block: int = 0
    """Tokens per block of this cache alone (its kernel size), whatever the pool's block_size."""

    def page_bytes(self, block: int) -> float:
        return self.own_block * self.token_bytes


def conv_state(kv_heads: int, head_dim: int, hidden: int, kernel: int, tp: int, kind: str) -> ConvWindow:
    """An Inkling layer's conv state on one GPU of a TP group: kv_heads // tp heads (vLLM asserts tp <= kv_heads) of
    the next power of two above 2 x head_dim + 2 x hidden / kv_heads, bfloat16 (the only dtype InklingConvState
    takes), sconv_kernel_size tokens a block and its window."""
    raw = 2 * head_dim + 2 * (hidden // kv_heads)
    width = 1 << (raw - 1).bit_length()
    return ConvWindow(kv_heads // tp * width * DTYPE_BYTES["bfloat16"], window=kernel, kind=kind, own_block=kernel)


@dataclass(frozen=True)
class ChunkedLocal(LayerSpec):
    """ChunkedLocalAttentionSpec: a request keeps its current chunk and the tokens in flight."""

    kind = "chunked"
    chunk: int = 0

    def request_blocks(self, max_len: int, block: int, admission: Admission) -> int:
        return cdiv(min(self.chunk + admission.in_flight_tokens, max_len), block)


@dataclass(frozen=True)
class LinearState(LayerSpec):
    """MambaSpec for a Gated DeltaNet layer: a fixed state per request, its page padded to the attention page
    (vLLM grows the attention block until one page holds a state: vllm/platforms/interface.py,
    _align_hybrid_block_size)."""

    kind = "linear"
    state_bytes: float = 0.0

    def request_blocks(self, max_len: int, block: int, admission: Admission) -> int:
        return admission.state_blocks


@dataclass(frozen=True)
class MambaState(LinearState):
    """MambaSpec for a Mamba-2 mixer (NemotronH, Granite 4.0-H): a conv state and an SSM state per request, padded to
    the attention page as a Gated DeltaNet state is."""

    kind = "mamba"


@dataclass(frozen=True)
class Mamba1State(LinearState):
    """MambaSpec for a Mamba-1 mixer (Jamba): a conv state and an intermediate x state_size SSM state per request,
    padded to the attention page."""

    kind = "mamba1"


@dataclass(frozen=True)
class KDAState(LinearState):
    """MambaSpec for a Kimi Delta Attention layer (Kimi Linear): a short-conv state over q, k and v and a
    heads x head_dim x head_dim recurrent state kept in float32, padded to the attention page."""

    kind = "kda"


@dataclass(frozen=True)
class ShortConvState(LinearState):
    """MambaSpec for an LFM2 short-convolution layer: its last kernel - 1 inputs over its channels, in the model dtype,
    padded to the attention page."""

    kind = "conv"


@dataclass(frozen=True)
class LightningState(LinearState):
    """MambaSpec for a Ling 2.5 linear-attention layer: a heads x head_dim x head_dim state per request in the
    conv-state dtype, padded to the attention page."""

    kind = "lightning"


@dataclass(frozen=True)
class NoCache(LayerSpec):
    """A layer with neither attention nor state (NemotronH's MLP and expert blocks): vLLM declares no spec for it,
    but it still counts in the pipeline split (get_pp_indices splits all layers)."""

    kind = "none"

    def request_blocks(self, max_len: int, block: int, admission: Admission) -> int:
        return 0


@dataclass(frozen=True)
class PackedCache:
    """One of the caches a DeepSeek V4 layer declares, as vLLM 0.32.0 packs it block-outermost: its page (the bytes of
    one block, padded to the backend's alignment) and how many tokens a block holds and for how long a request keeps
    them."""

    page: int
    block: int = 0
    """Tokens per block where the cache sets its own (the SWA cache's 64, a compressor state's 4 or 8); 0: the pool's
    cache_config.block_size."""
    window: int = 0
    """A sliding window (SlidingWindowMLASpec): a request keeps window - 1 tokens and those in flight; 0: every token of
    max_model_len (MLAAttentionSpec, however many tokens one stored state covers)."""

    def bucket(self, block: int) -> tuple[int, int]:
        """The uniform-type bucket vLLM puts it in (UniformTypeKVCacheSpecs.is_uniform_type): the same block size, and
        for a sliding cache the same window."""
        return self.window, self.block or block

    def request_blocks(self, max_len: int, block: int, admission: Admission) -> int:
        if self.window:
            return cdiv(min(self.window - 1 + admission.in_flight_tokens, max_len), self.block or block) + 1
        return cdiv(max_len, self.block or block)


@dataclass(frozen=True)
class CompressedLayer(LayerSpec):
    """A DeepSeek V4 layer: the caches vLLM 0.32.0's DeepseekV4Attention declares (vllm/models/deepseek_v4), each a
    spec of its own that the block-outermost pool packs beside the others (packed_caches): the sliding-window cache
    every layer has (DeepseekV4SWACache), and where the layer compresses (compress_ratios 4 or 128) its compressed
    latent cache (one state per compress_ratio tokens) and its compressor's state (CompressorStateCache); at ratio 4
    also the lightning indexer's compressed key cache (DeepseekV4IndexerCache) and its compressor's state."""

    kind: str = "swa"
    caches: tuple[PackedCache, ...] = ()


DSV4_BLOCK_TOKENS = 256
"""cache_config.block_size of a DeepSeek V4 model on NVIDIA GPUs: the only kernel block FlashMLA's sparse DSV4 backend
supports (vllm/models/deepseek_v4/sparse_mla.py get_supported_kernel_block_sizes), which the compressed caches take."""
DSV4_SWA_BLOCK_TOKENS = 64
"""Tokens per block of DeepseekV4SWACache (vllm/v1/attention/backends/mla/sparse_swa.py: its default block_size)."""
DSV4_TOKEN_BYTES = 584
"""A latent row in the fp8_ds_mla layout: 448 FP8 NoPE bytes, 64 bf16 RoPE dims and 8 bytes of UE8M0 scales
(DeepseekV4Attention.get_kv_cache_spec state_content_bytes)."""
DSV4_PAGE_ALIGNMENT = 576
"""The fp8_ds_mla layout pads every page of a DeepSeek V4 cache to a multiple of this (FlashMLA's packing stride,
kv_cache_interface.py _apply_alignment_padding)."""


def dsv4_layer(kind: str, head_dim: int, index_head_dim: int, window: int) -> CompressedLayer:
    """A DeepSeek V4 layer of `kind` (its compress ratio DSV4_RATIOS[kind], 1: the sliding window alone) as vLLM
    0.32.0 declares it on NVIDIA GPUs (FlashMLA, so the fp8_ds_mla layout): each page padded to DSV4_PAGE_ALIGNMENT.
    The compressor keeps kv and score states of coff x head_dim float32 per token over a window of coff x ratio
    tokens, coff 2 at ratio 4 (overlapping windows) and 1 at 128, in blocks of 4 or 8 (compressor.py
    CompressorStateCache). The indexer's keys are FP8 with a float32 scale per 128 (its k_cache head_dim + head_dim //
    128 x 4 bytes)."""

    def page(tokens: int, row: int) -> int:
        return cdiv(tokens * row, DSV4_PAGE_ALIGNMENT) * DSV4_PAGE_ALIGNMENT

    ratio = DSV4_RATIOS[kind]
    caches = [PackedCache(page(DSV4_SWA_BLOCK_TOKENS, DSV4_TOKEN_BYTES), DSV4_SWA_BLOCK_TOKENS, window)]
    if ratio > 1:
        coff = 2 if ratio == 4 else 1
        state_block = 4 if ratio == 4 else 8
        caches += [PackedCache(page(DSV4_BLOCK_TOKENS // ratio, DSV4_TOKEN_BYTES)),
                   PackedCache(page(state_block, 2 * coff * head_dim * 4), state_block, coff * ratio)]
        if ratio == 4:
            caches += [PackedCache(page(DSV4_BLOCK_TOKENS // ratio, indexer_key_bytes(index_head_dim))),
                       PackedCache(page(state_block, 2 * coff * index_head_dim * 4), state_block, coff * ratio)]
    return CompressedLayer(kind=kind, caches=tuple(caches))


MAMBA_DTYPES = ("auto", "float32", "float16", "bfloat16")
"""What --mamba-cache-dtype and --mamba-ssm-cache-dtype accept (vllm/config/cache.py MambaDType)."""


@dataclass(frozen=True)
class StateDtypes:
    """The dtypes vLLM 0.32.0 keeps Mamba-style states in (vllm/model_executor/layers/mamba/mamba_utils.py
    MambaStateDtypeCalculator): conv states in --mamba-cache-dtype, the model's under auto; an SSM or recurrent state
    in --mamba-ssm-cache-dtype, under auto the one the family's config class sets (NemotronH, Qwen3.5:
    ModelArchitecture.mamba_ssm_dtype), else the conv states'. A Kimi Delta Attention state is float32 under auto."""

    model_bytes: float = 2.0
    """The model dtype's bytes (--dtype: 4 for float32, else 2)."""
    cache: str = "auto"
    """--mamba-cache-dtype."""
    ssm: str = "auto"
    """--mamba-ssm-cache-dtype."""
    kda_flag: bool = True
    """Whether a Kimi Delta Attention recurrent state follows `ssm` (EngineProfile.kda_ssm_flag; 0.25.1: float32
    always)."""

    @property
    def conv_bytes(self) -> float:
        return self.model_bytes if self.cache == "auto" else DTYPE_BYTES[self.cache]

    def ssm_bytes(self, family: str = "") -> float:
        """An SSM state's bytes per element (_mamba_state_dtype), `family` the dtype the model's config class sets
        under auto ("" for none)."""
        if self.ssm != "auto":
            return DTYPE_BYTES[self.ssm]
        return DTYPE_BYTES[family] if family else self.conv_bytes

    @property
    def kda_bytes(self) -> float:
        """A Kimi Delta Attention recurrent state's bytes per element (kda_state_dtype: float32 under auto, and
        always where the release ignores the flag)."""
        return 4.0 if self.ssm == "auto" or not self.kda_flag else DTYPE_BYTES[self.ssm]


def attention_spec(arch: ModelArchitecture, tp: int, kv_dtype_bytes: float) -> FullAttention:
    """The model's full-attention layer on one GPU of a TP group: MLA's latent vector, replicated on every rank, or K
    and V of its KV heads (a head replicated where TP exceeds them), of the full layers' own shape where it differs
    (Gemma 4)."""
    if arch.kv_lora_rank:
        return MLAAttention((arch.kv_lora_rank + arch.qk_rope_head_dim) * kv_dtype_bytes)
    kv_heads, head_dim = arch.global_attention if arch.global_attention != (0, 0) else (arch.num_kv_heads,
                                                                                         arch.head_dim)
    return full_attention(kv_heads, head_dim, tp, kv_dtype_bytes)


def full_attention(kv_heads: int, head_dim: int, tp: int, kv_dtype_bytes: float) -> FullAttention:
    """K and V of `kv_heads` heads on one GPU of a TP group (a head replicated where TP exceeds them)."""
    return FullAttention(2 * max(kv_heads / tp, 1) * head_dim * kv_dtype_bytes)


def layer_specs(arch: ModelArchitecture, tp: int, kv_dtype_bytes: float,
                states: StateDtypes = StateDtypes()) -> tuple[LayerSpec, ...]:
    """One spec per decoder layer of `arch` on one GPU of a TP group, Mamba-style states in `states`' dtypes."""
    attention = attention_spec(arch, tp, kv_dtype_bytes)
    local = 2 * max(arch.num_kv_heads / tp, 1) * arch.head_dim * kv_dtype_bytes  # sliding and chunked layers
    made: dict[str, LayerSpec] = {"full": attention}
    if "indexed" in arch.kinds:
        pool, index_dim = arch.indexer_pool, arch.indexer[1]
        made["indexed"] = IndexedMLA(attention.token_bytes + indexer_key_bytes(index_dim) / pool,
                                     latent_bytes=attention.token_bytes if pool > 1 else 0.0,
                                     # the ring: index_kpool slots of a key and a gate score, bf16
                                     tail_bytes=pool * 2 * index_dim * 2.0 if pool > 1 else 0.0,
                                     kernel_block=pool * INDEXER_PAGE_STATES if pool > 1 else 0)
    if arch.inkling:  # its sliding layers' own heads, and the conv state of each kind of layer
        _, _, kernel, _, s_kv, s_dim = arch.inkling[:6]
        local = 2 * max(s_kv / tp, 1) * s_dim * kv_dtype_bytes
        made["sconv"] = conv_state(arch.num_kv_heads, arch.head_dim, arch.hidden_size, kernel, tp, "sconv")
        made["sconv_local"] = conv_state(s_kv, s_dim, arch.hidden_size, kernel, tp, "sconv_local")
    specs: list[LayerSpec] = []
    for i, kind in enumerate(arch.kinds):
        if kind == "full" and arch.layer_kv_heads:  # NAS: the layer's own KV heads (UniformTypeKVCacheSpecs)
            specs.append(full_attention(arch.layer_kv_heads[i], arch.head_dim, tp, kv_dtype_bytes))
            continue
        if kind not in made:
            if kind == "sliding":
                made[kind] = SlidingWindow(local, window=arch.window)
            elif kind == "chunked":
                made[kind] = ChunkedLocal(local, chunk=arch.window)
            elif kind == "linear":
                made[kind] = LinearState(attention.token_bytes,
                                         state_bytes=gated_delta_net_state_bytes(arch, tp, states))
            elif kind == "mamba":
                made[kind] = MambaState(attention.token_bytes,
                                        state_bytes=mamba2_state_bytes(arch, tp, states))
            elif kind == "mamba1":
                made[kind] = Mamba1State(attention.token_bytes,
                                         state_bytes=mamba1_state_bytes(arch, tp, states))
            elif kind == "kda":
                made[kind] = KDAState(attention.token_bytes, state_bytes=kda_state_bytes(arch, tp, states))
            elif kind == "lightning":
                made[kind] = LightningState(attention.token_bytes, state_bytes=lightning_state_bytes(arch, tp, states))
            elif kind == "conv":
                made[kind] = ShortConvState(attention.token_bytes,
                                            state_bytes=short_conv_state_bytes(arch, tp, states))
            elif kind in DSV4_RATIOS:
                made[kind] = dsv4_layer(kind, arch.head_dim, arch.indexer[1], arch.window)
            elif kind == "none":
                made[kind] = NoCache()
            else:
                raise ValueError(f"no KV-cache spec for layer kind {kind!r}")
        specs.append(made[kind])
    first_shared = len(specs) - arch.kv_shared_layers  # Gemma 4: these read an earlier layer's cache
    return tuple(spec if i < first_shared else NoCache() for i, spec in enumerate(specs))


def gated_delta_net_state_bytes(arch: ModelArchitecture, tp: int, states: StateDtypes) -> float:
    """One Gated DeltaNet layer's state per request on one GPU: the conv state of (kernel - 1) steps over
    2 x key + value channels in the conv dtype and the v_heads x v_dim x k_dim recurrent state in the SSM-state
    dtype (Qwen3.5 under auto: its config's mamba_ssm_dtype, float32 in the published checkpoints;
    vllm/model_executor/layers/mamba/mamba_utils.py, gated_delta_net_state_shape / _mamba_state_dtype)."""
    k_heads, v_heads, k_dim, v_dim, kernel = arch.linear_attention
    conv = (2 * k_heads * k_dim + v_heads * v_dim) / tp * (kernel - 1)
    return conv * states.conv_bytes + v_heads / tp * v_dim * k_dim * states.ssm_bytes(arch.mamba_ssm_dtype)


def mamba1_state_bytes(arch: ModelArchitecture, tp: int, states: StateDtypes) -> float:
    """One Mamba-1 layer's state per request on one GPU: the conv state of (kernel - 1) steps over the intermediate
    size in the conv dtype and its intermediate x state_size SSM state in the SSM-state dtype (vllm/model_executor/
    layers/mamba/mamba_utils.py, mamba1_state_shape, mamba1_state_dtype)."""
    inner, state, kernel = arch.mamba1[:3]
    return inner // tp * ((kernel - 1) * states.conv_bytes + state * states.ssm_bytes(arch.mamba_ssm_dtype))


def kda_state_bytes(arch: ModelArchitecture, tp: int, states: StateDtypes) -> float:
    """One Kimi Delta Attention layer's state per request on one GPU: the conv state of (kernel - 1) steps over q, k
    and v (3 x heads x head_dim channels) in the conv dtype and the heads x head_dim x head_dim recurrent state,
    float32 under mamba_ssm_cache_dtype auto (vllm/model_executor/layers/mamba/mamba_utils.py, kda_state_shape,
    kda_state_dtype)."""
    heads, head_dim, kernel = arch.kda
    recurrent = states.kda_bytes if arch.kda_state_flag else 4.0  # Ling 3.0: float32 whatever the flag
    return (3 * heads * head_dim // tp * (kernel - 1) * states.conv_bytes
            + heads // tp * head_dim * head_dim * recurrent)


def lightning_state_bytes(arch: ModelArchitecture, tp: int, states: StateDtypes) -> float:
    """One Ling 2.5 linear-attention layer's state per request on one GPU: heads / TP x head_dim x head_dim in the
    conv-state dtype, the model's under auto (vllm/model_executor/layers/mamba/mamba_utils.py,
    linear_attention_state_shape / linear_attention_state_dtype)."""
    heads, head_dim, _, _ = arch.lightning
    return heads // tp * head_dim * head_dim * states.conv_bytes


def short_conv_state_bytes(arch: ModelArchitecture, tp: int, states: StateDtypes) -> float:
    """One LFM2 short-convolution layer's state per request on one GPU: kernel - 1 inputs over its channels split over
    TP, in the conv dtype (vllm/model_executor/layers/mamba/mamba_utils.py, short_conv_state_shape /
    short_conv_state_dtype)."""
    channels, kernel, _ = arch.short_conv
    return channels // tp * (kernel - 1) * states.conv_bytes


def indexer_key_bytes(index_head_dim: int) -> int:
    """Bytes of one token's indexer key: FP8 values and a float32 scale per 128 of them, stored as uint8
    (vllm/models/deepseek_v32/attention.py: head_dim + head_dim // quant_block_size x 4, quant_block_size 128)."""
    return index_head_dim + index_head_dim // 128 * 4


def mamba2_state_bytes(arch: ModelArchitecture, tp: int, states: StateDtypes) -> float:
    """One Mamba-2 layer's state per request on one GPU: the conv state of (kernel - 1) steps over the intermediate
    size and 2 x groups x state size (groups padded to TP where TP does not divide them), in the conv dtype, and the
    heads x head_dim x state_size SSM state in the SSM-state dtype (vllm/model_executor/layers/mamba/mamba_utils.py,
    mamba2_state_shape, extra_groups_for_head_shards, _mamba_state_dtype)."""
    inner, groups, heads, head_dim, state, kernel = arch.mamba[:6]
    groups += 0 if groups % tp == 0 else tp - groups
    conv = (inner + 2 * groups * state) // tp * (kernel - 1)
    return conv * states.conv_bytes + heads // tp * head_dim * state * states.ssm_bytes(arch.mamba_ssm_dtype)


def bytes_per_token(arch: ModelArchitecture, tp: int, pp: int, kv_dtype_bytes: float) -> float:
    """KV-cache bytes one token takes on one GPU of a TP x PP replica when every layer were full attention (the
    figure a replica whose pool is empty is described by)."""
    return math.ceil(arch.num_layers / pp) * attention_spec(arch, tp, kv_dtype_bytes).token_bytes


def _attention(specs: tuple[LayerSpec, ...]) -> LayerSpec | None:
    return next((spec for spec in specs if spec.kind in ATTENTION_KINDS), None)


def _attention_token_bytes(spec: LayerSpec) -> float:
    """Bytes per token of the attention page a state is padded to (a pooled indexer's keys not included)."""
    return spec.attention_token_bytes if isinstance(spec, IndexedMLA) else spec.token_bytes


def _full_only(specs: tuple[LayerSpec, ...]) -> bool:
    """Every layer that holds a cache admits as full attention (vLLM: one group of all of them,
    UniformTypeKVCacheSpecs, whose block takes each layer's page, whatever its size)."""
    return all(isinstance(spec, FullAttention) for spec in specs if not isinstance(spec, NoCache))


def block_tokens(specs: tuple[LayerSpec, ...], mla_align: int = BLOCK_TOKENS) -> int:
    """Tokens per block: 16, or with state layers the smallest multiple of 16 (of `mla_align` beside latent
    attention) whose attention page holds one state."""
    states = [s.state_bytes for s in specs if isinstance(s, LinearState)]
    attention = _attention(specs)
    if not states or attention is None:
        return BLOCK_TOKENS
    align = mla_align if isinstance(attention, MLAAttention) else BLOCK_TOKENS
    block = align * math.ceil(max(states) / (align * _attention_token_bytes(attention)))
    kernel = max((s.kernel_block for s in specs if isinstance(s, IndexedMLA)), default=0)
    return kernel * cdiv(block, kernel) if kernel else block  # a multiple of every kernel's smallest block


def page_bytes(specs: tuple[LayerSpec, ...], block: int) -> float:
    """The page every cached layer's block takes: the attention page (states padded to it), or a state's own where
    no layer attends."""
    attention = _attention(specs)
    if attention is None:
        return max(s.state_bytes for s in specs if isinstance(s, LinearState))
    return block * _attention_token_bytes(attention)


def group_size(counts: list[int]) -> int:
    """Layers per KV-cache group when kinds mix: the smallest kind's count, or the largest when it is under 1.5 x
    the smallest (vllm/v1/core/kv_cache_utils.py, _get_kv_cache_groups_uniform_page_size)."""
    return max(counts) if max(counts) < 1.5 * min(counts) else min(counts)


def _by_kind(specs: tuple[LayerSpec, ...]) -> dict[str, list[int]]:
    """Indices of the layers of each kind that holds a cache."""
    out: dict[str, list[int]] = {}
    for index, spec in enumerate(specs):
        if not isinstance(spec, NoCache):
            out.setdefault(spec.kind, []).append(index)
    return out


def pool_first_stage(specs: tuple[LayerSpec, ...], pp: int, available: float, max_len: int,
                     admission: Admission, slots: int = 1) -> int:
    """vLLM 0.25.1 (vllm/v1/core/kv_cache_utils.py): the first pipeline stage's layers alone, all-full attention as
    bytes per token, otherwise groups of group_size layers sharing pages and max concurrency x max_model_len
    (get_kv_cache_capacity)."""
    if available <= 0:
        return 0
    stage = first_stage(specs, pp, slots)
    if _full_only(stage):
        return int(available // sum(spec.token_bytes for spec in stage))
    width, per_request = first_stage_blocks(stage, max_len, admission)
    return int(available // width / per_request * max_len)


def first_stage(specs: tuple[LayerSpec, ...], pp: int, slots: int) -> tuple[LayerSpec, ...]:
    """The layers of the first pipeline stage as vLLM 0.25.1's pool reads them."""
    return specs[:math.ceil(len(specs) // slots / pp) * slots]


def first_stage_blocks(stage: tuple[LayerSpec, ...], max_len: int, admission: Admission) -> tuple[float, int]:
    """pool_first_stage's blocks where kinds mix: (the bytes of a block, the blocks a request holds)."""
    by_kind = _by_kind(stage)
    block = block_tokens(stage)  # blocks in steps of 16 beside latent attention too
    size = group_size([len(layers) for layers in by_kind.values()])
    per_request = sum(math.ceil(len(layers) / size) * stage[layers[0]].request_blocks(max_len, block, admission)
                      for layers in by_kind.values())
    return page_bytes(stage, block) * size, per_request


def pool_grouped(specs: tuple[LayerSpec, ...], pp: int, available: float, max_len: int,
                 admission: Admission, slots: int = 1) -> int:
    """vLLM 0.32.0 (vllm/v1/core/kv_cache_utils.py, get_kv_cache_configs): the whole model's layers of one kind dealt
    round-robin into cdiv(count, group_size) groups (one group when every layer is of one kind); each pipeline stage
    (get_pp_indices) needs a page per layer of its largest group per block, the stage with the fewest blocks sets the
    pool, and the size is num_blocks / blocks per request x max_model_len (get_kv_cache_capacity)."""
    if available <= 0:
        return 0
    width, per_request = grouped_blocks(specs, pp, max_len, admission, slots)
    return int(int(available // width) / per_request * max_len)


def grouped_blocks(specs: tuple[LayerSpec, ...], pp: int, max_len: int, admission: Admission,
                   slots: int) -> tuple[float, int]:
    """pool_grouped's blocks: (the bytes of a block on the stage with the most, the blocks a request holds)."""
    bounds = stage_bounds(len(specs), pp, slots)
    if any(isinstance(spec, CompressedLayer) for spec in specs):
        caches = [(layer, cache) for layer, spec in enumerate(specs) if isinstance(spec, CompressedLayer)
                  for cache in spec.caches]
        entries = [(layer, cache.bucket(DSV4_BLOCK_TOKENS), cache.page,
                    cache.request_blocks(max_len, DSV4_BLOCK_TOKENS, admission), False) for layer, cache in caches]
        widest, requests = packed_caches(entries, bounds)
        return max(widest), requests
    block = block_tokens(specs, MLA_HYBRID_BLOCK_TOKENS)
    if _full_only(specs):
        return (max(sum(spec.page_bytes(block) for spec in specs[start:stop]) for start, stop in bounds),
                cdiv(max_len, block))
    page = page_bytes(specs, block)
    if any(isinstance(spec, IndexedMLA) and spec.tail_bytes for spec in specs):
        widest, requests = packed_caches(pooled_indexer_entries(specs, max_len, admission, block, page), bounds)
        return max(widest), requests
    by_kind = _by_kind(specs)
    page, blocks_of = unified_pages(specs, by_kind, block, page)
    groups = kind_groups(by_kind)
    widest = max(sum(1 for layer in g if start <= layer < stop) for start, stop in bounds for g in groups)
    per_request = sum(specs[g[0]].request_blocks(max_len, blocks_of[specs[g[0]].kind], admission) for g in groups)
    return page * widest, per_request


def kind_groups(by_kind: dict[str, list[int]]) -> list[list[int]]:
    """The KV-cache groups of vLLM 0.32.0's get_kv_cache_groups: one group when every cached layer is of one kind,
    else each kind's layers dealt round-robin into cdiv(count, group_size) groups."""
    if len(by_kind) == 1:
        return list(by_kind.values())
    size = group_size([len(layers) for layers in by_kind.values()])
    groups = []
    for layers in by_kind.values():
        n = math.ceil(len(layers) / size)
        groups.extend(layers[i::n] for i in range(n))
    return groups


def pooled_indexer_entries(specs: tuple[LayerSpec, ...], max_len: int, admission: Admission, block: int,
                           state_page: float) -> list[PackedEntry]:
    """The caches of a model with a pooled indexer (GLM-5-Next) for packed_caches, the block-outermost layout its
    ring needs (KpoolTailBackend takes BLHNC only): a latent layer's latent page and its pooled keys' page (one
    bucket of full attention), the ring of the pool being filled (a circular buffer, one block per request), and each
    state layer's state, padded to the latent page."""
    entries: list[PackedEntry] = []
    for layer, spec in enumerate(specs):
        if isinstance(spec, IndexedMLA):
            request = spec.request_blocks(max_len, block, admission)
            latent = block * spec.attention_token_bytes
            entries += [(layer, (0, block), latent, request, False),
                        (layer, (0, block), spec.page_bytes(block) - latent, request, False),
                        (layer, ("ring",), spec.tail_bytes, 1, True)]
        elif isinstance(spec, LinearState):
            entries.append((layer, ("state", spec.kind), state_page,
                            spec.request_blocks(max_len, block, admission), True))
    return entries


PackedEntry = tuple[int, tuple, float, int, bool]
"""One cache of one layer in a block-outermost pool: (the layer's index in the layer specs, its uniform-type bucket,
its page in bytes, the blocks a request holds of it, whether vLLM splits its bucket as a state's: a Mamba state or a
circular buffer)."""


def packed_caches(entries: list[PackedEntry], bounds: list[tuple[int, int]]) -> tuple[list[float], int]:
    """(the bytes of a block on each pipeline stage, the blocks a request holds) of caches vLLM 0.32.0 packs
    block-outermost (vllm/v1/core/kv_cache_utils.py, _get_packed_kv_cache_groups), pages of several sizes in one block.
    The caches fall into buckets of one uniform type, in the order they first appear. A bucket is balanced when each of
    its page sizes has as many caches; the balanced buckets that mix page sizes must stay whole, so the largest of them
    is the least number of repeats a group takes, and the repeats are the approximate_gcd of the balanced buckets'
    largest counts. A balanced bucket is dealt into cdiv(count, repeats) groups of whole repeats (its page sizes side by
    side), any other bucket is one group; a state's bucket (or, with no repeats, a sliding window's) takes as many
    groups as the widest group's bytes (the anchor) leave room for. A block of the pool is as wide as the widest group
    on the stage with the most; a request holds, in every group, the blocks its widest-held cache needs."""
    buckets: dict[tuple, list[PackedEntry]] = {}
    for entry in entries:
        buckets.setdefault(entry[1], []).append(entry)
    shaped = []  # (entries, {page: entries}, balanced, the most of one page size)
    for members in buckets.values():
        pages: dict[float, list[PackedEntry]] = {}
        for entry in members:
            pages.setdefault(entry[2], []).append(entry)
        counts = [len(same) for same in pages.values()]
        shaped.append((members, pages, len(set(counts)) == 1, max(counts)))
    least = max((most for _, pages, balanced, most in shaped if balanced and len(pages) > 1), default=0)
    repeats = approximate_gcd([most for *_, balanced, most in shaped if balanced], least) if least else 0

    def split(balanced: bool, most: int) -> int:
        return cdiv(most, repeats) if balanced and repeats else 1

    def state(members: list[PackedEntry]) -> bool:
        return members[0][4] or (not repeats and members[0][1][0] > 0)  # the bucket's key: (window, block)

    anchor = max(sum(cdiv(len(same), len(members) if state(members) else split(balanced, most)) * page
                     for page, same in pages.items()) for members, pages, balanced, most in shaped)
    groups = []
    for members, pages, balanced, most in shaped:
        n = split(balanced, most)
        if state(members):
            n = max(n, cdiv(len(members), max(int(anchor // members[0][2]), 1)))
        if n == 1:
            groups.append(members)
            continue
        repeated = list(zip(*pages.values(), strict=False))
        groups.extend([entry for repeat in repeated[i::n] for entry in repeat] for i in range(n))
    widest = [max(sum(page for layer, _, page, *_ in group if start <= layer < stop) for group in groups)
              for start, stop in bounds]
    return widest, sum(max(entry[3] for entry in group) for group in groups)


def approximate_gcd(values: list[int], lower_bound: int = 1) -> int:
    """The group size in [lower_bound, max(values)] that pads the values up to its multiples least, the larger on a
    tie (vllm/v1/core/kv_cache_utils.py, _approximate_gcd)."""
    best, best_pad = lower_bound, None
    for d in range(max(lower_bound, 1), max(values) + 1):
        pad = sum((d - x % d) % d for x in values)
        if best_pad is None or pad <= best_pad:
            best, best_pad = d, pad
    return best


def unified_pages(specs: tuple[LayerSpec, ...], by_kind: dict[str, list[int]], block: int,
                  page: float) -> tuple[float, dict[str, int]]:
    """The page every layer's block takes once vLLM makes pages equal (the largest attention page, else `page`), and
    the tokens per block of each kind (the pool's block, or a cache's own: Inkling's conv states): a kind whose page
    divides the largest takes that many times more tokens per block, another is padded to the largest page and keeps
    its tokens (vllm/v1/core/kv_cache_utils.py, unify_kv_cache_spec_page_size: Gemma 4's full layers beside its
    sliding ones). A state is padded to the attention page."""
    pages = {kind: specs[layers[0]].page_bytes(block) for kind, layers in by_kind.items()
             if not isinstance(specs[layers[0]], LinearState)}
    largest = max(pages.values(), default=0)
    blocks = {}
    for kind, layers in by_kind.items():
        own, base = pages.get(kind, 0), getattr(specs[layers[0]], "own_block", 0) or block
        blocks[kind] = base * int(largest // own) if own and largest % own == 0 else base
    return max(page, largest), blocks


PoolRule = Callable[[tuple[LayerSpec, ...], int, float, int, Admission, int], int]
POOL_RULES: dict[str, PoolRule] = {"first-stage": pool_first_stage, "grouped": pool_grouped}
"""The pool rules by the name an engine profile gives them."""


def block_bytes(specs: tuple[LayerSpec, ...], pp: int, rule: str, slots: int = 1) -> float:
    """The bytes one block of the KV cache takes on the GPU of the stage with the most, by the pool rule (the
    divisor of available memory in pool_first_stage / pool_grouped): num_blocks x this is what the cache allocates
    (0.32.0: one backing allocation the groups overlay, vllm/v1/worker/utils.py; 0.25.1: a tensor of num_blocks
    pages per slot of a group); 0 where no layer holds a cache."""
    if all(isinstance(spec, NoCache) for spec in specs):
        return 0.0
    if rule == "first-stage":
        stage = first_stage(specs, pp, slots)
        if _full_only(stage):
            return BLOCK_TOKENS * sum(spec.token_bytes for spec in stage)
        return first_stage_blocks(stage, 1, Admission(0, 1))[0]
    return grouped_blocks(specs, pp, 1, Admission(0, 1), slots)[0]


def pool_block_tokens(specs: tuple[LayerSpec, ...], pp: int, rule: str, slots: int = 1) -> int:
    """cache_config.block_size as the pool rule sets it: 16, or a hybrid's grown block (block_tokens; 0.25.1 in steps
    of 16 over its first stage's layers, 0.32.0 of MLA_HYBRID_BLOCK_TOKENS beside latent attention)."""
    if rule == "first-stage":
        return block_tokens(first_stage(specs, pp, slots))
    return block_tokens(specs, MLA_HYBRID_BLOCK_TOKENS)


def stage_bounds(specs: int, pp: int, slots: int = 1) -> list[tuple[int, int]]:
    """[start, stop) of each pipeline stage's entries of a layer_specs tuple of `slots` entries per decoder layer: a
    stage takes whole layers (Falcon-H1's attention and Mamba-2 mixer stay together)."""
    return [(start * slots, stop * slots) for start, stop in pp_stages(specs // slots, pp)]


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
