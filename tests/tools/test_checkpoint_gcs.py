"""A checkpoint under a Cloud Storage prefix (model.source: gcs) read at preview: config.json and the safetensors
headers through the Cloud Storage JSON API, against gcp-storage-emulator (an independent implementation of that API,
PyPI gcp-storage-emulator) in its own process, reached through a recording proxy, from a fresh process that points
STORAGE_EMULATOR_HOST at it (as Google's client libraries do). Only headers travel: every read of a .safetensors
file is a byte range, and only the files vLLM would load are read."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from planner.catalog import GIB
from planner.checkpoint import read_header, tensor_bytes
from planner.config import PROJECT_DIR
from planner.gcs import FIRST_READ, INDEX, gcs_tensors
from tests.tools.test_checkpoint_hub import hub_repo

BUCKET = "team-models"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RecordingProxy:
    """Forwards GET requests to the emulator and records (path, Range header) of each."""

    def __init__(self, upstream: str):
        self.requests: list[tuple[str, str | None]] = []
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *_: object) -> None:
                pass

            def do_GET(self) -> None:
                rng = self.headers.get("Range")
                proxy.requests.append((self.path, rng))
                forward = urllib.request.Request(upstream + self.path, headers={"Range": rng} if rng else {})
                try:
                    with urllib.request.urlopen(forward, timeout=30) as response:
                        status, body, headers = response.status, response.read(), response.headers
                except urllib.error.HTTPError as exc:
                    status, body, headers = exc.code, exc.read(), exc.headers
                self.send_response(status)
                for key in ("Content-Type", "Content-Range"):
                    if headers.get(key):
                        self.send_header(key, headers[key])
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def media_reads(self) -> list[tuple[str, str | None]]:
        """(object name, Range) of every alt=media read."""
        out = []
        for path, rng in self.requests:
            parsed = urllib.parse.urlparse(path)
            if "alt=media" in parsed.query:
                out.append((urllib.parse.unquote(parsed.path.split("/o/", 1)[1]), rng))
        return out


@pytest.fixture()
def gcs(tmp_path):
    """(upload(name, bytes), proxy) of an emulator holding bucket BUCKET, stopped with its process group after."""
    port = _free_port()
    log = (tmp_path / "emulator.log").open("w")
    emulator = subprocess.Popen([str(Path(sys.executable).parent / "gcp-storage-emulator"), "start", "--host",
                                 "127.0.0.1", "--port", str(port), "--in-memory", "--default-bucket", BUCKET],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    root = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"{root}/storage/v1/b/{BUCKET}", timeout=1).read()
                break
            except OSError:
                assert emulator.poll() is None, (tmp_path / "emulator.log").read_text()
                time.sleep(0.1)
        else:
            pytest.fail("gcp-storage-emulator did not answer in 30 s")

        def upload(name: str, data: bytes) -> None:
            url = f"{root}/upload/storage/v1/b/{BUCKET}/o?uploadType=media&name={urllib.parse.quote(name, safe='')}"
            request = urllib.request.Request(url, data=data, method="POST",
                                             headers={"Content-Type": "application/octet-stream"})
            urllib.request.urlopen(request, timeout=30).read()

        proxy = RecordingProxy(root)
        yield upload, proxy
        proxy.close()
    finally:
        os.killpg(emulator.pid, signal.SIGKILL)
        emulator.wait()
        log.close()


def upload_dir(upload, directory: Path, prefix: str) -> None:
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            upload(f"{prefix}/{path.relative_to(directory)}", path.read_bytes())


def run(args: list[str], proxy: RecordingProxy, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING", "GOOGLE_"))}
    env |= {"STORAGE_EMULATOR_HOST": proxy.url, "HF_HUB_OFFLINE": "1", "HOME": str(tmp_path)}
    return subprocess.run([sys.executable, *args], cwd=PROJECT_DIR, env=env, capture_output=True, text=True,
                          timeout=300)


def staged_repo(tmp_path: Path) -> Path:
    """A sharded checkpoint with an index, plus what vLLM does not load from the model directory: a consolidated
    file the index does not name (as Mistral's repositories carry) and a checkpoint in a subfolder."""
    repo = hub_repo(tmp_path / "src", "tiny")
    shutil.copy(repo / "model-00001-of-00002.safetensors", repo / "consolidated.safetensors")
    (repo / "original").mkdir()
    shutil.copy(repo / "model-00002-of-00002.safetensors", repo / "original" / "model.safetensors")
    return repo


SHARDS = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
"""The files the staged repository's index names (hub_repo's generated checkpoint)."""


def indexed_tensors(repo: Path) -> dict:
    """The tensors of the shards the index names: what vLLM loads, the consolidated copy and the subfolder left out."""
    return {name: entry for shard in SHARDS for name, entry in read_header(repo / shard).items()}


PLAN = ["-m", "tools.plan", "--stack", "dev", "--set", "model.configFile=null", "--set", "model.source=gcs"]


def test_checkpoint_tensors_reads_a_gcs_prefix_by_header_ranges_only(gcs, tmp_path):
    upload, proxy = gcs
    repo = staged_repo(tmp_path)
    upload_dir(upload, repo, "org/tiny")
    out = tmp_path / "tensors.json"
    done = run(["-m", "tools.checkpoint_tensors", f"gs://{BUCKET}/org/tiny/", "--out", str(out)], proxy, tmp_path)
    assert done.returncode == 0, done.stderr
    written = json.loads(out.read_text())
    assert written["files"] == SHARDS and written["source"] == f"gs://{BUCKET}/org/tiny/"
    assert written["tensors"] == indexed_tensors(repo)
    reads = proxy.media_reads()
    assert sorted(name for name, _ in reads if name.endswith(".safetensors")) == [f"org/tiny/{s}" for s in SHARDS]
    assert all(rng and rng.startswith("bytes=0-") for name, rng in reads if name.endswith(".safetensors")), reads
    assert (f"org/tiny/{INDEX}", None) in reads


def test_a_gcs_stack_plans_from_the_prefixs_config_and_headers(gcs, tmp_path):
    upload, proxy = gcs
    repo = staged_repo(tmp_path)
    upload_dir(upload, repo, "org/tiny")
    bare = hub_repo(tmp_path / "bare", "no-safetensors", safetensors=False)
    upload_dir(upload, bare, "org/bare")
    loaded, _ = tensor_bytes(indexed_tensors(repo), 32, 0, "x")
    headers = run([*PLAN, "--set", f"model.gcsUri=gs://{BUCKET}/org/tiny"], proxy, tmp_path)
    # tools.plan builds the settings, then the program under Pulumi's mocks builds them again: one read of each.
    assert sorted(name for name, _ in proxy.media_reads()) == sorted(
        [f"org/tiny/{f}" for f in ("config.json", INDEX, *SHARDS)]), proxy.media_reads()
    counted = run([*PLAN, "--set", f"model.gcsUri=gs://{BUCKET}/org/bare"], proxy, tmp_path)
    missing = run([*PLAN, "--set", f"model.gcsUri=gs://{BUCKET}/org/nothing-here"], proxy, tmp_path)
    assert headers.returncode == 0, headers.stderr
    assert (f"weights: {loaded / GIB:,.2f} GiB, the checkpoint's tensors (the safetensors headers at "
            f"gs://{BUCKET}/org/tiny)") in headers.stdout
    assert f"model architecture read from gs://{BUCKET}/org/tiny/config.json" in headers.stdout
    # No safetensors under the prefix: planned from the count, and said in one line; not refused.
    assert counted.returncode == 0, counted.stderr
    [line] = [ln for ln in counted.stdout.splitlines() if "safetensors headers could not be read" in ln]
    assert f"at gs://{BUCKET}/org/bare" in line and "no .safetensors files" in line
    # No config.json: one line naming the key and the value, no traceback.
    assert missing.returncode != 0 and "Traceback" not in missing.stderr + missing.stdout
    [error] = [ln for ln in (missing.stderr + missing.stdout).splitlines() if "model.gcsUri" in ln]
    assert f"gs://{BUCKET}/org/nothing-here" in error and "could not read config.json" in error
    assert "HTTP 404" in error and "model.configFile" in error


def test_an_index_naming_a_file_the_prefix_lacks_is_refused_as_vllm_refuses_it(gcs, tmp_path):
    upload, proxy = gcs
    repo = staged_repo(tmp_path)
    (repo / "model-00002-of-00002.safetensors").unlink()
    upload_dir(upload, repo, "org/torn")
    done = run([*PLAN, "--set", f"model.gcsUri=gs://{BUCKET}/org/torn"], proxy, tmp_path)
    assert done.returncode != 0 and "Traceback" not in done.stderr + done.stdout
    [error] = [ln for ln in (done.stderr + done.stdout).splitlines() if "model.gcsUri" in ln]
    assert "model-00002-of-00002.safetensors" in error and INDEX in error


def test_a_header_longer_than_the_first_read_is_read_by_a_second_range(gcs, tmp_path, monkeypatch):
    """A checkpoint of many tensors (a header over FIRST_READ bytes): the rest of the header, and only it, is read."""
    upload, proxy = gcs
    tensors = {f"model.layers.{i}.experts.{e}.w{w}.weight": {"dtype": "BF16", "shape": [2, 2]}
               for i in range(48) for e in range(128) for w in (1, 2, 3)}
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, entry in tensors.items():
        header[name] = {**entry, "data_offsets": [offset, offset + 8]}
        offset += 8
    raw = json.dumps(header).encode()
    assert len(raw) > FIRST_READ
    upload("big/model.safetensors", len(raw).to_bytes(8, "little") + raw + bytes(offset))
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
    read, files = gcs_tensors(f"gs://{BUCKET}/big")
    assert read == tensors and files == ["model.safetensors"]
    assert proxy.media_reads() == [("big/model.safetensors", f"bytes=0-{FIRST_READ - 1}"),
                                   ("big/model.safetensors", f"bytes={FIRST_READ}-{8 + len(raw) - 1}")]
