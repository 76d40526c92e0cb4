"""The rules of rules.py as Pulumi resource-validation policies (imported by __main__.py and the tests)."""

from __future__ import annotations

from collections.abc import Callable

from pulumi_policy import EnforcementLevel, PolicyConfigSchema, ReportViolation, ResourceValidationArgs
from pulumi_policy import ResourceValidationPolicy as Policy
from rules import RULES

DESCRIPTIONS = {
    "gpu-pods-tolerate-taint-and-request-gpus": "GPU pods tolerate the GPU taint and request nvidia.com/gpu.",
    "no-public-load-balancer": "No public LoadBalancer Service or external GKE Gateway unless "
                               "allowPublicLoadBalancer is set.",
    "images-pinned": "Container images carry a version tag or digest, never latest.",
    "no-ray-ports-in-services": "Ray ports are never exposed through a Service.",
    "no-secrets-in-plain-env": "Secrets reach containers only through Secret references.",
    "weights-volumes-read-only": "Serving pods mount the weights claim read-only.",
}
CONFIG = {"no-public-load-balancer": PolicyConfigSchema(
    properties={"allowPublicLoadBalancer": {"type": "boolean", "default": False}})}


def _validate(rule: Callable) -> Callable[[ResourceValidationArgs, ReportViolation], None]:
    def validate(args: ResourceValidationArgs, report: ReportViolation) -> None:
        for message in rule(args.resource_type, args.props, args.get_config() or {}):
            report(message, None)
    return validate


def policies() -> list[Policy]:
    return [Policy(name=name, description=DESCRIPTIONS[name], validate=_validate(rule),
                   enforcement_level=EnforcementLevel.MANDATORY, config_schema=CONFIG.get(name))
            for name, rule in RULES.items()]
