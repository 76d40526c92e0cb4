"""Bad input, second pass: values GKE, Kubernetes or vLLM would refuse are refused here first, each with one line
naming the key, the value and what is accepted (issue: 86 hostile stack files and model configs)."""

from __future__ import annotations

import gzip
import json

import pytest

from planner.config import PROJECT_DIR
from planner.errors import ConfigError
from planner.model_config import context_length
from planner.vllm_flags import owned_flag
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
    # third pass: numbers and durations in ASCII digits only (int(), float() and \d take other scripts' digits)
    ({"parallelism": {"tensor": "٢"}}, "parallelism.tensor", "ASCII digits"),
    ({"vllm": {"maxModelLen": "４０９６"}}, "vllm.maxModelLen", "ASCII digits"),
    ({"vllm": {"gpuMemoryUtilization": "٠.٩"}}, "vllm.gpuMemoryUtilization", "ASCII digits"),
    ({"vllm": {"gpuMemoryUtilization": "nan"}}, "vllm.gpuMemoryUtilization", "(0.1, 0.99]"),
    ({"weights": {"sizeGib": "²"}}, "weights.sizeGib", "ASCII digits"),  # str.isdigit() is True, int() raises
    ({"monitoring": {"scrapeInterval": "١٥s"}}, "monitoring.scrapeInterval", "ASCII digits"),
    # names matched whole: `$` also matches before a trailing newline
    ({"serving": {"namespace": "vllm\n"}}, "serving.namespace = \"vllm\\n\"", "DNS label"),
    ({"cluster": {"location": "us-central1\n"}}, "cluster.location", "us-central1"),
    # fourth pass (issue 40). Values sent to Google Cloud, checked as the cloud checks them: zone letters of the
    # region, Compute Engine and Cloud Storage names, a proxy-only range that is a real subnet range
    ({"accelerator": accel("nvidia-l4") | {"zones": ["us-central1-d"]}}, "accelerator.zones",
     "us-central1 has zones us-central1-a, us-central1-b, us-central1-c, us-central1-f"),
    ({"cluster": {"location": "europe-west1-a"}}, "cluster.location", "europe-west1 has zones europe-west1-b"),
    ({"accelerator": accel("nvidia-l4", provisioning="reservation", reservation="L4_Serving")},
     "accelerator.reservation", "a Compute Engine name is 1-63 characters"),
    ({"model": {**model("Llama-3.1-8B-Instruct"), "source": "gcs", "gcsUri": "gs://My_Models/llama"}},
     "model.gcsUri", "a bucket name is 3-63 characters"),
    ({"model": {**model("Llama-3.1-8B-Instruct"), "source": "gcs", "gcsUri": "gs://google-models/llama"}},
     "model.gcsUri", 'may not start with "goog" or contain "google"'),
    ({"model": {**model("Llama-3.1-8B-Instruct"), "source": "gcs", "gcsUri": "s3://models/llama"}},
     "model.gcsUri", "expected gs://bucket/prefix"),
    ({"serving": {"routing": "gke-gateway", "proxySubnetCidr": "127.0.0.0/23"}}, "serving.proxySubnetCidr",
     "loopback, link-local, multicast"),
    ({"serving": {"routing": "gke-gateway", "proxySubnetCidr": "0.0.0.0/0"}}, "serving.proxySubnetCidr",
     "from /8 to /26"),
    ({"serving": {"expose": "internal-lb", "sourceRanges": ["127.0.0.1/32"]}}, "serving.sourceRanges",
     "loopback, link-local, multicast"),
    # image references the kubelet refuses
    ({"vllm": {"image": "vllm/vllm-openai:v0.32.0 "}}, "vllm.image", "no leading or trailing white space"),
    ({"vllm": {"image": "vllm/vLLM-openai:v0.32.0"}}, "vllm.image", "not an image reference"),
    ({"vllm": {"image": "Vllm/vllm-openai:v0.32.0"}}, "vllm.image", "a repository path is lowercase"),
    ({"vllm": {"image": "vllm/vllm-openai@sha256:1234"}}, "vllm.image", "not an image reference"),
    ({"serving": {"chatUi": True, "chatUiImage": "my repo/chat-ui:1.0"}}, "serving.chatUiImage",
     "not an image reference"),
    # a rule of the primary GPU checked on every fallback's GPU with the same code
    ({"accelerator": accel("nvidia-l4") | {"fallbacks": [{"type": "nvidia-tesla-t4"}]},
      "model": model("Llama-3.2-1B-Instruct"), "vllm": {"dtype": "bfloat16"}}, "accelerator.fallbacks[0].type",
     "no bfloat16"),
    # vLLM flags as its parser reads them: `_` or `-`, a prefix; a flag it does not have
    ({"serving": {"routing": "epp"}, "vllm": {"extraArgs": ["--no_enable_prefix_caching"]}}, "vllm.extraArgs",
     "turns off the prefix cache"),
    ({"serving": {"routing": "epp"}, "vllm": {"extraArgs": ["--no-enable-prefix"]}}, "vllm.extraArgs",
     "turns off the prefix cache"),
    ({"vllm": {"extraArgs": ["--enable-prefx-caching"]}}, "vllm.extraArgs", "did you mean --enable-prefix-caching"),
    ({"vllm": {"extraArgs": ["--enable"]}}, "vllm.extraArgs", "ambiguous"),
    # a flag the rendered command passes that the image's vLLM lacks; a KV dtype vLLM refuses with the checkpoint
    ({"vllm": {"image": "vllm/vllm-openai:v0.17.1"}}, "vllm.image", "has no --shutdown-timeout"),
    ({"model": model("Qwen3-8B-FP8"), "vllm": {"kvCacheDtype": "fp8_e5m2"}}, "vllm.kvCacheDtype",
     "vLLM refuses fp8_e5m2"),
    # a Mamba-style state dtype vLLM's parser refuses; a float16 Kimi Delta Attention state, which vLLM refuses
    ({"vllm": {"extraArgs": ["--mamba-ssm-cache-dtype", "fp8"]}}, "vllm.extraArgs",
     "takes one of auto, float32, float16, bfloat16"),
    ({"model": model("Kimi-Linear-48B-A3B-Instruct"), "accelerator": accel("nvidia-h200-141gb"),
      "vllm": {"extraArgs": ["--mamba_ssm_cache_dtype=float16"]}}, "vllm.extraArgs", "float32 or bfloat16 only"),
    # CUDA-graph capture sizes vLLM's parser refuses (list[int] options take separate words)
    ({"vllm": {"extraArgs": ["--cudagraph-capture-sizes=1,2,4"]}}, "vllm.extraArgs",
     "--cudagraph-capture-sizes takes one or more positive integers, as separate words"),
    ({"vllm": {"extraArgs": ["--cudagraph-capture-sizes", "--enforce-eager"]}}, "vllm.extraArgs",
     "--cudagraph-capture-sizes takes one or more positive integers"),
    ({"vllm": {"extraArgs": ["--max-cudagraph-capture-size", "0"]}}, "vllm.extraArgs",
     "--max-cudagraph-capture-size takes a positive integer"),
    ({"vllm": {"extraArgs": ["--limit-mm-per-prompt", "image=0"]}}, "vllm.extraArgs",
     "--limit-mm-per-prompt takes a JSON object"),
    ({"vllm": {"extraArgs": ["--limit-mm-per-prompt", "[0]"]}}, "vllm.extraArgs",
     "--limit-mm-per-prompt takes a JSON object of modality limits"),
    ({"vllm": {"extraArgs": ["--mm-processor-kwargs", "max_pixels=1003520"]}}, "vllm.extraArgs",
     "--mm-processor-kwargs takes a JSON object"),
    ({"vllm": {"extraArgs": ["--mm-processor-kwargs.max_pixels", "-5"]}}, "vllm.extraArgs",
     "max_pixels takes a positive whole number of pixels"),
    ({"vllm": {"extraArgs": ["--mm-processor-kwargs", '{"images_kwargs": {"size": {"longest_edge": "big"}}}']}},
     "vllm.extraArgs", "size.longest_edge takes a positive whole number of pixels"),
    ({"vllm": {"extraArgs": ["--mm-processor-kwargs", '{"do_pan_and_scan": "yes"}']}}, "vllm.extraArgs",
     "do_pan_and_scan takes true or false"),
    ({"vllm": {"extraArgs": ["--mm-processor-kwargs.images_kwargs.pan_and_scan_max_num_crops", "0"]}},
     "vllm.extraArgs", "pan_and_scan_max_num_crops takes a positive whole number"),
    # an item vLLM schedules whole that is larger than one batch (it exits at start)
    ({"model": model("gemma-3-4b-it"), "accelerator": accel("nvidia-h200-141gb"),
      "vllm": {"extraArgs": ["--max-num-batched-tokens", "2048", "--mm-processor-kwargs",
                             '{"do_pan_and_scan": true, "pan_and_scan_max_num_crops": 20}']}},
     "vllm.extraArgs", "largest multimodal item is 5,376 tokens"),
    ({"vllm": {"extraArgs": ["--max-cudagraph-capture-size", "32", "--cudagraph-capture-sizes", "8", "16", "64"]}},
     "vllm.extraArgs", "other than the largest capture size up to max_num_batched_tokens (2048), here 64"),
    # both bounds where the value breaks the upper one
    ({"serving": {"routing": "epp", "prefixScorer": "off", "routerReplicas": 9}}, "serving.routerReplicas",
     "from 1 to 5"),
    ({"autoscaling": {"headroom": 17}}, "autoscaling.headroom", "from 0 to 16"),
    ({"serving": {"requestTimeoutSeconds": 90000}}, "serving.requestTimeoutSeconds", "from 10 to 86400"),
    ({"weights": {"loadSeconds": 4000}}, "weights.loadSeconds", "from 5 to 3600"),
    # an error inside a list item names the item's key path
    ({"accelerator": accel("nvidia-l4") | {"fallbacks": [{"type": "nvidia-l5"}]}}, "accelerator.fallbacks[0].type",
     "accepted: nvidia-tesla-t4"),
    ({"accelerator": accel("nvidia-l4") | {"fallbacks": [{"type": "nvidia-l4", "machinetype": "g2-standard-8"}]}},
     "accelerator.fallbacks[0].machinetype", "unknown key; accepted keys: machineType"),
]


