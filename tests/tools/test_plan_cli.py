"""`python -m tools.plan`: JSON shape, exit codes, YAML output."""

import json
import subprocess
import sys

import pytest
import yaml

from planner.config import PROJECT_DIR

SIZING_KEYS = {"accelerator", "machine_type", "gpus_per_node", "nodes_per_replica", "tensor_parallel_size",
               "pipeline_parallel_size", "weights_gib", "kv_cache_tokens_per_replica", "max_model_len",
               "estimated_load_seconds"}


def run_plan(*args):
    return subprocess.run([sys.executable, "-m", "tools.plan", *args], cwd=PROJECT_DIR,
                          capture_output=True, text=True, timeout=120)


def test_plan_json_for_dev_has_the_sizing_keys_and_the_l4_layout():
    result = run_plan("--stack", "dev", "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["stack"] == "dev"
    assert set(doc["sizing"]) >= SIZING_KEYS
    s = doc["sizing"]
    assert (s["tensor_parallel_size"], s["pipeline_parallel_size"], s["nodes_per_replica"]) == (1, 1, 1)
    assert all(set(r) == {"type", "name"} for r in doc["resources"])
    assert isinstance(doc["warnings"], list)
    assert doc["cluster_rules"] == [], "the dev stack breaks no rule a cluster would enforce"
    assert doc["sizing"]["startup_probe_seconds"] >= doc["sizing"]["estimated_load_seconds"]


def _stack(tmp_path, **sections):
    config = yaml.safe_load((PROJECT_DIR / "Pulumi.dev.yaml").read_text())
    for key, value in sections.items():
        config["config"][f"vllm-gke:{key}"] = value
    path = tmp_path / "Pulumi.test.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_config_error_exits_2_with_one_line_on_stderr_and_no_traceback(tmp_path):
    path = _stack(tmp_path, parallelism={"tensor": 3})
    result = run_plan("--config", str(path), "--json")
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "vllm-gke:parallelism.tensor = 3" in lines[0]
    assert "Traceback" not in result.stderr


def test_t4_memory_error_exits_2_naming_a_layout_that_fits(tmp_path):
    path = _stack(tmp_path, accelerator={"type": "nvidia-tesla-t4", "zones": ["us-central1-a"]},
                  parallelism={"tensor": 1})
    result = run_plan("--config", str(path))
    assert result.returncode == 2
    assert "weights per GPU" in result.stderr and "a layout that fits" in result.stderr


def test_missing_stack_file_and_bad_flags_exit_2_without_traceback(tmp_path):
    missing = run_plan("--stack", "nope")
    assert missing.returncode == 2 and "no such stack file" in missing.stderr
    bad_yaml = tmp_path / "Pulumi.bad.yaml"
    bad_yaml.write_text("config: [unclosed")
    assert run_plan("--config", str(bad_yaml)).returncode == 2
    assert run_plan("--stack", "dev", "--bogus").returncode == 2


def test_secure_values_are_shown_as_placeholders(tmp_path):
    path = _stack(tmp_path, apiKey={"secure": "v1:AAAA"})
    result = run_plan("--config", str(path), "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert "v1:AAAA" not in result.stdout
    for file in (tmp_path / "out").glob("*.yaml"):
        assert "v1:AAAA" not in file.read_text()


def test_text_output_shows_sizing_and_resources():
    result = run_plan("--stack", "dev")
    assert result.returncode == 0, result.stderr
    assert "tensor_parallel_size" in result.stdout and "resources (" in result.stdout


def test_plan_out_writes_schema_valid_objects_for_single_and_multi_node_stacks(tmp_path):
    from tests.k8s_schema import validate_object

    for stack in ("dev", "prod", "multizone"):
        out = tmp_path / stack
        result = run_plan("--stack", stack, "--out", str(out))
        assert result.returncode == 0, result.stderr
        objects = [yaml.safe_load(p.read_text()) for p in sorted(out.glob("*.yaml"))]
        kinds = {o["kind"] for o in objects}
        assert {"LeaderWorkerSet", "Service", "NetworkPolicy", "PersistentVolume", "Job", "PodMonitoring",
                "HorizontalPodAutoscaler", "APIService", "Deployment"} <= kinds
        assert any(o["kind"] == "Job" and "-smoke-" in o["metadata"]["name"] for o in objects), "smoke Job"
        for obj in objects:
            validate_object(obj)
        netpol = next(o for o in objects if o["kind"] == "NetworkPolicy" and o["metadata"]["name"] == "vllm")
        assert netpol["spec"]["ingress"][0]["from"][0]["podSelector"] == netpol["spec"]["podSelector"], \
            "Ray ports (6379 included) are open only to pods of the same LeaderWorkerSet"


def test_pd_ssd_forced_on_a3_ultra_exits_2_naming_weights_disk_type(tmp_path):
    h200 = {"type": "nvidia-h200-141gb", "zones": ["us-central1-a"]}
    result = run_plan("--config", str(_stack(tmp_path, accelerator=h200, weights={"diskType": "pd-ssd"})))
    assert result.returncode == 2
    assert result.stderr.strip() == ("error: vllm-gke:weights.diskType = pd-ssd: a3-ultragpu-8g (A3 Ultra) cannot "
                                     "attach pd-ssd; accepted: hyperdisk-ml")


def test_on_demand_on_a_machine_compute_engine_does_not_sell_so_exits_2_naming_provisioning(tmp_path):
    h100 = {"type": "nvidia-h100-80gb", "zones": ["us-central1-a"], "provisioning": "on-demand"}
    result = run_plan("--config", str(_stack(tmp_path, accelerator=h100)))
    assert result.returncode == 2
    assert "vllm-gke:accelerator.provisioning = on-demand: Compute Engine does not sell a3-highgpu-1g" in result.stderr
    assert result.stderr.strip().endswith("accepted: flex-start, spot")


def test_an_h200_stack_with_defaults_plans_hyperdisk_ml_and_flex_start(tmp_path):
    result = run_plan("--config", str(_stack(tmp_path, accelerator={"type": "nvidia-h200-141gb",
                                                                    "zones": ["us-central1-a"]})), "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["sizing"]["weights_disk_type"] == "hyperdisk-ml" and doc["sizing"]["provisioning"] == "flex-start"
    assert doc["cluster_rules"] == []


def test_chat_ui_image_prints_where_make_chat_ui_image_pushes_it():
    from planner.versions import chat_ui_tag

    result = run_plan("--stack", "prod", "--chat-ui-image")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"us-central1-docker.pkg.dev/my-gcp-project/vllm-gke-images/chat-ui:{chat_ui_tag()}"


def test_the_plan_names_the_kv_cache_dtype_a_checkpoint_declares(tmp_path):
    cfg = json.loads((PROJECT_DIR / "models" / "Meta-Llama-3.1-8B-Instruct-FP8.json").read_text())
    cfg["quantization_config"]["kv_cache_scheme"] = {"num_bits": 8, "type": "float", "strategy": "tensor",
                                                     "dynamic": False, "symmetric": True}
    (tmp_path / "fp8kv.json").write_text(json.dumps(cfg))
    model = {"id": "org/llama-fp8-kv", "configFile": str(tmp_path / "fp8kv.json")}
    declared = run_plan("--config", str(_stack(tmp_path, model=model)))
    assert declared.returncode == 0, declared.stderr
    assert "KV cache fp8 (declared by the checkpoint; vllm.kvCacheDtype auto)" in declared.stdout
    chosen = run_plan("--config", str(_stack(tmp_path, model=model, vllm={"kvCacheDtype": "bfloat16"})))
    assert "KV cache bfloat16 (vllm.kvCacheDtype)" in chosen.stdout


@pytest.mark.parametrize("stack, sets", [("dev", ["serving.routing=epp"]), ("dev", ["serving.routing=gke-gateway"]),
                                         ("multizone", []), ("prod", ["autoscaling.headroom=1"])])
def test_the_routing_multizone_and_headroom_plans_break_no_cluster_rule(stack, sets):
    """Issue 40: `make plan` on these stacks runs every cluster and router rule (awaits over the recorded
    dependencies, health-checker reach, RBAC, Envoy) and reports none broken."""
    args = [sys.executable, "-m", "tools.plan", "--stack", stack, *[a for s in sets for a in ("--set", s)]]
    done = subprocess.run(args, cwd=PROJECT_DIR, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "): no violations" in done.stdout and "error:" not in done.stderr


def test_make_plan_writes_byte_identical_files_for_the_same_stack(tmp_path):
    """Rendered objects diff across commits and in pull requests only if the same stack gives the same bytes; the
    fields of an object arrive from Pulumi's runtime in the order its outputs resolve, which varies run to run."""
    runs = []
    for index in range(2):
        out = tmp_path / f"run{index}"
        assert run_plan("--stack", "dev", "--set", "serving.routing=epp", "--out", str(out)).returncode == 0
        runs.append({p.name: p.read_bytes() for p in sorted(out.iterdir())})
    assert len(runs[0]) > 30 and runs[0] == runs[1]
    head = next(v for k, v in runs[0].items() if k.startswith("deployment-")).decode().splitlines()[:3]
    assert [line.split(":")[0] for line in head] == ["apiVersion", "kind", "metadata"]


def test_the_multizone_plan_prints_every_rung_and_checks_the_compute_class():
    # `make plan STACK=multizone` as a user runs it (a process of its own: the plan closes its event loop)
    done = run_plan("--stack", "multizone")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    rows = [line for line in out.splitlines() if "a3-" in line and ("flex-start" in line or "demand" in line
                                                                     or "reservation" in line)]
    assert len(rows) == 4, out
    assert "multi-zone volume projects/my-gcp-project/zones/multi-zone/disks/" in out
    assert "cluster rules" in out and "no violations" in out


def test_the_plan_says_where_the_weights_come_from_and_plans_an_unsized_layer_kind_with_a_warning(tmp_path):
    """`make plan` prints the weights' source; a config with a layer kind the planner does not size (a sparse
    indexer's `indexed_attention`) plans with a layout chosen with its KV cache counted as full attention, or with
    the parallelism stated, and warns once either way."""
    dev = run_plan("--stack", "dev")
    assert dev.returncode == 0, dev.stderr
    assert "weights: 14.96 GiB, counted from config.json" in dev.stdout
    cfg = json.loads((PROJECT_DIR / "models" / "Qwen3-30B-A3B.json").read_text())
    cfg["layer_types"] = ["indexed_attention"] * cfg["num_hidden_layers"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    model = ["--set", f"model.configFile={path}", "--set", "accelerator.type=nvidia-h100-80gb",
             "--set", "accelerator.machineType=a3-highgpu-8g", "--set", "vllm.maxModelLen=8192"]
    chosen = run_plan("--stack", "dev", *model)
    assert chosen.returncode == 0, chosen.stderr
    warnings = [line for line in chosen.stdout.splitlines() if "does not size yet" in line]
    assert len(warnings) == 1 and "indexed_attention" in warnings[0] and "counted as full attention" in warnings[0]
    planned = run_plan("--stack", "dev", *model, "--set", "parallelism.tensor=4", "--set", "model.weightsGib=57")
    assert planned.returncode == 0, planned.stderr
    assert "weights: 57.00 GiB, stated (model.weightsGib)" in planned.stdout
    warnings = [line for line in planned.stdout.splitlines() if "does not size yet" in line]
    assert len(warnings) == 1 and warnings[0].startswith("warning: ") and "indexed_attention" in warnings[0]


def test_a_deepseek_v4_stack_plans_sized_with_its_fp8_ds_mla_cache():
    """DeepSeek V4 on an 8 x H200 node: its layers sized (no unsized warning), the KV cache named as vLLM keeps it
    (FlashMLA's fp8_ds_mla under vllm.kvCacheDtype auto), the weights counted from config.json."""
    result = run_plan("--stack", "dev", "--set", "model.id=deepseek-ai/DeepSeek-V4-Flash",
                      "--set", "model.configFile=bench/configs/deepseek-v4-flash-shaped.json",
                      "--set", "accelerator.type=nvidia-h200-141gb", "--set", "accelerator.machineType=a3-ultragpu-8g",
                      "--set", "vllm.maxModelLen=65536")
    assert result.returncode == 0, result.stderr
    assert "KV cache fp8_ds_mla, FlashMLA's FP8 layout DeepSeek V4 keeps (vllm.kvCacheDtype auto)" in result.stdout
    assert "weights: 146.13 GiB, counted from config.json" in result.stdout
    assert "does not size yet" not in result.stdout
