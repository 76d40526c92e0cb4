"""Everything generated from the declarations: README.md's config reference (from planner/stack_schema.py), the
worked sizing examples, time to ready and rung table of docs/planning.md and docs/several-zones.md (from the
planner), Pulumi.yaml's `config:` block and docs/stack-config.schema.json.
`python -m tools.readme` (make docs) rewrites them; `--check` exits 1 when one drifts (tests/tools/test_readme.py
runs the same comparison).
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import TypeAdapter

from planner.config import NAMESPACE, PROJECT_DIR, build_settings
from planner.config_errors import interval
from planner.sizing import Sizing, plan
from planner.stack_schema import SECRETS, SECTIONS, section_defaults
from tools.plan import namespaced, read_stack_file

README = PROJECT_DIR / "README.md"
BLOCK = re.compile(r"(<!-- generated:(?P<name>[a-z-]+) start -->\n)(?P<body>.*?)(<!-- generated:(?P=name) end -->)",
                   re.DOTALL)
SCHEMA = PROJECT_DIR / "docs" / "stack-config.schema.json"


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(map(str, value)) + "]"
    return str(value)


def _type(info: Any) -> str:
    """A field's accepted values as a reader wants them: the choices, or the plain type."""
    schema = TypeAdapter(info.annotation).json_schema() if info.annotation is not None else {}
    options = [o for o in schema.get("anyOf", [schema]) if o.get("type") != "null"]
    option = options[0] if options else {}
    if "enum" in option:
        return " \\| ".join(map(str, option["enum"]))
    kind = {"array": "list", "integer": "integer", "number": "number", "boolean": "true/false",
            "object": "object", "string": "string"}.get(option.get("type", ""), "value")
    bounds = {attr: getattr(m, attr) for m in info.metadata for attr in ("ge", "gt", "le", "lt")
              if getattr(m, attr, None) is not None}
    return f"{kind} {interval(bounds, kind == 'integer')}" if bounds else kind


def config_reference(project_dir: Path = PROJECT_DIR) -> str:
    """One row per field of every `vllm-gke:` key (planner/stack_schema.py), then the secrets."""
    rows = ["| key | accepts | default | what it sets |", "|---|---|---|---|"]
    for key, section in SECTIONS.items():
        rows.append(f"| **`{NAMESPACE}:{key}`** | object | | {section.__doc__.strip()} |")
        for name, info in section.model_fields.items():
            default = "required" if info.is_required() else "-" if info.default is None else f"`{_fmt(info.default)}`"
            description = " ".join(str(info.description).split()).replace("|", "\\|")
            rows.append(f"| `{key}.{info.alias or name}` | {_type(info)} | {default} | {description} |")
    for key, description in SECRETS.items():
        rows.append(f"| `{NAMESPACE}:{key}` (secret) | string | unset | {description} |")
    return "\n".join(rows) + "\n"


def pulumi_yaml_config() -> str:
    """Pulumi.yaml's `config:` block: each key's description and default object, from the same declarations.
    Pulumi's project config takes `type` only for string/integer/boolean/array, so objects declare a default."""
    config = {}
    for key, section in SECTIONS.items():
        fields = "; ".join(f"{info.alias or name} ({' '.join(str(info.description).split()).rstrip('.')})"
                           for name, info in section.model_fields.items())
        config[f"{NAMESPACE}:{key}"] = {"description": f"{section.__doc__.strip()} Fields: {fields}.",
                                        "default": section_defaults(section)}
    return yaml.safe_dump({"config": config}, sort_keys=False, width=110)


def render_pulumi_yaml(text: str) -> str:
    """Pulumi.yaml with its `config:` block (the file's last block) regenerated."""
    head = text[:text.index("\nconfig:\n") + 1]
    return head + pulumi_yaml_config()


