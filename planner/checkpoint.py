"""Weights as the checkpoint stores them: every tensor's dtype and shape from the safetensors headers, and the bytes
vLLM loads of them.

A safetensors file starts with an 8-byte little-endian header length and a JSON header naming each tensor's dtype,
shape and byte range (huggingface/safetensors, docs "Format"); reading it never reads a weight. `python -m
tools.checkpoint_tensors` writes the headers of a checkpoint (a local directory, or the Hub through
huggingface_hub's range reads) into one JSON file, which `model.tensorsFile` names, so a plan offline weighs the
weights from the tensors, not from a count of the config's parameters. Where the plan reads config.json from the Hub
(no model.configFile), it reads the headers from there too (hub_tensors). Each tensor is placed as vLLM 0.32.0 places
the parameter it loads into (tensor_groups): the pipeline stage that holds it and how tensor parallelism divides it;
planner/memory.py weights_split sums the groups of the most loaded GPU of a layout.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import os
import re
import struct
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from planner.architecture import EVERY_STAGE, FIRST_STAGE, LAST_STAGE, TIED_HEAD, ModelArchitecture, TensorGroup
from planner.errors import ConfigError
from planner.layers import GEMMA4_TYPES, SHARED_KV_TYPES

DTYPE_BYTES = {"F64": 8.0, "I64": 8.0, "U64": 8.0, "F32": 4.0, "I32": 4.0, "U32": 4.0, "F16": 2.0, "BF16": 2.0,
               "I16": 2.0, "U16": 2.0, "F8_E4M3": 1.0, "F8_E5M2": 1.0, "F8_E8M0": 1.0, "I8": 1.0, "U8": 1.0,
               "BOOL": 1.0, "F4": 0.5, "F6_E2M3": 0.75, "F6_E3M2": 0.75}
"""Bytes per element of each safetensors dtype (huggingface/safetensors, safetensors/src/tensor.rs Dtype)."""

MAX_HEADER_BYTES = 100_000_000
"""The format's own limit on a header (safetensors' MAX_HEADER_SIZE)."""


def read_header(path: Path) -> dict[str, dict[str, Any]]:
    """{tensor name: {"dtype", "shape"}} of one .safetensors file, from its header alone."""
    with path.open("rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ValueError(f"{path.name}: shorter than a safetensors header")
        (length,) = struct.unpack("<Q", raw)
        if length > MAX_HEADER_BYTES:
            raise ValueError(f"{path.name}: header of {length} bytes, over the format's limit")
        return header_tensors(json.loads(f.read(length)))


def header_tensors(header: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """{tensor name: {"dtype", "shape"}} of a parsed safetensors header (its `__metadata__` left out)."""
    return {name: {"dtype": entry["dtype"], "shape": list(entry["shape"])}
            for name, entry in header.items() if name != "__metadata__"}


def read_directory(directory: Path) -> dict[str, dict[str, Any]]:
    """The tensors of every .safetensors file in a checkpoint directory."""
    tensors: dict[str, dict[str, Any]] = {}
    for path in sorted(directory.glob("*.safetensors")):
        tensors.update(read_header(path))
    return tensors


def skipped_by_vllm(name: str, decoder_layers: int, mtp_layers: int, inkling: bool = False) -> bool:
    """A tensor vLLM's model does not load when speculative decoding is off: the `mtp_layers` multi-token-prediction
    layers after the last of `decoder_layers` (num_nextn_predict_layers; vllm/model_executor/models/utils.py,
    get_spec_layer_idx_from_weight_name: DeepSeek V3, GLM-4.5, ...) and the `mtp.` head that Qwen3-Next and Qwen3.5
    map to nothing (hf_to_vllm_mapper); Inkling's `model.mtp.` head (INKLING_SKIPPED) where `inkling`."""
    if name.startswith("mtp.") or (inkling and name.startswith(INKLING_SKIPPED)):
        return True
    prefixes = tuple(f"{p}{decoder_layers + i}." for i in range(mtp_layers)
                     for p in ("model.layers.", "layers.", "model.language_model.layers."))
    return bool(prefixes) and name.startswith(prefixes)


