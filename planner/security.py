"""Security contexts shared by every pod vllm-gke runs (serving group, download and smoke Jobs, adapter)."""

from __future__ import annotations

from typing import Any

PART_OF_LABEL, PART_OF = "app.kubernetes.io/part-of", "vllm-gke"
"""Every vllm-gke pod carries it: the default-deny ingress NetworkPolicy selects pods by it."""
RUN_AS_UID = 10001
"""Non-root and above 10000, so it never maps to a user of the node (CIS 5.2.6)."""


def pod_security_context(fs_group: bool = False) -> dict[str, Any]:
    """Pod level: non-root UID/GID, RuntimeDefault seccomp; fsGroup where volumes must be group-writable."""
    return {"runAsNonRoot": True, "runAsUser": RUN_AS_UID, "runAsGroup": RUN_AS_UID,
            **({"fsGroup": RUN_AS_UID} if fs_group else {}), "seccompProfile": {"type": "RuntimeDefault"}}


def container_security_context() -> dict[str, Any]:
    """Container level: no privilege escalation, no capabilities, read-only root (writes go to emptyDirs)."""
    return {"allowPrivilegeEscalation": False, "privileged": False, "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]}}

USER_NAME = "vllm-gke"
"""What the pods answer to getpass.getuser(). Their UID has no passwd entry in the stock images, and getuser() falls
back to pwd.getpwuid(), which raises KeyError: torch 2.11's inductor cache dir (torch/_inductor/runtime/
cache_dir_utils.py) calls it at import, so vLLM died in 9.7 s on the GPU host (vllm-project/vllm#44548,
pytorch/pytorch#140765; llm-d sets USER for the same reason). getuser() reads LOGNAME, USER, LNAME and USERNAME
first."""


def identity_env() -> list[dict[str, str]]:
    """Env that gives the non-root UID a user name without a passwd entry (see USER_NAME)."""
    return [{"name": "USER", "value": USER_NAME}, {"name": "LOGNAME", "value": USER_NAME}]
