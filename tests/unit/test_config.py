"""Stack config validation: every bad value is one ConfigError naming key, value and what is accepted."""

import json

import pytest

from planner.config import build_settings, project_defaults
from planner.errors import ConfigError
from tests.helpers import accel, model, raw, settings

BAD = [
    # (overrides, key named in the error, fragment of what is accepted)
    ({"accelerator": accel("nvidia-tesla-v100")}, "accelerator.type", "nvidia-l4"),
    ({"accelerator": accel("nvidia-l4", "a3-highgpu-8g")}, "accelerator.machineType", "g2-standard-24"),
    ({"accelerator": accel("nvidia-l4", "g2-standard-24", gpusPerNode=4)}, "accelerator.gpusPerNode", "use 2"),
    ({"accelerator": accel("nvidia-h200-141gb", gpusPerNode=2)}, "accelerator.gpusPerNode", "carry 8"),
    ({"accelerator": {"type": "nvidia-l4", "zones": []}}, "accelerator.zones", "at least one zone"),
    ({"accelerator": accel("nvidia-l4", provisioning="preemptible")}, "accelerator.provisioning", "spot"),
    ({"accelerator": accel("nvidia-l4", provisioning="reservation")}, "accelerator.reservation", "is required"),
    ({"accelerator": accel("nvidia-l4", reservation="r1")}, "accelerator.reservation", "only used with"),
    ({"accelerator": accel("nvidia-l4", driverVersion="535")}, "accelerator.driverVersion", "LATEST"),
    ({"accelerator": accel("nvidia-l4", zone="us-central1-a")}, "accelerator.zone", "accepted keys"),
    ({"model": {"configFile": "models/Llama-3.1-8B-Instruct.json"}}, "model.id", "required"),
    ({"model": {**model("Llama-3.1-8B-Instruct"), "source": "s3"}}, "model.source", "huggingface, gcs"),
    ({"model": {**model("Llama-3.1-8B-Instruct"), "source": "gcs"}}, "model.gcsUri", "gs://"),
    ({"model": {**model("Llama-3.1-8B-Instruct"), "gcsUri": "gs://bucket/m"}}, "model.gcsUri", "only used with"),
    ({"model": {"id": "x/y", "configFile": "models/missing.json"}}, "model.configFile", "no such file"),
    ({"model": {"id": "x/y", "architecture": {"hidden_size": 64}}}, "model.architecture", "num_hidden_layers"),
    ({"model": {**model("Llama-3.1-8B-Instruct"), "weightsGib": -3}}, "model.weightsGib", "number in"),
    ({"model": {**model("Llama-3.1-8B-Instruct"), "revison": "abc"}}, "model.revison", "accepted keys"),
    ({"parallelism": {"tensor": 0}}, "parallelism.tensor", "integer >= 1"),
    ({"parallelism": {"tensor": "two"}}, "parallelism.tensor", "integer >= 1"),
    ({"parallelism": {"minConcurrentSequences": 0}}, "parallelism.minConcurrentSequences", ">= 1"),
    ({"vllm": {"image": "vllm/vllm-openai:latest"}}, "vllm.image", "pin a tag"),
    ({"vllm": {"image": "vllm/vllm-openai"}}, "vllm.image", "pin a tag"),
    ({"vllm": {"gpuMemoryUtilization": 1.5}}, "vllm.gpuMemoryUtilization", "(0.1, 0.99]"),
    ({"vllm": {"dtype": "int8"}}, "vllm.dtype", "bfloat16"),
    ({"vllm": {"kvCacheDtype": "int4"}}, "vllm.kvCacheDtype", "fp8"),
    ({"vllm": {"maxModelLen": 200000}}, "vllm.maxModelLen", "at most 131072"),
    ({"vllm": {"extraArgs": ["--tensor-parallel-size=2"]}}, "vllm.extraArgs", "set by the program"),
    ({"vllm": {"extraArgs": "--enforce-eager"}}, "vllm.extraArgs", "list of non-empty strings"),
    ({"weights": {"diskType": "pd-standard"}}, "weights.diskType", "hyperdisk-ml"),
    ({"weights": {"sizeGib": 5}}, "weights.sizeGib", ">= 10"),
    ({"accelerator": accel("nvidia-tesla-t4"), "weights": {"diskType": "hyperdisk-ml"}},
     "weights.diskType", "cannot attach hyperdisk-ml; accepted: pd-ssd, pd-balanced"),
    ({"autoscaling": {"minReplicas": 3, "maxReplicas": 2}}, "autoscaling.minReplicas", "must not exceed"),
    ({"autoscaling": {"metric": "cpu"}}, "autoscaling.metric", "queue, batch"),
    ({"autoscaling": {"minReplicas": 0}}, "autoscaling.minReplicas", ">= 1"),
    ({"serving": {"expose": "public-lb"}}, "serving.expose", "cluster-ip, internal-lb"),
    ({"serving": {"installLws": "yes"}}, "serving.installLws", "true or false"),
    ({"serving": {"sourceRanges": ["10.0.0.1/8"]}}, "serving.sourceRanges", "CIDR form"),
    ({"serving": {"sourceRanges": ["vpc"]}}, "serving.sourceRanges", "CIDR form"),
    ({"serving": {"sourceRanges": []}}, "serving.sourceRanges", "at least one CIDR"),
    ({"monitoring": {"scrapeInterval": "1m"}}, "monitoring.scrapeInterval", "15s"),
    ({"cluster": {"releaseChannel": "NIGHTLY"}}, "cluster.releaseChannel", "REGULAR"),
    ({"cluster": None}, "cluster.name", "required"),
    ({"clustr": {"name": "x"}}, "clustr", "accepted keys"),
]


