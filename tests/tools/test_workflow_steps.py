"""The workflows' steps that need no cloud, run as written (their `run:` shell, under GitHub's default
`bash -eo pipefail`) in a fresh clone of this repository with a change committed on top, as a pull request would have
it: the affected-stacks pick, the preview's offline plan, the deploy's offline plan and its chat page image check. And
docs/ci.md's "Set up CI" names exactly the variables and secrets the workflows read, and a role for every kind of GCP
resource the example stacks declare."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers import full_config
from tools.mocks import run_program

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def workflow(name: str) -> dict:
    data = yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text())
    data["on"] = data.pop(True, data.get("on"))
    return data


def step(wf: str, job: str, name: str) -> dict:
    return next(s for s in workflow(wf)["jobs"][job]["steps"] if s.get("name") == name or s.get("id") == name)


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """A fresh clone of HEAD with one commit on top that edits Pulumi.dev.yaml (what a pull request would change)."""
    where = tmp_path_factory.mktemp("workflow") / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(where)], check=True, timeout=120)
    base = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True,
                          check=True).stdout.strip()
    stack = where / "Pulumi.dev.yaml"
    stack.write_text(stack.read_text() + "# a reviewed change\n")
    git = ["git", "-c", "user.name=ci", "-c", "user.email=ci@example.invalid"]
    subprocess.run([*git, "commit", "-qam", "change dev"], cwd=where, check=True, timeout=60)
    (where / ".venv").symlink_to(Path(sys.executable).parent.parent)  # what the workflow's pip install step makes
    return where, base


def run_step(clone_dir: Path, run: str, env: dict[str, str], tmp_path: Path) -> tuple[subprocess.CompletedProcess,
                                                                                       str, str]:
    assert "${{" not in run, "the shell runs as written only when expressions come in through env"
    output, summary = tmp_path / "output", tmp_path / "summary"
    output.touch()
    summary.touch()
    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"  # `python` is the program's environment
    done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", run], cwd=clone_dir,
                          env={**os.environ, "PATH": path, "GITHUB_OUTPUT": str(output),
                               "GITHUB_STEP_SUMMARY": str(summary), **env},
                          capture_output=True, text=True, timeout=300)
    return done, output.read_text(), summary.read_text()


def test_the_preview_picks_the_stacks_a_pull_request_changes(clone, tmp_path):
    where, base = clone
    pick = step("preview.yml", "stacks", "pick")
    assert pick["env"]["BASE_SHA"] == "${{ github.event.pull_request.base.sha }}"
    done, output, _ = run_step(where, pick["run"], {"BASE_SHA": base}, tmp_path)
    assert done.returncode == 0, done.stderr
    assert output.strip() == 'stacks=["dev"]', output


def test_the_previews_offline_plan_lands_in_the_job_summary(clone, tmp_path):
    where, _ = clone
    plan = step("preview.yml", "plan", "Offline plan (no credentials)")
    assert plan["env"]["STACK"] == "${{ matrix.stack }}"
    done, _, summary = run_step(where, plan["run"], {"STACK": "dev"}, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert summary.startswith("## Offline plan: dev\n```\nstack dev: ") and summary.rstrip().endswith("```")
    assert "cluster rules (names, scheduling" in summary and "no violations" in summary, summary[-800:]


def test_the_deploys_offline_plan_and_chat_page_check_run_and_fail_on_a_bad_stack(clone, tmp_path):
    where, _ = clone
    job = workflow("deploy.yml")["jobs"]["up"]
    assert job["env"]["STACK"].endswith("|| 'dev' }}"), "a push to main deploys dev"
    plan = step("deploy.yml", "up", "Offline plan (fails fast on bad stack config)")
    done, _, summary = run_step(where, plan["run"], {"STACK": "dev"}, tmp_path)
    assert done.returncode == 0 and "stack dev: " in summary, done.stderr[-2000:]
    image = step("deploy.yml", "up", "Chat page image (serving.chatUi), built once per content tag")
    done, _, _ = run_step(where, image["run"], {"STACK": "dev", "PATH": f"{tmp_path}:{os.environ['PATH']}"},
                          tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]  # dev has no chat page: no `make chat-ui-image`, no gcloud
    bad = where / "Pulumi.broken.yaml"
    config = yaml.safe_load((where / "Pulumi.dev.yaml").read_text())
    config["config"]["vllm-gke:parallelism"] = {"tensor": 3}
    bad.write_text(yaml.safe_dump(config))
    done, _, _ = run_step(where, plan["run"], {"STACK": "broken"}, tmp_path)
    assert done.returncode == 2 and "vllm-gke:parallelism.tensor = 3" in done.stderr, (done.returncode, done.stderr)


def used(kind: str) -> set[str]:
    """`vars.X` or `secrets.X` the workflows read (GITHUB_TOKEN is GitHub's own)."""
    text = "".join(p.read_text() for p in (ROOT / ".github" / "workflows").glob("*.yml"))
    return set(re.findall(rf"\b{kind}\.([A-Z_]+)", text)) - {"GITHUB_TOKEN"}


def setup_section() -> str:
    page = (ROOT / "docs" / "ci.md").read_text()
    return page.split("## Set up CI\n", 1)[1].split("\n## ", 1)[0]


def test_the_readme_names_every_variable_and_secret_the_workflows_read():
    section = setup_section()
    assert used("vars") == {"GCP_WORKLOAD_IDENTITY_PROVIDER", "GCP_SERVICE_ACCOUNT", "PULUMI_ORG"}
    assert used("secrets") == {"PULUMI_ACCESS_TOKEN"}
    for name in used("vars") | used("secrets"):
        assert f"`{name}`" in section, f"README Set up CI does not say how to set {name}"
    stacks = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in ROOT.glob("Pulumi.*.yaml"))
    assert all(f"<org>/{s}`" in section for s in stacks), f"stack init for each of {stacks}"


def test_the_readme_gives_a_role_for_every_kind_of_gcp_resource_the_stacks_declare():
    rows = re.findall(r"^\| (`gcp:.*?) \| `(roles/[^`]+)` \|$", setup_section(), re.M)
    documented = {t for types, _ in rows for t in re.findall(r"`(gcp:[^`]+)`", types)}
    declared = set()
    for stack, extra in (("dev", {}), ("prod", {}), ("dev", {"cluster": {"create": True}})):
        declared |= {r.type for r in run_program(full_config(stack, **extra)).resources if r.type.startswith("gcp:")}
    assert declared == documented, f"declared but not in the table: {declared - documented}; " \
                                   f"in the table, never declared: {documented - declared}"
