"""The launcher's compile-cache reuse (images/vllm-ray/launcher.py): a one-node leader restores vLLM's cache root
from the shared store before the server starts and publishes its own once /health answers; what is absent,
unreadable or already there never stops a start."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from planner.commands import LAUNCHER
from tests.serving_helpers import free_port

# The "server": writes a compiled artifact into vLLM's cache root unless one is there, then answers /health.
SERVER = """
import http.server, os, pathlib, sys
root = pathlib.Path(os.environ["VLLM_CACHE_ROOT"]) / "torch_compile_cache" / "abc123" / "rank_0_0"
artifact = root / "graph.py"
print("cache hit" if artifact.exists() else "compiling", flush=True)
root.mkdir(parents=True, exist_ok=True)
artifact.write_text("compiled")
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def start(tmp_path: Path, store: Path, name: str, key: str = "vllm-0.32.0-h100-tp1pp1-8192-bf16-1a2b"):
    port = free_port()
    (tmp_path / "server.py").write_text(SERVER)
    env = {**os.environ, "VLLM_CACHE_ROOT": str(tmp_path / name / "cache")}
    log = tmp_path / f"{name}.log"
    proc = subprocess.Popen([sys.executable, str(LAUNCHER), "leader", "--group-size", "1", "--gpus-per-node", "0",
                             "--compile-cache-store", str(store), "--compile-cache-key", key, "--api-port", str(port),
                             "--", sys.executable, str(tmp_path / "server.py"), str(port)],
                            env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    return proc, log


def wait_for(log: Path, text: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        content = log.read_text()
        if text in content:
            return content
        time.sleep(0.2)
    raise AssertionError(f"{text!r} not in {log}: {log.read_text()[-2000:]}")


def stop(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, 9)
    proc.wait(10)


def test_the_first_pod_publishes_and_the_next_one_starts_from_its_cache(tmp_path):
    store = tmp_path / "store"
    first, log1 = start(tmp_path, store, "first")
    try:
        text = wait_for(log1, "compile cache: published")
    finally:
        stop(first)
    assert "no " in text and "compiling" in text
    archive = store / "vllm-0.32.0-h100-tp1pp1-8192-bf16-1a2b" / "pod-0.tar"
    with tarfile.open(archive) as tar:
        assert "torch_compile_cache/abc123/rank_0_0/graph.py" in tar.getnames()
    assert not [p for p in archive.parent.iterdir() if p.name.startswith(".")], "no partial file left behind"

    second, log2 = start(tmp_path, store, "second")
    try:
        text = wait_for(log2, "exists; not published again")
    finally:
        stop(second)
    assert "compile cache: restored" in text and "cache hit" in text, text


def test_an_unreadable_archive_is_logged_and_the_server_compiles(tmp_path):
    store = tmp_path / "store"
    key = "k1"
    (store / key).mkdir(parents=True)
    (store / key / "pod-0.tar").write_bytes(b"not a tar archive" * 10)
    proc, log = start(tmp_path, store, "broken", key)
    try:
        text = wait_for(log, "compiling")
    finally:
        stop(proc)
    assert "not restored (ReadError" in text, text


def test_an_archive_cannot_write_outside_the_cache_root(tmp_path):
    store, key = tmp_path / "store", "k2"
    (store / key).mkdir(parents=True)
    with tarfile.open(store / key / "pod-0.tar", "w") as tar:
        data = b"owned"
        info = tarfile.TarInfo("../../escaped.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    proc, log = start(tmp_path, store, "evil", key)
    try:
        text = wait_for(log, "compiling")
    finally:
        stop(proc)
    assert "not restored" in text and not list(tmp_path.rglob("escaped.txt"))


def test_a_key_with_a_path_in_it_is_refused_in_one_line(tmp_path):
    done = subprocess.run([sys.executable, str(LAUNCHER), "leader", "--group-size", "1", "--gpus-per-node", "0",
                           "--compile-cache-store", str(tmp_path), "--compile-cache-key", "../x", "--", "true"],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "--compile-cache-key '../x'" in done.stderr


def test_the_rendered_commands_carry_the_store_and_a_key_per_layout():
    from dataclasses import replace

    from planner.commands import ServerSpec, compile_cache_key, leader_command, worker_command

    spec = ServerSpec("/models/model", "m", 1, 2, 2, 1, 8192, 0.9, "bfloat16", "auto")
    key = compile_cache_key("vllm/vllm-openai:v0.32.0", "nvidia-h100-80gb", spec, "org/m@main")
    assert key.startswith("v0.32.0-nvidia-h100-80gb-tp1pp2-len8192-bfloat16-auto-")
    others = [compile_cache_key("vllm/vllm-openai:v0.33.0", "nvidia-h100-80gb", spec, "org/m@main"),
              compile_cache_key("vllm/vllm-openai:v0.32.0", "nvidia-h200-141gb", spec, "org/m@main"),
              compile_cache_key("vllm/vllm-openai:v0.32.0", "nvidia-h100-80gb", replace(spec, tensor=2), "org/m@main"),
              compile_cache_key("vllm/vllm-openai:v0.32.0", "nvidia-h100-80gb", spec, "org/m@other")]
    assert len({key, *others}) == 5, "vLLM version, GPU, layout and model each make their own key"
    cached = replace(spec, compile_cache_store="/compile-cache", compile_cache_key=key)
    for command in (leader_command(cached), worker_command(cached)):
        at = command.index("--compile-cache-store")
        assert command[at:at + 6] == ["--compile-cache-store", "/compile-cache", "--compile-cache-key", key,
                                      "--api-port", "8000"]
    assert "--compile-cache-store" not in leader_command(spec), "no store, no reuse"


def test_pods_publishing_at_once_leave_one_whole_archive_and_no_partial_file(tmp_path):
    """Several replicas of a layout start together: each publisher writes its own temporary file and renames it;
    readers only ever see a complete archive."""
    import http.server
    import threading

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), type("H", (http.server.BaseHTTPRequestHandler,), {
        "do_GET": lambda self: (self.send_response(200), self.end_headers()),
        "log_message": lambda self, *a: None}))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    store, procs = tmp_path / "store", []
    for n in range(4):
        root = tmp_path / f"pod{n}" / "cache" / "torch_compile_cache" / "h" / "rank_0_0"
        root.mkdir(parents=True)
        (root / "graph.bin").write_bytes(bytes([n]) * 2_000_000)  # big enough for the writes to overlap
        env = {**os.environ, "VLLM_CACHE_ROOT": str(tmp_path / f"pod{n}" / "cache"), "LWS_WORKER_INDEX": "0"}
        procs.append(subprocess.Popen([sys.executable, str(LAUNCHER), "publish-cache", "--store", str(store), "--key",
                                       "k", "--health-url", f"http://127.0.0.1:{server.server_port}/health"],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = [p.communicate(timeout=60)[0] for p in procs]
    server.shutdown()
    assert all(p.returncode == 0 for p in procs), outputs
    assert sorted(p.name for p in (store / "k").iterdir()) == ["pod-0.tar"], "one archive, no temporary file left"
    with tarfile.open(store / "k" / "pod-0.tar") as tar:
        data = tar.extractfile("torch_compile_cache/h/rank_0_0/graph.bin").read()
    assert len(data) == 2_000_000 and len(set(data)) == 1, "one publisher's whole archive, not a mix"


def test_the_publisher_ends_with_the_server_it_waits_for(tmp_path):
    """A server that dies before /health answers leaves no publisher polling its port (where a later server could
    answer it): the publisher watches the process that started it (the one-node leader execs into the server)."""
    import psutil

    store, port = tmp_path / "store", free_port()
    proc = subprocess.Popen([sys.executable, str(LAUNCHER), "leader", "--group-size", "1", "--gpus-per-node", "0",
                             "--compile-cache-store", str(store), "--compile-cache-key", "k", "--api-port", str(port),
                             "--", sys.executable, "-c", "import time; time.sleep(3)"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def publishers() -> list[psutil.Process]:
        found = []
        for p in psutil.process_iter(["cmdline"]):
            cmdline = p.info["cmdline"] or []
            if "publish-cache" in cmdline and str(store) in cmdline:
                found.append(p)
        return found

    deadline = time.monotonic() + 10
    while not publishers() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert publishers(), "the leader starts a publisher"
    output, _ = proc.communicate(timeout=30)
    deadline = time.monotonic() + 15
    while publishers() and time.monotonic() < deadline:
        time.sleep(0.2)
    left = publishers()
    for p in left:
        p.kill()
    assert not left, f"publisher still polling 127.0.0.1:{port} after its server exited: {output[-1500:]}"


def _launcher_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("launcher_under_test", LAUNCHER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_restore_extracts_only_plain_files_inside_with_or_without_tarfile_filters(tmp_path, monkeypatch):
    """Python before 3.11.4 (Debian 12's 3.11.2) has no tarfile data filter: the launcher's own check refuses what
    the filter would (a path out of the cache, a link) on both interpreters, and extracts a good archive on both."""
    launcher = _launcher_module()
    good, evil = tmp_path / "good.tar", tmp_path / "evil.tar"
    with tarfile.open(good, "w") as tar:
        info = tarfile.TarInfo("torch_compile_cache/h/graph.py")
        info.size, info.mode = 8, 0o4755
        tar.addfile(info, io.BytesIO(b"compiled"))
    with tarfile.open(evil, "w") as tar:
        link = tarfile.TarInfo("torch_compile_cache/escape")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc"
        tar.addfile(link)
    for with_filter in (True, False):
        if not with_filter and hasattr(tarfile, "data_filter"):
            monkeypatch.delattr(tarfile, "data_filter")
        into = tmp_path / f"into-{with_filter}"
        with tarfile.open(good) as tar:
            launcher.extract_plain_files(tar, tar.getmembers(), into)
        extracted = into / "torch_compile_cache" / "h" / "graph.py"
        assert extracted.read_text() == "compiled" and not extracted.stat().st_mode & 0o4000, "no set-id bit"
        with tarfile.open(evil) as tar, pytest.raises(tarfile.TarError, match="refused member"):
            launcher.extract_plain_files(tar, tar.getmembers(), tmp_path / f"evil-{with_filter}")
        assert not (tmp_path / f"evil-{with_filter}" / "torch_compile_cache" / "escape").exists()
