"""The GPU bench's harness: process groups, the layouts and their rendered commands, the load client and the
planner's predictions, shared by bench/run.py (layouts, start-up), bench/levers.py and bench/calibrate.py.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.declared import DeclaredPods, Rendered  # noqa: E402
from planner import sizing  # noqa: E402
from planner.catalog import ACCELERATORS  # noqa: E402
from planner.commands import (  # noqa: E402
    API_PORT,
    LAUNCHER,
    NODE_MANAGER_PORT,
    OBJECT_MANAGER_PORT,
    ServerSpec,
    leader_command,
    worker_command,
)
from planner.config import build_settings  # noqa: E402
from planner.errors import ConfigError  # noqa: E402
from planner.layout import Layout, fit  # noqa: E402
from planner.memory import default_engine, kv_dtype_bytes, model_weight_bytes  # noqa: E402
from planner.model_config import load_architecture  # noqa: E402

NODE_IPS = ("127.0.0.2", "127.0.0.3")
# NVLink multicast stays off (shared hosts); harmless where there is none.
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
            "VLLM_ALLREDUCE_USE_SYMM_MEM": "0", "VLLM_NO_USAGE_STATS": "1", "RAY_USAGE_STATS_ENABLED": "0",
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
# Two "nodes" on one host talk like ordinary nodes: no NVLink/PCIe peer access, no shared memory, TCP.
TCP_ENV = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "lo",
           "NCCL_DEBUG": "INFO"}
TCP_ARGS = ("--disable-custom-all-reduce",)  # vLLM's own all-reduce would use NVLink and skip NCCL
SHARED_HOST_PORT_SHIFT = 10
"""The second Ray node on one host moves its pinned node/object-manager ports by this much."""
KV_LINE = re.compile(r"(?:GPU|CPU) KV cache size: ([\d,]+) tokens")


@dataclass(frozen=True)
class BenchLayout:
    name: str
    tp: int
    pp: int
    nodes: int
    replicas: int = 1
    tcp: bool = False
    dp: int = 1
    ep: bool = False

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def gpus(self) -> int:
        return self.gpus_per_replica * self.replicas


LAYOUTS = {layout.name: layout for layout in (
    BenchLayout("tp1", 1, 1, 1),
    BenchLayout("replicas-2x-tp1", 1, 1, 1, replicas=2),
    BenchLayout("tp2-one-node", 2, 1, 1),
    BenchLayout("pp2-across-nodes-tcp", 1, 2, 2, tcp=True),
    BenchLayout("tp2-across-nodes-tcp", 2, 1, 2, tcp=True),
    BenchLayout("dp2-ep", 1, 1, 1, dp=2, ep=True),
)}
"""Run order: the layouts the layout rule compares first, the NVLink reference last."""


class BenchError(Exception):
    """A layout failed; the message is one line, the log path says where to look."""


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


# ---------------------------------------------------------------------------------------------- processes

@dataclass
class Proc:
    name: str
    popen: subprocess.Popen
    log: Path


class Group:
    """Processes of one layout; stopped together, and the GPUs checked free afterwards."""

    def __init__(self, work: Path, name: str):
        self.work, self.name, self.procs, self.uses_ray = work, name, [], False
        self.logs = work / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)

    def start(self, role: str, cmd: list[str], env: dict[str, str]) -> Proc:
        path = self.logs / f"{self.name}-{role}.log"
        handle = path.open("w")
        handle.write("$ " + " ".join(cmd) + "\n")
        handle.flush()
        popen = subprocess.Popen(cmd, env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
        proc = Proc(role, popen, path)
        self.procs.append(proc)
        return proc

    def stop(self, grace: float = 60) -> None:
        """SIGTERM (the launcher drains vLLM and stops Ray), then SIGKILL what is left, then wait for free GPUs."""
        import psutil

        tree = []
        for proc in self.procs:
            try:
                parent = psutil.Process(proc.popen.pid)
                tree += [parent, *parent.children(recursive=True)]
            except psutil.NoSuchProcess:
                pass
            if proc.popen.poll() is None:
                os.killpg(proc.popen.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in self.procs:
            try:
                proc.popen.wait(max(1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log(f"{self.name}/{proc.name} did not stop within {grace:.0f} s; killing it")
        # Everything in the processes' sessions, also what was spawned after the snapshot above.
        sessions = set()
        for p in tree:
            with contextlib.suppress(OSError):
                sessions.add(os.getsid(p.pid))
        sessions.discard(os.getsid(0))
        for p in [*tree, *psutil.process_iter()]:
            with contextlib.suppress(psutil.Error, OSError):
                if p in tree or os.getsid(p.pid) in sessions:
                    p.kill()
        if self.uses_ray:
            ray_stop()
        wait_gpus_free()


class PodGroup(Group):
    """A layout started as its rendered pods (bench/declared.py); stopping kills the pods and their namespaces."""

    def __init__(self, work: Path, name: str, declared: DeclaredPods):
        super().__init__(work, name)
        self.declared = declared

    def start_pods(self, layout: BenchLayout, drop_env: tuple[str, ...] = ()) -> list[str]:
        per_pod = layout.gpus_per_replica // layout.nodes if self.declared.gpus else 0
        pods = self.declared.start(self.name, per_pod, drop_env)
        self.procs = [Proc(pod.name, pod.proc, pod.log) for pod in pods]
        return [f"http://{pods[0].ip}:{self.declared.rendered.port}"]

    def stop(self, grace: float = 60) -> None:
        self.declared.close()
        wait_gpus_free()


def ray_stop() -> None:
    subprocess.run([sys.executable, "-m", "ray.scripts.scripts", "stop", "--force"], capture_output=True,
                   check=False, timeout=120)


def gpu_memory_used() -> list[int]:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, check=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [int(line) for line in out.split() if line.strip().isdigit()]


def wait_gpus_free(limit_mib: int = 2048, timeout: float = 60) -> None:
    """The next layout must find the GPUs empty; leftover compute processes are killed after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(u < limit_mib for u in gpu_memory_used()):
            return
        time.sleep(1)
    pids = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"], capture_output=True,
                          text=True, check=False, timeout=30).stdout.split()
    pids = [pid for pid in pids if pid != str(os.getpid())]  # this process's own CUDA context is not a leftover
    log(f"GPU memory still in use after {timeout:.0f} s ({gpu_memory_used()} MiB); killing {pids}")
    for pid in pids:
        with contextlib.suppress(ValueError, OSError):
            os.kill(int(pid), signal.SIGKILL)
    time.sleep(5)


