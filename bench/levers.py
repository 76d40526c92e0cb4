"""Engine start-up levers on a GPU: where a warm start of the tp1 layout spends its time, and what each lever
vLLM offers saves and costs in serving throughput.

    python3 bench/run.py levers [--levers default,capture-matched,...] [--out DIR]

Every start goes through the project's launcher and the rendered leader command (planner.commands), with the
lever's flags appended as `vllm.extraArgs` would append them. A lever's compile group gets one cold start first
(it publishes the compile cache the way a pod does), then the measured warm start; the log lines are stamped with
seconds since the launcher started, and breakdown() cuts them into phases at vLLM 0.25.1's own log lines.
Levers marked cold_page_cache start after the model's files were evicted from the page cache, so the weights come
from the disk as on a node that has not read them. Each run records what its launcher does to a one-node start
(launcher_defaults(), probed by running it), so bench/levers_report.py compares rows by what ran; start logs are
kept per row (runN-MM-lever-NAME-PHASE.log).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.harness import (
    API_PORT,
    LAUNCHER,
    LAYOUTS,
    SAFE_ENV,
    Bench,
    BenchError,
    Group,
    Proc,
    host_info,
    leader_cmd,
    local,
    log,
    predicted_kv,
    run_client,
    summarize,
    wait_healthy,
)

PHASES = (
    # (name, vLLM 0.25.1 log line that ends it); a phase runs from the previous mark to its own
    ("api_server_imports", re.compile(r"non-default args")),  # vllm/entrypoints/serve/utils/api_utils.py
    ("config_and_engine_spawn", re.compile(r"Initializing a V1 LLM engine")),  # vllm/v1/engine/core.py
    ("engine_core_to_load", re.compile(r"Starting to load model")),  # vllm/v1/worker/gpu_model_runner.py
    ("weights", re.compile(r"Model loading took")),  # vllm/v1/worker/gpu/model_runner.py
    ("torch_compile", re.compile(r"torch\.compile (?:takes|took)")),  # vllm/compilation/monitor.py
    ("profile_and_kv_cache", re.compile(r"Available KV cache memory|GPU KV cache size")),  # vllm/v1/worker/gpu_worker
    ("cuda_graphs", re.compile(r"Graph capturing finished")),  # vllm/v1/worker/gpu/model_runner.py
    ("engine_ready", re.compile(r"init engine \(profile, create kv cache, warmup model\) took")),
    ("api_routes", re.compile(r"Starting vLLM server on|Available routes are")),  # vllm/entrypoints/openai/api_server
)
STAMP = re.compile(r"^\[\s*([\d.]+)\] ")
WEIGHTS_LINE = re.compile(r"Loading weights took ([\d.]+) seconds")
GRAPH_LINE = re.compile(r"Graph capturing finished in ([\d.]+) secs, took ([\d.]+) GiB")


@dataclass(frozen=True)
class Lever:
    name: str
    note: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    compile_group: str = "default"
    """Levers that change what vLLM compiles (its cache hash) get their own compile cache, published cold first."""
    cold_page_cache: bool = False
    throughput: bool = True
    """Serve the bench's load after the start (levers that only change how weights are read do not touch it)."""


