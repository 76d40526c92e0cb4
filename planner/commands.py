"""The command lines of a serving group, as pure functions: the vLLM API server, the launcher's leader
and worker. The Kubernetes objects (components/ray_vllm_server.py) and the GPU benchmark runner (bench/run.py) both
render them from here, so what is benchmarked is what is deployed."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

LAUNCHER = Path(__file__).resolve().parent.parent / "images" / "vllm-ray" / "launcher.py"
LAUNCHER_DIR = "/opt/vllm-gke"
API_PORT = 8000
API_PORT_NAME = "http"
"""Named port of the leader container: probes, Service, PodMonitoring and the smoke Job use it."""
RAY_PORT = 6379
NODE_MANAGER_PORT = 8076
OBJECT_MANAGER_PORT = 8077
DRAIN_SECONDS = 90
"""In-flight requests get this long to finish (vLLM --shutdown-timeout, launcher --drain-timeout)."""
RAY_JOIN_TIMEOUT = 600
"""Workers may land on nodes the autoscaler is still creating (GPU nodes take minutes)."""
RAY_STOP_SECONDS = 20
"""`ray stop --force` after the drain: it kills Ray's processes, so a few seconds are enough; bounded so
preStop + drain + Ray stop fit the pod's termination grace period."""
LIVENESS_MAX_AGE = 30
"""The launcher's group heartbeat (written every second while every Ray node is alive) may be this old."""


@dataclass(frozen=True)
class ServerSpec:
    """What the vLLM command line needs."""

    model_path: str
    """Weights directory inside the pod (the read-only weights volume)."""
    served_name: str
    """OpenAI model name."""
    tensor: int
    """--tensor-parallel-size."""
    pipeline: int
    """--pipeline-parallel-size."""
    nodes: int
    """Nodes per replica (group size)."""
    gpus_per_node: int
    """GPUs each group member contributes to Ray."""
    max_model_len: int
    """--max-model-len."""
    gpu_memory_utilization: float
    """--gpu-memory-utilization."""
    dtype: str
    """--dtype."""
    kv_cache_dtype: str
    """--kv-cache-dtype."""
    extra_args: tuple[str, ...] = ()
    """Appended verbatim."""
    port: int = API_PORT
    """API port."""
    compile_cache_store: str | None = None
    """Directory shared by the layout's pods where the launcher keeps vLLM's compile cache (None: no reuse)."""
    compile_cache_key: str | None = None
    """The layout's key in that store (compile_cache_key())."""
    data: int = 1
    """--data-parallel-size: engines inside the leader's pod (vLLM's default "mp" data-parallel backend starts
    them as local processes, one API server balancing over them; vllm/config/parallel.py data_parallel_backend)."""
    expert: bool = False
    """--enable-expert-parallel."""
    trust_remote_code: bool = False
    """--trust-remote-code (model.trustRemoteCode)."""


def compile_cache_key(vllm_image: str, accelerator: str, spec: ServerSpec, model: str) -> str:
    """What a compiled graph depends on, readable, plus a digest of the model: vLLM's version (the image tag), the
    GPU type, TP x PP, max-model-len, dtypes. vLLM keys its own cache by a hash of config and code, so a wrong match
    only costs a compile; a right one skips it."""
    tag = vllm_image.rsplit(":", 1)[-1].split("@")[0] if ":" in vllm_image else "latest"
    digest = hashlib.sha256(f"{model}|{vllm_image}|{spec.extra_args}".encode()).hexdigest()[:10]
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in f"{tag}-{accelerator}")
    parallel = f"tp{spec.tensor}pp{spec.pipeline}" + (f"dp{spec.data}" if spec.data > 1 else "") + (
        "ep" if spec.expert else "")
    return (f"{safe}-{parallel}-len{spec.max_model_len}-{spec.dtype}-{spec.kv_cache_dtype}-"
            f"{digest}")


def _cache_args(spec: ServerSpec) -> list[str]:
    if not spec.compile_cache_store:
        return []
    return ["--compile-cache-store", spec.compile_cache_store, "--compile-cache-key", str(spec.compile_cache_key),
            "--api-port", str(spec.port)]


