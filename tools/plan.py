"""Offline plan: evaluate a stack under Pulumi mocks and show what it would deploy.

    python -m tools.plan --stack dev [--json] [--out DIR]
    python -m tools.plan --config path/to/Pulumi.x.yaml

No CLI, credentials or network. A ConfigError exits 2 with its one-line message on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from planner.catalog import GIB
from planner.config import NAMESPACE, PROJECT_DIR, Settings, build_settings, check_namespaces
from planner.engine import PROFILES
from planner.errors import ConfigError
from planner.memory import resolved_kv_cache_dtype
from planner.sizing import DOWNLOAD_FLOOR_MIB_S, Sizing, plan
from planner.versions import chat_ui_image, own_images


class PlanInputError(Exception):
    """A bad command-line argument or unreadable stack file."""


class _StrictLoader(yaml.SafeLoader):
    """YAML as Pulumi reads a stack file: a key given twice is an error, not a silent overwrite; merge keys
    (`<<: *anchor`) merge, the mapping's own keys overriding the merged ones, as YAML 1.1 defines them."""


MERGE_TAG = "tag:yaml.org,2002:merge"


def _no_duplicates(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen = set()
    for key_node, _ in node.value:
        if key_node.tag == MERGE_TAG:
            continue  # merged keys may be overridden by the mapping's own: that is what a merge is for
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    loader.flatten_mapping(node)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def read_stack_file(path: Path) -> dict[str, Any]:
    """The `config:` mapping of a stack file, read the way Pulumi reads it: valid YAML without duplicate keys, a
    mapping at the top with `config:` in it, every key `<namespace>:<name>`."""
    if not path.is_file():
        raise PlanInputError(f"--config {path}: no such stack file")
    try:
        data = yaml.load(path.read_text(), Loader=_StrictLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise PlanInputError(f"--config {path}: not valid YAML ({where}{problem})") from None
    except UnicodeDecodeError:
        raise PlanInputError(f"--config {path}: not a UTF-8 text file") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PlanInputError(f"--config {path}: the top level is a {type(data).__name__}; a stack file is a mapping "
                             "with a `config:` key")
    config = data.get("config") or {}
    if not isinstance(config, dict):
        raise PlanInputError(f"--config {path}: `config:` must be a mapping of keys to values")
    for key in config:
        if not isinstance(key, str) or ":" not in key:
            raise PlanInputError(f"--config {path}: key {key!r} has no namespace; Pulumi reads only "
                                 f"`<namespace>:<name>` keys, e.g. `{NAMESPACE}:{key}`")
    check_namespaces(config)
    return config


def namespaced(config: dict[str, Any]) -> dict[str, Any]:
    """The `vllm-gke:` keys of a stack config, without the prefix; secure values as placeholders."""
    prefix = f"{NAMESPACE}:"
    out = {}
    for key, value in config.items():
        if key.startswith(prefix):
            if isinstance(value, dict) and set(value) == {"secure"}:
                value = "[secret]"
            out[key[len(prefix):]] = value
    return out


def sizing_table(sizing: Sizing) -> str:
    rows = [(k, v) for k, v in sizing.as_dict().items() if k not in ("warnings", "rungs", "layouts_compared")]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k.ljust(width)}  {v}" for k, v in rows)


def custom_resource_problems(objects: list[dict[str, Any]]) -> list[str]:
    """Upstream schema and CEL problems of every rendered custom resource with a vendored schema (tools/crds.py)."""
    from tools import crds

    kinds = crds.checked_kinds()
    return [line for obj in objects if (obj.get("apiVersion"), obj.get("kind")) in kinds
            for line in crds.problems(obj)]


def kv_cache_dtype_line(settings: Any, sizing: Sizing) -> str:
    """The KV-cache dtype vLLM runs with (planner/sizing.py resolved_kv_cache_dtype) and where it comes from."""
    chosen = settings.vllm.kv_cache_dtype
    if settings.model.architecture.compressed_attention:  # DeepSeek V4: FlashMLA's own layout
        return f"fp8_ds_mla, FlashMLA's FP8 layout DeepSeek V4 keeps (vllm.kvCacheDtype {chosen})"
    if chosen != "auto":
        return f"{chosen} (vllm.kvCacheDtype)"
    runs = resolved_kv_cache_dtype(chosen, settings.model.architecture, PROFILES[sizing.engine_profile])
    if runs != "auto":
        return f"{runs} (declared by the checkpoint; vllm.kvCacheDtype auto)"
    return "in the model dtype (vllm.kvCacheDtype auto)"


def routing_line(settings: Any) -> str:
    """Who picks a replica for each request (serving.routing)."""
    from planner.versions import ENVOY_IMAGE, EPP_IMAGE

    serving = settings.serving
    if serving.routing == "service":
        return "routing: service (vllm-leader spreads connections over the leaders)"
    scorers = "queue, KV-cache" + (", approximate prefix" if serving.prefix_scorer == "approximate" else "")
    front = (f"Envoy {ENVOY_IMAGE.rsplit(':', 1)[1]} sidecar behind vllm-leader" if serving.routing == "epp" else
             f"GKE Gateway {serving.gateway_class} -> HTTPRoute -> InferencePool")
    return (f"routing: {serving.routing} ({front}; endpoint picker {EPP_IMAGE.rsplit(':', 1)[1]} x"
            f"{serving.router_replicas}, scorers {scorers}; fail-open)")


def layouts_table(s: Sizing, settings: Settings) -> str:
    """The layouts the automatic choice compared (planner/layout.py auto_layout), best predicted first."""
    par = settings.parallelism
    head = (f"layouts compared (predicted for {par.typical_input_tokens:,}-token prompts and "
            f"{par.typical_output_tokens:,} output tokens, planner/throughput.py; $ per million output tokens from "
            "the on-demand list price; * chosen):")
    rows = [("", "layout", "GPUs", "KV tokens/engine", "requests/engine", "output tok/s/GPU", "$/M output tokens")]
    for o in sorted(s.layouts_compared, key=lambda o: -o.output_tokens_per_s_per_gpu):
        usd = "-" if o.usd_per_million_output_tokens is None else f"{o.usd_per_million_output_tokens:.3f}"
        rows.append(("*" if o.chosen else "", o.layout, str(o.gpus), f"{o.kv_tokens_per_engine:,}",
                     str(o.concurrency_per_engine), f"{o.output_tokens_per_s_per_gpu:,.0f}", usd))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  " + "  ".join(cell.ljust(w) if i < 2 else cell.rjust(w) for i, (cell, w) in
                              enumerate(zip(row, widths, strict=True))) for row in rows]
    return head + "\n" + "\n".join(line.rstrip() for line in lines)


