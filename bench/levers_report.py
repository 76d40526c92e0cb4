"""docs/benchmarks.md's "Engine start levers" section, from results.json's startup_levers (bench/levers.py).

Runs were made with different launchers (each run's `defaults` says what its launcher did to a one-node start), so
the summary groups rows by what actually ran (configuration()), not by lever name: `default` on a host whose
launcher spawned the engine core is the same start as `spawn-engine` on a host whose launcher forks it.
"""

from __future__ import annotations

from statistics import mean
from typing import Any

from bench.tables import markdown_table as _table

PHASE_COLUMNS = (("api_server_imports", "API imports"), ("config_and_engine_spawn", "config + engine core up"),
                 ("engine_core_to_load", "to load"), ("weights", "weights"), ("torch_compile", "compile"),
                 ("profile_and_kv_cache", "profile + KV"), ("cuda_graphs", "CUDA graphs"),
                 ("engine_ready", "after graphs"), ("api_routes", "API up"))
BEFORE_SECONDS = 76.4
"""The tp1 warm start before this work: docs/benchmarks/results.json startup row (2026-11-22, H200)."""
CRITERION = 0.02
"""A lever becomes a default only if it costs at most this share of output tokens/s (issue 25)."""
TODAY = "engine core fork, Triton cache carried"
SPAWNED = "engine core spawn, Triton cache carried"
"""The launcher before the fork default."""
BEFORE_BOTH = "engine core spawn, Triton cache home"
"""The launcher before both start-up defaults."""


def configuration(run: dict[str, Any], row: dict[str, Any]) -> str:
    """What a row's start ran: its launcher's defaults with the lever's environment and flags applied."""
    env = row.get("env") or {}
    defaults = run.get("defaults") or {}
    engine = env.get("VLLM_WORKER_MULTIPROC_METHOD") or defaults.get("engine_core", "spawn")
    if env.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0":
        engine = "in-process"
    triton = "home" if "TRITON_CACHE_DIR" in env else defaults.get("triton_cache", "home")
    parts = [f"engine core {engine}", f"Triton cache {triton}"]
    if row.get("args"):
        parts.append(" ".join(row["args"]))
    if row.get("page_cache"):
        parts.append("weights evicted first")
    if env.get("VLLM_LOGGING_LEVEL"):
        parts.append(f"{env['VLLM_LOGGING_LEVEL']} log")
    return ", ".join(parts)


def engine_seconds(row: dict[str, Any]) -> float | None:
    """Seconds to /health less the weights read that vLLM reports (what ENGINE_START_SECONDS holds); None where the
    loader does not report it."""
    read = (row.get("phases") or {}).get("weights_read_reported")
    return None if read is None else round(row["seconds_to_health"] - read, 1)


