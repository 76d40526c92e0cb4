"""`python -m tools.plan --config FILE` on hostile stack files: one line naming what is wrong, exit 2, never a
traceback; and a property test that mutates one declared field at a time (wrong type, out of range, unknown name)."""

from __future__ import annotations

import contextlib
import copy
import io
import subprocess
import sys
import types
import typing

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.config import PROJECT_DIR
from planner.stack_schema import SECTIONS
from tools import plan

DEV = yaml.safe_load((PROJECT_DIR / "Pulumi.dev.yaml").read_text())


def run_cli(path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.plan", "--config", str(path), "--out", str(path) + ".out"],
                          cwd=PROJECT_DIR, capture_output=True, text=True, timeout=120)


FILES = {
    "top-level-list.yaml": ("- config: {}\n", "the top level is a list"),
    "duplicate-key.yaml": ("config:\n  gcp:project: a\n  gcp:project: b\n", "line 3, column 3: duplicate key"),
    "no-namespace.yaml": ("config:\n  gcp:project: p\n  cluster:\n    name: x\n", "`vllm-gke:cluster`"),
    "malformed.yaml": ("config:\n  gcp:project: [p\n", "line 3, column 1"),
    "no-project.yaml": (yaml.safe_dump({"config": {k: v for k, v in DEV["config"].items() if k != "gcp:project"}}),
                        "gcp:project is required"),
    "namespace-with-slash.yaml": (yaml.safe_dump({"config": {**DEV["config"],
                                                             "vllm-gke:serving": {"namespace": "team/vllm"}}}),
                                  "vllm-gke:serving.namespace = team/vllm"),
    "not-utf8.yaml": (None, "not a UTF-8 text file"),
    "near-miss-namespace.yaml": (yaml.safe_dump({"config": {**DEV["config"], "vllm_gke:vllm": {"maxModelLen": 4096}}}),
                                 "vllm_gke:vllm = {\"maxModelLen\": 4096}: the namespace \"vllm_gke\""),
}


@pytest.mark.parametrize("name", sorted(FILES))
def test_hostile_stack_files_get_one_line_and_exit_2(tmp_path, name):
    text, fragment = FILES[name]
    path = tmp_path / name
    if text is None:
        path.write_bytes(b"config:\n  gcp:project: \xff\xfe\n")
    else:
        path.write_text(text)
    result = run_cli(path)
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert fragment in lines[0], lines[0]


# ---------------------------------------------------------------------------------------------- property

def _base(annotation):
    if typing.get_origin(annotation) is typing.Annotated:
        return _base(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):  # Optional[...]
        return _base(next(t for t in typing.get_args(annotation) if t is not type(None)))
    return annotation


def _bounds(info):
    return {a: getattr(m, a) for m in info.metadata for a in ("ge", "gt", "le") if getattr(m, a, None) is not None}


OTHER_DIGITS = ["٣٠", "४", "１６", "²", "𝟖"]
"""Numbers in digits of other scripts (Arabic-Indic, Devanagari, fullwidth, superscript, mathematical): int(),
float() and \\d take most of them; Kubernetes, GMP and this project take ASCII 0-9 only."""


def wrong_values(info) -> list:
    """Values of the wrong type, or out of the declared range, for one declared field."""
    base = _base(info.annotation)
    if typing.get_origin(base) is typing.Literal:
        return ["not-a-choice", 7, ["x"]]
    if base is bool:
        return ["maybe", 2, ["x"]]
    if base is int:
        low = _bounds(info).get("ge", 1)
        return ["many", 1.5, [1], low - 1, -3, *OTHER_DIGITS]
    if base is float:
        b = _bounds(info)
        return ["lots", [1.0], True, b.get("gt", 0) - 1, b.get("le", 1) + 1, "nan", "٠.٥", "0.５"]
    if typing.get_origin(base) is tuple:
        return ["not-a-list", 5, [3], [""]]
    if typing.get_origin(base) is dict or base is dict:
        return ["not-an-object", 5, ["x"]]
    if base is typing.Any:  # durations (scrapeInterval)
        return [5, ["x"], "", {"a": 1}, *(f"{d}s" for d in OTHER_DIGITS)]
    return [5, ["x"], "", {"a": 1}]  # strings (Text)


CASES = [(key, info.alias or name, value) for key, section in SECTIONS.items()
         for name, info in section.model_fields.items() for value in wrong_values(info)]
CASES += [(key, "noSuchField", 1) for key in SECTIONS]


@settings(max_examples=520, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(CASES), seed=st.integers(0, 3))
def test_one_mutated_field_exits_2_with_one_line_naming_it(tmp_path_factory, case, seed):
    key, field, value = case
    config = copy.deepcopy(DEV["config"])
    section = config.setdefault(f"vllm-gke:{key}", {})
    section[field] = value
    if key == "model" and field == "architecture":
        section.pop("configFile", None)  # otherwise the pair is refused first, naming model.architecture too
    path = tmp_path_factory.mktemp("stack") / f"Pulumi.mutant{seed}.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = plan.main(["--config", str(path)])
    lines = err.getvalue().strip().splitlines()
    assert code == 2, f"{key}.{field} = {value!r} was accepted"
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"error: vllm-gke:{key}.{field}"), (case, lines[0])


def test_the_property_covers_every_declared_field():
    fields = {(key, info.alias or name) for key, section in SECTIONS.items()
              for name, info in section.model_fields.items()}
    assert fields <= {(key, field) for key, field, _ in CASES}
    assert len(CASES) > 150, "three or more wrong values per field"


MERGED = """config:
  gcp:project: my-gcp-project
  vllm-gke:cluster: {name: ml-dev, location: us-central1}
  vllm-gke:accelerator: {type: nvidia-l4, machineType: g2-standard-8, zones: [us-central1-a]}
  vllm-gke:model:
    id: meta-llama/Llama-3.1-8B-Instruct
    configFile: models/Llama-3.1-8B-Instruct.json
  vllm-gke:autoscaling: &scaling
    minReplicas: 1
    maxReplicas: 2
  vllm-gke:vllm:
    <<: &long {maxModelLen: 4096, gpuMemoryUtilization: 0.85}
    maxModelLen: 8192
"""


def test_yaml_merge_keys_merge_as_pulumi_reads_them_and_a_repeated_own_key_is_still_refused(tmp_path):
    path = tmp_path / "Pulumi.merged.yaml"
    path.write_text(MERGED)
    config = plan.read_stack_file(path)
    # the mapping's own key overrides the merged one; the merged one fills in what it does not name
    assert config["vllm-gke:vllm"] == {"maxModelLen": 8192, "gpuMemoryUtilization": 0.85}
    path.write_text(MERGED + "    maxModelLen: 2048\n")
    with pytest.raises(plan.PlanInputError, match="duplicate key 'maxModelLen'"):
        plan.read_stack_file(path)