def local(port: int) -> str:
    return f"http://127.0.0.1:{port}"


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def wait_healthy(group: Group, urls: list[str], t0: float, timeout: float) -> float:
    """Seconds from t0 until every URL answers /health 200; BenchError when a process dies or time runs out."""
    pending = set(urls)
    while pending:
        for url in sorted(pending):
            if healthy(url):
                pending.discard(url)
        if not pending:
            break
        for proc in group.procs:
            if proc.popen.poll() is not None:
                raise BenchError(f"{group.name}/{proc.name} exited with {proc.popen.returncode} before /health "
                                 f"answered (log: {proc.log})")
        if time.monotonic() - t0 > timeout:
            raise BenchError(f"{group.name}: /health not 200 on {sorted(pending)} after {timeout:.0f} s")
        time.sleep(0.25)
    return time.monotonic() - t0


def kv_tokens(path: Path) -> int | None:
    match = KV_LINE.search(path.read_text(errors="replace")) if path.exists() else None
    return int(match.group(1).replace(",", "")) if match else None


def logged_kv_tokens(path: Path, seconds: float = 30.0) -> int | None:
    """kv_tokens once the engine's line is in the log: the server answers health checks after its engine logged the
    KV cache size, but the engine process's own output can reach the file later (a loaded CI runner showed the
    server healthy before the line)."""
    deadline = time.monotonic() + seconds
    while (found := kv_tokens(path)) is None and time.monotonic() < deadline:
        time.sleep(0.5)
    return found


# ----------------------------------------------------------------------------------------------- commands

