"""docs/benchmarks.md's "Engine start levers" section, from results.json's startup_levers (bench/levers.py)."""

from __future__ import annotations

from statistics import mean
from typing import Any

PHASE_COLUMNS = (("api_server_imports", "API imports"), ("config_and_engine_spawn", "config + engine core up"),
                 ("engine_core_to_load", "to load"), ("weights", "weights"), ("torch_compile", "compile"),
                 ("profile_and_kv_cache", "profile + KV"), ("cuda_graphs", "CUDA graphs"),
                 ("engine_ready", "after graphs"), ("api_routes", "API up"))
OUTCOME = {
    "default": "reference",
    "default-debug": "diagnosis only (DEBUG log placed the engine core's second import)",
    "triton-cache-in-home": "the old behaviour: the launcher now carries Triton's cache (default)",
    "fork-engine": "default for one-node groups (launcher sets VLLM_WORKER_MULTIPROC_METHOD=fork)",
    "in-process-engine": "not adopted: no start-up saving",
    "capture-matched": "not a default (throughput); available as vllm.extraArgs "
                       "[--max-cudagraph-capture-size, N]",
    "default-loader-disk": "reference for the loaders, weights evicted from the page cache",
    "runai-streamer-disk": "not adopted: one start each from this host's local disk, its weights phase within the "
                           "run-to-run noise of the default loader's (host 1 table); its concurrent reads pay on "
                           "network storage, which this host cannot show",
}
BEFORE_SECONDS = 76.4
"""The tp1 warm start before this work: docs/benchmarks/results.json startup row (2026-11-22, H200)."""


