"""The one error type for bad user input, and how its message is formatted."""

from __future__ import annotations

import json
from typing import Any

NAMESPACE = "vllm-gke"
_MISSING = object()


def fmt_value(value: Any) -> str:
    if value is None:
        return "(unset)"
    if isinstance(value, str):  # quoted when white space or control characters would not show
        return value if value.isprintable() and value == value.strip() else json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    try:
        return json.dumps(value, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return str(value)


class ConfigError(ValueError):
    """Invalid stack or model configuration: one line naming the key, the value and what is accepted."""

    def __init__(self, key: str, value: Any, reason: str):
        self.key, self.value, self.reason = key, value, reason
        shown = fmt_value(value)
        if len(shown) > 120:
            shown = shown[:117] + "..."
        full = key if ":" in key else f"{NAMESPACE}:{key}"  # another namespace's key (gcp:project) as it is
        if value is None and reason.startswith("is required"):
            message = f"{full} {reason}"
        else:
            message = f"{full} = {shown}: {reason}"
        super().__init__(" ".join(message.split()))
