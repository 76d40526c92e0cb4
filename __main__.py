"""vllm-gke: wires validated stack config through the planner into component resources."""

import pulumi

from components.config import from_pulumi
from components.sizing import plan

settings = from_pulumi()
sizing = plan(settings)
for warning in sizing.warnings:
    pulumi.log.warn(warning)

pulumi.export("sizing", sizing.as_dict())