GEMMA4_KV_TENSOR = re.compile(r"layers\.(\d+)\.self_attn\.(k_proj|v_proj|k_norm)\.")


def held_copies(name: str, tensors: Mapping[str, Any], arch: ModelArchitecture | None) -> int:
    """How many copies of a checkpoint tensor vLLM holds: Gemma 4 and Gemma 3n (vllm/model_executor/models/gemma4.py
    _gemma4_layer_weights_mapper, gemma3n.py _kv_sharing_weights_mapper) drop the K and V tensors checkpoints ship for
    their KV-shared layers (0); Gemma 4 loads an attention_k_eq_v layer's K into both the K and the V shard of its
    qkv_proj (2: a k_proj whose layer stores no v_proj); 1 for every other tensor (the towers' own layers included)
    and model."""
    decoder = arch is not None and arch.model_type in SHARED_KV_TYPES and not encoder_tensor(name)
    match = GEMMA4_KV_TENSOR.search(name) if decoder else None
    if match is None:
        return 1
    if arch.kv_shared_layers and int(match.group(1)) >= arch.num_layers - arch.kv_shared_layers:
        return 0
    k_eq_v = arch.model_type in GEMMA4_TYPES and match.group(2) == "k_proj"
    return 2 if k_eq_v and name.replace(".k_proj.", ".v_proj.") not in tensors else 1


def tensor_bytes(tensors: Mapping[str, Mapping[str, Any]], decoder_layers: int, mtp_layers: int,
                 source: str, arch: ModelArchitecture | None = None) -> tuple[float, int]:
    """(bytes vLLM loads, tensors it skips) of a checkpoint's tensors: each tensor's elements x its dtype's bytes,
    as stored (quantized packs and their scales as they are), times the copies vLLM holds of it for `arch`
    (held_copies)."""
    total, skipped = 0.0, 0
    for name, entry in tensors.items():
        copies = held_copies(name, tensors, arch)
        if skipped_by_vllm(name, decoder_layers, mtp_layers, bool(arch and arch.inkling)) or not copies:
            skipped += 1
            continue
        total += copies * _entry_bytes(name, entry, source)
    return total, skipped


def _entry_bytes(name: str, entry: Any, source: str) -> float:
    dtype = entry.get("dtype") if isinstance(entry, Mapping) else None
    if dtype not in DTYPE_BYTES:
        raise ConfigError(source, dtype, f"tensor {name} has dtype {dtype!r}; accepted: "
                                         f"{', '.join(sorted(DTYPE_BYTES))}")
    shape = entry.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise ConfigError(source, shape, f"tensor {name} has no shape of non-negative integers")
    return math.prod(shape) * DTYPE_BYTES[dtype]


LAYER_INDEX = re.compile(r"(?:^|\.)(?:layers|h|blocks|layer)\.(\d+)\.")
"""A decoder layer's tensor: `model.layers.<i>.`, GPT-2 / BLOOM / Falcon `transformer.h.<i>.`, DBRX
`transformer.blocks.<i>.`; vLLM's make_layers builds layer i on the pipeline stage get_pp_indices gives it."""
ENCODER_MODULES = ("visual", "vision_tower", "vision_model", "vision_encoder", "multi_modal_projector",
                   "mm_projector", "audio_tower", "embed_vision", "embed_audio", "image_newline", "vision_embed_tokens")
"""Module names of the encoders and projectors of multimodal checkpoints. vLLM builds them on every pipeline stage
(the multimodal classes construct them outside make_layers) and shards them over tensor parallelism (the default
mm_encoder_tp_mode "weights")."""
VOCAB_MODULES = frozenset({"embed_tokens", "wte", "word_embeddings", "tok_embeddings", "embed_in", "embeddings",
                           "embedding", "lm_head", "embed_out", "output", "embed_tokens_per_layer"})