@dataclass(frozen=True)
class Bench:
    args: argparse.Namespace
    model_dir: Path
    served_name: str
    work: Path
    pods: dict[str, Rendered] = field(default_factory=dict)
    net: Any = None
    """tools.pod_runner.PodNetwork when layouts start as declared pods."""

    def declared(self, layout: BenchLayout) -> DeclaredPods:
        """The rendered pods of `layout`, with the weights claim on the built model's disk directory."""
        extra = {**SAFE_ENV, **({k: v for k, v in TCP_ENV.items() if k != "NCCL_SOCKET_IFNAME"} if layout.tcp else {})}
        return DeclaredPods(self.pods[layout.name], self.net, self.model_dir.parent, self.work / "logs", extra,
                            gpus=bool(self.args.gpus))

    def spec(self, layout: BenchLayout, port: int = API_PORT, model_dir: Path | None = None,
             compile_cache: tuple[str, str] | None = None) -> ServerSpec:
        store, key = compile_cache or (None, None)
        return ServerSpec(
            model_path=str(model_dir or self.model_dir), served_name=self.served_name, tensor=layout.tp,
            pipeline=layout.pp, nodes=layout.nodes, gpus_per_node=layout.gpus_per_replica // layout.nodes,
            max_model_len=self.args.max_model_len, gpu_memory_utilization=self.args.gpu_memory_utilization,
            dtype=self.args.dtype, kv_cache_dtype=self.args.kv_cache_dtype,
            extra_args=TCP_ARGS if layout.tcp else (), port=port, compile_cache_store=store, compile_cache_key=key,
            data=layout.dp, expert=layout.ep)

    def env(self, layout: BenchLayout, gpus: list[int], cache: str, ip: str | None = None) -> dict[str, str]:
        env = {**os.environ, **SAFE_ENV, **(TCP_ENV if layout.tcp else {}),
               # compile caches per layout and node: every layout starts cold, as a fresh pod does, and
               # emulated nodes never load each other's artifacts
               "VLLM_CACHE_ROOT": str(self.work / "cache" / cache),
               "VLLM_GKE_STATE_DIR": str(self.work / "state" / cache),
               # a fresh pod's HOME (Triton's default cache) and Inductor dir: nothing reused but what is carried
               "HOME": str(self.work / "cache" / f"{cache}-home"),
               "TORCHINDUCTOR_CACHE_DIR": str(self.work / "cache" / f"{cache}-inductor")}
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, gpus))
        if ip:
            env |= {"POD_IP": ip, "LWS_LEADER_ADDRESS": NODE_IPS[0]}
        return env

    def cold_env(self, layout: BenchLayout, gpus: list[int], cache: str) -> dict[str, str]:
        """env() with that cache's directories emptied first: a start that must be cold even when the same name ran
        before in this work directory. bench/calibrate.py's rows are compared with a plan of a cold start; a warm
        compile cache skips vLLM 0.25.1's router compile and its hold (validation 41: GLM-4.5-Air:12 rerun under
        the same name held 1.43 GiB less and took 1.5 GiB more KV cache)."""
        env = self.env(layout, gpus, cache)
        for key in ("VLLM_CACHE_ROOT", "VLLM_GKE_STATE_DIR", "HOME", "TORCHINDUCTOR_CACHE_DIR"):
            shutil.rmtree(env[key], ignore_errors=True)
        return env


def leader_cmd(spec: ServerSpec) -> list[str]:
    return leader_command(spec, python=sys.executable, launcher=str(LAUNCHER))


def worker_cmd(spec: ServerSpec, temp_dir: str) -> list[str]:
    """The rendered worker command; on a shared host its Ray ports move off the head's and its temp dir too."""
    cmd = worker_command(spec, python=sys.executable, launcher=str(LAUNCHER))
    for flag, port in (("--node-manager-port", NODE_MANAGER_PORT + SHARED_HOST_PORT_SHIFT),
                       ("--object-manager-port", OBJECT_MANAGER_PORT + SHARED_HOST_PORT_SHIFT)):
        cmd[cmd.index(flag) + 1] = str(port)
    return [*cmd, "--temp-dir", temp_dir]


def short_temp_dir() -> str:
    # Ray's AF_UNIX socket paths must stay under 107 bytes.
    return tempfile.mkdtemp(prefix="rw-", dir="/tmp")


def start_layout(bench: Bench, layout: BenchLayout, group: Group, cache_tag: str | None = None,
                 compile_cache: tuple[str, str] | None = None) -> list[str]:
    """Start every process of `layout`; returns the API URLs to wait on. With `compile_cache` (store, key) the
    launcher restores and publishes vLLM's compile cache as a pod does."""
    tag = cache_tag or layout.name
    if layout.nodes == 1:
        ports = []
        for r in range(layout.replicas):
            port = API_PORT + r
            gpus = list(range(r * layout.gpus_per_replica, (r + 1) * layout.gpus_per_replica))
            group.start(f"leader-r{r}", leader_cmd(bench.spec(layout, port, compile_cache=compile_cache)),
                        bench.env(layout, gpus if bench.args.gpus else [], f"{tag}-r{r}"))
            ports.append(local(port))
        return ports
    spec = bench.spec(layout, compile_cache=compile_cache)
    per_node = layout.gpus_per_replica // layout.nodes
    group.uses_ray = True
    group.start("leader-n0", leader_cmd(spec), bench.env(layout, list(range(per_node)), f"{tag}-n0", NODE_IPS[0]))
    for n in range(1, layout.nodes):
        gpus = list(range(n * per_node, (n + 1) * per_node))
        group.start(f"worker-n{n}", worker_cmd(spec, short_temp_dir()),
                    {**bench.env(layout, gpus, f"{tag}-n{n}", NODE_IPS[n]), "LWS_WORKER_INDEX": str(n)})
    return [local(API_PORT)]


