#!/usr/bin/env python3
"""GPU benchmark of the serving layouts, with the project's own launcher and rendered commands.

    python3 bench/run.py [all] [--config models/Llama-3.1-8B-Instruct.json] [--layouts tp1,...]
                         [--calibrate models/Qwen2.5-7B-Instruct.json,...] [--out docs/benchmarks]
    python3 bench/run.py build  [--config ...] [--calibrate ...]     (only build the random-weight models)
    python3 bench/run.py report [--out docs/benchmarks]               (re-render chart and doc from results.json)

For every layout it renders the leader (and worker) command with planner.commands, exactly as the
LeaderWorkerSet does, with host paths in place of the pod's; "across nodes" layouts run two Ray nodes
on this host (127.0.0.2 head, 127.0.0.3 worker, one GPU each) with NCCL forced onto TCP sockets. Each
layout gets a warm-up (another seed) and then `vllm bench serve` (random dataset, --ignore-eos). After
the PP=2 group: the worker's processes are killed and the leader's reaction is timed, then the group's
time to ready with and without the launcher is compared. Results go to OUT/results.json after every
step (a cut-short run keeps what it measured); the chart and docs/benchmarks.md come from them.
Needs a GPU host with vLLM and Ray importable by `python3`; `make bench` runs it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.declared import Rendered, declared_checks, wait_exit_or_ready  # noqa: E402
from bench.harness import (  # noqa: E402
    LAYOUTS,
    NODE_IPS,
    SHARED_HOST_PORT_SHIFT,
    Bench,
    BenchError,
    BenchLayout,
    Group,
    PodGroup,
    architecture_row,
    gpu_memory_used,
    healthy,
    host_info,
    kv_tokens,
    leader_cmd,
    local,
    log,
    logged_kv_tokens,
    planner_layout,
    predicted_kv,
    ray_stop,
    run_client,
    short_temp_dir,
    start_layout,
    summarize,
    wait_healthy,
)
from bench.levers import LEVERS, run_levers  # noqa: E402
from bench.models import build_model  # noqa: E402
from bench.report import write_report  # noqa: E402
from planner.catalog import ACCELERATORS  # noqa: E402
from planner.commands import (  # noqa: E402
    API_PORT,
    NODE_MANAGER_PORT,
    OBJECT_MANAGER_PORT,
    RAY_PORT,
    vllm_command,
)
from tools.pod_runner import PodNetwork  # noqa: E402

DEFAULT_LAYOUTS = ("tp1", "replicas-2x-tp1", "pp2-across-nodes-tcp", "tp2-across-nodes-tcp", "tp2-one-node")
COMPILE_LINE = re.compile(r"torch\.compile (?:takes|took) ([\d.]+) s in total")
INIT_LINE = re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s")
RESTORED_LINE = re.compile(r"compile cache: restored (\d+) entries, ([\d.]+) MiB from \S+ in ([\d.]+) s")
PUBLISHED_LINE = re.compile(r"compile cache: published ([\d.]+) MiB")


def _floats(pattern: re.Pattern, text: str) -> list[float]:
    return [float(m.group(1)) for m in pattern.finditer(text)]


def startup(bench: Bench, names: list[str], results: dict[str, Any], save) -> None:
    """Cold vs warm start per layout through the launcher's compile-cache reuse: the cold start (empty store, fresh
    caches) publishes; the warm start (fresh caches again, same store) restores. Each start gets its own HOME and
    Inductor dir, so only what the launcher carries is reused. Weights are in the page cache for both."""
    store = bench.work / "compile-store"
    rows = results.setdefault("startup", [])
    for name in names:
        layout = LAYOUTS[name]
        key = f"bench-{name}"
        # Every start uses the same cache paths, emptied first, as every pod has the same paths (vLLM's cache hash
        # covers them: different roots per start made the warm start miss its cache). The first start on a fresh
        # host also pays cold Python imports, so the comparison is warm vs the second cold start.
        for phase in bench.args.phase_list:
            if phase != "warm":
                shutil.rmtree(store / key, ignore_errors=True)
            for old in (bench.work / "cache").glob(f"{name}-*"):
                shutil.rmtree(old, ignore_errors=True)
            tag = f"{name}-{phase}"
            group = Group(bench.work, tag)
            row: dict[str, Any] = {"layout": name, "nodes": layout.nodes, "cache": phase, "run_started_at":
                                   results["startup_started_at"]}
            try:
                t0 = time.monotonic()
                urls = start_layout(bench, layout, group, cache_tag=name, compile_cache=(str(store), key))
                row["seconds_to_health"] = round(wait_healthy(group, urls, t0, bench.args.start_timeout), 1)
                wanted = [store / key / f"pod-{n}.tar" for n in range(layout.nodes)]
                deadline = time.monotonic() + 180
                while phase != "warm" and not all(p.exists() for p in wanted) and time.monotonic() < deadline:
                    time.sleep(2)
                time.sleep(3)  # the warm start's publisher logs "exists" once /health answered
                texts = [p.log.read_text(errors="replace") for p in group.procs]
                leader = texts[0]
                row["init_engine_seconds"] = (_floats(INIT_LINE, leader) or [None])[0]
                row["torch_compile_seconds"] = (_floats(COMPILE_LINE, leader) or [None])[0]
                restored = [m for t in texts for m in RESTORED_LINE.finditer(t)]
                row["restored_mib"] = [float(m.group(2)) for m in restored]
                row["restore_seconds"] = [float(m.group(3)) for m in restored]
                row["published_mib"] = [float(m.group(1)) for t in texts for m in PUBLISHED_LINE.finditer(t)]
                log(f"startup {tag}: /health after {row['seconds_to_health']} s, init engine "
                    f"{row['init_engine_seconds']} s, torch.compile {row['torch_compile_seconds']} s, restored "
                    f"{row['restored_mib']} MiB, published {row['published_mib']} MiB")
            except BenchError as exc:
                row["error"] = str(exc)
                log(f"startup {tag}: FAILED: {exc}")
            finally:
                rows[:] = [r for r in rows if (r["layout"], r["cache"]) != (name, phase)] + [row]
                save()
                group.stop()


# ------------------------------------------------------------------------------------------------ client

def run_layout(bench: Bench, layout: BenchLayout, results: dict[str, Any], save) -> None:
    as_pods = layout.name in bench.pods
    group = PodGroup(bench.work, layout.name, bench.declared(layout)) if as_pods else Group(bench.work, layout.name)
    served = bench.pods[layout.name].served_name if as_pods else None
    row: dict[str, Any] = {"layout": layout.name, "tp": layout.tp, "pp": layout.pp, "nodes": layout.nodes,
                           "replicas": layout.replicas, "gpus": layout.gpus,
                           "started_as": "declared pods" if as_pods else "host processes",
                           "run_started_at": results["started_at"]}
    log(f"{layout.name}: starting as {row['started_as']}")
    try:
        t0 = time.monotonic()
        ports = group.start_pods(layout) if as_pods else start_layout(bench, layout, group)
        row["startup_seconds"] = round(wait_healthy(group, ports, t0, bench.args.start_timeout), 1)
        log(f"{layout.name}: healthy after {row['startup_seconds']} s; warm-up ({bench.args.warmup_prompts} prompts)")
        if as_pods:
            row["pods"] = {pod.name: declared_checks(pod) for pod in group.declared.pods}
            log(f"{layout.name}: pods {row['pods']}")
        leader_logs = [p.log for p in group.procs if p.name.startswith("leader")]
        row["kv_cache_tokens_measured"] = logged_kv_tokens(leader_logs[0])
        row["kv_cache_tokens_predicted"] = predicted_kv(bench.args.config, bench.args, layout.tp, layout.pp,
                                                        layout.nodes)
        if bench.args.warmup_prompts:
            run_client(bench, ports, bench.args.warmup_prompts, seed=1, tag=f"{layout.name}-warmup", served_name=served)
        stats = summarize(run_client(bench, ports, bench.args.prompts, seed=0, tag=layout.name, served_name=served))
        row |= stats
        row["output_tokens_per_s_per_gpu"] = round(stats["output_tokens_per_s"] / layout.gpus, 1)
        if layout.tcp:
            texts = [p.log.read_text(errors="replace") for p in group.procs]
            ray_dirs = [Path("/tmp/ray")] + ([pod.work / "volumes" / "tmp" / "ray" for pod in group.declared.pods]
                                             if as_pods else [])
            texts += [f.read_text(errors="replace") for d in ray_dirs for f in d.glob("session_latest/logs/worker-*")]
            row["nccl_transport"] = "NET/Socket" if any("via NET/Socket" in t for t in texts) else "not seen in logs"
        log(f"{layout.name}: {stats['output_tokens_per_s']} output tok/s, TTFT {stats['mean_ttft_ms']} ms, "
            f"TPOT {stats['mean_tpot_ms']} ms, KV {row['kv_cache_tokens_measured']} (planner "
            f"{row['kv_cache_tokens_predicted']})")
        if layout.name == "pp2-across-nodes-tcp" and bench.args.launcher_checks and not as_pods:
            results["launcher"] = worker_loss(group)
            save()
    except BenchError as exc:
        row["error"] = str(exc)
        log(f"{layout.name}: FAILED: {exc}")
    finally:
        results["runs"] = [r for r in results["runs"] if r["layout"] != layout.name] + [row]
        save()
        group.stop()


def unmapped_uid(bench: Bench, results: dict[str, Any], save) -> None:
    """The tp1 leader pod started without USER/LOGNAME (what the program sets for its passwd-less UID): on torch
    builds that call getpass.getuser() at import (2.11 does, 2.13 does not) it must die with the KeyError."""
    layout = LAYOUTS["tp1"]
    group = PodGroup(bench.work, "unmapped-uid", bench.declared(layout))
    log("unmapped UID: tp1 leader pod without USER/LOGNAME")
    try:
        urls = group.start_pods(layout, drop_env=("USER", "LOGNAME"))
        out = wait_exit_or_ready(group.declared.pods[0], urls[0], bench.args.start_timeout, healthy)
        out["log"] = str(group.procs[0].log)
    finally:
        group.stop()
    log(f"unmapped UID: {out}")
    results["unmapped_uid_without_user"] = out
    save()


def worker_loss(group: Group) -> dict[str, Any]:
    """Kill every process of the worker node; time the leader's detection, server stop and exit."""
    import psutil

    leader = next(p for p in group.procs if p.name == "leader-n0")
    worker = next(p for p in group.procs if p.name.startswith("worker"))
    root = psutil.Process(worker.popen.pid)
    victims = [root, *root.children(recursive=True)]
    log(f"worker loss: killing {len(victims)} processes of the worker node")
    t0 = time.monotonic()
    for p in victims:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    detected = health_gone = None
    while leader.popen.poll() is None and time.monotonic() - t0 < 180:
        now = time.monotonic() - t0
        if detected is None and "Ray node lost" in leader.log.read_text(errors="replace"):
            detected = round(now, 1)
        if health_gone is None and not healthy(local(API_PORT)):
            health_gone = round(now, 1)
        time.sleep(0.2)
    exited = round(time.monotonic() - t0, 1) if leader.popen.poll() is not None else None
    if detected is None and "Ray node lost" in leader.log.read_text(errors="replace"):
        detected = exited
    lines = [line for line in leader.log.read_text(errors="replace").splitlines() if "[launcher leader]" in line]
    out = {"worker_processes_killed": len(victims), "node_lost_logged_seconds": detected,
           "health_failing_seconds": health_gone, "leader_exit_seconds": exited,
           "leader_exit_code": leader.popen.returncode, "leader_last_line": lines[-1] if lines else None}
    log(f"worker loss: {out}")
    return out