@pytest.mark.parametrize("overrides,key,accepted", REFUSED, ids=[f"{c[1]}:{i}" for i, c in enumerate(REFUSED)])
def test_values_gke_kubernetes_or_vllm_would_refuse_are_one_line_errors(overrides, key, accepted):
    with pytest.raises(ConfigError) as err:
        sizing(**overrides)
    message = str(err.value)
    assert message.startswith(f"vllm-gke:{key}"), message
    assert accepted in message and "\n" not in message, message


ACCEPTED = [
    # what Google Cloud and vLLM accept passes: a dotted bucket name, a shared-address proxy range, every spelling
    # of a flag vLLM's parser reads, a fallback GPU without bfloat16 under dtype auto, fp8_e5m2 on a weight-only
    # compressed-tensors checkpoint (vLLM keeps it: attention.py _init_kv_cache_quant)
    {"model": {**model("Llama-3.1-8B-Instruct"), "source": "gcs", "gcsUri": "gs://team.models.example/llama"}},
    {"serving": {"routing": "gke-gateway", "proxySubnetCidr": "100.64.0.0/23"}},
    {"vllm": {"extraArgs": ["--max_num_seqs=64", "--enforce_eager", "--max-num-batched", "8192"]}},
    {"accelerator": accel("nvidia-l4") | {"fallbacks": [{"type": "nvidia-tesla-t4"}]},
     "model": model("Llama-3.2-1B-Instruct")},
    {"model": model("Meta-Llama-3.1-8B-Instruct-FP8"), "vllm": {"kvCacheDtype": "fp8_e5m2"}},
    {"vllm": {"image": "us-docker.pkg.dev/my-project/mirror/vllm-openai@sha256:" + "0" * 64}},
    {"vllm": {"image": "localhost:5000/vllm/vllm-openai:v0.18.0"}},
    {"model": model("Kimi-Linear-48B-A3B-Instruct"), "accelerator": accel("nvidia-h200-141gb"),
     "vllm": {"extraArgs": ["--mamba-ssm", "bfloat16", "--mamba_cache_dtype=float32"]}},
    # vLLM 0.25.1 ignores the SSM flag for a KDA state (planner/engine.py kda_ssm_flag), so float16 starts there
    {"model": model("Kimi-Linear-48B-A3B-Instruct"), "accelerator": accel("nvidia-h200-141gb"),
     "vllm": {"image": "vllm/vllm-openai:v0.25.1", "extraArgs": ["--mamba-ssm-cache-dtype", "float16"]}},
    # Ling 3.0's KDA state never reads the SSM flag (bailing_moe_v3.py get_state_dtype), so vLLM 0.32.0 takes float16
    {"model": {"id": "org/ling-3.0-tiny", "configFile": "bench/configs/ling-3.0-tiny.json"},
     "accelerator": accel("nvidia-h200-141gb"), "vllm": {"extraArgs": ["--mamba-ssm-cache-dtype", "float16"]}},
]