def rows_of(runs: list[dict[str, Any]], config: str, phase: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(run, row) of every start of `config` in `phase` that reached /health."""
    return [(run, row) for run in runs for row in run["rows"]
            if row["phase"] == phase and "error" not in row and configuration(run, row) == config]


def outcome(config: str) -> str:
    if config == TODAY:
        return "**today's default** for one-node groups (the launcher forks the engine core and carries Triton's cache)"
    if "log" in config.split(", ")[-1]:
        return "diagnosis only (the DEBUG log placed the engine core's second import)"
    if "runai_streamer" in config:
        return ("not adopted: one start from this host's local disk, weights phase within the default loader's "
                "run-to-run noise; its concurrent reads pay on network storage, which this host cannot show")
    if "fastsafetensors" in config:
        return ("not adopted: without GPUDirect Storage (no /dev/nvidia-fs on the host; its log shows the nogds "
                "copier) it read around the page cache: the next start on that host read the weights from disk "
                "again (its weights read s), which would defeat autoscaling.headroom's cached weights")
    if "weights evicted" in config:
        return "reference for the loaders: the default loader with the weights evicted from the page cache"
    if "--max-cudagraph-capture-size" in config:
        return ("not a default (throughput: batches above the captured size run without CUDA graphs); available "
                "as vllm.extraArgs [--max-cudagraph-capture-size, N]")
    if "--enforce-eager" in config:
        return ("not a default: no CUDA graphs and no torch.compile, one run below today's mean by more than "
                "the 2% criterion; this load (rate inf, large batches) is where graphs matter least, decode at small "
                "batches loses the most. A key where start time comes first: vllm.extraArgs [--enforce-eager]")
    if "PIECEWISE" in config:
        return ("not adopted: ~1.5 s less graph capture, inside the start's run-to-run noise; full decode graphs "
                "serve small batches, which this load (rate inf) does not exercise")
    if "in-process" in config:
        return "not adopted: no start-up saving"
    if config == SPAWNED:
        return "the launcher before the fork default (vLLM's CLI spawns); `spawn-engine` keeps it measurable"
    if config == BEFORE_BOTH:
        return "the launcher before both defaults"
    return "-"


def _f(value: Any, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _list(values: list[float | None], digits: int = 1) -> str:
    return ", ".join(_f(v, digits) for v in values) or "-"


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return mean(known) if known else None


def summary(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per configuration, in first-seen order: the levers and hosts it was measured as, warm seconds to /health,
    the same less the weights read, and output tokens/s."""
    out: dict[str, dict[str, Any]] = {}
    for run in runs:
        for row in run["rows"]:
            if row["phase"] != "warm" or "error" in row:
                continue
            entry = out.setdefault(configuration(run, row),
                                   {"as": [], "seconds": [], "engine": [], "tokens": []})
            label = f"`{row['lever']}` ({run['machine'].split(' (')[0]})"
            if label not in entry["as"]:
                entry["as"].append(label)
            entry["seconds"].append(row["seconds_to_health"])
            entry["engine"].append(engine_seconds(row))
            if row.get("output_tokens_per_s"):
                entry["tokens"].append(row["output_tokens_per_s"])
    return out


def paired(runs: list[dict[str, Any]]) -> list[tuple[str, list[float], list[float], list[float], list[float]]]:
    """Hosts whose launcher forks and that also ran `spawn-engine`, interleaved with `default`: per host the engine
    seconds and tokens/s of fork and of spawn."""
    out = []
    for run in runs:
        fork = [r for _, r in rows_of([run], TODAY, "warm")]
        spawn = [r for _, r in rows_of([run], SPAWNED, "warm")
                 if r["lever"] == "spawn-engine"]
        if fork and spawn:
            out.append((run["machine"].split(" (")[0], [engine_seconds(r) for r in fork],
                        [engine_seconds(r) for r in spawn],
                        [r["output_tokens_per_s"] for r in fork if r.get("output_tokens_per_s")],
                        [r["output_tokens_per_s"] for r in spawn if r.get("output_tokens_per_s")]))
    return out


def levers_section(section: dict[str, Any]) -> list[str]:
    runs = section.get("runs") or []
    lines = ["", "## Engine start levers", ""]
    if not runs:
        return [*lines, "Not measured yet."]
    host = runs[0]["host"]
    lines += [
        f"`bench/run.py levers` on {(host.get('gpus') or ['?'])[0]} (vLLM {host.get('vllm')}, torch "
        f"{host.get('torch')}), {len(runs)} hosts of that kind one after the other: the `{section['layout']}` layout "
        f"of {section['model']}, --max-model-len {section['max_model_len']}, started through the launcher and the "
        "rendered leader command with each lever's flags or environment added, weights in the page cache unless the "
        "lever says otherwise (evicted with drop_caches and checked with mincore: 0% resident). Every start gets "
        "a fresh cache root, HOME and Inductor directory as a new pod does; a lever that changes what vLLM compiles "
        "publishes its own compile cache in a cold start first. Output lines are stamped on arrival, and the "
        "phases end at vLLM's own log lines (bench/levers.py PHASES). Throughput: the same load as above "
        f"({section['prompts']} prompts, rate inf) right after the start. Each run records what its launcher did "
        "to a one-node start (`defaults`, probed by running it); the summary groups starts by what ran.", ""]
    for run in runs:
        defaults = run.get("defaults") or {}
        lines += [f"### {run['machine']}", "",
                  f"Launcher: {run['launcher']} (engine core {defaults.get('engine_core', '?')}, Triton cache "
                  f"{defaults.get('triton_cache', '?')}). Importing `vllm.entrypoints.openai.api_server` in a fresh "
                  f"interpreter: {_list(run.get('import_seconds', []))} s. The plan's max concurrent sequences for "
                  f"this layout (capture-matched): {run.get('matched_concurrency')}.", ""]
        header = ["lever", "start", "s to /health", *[label for _, label in PHASE_COLUMNS], "weights read s",
                  "graphs GiB", "output tok/s", "mean TPOT ms"]
        table = []
        for row in run["rows"]:
            p = row.get("phases") or {}
            table.append([f"`{row['lever']}`", row["phase"], _f(row.get("seconds_to_health")),
                          *[_f(p.get(key)) for key, _ in PHASE_COLUMNS], _f(p.get("weights_read_reported"), 2),
                          _f(p.get("cuda_graphs_gib"), 2), _f(row.get("output_tokens_per_s")),
                          _f(row.get("mean_tpot_ms"), 2) + (f" ({row['error']})" if "error" in row else "")])
        lines += [*_table(header, table), ""]
    stats = summary(runs)
    ref = stats.get(TODAY, {})
    ref_tokens = mean(ref["tokens"]) if ref.get("tokens") else None
    lines += ["### What ran, all hosts (warm starts)", "",
              "Engine s = seconds to /health less the weights read vLLM reports. Tokens/s against today's default "
              "configuration's mean.", ""]
    table = []
    for config, entry in stats.items():
        tokens = entry["tokens"]
        versus = (f"{mean(tokens):,.0f} ({(mean(tokens) / ref_tokens - 1):+.1%})" if tokens and ref_tokens else "-")
        table.append([config, ", ".join(entry["as"]), str(len(entry["seconds"])), _list(entry["seconds"]),
                      _list(entry["engine"]), _f(_mean(entry["engine"])), _list(tokens, 0), versus, outcome(config)])
    lines += _table(["configuration", "measured as", "warm starts", "s to /health (each)", "engine s (each)",
                     "mean engine s", "output tok/s (each)", "mean tok/s vs today's default", "outcome"], table)
    pairs = paired(runs)
    if pairs:
        table, all_fork, all_spawn = [], [], []
        for name, fork_s, spawn_s, fork_t, spawn_t in pairs:
            all_fork += fork_t
            all_spawn += spawn_t
            table.append([name, f"{_list(fork_s)} (mean {_f(_mean(fork_s))})",
                          f"{_list(spawn_s)} (mean {_f(_mean(spawn_s))})", _list(fork_t, 0), _list(spawn_t, 0),
                          f"{mean(fork_t) / mean(spawn_t) - 1:+.1%}"])
        table.append(["all", "", "", f"mean {mean(all_fork):,.0f}", f"mean {mean(all_spawn):,.0f}",
                      f"{mean(all_fork) / mean(all_spawn) - 1:+.1%}"])
        lines += ["", "### Fork against spawn, interleaved on the same hosts", "",
                  *_table(["host", "fork engine s", "spawn engine s", "fork tok/s", "spawn tok/s",
                           "fork tok/s vs spawn"], table)]
    lines += conclusions(runs, stats, pairs)
    return lines


def conclusions(runs: list[dict[str, Any]], stats: dict[str, dict[str, Any]], pairs: list) -> list[str]:
    today = stats.get(TODAY)
    if not today:
        return []
    lines = [""]
    now = mean(today["seconds"])
    lines.append(f"- With today's defaults the tp1 warm start reached /health in {_list(today['seconds'])} s "
                 f"({len(today['seconds'])} starts on {len({a.split('(')[-1] for a in today['as']})} hosts), mean "
                 f"{now:.1f} s: {1 - now / BEFORE_SECONDS:.0%} shorter than the {BEFORE_SECONDS} s measured before "
                 "(section above).")
    cold = rows_of(runs, TODAY, "cold")
    spawned = [(run, row) for run, row in sorted(
        rows_of(runs, SPAWNED, "cold") + rows_of(runs, BEFORE_BOTH, "cold"), key=lambda p: runs.index(p[0]))]
    if cold:
        engine = [engine_seconds(r) for _, r in cold]
        before = "; ".join(f"{_f(row['seconds_to_health'])} s ({run['machine'].split(' (')[0]}, `{row['lever']}`)"
                           for run, row in spawned)
        lines.append(f"- Cold (empty compile cache, as the first pod of a layout) with today's defaults: "
                     f"{_list([r['seconds_to_health'] for _, r in cold])} s to /health, engine {_list(engine)} s, "
                     f"mean {_f(_mean(engine))} s (the plan's cold figure and the startup probe's basis). With the "
                     f"engine core spawned: {before}.")
    if pairs:
        fork_t = [t for p in pairs for t in p[3]]
        spawn_t = [t for p in pairs for t in p[4]]
        change = mean(fork_t) / mean(spawn_t) - 1
        verdict = "within" if change >= -CRITERION else "outside"
        signs = {mean(p[3]) >= mean(p[4]) for p in pairs}
        lines.append(f"- Fork against spawn on the same hosts, interleaved: {mean(fork_t):,.0f} against "
                     f"{mean(spawn_t):,.0f} output tok/s ({change:+.1%}, {len(fork_t)} and {len(spawn_t)} runs), "
                     f"{verdict} the {CRITERION:.0%} a default may cost"
                     f"{'; the sign differs by host' if len(signs) > 1 else ''}, and single runs of "
                     f"one configuration spread {min(fork_t + spawn_t) / mean(fork_t + spawn_t) - 1:+.1%} to "
                     f"{max(fork_t + spawn_t) / mean(fork_t + spawn_t) - 1:+.1%} around their joint mean. The fork "
                     "changes how the engine process starts, not the kernels or the engine loop it then runs.")
    lines += [
        "- Where the rest goes: the API server's imports (~14-20 s; importing the module alone takes as long) are "
        "now the largest phase. Before the fork default the engine core imported everything again (DEBUG log: the "
        "spawned process runs vLLM's platform detection 4 s after the API server hands over, and says HELLO 15 s "
        "later). Weights from the page cache take ~2 s, the compile cache ~4-5 s, profiling ~1-2 s, CUDA graph "
        "capture ~4-5 s (51 sizes). GPU process snapshots (cuda-checkpoint + CRIU) would skip the imports and the "
        "engine set-up altogether; not tried here.",
        "- Not measured: multi-node groups with the fork default (they keep spawn) or with Triton's cache carried "
        "(the plan keeps their earlier figures); the loaders from network storage (a persistent disk), where "
        "concurrent readers matter."]
    return lines