def run_client(bench: Bench, urls: list[str], prompts: int, seed: int, tag: str,
               served_name: str | None = None) -> list[dict[str, Any]]:
    """One `vllm bench serve` client per URL, concurrently (a Service spreads load the same way)."""
    out = bench.work / "clients"
    clients = []
    for i, url in enumerate(urls):
        name = f"{tag}-{i}.json"
        cmd = [sys.executable, str(ROOT / "bench" / "loadtest.py"), "--url", url,
               "--model", served_name or bench.served_name, "--tokenizer", str(bench.model_dir),
               "--prompts", str(prompts),
               "--input-len", str(bench.args.input_len), "--output-len", str(bench.args.output_len),
               "--rate", "inf", "--seed", str(seed), "--out", str(out), "--result-name", name, "--detailed"]
        logf = (bench.work / "logs" / f"client-{tag}-{i}.log").open("w")
        clients.append((subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env={**os.environ, **SAFE_ENV}),
                        out / name, logf.name))
    results = []
    for popen, path, logname in clients:
        if popen.wait() != 0 or not path.exists():
            raise BenchError(f"benchmark client failed with {popen.returncode} (log: {logname})")
        results.append(json.loads(path.read_text()))
    return results


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    pos = (len(ordered) - 1) * q / 100
    lo, hi = int(pos), min(int(pos) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarize(results: list[dict[str, Any]]) -> dict[str, float]:
    """Throughput summed over clients; TTFT/TPOT over every request of every client (as vLLM computes them)."""
    ttfts, tpots, completed = [], [], 0
    for result in results:
        completed += result.get("completed", 0)
        for ttft, itl, out_len, err in zip(result["ttfts"], result["itls"], result["output_lens"],
                                           result.get("errors", [""] * len(result["ttfts"])), strict=False):
            if err or not out_len:
                continue
            ttfts.append(ttft)
            if out_len > 1:
                tpots.append(sum(itl) / (out_len - 1))
    return {"output_tokens_per_s": round(sum(r["output_throughput"] for r in results), 1),
            "mean_ttft_ms": round(1000 * sum(ttfts) / max(len(ttfts), 1), 1),
            "p99_ttft_ms": round(1000 * percentile(ttfts, 99), 1),
            "mean_tpot_ms": round(1000 * sum(tpots) / max(len(tpots), 1), 2),
            "p99_tpot_ms": round(1000 * percentile(tpots, 99), 2),
            "completed": completed}


# --------------------------------------------------------------------------------------------- planner

def predicted_kv(config_json: Path, args: argparse.Namespace, tp: int, pp: int, nodes: int) -> int | None:
    """The planner's KV tokens per replica for this layout (None when the accelerator is not in the catalog)."""
    acc = ACCELERATORS.get(args.accelerator)
    if acc is None:
        return None
    arch, _ = load_architecture("bench/model", "main", str(config_json), None, ROOT)
    weights = model_weight_bytes(arch, args.dtype)
    kv_bytes = kv_dtype_bytes(args.kv_cache_dtype, args.dtype)
    return fit(arch, acc, Layout(tp, pp, nodes), args.gpu_memory_utilization, weights, kv_bytes,
               args.max_model_len, default_engine(acc, "0.25.1")).kv_tokens


def planner_layout(config_json: Path, args: argparse.Namespace) -> str | None:
    """What the planner picks for this model on this accelerator's machine with the bench's settings."""
    if args.accelerator not in ACCELERATORS:
        return None
    raw = {"cluster": {"name": "bench", "location": "us-central1", "create": False},
           "accelerator": {"type": args.accelerator, "zones": ["us-central1-a"]},
           "model": {"id": "bench/model", "configFile": str(config_json)},
           "vllm": {"maxModelLen": args.max_model_len, "gpuMemoryUtilization": args.gpu_memory_utilization,
                    "dtype": args.dtype, "kvCacheDtype": args.kv_cache_dtype}}
    try:
        plan = sizing.plan(build_settings(raw, ROOT))
    except ConfigError as exc:
        return f"refused: {exc}"
    return (f"tensor={plan.tensor_parallel_size}, pipeline={plan.pipeline_parallel_size} on "
            f"{plan.nodes_per_replica} node(s) of {plan.machine_type}")


def architecture_row(config_json: Path) -> dict[str, Any]:
    arch, _ = load_architecture("bench/model", "main", str(config_json), None, ROOT)
    return {"config": config_json.name, "layers": arch.num_layers, "attention_heads": arch.num_attention_heads,
            "kv_heads": arch.num_kv_heads, "head_dim": arch.head_dim, "parameters": arch.parameter_count()}


# ---------------------------------------------------------------------------------------------- steps

def host_info() -> dict[str, Any]:
    info: dict[str, Any] = {"hostname": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version()}
    try:
        info["gpus"] = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                                       "--format=csv,noheader"], capture_output=True, text=True, check=True,
                                      timeout=30).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        info["gpus"] = []
    versions = subprocess.run([sys.executable, "-c", "import torch, ray, vllm; "
                               "print(torch.__version__, ray.__version__, vllm.__version__)"],
                              capture_output=True, text=True, check=False, timeout=300).stdout.split()
    if len(versions) == 3:
        info["torch"], info["ray"], info["vllm"] = versions
    return info