@pytest.mark.parametrize("overrides", ACCEPTED, ids=[str(i) for i in range(len(ACCEPTED))])
def test_values_google_cloud_and_vllm_accept_plan(overrides):
    assert sizing(**overrides).max_nodes >= 1


def test_fewer_cuda_graphs_leave_more_kv_cache():
    """A V1-runner model (Qwen3-Next's hybrid on vLLM 0.25.1) at 32 sequences captures 11 + 7 graphs, not 51 + 51:
    the V1 estimate's growth shrinks with them (planner/memory.py graph_scale); --max-cudagraph-capture-size 512
    captures 51 + 7 and leaves less."""
    base = {"model": model("Qwen3-Next-80B-A3B-Instruct"), "accelerator": accel("nvidia-h200-141gb")}
    image = "vllm/vllm-openai:v0.25.1"
    default = sizing(**base, vllm={"image": image, "extraArgs": ["--max-num-seqs", "32"],
                                   "maxModelLen": 8192}).kv_cache_tokens_per_replica
    captured = sizing(**base, vllm={"image": image, "extraArgs": ["--max-num-seqs", "32",
                                                                  "--max-cudagraph-capture-size", "512"],
                                    "maxModelLen": 8192}).kv_cache_tokens_per_replica
    assert default > captured