@pytest.mark.parametrize("overrides,key,accepted", BAD, ids=[b[1] + ":" + str(i) for i, b in enumerate(BAD)])
def test_each_invalid_value_raises_one_config_error_naming_the_key(overrides, key, accepted):
    with pytest.raises(ConfigError) as err:
        settings(**overrides)
    message = str(err.value)
    assert message.startswith(f"vllm-gke:{key}"), f"error must name vllm-gke:{key}: {message}"
    assert accepted in message, f"error must say what is accepted ({accepted!r}): {message}"
    assert "\n" not in message, "an error is one line"


def test_defaults_come_from_pulumi_yaml_and_stack_values_override_field_by_field():
    defaults = project_defaults()
    s = settings()
    assert s.vllm.gpu_memory_utilization == defaults["vllm"]["gpuMemoryUtilization"]
    assert s.vllm.image == defaults["vllm"]["image"]
    assert s.vllm.max_model_len == 8192, "the dev stack's maxModelLen must override the (absent) default"
    assert s.accelerator.provisioning == "on-demand"
    assert s.serving.namespace == defaults["serving"]["namespace"]


def test_machine_type_and_gpu_count_derive_from_each_other():
    by_count = settings(accelerator=accel("nvidia-l4", gpusPerNode=4)).accelerator
    assert by_count.machine_type == "g2-standard-48"
    by_machine = settings(accelerator=accel("nvidia-a100-80gb", "a2-ultragpu-2g")).accelerator
    assert by_machine.gpus_per_node == 2
    default = settings(accelerator=accel("nvidia-h100-80gb")).accelerator
    assert (default.machine_type, default.gpus_per_node) == ("a3-highgpu-1g", 1)


def test_object_values_given_as_json_strings_are_decoded_like_pulumi_hands_them():
    import json

    config = {k: json.dumps(v) for k, v in raw().items()}
    assert build_settings(config).model.architecture.num_layers == 32


def test_unset_max_model_len_defaults_to_the_models_context_length():
    s = settings(vllm={"maxModelLen": None}, accelerator=accel("nvidia-h200-141gb"))
    assert s.vllm.max_model_len == 131072


def test_inline_architecture_equals_the_config_file():
    import json
    from pathlib import Path

    data = json.loads(Path("models/Qwen2.5-7B-Instruct.json").read_text())
    inline = settings(model={"id": "Qwen/Qwen2.5-7B-Instruct", "architecture": data}).model.architecture
    from_file = settings(model=model("Qwen2.5-7B-Instruct")).model.architecture
    assert inline.parameter_count() == from_file.parameter_count()


