"""checkov's Kubernetes checks over every object the example stacks render (LeaderWorkerSet pod templates as
Pods): zero failures, with the skips justified in tests/security/checkov.yaml and on single objects."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.security.render import render

ROOT = Path(__file__).resolve().parents[2]
CHECKOV = ROOT / ".venv-scan" / "bin" / "checkov"
CONFIG = ROOT / "tests" / "security" / "checkov.yaml"

pytestmark = pytest.mark.skipif(not CHECKOV.exists(), reason="make test creates .venv-scan")


def scan(directory: Path) -> dict:
    proc = subprocess.run([str(CHECKOV), "-d", str(directory), "--config-file", str(CONFIG), "--quiet",
                           "-o", "json"], capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    reports = json.loads(proc.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    return {"failed": [f for r in reports for f in r["results"]["failed_checks"]],
            "passed": sum(r["summary"]["passed"] for r in reports),
            "resources": sum(r["summary"]["resource_count"] for r in reports)}


def test_rendered_objects_have_no_failed_checks(tmp_path):
    files = render(tmp_path)
    result = scan(tmp_path)
    failures = [f"{f['check_id']} {f['check_name']}: {f['resource']}" for f in result["failed"]]
    assert failures == []
    assert result["resources"] >= files - 5 and result["passed"] > 500, result


def test_the_scan_fails_an_insecure_pod(tmp_path):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bad", "namespace": "x"},
           "spec": {"containers": [{"name": "c", "image": "busybox:1.36",
                                    "securityContext": {"privileged": True, "runAsUser": 0}}]}}
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(pod))
    ids = {f["check_id"] for f in scan(tmp_path)["failed"]}
    assert {"CKV_K8S_16", "CKV_K8S_20"} <= ids  # privileged container, privilege escalation allowed


def test_every_global_skip_is_justified_next_to_it():
    lines = CONFIG.read_text().splitlines()
    skips = [i for i, line in enumerate(lines) if line.strip().startswith("- CKV")]
    assert skips
    for i in skips:
        check = lines[i].strip()[2:]
        assert lines[i - 1].strip().startswith("#") and check in "\n".join(lines[max(0, i - 5):i]), check
