"""Benchmark layouts started as the program declares their pods (`bench/run.py --pods DIR`).

The pods come from bench/pods.py (the program's own objects, rendered through Pulumi's mocks runtime) and run
through tools/pod_runner.py: UID 10001 with no passwd entry, read-only root, only the declared volumes writable
(the weights claim read-only, /tmp and /dev/shm as emptyDirs), the rendered env, each pod in its own network
namespace with its own IP, and only its own GPU's device nodes. What the pods get beyond their spec is what a
node and the image would give them, listed here:
- the image's env: this host's Python environment (PATH, PYTHONPATH of the offline site, NCCL/Ray/vLLM/torch
  variables the host sets, among them the NVLink-multicast switches this host requires);
- LeaderWorkerSet's injected env (LWS_LEADER_ADDRESS as the leader's pod IP, group size, worker index);
- across-nodes layouts on one host: bench/run.py's TCP_ENV (no NCCL P2P/SHM/IB), as the host-process layouts had,
  except NCCL_SOCKET_IFNAME, which the pod spec sets itself (eth0).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.pod_runner import Pod, PodNetwork, csi_stand_ins

IMAGE_ENV_KEYS = ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "CUDA_HOME", "PYTHONUNBUFFERED", "DO_NOT_TRACK")
IMAGE_ENV_PREFIXES = ("NCCL_", "VLLM_", "RAY_", "TORCH_", "NVSHMEM_", "HF_", "TRANSFORMERS_")


def image_env(extra: dict[str, str]) -> dict[str, str]:
    """What the image would set: this host's Python environment and its NCCL/vLLM/Ray settings (never
    CUDA_VISIBLE_DEVICES: a pod sees only the device nodes of its own GPUs)."""
    env = {k: v for k, v in os.environ.items()
           if k in IMAGE_ENV_KEYS or k.startswith(IMAGE_ENV_PREFIXES)}
    return {**env, **extra}


def image_paths(env: dict[str, str]) -> tuple[str, ...]:
    """The image's Python under /tmp (an offline site on PYTHONPATH, a virtualenv's bin/ on PATH in a checkout
    under /tmp) would be hidden by the pod's /tmp emptyDir; the runner binds them read-only."""
    paths = []
    for entry in [*env.get("PYTHONPATH", "").split(":"), *env.get("PATH", "").split(":")]:
        path = Path(entry)
        if path.name == "bin" and (path / "python3").exists():
            path = path.parent
        if str(path).startswith("/tmp/") and path.is_dir() and str(path) not in paths:
            paths.append(str(path))
    return tuple(paths)


@dataclass(frozen=True)
class Rendered:
    """One layout's objects as bench/pods.py wrote them."""

    layout: str
    objects: list[dict[str, Any]]

    @classmethod
    def load(cls, path: Path) -> Rendered:
        data = json.loads(path.read_text())
        return cls(data["layout"], data["objects"])

    @property
    def template(self) -> dict[str, Any]:
        lws = next(o for o in self.objects if o["kind"] == "LeaderWorkerSet")
        return lws["spec"]["leaderWorkerTemplate"]

    @property
    def size(self) -> int:
        return int(self.template.get("size", 1))

    @property
    def leader(self) -> dict[str, Any]:
        return (self.template.get("leaderTemplate") or self.template["workerTemplate"])["spec"]

    @property
    def worker(self) -> dict[str, Any]:
        return self.template["workerTemplate"]["spec"]

    @property
    def namespace(self) -> str:
        return next(o for o in self.objects if o["kind"] == "LeaderWorkerSet")["metadata"]["namespace"]

    @property
    def claim(self) -> str:
        return next(v["persistentVolumeClaim"]["claimName"] for v in self.leader["volumes"]
                    if "persistentVolumeClaim" in v)

    @property
    def served_name(self) -> str:
        command = self.leader["containers"][0]["command"]
        return command[command.index("--served-model-name") + 1]

    @property
    def port(self) -> int:
        return next(int(p["containerPort"]) for p in self.leader["containers"][0]["ports"] if p["name"] == "http")


