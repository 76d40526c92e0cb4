"""What inference-aware routing buys on this project's layouts (issue 33): two TP=1 vLLM replicas on one GPU behind
a router, round-robin against prefix-aware routing, on a prefix-heavy workload and a random control, repeats
interleaved (A B B A A B) so drift in the GPU's state does not favour one arm.

    python bench/routing.py start --config models/Llama-3.1-8B-Instruct.json --work /tmp/routing
    python bench/routing.py run --work /tmp/routing --workload prefix --out $OUT/routing-prefix.json
    python bench/routing.py run --work /tmp/routing --workload random --out $OUT/routing-random.json
    python bench/routing.py stop --work /tmp/routing

The router is the PyPI `vllm-router` (Rust; policies round_robin and cache_aware). It stands in for the llm-d
endpoint picker, which cannot start on the lent GPU host (no Envoy, no Go toolchain, no image registry):
`cache_aware` keeps an approximate prefix tree of the prompts it routed per replica, like the picker's approximate
prefix scorer, and falls back to the least-loaded replica when the load is uneven (abs > 64 requests and rel >
1.5x), the load term llm-d's results show is needed. `round_robin` per request is a generous stand-in for the
vllm-leader Service (kube-proxy spreads connections, not requests).

Each replica gets a fixed KV budget (--num-gpu-blocks-override) smaller than the prefix workload's working set:
under round-robin every replica sees every prefix and evicts; prefix-aware routing splits the prefixes between the
replicas. Per run: TTFT p50/p90, output tok/s (from `vllm bench serve`) and per replica the prefix-cache hit rate
and the requests it served (deltas of vLLM's own counters on /metrics). Prefix caches are reset before each run
(POST /reset_prefix_cache, VLLM_SERVER_DEV_MODE=1).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ROUTER_PORT = 8000
REPLICA_PORTS = (8001, 8002)
SERVED = "m"
ORDER = ("A", "B", "B", "A", "A", "B")
"""Arm order for three repeats of two arms: each arm runs first, middle and last once."""
ARMS = {"A": "round_robin", "B": "cache_aware"}
WORKLOADS = {
    # 40 shared 4,096-token prefixes: 164k prefix tokens against a 96k-token KV budget per replica.
    "prefix": ["--dataset-name", "prefix_repetition", "--prefix-repetition-prefix-len", "4096",
               "--prefix-repetition-suffix-len", "256", "--prefix-repetition-num-prefixes", "40",
               "--prefix-repetition-output-len", "128"],
    # The same lengths without shared prefixes: routing has nothing to exploit.
    "random": ["--dataset-name", "random", "--random-input-len", "4352", "--random-output-len", "128",
               "--random-range-ratio", "0"],
}
METRIC = re.compile(r"^(vllm:[a-z_:]+?)(?:_total)?(?:\{[^}]*\})? ([0-9.eE+-]+)$")


def python() -> list[str]:
    return [sys.executable]


def vllm_cli() -> list[str]:
    return [*python(), "-m", "vllm.entrypoints.cli.main"]


def log(message: str) -> None:
    print(f"[routing {time.strftime('%H:%M:%S')}] {message}", flush=True)


def spawn(cmd: list[str], logfile: Path, env: dict[str, str] | None = None) -> int:
    """A process in its own session (it outlives this call on the device host; stopped by session id)."""
    with logfile.open("ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
                                start_new_session=True)
    return proc.pid


def kill_session(pid: int, grace: float = 20) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.time() + grace
    while time.time() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.5)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def get(url: str, timeout: float = 5) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read().decode()


def post(url: str, timeout: float = 30) -> int:
    req = urllib.request.Request(url, data=b"", method="POST")
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.status


def wait_ready(url: str, timeout: float, pids: list[int]) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            get(url, timeout=2)
            return
        except OSError:
            time.sleep(2)
        for pid in pids:
            try:
                os.killpg(pid, 0)
            except ProcessLookupError as exc:
                raise RuntimeError(f"a process of {url} exited before it was ready") from exc
    raise TimeoutError(f"{url} not ready in {timeout:.0f} s")


def counters(text: str) -> dict[str, float]:
    """Sums of the vLLM counters a run is judged by: prefix-cache queries and hits (tokens), finished requests."""
    wanted = {"vllm:prefix_cache_queries": "queries", "vllm:prefix_cache_hits": "hits",
              "vllm:request_success": "requests"}
    out = dict.fromkeys(wanted.values(), 0.0)
    for line in text.splitlines():
        found = METRIC.match(line.strip())
        if found and found.group(1) in wanted:
            out[wanted[found.group(1)]] += float(found.group(2))
    return out


def replica_urls() -> list[str]:
    return [f"http://127.0.0.1:{port}" for port in REPLICA_PORTS]


def start(args: argparse.Namespace) -> None:
    from bench.models import build_tokenizer

    work = Path(args.work)
    model = work / "model"
    model.mkdir(parents=True, exist_ok=True)
    config = json.loads(Path(args.config).read_text())
    (model / "config.json").write_text(json.dumps(config))
    build_tokenizer(config, model)
    pids = []
    for index, port in enumerate(REPLICA_PORTS):
        cmd = [*vllm_cli(), "serve", str(model), "--served-model-name", SERVED, "--port", str(port),
               "--host", "127.0.0.1", "--load-format", "dummy", "--gpu-memory-utilization", str(args.util),
               "--num-gpu-blocks-override", str(args.kv_blocks), "--max-model-len", "8192",
               "--enable-prefix-caching"]
        env = {"VLLM_SERVER_DEV_MODE": "1", "VLLM_CACHE_ROOT": str(work / f"cache-{index}"),
               "VLLM_NO_USAGE_STATS": "1"}
        pids.append(spawn(cmd, work / f"replica-{index}.log", env))
        if index == 0:  # profiling both at once would see each other's memory: start the second after the first
            wait_ready(f"http://127.0.0.1:{port}/health", args.timeout, pids)
    for url in replica_urls():
        wait_ready(f"{url}/health", args.timeout, pids)
    (work / "pids.json").write_text(json.dumps({"replicas": pids}))
    log(f"replicas ready: {replica_urls()}")


def run_one(work: Path, arm: str, workload: str, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    for url in replica_urls():
        post(f"{url}/reset_prefix_cache")
    router_log = work / f"router-{arm}.log"
    router = spawn([*python(), "-m", "vllm_router.launch_router", "--host", "127.0.0.1", "--port", str(ROUTER_PORT),
                    "--worker-urls", *replica_urls(), "--policy", arm], router_log)
    try:
        wait_ready(f"http://127.0.0.1:{ROUTER_PORT}/health", 60, [router])
        before = [counters(get(f"{url}/metrics")) for url in replica_urls()]
        name = f"{workload}-{arm}-{seed}.json"
        cmd = [*vllm_cli(), "bench", "serve", "--backend", "openai", "--base-url", f"http://127.0.0.1:{ROUTER_PORT}",
               "--model", SERVED, "--tokenizer", str(work / "model"), *WORKLOADS[workload],
               "--num-prompts", str(args.prompts), "--request-rate", str(args.rate), "--seed", str(seed),
               "--percentile-metrics", "ttft,tpot,e2el", "--metric-percentiles", "50,90",
               "--save-result", "--result-dir", str(work), "--result-filename", name]
        subprocess.run(cmd, check=True, stdout=(work / "bench.log").open("ab"), stderr=subprocess.STDOUT,
                       timeout=args.run_timeout)
        after = [counters(get(f"{url}/metrics")) for url in replica_urls()]
    finally:
        kill_session(router)
    result = json.loads((work / name).read_text())
    replicas = []
    for b, a in zip(before, after, strict=True):
        queries, hits = a["queries"] - b["queries"], a["hits"] - b["hits"]
        replicas.append({"requests": int(a["requests"] - b["requests"]),
                         "prefix_hit_rate": round(hits / queries, 4) if queries else None})
    return {"workload": workload, "arm": arm, "seed": seed, "completed": result.get("completed"),
            "ttft_p50_ms": result.get("median_ttft_ms"), "ttft_p90_ms": result.get("p90_ttft_ms"),
            "tpot_p50_ms": result.get("median_tpot_ms"), "output_tok_s": result.get("output_throughput"),
            "duration_s": result.get("duration"), "replicas": replicas}


def run(args: argparse.Namespace) -> None:
    work = Path(args.work)
    out = Path(args.out)
    rows = json.loads(out.read_text())["rows"] if args.skip and out.exists() else []
    for index, key in enumerate(ORDER[:args.runs]):
        if index < args.skip:
            continue
        arm = ARMS[key]
        log(f"{args.workload} run {index + 1}/{args.runs}: {arm}")
        row = run_one(work, arm, args.workload, args, seed=index // 2)
        log(json.dumps(row))
        rows.append(row)
        Path(args.out).write_text(json.dumps({"rows": rows, "settings": vars(args)}, indent=1))


def stop(args: argparse.Namespace) -> None:
    pids = json.loads((Path(args.work) / "pids.json").read_text())["replicas"]
    for pid in pids:
        kill_session(pid, grace=30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    s = sub.add_parser("start")
    s.add_argument("--config", required=True, help="a config.json under models/ (random weights)")
    s.add_argument("--work", required=True)
    s.add_argument("--util", type=float, default=0.45, help="--gpu-memory-utilization of each replica")
    s.add_argument("--kv-blocks", type=int, default=6000, help="KV blocks of 16 tokens per replica")
    s.add_argument("--timeout", type=float, default=420)
    r = sub.add_parser("run")
    r.add_argument("--work", required=True)
    r.add_argument("--workload", choices=sorted(WORKLOADS), required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--runs", type=int, default=len(ORDER), choices=range(2, len(ORDER) + 1))
    r.add_argument("--skip", type=int, default=0, help="resume: skip the first N runs of the order (appended to "
                                                      "--out when it exists)")
    r.add_argument("--prompts", type=int, default=400)
    r.add_argument("--rate", type=float, default=8.0)
    r.add_argument("--run-timeout", type=float, default=300)
    t = sub.add_parser("stop")
    t.add_argument("--work", required=True)
    args = parser.parse_args(argv)
    {"start": start, "run": run, "stop": stop}[args.verb](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