def test_without_config_file_the_hub_fetch_fails_offline_with_advice(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError) as err:
        settings(model={"id": "meta-llama/Llama-3.1-8B-Instruct"})
    assert str(err.value).startswith("vllm-gke:model.id = meta-llama/Llama-3.1-8B-Instruct")
    assert "model.configFile" in str(err.value)
    # no request left the process: the variable is honoured when the call is made, even after huggingface_hub was
    # imported (it reads the variable once, at import, and otherwise retries the Hub)
    assert "outgoing traffic has been disabled" in str(err.value)


def test_secrets_are_known_keys_and_only_their_presence_is_kept():
    s = build_settings({**raw(), "hfToken": "hf_abc", "apiKey": "k"})
    assert s.has_hf_token and s.has_api_key
    assert "hf_abc" not in repr(s), "settings must not hold secret values"


def test_a_config_class_only_remote_code_has_asks_for_model_trust_remote_code(tmp_path):
    """Llama-Nemotron's config.json names configuration_decilm.DeciLMConfig (auto_map) for model_type nemotron-nas,
    which neither transformers nor vLLM 0.32.0 has: vLLM starts it only with --trust-remote-code (held to vLLM's own
    parser in tests/engine/test_vllm_reads_configs.py), so the plan asks for the key; with it the model plans as
    the same config without auto_map does. --trust-remote-code in vllm.extraArgs points at the key."""
    from pathlib import Path

    nas = json.loads((Path(__file__).resolve().parents[2] / "bench" / "configs" / "nemotron-super-49b.json")
                     .read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**nas, "auto_map": {"AutoConfig": "configuration_decilm.DeciLMConfig"}}))
    h100 = accel("nvidia-h100-80gb", "a3-highgpu-8g")
    nemotron = {"id": "nvidia/Llama-3_3-Nemotron-Super-49B-v1", "configFile": str(path)}
    with pytest.raises(ConfigError) as err:
        settings(model=nemotron, accelerator=h100)
    assert err.value.key == "model.trustRemoteCode" and "configuration_decilm.DeciLMConfig" in str(err.value)
    assert "\n" not in str(err.value)
    trusted = settings(model={**nemotron, "trustRemoteCode": True}, accelerator=h100)
    assert trusted.model.trust_remote_code and trusted.model.architecture.model_type == "nemotron-nas"
    assert trusted.model.architecture.num_layers == len(nas["block_configs"])
    assert any("--trust-remote-code" in w and "DeciLMConfig" in w for w in trusted.warnings)
    with pytest.raises(ConfigError) as err:
        settings(model=model("Llama-3.1-8B-Instruct"), vllm={"extraArgs": ["--trust_remote_code"]})
    assert err.value.key == "vllm.extraArgs" and "model.trustRemoteCode" in str(err.value)


def test_a_remote_code_model_the_planner_cannot_read_plans_with_stated_parallelism_and_says_so(tmp_path):
    """InternLM2's config class is remote code with no reading in the planner: with model.trustRemoteCode, a stated
    tensor size and model.weightsGib it plans, and the plan names the class and what it did not verify."""
    from tests.helpers import sizing

    path = tmp_path / "config.json"
    path.write_text(json.dumps({
        "model_type": "internlm2", "architectures": ["InternLM2ForCausalLM"],
        "auto_map": {"AutoConfig": "configuration_internlm2.InternLM2Config"}, "hidden_size": 4096,
        "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32, "intermediate_size": 14336,
        "vocab_size": 92544, "max_position_embeddings": 32768}))
    plan = sizing(model={"id": "internlm/internlm2_5-7b-chat", "configFile": str(path), "weightsGib": 15.5,
                         "trustRemoteCode": True},
                  accelerator=accel("nvidia-h100-80gb", "a3-highgpu-1g"), parallelism={"tensor": 1})
    assert plan.tensor_parallel_size == 1 and plan.weights_gib == 15.5
    assert any("InternLM2Config" in w and "does not verify the KV tokens" in w for w in plan.warnings)
