"""Post-deploy smoke Job: `pulumi up` succeeds only when the model really answers."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s

from components import parent_depends_on
from planner.commands import API_PORT
from planner.config import Stack
from planner.security import PART_OF, PART_OF_LABEL, container_security_context, identity_env, pod_security_context
from planner.sizing import Sizing

SCRIPT = Path(__file__).resolve().parent.parent / "images" / "smoke" / "smoke.py"


@dataclass(frozen=True)
class SmokeCheckArgs:
    """Inputs of SmokeCheck."""

    namespace: pulumi.Input[str]
    """Namespace of the Service."""
    service: pulumi.Input[str]
    """Service name, or the Gateway's address (routing gke-gateway)."""
    port: int
    """Service port."""
    model: str
    """Served model name."""
    image: pulumi.Input[str]
    """An image with python3 (the vLLM image)."""
    wait_seconds: int
    """How long the group may take to become ready."""
    fingerprint: str
    """Changes whenever the served deployment changes, so the check runs again."""
    api_key_secret: str | None = None
    """Secret holding VLLM_API_KEY, when the server requires a key."""

    @classmethod
    def from_plan(cls, stack: Stack, sizing: Sizing, namespace: pulumi.Input[str], service: pulumi.Input[str],
                  api_key_secret: str | None, image: pulumi.Input[str] | None = None,
                  port: int | None = None) -> SmokeCheckArgs:
        return cls(namespace=namespace, service=service, port=port or API_PORT, model=stack.settings.model.served_name,
                   image=stack.settings.vllm.image if image is None else image, wait_seconds=sizing.smoke_wait_seconds,
                   fingerprint=sizing.fingerprint, api_key_secret=api_key_secret)


class SmokeCheck(pulumi.ComponentResource):
    """A Job that sends one chat completion through the Service and fails on a bad answer."""

    def __init__(self, name: str, args: SmokeCheckArgs, opts: pulumi.ResourceOptions | None = None):
        # The type token keeps the class's former name: renaming it would change every URN under it.
        super().__init__("vllm-gke:smoke:SmokeTest", name, None, opts)
        source = SCRIPT.read_text()
        digest = hashlib.sha256(f"{args.fingerprint}|{source}".encode()).hexdigest()[:8]
        script = k8s.core.v1.ConfigMap(
            f"{name}-script", metadata={"name": f"{name}-smoke-script", "namespace": args.namespace},
            data={"smoke.py": source}, opts=pulumi.ResourceOptions(parent=self))
        env = identity_env()
        if args.api_key_secret:
            env.append({"name": "VLLM_API_KEY",
                        "valueFrom": {"secretKeyRef": {"name": args.api_key_secret, "key": "VLLM_API_KEY"}}})
        url = pulumi.Output.concat("http://", args.service, f":{args.port}")
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
            opts=pulumi.ResourceOptions(parent=self, depends_on=[script, *parent_depends_on(opts)],
                                        custom_timeouts=pulumi.CustomTimeouts(create=f"{args.wait_seconds + 600}s")))
        self.register_outputs({})
