#!/usr/bin/env python3
"""A Gradio chat page in front of the vLLM server's OpenAI-compatible API (serving.chatUi).

    VLLM_URL=http://vllm-leader:8000 VLLM_MODEL=served-name [VLLM_API_KEY=...] python3 app.py

Answers stream from /v1/chat/completions (server-sent events) token by token; the system prompt and the
maximum number of new tokens are adjustable under the chat. When the server cannot be reached, or refuses the
key, the page says so in the conversation instead of failing silently. Listens on CHAT_UI_PORT (7860).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator

UNREACHABLE = "The model server at {url} cannot be reached ({reason}). Is the serving group up?"
REJECTED = "The model server rejected the API key (HTTP {code}). Check the vllm-api-key Secret."
FAILED = "The model server answered HTTP {code}: {detail}"


def messages_for(message: str, history: list[dict], system: str) -> list[dict]:
    """OpenAI chat messages: the system prompt, the earlier turns as Gradio keeps them, the new message."""
    turns = [{"role": "system", "content": system}] if system.strip() else []
    for turn in history:
        content = turn.get("content")
        if turn.get("role") in ("user", "assistant") and isinstance(content, str):
            turns.append({"role": turn["role"], "content": content})
    return [*turns, {"role": "user", "content": message}]


def stream_chat(url: str, model: str, key: str | None, messages: list[dict], max_tokens: int,
                timeout: float = 600) -> Iterator[str]:
    """The answer so far, after every streamed chunk; one readable line instead when the request fails."""
    body = json.dumps({"model": model, "messages": messages, "max_tokens": int(max_tokens), "stream": True}).encode()
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(f"{url.rstrip('/')}/v1/chat/completions", body, headers)
    answer = ""
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            for raw in response:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                data = line[len("data:"):].strip()
                if data == "[DONE]":
                    break
                choices = json.loads(data).get("choices") or [{}]
                piece = (choices[0].get("delta") or {}).get("content") or ""
                if piece:
                    answer += piece
                    yield answer
    except urllib.error.HTTPError as err:
        if err.code in (401, 403):
            yield REJECTED.format(code=err.code)
        else:
            detail = err.read().decode("utf-8", "replace")[:300]
            yield FAILED.format(code=err.code, detail=detail)
        return
    except (urllib.error.URLError, OSError) as err:
        yield UNREACHABLE.format(url=url, reason=getattr(err, "reason", err))
        return
    if not answer:
        yield "(the model returned an empty answer)"


def build(url: str, model: str, key: str | None):
    import gradio as gr

    def respond(message: str, history: list[dict], system: str, max_tokens: int) -> Iterator[str]:
        yield from stream_chat(url, model, key, messages_for(message, history, system), max_tokens)

    return gr.ChatInterface(
        respond, title=f"vllm-gke: {model}",
        description="Answers stream from the vLLM server's OpenAI-compatible API.",
        additional_inputs=[gr.Textbox("You are a helpful assistant.", label="System prompt"),
                           gr.Slider(1, 4096, value=256, step=1, label="Max new tokens")],
        additional_inputs_accordion=gr.Accordion("Settings", open=False),
        flagging_mode="never", analytics_enabled=False)


def main() -> int:
    url, model = os.environ.get("VLLM_URL", ""), os.environ.get("VLLM_MODEL", "")
    if not url or not model:
        print("chat-ui: VLLM_URL and VLLM_MODEL must be set", flush=True)
        return 2
    port = int(os.environ.get("CHAT_UI_PORT", "7860"))
    build(url, model, os.environ.get("VLLM_API_KEY") or None).queue().launch(
        server_name="0.0.0.0", server_port=port)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