"""Vocabulary-parallel tables (VocabParallelEmbedding, ParallelLMHead): rows padded to a multiple of 64
(vocab_parallel_embedding.py pad_vocab_size, DEFAULT_VOCAB_PADDING_SIZE), then divided over tensor ranks."""
HEAD_MODULES = frozenset({"lm_head", "embed_out", "output"})
"""The output projection, on the last pipeline stage."""
INPUT_ON_EVERY_STAGE = frozenset({
    "BloomForCausalLM", "ChatGLMForConditionalGeneration", "ChatGLMModel", "Cohere2ForCausalLM",
    "Cohere2MoeForCausalLM", "CohereForCausalLM", "DbrxForCausalLM", "FalconForCausalLM", "FalconMambaForCausalLM",
    "GPT2LMHeadModel", "GPTJForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM", "Gemma3nForCausalLM",
    "Gemma4ForCausalLM", "GemmaForCausalLM", "GptOssForCausalLM", "GraniteMoeForCausalLM",
    "GraniteMoeHybridForCausalLM", "GraniteMoeSWAForCausalLM", "GraniteMoeSharedForCausalLM", "HYV3ForCausalLM",
    "HrmTextForCausalLM", "IQuestLoopCoderForCausalLM", "InternLM2ForCausalLM", "JambaForCausalLM",
    "K2HorizonForCausalLM", "Lfm2ForCausalLM", "Lfm2MoeForCausalLM", "Mamba2ForCausalLM", "MambaForCausalLM",
    "MiniCPMForCausalLM", "MixtralForCausalLM", "MuseGlimmerForCausalLM", "NemotronHForCausalLM",
    "NemotronHPuzzleForCausalLM", "OPTForCausalLM", "OlmoHybridForCausalLM", "OlmoeForCausalLM", "OrionForCausalLM",
    "PhiMoEForCausalLM", "Plamo3ForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM", "Qwen3NextForCausalLM",
    "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM", "Rnj1ForCausalLM", "StableLmForCausalLM", "Zamba2ForCausalLM"})
"""Architectures whose vLLM 0.32.0 class builds its input embeddings on every pipeline stage (the
VocabParallelEmbedding assignment under no rank test; the others build it on the first stage and a PPMissingLayer
elsewhere). tests/engine/test_checkpoint_shards_vllm.py derives both tables from vLLM's model files."""
HEAD_ON_EVERY_STAGE = frozenset({
    "BloomForCausalLM", "DbrxForCausalLM", "FalconForCausalLM", "FalconMambaForCausalLM", "GPT2LMHeadModel",
    "GPTJForCausalLM", "Gemma3ForCausalLM", "Gemma4ForCausalLM", "GemmaForCausalLM", "GptOssForCausalLM",
    "GraniteMoeForCausalLM", "GraniteMoeHybridForCausalLM", "GraniteMoeSWAForCausalLM",
    "GraniteMoeSharedForCausalLM", "HYV3ForCausalLM", "HrmTextForCausalLM", "IQuestLoopCoderForCausalLM",
    "InternLM2ForCausalLM", "JambaForCausalLM", "K2HorizonForCausalLM", "Mamba2ForCausalLM", "MambaForCausalLM",
    "MiniCPMForCausalLM", "MixtralForCausalLM", "MuseGlimmerForCausalLM", "NemotronHForCausalLM",
    "NemotronHPuzzleForCausalLM", "OPTForCausalLM", "OlmoHybridForCausalLM", "OlmoeForCausalLM", "OrionForCausalLM",
    "PhiMoEForCausalLM", "Plamo3ForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM", "Qwen3NextForCausalLM",
    "Rnj1ForCausalLM", "StableLmForCausalLM", "Zamba2ForCausalLM"})
"""The same for the output projection (ParallelLMHead), which the others build on the last stage only."""
POSITION_MODULES = frozenset({"wpe", "embed_positions", "position_embeddings"})
"""Learned position tables: plain nn.Embedding on the first stage, whole on every tensor rank."""
REPLICATED_MODULES = frozenset({"gate", "router", "shared_expert_gate", "q_a_proj", "kv_a_proj_with_mqa",
                                "fused_qkv_a_proj", "q_a_layernorm", "kv_a_layernorm"})
