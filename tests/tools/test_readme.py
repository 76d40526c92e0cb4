"""README.md's generated blocks match Pulumi.yaml and the planner; its quick start names real targets."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

from tools import readme

ROOT = Path(__file__).resolve().parents[2]


def test_readme_blocks_are_what_pulumi_yaml_and_the_planner_give():
    text = (ROOT / "README.md").read_text()
    assert readme.render(text) == text, "README.md drifted: run `make docs`"


def test_config_reference_lists_every_declared_key_with_its_defaults():
    table = readme.config_reference()
    config = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())["config"]
    for key, decl in config.items():
        row = next(line for line in table.splitlines() if line.startswith(f"| `{key}` |"))
        for field, value in (decl.get("default") or {}).items():
            assert f"`{field}: " in row, (key, field, value)
    assert "| `vllm-gke:hfToken` (secret) |" in table and "| `vllm-gke:apiKey` (secret) |" in table


def test_drift_is_detected(tmp_path):
    (tmp_path / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text().replace(
        "scrapeInterval: 15s", "scrapeInterval: 30s"))
    for name in ("Pulumi.dev.yaml", "Pulumi.prod.yaml"):
        (tmp_path / name).write_text((ROOT / name).read_text())
    (tmp_path / "models").symlink_to(ROOT / "models")
    text = (ROOT / "README.md").read_text()
    assert readme.render(text, tmp_path) != text
    assert "`scrapeInterval: 30s`" in readme.render(text, tmp_path)


def test_quick_start_commands_exist():
    text = (ROOT / "README.md").read_text()
    quick = text[text.index("## Quick start"):text.index("## Config reference")]
    targets = set(re.findall(r"^([a-z-]+):", (ROOT / "Makefile").read_text(), re.MULTILINE))
    for target in re.findall(r"^make ([a-z-]+)", quick, re.MULTILINE):
        assert target in targets, target
    assert "pulumi stack init" in quick and "pulumi up" in quick


def test_check_mode_exits_zero_on_the_committed_readme():
    proc = subprocess.run([sys.executable, "-m", "tools.readme", "--check"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
