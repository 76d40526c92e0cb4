"""The chat page (images/chat-ui/app.py) in a real headless browser against the real CPU vLLM server: a message
gets a streamed answer; a wrong API key shows the error in the page."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.serving_helpers import free_port

ROOT = Path(__file__).resolve().parents[2]
UI_PYTHON = ROOT / ".venv-ui" / "bin" / "python"
APP = ROOT / "images" / "chat-ui" / "app.py"
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not UI_PYTHON.exists(), reason="make test creates .venv-ui (Gradio, Selenium)")]


def start_app(tmp_path: Path, url: str, key: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "VLLM_URL": url, "VLLM_MODEL": "tiny", "VLLM_API_KEY": key, "CHAT_UI_PORT": str(port),
           "GRADIO_ANALYTICS_ENABLED": "False", "HOME": str(tmp_path)}
    log = (tmp_path / f"app-{port}.log").open("w")
    proc = subprocess.Popen([str(UI_PYTHON), str(APP)], env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    page = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, (tmp_path / f"app-{port}.log").read_text()[-2000:]
        try:
            with urllib.request.urlopen(page, timeout=2) as response:
                if response.status == 200:
                    return proc, page
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"the chat page did not answer on {page}")


def browse(page: str, message: str, screenshot: Path | None = None) -> dict:
    cmd = [str(UI_PYTHON), str(ROOT / "tests" / "browser" / "chat_page.py"), "--url", page, "--message", message]
    if screenshot:
        cmd += ["--screenshot", str(screenshot)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.stdout.strip(), done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def stop(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, 15)
    proc.wait(30)


def test_a_message_gets_an_answer_streamed_into_the_page(vllm_server, tmp_path):
    proc, page = start_app(tmp_path, vllm_server["url"], vllm_server["key"])
    shot = tmp_path / "chat-ui.png"
    try:
        seen = browse(page, "Hello! Who are you?", shot)
    finally:
        stop(proc)
    final = seen["final"]
    assert final and "rejected" not in final and "cannot be reached" not in final, seen
    # Streaming: the page showed the answer growing, more than one partial text before the final one.
    # (A partly decoded multi-byte token may render differently until its last byte arrives, so "growing" is
    # judged by length and a common start, not by exact prefixes.)
    partial = [text for text in seen["snapshots"] if len(text) < len(final)]
    lengths = sorted({len(text) for text in partial})
    assert len(lengths) >= 3, f"no streaming seen: {[len(text) for text in seen['snapshots']]}"
    assert all(final.startswith(text[:min(8, len(text) - 1)]) for text in partial), partial[:3]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("CHAT_UI_SCREENSHOT"):  # how docs/chat-ui.png is made: a real exchange of this test
        shutil.copy(shot, os.environ["CHAT_UI_SCREENSHOT"])


def test_a_wrong_api_key_shows_the_servers_refusal_in_the_page(vllm_server, tmp_path):
    proc, page = start_app(tmp_path, vllm_server["url"], "not-the-key")
    try:
        seen = browse(page, "hello")
    finally:
        stop(proc)
    assert "rejected the API key (HTTP 401)" in seen["final"], seen


def test_an_unreachable_server_is_named_in_the_page(tmp_path):
    proc, page = start_app(tmp_path, f"http://127.0.0.1:{free_port()}", "k")
    try:
        seen = browse(page, "hello")
    finally:
        stop(proc)
    assert "cannot be reached" in seen["final"], seen
