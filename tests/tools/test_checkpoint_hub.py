"""The checkpoint's tensors read where the plan reads config.json from the Hub: huggingface_hub's own client
(get_safetensors_metadata, hf_hub_download) against a Hub stand-in over HTTP (tests/hub_standin.py), in a fresh
process that points HF_ENDPOINT at it. Only headers travel: every read of a .safetensors file is a byte range."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from planner.catalog import GIB
from planner.checkpoint import read_directory, read_header, tensor_bytes
from planner.config import PROJECT_DIR
from tests.hub_standin import HubStandIn
from tests.unit.test_checkpoint import generated_checkpoint

CONFIG = PROJECT_DIR / "models" / "Llama-3.1-8B-Instruct.json"


def hub_repo(root: Path, name: str, *, safetensors: bool = True) -> Path:
    """ROOT/org/NAME: Llama-3.1-8B's config.json and, with `safetensors`, a generated two-file checkpoint and its
    index (a sharded repository, as large models are stored)."""
    repo = root / "org" / name
    repo.mkdir(parents=True)
    shutil.copy(CONFIG, repo / "config.json")
    if safetensors:
        generated_checkpoint(repo)
        weight_map = {tensor: path.name for path in sorted(repo.glob("*.safetensors")) for tensor in read_header(path)}
        (repo / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    else:
        (repo / "pytorch_model.bin").write_bytes(b"not read")
    return repo


def run(args: list[str], hub: HubStandIn, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env |= {"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    return subprocess.run([sys.executable, *args], cwd=PROJECT_DIR, env=env, capture_output=True, text=True,
                          timeout=300)


def test_checkpoint_tensors_reads_a_hub_repositorys_headers_by_range_only(tmp_path):
    repo = hub_repo(tmp_path / "hub", "tiny")
    out = tmp_path / "tensors.json"
    with HubStandIn(tmp_path / "hub") as hub:
        done = run(["-m", "tools.checkpoint_tensors", "org/tiny", "--out", str(out)], hub, tmp_path)
    assert done.returncode == 0, done.stderr
    written = json.loads(out.read_text())
    assert written["tensors"] == read_directory(repo) and written["source"] == "org/tiny@main"
    assert written["files"] == sorted(p.name for p in repo.glob("*.safetensors"))
    reads = [rng for method, path, rng in hub.requests if method == "GET" and path.endswith(".safetensors")]
    assert len(reads) == 2 and all(rng and rng.startswith("bytes=0-") for rng in reads), hub.requests


def test_a_stack_whose_config_comes_from_the_hub_plans_the_weights_from_its_headers(tmp_path):
    repo = hub_repo(tmp_path / "hub", "tiny")
    hub_repo(tmp_path / "hub", "no-safetensors", safetensors=False)
    loaded, _ = tensor_bytes(read_directory(repo), 32, 0, "x")
    plan = ["-m", "tools.plan", "--stack", "dev", "--set", "model.configFile=null", "--set", "model.id=org/tiny"]
    with HubStandIn(tmp_path / "hub") as hub:
        headers = run(plan, hub, tmp_path)
        shard_reads = [path for method, path, _ in hub.requests if method == "GET" and path.endswith(".safetensors")]
        counted = run([*plan[:-1], "model.id=org/no-safetensors"], hub, tmp_path)
    assert headers.returncode == 0, headers.stderr
    # tools.plan builds the settings, then the program under Pulumi's mocks builds them again: one read of each shard.
    assert len(shard_reads) == len(set(shard_reads)) == 2, shard_reads
    assert (f"weights: {loaded / GIB:,.2f} GiB, the checkpoint's tensors (the safetensors headers on the Hub, "
            "org/tiny@main)") in headers.stdout
    assert "model architecture fetched from Hugging Face (org/tiny@main)" in headers.stdout
    # A repository without safetensors plans from the count, and says why in one line; it is not refused.
    assert counted.returncode == 0, counted.stderr
    assert "counted from config.json" in counted.stdout
    [line] = [ln for ln in counted.stdout.splitlines() if "safetensors headers could not be read" in ln]
    assert "org/no-safetensors" in line and "weights are counted from config.json" in line
