"""Real checkpoints of the 2026 families, planned from their own tensors: models/tensors/NAME.json (model.tensorsFile's
compact form) transcribed from public model-inspection reports, each held here to the report's own totals, so a row
lost or mistyped in the transcription fails; the plan from the tensors against the count from config.json (the
fallback); and the compact form against the full one on a generated checkpoint."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from planner.catalog import GIB
from planner.checkpoint import (
    DTYPE_BYTES,
    compact_tensors,
    expand_pattern,
    load_tensors_file,
    read_directory,
    skipped_by_vllm,
)
from planner.config import PROJECT_DIR
from planner.errors import ConfigError
from tests.helpers import accel, model, sizing
from tools import checkpoint_tensors

REPORTED = {
    # name: (tensors, parameters, GiB of tensors), as each report totals the checkpoint's safetensors files
    "DeepSeek-V3.2": (92_425, 685_396_921_376, 642.12),
    "Kimi-Linear-48B-A3B-Instruct": (20_493, 49_122_681_728, 91.50),
    "Qwen3-VL-8B-Instruct": (750, 8_767_123_696, 16.33),
    "MiniMax-M2.7": (96_103, 228_703_644_928, 214.32),
    "gemma-4-31B-it": (1_188, 31_273_088_876, 58.25),
    "Qwen3.6-27B": (1_199, 27_781_427_952, 51.75),
}
H200 = accel("nvidia-h200-141gb", "a3-ultragpu-8g")


def tensors_file(name: str) -> str:
    return f"models/tensors/{name}.json"


def stored_bytes(tensors: dict) -> float:
    return sum(math.prod(e["shape"]) * DTYPE_BYTES[e["dtype"]] for e in tensors.values())


@pytest.mark.parametrize("name", sorted(REPORTED))
def test_the_transcribed_tensors_add_up_to_the_reports_totals(name):
    count, parameters, gib = REPORTED[name]
    tensors = load_tensors_file(tensors_file(name), PROJECT_DIR)
    assert len(tensors) == count
    assert sum(math.prod(e["shape"]) for e in tensors.values()) == parameters
    assert round(stored_bytes(tensors) / GIB, 2) == gib


def vllm_gemma4_copies(name: str, tensors: dict, text: dict | None = None) -> float:
    """The bytes vLLM 0.32.0 holds of a Gemma 4 checkpoint's tensors by its own weights mapper
    (vllm/model_executor/models/gemma4.py _gemma4_layer_weights_mapper): a tensor it maps to nothing is dropped (the
    KV-shared layers' K and V), one stacked into several shards is held once per shard (an attention_k_eq_v layer's
    K, loaded into K and V)."""
    import transformers
    from vllm.model_executor.models.gemma4 import _gemma4_layer_weights_mapper

    if text is None:
        config = json.loads((PROJECT_DIR / "models" / f"{name}.json").read_text())
        text = config.get("text_config", config)
    mapper = _gemma4_layer_weights_mapper(
        transformers.CONFIG_MAPPING["gemma4_text"](**{k: v for k, v in text.items() if k != "model_type"}))
    held = 0.0
    for tensor, entry in tensors.items():
        decoder = "vision" not in tensor and "audio" not in tensor  # the mapper is the language model's
        if decoder and any(old in tensor for old, new in mapper.orig_to_new_substr.items() if new is None):
            continue
        shards = next((shard for old, (_, shard) in mapper.orig_to_new_stacked.items() if old in tensor), None) \
            if decoder else None
        copies = len(shards) if isinstance(shards, list) else 1
        held += copies * math.prod(entry["shape"]) * DTYPE_BYTES[entry["dtype"]]
    return held


@pytest.mark.parametrize("name", sorted(REPORTED))
def test_the_plan_weighs_what_the_checkpoint_stores_and_the_count_agrees(name):
    """The plan's weights are the stored bytes less what vLLM skips (DeepSeek-V3.2's MTP layer 61, Qwen3.6-27B's
    mtp.*) and with what it holds twice (gemma-4-31B-it's attention_k_eq_v layers: K loaded into the V shard too,
    by vLLM's own weights mapper), and counting config.json's parameters (the fallback when no header can be read)
    lands within 0.2% of them on each family."""
    tensors = load_tensors_file(tensors_file(name), PROJECT_DIR)
    from_tensors = sizing(model={**model(name), "tensorsFile": tensors_file(name)}, accelerator=H200,
                          vllm={"maxModelLen": 8192})
    counted = sizing(model=model(name), accelerator=H200, vllm={"maxModelLen": 8192})
    layers = json.loads((PROJECT_DIR / "models" / f"{name}.json").read_text())
    layers = layers.get("text_config", layers)["num_hidden_layers"]
    mtp = {n: e for n, e in tensors.items() if skipped_by_vllm(n, layers, 1)}
    assert bool(mtp) == (name in ("DeepSeek-V3.2", "Qwen3.6-27B"))  # layer 61 / Qwen3.5's mtp.* (15 tensors)
    extra = vllm_gemma4_copies(name, tensors) - stored_bytes(tensors) if name.startswith("gemma-4") else 0.0
    assert from_tensors.weights_gib == round((stored_bytes(tensors) - stored_bytes(mtp) + extra) / GIB, 2)
    assert counted.weights_gib == pytest.approx(from_tensors.weights_gib, rel=0.002)
    assert not [w for w in from_tensors.warnings if w.startswith("model.tensorsFile")]  # within the 3% it reports


@pytest.mark.parametrize("name", sorted(REPORTED))
def test_the_count_places_weights_on_pipeline_stages_as_the_tensors_do(name):
    """Without tensors (the count from config.json) a pipeline stage holds what it holds from them: the vision tower
    on every stage, the input table on the first, the routed experts on the MoE layers (planner/memory.py
    counted_groups). Per GPU within 2% of the tensors' plan on these layouts; spread evenly over the stages, as the
    count was before, Qwen3-VL-8B at pipeline 4 was 24% under and DeepSeek-V3.2 at 4 x 4 9% under."""
    big = REPORTED[name][2] > 200
    for tp, pp in ((8, 2), (4, 4), (8, 3)) if big else ((1, 2), (2, 2), (1, 4)):
        parallelism = {"tensor": tp, "pipeline": pp}
        read = sizing(model={**model(name), "tensorsFile": tensors_file(name)}, accelerator=H200,
                      vllm={"maxModelLen": 8192}, parallelism=parallelism)
        counted = sizing(model=model(name), accelerator=H200, vllm={"maxModelLen": 8192}, parallelism=parallelism)
        assert counted.weights_gib_per_gpu == pytest.approx(read.weights_gib_per_gpu, rel=0.02), (tp, pp)


def test_tied_embeddings_planned_from_tensors_weigh_the_whole_checkpoint_on_one_gpu():
    """gemma-4-31B-it ties its head to the input table: the copy a pipeline's last stage builds is not a byte of the
    checkpoint, so it does not thin the per-GPU share of a one-GPU plan (it did, by 2.3 GiB, before)."""
    name = "gemma-4-31B-it"
    one = {"tensor": 1, "pipeline": 1}
    read = sizing(model={**model(name), "tensorsFile": tensors_file(name)}, accelerator=H200,
                  vllm={"maxModelLen": 8192}, parallelism=one)
    counted = sizing(model=model(name), accelerator=H200, vllm={"maxModelLen": 8192}, parallelism=one)
    overhead = counted.weights_gib_per_gpu - counted.weights_gib
    assert read.weights_gib_per_gpu == pytest.approx(read.weights_gib + overhead, abs=0.011)


def generated(directory: Path) -> dict:
    rng = np.random.default_rng(1)
    arrays = {"model.embed_tokens.weight": np.zeros((32, 8), np.float16),
              "lm_head.weight": np.zeros((32, 8), np.float16)}
    for layer in range(5):
        arrays[f"model.layers.{layer}.input_layernorm.weight"] = np.ones(8, np.float32)
        for expert in range(4 if layer else 0):  # layer 0 dense, as DeepSeek's first_k_dense_replace
            arrays[f"model.layers.{layer}.mlp.experts.{expert}.w1.weight"] = rng.integers(-8, 8, (6, 8), np.int8)
        if layer == 3:  # an odd one out: a different shape where its siblings agree
            arrays["model.layers.3.mlp.experts.2.w1.weight"] = np.zeros((12, 8), np.int8)
    save_file(arrays, str(directory / "model.safetensors"))
    return arrays


def test_the_compact_form_expands_to_the_headers_it_was_written_from(tmp_path):
    generated(tmp_path)
    full, compact = tmp_path / "full.json", tmp_path / "compact.json"
    assert checkpoint_tensors.main([str(tmp_path), "--out", str(full)]) == 0
    assert checkpoint_tensors.main([str(tmp_path), "--out", str(compact), "--compact"]) == 0
    headers = read_directory(tmp_path)
    assert load_tensors_file(str(compact), PROJECT_DIR) == load_tensors_file(str(full), PROJECT_DIR) == headers
    rows = json.loads(compact.read_text())["patterns"]
    assert ["model.layers.{1-4}.input_layernorm.weight", "F32", [8]] not in rows  # layer 0 has a norm too
    assert ["model.layers.{0-4}.input_layernorm.weight", "F32", [8]] in rows
    assert ["model.layers.3.mlp.experts.2.w1.weight", "I8", [12, 8]] in rows
    assert len(rows) < len(headers) / 2
    assert compact_tensors({"a.{1}.w": {"dtype": "F16", "shape": [1]}}) is None  # a brace in a name: full form


def test_a_compact_row_stands_for_the_product_of_its_groups():
    assert expand_pattern("l.{0-1}.e.{3,5-6}.w") == ["l.0.e.3.w", "l.0.e.5.w", "l.0.e.6.w",
                                                    "l.1.e.3.w", "l.1.e.5.w", "l.1.e.6.w"]
    assert expand_pattern("lm_head.weight") == ["lm_head.weight"]


@pytest.mark.parametrize(("patterns", "says"), [
    ([["a.{0-1}.w", "F16"]], "is not [pattern, dtype, shape]"),
    ([["a.{0-1}.w", "F16", [2]], ["a.1.w", "F16", [2]]], "a.1.w is named by two patterns rows"),
    ([["a.{0-99999}.b.{0-99999}.w", "F16", [2]]], "stands for more than 10,000,000 tensors"),
    ([["a.{5-2}.w", "F16", [2]]], "has the range 5-2, which runs backwards"),
])
def test_a_bad_compact_file_is_one_line_naming_the_key(tmp_path, patterns, says):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"source": "x", "files": [], "patterns": patterns}))
    with pytest.raises(ConfigError) as err:
        load_tensors_file(str(path), PROJECT_DIR)
    assert err.value.key == "model.tensorsFile" and says in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("k_eq_v", [False, True])
def test_a_gemma4_checkpoint_is_weighed_as_vllms_weights_mapper_holds_it(k_eq_v):
    """A Gemma 4 checkpoint shaped like E2B (bench/configs/gemma-4-e2b.json: the last 20 of 35 layers read an earlier
    layer's KV cache) that ships K and V for every layer, as original checkpoints do: vLLM drops the KV-shared
    layers' K, V and K norm, and with attention_k_eq_v its full-attention layers ship no V and hold K twice; the plan
    weighs the tensors as vLLM's own mapper does."""
    from planner.checkpoint import tensor_bytes
    from planner.model_config import parse_hf_config

    text = {**json.loads((PROJECT_DIR / "bench" / "configs" / "gemma-4-e2b.json").read_text()),
            "attention_k_eq_v": k_eq_v}
    h, layers = text["hidden_size"], text["num_hidden_layers"]
    tensors = {"model.embed_tokens.weight": {"dtype": "BF16", "shape": [text["vocab_size"], h]}}
    for i, kind in enumerate(text["layer_types"]):
        dim = text["global_head_dim"] if kind == "full_attention" else text["head_dim"]
        prefix = f"model.layers.{i}.self_attn."
        for proj, rows in (("q_proj", text["num_attention_heads"] * dim), ("k_proj", dim), ("v_proj", dim),
                           ("o_proj", h)):
            if proj == "v_proj" and k_eq_v and kind == "full_attention":
                continue
            tensors[prefix + proj + ".weight"] = {"dtype": "BF16", "shape": [rows, h]}
        tensors[prefix + "k_norm.weight"] = {"dtype": "BF16", "shape": [dim]}
    arch = parse_hf_config(text, "gemma-4-e2b", "model.tensorsFile")
    planned, skipped = tensor_bytes(tensors, layers, 0, "model.tensorsFile", arch)
    assert planned == vllm_gemma4_copies("gemma-4-e2b", tensors, text)
    first_shared = layers - text["num_kv_shared_layers"]
    shared = [n for n in tensors if n.startswith("model.layers.") and int(n.split(".")[2]) >= first_shared
              and n.split(".")[4] in ("k_proj", "v_proj", "k_norm")]
    assert skipped == len(shared) > 0
    assert planned != stored_bytes(tensors)