"""Modules vLLM builds whole on every tensor rank (ReplicatedLinear or an unsharded parameter): the MoE router
(fused_moe's `gate`, Qwen2-MoE's shared_expert_gate) and latent attention's low-rank down-projections and their
norms (deepseek_v2.py: q_a_proj, kv_a_proj_with_mqa, fused_qkv_a_proj)."""
ROW_MODULES = frozenset({"o_proj", "down_proj", "dense", "dense_4h_to_h", "c_proj", "fc2", "out_proj", "wo", "w2"})
"""Row-parallel linear layers (RowParallelLinear): the weight is divided along its input, the bias is kept whole
(added once, after the all-reduce)."""
KV_MODULES = frozenset({"k_proj", "v_proj"})
FUSED_QKV_MODULES = frozenset({"qkv_proj", "query_key_value", "c_attn", "Wqkv", "W_pack"})
"""Key and value projections (QKVParallelLinear): KV heads are divided over tensor ranks while there are as many,
and each rank keeps a whole head where there are fewer (linear.py QKVParallelLinear: num_kv_head_replicas)."""


REPLICATED_SUBMODULES = (".indexer.", ".compressor.")
"""Submodules vLLM builds whole on every tensor rank: a lightning indexer (DeepSeek-V3.2's and V4's wq_b, wk,
weights_proj: ReplicatedLinear, vllm/models/deepseek_v32/attention.py, deepseek_v4/attention.py) and DeepSeek V4's
compressors (compressor.py fused_wkv_wgate with disable_tp, its position bias and norm)."""
DSV4_REPLICATED = frozenset({"wq_a", "wkv"})
"""DeepSeek V4's query down-projection and KV projection in its checkpoints' own names, which vLLM fuses into
fused_wqa_wkv with disable_tp (vllm/models/deepseek_v4/attention.py)."""
DSV4_TABLES = {"embed.weight": FIRST_STAGE, "head.weight": LAST_STAGE}
"""DeepSeek V4's vocabulary tables in its checkpoints' own names (vLLM's hf_to_vllm_mapper: embed_tokens, lm_head)."""


def encoder_tensor(name: str) -> bool:
    """Whether a checkpoint tensor belongs to a multimodal encoder or projector (a path segment in
    ENCODER_MODULES)."""
    return any(segment in ENCODER_MODULES for segment in name.split("."))


def _module(name: str) -> tuple[str, str]:
    """(module, attribute): `model.layers.0.self_attn.k_proj.weight` -> ("k_proj", "weight")."""
    parts = name.split(".")
    return (parts[-2] if len(parts) > 1 else parts[0]), parts[-1]


def tensor_placement(name: str, shape: list[int], heads: int, kv_heads: int) -> list[tuple[int, str, float, int]]:
    """Where vLLM 0.32.0 keeps the parameter a checkpoint tensor loads into: [(position, rule, share of the tensor,
    rows)], position a decoder layer index or FIRST_STAGE / LAST_STAGE / EVERY_STAGE, rule one of TensorGroup's
    rules; a fused query-key-value tensor splits into its query share and its key-value share."""
    module, attribute = _module(name)
    if encoder_tensor(name):
        return [(EVERY_STAGE, "split", 1.0, 0)]
    if name in DSV4_TABLES and len(shape) == 2:
        return [(DSV4_TABLES[name], "vocab", 1.0, shape[0])]
    if name.startswith("hc_head"):  # DeepSeek V4's head mixer: float32, built on every stage (DeepseekV4Model)
        return [(EVERY_STAGE, "replicated", 1.0, 0)]
    if routed_expert(name):
        rule = "routed"
    elif module in VOCAB_MODULES and len(shape) == 2:
        position = LAST_STAGE if module in HEAD_MODULES else FIRST_STAGE
        return [(position, "vocab", 1.0, shape[0])]
    elif module in POSITION_MODULES:
        return [(FIRST_STAGE, "replicated", 1.0, 0)]
    elif module in REPLICATED_MODULES or (len(shape) <= 1 and ("norm" in module or module.startswith("ln"))) \
            or (attribute == "bias" and module in ROW_MODULES) or any(m in name for m in REPLICATED_SUBMODULES) \
            or (module in DSV4_REPLICATED and ".attn." in name) or attribute.startswith("hc_"):
        rule = "replicated"
    elif module in KV_MODULES:
        rule = "kv"
    else:
        rule = "split"
    found = LAYER_INDEX.search(name)
    position = int(found.group(1)) if found else LAST_STAGE  # the final norm, after the last layer
    if module in FUSED_QKV_MODULES and heads and kv_heads:
        query = heads / (heads + 2 * kv_heads)
        return [(position, "split", query, 0), (position, "kv", 1.0 - query, 0)]
    return [(position, rule, 1.0, 0)]