def overhead(bench: Bench, results: dict[str, Any], save) -> None:
    """Time to /health of the PP=2 group started bare (ray start x2, then vLLM) and through the launcher,
    both on the compile caches the pp2 layout left behind."""
    layout = LAYOUTS["pp2-across-nodes-tcp"]
    spec = bench.spec(layout)
    out: dict[str, Any] = {}
    ray = [sys.executable, "-m", "ray.scripts.scripts", "start", "--num-gpus=1", "--disable-usage-stats"]
    for label in ("bare", "launcher"):
        group = Group(bench.work, f"overhead-{label}")
        group.uses_ray = True
        try:
            t0 = time.monotonic()
            if label == "bare":
                env0 = bench.env(layout, [0], f"{layout.name}-n0", NODE_IPS[0])
                env1 = bench.env(layout, [1], f"{layout.name}-n1", NODE_IPS[1])
                for role, cmd, env in (
                        ("ray-head-n0", [*ray, "--head", f"--port={RAY_PORT}", f"--node-ip-address={NODE_IPS[0]}",
                                         "--include-dashboard=false"], env0),
                        ("ray-worker-n1", [*ray, f"--address={NODE_IPS[0]}:{RAY_PORT}",
                                           f"--node-ip-address={NODE_IPS[1]}", f"--temp-dir={short_temp_dir()}",
                                           f"--node-manager-port={NODE_MANAGER_PORT + SHARED_HOST_PORT_SHIFT}",
                                           f"--object-manager-port={OBJECT_MANAGER_PORT + SHARED_HOST_PORT_SHIFT}"],
                         env1)):
                    if group.start(role, cmd, env).popen.wait(120) != 0:
                        raise BenchError(f"bare {role} failed (log: {group.logs})")
                group.start("server-n0", vllm_command(spec, python=sys.executable),
                            {**env0, "RAY_ADDRESS": f"{NODE_IPS[0]}:{RAY_PORT}"})
                group.procs = [p for p in group.procs if p.name == "server-n0"]
                ports = [local(API_PORT)]
            else:
                ports = start_layout(bench, layout, group)
            out[f"{label}_startup_seconds"] = round(wait_healthy(group, ports, t0, bench.args.start_timeout), 1)
            log(f"overhead: {label} group healthy after {out[f'{label}_startup_seconds']} s")
        except BenchError as exc:
            out[f"{label}_error"] = str(exc)
            log(f"overhead: {label} FAILED: {exc}")
        finally:
            group.stop()
            ray_stop()
    if "bare_startup_seconds" in out and "launcher_startup_seconds" in out:
        out["launcher_overhead_seconds"] = round(out["launcher_startup_seconds"] - out["bare_startup_seconds"], 1)
    results.setdefault("launcher", {}).update(out)
    save()


