"""An optional Gradio chat page in front of the vLLM Service (serving.chatUi)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s

from components import exposed_service, load_balancer_peers
from planner.commands import API_PORT
from planner.config import Stack
from planner.security import (
    PART_OF,
    PART_OF_LABEL,
    container_security_context,
    identity_env,
    pod_security_context,
)
from planner.versions import chat_ui_image

APP_DIR = Path(__file__).resolve().parent.parent / "images" / "chat-ui"
UI_PORT = 7860
"""Gradio's default port."""
RESOURCES = {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}}
"""Gradio proxies one streamed request per open chat; it runs on the untainted system pool."""


@dataclass(frozen=True)
class ChatUiArgs:
    """Inputs of ChatUi."""

    namespace: pulumi.Input[str]
    image: str
    service: pulumi.Input[str]
    """The vLLM Service the page talks to."""
    model: str
    """The served model name."""
    api_key_secret: str | None
    """The Secret holding VLLM_API_KEY, when the API has a key."""
    expose: str
    """cluster-ip | internal-lb, as the API."""
    source_ranges: tuple[str, ...]
    port: int = API_PORT
    """The port of `service` (the Gateway listens on 80)."""

    @classmethod
    def from_plan(cls, stack: Stack, namespace: pulumi.Input[str], service: pulumi.Input[str],
                  api_key_secret: str | None, port: int | None = None) -> ChatUiArgs:
        s = stack.settings
        return cls(namespace=namespace, image=chat_ui_image(s, stack.project), service=service,
                   model=s.model.served_name, api_key_secret=api_key_secret, expose=s.serving.expose,
                   source_ranges=s.serving.source_ranges, port=port or API_PORT)


class ChatUi(pulumi.ComponentResource):
    """ConfigMap with the app, Deployment, Service and the NetworkPolicy that lets browsers in on the UI port."""

    service_name: str

    def __init__(self, name: str, args: ChatUiArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("vllm-gke:ui:ChatUi", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        app = f"{name}-chat-ui"
        labels = {PART_OF_LABEL: PART_OF, "app.kubernetes.io/name": app}
        script = k8s.core.v1.ConfigMap(
            f"{name}-chat-ui-app", metadata={"name": f"{app}-app", "namespace": args.namespace, "labels": labels},
            data={"app.py": (APP_DIR / "app.py").read_text()}, opts=child)
        env = [*identity_env(), {"name": "HOME", "value": "/tmp"},
               {"name": "VLLM_URL", "value": pulumi.Output.concat("http://", args.service, f":{args.port}")},
               {"name": "VLLM_MODEL", "value": args.model}, {"name": "CHAT_UI_PORT", "value": str(UI_PORT)},
               {"name": "GRADIO_ANALYTICS_ENABLED", "value": "False"}]
        if args.api_key_secret:
            env.append({"name": "VLLM_API_KEY", "valueFrom": {"secretKeyRef": {"name": args.api_key_secret,
                                                                               "key": "VLLM_API_KEY"}}})
        probe = {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 10, "timeoutSeconds": 5}
        k8s.apps.v1.Deployment(
            f"{name}-chat-ui", metadata={"name": app, "namespace": args.namespace, "labels": labels},
            spec={"replicas": 1, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels}, "spec": {
                      "automountServiceAccountToken": False, "securityContext": pod_security_context(),
                      "containers": [{
                          "name": "chat-ui", "image": args.image, "imagePullPolicy": "IfNotPresent",
                          "command": ["python3", "/opt/chat-ui/app.py"], "env": env,
                          "ports": [{"name": "http", "containerPort": UI_PORT}],
                          "resources": RESOURCES, "securityContext": container_security_context(),
                          "startupProbe": {**probe, "failureThreshold": 30},
                          "readinessProbe": probe, "livenessProbe": {**probe, "failureThreshold": 3},
                          "volumeMounts": [{"name": "app", "mountPath": "/opt/chat-ui", "readOnly": True},
                                           {"name": "tmp", "mountPath": "/tmp"}]}],
                      "volumes": [{"name": "app", "configMap": {"name": script.metadata.name}},
                                  {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}]}}},
            opts=child)
        self.service_name = app
        service_spec, annotations = exposed_service(args.expose, args.source_ranges, {
            "selector": labels, "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}]})
        k8s.core.v1.Service(
            f"{name}-chat-ui-svc",
            metadata={"name": app, "namespace": args.namespace, "labels": labels, "annotations": annotations},
            spec=service_spec, opts=child)
        # The page is the one way in for browsers: its port is open to the namespace (kubectl port-forward enters
        # through the kubelet) and, behind an internal load balancer, to serving.sourceRanges; the API stays as
        # closed as before (its policy admits this namespace's pods, the page among them).
        page_from = [{"podSelector": {}}, *load_balancer_peers(args.expose, args.source_ranges)]
        k8s.networking.v1.NetworkPolicy(
            f"{name}-chat-ui-netpol", metadata={"name": app, "namespace": args.namespace, "labels": labels},
            spec={"podSelector": {"matchLabels": labels}, "policyTypes": ["Ingress"],
                  "ingress": [{"from": page_from, "ports": [{"port": UI_PORT, "protocol": "TCP"}]}]},
            opts=child)
        self.register_outputs({"service": app})