def rung_rows(s: Sizing) -> str:
    """Every rung in the order GKE's autoscaler tries them, each planned with the one pod shape."""
    head = ("rung", "configured at", "machine", "buying", "zones", "KV tokens", "seqs", "load s", "$/hour")
    rows = [head]
    for index, r in enumerate(s.rungs):
        price = "unpriced" if r.usd_hour is None else f"{r.usd_hour:,.2f}"
        rows.append((f"{index}{' (pool)' if index == 0 else ''}", r.key, f"{r.machine_type} ({r.accelerator})",
                     r.provisioning, ",".join(z.rsplit("-", 1)[-1] for z in r.zones), f"{r.kv_tokens:,}",
                     str(r.max_concurrent_sequences), str(r.weights_load_seconds), price))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    return "\n".join(lines) + (f"\n  shared by every rung (worst rung): startup probe {s.startup_probe_seconds} s, "
                               f"HPA target {s.hpa_target:g}, pod {s.pod_cpu} CPU / {s.pod_memory_gib} GiB")


def weights_source(settings: Settings) -> str:
    """Where the planned weights come from: the stack (model.weightsGib), the checkpoint's tensors (model.tensorsFile,
    or the Hub's safetensors headers where config.json came from the Hub), or counted from the model's config.json."""
    if settings.model.weights_gib is not None:
        return "stated (model.weightsGib)"
    if settings.model.checkpoint_bytes is not None:
        skipped = settings.model.skipped_tensors
        left = f"; {skipped} multi-token-prediction tensors vLLM does not load left out" if skipped else ""
        return f"the checkpoint's tensors ({settings.model.tensors_from}){left}"
    unsized = settings.model.architecture.unsized
    unverified = "; its layer structure is not sized yet, see the warning" if unsized else ""
    return f"counted from config.json (parameters by part at the bytes vLLM loads them){unverified}"