@pytest.mark.parametrize("flags", [["--language-model-only"], ["--limit-mm-per-prompt", '{"image": 0, "video": 0}'],
                                   ["--limit-mm-per-prompt", '{"image": {"count": 0}, "video": 0}']])
def test_a_multimodal_wrapper_served_text_only_plans_the_first_compiles_block(flags):
    """Served with multimodal inputs, Gemma 3's runner embeds the tokens outside the compiled graph, so no
    embedding-sized block is planned (planner/memory.py embeds_outside_graph), and its profile runs the vision
    encoder on 32 images (encoder_profile_gib); with every modality off (vLLM's ModelConfig.
    _supports_multimodal_inputs is False) the compiled forward embeds them, the block is planned and no encoder runs."""
    from planner.catalog import ACCELERATORS
    from planner.engine import PROFILES, engine_settings
    from planner.layout import Layout
    from planner.memory import peak_features
    from planner.model_config import parse_hf_config

    gemma = {"model": model("gemma-3-27b-it"), "accelerator": accel("nvidia-h200-141gb")}
    served = sizing(**gemma).kv_cache_tokens_per_replica
    text = sizing(**gemma, vllm={"extraArgs": flags}).kv_cache_tokens_per_replica
    some_images = sizing(**gemma, vllm={"extraArgs": ["--limit-mm-per-prompt", '{"image": 1, "video": 0}']})
    assert text != served == some_images.kv_cache_tokens_per_replica
    arch = parse_hf_config(json.loads((PROJECT_DIR / "models" / "gemma-3-27b-it.json").read_text()), "gemma", "test")
    h200 = ACCELERATORS["nvidia-h200-141gb"]
    for extra, text_only in (((), False), (tuple(flags), True)):
        f = peak_features(arch, Layout(1, 1, 1), engine_settings(PROFILES["0.32.0"], h200, extra))
        assert (f.embedding > 0, f.encoder > 0) == (text_only, not text_only), (extra, f)


@pytest.mark.parametrize(("name", "flags", "warned"), [("gemma-4-31B-it", [], False),
                                                      ("gemma-4-31B-it", ["--language-model-only"], False),
                                                      ("Kimi-K2.5", [], True), ("gemma-3-27b-it", [], False),
                                                      ("Qwen2.5-VL-7B-Instruct", [], False)])
