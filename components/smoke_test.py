"""Post-deploy smoke Job: `pulumi up` succeeds only when the model really answers."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s

from components.security import PART_OF, PART_OF_LABEL, container_security_context, pod_security_context

SCRIPT = Path(__file__).resolve().parent.parent / "images" / "smoke" / "smoke.py"


@dataclass(frozen=True)
class SmokeTestArgs:
    """Inputs of SmokeTest."""

    namespace: pulumi.Input[str]
    """Namespace of the Service."""
    service: str
    """Service name."""
    port: int
    """Service port."""
    model: str
    """Served model name."""
    image: str
    """An image with python3 (the vLLM image)."""
    wait_seconds: int
    """How long the group may take to become ready."""
    fingerprint: str
    """Changes whenever the served deployment changes, so the check runs again."""
    api_key_secret: str | None = None
    """Secret holding VLLM_API_KEY, when the server requires a key."""
    after: list[pulumi.Resource] = field(default_factory=list)
    """The serving objects the Job must wait for (LeaderWorkerSet, Service)."""


class SmokeTest(pulumi.ComponentResource):
    """A Job that sends one chat completion through the Service and fails on a bad answer."""

    def __init__(self, name: str, args: SmokeTestArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("vllm-gke:smoke:SmokeTest", name, None, opts)
        source = SCRIPT.read_text()
        digest = hashlib.sha256(f"{args.fingerprint}|{source}".encode()).hexdigest()[:8]
        script = k8s.core.v1.ConfigMap(
            f"{name}-script", metadata={"name": f"{name}-smoke-script", "namespace": args.namespace},
            data={"smoke.py": source}, opts=pulumi.ResourceOptions(parent=self))
        env = []
        if args.api_key_secret:
            env.append({"name": "VLLM_API_KEY",
                        "valueFrom": {"secretKeyRef": {"name": args.api_key_secret, "key": "VLLM_API_KEY"}}})
        url = f"http://{args.service}:{args.port}"
        self.job = k8s.batch.v1.Job(
            f"{name}-smoke-job", metadata={"name": f"{name}-smoke-{digest}", "namespace": args.namespace},
            spec={"backoffLimit": 0, "activeDeadlineSeconds": args.wait_seconds + 300,
                  "ttlSecondsAfterFinished": 86400,
                  "template": {"metadata": {"labels": {"app.kubernetes.io/name": "vllm-smoke",
                                                         PART_OF_LABEL: PART_OF}}, "spec": {
                      "restartPolicy": "Never", "automountServiceAccountToken": False,
                      "securityContext": pod_security_context(),
                      "containers": [{
                          "name": "smoke", "image": args.image,
                          "command": ["python3", "/opt/smoke/smoke.py", "--url", url, "--model", args.model,
                                      "--timeout", str(args.wait_seconds)],
                          "env": env, "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                                                    "limits": {"memory": "256Mi"}},
                          "securityContext": container_security_context(),
                          "volumeMounts": [{"name": "script", "mountPath": "/opt/smoke", "readOnly": True}]}],
                      "volumes": [{"name": "script", "configMap": {"name": f"{name}-smoke-script"}}]}}},
            # Pulumi waits for the Job: a deployment that does not answer fails `pulumi up`.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[script, *args.after],
                                        custom_timeouts=pulumi.CustomTimeouts(create=f"{args.wait_seconds + 600}s")))
        self.register_outputs({})