def _keywords(node: Any) -> Any:
    """pydantic writes ge/gt/le/lt inside unions as they are; JSON Schema spells them minimum and so on."""
    names = {"ge": "minimum", "gt": "exclusiveMinimum", "le": "maximum", "lt": "exclusiveMaximum"}
    if isinstance(node, dict):
        return {names.get(k, k) if not isinstance(v, (dict, list)) else k: _keywords(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_keywords(v) for v in node]
    return node


def stack_schema() -> dict[str, Any]:
    """JSON Schema of a `Pulumi.<stack>.yaml` file (docs/stack-config.schema.json), for editors and CI."""
    properties: dict[str, Any] = {"gcp:project": {"type": "string", "description": "GCP project id."}}
    defs: dict[str, Any] = {}
    for key, section in SECTIONS.items():
        schema = _keywords(section.model_json_schema(by_alias=True, ref_template="#/$defs/{model}"))
        defs.update(schema.pop("$defs", {}))
        properties[f"{NAMESPACE}:{key}"] = schema
    secure = {"oneOf": [{"type": "string"}, {"type": "object", "required": ["secure"],
                                                 "properties": {"secure": {"type": "string"}}}]}
    for key, description in SECRETS.items():
        properties[f"{NAMESPACE}:{key}"] = {**secure, "description": f"{description} Set it with "
                                                                    "`pulumi config set --secret`."}
    known = sorted(k for k in properties if k.startswith(f"{NAMESPACE}:"))
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://vllm-gke/docs/stack-config.schema.json",
        "title": "vllm-gke stack file (Pulumi.<stack>.yaml)",
        "description": "Generated from planner/stack_schema.py by `make docs`; do not edit.",
        "type": "object", "required": ["config"],
        "properties": {"config": {
            "type": "object", "required": ["gcp:project", f"{NAMESPACE}:cluster", f"{NAMESPACE}:accelerator",
                                           f"{NAMESPACE}:model"],
            "properties": properties,
            # Other namespaces (gcp:region, kubernetes:...) pass; an unknown vllm-gke: key is a typo.
            "propertyNames": {"anyOf": [{"enum": known}, {"not": {"pattern": f"^{NAMESPACE}:"}}]}},
            "secretsprovider": {"type": "string"}, "encryptedkey": {"type": "string"},
            "encryptionsalt": {"type": "string"}},
        "$defs": defs,
    }


def schema_text() -> str:
    return json.dumps(stack_schema(), indent=2) + "\n"


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
    ("gpt-oss-120b (MXFP4 MoE, sliding window), 8k context, on a3-highgpu-1g", "dev", {
        "model": {"id": "openai/gpt-oss-120b", "configFile": "models/gpt-oss-120b.json"},
        "accelerator": {"type": "nvidia-h100-80gb", "machineType": "a3-highgpu-1g", "zones": ["us-central1-a"]}}),
    ("DeepSeek-V3 (FP8, MLA, MoE), 8k context, on a3-ultragpu-8g", "dev", {
        "model": {"id": "deepseek-ai/DeepSeek-V3", "configFile": "models/DeepSeek-V3.json"},
        "accelerator": {"type": "nvidia-h200-141gb", "machineType": "a3-ultragpu-8g", "zones": ["us-central1-a"]}}),
    ("Qwen3-Next-80B-A3B (hybrid linear attention), 8k context, on a3-ultragpu-8g", "dev", {
        "model": {"id": "Qwen/Qwen3-Next-80B-A3B-Instruct", "configFile": "models/Qwen3-Next-80B-A3B-Instruct.json"},
        "accelerator": {"type": "nvidia-h200-141gb", "machineType": "a3-ultragpu-8g", "zones": ["us-central1-a"]}}),
)


def _disk(s: Sizing) -> str:
    """The chosen weights disk in one cell: type, size, per-VM read rate, list price."""
    provisioned = f", {s.disk_provisioned_mib_s:,} MiB/s provisioned" if s.disk_provisioned_mib_s else ""
    return (f"{s.weights_disk_type} {s.weights_disk_gib:,} GiB{provisioned}: {s.disk_read_mib_s:,} MiB/s per VM, "
            f"${s.weights_disk_usd_month:,.0f}/month")


def _plan_stack(stack: str, project_dir: Path, override: dict[str, Any] | None = None) -> Sizing:
    """The plan of Pulumi.<stack>.yaml, with `override` sections replacing the file's."""
    raw = copy.deepcopy(namespaced(read_stack_file(project_dir / f"Pulumi.{stack}.yaml")))
    raw.update(copy.deepcopy(override or {}))
    return plan(build_settings(raw, project_dir))


def _layout(s: Sizing) -> str:
    text = f"TP={s.tensor_parallel_size} x PP={s.pipeline_parallel_size}"
    if s.data_parallel_size > 1:
        text = f"DP={s.data_parallel_size} x " + text
    return text + (" + EP" if s.expert_parallel else "")