def calibrate(bench: Bench, configs: list[Path], results: dict[str, Any], save) -> None:
    """KV cache tokens vLLM reports vs the planner, one model per GPU at a time (TP=1)."""
    layout = LAYOUTS["tp1"]
    gpus = max(1, bench.args.gpus)
    for start in range(0, len(configs), gpus):
        batch = configs[start:start + gpus]
        groups = []
        for i, config in enumerate(batch):
            model_dir = bench.work / "models" / config.stem
            group = Group(bench.work, f"calibrate-{config.stem}")
            port = API_PORT + 10 + i
            spec = replace(bench.spec(layout, port, model_dir), served_name=config.stem)
            group.start("leader-r0", leader_cmd(spec), bench.env(layout, [i] if bench.args.gpus else [],
                                                                 f"calibrate-{config.stem}"))
            groups.append((config, group, port, time.monotonic()))
        for config, group, port, t0 in groups:
            row = {"model": config.stem, **architecture_row(config),
                   "kv_cache_tokens_predicted": predicted_kv(config, bench.args, 1, 1, 1)}
            proc = group.procs[0]
            while kv_tokens(proc.log) is None and proc.popen.poll() is None and not healthy(local(port)) \
                    and time.monotonic() - t0 < bench.args.start_timeout:
                time.sleep(0.5)
            row["kv_cache_tokens_measured"] = kv_tokens(proc.log)
            if row["kv_cache_tokens_measured"] is None:
                row["error"] = f"no KV cache size in the log (exit {proc.popen.poll()}, log: {proc.log})"
            log(f"calibrate {config.stem}: measured {row['kv_cache_tokens_measured']}, "
                f"planner {row['kv_cache_tokens_predicted']}")
            results["calibration"] = [r for r in results["calibration"] if r["model"] != config.stem] + [row]
            save()
        for _, group, _, _ in groups:
            group.stop(grace=15)


