#!/usr/bin/env python3
"""Post-deploy smoke check: one chat completion through the Service must be a valid OpenAI answer.

    smoke.py --url http://vllm.vllm.svc:8000 --model NAME [--timeout 1800]

Waits (bounded) for /health, then sends one chat completion (Bearer $VLLM_API_KEY when set) and
checks the response shape. Exit 0 and one summary line on success; exit 1 and one line naming
what was wrong otherwise. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request


class SmokeError(Exception):
    """The server did not answer like an OpenAI chat-completions endpoint."""


def request(url: str, body: dict | None, key: str | None, timeout: float) -> tuple[int, bytes]:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers=headers, method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def wait_healthy(base: str, deadline: float, interval: float) -> None:
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            status, _ = request(f"{base}/health", None, None, 10)
            if status == 200:
                return
            last = f"HTTP {status}"
        except OSError as exc:
            last = str(exc)
        time.sleep(interval)
    raise SmokeError(f"{base}/health not ready before the deadline (last: {last})")


def check_chat(base: str, model: str, key: str | None) -> str:
    body = {"model": model, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 16,
            "temperature": 0}
    status, raw = request(f"{base}/v1/chat/completions", body, key, 120)
    excerpt = raw[:200].decode(errors="replace").replace("\n", " ")
    if status != 200:
        raise SmokeError(f"HTTP {status} from /v1/chat/completions: {excerpt}")
    try:
        answer = json.loads(raw)
    except json.JSONDecodeError:
        raise SmokeError(f"/v1/chat/completions returned non-JSON: {excerpt}") from None
    choices = answer.get("choices") if isinstance(answer, dict) else None
    if answer.get("object") != "chat.completion" or not choices:
        raise SmokeError(f"not a chat.completion with choices: {excerpt}")
    message = choices[0].get("message") or {}
    if message.get("role") != "assistant" or not isinstance(message.get("content"), str):
        raise SmokeError(f"choices[0].message is not an assistant message: {excerpt}")
    tokens = (answer.get("usage") or {}).get("completion_tokens", 0)
    if not tokens:
        raise SmokeError(f"usage.completion_tokens is {tokens}: {excerpt}")
    return f"model {answer.get('model')} answered with {tokens} tokens"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="base URL of the Service, e.g. http://vllm:8000")
    parser.add_argument("--model", required=True, help="served model name")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds to wait for /health")
    parser.add_argument("--interval", type=float, default=10)
    args = parser.parse_args(argv)
    base = args.url.rstrip("/")
    try:
        wait_healthy(base, time.monotonic() + args.timeout, args.interval)
        summary = check_chat(base, args.model, os.environ.get("VLLM_API_KEY") or None)
    except (SmokeError, OSError) as exc:
        print(f"smoke test failed: {exc}", file=sys.stderr, flush=True)
        return 1
    print(f"smoke test passed: {summary}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
