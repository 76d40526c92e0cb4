"""bench/levers.py: the phase breakdown of a stamped start log, the lever flags, page-cache eviction; the GPU runs
themselves are in docs/benchmarks/results.json (startup_levers)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.levers import LEVERS, PHASES, breakdown, evict, lever_args, resident_fraction

ROOT = Path(__file__).resolve().parents[2]
RESULTS = json.loads((ROOT / "docs" / "benchmarks" / "results.json").read_text())


def test_the_committed_start_log_cuts_into_the_phases_its_row_records():
    rows = [r for run in RESULTS["startup_levers"]["runs"] for r in run["rows"]
            if r["lever"] == "fork-engine" and r["phase"] == "warm"]
    log = (ROOT / "docs" / "benchmarks" / rows[-1]["log"]).read_text()
    phases = breakdown(log)
    assert phases == rows[-1]["phases"]
    ordered = [name for name, _ in PHASES if name in phases]
    assert sum(phases[name] for name in ordered) <= rows[-1]["seconds_to_health"]
    assert phases["config_and_engine_spawn"] < 5, "forked, the engine core does not import everything again"


def test_a_spawned_engine_core_shows_its_second_import_in_the_breakdown():
    log = (ROOT / "docs" / "benchmarks" / "startup-logs" / "levers" / "lever-default-debug-warm.log").read_text()
    assert breakdown(log)["config_and_engine_spawn"] > 15
    assert "Automatically detected platform cuda" in log, "the spawned process detects the platform again"


def test_phases_missing_from_a_log_fold_into_the_next_one():
    log = "[   1.000] x non-default args: {}\n[   9.500] x Initializing a V1 LLM engine\n" \
          "[  20.000] x init engine (profile, create kv cache, warmup model) took 3.1 s\n"
    assert breakdown(log) == {"api_server_imports": 1.0, "config_and_engine_spawn": 8.5, "engine_ready": 10.5}


def test_capture_matched_rounds_the_plans_concurrency_up_to_vllms_step_of_8():
    assert lever_args(LEVERS["capture-matched"], 109) == ("--max-cudagraph-capture-size", "112")
    assert lever_args(LEVERS["capture-matched"], 3) == ("--max-cudagraph-capture-size", "8")
    assert lever_args(LEVERS["default"], 109) == ()


def test_evicted_files_are_no_longer_in_the_page_cache(tmp_path):
    data = tmp_path / "w.bin"
    data.write_bytes(os.urandom(8 << 20))
    data.read_bytes()
    if resident_fraction(data) < 1:
        pytest.skip("this filesystem does not keep the file cached (tmpfs is always resident, others may not be)")
    out = evict(tmp_path)
    assert out["resident_before"] == 1.0 and out["bytes"] == 8 << 20
    if resident_fraction(data) == 1.0 and out["method"] != "drop_caches":
        pytest.skip("posix_fadvise cannot drop pages on this filesystem (e.g. tmpfs)")
    assert out["resident_after"] < 0.5 and resident_fraction(data) < 0.5


def test_an_unknown_lever_is_refused_in_one_line():
    done = subprocess.run([sys.executable, "bench/run.py", "levers", "--levers", "default,warp-drive"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2 and "--levers 'default,warp-drive': accepted: default" in done.stderr


def test_the_launcher_defaults_probe_reports_what_the_latest_measured_runs_assumed(tmp_path):
    """bench/levers.py probes the launcher for what it does to a one-node start; the committed launcher does what
    the latest runs in results.json recorded, so the plan's figures describe today's launcher (re-measure if not)."""
    from bench.levers import launcher_defaults

    env = {**os.environ, "VLLM_WORKER_MULTIPROC_METHOD": "spawn"}  # an operator's setting is not the launcher's
    probed = launcher_defaults(env, tmp_path)
    assert probed == {"engine_core": "fork", "triton_cache": "carried"}
    assert RESULTS["startup_levers"]["runs"][-1]["defaults"] == probed


def test_rows_are_grouped_by_what_ran_not_by_lever_name():
    from bench.levers_report import TODAY, configuration

    spawning = {"defaults": {"engine_core": "spawn", "triton_cache": "carried"}}
    forking = {"defaults": {"engine_core": "fork", "triton_cache": "carried"}}
    fork_env = {"VLLM_WORKER_MULTIPROC_METHOD": "fork"}
    assert configuration(spawning, {"lever": "fork-engine", "env": fork_env}) == TODAY
    assert configuration(forking, {"lever": "default", "env": {}}) == TODAY
    assert configuration(forking, {"lever": "spawn-engine", "env": {"VLLM_WORKER_MULTIPROC_METHOD": "spawn"}}) == \
        configuration(spawning, {"lever": "default", "env": {}})
    assert configuration(forking, {"env": {"TRITON_CACHE_DIR": "{home}/.triton/cache"}}).endswith("Triton cache home")
    assert configuration(forking, {"env": {}, "args": ["--enforce-eager"], "page_cache": {"method": "x"}}) == \
        f"{TODAY}, --enforce-eager, weights evicted first"


def test_fork_is_compared_with_spawn_only_on_hosts_that_ran_both():
    from bench.levers_report import paired

    def row(lever, env, seconds, tokens):
        return {"lever": lever, "phase": "warm", "env": env, "seconds_to_health": seconds,
                "phases": {"weights_read_reported": 2.0}, "output_tokens_per_s": tokens}

    spawn = {"VLLM_WORKER_MULTIPROC_METHOD": "spawn"}
    runs = [{"machine": "old (x)", "defaults": {"engine_core": "spawn", "triton_cache": "carried"},
             "rows": [row("default", {}, 60, 100),
                      row("fork-engine", {"VLLM_WORKER_MULTIPROC_METHOD": "fork"}, 40, 1)]},
            {"machine": "new (y)", "defaults": {"engine_core": "fork", "triton_cache": "carried"},
             "rows": [row("default", {}, 40, 99), row("spawn-engine", spawn, 55, 101), row("default", {}, 42, 97)]}]
    assert paired(runs) == [("new", [38.0, 40.0], [53.0], [99, 97], [101])]


def test_every_kept_start_log_belongs_to_one_row_and_exists():
    logs = [row["log"] for run in RESULTS["startup_levers"]["runs"] for row in run["rows"] if "log" in row]
    assert len(logs) == len(set(logs)), "a repeated lever must not overwrite another row's log"
    for log in logs:
        assert (ROOT / "docs" / "benchmarks" / log).is_file(), log
