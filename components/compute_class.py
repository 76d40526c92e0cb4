"""The stack's ComputeClass: the order in which GKE's autoscaler tries zones, ways of buying and machine types
(planner/compute_class.py builds the spec; rule 0 is the Pulumi-managed GPU pool)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from planner.compute_class import COMPUTE_CLASS_API, class_name, spec
from planner.config import Stack
from planner.labels import SPOT_GROUPS_ANNOTATION
from planner.security import PART_OF, PART_OF_LABEL
from planner.sizing import Sizing


@dataclass(frozen=True)
class ComputeClassArgs:
    """Inputs of ComputeClass."""

    name: str
    """Cluster-scoped name (planner.compute_class.class_name of the stack)."""
    spec: dict[str, Any]
    """The ComputeClass spec (planner.compute_class.spec); rule 0 holds the GPU pool's name (an Output)."""
    spot_multi_node: bool = False
    """accelerator.spotMultiNode, recorded on the object for the cluster rules (planner/cluster_rules.py rungs)."""

    @classmethod
    def from_plan(cls, stack: Stack, sizing: Sizing, pool_name: pulumi.Input[str]) -> ComputeClassArgs:
        acc = stack.settings.accelerator
        return cls(name=class_name(stack.name),
                   spec=spec(acc, pool_name, lead_seconds=sizing.time_to_ready_cold_seconds),
                   spot_multi_node=acc.spot_multi_node)


class ComputeClass(pulumi.ComponentResource):
    """A `cloud.google.com/v1` ComputeClass. `pulumi up` does not wait on its status: no upstream text names the
    condition GKE's controller reports, and a wait on a guessed one would fail every update after its timeout. The
    README's troubleshooting names the check (`kubectl get computeclass NAME -o yaml`)."""

    compute_class: k8s.apiextensions.CustomResource
    name: str

    def __init__(self, name: str, args: ComputeClassArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("vllm-gke:gpu:ComputeClass", name, None, opts)
        self.name = args.name
        metadata: dict[str, Any] = {"name": args.name, "labels": {PART_OF_LABEL: PART_OF}}
        if args.spot_multi_node:
            metadata["annotations"] = {SPOT_GROUPS_ANNOTATION: "true"}
        self.compute_class = k8s.apiextensions.CustomResource(
            f"{name}-compute-class", api_version=COMPUTE_CLASS_API, kind="ComputeClass", metadata=metadata,
            spec=args.spec, opts=pulumi.ResourceOptions(parent=self))
        self.register_outputs({"name": args.name})
