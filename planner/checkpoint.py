"""Weights as the checkpoint stores them: every tensor's dtype and shape from the safetensors headers, and the bytes
vLLM loads of them.

A safetensors file starts with an 8-byte little-endian header length and a JSON header naming each tensor's dtype,
shape and byte range (huggingface/safetensors, docs "Format"); reading it never reads a weight. `python -m
tools.checkpoint_tensors` writes the headers of a checkpoint (a local directory, or the Hub through
huggingface_hub's range reads) into one JSON file, which `model.tensorsFile` names, so a plan offline weighs the
weights from the tensors, not from a count of the config's parameters. Where the plan reads config.json from the Hub
(no model.configFile), it reads the headers from there too (hub_tensors). The planner divides them over the GPUs of
a replica by the share the tensors put in routed experts (routed_tensor_bytes): expert parallelism splits those
whole over the data x tensor GPUs, the rest is divided by tensor x pipeline (planner/memory.py weights_split).
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from planner.errors import ConfigError

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
        header = json.loads(f.read(length))
    return {name: {"dtype": entry["dtype"], "shape": list(entry["shape"])}
            for name, entry in header.items() if name != "__metadata__"}


def read_directory(directory: Path) -> dict[str, dict[str, Any]]:
    """The tensors of every .safetensors file in a checkpoint directory."""
    tensors: dict[str, dict[str, Any]] = {}
    for path in sorted(directory.glob("*.safetensors")):
        tensors.update(read_header(path))
    return tensors


def skipped_by_vllm(name: str, decoder_layers: int, mtp_layers: int) -> bool:
    """A tensor vLLM's model does not load when speculative decoding is off: the `mtp_layers` multi-token-prediction
    layers after the last of `decoder_layers` (num_nextn_predict_layers; vllm/model_executor/models/utils.py,
    get_spec_layer_idx_from_weight_name: DeepSeek V3, GLM-4.5, ...) and the `mtp.` head that Qwen3-Next and Qwen3.5
    map to nothing (hf_to_vllm_mapper)."""
    if name.startswith("mtp."):
        return True
    prefixes = tuple(f"{p}{decoder_layers + i}." for i in range(mtp_layers)
                     for p in ("model.layers.", "layers.", "model.language_model.layers."))
    return bool(prefixes) and name.startswith(prefixes)


def tensor_bytes(tensors: Mapping[str, Mapping[str, Any]], decoder_layers: int, mtp_layers: int,
                 source: str) -> tuple[float, int]:
    """(bytes vLLM loads, tensors it skips) of a checkpoint's tensors: each tensor's elements x its dtype's bytes,
    as stored (quantized packs and their scales as they are)."""
    total, skipped = 0.0, 0
    for name, entry in tensors.items():
        if skipped_by_vllm(name, decoder_layers, mtp_layers):
            skipped += 1
            continue
        dtype = entry.get("dtype") if isinstance(entry, Mapping) else None
        if dtype not in DTYPE_BYTES:
            raise ConfigError(source, dtype, f"tensor {name} has dtype {dtype!r}; accepted: "
                                             f"{', '.join(sorted(DTYPE_BYTES))}")
        shape = entry.get("shape")
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise ConfigError(source, shape, f"tensor {name} has no shape of non-negative integers")
        total += math.prod(shape) * DTYPE_BYTES[dtype]
    return total, skipped


def routed_expert(name: str) -> bool:
    """A routed expert's tensor (weights, scales, biases), which expert parallelism splits whole over GPUs: under an
    `experts` module (`mlp.experts.<e>.*`, Mixtral's `block_sparse_moe.experts.<e>.*`, gpt-oss's fused
    `mlp.experts.gate_up_proj_blocks`), not a shared expert's (`shared_expert.`, `shared_experts.`)."""
    return ".experts." in name and "shared_expert" not in name


def routed_tensor_bytes(tensors: Mapping[str, Mapping[str, Any]], decoder_layers: int, mtp_layers: int) -> float:
    """The bytes vLLM loads of the routed experts' tensors, as stored (tensor_bytes of those alone; 0 when no tensor
    is named as one: a fused layout such as Granite's `block_sparse_moe.input_linear`, then planned from the
    count)."""
    routed, _ = tensor_bytes({n: e for n, e in tensors.items() if routed_expert(n)}, decoder_layers, mtp_layers,
                             "model.tensorsFile")
    return routed


def hub_offline() -> bool:
    """HF_HUB_OFFLINE as set when the call is made: huggingface_hub reads it once, at its import, and would otherwise
    retry the Hub for tens of seconds in a process that set it later."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


def hub_tensors(repo: str, revision: str) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """({tensor name: {"dtype", "shape"}}, file names) of a Hub repository's safetensors files, from their headers:
    huggingface_hub's get_safetensors_metadata (HEAD of model.safetensors or its index, the index, then a range read
    of each shard's first bytes; HF_TOKEN for gated repositories). No weight is read. Raises what huggingface_hub
    raises (network, auth, not found, not a safetensors repository); HF_HUB_OFFLINE fails at once."""
    if hub_offline():
        raise OSError("HF_HUB_OFFLINE is set")
    from huggingface_hub import get_safetensors_metadata

    meta = get_safetensors_metadata(repo, revision=revision)
    tensors: dict[str, dict[str, Any]] = {}
    for info in meta.files_metadata.values():
        for name, tensor in info.tensors.items():
            tensors[name] = {"dtype": tensor.dtype, "shape": list(tensor.shape)}
    return tensors, sorted(meta.files_metadata)


def load_tensors_file(path_text: str, project_dir: Path) -> dict[str, dict[str, Any]]:
    """model.tensorsFile: a JSON object {tensor name: {"dtype", "shape"}} (tools/checkpoint_tensors.py writes it)."""
    path = Path(path_text)
    path = path if path.is_absolute() else project_dir / path
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError("model.tensorsFile", path_text, f"no such file ({path})") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError("model.tensorsFile", path_text, f"not a readable JSON file ({exc})") from None
    tensors = data.get("tensors") if isinstance(data, Mapping) else None
    if not isinstance(tensors, Mapping) or not tensors:
        raise ConfigError("model.tensorsFile", path_text, "expected an object with a non-empty \"tensors\" object "
                                                          "(python -m tools.checkpoint_tensors writes one)")
    return dict(tensors)


def write_tensors_file(tensors: Mapping[str, Mapping[str, Any]], where: str, out: Path,
                       files: Iterable[str] = ()) -> None:
    """The JSON model.tensorsFile reads, sorted, with where the headers were read."""
    doc = {"source": where, "files": sorted(files), "tensors": {k: dict(tensors[k]) for k in sorted(tensors)}}
    out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
