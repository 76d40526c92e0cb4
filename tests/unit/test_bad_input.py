"""Bad input, second pass: values GKE, Kubernetes or vLLM would refuse are refused here first, each with one line
naming the key, the value and what is accepted (issue: 86 hostile stack files and model configs)."""

from __future__ import annotations

import gzip
import json

import pytest

from planner.architecture import context_length
from planner.config import PROJECT_DIR
from planner.errors import ConfigError
from planner.stack_schema import owned_flag
from tests.helpers import accel, model, settings, sizing

LLAMA_8B = json.loads((PROJECT_DIR / "models" / "Llama-3.1-8B-Instruct.json").read_text())

REFUSED = [
    # vllm.extraArgs in every spelling vLLM's parser accepts for a flag the program renders or relies on
    ({"vllm": {"extraArgs": ["-tp", "4"]}}, "vllm.extraArgs", "--tensor-parallel-size"),
    ({"vllm": {"extraArgs": ["-tp4"]}}, "vllm.extraArgs", "--tensor-parallel-size"),
    ({"vllm": {"extraArgs": ["--max_model_len=131072"]}}, "vllm.extraArgs", "--max-model-len"),
    ({"vllm": {"extraArgs": ["--max-model", "4096"]}}, "vllm.extraArgs", "--max-model-len"),  # argparse prefix
    ({"vllm": {"extraArgs": ["--served-model-name", "other"]}}, "vllm.extraArgs", "--served-model-name"),
    ({"vllm": {"extraArgs": ["--host", "127.0.0.1"]}}, "vllm.extraArgs", "--host"),
    ({"vllm": {"extraArgs": ["--distributed_executor_backend=mp"]}}, "vllm.extraArgs", "--distributed-executor"),
    ({"vllm": {"extraArgs": ["--config", "x.yaml"]}}, "vllm.extraArgs", "--config"),
    ({"vllm": {"extraArgs": ["--enable-prefix-caching --max-num-seqs 64"]}}, "vllm.extraArgs",
     "one flag or value per list item"),
    # Kubernetes names
    ({"serving": {"namespace": "team/vllm"}}, "serving.namespace", "DNS label"),
    ({"serving": {"namespace": "n" * 100}}, "serving.namespace", "at most 63"),
    ({"serving": {"namespace": "équipe"}}, "serving.namespace", "DNS label"),
    ({"serving": {"namespace": "default"}}, "serving.namespace", "owned by Kubernetes or GKE"),
    ({"serving": {"allowedNamespaces": ["Gateway"]}}, "serving.allowedNamespaces", "DNS label"),
    # GKE
    ({"cluster": {"name": "ML_Prod", "create": True}}, "cluster.name", "1-40 characters"),
    ({"cluster": {"name": "a" * 41}}, "cluster.name", "1-40 characters"),
    ({"cluster": {"location": "central"}}, "cluster.location", "us-central1"),
    ({"accelerator": accel("nvidia-l4") | {"zones": ["europe-west4-a"]}}, "accelerator.zones",
     "not in the cluster's location us-central1"),
    ({"accelerator": accel("nvidia-l4") | {"zones": ["us-central1"]}}, "accelerator.zones", "not a zone name"),
    ({"cluster": {"create": True}, "serving": {"installLws": False}}, "serving.installLws",
     "no LeaderWorkerSet controller"),
    ({"weights": {"sizeGib": 70000}}, "weights.sizeGib", "at most 65,536 GiB"),
    # vLLM on the GPU generation
    ({"accelerator": accel("nvidia-tesla-t4"), "model": model("Llama-3.2-1B-Instruct"),
      "vllm": {"dtype": "bfloat16"}}, "vllm.dtype", "no bfloat16"),
    ({"accelerator": accel("nvidia-tesla-t4"), "model": model("Llama-3.2-1B-Instruct"),
      "vllm": {"kvCacheDtype": "bfloat16"}}, "vllm.kvCacheDtype", "no bfloat16"),
    # weak messages of the first pass
    ({"accelerator": accel("nvidia-l4", driverVersion=535)}, "accelerator.driverVersion",
     "LATEST, DEFAULT, INSTALLATION_DISABLED"),
    ({"monitoring": {"scrapeInterval": 15}}, "monitoring.scrapeInterval", "between 5s and 300s"),
    ({"monitoring": {"scrapeInterval": "15"}}, "monitoring.scrapeInterval", "between 5s and 300s"),
]