def test_a_tower_whose_encoder_profile_is_not_planned_is_named_in_one_line(name, flags, warned):
    """vLLM profiles every tower it serves inputs to (planner/memory.py encoder_profile_gib); where the planner does
    not read the tower's dummy input (Kimi-K2.5: its remote-code processor's patch limit; a Gemma 4 with an audio
    tower: tests/engine/test_gemma4_encoder_vllm.py), the plan says that its KV tokens leave that profile out, and how
    to serve text only. Gemma 4's vision tower is planned (planner/memory.py gemma4_tower_bytes)."""
    h200 = accel("nvidia-h200-141gb", "a3-ultragpu-8g")
    planned = sizing(model=model(name), accelerator=h200, vllm={"extraArgs": flags, "maxModelLen": 8192})
    found = [w for w in planned.warnings if "vision encoder" in w]
    assert bool(found) == warned
    if warned:
        assert "not planned" in found[0] and "--language-model-only" in found[0] and "\n" not in found[0]


def test_flags_are_planned_as_vllms_parser_reads_them():
    planned = sizing(vllm={"extraArgs": ["--max_num_seqs=64", "--enforce_eager", "--max-num-batched", "4096"]})
    assert (planned.max_num_seqs, planned.max_num_batched_tokens) == (64, 4096)


def test_a_state_dtype_flag_reaches_the_plan():
    """Kimi Linear's float32 delta-attention states (vLLM's default) take more of its cache than bfloat16 ones."""
    kimi = {"model": model("Kimi-Linear-48B-A3B-Instruct"), "accelerator": accel("nvidia-h200-141gb")}
    default = sizing(**kimi).kv_cache_tokens_per_replica
    halved = sizing(**kimi, vllm={"extraArgs": ["--mamba-ssm-cache-dtype", "bfloat16"]}).kv_cache_tokens_per_replica
    assert halved > default, (default, halved)
    # vLLM 0.25.1 keeps it float32 whatever the flag (validation 47, docs/benchmarks.md)
    old = {**kimi, "vllm": {"image": "vllm/vllm-openai:v0.25.1"}}
    flagged = {**kimi, "vllm": {"image": "vllm/vllm-openai:v0.25.1",
                                "extraArgs": ["--mamba-ssm-cache-dtype", "bfloat16"]}}
    assert sizing(**flagged).kv_cache_tokens_per_replica == sizing(**old).kv_cache_tokens_per_replica


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


IMPOSSIBLE = [("num_hidden_layers", 0), ("num_hidden_layers", -2), ("num_attention_heads", -32),
              ("num_key_value_heads", 0), ("num_key_value_heads", -8), ("head_dim", 0), ("hidden_size", 0),
              ("vocab_size", 0), ("num_local_experts", -8), ("num_local_experts", 0), ("num_experts_per_tok", 0),
              ("num_experts_per_tok", 9), ("n_shared_experts", -1), ("moe_intermediate_size", 0),
              ("num_hidden_layers", 32.0), ("num_key_value_heads", "8"), ("num_local_experts", True)]


@pytest.mark.parametrize("field,value", IMPOSSIBLE, ids=[f"{f}={v!r}" for f, v in IMPOSSIBLE])
def test_a_count_present_but_impossible_in_config_json_is_refused_not_defaulted(tmp_path, field, value):
    """A zero, negative or non-integer count is what the checkpoint says, not a missing key: replacing it with a
    default (num_key_value_heads = heads, head_dim = hidden / heads) would plan a model vLLM refuses to start."""
    mixtral = json.loads((PROJECT_DIR / "models" / "Mixtral-8x7B-Instruct-v0.1.json").read_text())
    path = write(tmp_path, "c.json", {**mixtral, field: value})
    with pytest.raises(ConfigError) as err:
        settings(model={"id": "org/m", "configFile": path})
    message = str(err.value)
    assert message.startswith("vllm-gke:model.configFile") and "\n" not in message, message
    assert field.split("_")[-1] in message or "experts" in message, message


def test_unset_or_null_counts_still_take_vllms_defaults(tmp_path):
    path = write(tmp_path, "c.json", {**LLAMA_8B, "num_key_value_heads": None, "head_dim": None})
    arch = settings(model={"id": "org/m", "configFile": path}).model.architecture
    assert (arch.num_kv_heads, arch.head_dim) == (32, 128), "null is unset: heads and hidden / heads"


@pytest.mark.parametrize("key", ["vllm_gke:model", "VLLM-GKE:vllm", "vllm-gk:serving", "vllmgke:cluster",
                                 "vllm-gke :weights", "vlm-gke:autoscaling"])
