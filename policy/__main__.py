"""vllm-gke policy pack: `pulumi preview --policy-pack policy` (the CI workflows pass it too)."""

from pack import policies
from pulumi_policy import EnforcementLevel, PolicyPack

PolicyPack(name="vllm-gke", enforcement_level=EnforcementLevel.MANDATORY, policies=policies())
