"""Weights from the checkpoint's own tensors: safetensors headers read as the safetensors library reads them, the
tensors vLLM skips left out, and a stack planned from a generated checkpoint's headers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import save_file

from planner.catalog import GIB
from planner.checkpoint import read_directory, read_header, skipped_by_vllm, tensor_bytes
from planner.config import PROJECT_DIR
from planner.errors import ConfigError
from tests.helpers import model, sizing
from tools import checkpoint_tensors

LAYERS = 4


def generated_checkpoint(directory: Path) -> dict[str, np.ndarray]:
    """A two-file checkpoint of mixed dtypes, with one multi-token-prediction layer after the decoder (index LAYERS)
    and an `mtp.` head, as DeepSeek V3 and Qwen3-Next store them."""
    rng = np.random.default_rng(0)
    first = {"model.embed_tokens.weight": rng.standard_normal((64, 16)).astype(np.float16),
             **{f"model.layers.{i}.mlp.down_proj.weight": rng.integers(-8, 8, (16, 48), dtype=np.int8)
                for i in range(LAYERS)}}
    second = {**{f"model.layers.{i}.mlp.down_proj.weight_scale": rng.random((16, 1), dtype=np.float32)
                 for i in range(LAYERS)},
              f"model.layers.{LAYERS}.eh_proj.weight": np.zeros((16, 32), np.float16),
              "mtp.fc.weight": np.zeros((16, 32), np.float16),
              "lm_head.weight": rng.standard_normal((64, 16)).astype(np.float32)}
    save_file(first, str(directory / "model-00001-of-00002.safetensors"))
    save_file(second, str(directory / "model-00002-of-00002.safetensors"), metadata={"format": "pt"})
    return {**first, **second}


def test_headers_read_as_the_safetensors_library_reads_them(tmp_path):
    arrays = generated_checkpoint(tmp_path)
    ours = read_directory(tmp_path)
    assert set(ours) == set(arrays)
    for path in tmp_path.glob("*.safetensors"):
        with safe_open(str(path), framework="numpy") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open has no __iter__)
                tensor = f.get_slice(name)
                assert ours[name] == {"dtype": tensor.get_dtype(), "shape": list(tensor.get_shape())}
    assert "__metadata__" not in read_header(tmp_path / "model-00002-of-00002.safetensors")


def test_the_bytes_are_the_stored_tensors_less_those_vllm_skips(tmp_path):
    arrays = generated_checkpoint(tmp_path)
    loaded, skipped = tensor_bytes(read_directory(tmp_path), LAYERS, 1, "model.tensorsFile")
    kept = [a for n, a in arrays.items() if not n.startswith(("mtp.", f"model.layers.{LAYERS}."))]
    assert loaded == sum(a.nbytes for a in kept) and skipped == 2
    every, none_skipped = tensor_bytes(read_directory(tmp_path), LAYERS + 1, 0, "model.tensorsFile")
    assert every == loaded + arrays[f"model.layers.{LAYERS}.eh_proj.weight"].nbytes and none_skipped == 1
    assert not skipped_by_vllm(f"model.layers.{LAYERS - 1}.mlp.down_proj.weight", LAYERS, 1)


def test_a_tensor_of_an_unknown_dtype_is_one_line_naming_it():
    with pytest.raises(ConfigError) as err:
        tensor_bytes({"w": {"dtype": "Q4_K", "shape": [2, 2]}}, 1, 0, "model.tensorsFile")
    assert "model.tensorsFile" in str(err.value) and "Q4_K" in str(err.value) and "\n" not in str(err.value)


def test_a_stack_plans_its_weights_from_a_generated_checkpoints_headers(tmp_path):
    arrays = generated_checkpoint(tmp_path)
    out = tmp_path / "tensors.json"
    assert checkpoint_tensors.main([str(tmp_path), "--out", str(out)]) == 0
    assert set(json.loads(out.read_text())["tensors"]) == set(arrays)
    counted = sizing(model=model("Llama-3.1-8B-Instruct"))
    planned = sizing(model={**model("Llama-3.1-8B-Instruct"), "tensorsFile": str(out)})
    loaded, _ = tensor_bytes(json.loads(out.read_text())["tensors"], 32, 0, "x")
    assert planned.weights_gib == round(loaded / GIB, 2) != counted.weights_gib
    [warning] = [w for w in planned.warnings if w.startswith("model.tensorsFile")]
    assert "the plan uses the tensors" in warning
    stated = sizing(model={**model("Llama-3.1-8B-Instruct"), "tensorsFile": str(out), "weightsGib": 15.0})
    assert stated.weights_gib == 15.0


def test_bad_sources_are_one_line_and_a_non_zero_exit(tmp_path):
    empty = subprocess.run([sys.executable, "-m", "tools.checkpoint_tensors", str(tmp_path), "--out",
                            str(tmp_path / "o.json")], cwd=PROJECT_DIR, capture_output=True, text=True, timeout=120)
    assert empty.returncode == 2 and empty.stderr.count("\n") == 1 and "no .safetensors files" in empty.stderr
    (tmp_path / "broken.json").write_text("{}")
    with pytest.raises(ConfigError) as err:
        sizing(model={**model("Llama-3.1-8B-Instruct"), "tensorsFile": str(tmp_path / "broken.json")})
    assert err.value.key == "model.tensorsFile" and "\n" not in str(err.value)


def test_expert_parallelism_splits_what_the_checkpoint_stores_in_routed_experts(tmp_path):
    """A Qwen3-30B-A3B-shaped checkpoint whose routed experts are stored in 8 bits (and scales) while attention,
    embeddings and the router stay in 16: the share DP + EP splits whole is the experts' share of the stored bytes,
    not the count's (every part at one rate)."""
    from planner.architecture import ModelArchitecture
    from planner.checkpoint import routed_expert, tensor_groups

    layers, experts, hidden, width = 2, 8, 64, 32
    rng = np.random.default_rng(0)
    arrays = {"model.embed_tokens.weight": np.zeros((128, hidden), np.float16),
              "lm_head.weight": np.zeros((128, hidden), np.float16)}
    for i in range(layers):
        arrays[f"model.layers.{i}.self_attn.qkv.weight"] = np.zeros((3 * hidden, hidden), np.float16)
        arrays[f"model.layers.{i}.mlp.gate.weight"] = np.zeros((experts, hidden), np.float16)
        arrays[f"model.layers.{i}.mlp.shared_expert.down_proj.weight"] = np.zeros((hidden, width), np.float16)
        for e in range(experts):
            for proj, shape in (("gate_proj", (width, hidden)), ("up_proj", (width, hidden)),
                                ("down_proj", (hidden, width))):
                arrays[f"model.layers.{i}.mlp.experts.{e}.{proj}.weight"] = rng.integers(-8, 8, shape, dtype=np.int8)
                arrays[f"model.layers.{i}.mlp.experts.{e}.{proj}.weight_scale"] = np.ones((shape[0], 1), np.float32)
    save_file(arrays, str(tmp_path / "model.safetensors"))
    tensors = read_directory(tmp_path)
    routed = sum(a.nbytes for n, a in arrays.items() if ".experts." in n)
    share = routed / sum(a.nbytes for a in arrays.values())
    arch = ModelArchitecture(name="moe", model_type="qwen3_moe", num_layers=layers, hidden_size=hidden,
                             num_attention_heads=4, num_kv_heads=4, head_dim=16, intermediate_size=width,
                             vocab_size=128, max_position_embeddings=4096, num_experts=experts)
    groups = tensor_groups(tensors, arch, "model.tensorsFile")
    assert sum(g.bytes for g in groups if g.rule == "routed") == routed
    assert not routed_expert("model.layers.0.mlp.shared_experts.down_proj.weight")
    assert routed_expert("model.layers.0.mlp.experts.gate_up_proj_blocks")  # gpt-oss's fused experts
    assert routed_expert("model.layers.0.block_sparse_moe.experts.3.w1.weight")  # Mixtral

    out = tmp_path / "tensors.json"
    assert checkpoint_tensors.main([str(tmp_path), "--out", str(out)]) == 0
    h100 = {"type": "nvidia-h100-80gb", "machineType": "a3-highgpu-8g", "zones": ["us-central1-a"]}
    stated = {**model("Qwen3-30B-A3B"), "tensorsFile": str(out), "weightsGib": 40.0}
    read = sizing(model=stated, accelerator=h100, vllm={"maxModelLen": 4096}, parallelism={"data": 4})
    # 40 GiB stated: the tensors' share of it split over 4 GPUs, the rest on each (plus the load overhead)
    per_gpu = 40.0 * (1 - share) + 40.0 * share / 4
    assert read.weights_gib_per_gpu == pytest.approx(per_gpu + 0.05 + 0.0, abs=0.05)
    counted = sizing(model={**model("Qwen3-30B-A3B"), "weightsGib": 40.0}, accelerator=h100,
                     vllm={"maxModelLen": 4096}, parallelism={"data": 4})
    assert counted.weights_gib_per_gpu < read.weights_gib_per_gpu, "counted, 95% of the bytes are experts"