MATCHED = "{matched}"
LEVERS = {lever.name: lever for lever in (
    Lever("default", "the rendered leader command with default keys"),
    Lever("default-debug", "default keys, vLLM's DEBUG log (to place the time between the API server's config "
          "and the engine core)", env={"VLLM_LOGGING_LEVEL": "DEBUG"}, throughput=False),
    Lever("triton-cache-in-home", "Triton's kernel cache left under HOME (TRITON_CACHE_DIR={home}/.triton/cache), "
          "as before the launcher carried it: a fresh pod compiles vLLM's Triton kernels again",
          env={"TRITON_CACHE_DIR": "{home}/.triton/cache"}, compile_group="triton-in-home"),
    Lever("capture-matched", "CUDA graphs captured up to the plan's max concurrent sequences "
          "(--max-cudagraph-capture-size), not vLLM's min(2 x max_num_seqs, 512)",
          args=("--max-cudagraph-capture-size", MATCHED), compile_group="capture-matched"),
    Lever("piecewise-graphs", "piecewise CUDA graphs only, no full decode graphs",
          args=("--compilation-config", '{"cudagraph_mode": "PIECEWISE"}'), compile_group="piecewise"),
    Lever("fork-engine", "engine core forked from the API server (VLLM_WORKER_MULTIPROC_METHOD=fork) instead of "
          "spawned: the CLI entrypoint sets spawn (vllm/entrypoints/serve/utils/api_utils.py), so the engine core "
          "imports torch and vLLM a second time", env={"VLLM_WORKER_MULTIPROC_METHOD": "fork"}),
    Lever("spawn-engine", "engine core spawned, as vLLM's CLI chooses (the launcher's default before it forked "
          "one-node engine cores): interleaved with `default` on one host, the paired throughput check of fork",
          env={"VLLM_WORKER_MULTIPROC_METHOD": "spawn"}),
    Lever("in-process-engine", "engine core in the API server's process (VLLM_ENABLE_V1_MULTIPROCESSING=0): "
          "no second process, no ZMQ hop", env={"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}),
    Lever("enforce-eager", "no torch.compile, no CUDA graphs (--enforce-eager)", args=("--enforce-eager",),
          compile_group="eager"),
    Lever("default-loader-disk", "the default safetensors loader, weights evicted from the page cache first",
          cold_page_cache=True, throughput=False),
    Lever("runai-streamer-disk", "Run:ai Model Streamer, 16 concurrent readers, weights evicted first",
          args=("--load-format", "runai_streamer", "--model-loader-extra-config", '{"concurrency": 16}'),
          cold_page_cache=True, throughput=False),
    Lever("fastsafetensors-disk", "fastsafetensors loader, weights evicted first",
          args=("--load-format", "fastsafetensors"), cold_page_cache=True, throughput=False),
)}


def lever_args(lever: Lever, matched: int) -> tuple[str, ...]:
    """The lever's flags with the plan's figure filled in (vLLM captures sizes in steps of 8 below 256)."""
    size = max(8, -(-matched // 8) * 8)
    return tuple(str(size) if a == MATCHED else a for a in lever.args)


def breakdown(text: str) -> dict[str, float]:
    """Seconds per phase of a stamped leader log: each phase ends at the first stamped line matching its mark and
    starts at the previous mark found (phases whose line is missing, e.g. CUDA graphs under --enforce-eager, are
    left out and their time falls to the next one)."""
    marks: dict[str, float] = {}
    for line in text.splitlines():
        stamp = STAMP.match(line)
        if not stamp:
            continue
        for name, pattern in PHASES:
            if name not in marks and pattern.search(line):
                marks[name] = float(stamp.group(1))
    out, previous = {}, 0.0
    for name, _ in PHASES:
        if name in marks and marks[name] >= previous:
            out[name] = round(marks[name] - previous, 1)
            previous = marks[name]
    weights = WEIGHTS_LINE.search(text)
    if weights:
        out["weights_read_reported"] = float(weights.group(1))
    graphs = GRAPH_LINE.search(text)
    if graphs:
        out["cuda_graphs_reported"] = float(graphs.group(1))
        out["cuda_graphs_gib"] = float(graphs.group(2))
    return out


def stamped(popen: subprocess.Popen, path: Path, t0: float) -> threading.Thread:
    """Copy the process's output to `path`, each line prefixed with seconds since t0 (to the millisecond)."""
    def pump() -> None:
        with path.open("a") as handle:
            for raw in iter(popen.stdout.readline, b""):
                handle.write(f"[{time.monotonic() - t0:8.3f}] {raw.decode(errors='replace')}")
                handle.flush()

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    return thread


_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte))
MAP_FAILED = ctypes.c_void_p(-1).value


def resident_fraction(path: Path) -> float:
    """Share of the file's pages in the page cache: mincore(2) on a read-only shared mapping (mapping does not read
    the pages in; only touching them would)."""
    size = path.stat().st_size
    if size == 0:
        return 1.0
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    fd = os.open(path, os.O_RDONLY)
    try:
        base = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if base in (None, MAP_FAILED):
            raise OSError(ctypes.get_errno(), f"mmap failed on {path}")
        try:
            vec = (ctypes.c_ubyte * pages)()
            if _libc.mincore(base, size, vec) != 0:
                raise OSError(ctypes.get_errno(), f"mincore failed on {path}")
            return sum(v & 1 for v in vec) / pages
        finally:
            _libc.munmap(base, size)
    finally:
        os.close(fd)


def evict(directory: Path) -> dict[str, Any]:
    """Drop the directory's files from the page cache: the kernel-wide drop_caches where this process may write it,
    else posix_fadvise(DONTNEED) per file (clean pages of files nobody maps). Returns the method and the resident
    share of the bytes before and after."""
    files = sorted(p for p in directory.rglob("*") if p.is_file())
    total = sum(p.stat().st_size for p in files) or 1

    def resident() -> float:
        return round(sum(resident_fraction(p) * p.stat().st_size for p in files) / total, 4)

    before = resident()
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("1\n")
        method = "drop_caches"
    except OSError:
        for path in files:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        method = "posix_fadvise DONTNEED"
    return {"method": method, "resident_before": before, "resident_after": resident(),
            "bytes": total}


def import_seconds(python: str, env: dict[str, str], runs: int = 2) -> list[float]:
    """Seconds to import the API server module in a fresh interpreter, `runs` times (the first may read the files
    from disk and write bytecode; the later ones are what a pod whose image ships bytecode pays)."""
    code = ("import time; t = time.perf_counter(); import vllm.entrypoints.openai.api_server; "
            "print(time.perf_counter() - t)")
    out = []
    for _ in range(runs):
        done = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True, timeout=300, check=True)
        out.append(round(float(done.stdout.split()[-1]), 2))
    return out


def launcher_defaults(env: dict[str, str], work: Path) -> dict[str, str]:
    """What the launcher being measured does to a one-node leader's engine start when no key says otherwise: it
    is run with a command that prints the two settings (bench/levers_report.py groups rows by what ran, so a run
    of a later launcher is compared with the right rows of an earlier one)."""
    show = ("import os; print(os.environ.get('VLLM_WORKER_MULTIPROC_METHOD') or 'spawn', "
            "os.environ.get('TRITON_CACHE_DIR') or '-')")
    env = {k: v for k, v in env.items() if k not in ("VLLM_WORKER_MULTIPROC_METHOD", "TRITON_CACHE_DIR")}
    root = work / "defaults-probe"
    shutil.rmtree(root, ignore_errors=True)
    env |= {"VLLM_CACHE_ROOT": str(root / "cache"), "VLLM_GKE_STATE_DIR": str(root / "state"),
            "HOME": str(root / "home")}
    cmd = [sys.executable, str(LAUNCHER), "leader", "--group-size", "1", "--gpus-per-node", "0",
           "--compile-cache-store", str(root / "store"), "--compile-cache-key", "probe",
           "--compile-cache-timeout", "1", "--", sys.executable, "-c", show]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=False)
    words = done.stdout.split()
    if done.returncode or len(words) < 2:
        raise BenchError(f"the launcher's defaults probe failed (exit {done.returncode}): "
                         f"{(done.stderr.strip().splitlines() or ['no output'])[-1]}")
    method, triton = words[-2:]
    shutil.rmtree(root, ignore_errors=True)
    return {"engine_core": method,
            "triton_cache": "carried" if triton.startswith(str(root / "cache")) else "home"}