# ------------------------------------------------------------------------------------------------ main

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", nargs="?", default="all", choices=("all", "build", "report", "startup", "levers"),
                        help="startup: cold vs warm start of --layouts through the launcher's compile-cache reuse, "
                             "merged into OUT/results.json; levers: the tp1 warm start's phases with each of "
                             "--levers (bench/levers.py), merged likewise")
    parser.add_argument("--config", type=Path, default=ROOT / "models" / "Llama-3.1-8B-Instruct.json",
                        help="HF config.json of the model to benchmark (random weights are built for it)")
    parser.add_argument("--model-dir", type=Path, default=None, help="serve this model directory instead")
    parser.add_argument("--layouts", default=",".join(DEFAULT_LAYOUTS))
    parser.add_argument("--calibrate", default="models/Qwen2.5-7B-Instruct.json,models/Llama-3.2-1B-Instruct.json",
                        help="more config.json files whose KV cache size is compared with the planner ('' for none)")
    parser.add_argument("--accelerator", default="nvidia-h200-141gb", help="catalog type of this host's GPUs")
    parser.add_argument("--gpus", type=int, default=None, help="GPUs on this host (default: nvidia-smi's count)")
    parser.add_argument("--prompts", type=int, default=400)
    parser.add_argument("--warmup-prompts", type=int, default=50)
    parser.add_argument("--input-len", type=int, default=512)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--max-model-len", type=int, default=8192)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--kv-cache-dtype", default="auto")
    parser.add_argument("--start-timeout", type=float, default=900)
    parser.add_argument("--no-launcher-checks", dest="launcher_checks", action="store_false")
    parser.add_argument("--pods", type=Path, default=None,
                        help="start the layouts rendered there by bench/pods.py as declared pods (needs root, bwrap, "
                             "setpriv, ip); the others as host processes")
    parser.add_argument("--no-uid-check", dest="uid_check", action="store_false",
                        help="with --pods: skip starting the tp1 leader pod without USER/LOGNAME first")
    parser.add_argument("--phases", default="first-cold,warm,cold",
                        help="startup: which starts, in order (first-cold and cold empty the store, warm uses it)")
    parser.add_argument("--levers", default="default,capture-matched,piecewise-graphs,in-process-engine,"
                                              "default-loader-disk,runai-streamer-disk,default",
                        help="levers: which, in order (a repeat measures run-to-run noise)")
    parser.add_argument("--merge", action="store_true",
                        help="keep the rows of layouts not run now from an existing OUT/results.json")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "vllm-gke-bench")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks")
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args(argv)
    layouts = [name.strip() for name in args.layouts.split(",") if name.strip()]
    unknown = [name for name in layouts if name not in LAYOUTS]
    if unknown or not layouts:
        parser.error(f"--layouts {args.layouts!r}: unknown {unknown or 'empty'}; accepted: {', '.join(LAYOUTS)}")
    args.layout_list = layouts
    args.phase_list = [p.strip() for p in args.phases.split(",") if p.strip()]
    if not args.phase_list or set(args.phase_list) - {"first-cold", "warm", "cold"}:
        parser.error(f"--phases {args.phases!r}: accepted: first-cold, warm, cold (comma-separated)")


    args.lever_list = [name.strip() for name in args.levers.split(",") if name.strip()]
    if not args.lever_list or set(args.lever_list) - set(LEVERS):
        parser.error(f"--levers {args.levers!r}: accepted: {', '.join(LEVERS)} (comma-separated)")
    if args.accelerator != "none" and args.accelerator not in ACCELERATORS:
        parser.error(f"--accelerator {args.accelerator!r}: accepted: none, {', '.join(ACCELERATORS)}")
    args.calibrate_list = [ROOT / p.strip() if not Path(p.strip()).is_absolute() else Path(p.strip())
                           for p in args.calibrate.split(",") if p.strip()]
    for path in [args.config, *args.calibrate_list]:
        if not path.is_file():
            parser.error(f"config file {path} does not exist")
    if args.gpus is None:
        args.gpus = len(gpu_memory_used())
    need = max(LAYOUTS[name].gpus for name in layouts)
    if args.action == "all" and args.gpus and args.gpus < need:
        parser.error(f"--layouts need {need} GPUs; this host has {args.gpus}")
    if args.prompts < 1 or args.warmup_prompts < 0 or not 0 < args.gpu_memory_utilization <= 1:
        parser.error("--prompts must be >= 1, --warmup-prompts >= 0, --gpu-memory-utilization in (0, 1]")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    results_path = args.out / "results.json"
    if args.action == "report":
        if not results_path.exists():
            print(f"bench: no {results_path}; run the benchmark first", file=sys.stderr)
            return 2
        write_report(json.loads(results_path.read_text()), args.out, args.doc, DEFAULT_LAYOUTS)
        return 0
    args.work.mkdir(parents=True, exist_ok=True)
    device = None if args.gpus else "cpu"
    models = args.work / "models"
    log(f"building random-weight models under {models}")
    # Declared pods mount the weights claim at /models and serve /models/model: the disk directory holds model/.
    target = args.work / "disk" / "model" if args.pods else models / args.config.stem
    model_dir = args.model_dir or build_model(args.config, target, device=device)
    for config in args.calibrate_list:
        build_model(config, models / config.stem, device=device)
    if args.action == "build":
        return 0

    if args.action in ("startup", "levers"):
        return run_startup(args, Bench(args, model_dir, args.config.stem, args.work), results_path)
    pods = {path.stem: Rendered.load(path) for path in sorted(args.pods.glob("*.json"))} if args.pods else {}
    pods = {name: rendered for name, rendered in pods.items() if name in args.layout_list}
    previous = json.loads(results_path.read_text()) if args.merge and results_path.exists() else {}
    with contextlib.ExitStack() as stack:
        net = stack.enter_context(PodNetwork()) if pods else None
        return run_all(args, Bench(args, model_dir, args.config.stem, args.work, pods, net), previous, results_path)