@pytest.mark.parametrize("overrides,key,accepted", REFUSED, ids=[f"{c[1]}:{i}" for i, c in enumerate(REFUSED)])
def test_values_gke_kubernetes_or_vllm_would_refuse_are_one_line_errors(overrides, key, accepted):
    with pytest.raises(ConfigError) as err:
        sizing(**overrides)
    message = str(err.value)
    assert message.startswith(f"vllm-gke:{key}"), message
    assert accepted in message and "\n" not in message, message


@pytest.mark.parametrize("arg", ["--enforce-eager", "--max-num-seqs", "--max-num-seqs=64", "64", "-q",
                                 "--enable-prefix-caching", "--hf-overrides", "--model-impl"])
def test_flags_the_program_does_not_own_pass(arg):
    assert owned_flag(arg) is None, arg


def write(tmp_path, name, data, raw=None):
    path = tmp_path / name
    path.write_bytes(raw) if raw is not None else path.write_text(json.dumps(data))
    return str(path)


def test_model_config_problems_name_model_config_file(tmp_path):
    cases = [
        (write(tmp_path, "c.json.gz", None, gzip.compress(json.dumps(LLAMA_8B).encode())), "gzip-compressed"),
        (write(tmp_path, "null.json", None), "holds a JSON null"),
        (write(tmp_path, "list.json", [1, 2]), "holds a JSON list"),
        (write(tmp_path, "bad-list.json", {**LLAMA_8B, "intermediate_size": [14336] * 3}), "one per layer"),
        (write(tmp_path, "zero.json", {**LLAMA_8B, "num_attention_heads": 0}), "num_attention_heads"),
        (write(tmp_path, "neg.json", {**LLAMA_8B, "seq_length": -1}), "seq_length must be a positive integer"),
        (write(tmp_path, "latin1.json", None, "{\"x\": \"\xe9\"}".encode("latin-1")), "not a UTF-8 JSON file"),
    ]
    for path, fragment in cases:
        with pytest.raises(ConfigError) as err:
            settings(model={"id": "org/m", "configFile": path})
        assert str(err.value).startswith("vllm-gke:model.configFile") and fragment in str(err.value), str(err.value)


def test_a_per_layer_intermediate_size_list_is_accepted_as_vllm_accepts_it(tmp_path):
    path = write(tmp_path, "per-layer.json", {**LLAMA_8B, "intermediate_size": [14336] * 32})
    assert sizing(model={"id": "org/m", "configFile": path}).parameter_count == sizing().parameter_count


def test_context_length_is_derived_the_way_vllm_derives_it():
    assert context_length(LLAMA_8B, "x") == 131072  # llama3 RoPE: vLLM does not apply the factor
    assert context_length({**LLAMA_8B, "seq_length": 4096}, "x") == 4096  # the smallest key wins
    assert context_length({"n_positions": 2048, "rope_scaling": {"type": "linear", "factor": 4}}, "x") == 8192
    assert context_length({"max_position_embeddings": 32768, "model_max_length": 8192}, "x") == 8192


def test_max_model_len_above_a_seq_length_vllm_honours_is_refused(tmp_path):
    path = write(tmp_path, "short.json", {**LLAMA_8B, "seq_length": 4096})
    with pytest.raises(ConfigError) as err:
        settings(model={"id": "org/m", "configFile": path}, vllm={"maxModelLen": 8192})
    assert str(err.value).startswith("vllm-gke:vllm.maxModelLen = 8192") and "at most 4096" in str(err.value)


def test_a_utilization_too_low_for_any_layout_is_blamed_on_the_utilization():
    # 405B over single-L4 nodes: no layout of up to 64 nodes fits at 0.11, one of 42 nodes does at 0.9.
    with pytest.raises(ConfigError) as err:
        sizing(model=model("Llama-3.1-405B-Instruct"), vllm={"gpuMemoryUtilization": 0.11, "maxModelLen": 4096})
    message = str(err.value)
    assert message.startswith("vllm-gke:vllm.gpuMemoryUtilization = 0.11"), message
    assert "at 0.9 it fits" in message and "raise vllm.gpuMemoryUtilization" in message, message