class StampedGroup(Group):
    """A bench Group whose processes' lines carry seconds since their start."""

    def start(self, role: str, cmd: list[str], env: dict[str, str]) -> Proc:
        path = self.logs / f"{self.name}-{role}.log"
        path.write_text("$ " + " ".join(cmd) + "\n")
        t0 = time.monotonic()
        popen = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        stamped(popen, path, t0)
        proc = Proc(role, popen, path)
        self.procs.append(proc)
        return proc


def start_once(bench: Bench, lever: Lever, args: tuple[str, ...], store: Path, phase: str,
               tag: str = "") -> dict[str, Any]:
    """One start of tp1 with the lever; returns its row (the group is stopped unless the row asks for load). The
    start's log is kept as startup-logs/levers/{tag}lever-NAME-PHASE.log: `tag` keeps repeats apart."""
    layout = LAYOUTS["tp1"]
    for old in (bench.work / "cache").glob("tp1-*"):
        shutil.rmtree(old, ignore_errors=True)
    key = f"bench-tp1-{lever.compile_group}"
    if phase == "cold":
        shutil.rmtree(store / key, ignore_errors=True)
    row: dict[str, Any] = {"lever": lever.name, "phase": phase, "note": lever.note, "args": list(args),
                           "env": lever.env}
    if lever.cold_page_cache and phase == "warm":
        row["page_cache"] = evict(bench.model_dir)
    spec = replace(bench.spec(layout, compile_cache=(str(store), key)), extra_args=args)
    group = StampedGroup(bench.work, f"lever-{lever.name}-{phase}")
    url = local(API_PORT)
    env = bench.env(layout, [0], "tp1-r0")
    env |= {k: v.replace("{home}", env["HOME"]) for k, v in lever.env.items()}
    try:
        t0 = time.monotonic()
        group.start("leader", leader_cmd(spec), env)
        row["seconds_to_health"] = round(wait_healthy(group, [url], t0, bench.args.start_timeout), 1)
        if phase == "cold":
            deadline = time.monotonic() + 180
            while not (store / key / "pod-0.tar").exists() and time.monotonic() < deadline:
                time.sleep(2)
        time.sleep(2)
        text = group.procs[0].log.read_text(errors="replace")
        row["phases"] = breakdown(text)
        kept = bench.args.out / "startup-logs" / "levers" / f"{tag}lever-{lever.name}-{phase}.log"
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(group.procs[0].log, kept)
        row["log"] = f"startup-logs/levers/{kept.name}"
        log(f"lever {lever.name} ({phase}): /health after {row['seconds_to_health']} s; {row['phases']}")
        if phase == "warm" and lever.throughput:
            if bench.args.warmup_prompts:
                run_client(bench, [url], bench.args.warmup_prompts, seed=1, tag=f"lever-{lever.name}-warmup")
            row |= summarize(run_client(bench, [url], bench.args.prompts, seed=0, tag=f"lever-{lever.name}"))
            log(f"lever {lever.name}: {row['output_tokens_per_s']} output tok/s, TTFT {row['mean_ttft_ms']} ms, "
                f"TPOT {row['mean_tpot_ms']} ms")
    except BenchError as exc:
        row["error"] = str(exc)
        log(f"lever {lever.name} ({phase}): FAILED: {exc}")
    finally:
        group.stop()
    return row