def sizing_examples(project_dir: Path = PROJECT_DIR) -> str:
    rows = ["| example | layout | GPUs / replica | weights GiB | KV tokens / replica | full sequences | "
            "GPU nodes (min-max) | weights disk | weights load s | est. load s |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for title, stack, override in EXAMPLES:
        s = _plan_stack(stack, project_dir, override)
        rows.append(
            f"| {title} | {_layout(s)} on {s.nodes_per_replica} "
            f"x {s.machine_type} | {s.gpus_per_replica} | {s.weights_gib:,.1f} | {s.kv_cache_tokens_per_replica:,} "
            f"| {s.max_concurrent_sequences} x {s.max_model_len:,} | {s.min_nodes}-{s.max_nodes} "
            f"| {_disk(s)} | {s.weights_load_seconds} | {s.estimated_load_seconds} |")
    return "\n".join(rows) + "\n"


def _spare_price(s: Any) -> str:
    """One spare slot's nodes at the on-demand list price (planner/catalog.py MACHINE_USD_HOUR)."""
    from planner.catalog import ACCELERATORS, machine_usd_hour

    machine = next(m for m in ACCELERATORS[s.accelerator].machines if m.name == s.machine_type)
    price = machine_usd_hour(machine)
    return "not in the catalog" if price is None else f"{price * s.nodes_per_replica:,.2f}"


def time_to_ready_table(project_dir: Path = PROJECT_DIR) -> str:
    """The example stacks' time to ready per new replica (planner/sizing.py, as `make plan` shows it)."""
    rows = ["| stack | node provisioning s | image pull s (streaming / without) | weights load s | "
            "engine start s (cold / warm cache) | total s (cold / warm) | on a spare slot s (autoscaling.headroom) | "
            "spare slot $/hour |", "|---|---|---|---|---|---|---|---|"]
    for stack in ("dev", "prod"):
        s = _plan_stack(stack, project_dir)
        rows.append(f"| {stack} ({s.nodes_per_replica} x {s.machine_type}) | {s.node_provisioning_seconds} | "
                    f"{s.image_pull_seconds} / {s.image_pull_seconds_without_streaming} | {s.weights_load_seconds} "
                    f"({s.weights_disk_type}) | {s.engine_start_cold_seconds} / {s.engine_start_warm_seconds} | "
                    f"{s.time_to_ready_cold_seconds} / {s.time_to_ready_warm_seconds} | "
                    f"{s.time_to_ready_headroom_seconds} | {_spare_price(s)} |")
    return "\n".join(rows) + "\n"


def sold_out_example(project_dir: Path = PROJECT_DIR) -> str:
    """Pulumi.multizone.yaml's accelerator section and the rungs `make plan STACK=multizone` prints for it."""
    from tools.plan import rung_rows

    config = read_stack_file(project_dir / "Pulumi.multizone.yaml")
    section = yaml.safe_dump({"vllm-gke:accelerator": config["vllm-gke:accelerator"]}, sort_keys=False,
                             default_flow_style=None, width=110)
    s = _plan_stack("multizone", project_dir)
    model = config["vllm-gke:model"]["id"].rsplit("/", 1)[-1]
    return (f"```yaml\n{section}```\n\n`make plan STACK=multizone` ({model}, vllm.maxModelLen "
            f"{s.max_model_len:,}, tensor={s.tensor_parallel_size} x pipeline={s.pipeline_parallel_size}) prints:\n\n"
            f"```\n{rung_rows(s)}\n```\n")


def components_table(project_dir: Path = PROJECT_DIR) -> str:
    """Every file of components/ with its ComponentResource class and the first line of that class's docstring."""
    import ast

    rows = ["| file | component | what it declares |", "|---|---|---|"]
    for path in sorted((project_dir / "components").glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and any(
                    getattr(base, "attr", getattr(base, "id", "")) == "ComponentResource" for base in node.bases):
                doc = (ast.get_docstring(node) or "").split("\n\n")[0].replace("\n", " ")
                rows.append(f"| `components/{path.name}` | `{node.name}` | {doc} |")
    return "\n".join(rows) + "\n"


GENERATORS = {"config-reference": config_reference, "sizing-examples": sizing_examples,
              "time-to-ready": time_to_ready_table, "sold-out": sold_out_example, "components": components_table}


BLOCKS = {"README.md": ("config-reference",), "docs/planning.md": ("sizing-examples", "time-to-ready"),
          "docs/several-zones.md": ("sold-out",), "docs/development.md": ("components",)}
"""The page each generated block lives in (the README is the way in; the internals are pages of docs/)."""


def render(text: str, project_dir: Path = PROJECT_DIR, page: str = "README.md") -> str:
    """`text` (the page `page`) with its generated blocks rewritten; every block BLOCKS gives the page must be in it."""
    found = {m.group("name") for m in BLOCK.finditer(text)}
    missing = set(BLOCKS[page]) - found
    if missing:
        raise ValueError(f"{page} lacks the generated block(s) {sorted(missing)}")
    return BLOCK.sub(lambda m: m.group(1) + GENERATORS[m.group("name")](project_dir) + m.group(4), text)


def outputs(project_dir: Path = PROJECT_DIR) -> dict[Path, tuple[str, str]]:
    """Every generated file: path -> (text now, text it should have)."""
    pulumi_yaml, schema = project_dir / "Pulumi.yaml", project_dir / "docs" / "stack-config.schema.json"
    pages = {project_dir / page: page for page in BLOCKS}
    current = {path: path.read_text() if path.exists() else "" for path in (*pages, pulumi_yaml, schema)}
    return {**{path: (current[path], render(current[path], project_dir, page)) for path, page in pages.items()},
            pulumi_yaml: (current[pulumi_yaml], render_pulumi_yaml(current[pulumi_yaml])),
            schema: (current[schema], schema_text())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a generated file differs from what it would be")
    args = parser.parse_args(argv)
    stale = [path for path, (now, wanted) in outputs().items() if now != wanted]
    if args.check:
        for path in stale:
            print(f"{path.name} is out of date: run `python -m tools.readme` (make docs)", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        path.write_text(outputs()[path][1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