def rung_table(s: Sizing, objects: list[dict[str, Any]]) -> str:
    """The rungs with the ComputeClass's name and where the weights volume reaches."""
    klass = next((o["metadata"]["name"] for o in objects if o.get("kind") == "ComputeClass"), "?")
    volumes = [o for o in objects if o.get("kind") == "PersistentVolume" and "/zones/multi-zone/" in
               str(((o.get("spec") or {}).get("csi") or {}).get("volumeHandle", ""))]
    where = (f"weights: {s.weights_disk_type}, one disk per zone behind the multi-zone volume "
             f"{volumes[0]['spec']['csi']['volumeHandle']}" if volumes else
             f"weights: {s.weights_disk_type} in one zone")
    return (f"GPU rungs (ComputeClass {klass}, tried in this order; $/hour: a replica's share of the on-demand list "
            f"price, spot and flex-start are billed below it):\n{rung_rows(s)}\n  {where}")


def time_to_ready(s: Sizing) -> str:
    """A new replica's start, step by step (planner/sizing.py), with and without a published compile cache."""
    disk = f"{s.weights_disk_type} {s.weights_disk_gib:,} GiB at {s.disk_read_mib_s:,} MiB/s per VM"
    rows = [("node provisioning", f"{s.node_provisioning_seconds} s", "typical; the smoke Job allows 900 s"),
            ("image pull", f"{s.image_pull_seconds} s",
             f"image streaming; {s.image_pull_seconds_without_streaming} s without"),
            ("weights load", f"{s.weights_load_seconds} s", disk),
            ("engine start", f"{s.engine_start_cold_seconds} s / {s.engine_start_warm_seconds} s",
             f"cold / warm compile cache; {s.engine_start_source}"),
            ("total", f"{s.time_to_ready_cold_seconds} s / {s.time_to_ready_warm_seconds} s", "cold / warm")]
    rows.append(("on a spare slot", f"{s.time_to_ready_headroom_seconds} s", spare_slots(s)))
    return "\n".join(f"  {step.ljust(18)} {value.ljust(14)} {note}" for step, value, note in rows)


def spare_slots(s: Sizing) -> str:
    """What autoscaling.headroom holds and costs, or what it would give."""
    if not s.headroom_slots:
        return ("with autoscaling.headroom >= 1: no node provisioning, image and weights already on the node "
                "(none kept now)")
    price = ("no list price in the catalog for this machine type" if s.headroom_usd_hour is None else
             f"${s.headroom_usd_hour:,.2f}/hour on-demand list price")
    return (f"autoscaling.headroom = {s.headroom_slots}: {s.headroom_nodes} spare node(s) of {s.machine_type} held "
            f"by placeholder pods, {price}")


def resource_tree(resources: list[Any]) -> str:
    children: dict[str | None, list[Any]] = {}
    urns = {r.urn for r in resources}
    for res in resources:
        children.setdefault(res.parent if res.parent in urns else None, []).append(res)
    for siblings in children.values():  # registration order varies run to run; the listing must not
        siblings.sort(key=lambda res: (res.type, res.name))
    lines: list[str] = []

    def walk(parent: str | None, depth: int) -> None:
        for res in children.get(parent, []):
            lines.append(f"{'  ' * (depth + 1)}{res.type}  {res.name}")
            walk(res.urn, depth + 1)

    walk(None, 0)
    return "\n".join(lines)


FIRST_KEYS = ("apiVersion", "kind", "metadata")
"""A manifest's usual head; every other key, at every depth, in sorted order."""


def _sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _sorted(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_sorted(item) for item in value]
    return value


def manifest(obj: dict[str, Any]) -> str:
    """One object as YAML in a fixed order: the same object gives the same bytes whatever order the program
    registered its fields in (they arrive from Pulumi's runtime as its outputs resolve), so rendered objects diff
    across commits and in pull requests."""
    ordered = {key: _sorted(obj[key]) for key in FIRST_KEYS if key in obj}
    ordered.update({key: _sorted(obj[key]) for key in sorted(obj) if key not in FIRST_KEYS})
    return yaml.safe_dump(ordered, sort_keys=False)