def run_levers(bench: Bench, names: list[str], results: dict[str, Any], save) -> None:
    """The levers in order (a name may repeat: the repeat measures run-to-run noise). A compile group whose cache
    is not in the store yet is started cold first. Each invocation is one entry of startup_levers.runs; with
    --merge the rows go to the last entry instead, so a run cut into several calls on one host adds up."""
    store = bench.work / "compile-store"
    matched = (predicted_kv(bench.args.config, bench.args, 1, 1, 1) or 0) // bench.args.max_model_len
    section = results.setdefault("startup_levers", {})
    section |= {"layout": "tp1", "model": f"{bench.args.config.stem} (random weights)",
                "max_model_len": bench.args.max_model_len, "prompts": bench.args.prompts}
    runs = section.setdefault("runs", [])
    if not runs or not bench.args.merge:
        runs.append({"machine": host_info().get("hostname"), "launcher": "images/vllm-ray/launcher.py as committed",
                     "host": host_info(), "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                     "matched_concurrency": matched, "rows": []})
    run = runs[-1]
    if "defaults" not in run:
        run["defaults"] = launcher_defaults({**os.environ, **SAFE_ENV}, bench.work)
    log(f"levers: the launcher's defaults: {run['defaults']}")
    if "import_seconds" not in run:
        run["import_seconds"] = import_seconds(sys.executable, {**os.environ, **SAFE_ENV})
    log(f"levers: importing the API server took {run['import_seconds']} s")
    for name in names:
        lever = LEVERS[name]
        args = lever_args(lever, matched)
        phases = ["warm"]
        if not (store / f"bench-tp1-{lever.compile_group}" / "pod-0.tar").exists():
            phases.insert(0, "cold")
        for phase in phases:
            tag = f"run{len(runs)}-{len(run['rows']) + 1:02d}-"
            run["rows"].append(start_once(bench, lever, args, store, phase, tag))
            save()
