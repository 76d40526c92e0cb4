"""The LeaderWorkerSet CRD and controller, installed from the upstream Helm chart at a pinned version."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from planner.config import Stack
from planner.versions import LWS_CHART, LWS_VERSION

LWS_NAMESPACE = "lws-system"


@dataclass(frozen=True)
class LwsControllerArgs:
    """Inputs of LwsController."""

    install: bool
    """False when the cluster already runs the controller (serving.installLws: false)."""
    version: str = LWS_VERSION
    """Chart (and controller) version."""

    @classmethod
    def from_plan(cls, stack: Stack) -> LwsControllerArgs:
        return cls(install=stack.settings.serving.install_lws)


class LwsController(pulumi.ComponentResource):
    """Installs the LeaderWorkerSet controller; `ready` is what LWS objects must depend on."""

    ready: list[pulumi.Resource]

    def __init__(self, name: str, args: LwsControllerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("vllm-gke:lws:LwsController", name, None, opts)
        self.ready = []
        if args.install:
            release = k8s.helm.v3.Release(
                f"{name}-chart", name="lws", chart=LWS_CHART, version=args.version.removeprefix("v"),
                namespace=LWS_NAMESPACE, create_namespace=True,
                # Wait for the controller and its webhook: LWS objects are rejected until both serve.
                atomic=True, wait_for_jobs=True, timeout=600,
                opts=pulumi.ResourceOptions(parent=self))
            self.ready = [release]
        self.register_outputs({})