def test_a_key_in_a_near_miss_of_the_projects_namespace_is_refused_naming_it(key):
    from planner.config import check_namespaces

    with pytest.raises(ConfigError) as err:
        check_namespaces({"gcp:project": "p", key: {"x": 1}})
    message = str(err.value)
    assert message.startswith(f"{key} = ") and f"vllm-gke:{key.partition(':')[2]}" in message, message


def test_other_projects_namespaces_pass():
    from planner.config import check_namespaces

    check_namespaces({"gcp:project": "p", "kubernetes:context": "c", "vllm-gke:model": {}, "pulumi:tags": {},
                      "vllm:x": 1, "gke:y": 2})


def test_mm_processor_kwargs_resize_the_encoder_item_and_the_last_flag_wins():
    """A larger max_pixels in --mm-processor-kwargs (JSON or dotted) grows Qwen2.5-VL's profiled image, so fewer KV
    tokens are left than with the published processor's; a flag given twice is read as vLLM's parser keeps it (the
    last)."""
    qwen = {"model": model("Qwen2.5-VL-7B-Instruct"), "accelerator": accel("nvidia-h200-141gb")}
    default = sizing(**qwen, vllm={"maxModelLen": 8192}).kv_cache_tokens_per_replica
    larger = sizing(**qwen, vllm={"maxModelLen": 8192, "extraArgs": ["--mm-processor-kwargs",
                                                                      '{"max_pixels": 25690112}']})
    dotted = sizing(**qwen, vllm={"maxModelLen": 8192, "extraArgs": ["--mm-processor-kwargs.max_pixels=25690112"]})
    twice = sizing(**qwen, vllm={"maxModelLen": 8192, "extraArgs": ["--mm-processor-kwargs", '{"max_pixels": 3136}',
                                                                     "--mm-processor-kwargs",
                                                                     '{"max_pixels": 25690112}']})
    assert default > larger.kv_cache_tokens_per_replica == dotted.kv_cache_tokens_per_replica \
        == twice.kv_cache_tokens_per_replica


def test_gemma3_pan_and_scan_items_never_hold_more_images_than_its_budget():
    """Gemma 3 attends bidirectionally over an image, so vLLM schedules an item whole: an item with its pan-and-scan
    crops must fit max_num_batched_tokens (planner/sizing.py refuse_items_over_a_batch), and the dummy batch then
    holds whole items, never more images than the budget's plain ones (5 a item with the default 4 crops: 5 images
    at 2,048 batched tokens against 8), so the plan leaves at least as many KV tokens."""
    gemma = {"model": model("gemma-3-4b-it"), "accelerator": accel("nvidia-h200-141gb")}
    small = ["--max-num-seqs", "128", "--max-num-batched-tokens", "2048"]
    plain = sizing(**gemma, vllm={"maxModelLen": 8192, "extraArgs": small}).kv_cache_tokens_per_replica
    crops = sizing(**gemma, vllm={"maxModelLen": 8192, "extraArgs": [*small, "--mm-processor-kwargs.do_pan_and_scan",
                                                                      "true"]}).kv_cache_tokens_per_replica
    assert crops >= plain


@pytest.mark.parametrize(("name", "kwargs", "limits", "warned"), [
    ("Qwen3-VL-8B-Instruct", '{"max_pixels": 33554432}', None, True),
    ("Qwen3-VL-8B-Instruct", '{"images_kwargs": {"max_pixels": 33554432}}', None, False),
    ("Qwen3-VL-8B-Instruct", '{"videos_kwargs": {"max_pixels": 50000000}}', None, True),
    ("Qwen3-VL-8B-Instruct", '{"max_pixels": 33554432}', '{"video": 0}', False),
    ("Qwen2.5-VL-7B-Instruct", '{"max_pixels": 33554432}', None, False)])
def test_a_video_size_the_plan_does_not_size_is_named_in_one_warning(name, kwargs, limits, warned):
    """Qwen3-VL's dummy video is left out of the encoder item (never larger than its image at the published sizes);
    where --mm-processor-kwargs sets the video scope's size the plan says it did not verify it. Qwen2.5-VL's video is
    sized, so no warning."""
    extra = ["--mm-processor-kwargs", kwargs] + (["--limit-mm-per-prompt", limits] if limits else [])
    found = sizing(model=model(name), accelerator=accel("nvidia-h200-141gb"), vllm={"extraArgs": extra}).warnings
    lines = [w for w in found if "video size" in w]
    assert bool(lines) == warned and all("\n" not in w for w in lines)
