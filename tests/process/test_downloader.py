"""The download Job's script, run for real against local directories (no network)."""

import json
import struct
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "images" / "model-downloader" / "download.py"


def write_safetensors(path: Path, n_floats: int) -> None:
    header = json.dumps({"w": {"dtype": "F32", "shape": [n_floats], "data_offsets": [0, 4 * n_floats]}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * (4 * n_floats))


def fake_model(root: Path) -> Path:
    src = root / "src"
    src.mkdir()
    (src / "config.json").write_text('{"model_type": "llama"}')
    write_safetensors(src / "model-00001-of-00002.safetensors", 1000)
    write_safetensors(src / "model-00002-of-00002.safetensors", 500)
    return src


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def test_local_source_is_copied_verified_and_marked_complete(tmp_path):
    src, dest = fake_model(tmp_path), tmp_path / "dest"
    result = run("--source", "local", "--from", str(src), "--dest", str(dest), "--min-bytes", "5000")
    assert result.returncode == 0, result.stderr
    marker = json.loads((dest / ".vllm-gke-complete.json").read_text())
    assert marker["files"] == 2 and marker["bytes"] == sum(p.stat().st_size for p in src.glob("*.safetensors"))
    again = run("--source", "local", "--from", str(src), "--dest", str(dest))
    assert again.returncode == 0 and "already complete" in again.stdout, "a re-run skips the download"


def test_a_truncated_shard_fails_verification_with_a_clear_line(tmp_path):
    src = fake_model(tmp_path)
    shard = src / "model-00002-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:-100])
    result = run("--source", "local", "--from", str(src), "--dest", str(tmp_path / "dest"))
    assert result.returncode == 1
    assert "model-00002-of-00002.safetensors" in result.stderr and "truncated" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "dest" / ".vllm-gke-complete.json").exists(), "no marker for a failed download"


def test_a_garbage_header_and_too_few_bytes_fail(tmp_path):
    src = fake_model(tmp_path)
    assert "expected at least" in run("--source", "local", "--from", str(src), "--dest", str(tmp_path / "d1"),
                                      "--min-bytes", "10000000").stderr
    (src / "model-00001-of-00002.safetensors").write_bytes(struct.pack("<Q", 10) + b"not json!!" + b"\0" * 10)
    result = run("--source", "local", "--from", str(src), "--dest", str(tmp_path / "d2"))
    assert result.returncode == 1 and "header is not valid JSON" in result.stderr


def test_missing_config_and_bad_arguments_are_reported(tmp_path):
    src = fake_model(tmp_path)
    (src / "config.json").unlink()
    assert "config.json missing" in run("--source", "local", "--from", str(src), "--dest", str(tmp_path / "d")).stderr
    bad = run("--source", "gcs", "--gcs-uri", "s3://x", "--dest", str(tmp_path / "d"))
    assert bad.returncode == 2 and "gs://" in bad.stderr


def test_with_code_the_modules_auto_map_names_must_be_on_the_disk(tmp_path):
    """--code (model.trustRemoteCode): the repository's *.py come along, and a download without a module config.json's
    auto_map imports fails in one line instead of a serving pod that cannot import it."""
    src = fake_model(tmp_path)
    (src / "config.json").write_text(json.dumps({"model_type": "nemotron-nas", "auto_map": {
        "AutoConfig": "configuration_decilm.DeciLMConfig", "AutoModelForCausalLM": "modeling_decilm.DeciLMForCausalLM",
        "AutoTokenizer": ["other/repo--tokenization_x.XTokenizer", None]}}))
    (src / "configuration_decilm.py").write_text("# config class\n")
    failed = run("--source", "local", "--from", str(src), "--dest", str(tmp_path / "a"), "--code")
    assert failed.returncode == 1 and failed.stderr.count("\n") == 1
    assert "modeling_decilm.py" in failed.stderr and "configuration_decilm.py" not in failed.stderr
    (src / "modeling_decilm.py").write_text("# model class\n")
    done = run("--source", "local", "--from", str(src), "--dest", str(tmp_path / "b"), "--code")
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "b" / ".vllm-gke-complete.json").read_text())["code"] is True
    assert run("--source", "local", "--from", str(src), "--dest", str(tmp_path / "c")).returncode == 0, \
        "without --code the modules are not checked"
