"""Runs the policy pack's real pulumi_policy validators (policy/pack.py) over cases read as JSON from stdin:
[{"resource_type", "props", "config"?}] -> stdout [{policy name: [violation messages]}]. Runs in the pack's
own virtualenv (policy/venv), as `pulumi preview --policy-pack policy` would."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "policy"))

from pack import policies
from pulumi_policy import ResourceValidationArgs

results = []
for case in json.load(sys.stdin):
    found = {}
    for policy in policies():
        messages = []
        args = ResourceValidationArgs(case["resource_type"], case["props"], "urn:pulumi:test::vllm-gke::x::y", "y",
                                      None, None, case.get("config", {}).get(policy.name))
        policy.validate(args, lambda message, urn, out=messages: out.append(message))
        if messages:
            found[policy.name] = messages
    results.append(found)
print(json.dumps(results))