INKLING_WHOLE = frozenset({"rel_logits_proj", "q_norm", "k_norm", "attn_norm", "mlp_norm", "gate"})
"""Modules of an Inkling layer every tensor rank keeps whole (vllm/models/inkling/nvidia: plain parameters, not
divided, beside the divided projections, convolutions and sink experts)."""
INKLING_SKIPPED = "model.mtp."
"""The multi-token-prediction head Inkling's checkpoints carry, which vLLM's loader maps to nothing
(_load_inkling_weights: orig_to_new_prefix {"model.mtp.": None})."""


def inkling_placement(name: str, shape: list[int]) -> list[tuple[int, str, float, int]]:
    """tensor_placement for an Inkling checkpoint (vLLM's InklingForCausalLM, whose hf_to_vllm_mapper reads
    model.llm.* and language_model.*): outside the layers the input table (embed, embed_tokens) whole on every tensor
    rank and, as the norms, on every pipeline stage; the head (unembed, lm_head) on every stage, its rows padded and
    divided; in a layer its routed experts, INKLING_WHOLE whole, the rest divided."""
    module, _ = _module(name)
    found = LAYER_INDEX.search(name)
    if found is None:
        if module in HEAD_MODULES | {"unembed"} and len(shape) == 2:
            return [(EVERY_STAGE, "vocab", 1.0, shape[0])]
        return [(EVERY_STAGE, "replicated", 1.0, 0)]
    rule = "routed" if routed_expert(name) else "replicated" if module in INKLING_WHOLE else "split"
    return [(int(found.group(1)), rule, 1.0, 0)]


FLOAT32_TENSORS = ("e_score_correction_bias",)
"""Tensors vLLM keeps in float32 whatever the checkpoint stores (deepseek_v2.py, glm4_moe.py, ernie45_moe.py:
nn.Parameter(torch.empty(n_routed_experts, dtype=torch.float32)))."""


def tensor_groups(tensors: Mapping[str, Mapping[str, Any]], arch: ModelArchitecture,
                  source: str) -> tuple[TensorGroup, ...]:
    """The bytes vLLM loads of a checkpoint's tensors, grouped by where they sit (tensor_placement): one group per
    (position, rule, rows). The vocabulary tables of the architectures in INPUT_ON_EVERY_STAGE / HEAD_ON_EVERY_STAGE
    sit on every stage; tied embeddings otherwise put a copy of the input table on the last stage of a pipeline (the
    models build `embed_tokens` there too when tie_word_embeddings, and lm_head shares it)."""
    sums: dict[tuple[int, str, int], float] = defaultdict(float)
    every_input = arch.architecture in INPUT_ON_EVERY_STAGE
    for name, entry in tensors.items():
        copies = held_copies(name, tensors, arch)
        if skipped_by_vllm(name, arch.num_layers, arch.mtp_layers, bool(arch.inkling)) or not copies:
            continue
        size = copies * _entry_bytes(name, entry, source)
        if name.endswith(FLOAT32_TENSORS):
            size = math.prod(entry["shape"]) * DTYPE_BYTES["F32"]
        placed = (inkling_placement(name, list(entry["shape"])) if arch.inkling else
                  tensor_placement(name, list(entry["shape"]), arch.num_attention_heads, arch.num_kv_heads))
        for position, rule, share, rows in placed:
            if position >= arch.num_layers:
                position = LAST_STAGE
            if rule == "vocab" and (every_input if position == FIRST_STAGE
                                    else arch.architecture in HEAD_ON_EVERY_STAGE):
                position = EVERY_STAGE
            sums[position, rule, rows] += size * share
            if arch.tie_word_embeddings and rule == "vocab" and position == FIRST_STAGE:
                sums[TIED_HEAD, rule, rows] += size * share
    return tuple(TensorGroup(p, r, b, rows) for (p, r, rows), b in sorted(sums.items()))


