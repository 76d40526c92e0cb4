"""README.md's generated blocks match Pulumi.yaml and the planner; its quick start names real targets."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from planner.stack_schema import SECTIONS, section_defaults
from tools import readme

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("page", sorted(readme.BLOCKS))
def test_generated_blocks_are_what_pulumi_yaml_and_the_planner_give(page):
    text = (ROOT / page).read_text()
    assert readme.render(text, ROOT, page) == text, f"{page} drifted: run `make docs`"


README_MAX_LINES = 320


def test_the_readme_is_the_way_in_and_links_every_page_moved_out():
    """Issue 41: the README keeps what a user deploying the project reads (what it deploys, quick start, the config
    reference, operations, troubleshooting, cost); the internals are docs/ pages, each linked from it."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= README_MAX_LINES
    pages = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))
    for page in pages:
        assert f"]({page})" in text, f"README.md does not link {page}"
    for page in pages:  # every relative link of a docs page resolves
        for target in re.findall(r"\]\((?!https?://|#)([^)#]+)", (ROOT / page).read_text()):
            assert (ROOT / "docs" / target).resolve().exists(), f"{page} links {target}, which does not exist"


def test_config_reference_lists_every_declared_field_with_its_default():
    table = readme.config_reference()
    for key, section in SECTIONS.items():
        for name, info in section.model_fields.items():
            row = next(line for line in table.splitlines() if line.startswith(f"| `{key}.{info.alias or name}` |"))
            if info.is_required():
                assert "| required |" in row, row
    assert "| `vllm-gke:hfToken` (secret) |" in table and "| `vllm-gke:apiKey` (secret) |" in table


def test_pulumi_yaml_defaults_are_the_declared_ones():
    config = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())["config"]
    assert list(config) == [f"vllm-gke:{key}" for key in SECTIONS]
    for key, section in SECTIONS.items():
        assert config[f"vllm-gke:{key}"]["default"] == section_defaults(section)


def test_drift_in_any_generated_file_is_detected(tmp_path):
    for name in ("README.md", "Pulumi.yaml", "Pulumi.dev.yaml", "Pulumi.prod.yaml", "Pulumi.multizone.yaml"):
        (tmp_path / name).write_text((ROOT / name).read_text())
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "stack-config.schema.json").write_text(readme.SCHEMA.read_text())
    for page in readme.BLOCKS:
        (tmp_path / page).write_text((ROOT / page).read_text())
    (tmp_path / "models").symlink_to(ROOT / "models")
    (tmp_path / "components").symlink_to(ROOT / "components")
    assert all(now == wanted for now, wanted in readme.outputs(tmp_path).values())
    pulumi_yaml = tmp_path / "Pulumi.yaml"
    pulumi_yaml.write_text(pulumi_yaml.read_text().replace("scrapeInterval: 15s", "scrapeInterval: 30s"))
    (tmp_path / "docs" / "stack-config.schema.json").write_text("{}\n")
    stale = {path.name for path, (now, wanted) in readme.outputs(tmp_path).items() if now != wanted}
    assert stale == {"Pulumi.yaml", "stack-config.schema.json"}


@pytest.mark.parametrize("stack", ["dev", "prod", "multizone"])
def test_the_example_stack_files_validate_against_the_generated_schema(stack):
    schema = json.loads(readme.SCHEMA.read_text())
    jsonschema.validate(yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text()), schema)


@pytest.mark.parametrize("config", [
    {"vllm-gke:clustr": {"name": "x"}},                                   # a typo of a vllm-gke key
    {"vllm-gke:vllm": {"gpuMemoryUtilization": 2}},                     # out of range
    {"vllm-gke:accelerator": {"type": "nvidia-l4", "provisioning": "x"}},  # not a choice
    {"vllm-gke:serving": {"smokeTest": "yes"}},                         # wrong type
])
def test_the_schema_refuses_what_the_program_refuses(config):
    schema = json.loads(readme.SCHEMA.read_text())
    stack = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())
    stack["config"].update(config)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(stack, schema)


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