def _f(value: Any, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def summary(runs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per lever: warm starts, mean seconds to /health and mean output tokens/s over every host."""
    out: dict[str, dict[str, Any]] = {}
    for run in runs:
        for row in run["rows"]:
            if row["phase"] != "warm" or "error" in row:
                continue
            entry = out.setdefault(row["lever"], {"seconds": [], "tokens": []})
            entry["seconds"].append(row["seconds_to_health"])
            if row.get("output_tokens_per_s"):
                entry["tokens"].append(row["output_tokens_per_s"])
    return out


def levers_section(section: dict[str, Any]) -> list[str]:
    runs = section.get("runs") or []
    lines = ["", "## Engine start levers", ""]
    if not runs:
        return [*lines, "Not measured yet."]
    host = runs[0]["host"]
    lines += [
        f"`bench/run.py levers` on {(host.get('gpus') or ['?'])[0]} (vLLM {host.get('vllm')}, torch "
        f"{host.get('torch')}), two hosts of that kind one after the other: the `{section['layout']}` layout of "
        f"{section['model']}, --max-model-len {section['max_model_len']}, started through the launcher and the "
        "rendered leader command with each lever's flags or environment added, weights in the page cache unless the "
        "lever says otherwise (evicted with drop_caches and checked with mincore: 0% resident). Every start gets "
        "a fresh cache root, HOME and Inductor directory as a new pod does; a lever that changes what vLLM compiles "
        "publishes its own compile cache in a cold start first. Output lines are stamped on arrival, and the "
        "phases end at vLLM's own log lines (bench/levers.py PHASES). Throughput: the same load as above "
        f"({section['prompts']} prompts, rate inf) right after the start.", ""]
    for run in runs:
        lines += [f"### {run['machine']}", "",
                  f"Launcher: {run['launcher']}. Importing `vllm.entrypoints.openai.api_server` in a fresh "
                  f"interpreter: {', '.join(f'{s:.1f}' for s in run.get('import_seconds', []))} s. The plan's "
                  f"max concurrent sequences for this layout (capture-matched): {run.get('matched_concurrency')}.",
                  ""]
        header = ["lever", "start", "s to /health", *[label for _, label in PHASE_COLUMNS], "weights read s",
                  "graphs GiB", "output tok/s", "mean TPOT ms"]
        table = []
        for row in run["rows"]:
            p = row.get("phases") or {}
            table.append([f"`{row['lever']}`", row["phase"], _f(row.get("seconds_to_health")),
                          *[_f(p.get(key)) for key, _ in PHASE_COLUMNS], _f(p.get("weights_read_reported"), 2),
                          _f(p.get("cuda_graphs_gib"), 2), _f(row.get("output_tokens_per_s")),
                          _f(row.get("mean_tpot_ms"), 2) + (f" ({row['error']})" if "error" in row else "")])
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
                  *["| " + " | ".join(r) + " |" for r in table], ""]
    stats = summary(runs)
    ref = stats.get("default", {})
    ref_tokens = mean(ref["tokens"]) if ref.get("tokens") else None
    lines += ["### What each lever did (warm starts, both hosts)", "",
              "| lever | warm starts | s to /health (each) | mean s | output tok/s (each) | mean tok/s vs default "
              "| outcome |", "|---|---|---|---|---|---|---|"]
    for lever, entry in stats.items():
        tokens = entry["tokens"]
        versus = (f"{mean(tokens):,.0f} ({(mean(tokens) / ref_tokens - 1):+.1%})" if tokens and ref_tokens else "-")
        lines.append(f"| `{lever}` | {len(entry['seconds'])} | {', '.join(f'{s:.1f}' for s in entry['seconds'])} | "
                     f"{mean(entry['seconds']):.1f} | {', '.join(f'{t:,.0f}' for t in tokens) or '-'} | {versus} | "
                     f"{OUTCOME.get(lever, '-')} |")
    final = stats.get("fork-engine")
    if final and ref_tokens:
        spread = (min(ref["tokens"]) / ref_tokens - 1, max(ref["tokens"]) / ref_tokens - 1)
        now = mean(final["seconds"])
        beaten = max(final["seconds"]) < min(ref["seconds"])
        lines += ["",
                  f"- With today's defaults (Triton's cache carried and the engine core forked: the `fork-engine` "
                  f"rows) the tp1 warm start reached /health in {', '.join(f'{s:.1f}' for s in final['seconds'])} "
                  f"s, mean {now:.1f} s: {1 - now / BEFORE_SECONDS:.0%} shorter than the {BEFORE_SECONDS} s measured "
                  "before (section above)" + (f"; every `default` start on the same hosts took longer (at least "
                                             f"{min(ref['seconds']):.1f} s)." if beaten else "."),
                  f"- Run-to-run spread of throughput with unchanged keys: {spread[0]:+.1%} to {spread[1]:+.1%} around "
                  f"the default's mean ({len(ref['tokens'])} runs), wider than the 2% a lever may cost. The two "
                  "defaults change how the engine starts, not what it runs (the same kernels, found in a carried "
                  "cache; the same engine loop in a forked rather than spawned process), and their throughput "
                  "falls inside that spread. capture-matched changes the serving path: batches above the captured "
                  "size run without CUDA graphs, and its TPOT was the highest of all rows; it stays a key "
                  "(vllm.extraArgs).",
                  "- Where the rest goes: the API server's imports (~15-20 s; importing the module alone takes as "
                  "long) and, before the fork default, the engine core importing everything again (DEBUG log: the "
                  "spawned process runs vLLM's platform detection 4 s after the API server hands over, and says "
                  "HELLO 15 s later). Weights from the page cache take ~2 s, the compile cache ~4-5 s, profiling "
                  "~1-2 s, CUDA graph capture ~4 s (51 sizes; 2 s for 17 with capture-matched). GPU process "
                  "snapshots (cuda-checkpoint + CRIU) would skip the imports and the engine set-up altogether; "
                  "not tried here.",
                  "- Not measured this round: multi-node groups with the fork default (they keep spawn), "
                  "piecewise-only CUDA graphs, --enforce-eager, fastsafetensors (the GPU time ran out)."]
    return lines