def routed_expert(name: str) -> bool:
    """A routed expert's tensor (weights, scales, biases), which expert parallelism splits whole over GPUs: under an
    `experts` module (`mlp.experts.<e>.*`, Mixtral's `block_sparse_moe.experts.<e>.*`, gpt-oss's fused
    `mlp.experts.gate_up_proj_blocks`), not a shared expert's (`shared_expert.`, `shared_experts.`), or Granite's
    fused `block_sparse_moe.input_linear` / `output_linear`."""
    if ".experts." in name:
        return "shared_expert" not in name
    return ".block_sparse_moe.input_linear." in name or ".block_sparse_moe.output_linear." in name


def hub_offline() -> bool:
    """HF_HUB_OFFLINE as set when the call is made: huggingface_hub reads it once, at its import, and would otherwise
    retry the Hub for tens of seconds in a process that set it later."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


def hub_tensors(repo: str, revision: str) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """({tensor name: {"dtype", "shape"}}, file names) of a Hub repository's safetensors files, from their headers:
    huggingface_hub's get_safetensors_metadata (HEAD of model.safetensors or its index, the index, then a range read
    of each shard's first bytes; HF_TOKEN for gated repositories). No weight is read. Raises what huggingface_hub
    raises (network, auth, not found, not a safetensors repository); HF_HUB_OFFLINE fails at once. Read once per
    process (tools.plan builds the settings, then the program it runs under Pulumi's mocks builds them again), a copy
    returned each time."""
    if hub_offline():
        raise OSError("HF_HUB_OFFLINE is set")
    return copy.deepcopy(_hub_tensors(repo, revision))


@functools.cache
def _hub_tensors(repo: str, revision: str) -> tuple[dict[str, dict[str, Any]], list[str]]:
    from huggingface_hub import get_safetensors_metadata

    meta = get_safetensors_metadata(repo, revision=revision)
    tensors: dict[str, dict[str, Any]] = {}
    for info in meta.files_metadata.values():
        for name, tensor in info.tensors.items():
            tensors[name] = {"dtype": tensor.dtype, "shape": list(tensor.shape)}
    return tensors, sorted(meta.files_metadata)


RANGES = re.compile(r"\{(\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*)\}")
"""A brace group of the compact form: indices and ranges, `{0-2,4,6-60}`."""
MAX_EXPANDED = 10_000_000
"""The most tensors a compact file may expand to (the largest checkpoints hold about 10^5)."""


def expand_pattern(pattern: str) -> list[str]:
    """The tensor names a compact row stands for: each brace group a set of indices, the names their product in
    the order written (`model.layers.{0-1}.experts.{0-2}.w1.weight` is 6 names)."""
    pieces = RANGES.split(pattern)
    choices: list[list[str]] = []
    for i, piece in enumerate(pieces):
        if i % 2 == 0:
            choices.append([piece])
            continue
        values: list[str] = []
        for part in piece.split(","):
            low, _, high = part.partition("-")
            if int(high or low) < int(low):
                raise ValueError(f"row {pattern!r} has the range {part}, which runs backwards")
            values += [str(v) for v in range(int(low), int(high or low) + 1)]
        choices.append(values)
    names = [""]
    for values in choices:
        if len(names) * len(values) > MAX_EXPANDED:
            raise ValueError(f"row {pattern!r} stands for more than {MAX_EXPANDED:,} tensors")
        names = [n + v for n in names for v in values]
    return names


def _index_text(values: Iterable[int]) -> str:
    """`{0-2,4}` for 0, 1, 2, 4; a single index stays bare."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return str(ordered[0])
    runs: list[list[int]] = []
    for v in ordered:
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return "{" + ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs) + "}"


def _cover(indices: list[tuple[int, ...]]) -> list[tuple[frozenset[int], ...]]:
    """Index tuples as a union of products of index sets: split on the first index, and merge the first indices
    whose remaining tuples are covered alike (every layer of 256 experts is one product)."""
    if not indices[0]:
        return [()]
    rest: dict[int, list[tuple[int, ...]]] = defaultdict(list)
    for t in indices:
        rest[t[0]].append(t[1:])
    alike: dict[tuple[tuple[frozenset[int], ...], ...], set[int]] = defaultdict(set)
    for first, tails in rest.items():
        alike[tuple(_cover(sorted(set(tails))))].add(first)
    out = [(frozenset(firsts), *sets) for cover, firsts in alike.items() for sets in cover]
    return sorted(out, key=lambda sets: [sorted(s) for s in sets])


