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
