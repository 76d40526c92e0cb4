"""Random-weight models with the exact architecture of a Hugging Face config.json, offline.

    build_model(config_json, out_dir)  ->  out_dir with config.json, *.safetensors, tokenizer files

Weights are drawn by transformers' own initialisation (so every tensor name and shape is what vLLM
expects for that architecture) and saved in 16-bit. The tokenizer is a word-level vocabulary with one
token per model id ("t0" ... "tN-1", special tokens at the config's bos/eos ids): every id the model
can emit decodes, and a decoded random prompt re-encodes to the same ids, so benchmark prompt lengths
are exact. A finished directory is marked with the config's hash and reused by later runs.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

DONE_MARK = ".vllm-gke-built"


def config_digest(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


def special_ids(config: dict[str, Any]) -> dict[str, int]:
    """bos/eos ids from the config (first of a list), defaulting to the top of the vocabulary."""
    vocab = int(config["vocab_size"])

    def first(value: Any, default: int) -> int:
        if isinstance(value, list):
            value = value[0] if value else None
        return int(value) if isinstance(value, int) and 0 <= value < vocab else default

    bos = first(config.get("bos_token_id"), vocab - 2)
    eos = first(config.get("eos_token_id"), vocab - 1)
    if eos == bos:
        eos = vocab - 1 if bos != vocab - 1 else vocab - 2
    return {"bos": bos, "eos": eos}


def build_tokenizer(config: dict[str, Any], out: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab_size = int(config["vocab_size"])
    ids = special_ids(config)
    names = {ids["bos"]: "<s>", ids["eos"]: "</s>"}
    vocab = {names.get(i, f"t{i}"): i for i in range(vocab_size)}
    unk = f"t{min(set(range(vocab_size)) - set(names))}"
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=unk))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token=unk,
                                   model_max_length=int(config.get("max_position_embeddings", 4096)))
    fast.chat_template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                          "{% if add_generation_prompt %}assistant: {% endif %}")
    fast.save_pretrained(out)


def build_model(config_json: Path, out: Path, device: str | None = None, seed: int = 0) -> Path:
    """Write a random-weight model for `config_json` under `out` (reused when already built)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = json.loads(Path(config_json).read_text())
    digest = config_digest(config)
    mark = out / DONE_MARK
    if mark.exists() and mark.read_text().strip() == digest:
        return out
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.safetensors*"):
        old.unlink()
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.float16 if config.get("torch_dtype") == "float16" else torch.bfloat16
    torch.manual_seed(seed)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    hf_config = AutoConfig.from_pretrained(out)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(hf_config, torch_dtype=dtype)
    model.save_pretrained(out, safe_serialization=True, max_shard_size="5GB")
    del model
    # The GPUs must be empty for the layouts that follow (bench/run.py waits for that): free what the build cached.
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    # save_pretrained rewrites config.json in transformers' own form; keep the given one, byte for byte.
    (out / "config.json").write_text(json.dumps(config, indent=2))
    build_tokenizer(config, out)
    # safetensors writes its shards 0600 (root's, here); served read-only to a pod's own UID (bench/run.py --pods)
    # they must be readable by others, as files on a mounted disk image are.
    for path in out.iterdir():
        path.chmod(0o644)
    mark.write_text(digest)
    return out
