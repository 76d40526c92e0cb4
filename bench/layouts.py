#!/usr/bin/env python3
"""GPU measurement of the layouts the planner compares (planner/throughput.py), on configs without weights.

    python3 bench/layouts.py models/X.json [...] --layouts replicas-2x-tp1,tp2-one-node,dp2-ep \
        [--accelerator nvidia-h100-80gb] [--prompts 600] [--out DIR]
    python3 bench/layouts.py models/X.json [...] --predict-only --out docs/benchmarks   (before the run: commit it)

For each config and layout it starts the leader command the LeaderWorkerSet renders (planner/commands.py through
the project's launcher; `--load-format dummy`: random weights from config.json alone, bench/calibrate.py's model
directory), waits for /health, warms up, then runs vLLM's benchmark client (bench/loadtest.py: random prompts of
fixed length, rate inf; one client per replica with its share of the prompts). Each row keeps the KV tokens every
engine logged and the output tokens per second; OUT/layouts.json is written after every layout. With --pods DIR a
layout rendered there by bench/pods.py starts as its declared pods instead (tools/pod_runner.py: own UID, read-only
root, own network namespace). --predict-only writes the planner's choice and per-layout predictions instead.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.calibrate import AVAILABLE, GRAPHS, LOADING, PROFILE, model_dir  # noqa: E402
from bench.declared import Rendered, declared_checks  # noqa: E402
from bench.harness import (  # noqa: E402
    LAYOUTS,
    Bench,
    BenchError,
    BenchLayout,
    Group,
    PodGroup,
    host_info,
    leader_cmd,
    local,
    log,
    run_client,
    summarize,
    wait_healthy,
)
from planner.catalog import ACCELERATORS  # noqa: E402
from planner.commands import API_PORT  # noqa: E402

KV_LINES = re.compile(r"(?:GPU|CPU) KV cache size: ([\d,]+) tokens")


def start(bench: Bench, layout: BenchLayout, group: Group) -> list[str]:
    urls = []
    for r in range(layout.replicas):
        port = API_PORT + r
        gpus = list(range(r * layout.gpus_per_replica, (r + 1) * layout.gpus_per_replica))
        spec = replace(bench.spec(layout, port), extra_args=("--load-format", "dummy"))
        group.start(f"leader-r{r}", leader_cmd(spec), bench.env(layout, gpus, f"{layout.name}-r{r}"))
        urls.append(local(port))
    return urls


def memory_lines(logs: list[str]) -> dict[str, list[Any]]:
    """What each engine (every rank of every replica) logged of its memory: weights loaded, KV memory left, CUDA
    graphs and the profile line, in log order. The KV tokens alone do not say which term outside the KV cache a
    layout's error sits in (a DP+EP rank's reserve against its weights)."""
    found: dict[str, list[Any]] = {"weights_gib": [], "kv_cache_gib": [], "graphs_gib": [], "profile": []}
    for text in logs:
        found["weights_gib"] += [float(v) for v in LOADING.findall(text)]
        found["kv_cache_gib"] += [float(v) for v in AVAILABLE.findall(text)]
        found["graphs_gib"] += [float(v) for v in GRAPHS.findall(text)]
        found["profile"] += PROFILE.findall(text)
    return found


def measure(bench: Bench, layout: BenchLayout, rendered: Rendered | None) -> dict[str, Any]:
    name = f"{bench.served_name}-{layout.name}"
    group = PodGroup(bench.work, name, bench.declared(layout)) if rendered else Group(bench.work, name)
    row: dict[str, Any] = {"name": layout.name, "layout": {"tp": layout.tp, "dp": layout.dp, "ep": layout.ep,
                                                           "replicas": layout.replicas},
                           "gpus": layout.gpus, "started_as": "declared pods" if rendered else "host processes"}
    try:
        t0 = time.monotonic()
        urls = group.start_pods(layout) if rendered else start(bench, layout, group)
        row["startup_seconds"] = round(wait_healthy(group, urls, t0, bench.args.start_timeout), 1)
        if rendered:
            row["pods"] = {pod.name: declared_checks(pod) for pod in group.declared.pods}
            row["command"] = group.declared.pods[0].spec["containers"][0].get("command", [])[-40:]
        logs = [p.log.read_text(errors="replace") for p in group.procs]
        row["kv_cache_tokens_engines"] = [int(m.replace(",", "")) for text in logs for m in KV_LINES.findall(text)]
        row["kv_cache_tokens_measured"] = min(row["kv_cache_tokens_engines"], default=None)
        row["memory_lines"] = memory_lines(logs)
        share = -(-bench.args.prompts // layout.replicas)
        run_client(bench, urls, max(1, bench.args.warmup_prompts // layout.replicas), 1, f"{name}-warmup",
                   served_name=bench.served_name)
        stats = summarize(run_client(bench, urls, share, 0, name, served_name=bench.served_name))
        row |= stats
        row["output_tokens_per_s_per_gpu"] = round(stats["output_tokens_per_s"] / layout.gpus, 1)
        log(f"{name}: {stats['output_tokens_per_s']} tok/s, per GPU {row['output_tokens_per_s_per_gpu']}, "
            f"KV {row['kv_cache_tokens_engines']}")
    except BenchError as exc:
        row["error"] = str(exc)
        log(f"{name}: FAILED {exc}")
        with contextlib.suppress(Exception):
            row["log_tail"] = group.procs[0].log.read_text(errors="replace").splitlines()[-30:]
    finally:
        group.stop(grace=20)
    return row


def predict(args: argparse.Namespace) -> int:
    from bench.fit_layouts import predicted_batch

    batches = [predicted_batch(str(config.relative_to(ROOT) if config.is_absolute() else config), args.accelerator,
                               args.layout_list, args.max_model_len, args.input_len, args.output_len, args.prompts)
               for config in args.configs]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "layouts-predictions.json").write_text(json.dumps({"batches": batches}, indent=2) + "\n")
    for batch in batches:
        print(batch["config"], batch["planner_choice"], [(r["name"], r["predicted_tokens_per_s_per_gpu"])
                                                        for r in batch["rows"]])
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="+", type=Path)
    parser.add_argument("--layouts", default="replicas-2x-tp1,tp2-one-node,dp2-ep")
    parser.add_argument("--accelerator", default="nvidia-h100-80gb", choices=sorted(ACCELERATORS))
    parser.add_argument("--prompts", type=int, default=600)
    parser.add_argument("--warmup-prompts", type=int, default=40)
    parser.add_argument("--input-len", type=int, default=1024)
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--kv-cache-dtype", default="auto")
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--start-timeout", type=float, default=300)
    parser.add_argument("--pods", type=Path, default=None,
                        help="bench/pods.py --layouts ... output for the one config given: start those layouts as pods")
    parser.add_argument("--work", type=Path, default=Path("/tmp/vllm-gke-layouts"))
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks")
    parser.add_argument("--predict-only", action="store_true")
    args = parser.parse_args(argv)
    args.layout_list = [name for name in args.layouts.split(",") if name]
    unknown = [name for name in args.layout_list if name not in LAYOUTS]
    if unknown:
        parser.error(f"--layouts: {', '.join(unknown)} unknown; known: {', '.join(LAYOUTS)}")
    if args.predict_only:
        return predict(args)
    args.work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "layouts.json"
    results: dict[str, Any] = {"host": host_info(), "batches": []}
    rendered = {p.stem: Rendered.load(p) for p in sorted(args.pods.glob("*.json"))} if args.pods else {}
    net_context = contextlib.ExitStack()
    with net_context:
        net = None
        if rendered:
            from tools.pod_runner import PodNetwork
            net = net_context.enter_context(PodNetwork())
        for config in args.configs:
            directory, _ = model_dir(args.work, config, None)
            if rendered:  # declared pods mount the weights claim at /models and serve /models/model
                disk = args.work / f"disk-{config.stem}" / "model"
                shutil.rmtree(disk, ignore_errors=True)
                shutil.copytree(directory, disk)
                directory = disk
            bench = Bench(args, directory, config.stem.lower(), args.work, rendered, net)
            batch = {"config": str(config), "accelerator": args.accelerator, "vllm": "0.25.1",
                     "max_model_len": args.max_model_len, "gpu_memory_utilization": args.gpu_memory_utilization,
                     "input_len": args.input_len, "output_len": args.output_len, "prompts": args.prompts,
                     "rows": []}
            results["batches"].append(batch)
            for name in args.layout_list:
                layout = LAYOUTS[name]
                batch["rows"].append(measure(bench, layout, bench.pods.get(name)))
                path.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