def write_objects(objects: list[dict[str, Any]], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for obj in objects:
        meta = obj.get("metadata") or {}
        name = f"{obj.get('kind', 'Object')}-{meta.get('namespace', '_cluster')}-{meta.get('name', 'unnamed')}"
        path = out / f"{name.lower()}.yaml"
        path.write_text(manifest(obj))
        written.append(path)
    return written


def overridden(config: dict[str, Any], assignments: list[str]) -> dict[str, Any]:
    """The stack file's config with `section.key=value` overrides applied (vllm-gke:section objects)."""
    config = dict(config)
    for assignment in assignments:
        target, sep, raw = assignment.partition("=")
        section, dot, key = target.partition(".")
        if not sep or not dot or not section or not key:
            raise PlanInputError(f"--set {assignment!r}: write SECTION.KEY=VALUE, e.g. autoscaling.headroom=1")
        name = f"vllm-gke:{section}"
        current = config.get(name) or {}
        if not isinstance(current, dict):
            raise PlanInputError(f"--set {assignment!r}: {name} is not a section of key/value pairs")
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError:
            raise PlanInputError(f"--set {assignment!r}: {raw!r} is not a YAML value") from None
        config[name] = {**current, key: value}
    return config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.plan", description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--stack", help="stack name: reads Pulumi.<stack>.yaml next to Pulumi.yaml")
    source.add_argument("--config", type=Path, help="any stack file (Pulumi.<stack>.yaml layout)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--out", type=Path, help="write every Kubernetes object as YAML into this directory")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override one stack-config value for this plan, e.g. autoscaling.headroom=1 "
                             "(VALUE read as YAML; repeatable)")
    parser.add_argument("--chat-ui-image", action="store_true",
                        help="print the chat page image the stack pulls (make chat-ui-image pushes it) and exit")
    args = parser.parse_args(argv)

    try:
        path = args.config if args.config else PROJECT_DIR / f"Pulumi.{args.stack}.yaml"
        stack = args.stack or path.name.removeprefix("Pulumi.").removesuffix(".yaml").removesuffix(".yml")
        config = overridden(read_stack_file(path), args.set)
        settings = build_settings(namespaced(config), PROJECT_DIR)
        project = str(config.get("gcp:project", ""))
        if args.chat_ui_image:
            print(chat_ui_image(settings, project))
            return 0
        sizing = plan(settings)
        import pulumi

        from tools.mocks import run_program  # imported late: pulumi start-up is the slow part

        try:
            recording = run_program(config, stack=stack)
        except pulumi.RunError as exc:  # refused as the preview reads the cluster (components/gke_cluster.py)
            print(f"error: {exc}", file=sys.stderr)
            return 2
    except (ConfigError, PlanInputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    from planner import cluster_rules

    objects = recording.kubernetes_objects()
    resources = recording.rule_inputs()
    pools = cluster_rules.node_pools(resources, objects)
    budget = cluster_rules.Budget(sizing.estimated_load_seconds, sizing.weights_gib * GIB, DOWNLOAD_FLOOR_MIB_S)
    # The Service-variable half of the names rule needs vLLM's own variable list (tests/program/test_cluster_rules.py).
    violations = cluster_rules.check_all(objects, pools, budget, own_images=own_images(settings, project),
                                         gcp_resources=resources, waits=recording.waits())
    violations += [f"schema: {line}" for line in custom_resource_problems(objects)]
    written = write_objects(objects, args.out) if args.out else []
    listed = [{"type": r.type, "name": r.name} for r in recording.resources]
    if args.json:
        print(json.dumps({"stack": stack, "sizing": sizing.as_dict(), "resources": listed,
                          "warnings": list(sizing.warnings), "cluster_rules": violations}, indent=2))
    else:
        print(f"stack {stack}: {settings.model.id} on {sizing.accelerator} ({sizing.machine_type})")
        print(f"engine profile: vLLM {sizing.engine_profile} rules for {settings.vllm.image} (max_num_seqs "
              f"{sizing.max_num_seqs}, max_num_batched_tokens {sizing.max_num_batched_tokens}, KV cache "
              f"{kv_cache_dtype_line(settings, sizing)})")
        print(f"weights: {sizing.weights_gib:,.2f} GiB, {weights_source(settings)}\n")
        print("sizing:\n" + sizing_table(sizing) + "\n")
        if sizing.layouts_compared:
            print(layouts_table(sizing, settings) + "\n")
        print(f"time to ready per new replica ({sizing.nodes_per_replica} node(s)):\n" + time_to_ready(sizing) + "\n")
        if sizing.rungs:
            print(rung_table(sizing, objects) + "\n")
        print(routing_line(settings) + "\n")
        print(f"resources ({len(listed)}):\n" + resource_tree(recording.resources))
        for warning in sizing.warnings:
            print(f"warning: {warning}")
        print(f"\ncluster rules (names, scheduling on {', '.join(p.name for p in pools)}, budgets, images, "
              f"runtime, routing; custom resources against their upstream schemas and CEL rules): "
              f"{len(violations) or 'no'} violation{'s' if len(violations) != 1 else ''}")
        if written:
            print(f"wrote {len(written)} Kubernetes objects to {args.out}")
    for violation in violations:
        print(f"error: {violation}", file=sys.stderr)
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
