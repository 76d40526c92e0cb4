"""The generated parts of README.md: the config reference (from Pulumi.yaml) and the worked sizing examples
(from the planner). `python -m tools.readme` rewrites them; `--check` exits 1 when README.md drifts
(tests/test_readme.py runs the same comparison).
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from planner.config import NAMESPACE, PROJECT_DIR, build_settings
from planner.sizing import plan
from tools.plan import namespaced, read_stack_file

README = PROJECT_DIR / "README.md"
BLOCK = re.compile(r"(<!-- generated:(?P<name>[a-z-]+) start -->\n)(?P<body>.*?)(<!-- generated:(?P=name) end -->)",
                   re.DOTALL)
SECRET_LINE = re.compile(rf"^#\s+{NAMESPACE}:(\w+)\s+(.+)$")


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ", ".join(map(str, value)) + "]"
    return str(value)


def config_reference(project_dir: Path = PROJECT_DIR) -> str:
    """One row per key of Pulumi.yaml's config block, then the secrets its comments declare."""
    text = (project_dir / "Pulumi.yaml").read_text()
    config = yaml.safe_load(text)["config"]
    rows = ["| key | what it sets | defaults |", "|---|---|---|"]
    for key, decl in config.items():
        default = decl.get("default")
        if isinstance(default, dict):
            shown = ", ".join(f"`{k}: {_fmt(v)}`" for k, v in default.items()) or "-"
        else:
            shown = f"`{_fmt(default)}`" if default is not None else "-"
        description = " ".join(str(decl.get("description", "")).split()).replace("|", "\\|")
        rows.append(f"| `{key}` | {description} | {shown} |")
    for line in text.splitlines():
        if match := SECRET_LINE.match(line.strip()):
            rows.append(f"| `{NAMESPACE}:{match.group(1)}` (secret) | {match.group(2).strip()} | unset |")
    return "\n".join(rows) + "\n"


EXAMPLES: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("dev stack (Pulumi.dev.yaml)", "dev", {}),
    ("prod stack (Pulumi.prod.yaml)", "prod", {}),
    ("Llama-3.1-70B, 8k context, on a3-highgpu-8g", "dev", {
        "model": {"id": "meta-llama/Llama-3.1-70B-Instruct", "configFile": "models/Llama-3.1-70B-Instruct.json"},
        "accelerator": {"type": "nvidia-h100-80gb", "machineType": "a3-highgpu-8g", "zones": ["us-central1-a"]}}),
    ("Llama-3.1-70B, 8k context, on g2-standard-24 (2 x L4)", "dev", {
        "model": {"id": "meta-llama/Llama-3.1-70B-Instruct", "configFile": "models/Llama-3.1-70B-Instruct.json"},
        "accelerator": {"type": "nvidia-l4", "machineType": "g2-standard-24", "zones": ["us-central1-a"]}}),
    ("Mixtral-8x7B, 8k context, on a2-ultragpu-2g", "dev", {
        "model": {"id": "mistralai/Mixtral-8x7B-Instruct-v0.1",
                  "configFile": "models/Mixtral-8x7B-Instruct-v0.1.json"},
        "accelerator": {"type": "nvidia-a100-80gb", "machineType": "a2-ultragpu-2g", "zones": ["us-central1-a"]}}),
)


def sizing_examples(project_dir: Path = PROJECT_DIR) -> str:
    rows = ["| example | layout | GPUs / replica | weights GiB | KV tokens / replica | full sequences | "
            "GPU nodes (min-max) | est. load s |", "|---|---|---|---|---|---|---|---|"]
    for title, stack, override in EXAMPLES:
        raw = copy.deepcopy(namespaced(read_stack_file(project_dir / f"Pulumi.{stack}.yaml")))
        raw.update(copy.deepcopy(override))
        s = plan(build_settings(raw, project_dir))
        rows.append(
            f"| {title} | TP={s.tensor_parallel_size} x PP={s.pipeline_parallel_size} on {s.nodes_per_replica} "
            f"x {s.machine_type} | {s.gpus_per_replica} | {s.weights_gib:,.1f} | {s.kv_cache_tokens_per_replica:,} "
            f"| {s.kv_cache_tokens_per_replica // s.max_model_len} x {s.max_model_len:,} | {s.min_nodes}-{s.max_nodes} "
            f"| {s.estimated_load_seconds} |")
    return "\n".join(rows) + "\n"


GENERATORS = {"config-reference": config_reference, "sizing-examples": sizing_examples}


def render(readme_text: str, project_dir: Path = PROJECT_DIR) -> str:
    found = {m.group("name") for m in BLOCK.finditer(readme_text)}
    missing = set(GENERATORS) - found
    if missing:
        raise ValueError(f"README.md lacks the generated block(s) {sorted(missing)}")
    return BLOCK.sub(lambda m: m.group(1) + GENERATORS[m.group("name")](project_dir) + m.group(4), readme_text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if README.md differs from what it would be")
    args = parser.parse_args(argv)
    text = README.read_text()
    new = render(text)
    if args.check:
        if new != text:
            print("README.md is out of date: run `python -m tools.readme` (make docs)", file=sys.stderr)
            return 1
        return 0
    README.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