def run_startup(args: argparse.Namespace, bench: Bench, results_path: Path) -> int:
    """`startup`: the rows go into the existing results (other sections untouched)."""
    results = json.loads(results_path.read_text()) if results_path.exists() else {"runs": []}

    def save() -> None:
        results_path.parent.mkdir(parents=True, exist_ok=True)
        results_path.write_text(json.dumps(results, indent=2) + "\n")

    if args.action == "levers":


        run_levers(bench, args.lever_list, results, save)
        write_report(results, args.out, args.doc, DEFAULT_LAYOUTS)
        return 0 if all("error" not in r for r in results["startup_levers"]["runs"][-1]["rows"]) else 1
    results["startup_started_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    results["startup_host"] = host_info()
    startup(bench, args.layout_list, results, save)
    write_report(results, args.out, args.doc, DEFAULT_LAYOUTS)
    log(f"wrote {results_path}, {args.doc}")
    return 0 if all("error" not in r for r in results["startup"]) else 1


def run_all(args: argparse.Namespace, bench: Bench, previous: dict[str, Any], results_path: Path) -> int:
    results: dict[str, Any] = {
        "host": host_info(), "model": {"name": args.config.stem, **architecture_row(args.config),
                                       "weights": "random (bench/models.py)"},
        "settings": {**{k: getattr(args, k) for k in ("accelerator", "prompts", "warmup_prompts", "input_len",
                                                       "output_len", "max_model_len", "gpu_memory_utilization",
                                                       "dtype", "kv_cache_dtype")},
                     "layouts": args.layout_list},
        "planner_layout": planner_layout(args.config, args),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "runs": [], "calibration": []}
    results["vllm"] = results["host"].get("vllm")
    if previous:  # --merge: what earlier runs measured for the layouts not run now stays, marked with its run
        old = [{"started_as": "host processes", "run_started_at": previous.get("started_at"), **row}
               for row in previous.get("runs", [])]
        results["runs"] = [row for row in old if row["layout"] not in args.layout_list]
        # what this run re-measures stays on record, for the comparison in the doc
        results["replaced_runs"] = [*previous.get("replaced_runs", []),
                                    *(row for row in old if row["layout"] in args.layout_list)]
        for key in ("calibration", "launcher", "unmapped_uid_without_user"):
            if key in previous:
                results[key] = previous[key]
        results["settings"]["layouts"] = [*DEFAULT_LAYOUTS]
    declared = {row["layout"] for row in results["runs"] if row.get("started_as") == "declared pods"} | set(bench.pods)
    if declared:
        results["declared_pods"] = {"layouts": sorted(declared), "rendered_by": "bench/pods.py",
                                    "runner": "tools/pod_runner.py via bench/declared.py"}
    args.out.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        results["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        order = [*DEFAULT_LAYOUTS, *LAYOUTS]
        results["runs"].sort(key=lambda row: order.index(row["layout"]) if row["layout"] in order else len(order))
        results_path.write_text(json.dumps(results, indent=2) + "\n")

    save()
    if args.calibrate_list:
        calibrate(bench, args.calibrate_list, results, save)
    if "tp1" in bench.pods and args.uid_check:
        unmapped_uid(bench, results, save)
    # The bare-vs-launcher start comparison reuses the pp2 compile caches; it runs once the across-nodes
    # layouts are measured, so a run cut short still has them.
    across = [n for n in args.layout_list if LAYOUTS[n].nodes > 1]
    for name in args.layout_list:
        run_layout(bench, LAYOUTS[name], results, save)
        if args.launcher_checks and "pp2-across-nodes-tcp" in across and name == across[-1] \
                and "pp2-across-nodes-tcp" not in bench.pods:
            overhead(bench, results, save)
    write_report(results, args.out, args.doc)
    log(f"wrote {results_path}, {args.doc}")
    return 0 if all("error" not in r for r in results["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
