"""Render the program's leader command under mocks and run it for real on this machine."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from components.model_weights import SERVING_MOUNT
from planner.commands import LAUNCHER, LAUNCHER_DIR
from tests.helpers import full_config
from tools.mocks import run_program

LWS_TYPE = "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rendered_leader(model_dir: Path, model: dict | None = None, **sections) -> tuple[list[str], list[dict]]:
    """The leader container's command and env for a stack serving `model_dir`'s architecture (`model`: further
    model keys)."""
    rec = run_program(full_config(model={"id": "test/tiny", "configFile": str(model_dir / "config.json"),
                                         "servedName": "tiny", **(model or {})}, vllm={"maxModelLen": 1024},
                                  **sections))
    lws = rec.one(LWS_TYPE)
    template = lws.inputs["spec"]["leaderWorkerTemplate"]
    pod = template.get("leaderTemplate") or template["workerTemplate"]
    container = pod["spec"]["containers"][0]
    return container["command"], container.get("env", [])


def remap(command: list[str], model_dir: Path, port: int) -> list[str]:
    """Pod paths -> this machine: python, the launcher file, the weights directory, the port."""
    out = []
    for arg in command:
        arg = sys.executable if arg == "python3" else arg
        arg = str(LAUNCHER) if arg == f"{LAUNCHER_DIR}/launcher.py" else arg
        arg = str(model_dir) if arg.startswith(SERVING_MOUNT + "/") else arg
        out.append(arg)
    out[out.index("--port") + 1] = str(port)
    out[out.index("--host") + 1] = "127.0.0.1"
    return out


def start_server(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    full_env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "2", **env}
    return subprocess.Popen(command, env=full_env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def stop_server(proc: subprocess.Popen) -> None:
    """SIGTERM the server's process group, SIGKILL it after 60 s: nothing is left behind."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def wait_healthy(proc: subprocess.Popen, port: int, log: Path, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    raise AssertionError(f"server not healthy after {timeout} s:\n{log.read_text()[-3000:]}")