def declared_checks(pod: Pod) -> dict[str, Any]:
    """What the running pod is, seen from inside it: its user, a write to its root, its writable /tmp."""
    uid = pod.exec(["python3", "-c", "import os; print(os.getuid(), os.getgid())"], timeout=60)
    root = pod.exec(["python3", "-c", "open('/declared-check', 'w')"], timeout=60)
    tmp = pod.exec(["python3", "-c", "open('/tmp/declared-check', 'w').write('x')"], timeout=60)
    return {"uid_gid": uid.stdout.strip(),
            "root_write": "refused: " + root.stderr.strip().splitlines()[-1] if root.returncode else "ALLOWED",
            "tmp_write": "ok" if tmp.returncode == 0 else tmp.stderr.strip()[-200:],
            "user_env": pod.env.get("USER")}


class DeclaredPods:
    """Starts the leader (and workers) of a rendered layout as pods; `pods` are stopped by the caller."""

    def __init__(self, rendered: Rendered, net: PodNetwork, disk: Path, logs: Path, extra_env: dict[str, str],
                 gpus: bool = True):
        self.rendered, self.net, self.disk, self.logs, self.gpus = rendered, net, disk, logs, gpus
        self.env = image_env(extra_env)
        self.pods: list[Pod] = []

    def _pod(self, role: str, spec: dict[str, Any], gpus: tuple[int, ...], injected: dict[str, str],
             log: Path) -> Pod:
        pod = Pod(spec, self.rendered.objects, self.rendered.namespace, role, self.net,
                  claims={self.rendered.claim: self.disk}, image_env=self.env, injected_env=injected,
                  image_paths=image_paths(self.env), gpus=gpus, log=log,
                  csi=csi_stand_ins(spec, self.logs.parent / "buckets"))
        self.pods.append(pod)
        return pod

    def start(self, name: str, gpus_per_pod: int, drop_env: tuple[str, ...] = ()) -> list[Pod]:
        """Leader on GPUs 0.., workers on the next ones; LWS's env injected; `drop_env` removed from the leader's
        rendered env (to show what a variable is for). Returns the started pods, leader first."""
        size = self.rendered.size
        leader = self._pod("leader", self.rendered.leader, tuple(range(gpus_per_pod)), {},
                           self.logs / f"{name}-leader-n0.log")
        lws = {"LWS_LEADER_ADDRESS": leader.ip, "LWS_GROUP_SIZE": str(size)}
        leader.env.update({**lws, "LWS_WORKER_INDEX": "0"})
        for key in drop_env:
            leader.env.pop(key, None)
        started = [leader]
        for n in range(1, size):
            gpus = tuple(range(n * gpus_per_pod, (n + 1) * gpus_per_pod))
            started.append(self._pod(f"worker-{n}", self.rendered.worker, gpus,
                                     {**lws, "LWS_WORKER_INDEX": str(n)}, self.logs / f"{name}-worker-n{n}.log"))
        for pod in started:
            pod.start()
        return started

    def close(self) -> None:
        for pod in self.pods:
            pod.close()
        self.pods = []


def wait_exit_or_ready(pod: Pod, url: str, timeout: float, healthy) -> dict[str, Any]:
    """For the unmapped-UID check: how the leader ends (exit code and the log's last error) or that it serves."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if pod.proc is not None and pod.proc.poll() is not None:
            text = pod.log.read_text(errors="replace")
            lines = text.splitlines()
            errors = [line for line in lines if "getpwuid()" in line] or [line for line in lines if "Error" in line]
            return {"outcome": "exited", "exit_code": pod.proc.returncode, "seconds": round(time.monotonic() - t0, 1),
                    "error_line": errors[-1].strip() if errors else text.strip().splitlines()[-1:]}
        if healthy(url):
            return {"outcome": "serving", "seconds": round(time.monotonic() - t0, 1)}
        time.sleep(0.5)
    return {"outcome": f"neither exited nor served within {timeout:.0f} s"}
