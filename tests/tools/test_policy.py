"""The policy pack: every rule passes what the example stacks render and fails a violating variant, both
as plain rules and through pulumi_policy's own validators in the pack's virtualenv."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path

import pytest

from policy import rules
from tests.helpers import full_config
from tools.mocks import run_program

ROOT = Path(__file__).resolve().parents[2]
POLICY_PY = ROOT / "policy" / "venv" / "bin" / "python"
LWS = rules.LWS_TYPE
SERVICE = rules.SERVICE_TYPE


@pytest.fixture(scope="module")
def rendered():
    """(stack, type, object) for every Kubernetes object the dev and prod stacks declare."""
    return [(stack, kind, obj) for stack in ("dev", "prod", "multizone")
            for kind, obj in run_program(full_config(stack), stack=stack).kubernetes_resources()]


def first(rendered, kind, stack="prod"):
    return copy.deepcopy(next(obj for s, k, obj in rendered if k == kind and s == stack))


def leader_pod(lws):
    return lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]


def test_the_example_stacks_pass_every_rule(rendered):
    kinds = {kind for _, kind, _ in rendered}
    assert {LWS, SERVICE, "kubernetes:batch/v1:Job", "kubernetes:apps/v1:Deployment"} <= kinds
    for stack, kind, obj in rendered:
        for name, rule in rules.RULES.items():
            assert rule(kind, obj, {}) == [], f"{stack} {kind} {obj['metadata']['name']} breaks {name}"


def violations(rendered):
    """One violating variant per rule, each made from a rendered object."""
    out = {}
    lws = first(rendered, LWS)
    del leader_pod(lws)["tolerations"]
    out["gpu-pods-tolerate-taint-and-request-gpus"] = (LWS, lws, "does not tolerate the nvidia.com/gpu")

    svc = first(rendered, SERVICE)
    svc["metadata"]["annotations"] = {}
    svc["spec"]["type"] = "LoadBalancer"
    out["no-public-load-balancer"] = (SERVICE, svc, "exposes the model to the internet")

    lws = first(rendered, LWS)
    leader_pod(lws)["containers"][0]["image"] = "vllm/vllm-openai:latest"
    out["images-pinned"] = (LWS, lws, "image 'vllm/vllm-openai:latest' is not pinned")

    svc = first(rendered, SERVICE)
    svc["spec"]["ports"].append({"name": "ray-gcs", "port": 6379, "targetPort": 6379})
    out["no-ray-ports-in-services"] = (SERVICE, svc, "exposes a Ray port (6379 -> 6379)")

    lws = first(rendered, LWS)
    leader_pod(lws)["containers"][0]["env"].append({"name": "HF_TOKEN", "value": "hf_" + "x" * 30})
    out["no-secrets-in-plain-env"] = (LWS, lws, "env 'HF_TOKEN' holds a literal secret")

    lws = first(rendered, LWS)
    for volume in leader_pod(lws)["volumes"]:
        if "persistentVolumeClaim" in volume:
            volume["persistentVolumeClaim"]["readOnly"] = False
    out["weights-volumes-read-only"] = (LWS, lws, "writable; set readOnly: true")
    return out


def test_each_rule_reports_its_violation_and_only_that_rule_fires(rendered):
    cases = violations(rendered)
    assert set(cases) == set(rules.RULES)
    for name, (kind, obj, fragment) in cases.items():
        fired = {rule_name: rule(kind, obj, {}) for rule_name, rule in rules.RULES.items() if rule(kind, obj, {})}
        assert set(fired) == {name}, (name, fired)
        assert any(fragment in message for message in fired[name]), fired[name]


@pytest.mark.parametrize("kind, obj, fragment", [
    ("kubernetes:batch/v1:Job", {"spec": {"template": {"spec": {"containers": [
        {"name": "c", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}},
     "does not tolerate"),
    ("kubernetes:apps/v1:Deployment", {"spec": {"template": {"spec": {
        "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-l4"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [{"name": "c", "image": "busybox:1.36"}]}}}}, "no container requests nvidia.com/gpu"),
    ("kubernetes:core/v1:Pod", {"spec": {"containers": [
        {"name": "c", "image": "r/i:1", "command": ["python3", "-m", "vllm", "--api-key", "abc"]}]}},
     "passes --api-key on the command line"),
    ("kubernetes:core/v1:Pod", {"spec": {"containers": [{"name": "c", "image": "registry.local:5000/img"}]}},
     "is not pinned"),
])
def test_rules_catch_violations_beyond_the_program(kind, obj, fragment):
    found = [m for rule in rules.RULES.values() for m in rule(kind, obj, {})]
    assert any(fragment in m for m in found), found


def test_public_load_balancer_is_allowed_only_by_config(rendered):
    _, svc, _ = violations(rendered)["no-public-load-balancer"]
    assert rules.public_load_balancer(SERVICE, svc, {"allowPublicLoadBalancer": True}) == []
    assert rules.public_load_balancer(SERVICE, svc, {"allowPublicLoadBalancer": False})


def test_digest_and_registry_port_images_count_as_pinned():
    assert rules._image_pinned("us-docker.pkg.dev/p/r/vllm@sha256:" + "a" * 64)
    assert rules._image_pinned("registry.local:5000/vllm:0.25.1")
    assert not rules._image_pinned("registry.local:5000/vllm")


@pytest.mark.skipif(not POLICY_PY.exists(), reason="make test creates policy/venv")
def test_the_pack_reports_through_pulumi_policy(rendered):
    """pulumi_policy's ResourceValidationPolicy objects from policy/pack.py, in the pack's own virtualenv."""
    cases = violations(rendered)
    compliant = first(rendered, LWS)
    payload = [{"resource_type": kind, "props": obj} for kind, obj, _ in cases.values()]
    payload += [{"resource_type": LWS, "props": compliant},
                {"resource_type": SERVICE, "props": cases["no-public-load-balancer"][1],
                 "config": {"no-public-load-balancer": {"allowPublicLoadBalancer": True}}}]
    proc = subprocess.run([str(POLICY_PY), str(ROOT / "tests" / "tools" / "check_policy_pack.py")],
                          input=json.dumps(payload), capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)
    for (name, (_, _, fragment)), found in zip(cases.items(), results, strict=False):
        assert list(found) == [name] and any(fragment in m for m in found[name]), (name, found)
    assert results[-2:] == [{}, {}], "compliant object and config-allowed public LB pass"


def test_policy_pack_layout_matches_what_pulumi_expects():
    import yaml

    meta = yaml.safe_load((ROOT / "policy" / "PulumiPolicy.yaml").read_text())
    assert meta["runtime"] == {"name": "python", "options": {"virtualenv": "venv"}}
    main = (ROOT / "policy" / "__main__.py").read_text()
    assert "PolicyPack(" in main and "policies=policies()" in main
    assert "pulumi-policy==" in (ROOT / "policy" / "requirements.txt").read_text()


def test_an_external_gke_gateway_is_refused_unless_public_load_balancers_are_allowed():
    """serving.gatewayClass gke-l7-regional-external-managed passes the planner; the pack refuses it at preview."""
    config = full_config("dev", serving={"routing": "gke-gateway",
                                         "gatewayClass": "gke-l7-regional-external-managed"})
    resources = run_program(config).kubernetes_resources()
    gateway = next(obj for kind, obj in resources if kind == rules.GATEWAY_TYPE)
    found = rules.public_load_balancer(rules.GATEWAY_TYPE, gateway, {})
    assert found == ["spec.gatewayClassName: gke-l7-regional-external-managed gives the model an internet-facing "
                     "address; use gke-l7-rilb or set allowPublicLoadBalancer in the policy config"]
    assert rules.public_load_balancer(rules.GATEWAY_TYPE, gateway, {"allowPublicLoadBalancer": True}) == []
    internal = next(obj for kind, obj in run_program(full_config("dev", serving={"routing": "gke-gateway"}))
                    .kubernetes_resources() if kind == rules.GATEWAY_TYPE)
    assert [m for rule in rules.RULES.values() for m in rule(rules.GATEWAY_TYPE, internal, {})] == []