def compact_tensors(tensors: Mapping[str, Mapping[str, Any]]) -> list[list[Any]] | None:
    """The compact form of a checkpoint's tensors: [pattern, dtype, shape] rows, the names that differ only in
    their numeric path segments (layer, expert) and share dtype and shape written once with brace groups;
    expand_pattern reverses it exactly. None where a name holds a brace, which the form could not tell apart."""
    groups: dict[tuple[tuple[str, ...], str, tuple[int, ...]], list[tuple[int, ...]]] = defaultdict(list)
    for name, entry in tensors.items():
        if "{" in name or "}" in name:
            return None
        parts = name.split(".")
        numeric = [p.isdigit() and str(int(p)) == p for p in parts]
        template = tuple("" if n else p for p, n in zip(parts, numeric, strict=True))
        groups[template, entry["dtype"], tuple(entry["shape"])].append(
            tuple(int(p) for p, n in zip(parts, numeric, strict=True) if n))
    rows = []
    for (template, dtype, shape), indices in groups.items():
        for sets in _cover(sorted(set(indices))):
            filled = iter(sets)
            rows.append([".".join(p if p else _index_text(next(filled)) for p in template), dtype, list(shape)])
    return sorted(rows)


def load_tensors_file(path_text: str, project_dir: Path) -> dict[str, dict[str, Any]]:
    """model.tensorsFile: a JSON object with {tensor name: {"dtype", "shape"}} under "tensors", or the compact form's
    [pattern, dtype, shape] rows under "patterns" (tools/checkpoint_tensors.py writes either)."""
    key = "model.tensorsFile"
    path = Path(path_text)
    path = path if path.is_absolute() else project_dir / path
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(key, path_text, f"no such file ({path})") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(key, path_text, f"not a readable JSON file ({exc})") from None
    data = data if isinstance(data, Mapping) else {}
    tensors, patterns = data.get("tensors"), data.get("patterns")
    if isinstance(tensors, Mapping) and tensors:
        return dict(tensors)
    if not isinstance(patterns, list) or not patterns:
        raise ConfigError(key, path_text, "expected an object with a non-empty \"tensors\" object or \"patterns\" "
                                          "list (python -m tools.checkpoint_tensors writes one)")
    expanded: dict[str, dict[str, Any]] = {}
    for row in patterns:
        if not (isinstance(row, list) and len(row) == 3 and isinstance(row[0], str) and isinstance(row[1], str)):
            raise ConfigError(key, path_text, f"patterns row {row!r} is not [pattern, dtype, shape]")
        try:
            names = expand_pattern(row[0])
        except ValueError as exc:
            raise ConfigError(key, path_text, str(exc)) from None
        for name in names:
            if name in expanded:
                raise ConfigError(key, path_text, f"tensor {name} is named by two patterns rows")
            expanded[name] = {"dtype": row[1], "shape": row[2]}
        if len(expanded) > MAX_EXPANDED:
            raise ConfigError(key, path_text, f"the patterns stand for more than {MAX_EXPANDED:,} tensors")
    return expanded


def write_tensors_file(tensors: Mapping[str, Mapping[str, Any]], where: str, out: Path,
                       files: Iterable[str] = (), compact: bool = False) -> None:
    """The JSON model.tensorsFile reads, sorted, with where the headers were read: every tensor under "tensors", or
    with compact the [pattern, dtype, shape] rows of compact_tensors under "patterns", a row a line."""
    head = {"source": where, "files": sorted(files)}
    rows = compact_tensors(tensors) if compact else None
    if rows is None:
        doc = {**head, "tensors": {k: dict(tensors[k]) for k in sorted(tensors)}}
        out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        return
    fields = [f" {json.dumps(key)}: {json.dumps(value)}" for key, value in sorted(head.items())]
    patterns = ",\n".join(f"  {json.dumps(row)}" for row in rows)
    out.write_text("{\n" + ",\n".join(fields) + ',\n "patterns": [\n' + patterns + "\n ]\n}\n")
