import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

if os.environ.get("TEST_PROGRAM_ENV") == "1":
    # `make test-fast`: the unit and program tiers run as the Pulumi program's environment is (requirements.txt:
    # transformers without torch, no vLLM). A None entry makes both look uninstalled: importlib.util.find_spec
    # answers None (transformers then reads configs without torch) and an import raises ImportError.
    sys.modules["torch"] = None  # type: ignore[assignment]
    sys.modules["vllm"] = None  # type: ignore[assignment]

import pytest

pytest_plugins = ["tests.leaks"]


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    from tests.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


API_KEY = "test-key-not-a-secret"


@pytest.fixture(scope="session")
def vllm_server(tiny_model, tmp_path_factory):
    """A real vLLM (CPU build) started from the leader command the program renders, with an API key."""

    from tests.serving_helpers import free_port, remap, rendered_leader, start_server, stop_server, wait_healthy

    command, env = rendered_leader(tiny_model, apiKey={"secure": "v1:k"})
    assert any(e["name"] == "VLLM_API_KEY" and "valueFrom" in e for e in env), "the key must come from a Secret"
    port = free_port()
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    proc = start_server(remap(command, tiny_model, port), {"VLLM_API_KEY": API_KEY}, log)
    try:
        wait_healthy(proc, port, log)
        yield {"url": f"http://127.0.0.1:{port}", "key": API_KEY, "log": log, "command": command}
    finally:
        stop_server(proc)