def vllm_command(spec: ServerSpec, python: str = "python3") -> list[str]:
    """The vLLM API server command a leader runs (the `vllm` console script is avoided on purpose:
    the module entry point works in every image that has vLLM installed)."""
    cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", spec.model_path,
           "--served-model-name", spec.served_name, "--host", "0.0.0.0", "--port", str(spec.port),
           "--tensor-parallel-size", str(spec.tensor), "--pipeline-parallel-size", str(spec.pipeline),
           "--max-model-len", str(spec.max_model_len),
           "--gpu-memory-utilization", f"{spec.gpu_memory_utilization:g}",
           "--dtype", spec.dtype, "--kv-cache-dtype", spec.kv_cache_dtype,
           "--shutdown-timeout", str(DRAIN_SECONDS)]
    if spec.data > 1:
        cmd += ["--data-parallel-size", str(spec.data)]
    if spec.expert:
        cmd += ["--enable-expert-parallel"]
    if spec.nodes > 1:
        cmd += ["--distributed-executor-backend", "ray"]
    if spec.trust_remote_code:
        cmd += ["--trust-remote-code"]
    return cmd + list(spec.extra_args)


def leader_command(spec: ServerSpec, python: str = "python3", launcher: str = f"{LAUNCHER_DIR}/launcher.py",
                   ) -> list[str]:
    return [python, launcher, "leader", "--group-size", str(spec.nodes), "--gpus-per-node", str(spec.gpus_per_node),
            "--ray-port", str(RAY_PORT), "--wait-timeout", str(RAY_JOIN_TIMEOUT), "--drain-timeout", str(DRAIN_SECONDS),
            "--ray-stop-timeout", str(RAY_STOP_SECONDS),
            "--node-manager-port", str(NODE_MANAGER_PORT), "--object-manager-port", str(OBJECT_MANAGER_PORT),
            *_cache_args(spec), "--", *vllm_command(spec, python)]


def liveness_command(spec: ServerSpec, python: str = "python3", launcher: str = f"{LAUNCHER_DIR}/launcher.py",
                     ) -> list[str]:
    """Liveness of a multi-node leader: the group heartbeat is fresh (every Ray node alive) and the API
    server answers /health (a wedged server is restarted even while Ray is fine)."""
    return [python, launcher, "check", "--max-age", str(LIVENESS_MAX_AGE),
            "--health-url", f"http://127.0.0.1:{spec.port}/health"]


def worker_command(spec: ServerSpec, python: str = "python3", launcher: str = f"{LAUNCHER_DIR}/launcher.py",
                   ) -> list[str]:
    # LWS injects LWS_LEADER_ADDRESS into every pod of the group; the launcher reads it.
    return [python, launcher, "worker", "--gpus-per-node", str(spec.gpus_per_node), "--ray-port", str(RAY_PORT),
            "--wait-timeout", str(RAY_JOIN_TIMEOUT), "--node-manager-port", str(NODE_MANAGER_PORT),
            "--object-manager-port", str(OBJECT_MANAGER_PORT), *_cache_args(spec)]


def last_switch(words: list[str] | tuple[str, ...], flag: str) -> bool | None:
    """A boolean flag as argparse's BooleanOptionalAction keeps it: the last of `flag` (True) and its --no- form
    (False); None where neither is given (vLLM's --enable-prefix-caching, --async-scheduling, --enforce-eager,
    --language-model-only, --disable-chunked-mm-input are such flags)."""
    found = None
    for word in words:
        if word == flag:
            found = True
        elif word == "--no-" + flag[2:]:
            found = False
    return found


def flag_value(words: list[str] | tuple[str, ...], flag: str) -> str | None:
    """The value a command line gives `flag` (`--flag VALUE` or `--flag=VALUE`), the last where given twice, as
    argparse (and Go's flag package) keeps it; None when it is not there."""
    found = None
    for i, word in enumerate(words):
        if word == flag and i + 1 < len(words):
            found = words[i + 1]
        elif word.startswith(flag + "="):
            found = word.split("=", 1)[1]
    return found
