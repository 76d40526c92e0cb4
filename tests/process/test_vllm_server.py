"""The leader command the program renders starts a real vLLM server (CPU build) on a tiny model."""

import json
import urllib.error
import urllib.request

import pytest

pytestmark = pytest.mark.slow


def post(server, path, body, key=None):
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(server["url"] + path, data=json.dumps(body).encode(), headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, None


def test_completions_answer_with_the_served_model_name(vllm_server):
    request = {"model": "tiny", "prompt": "hello world", "max_tokens": 8, "ignore_eos": True}
    status, body = post(vllm_server, "/v1/completions", request, vllm_server["key"])
    assert status == 200
    assert body["object"] == "text_completion" and body["model"] == "tiny"
    assert body["usage"]["completion_tokens"] == 8 and isinstance(body["choices"][0]["text"], str)


def test_chat_completions_answer(vllm_server):
    status, body = post(vllm_server, "/v1/chat/completions",
                        {"model": "tiny", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 5},
                        vllm_server["key"])
    assert status == 200
    assert body["object"] == "chat.completion" and body["choices"][0]["message"]["role"] == "assistant"


def test_the_api_key_from_the_secret_is_enforced(vllm_server):
    assert post(vllm_server, "/v1/completions", {"model": "tiny", "prompt": "x", "max_tokens": 1})[0] == 401
    assert post(vllm_server, "/v1/completions", {"model": "tiny", "prompt": "x", "max_tokens": 1}, "wrong")[0] == 401


def test_the_rendered_command_is_the_one_that_ran(vllm_server):
    command = vllm_server["command"]
    assert command[1].endswith("launcher.py") and command[2] == "leader"
    assert "vllm.entrypoints.openai.api_server" in command
    assert "--api-key" not in command


@pytest.fixture(scope="module")
def nas_model(tiny_model, tmp_path_factory):
    from tests.tiny_model import build_tiny_nas_model

    return build_tiny_nas_model(tiny_model, tmp_path_factory.mktemp("tiny-nas"))


def test_a_remote_code_checkpoint_serves_with_model_trust_remote_code_and_not_without(nas_model, tmp_path):
    """A Llama-Nemotron-shaped checkpoint (nemotron-nas: per-block KV heads, a block without attention, one without
    MLP) whose config class is the repository's own code: the command rendered with model.trustRemoteCode starts
    vLLM 0.32.0 on it and answers; the same command without --trust-remote-code exits at the config."""
    import os
    import signal

    from tests.serving_helpers import free_port, remap, rendered_leader, start_server, stop_server, wait_healthy

    command, _ = rendered_leader(nas_model, model={"trustRemoteCode": True})
    assert "--trust-remote-code" in command
    home = {"HOME": str(tmp_path / "home")}  # the pod's HOME: an empty, writable directory for the imported code
    port, log = free_port(), tmp_path / "server.log"
    proc = start_server(remap(command, nas_model, port), home, log)
    try:
        wait_healthy(proc, port, log)
        request = {"model": "tiny", "prompt": "hello world", "max_tokens": 8, "ignore_eos": True}
        status, body = post({"url": f"http://127.0.0.1:{port}"}, "/v1/completions", request)
        assert status == 200 and body["usage"]["completion_tokens"] == 8
    finally:
        stop_server(proc)
    untrusted = [arg for arg in remap(command, nas_model, free_port()) if arg != "--trust-remote-code"]
    refused_log = tmp_path / "refused.log"
    refused = start_server(untrusted, home, refused_log)
    try:
        assert refused.wait(240) != 0
    finally:
        if refused.poll() is None:
            os.killpg(refused.pid, signal.SIGKILL)
    assert "custom code" in refused_log.read_text() or "trust-remote-code" in refused_log.read_text()
