"""The smoke script and the load-test entry point against real and failing servers."""

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "images" / "smoke" / "smoke.py"


def smoke(url, model="tiny", key=None, timeout=20):
    env = {"PATH": "/usr/bin:/bin", **({"VLLM_API_KEY": key} if key else {})}
    return subprocess.run([sys.executable, str(SCRIPT), "--url", url, "--model", model, "--timeout", str(timeout),
                           "--interval", "1"], capture_output=True, text=True, env=env, timeout=180)


def fake_server(status, body):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()

        def do_POST(self):
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.mark.slow
def test_smoke_passes_against_the_real_server_with_the_key(vllm_server):
    result = smoke(vllm_server["url"], key=vllm_server["key"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("smoke test passed: model tiny answered with")


@pytest.mark.slow
def test_smoke_fails_clearly_when_the_key_is_missing(vllm_server):
    result = smoke(vllm_server["url"])
    assert result.returncode == 1 and "HTTP 401 from /v1/chat/completions" in result.stderr


def test_smoke_fails_with_the_servers_error():
    server, url = fake_server(500, json.dumps({"error": {"message": "CUDA out of memory"}}))
    try:
        result = smoke(url)
    finally:
        server.shutdown()
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "HTTP 500" in lines[0] and "CUDA out of memory" in lines[0]


def test_smoke_rejects_a_200_that_is_not_a_chat_completion():
    server, url = fake_server(200, json.dumps({"object": "text_completion", "choices": []}))
    try:
        result = smoke(url)
    finally:
        server.shutdown()
    assert result.returncode == 1 and "not a chat.completion" in result.stderr


def test_smoke_gives_up_when_health_never_answers():
    result = smoke("http://127.0.0.1:9", timeout=2)
    assert result.returncode == 1 and "/health not ready" in result.stderr


@pytest.mark.slow
def test_loadtest_entry_point_reports_throughput_and_percentiles(vllm_server, tiny_model, tmp_path):
    import os

    script = Path(__file__).resolve().parents[2] / "bench" / "loadtest.py"
    result = subprocess.run(
        [sys.executable, str(script), "--url", vllm_server["url"], "--model", "tiny", "--tokenizer", str(tiny_model),
         "--prompts", "6", "--input-len", "16", "--output-len", "8", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "VLLM_API_KEY": vllm_server["key"], "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "output tokens/s" in result.stdout and "TTFT p50/p95/p99" in result.stdout
    saved = json.loads((tmp_path / "loadtest.json").read_text())
    assert saved["completed"] == 6 and saved["output_throughput"] > 0
