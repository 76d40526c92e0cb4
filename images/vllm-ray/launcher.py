#!/usr/bin/env python3
"""Start one pod of a vLLM serving group: the Ray head + vLLM server, or a Ray worker.

    launcher.py leader --group-size N --gpus-per-node G [--ray-port P] [--wait-timeout S] -- CMD...
    launcher.py worker [--leader-address HOST] --gpus-per-node G [--ray-port P] [--wait-timeout S]
    launcher.py check [--max-age S] [--health-url URL]
                                             (liveness: the group heartbeat is fresh and URL answers 200)
    launcher.py placeholder [--read DIR]     (headroom: read DIR's files once, then wait for SIGTERM; exit 0)

leader, N = 1: runs CMD directly (exec); vLLM needs no Ray on one node. Its engine core is forked from the API
    server (VLLM_WORKER_MULTIPROC_METHOD=fork, unless set) instead of spawned, which vLLM's CLI would choose: a
    spawned engine core imports torch and vLLM a second time (~19 s of a 60 s warm start on H200,
    docs/benchmarks.md). Multi-node groups keep spawn (not measured with fork).
leader, N > 1: starts the Ray head; waits until N nodes and N x G GPUs have joined, or exits 1
    after S seconds naming what is missing; runs CMD; checks the Ray nodes every second and, when
    one is lost, stops CMD and exits 3 so the LeaderWorkerSet recreates the group. CMD exiting on its
    own is a failure too (exit 3 if a node is gone, else CMD's code or 5), even with code 0. On SIGTERM
    it forwards the signal to CMD, waits for it to drain, then stops Ray.
worker: waits (bounded) until the head's port answers, joins with `ray start --block` and exits
    non-zero when Ray does.
--compile-cache-store DIR --compile-cache-key KEY (leader and worker): before anything starts, vLLM's cache root
    (VLLM_CACHE_ROOT, as vLLM derives it) is filled from DIR/KEY/pod-INDEX.tar when a pod of the same layout left
    one there; once the group's API answers /health, a background `publish-cache` writes this pod's cache there
    if none is yet (written to a temporary name, then renamed: a reader never sees half a file; pods publishing at
    once each write a whole archive); it gives up when the process that started it is gone. Absent, unreadable
    or stale archives only cost the compile vLLM does anyway (its cache is keyed by its own hash of config and
    code). INDEX is LWS_WORKER_INDEX (0 for the leader). Triton's kernel cache is moved into that root
    (TRITON_CACHE_DIR, unless set): by default it lives under HOME, outside what is carried, and on H200 the
    warm start spent ~13 s re-compiling vLLM's own Triton kernels (docs/benchmarks.md, "Engine start levers").
Standard library and Ray only. One log line per state change; every failure is one line.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

STATE_DIR = Path(os.environ.get("VLLM_GKE_STATE_DIR", "/tmp/vllm-gke"))
HEARTBEAT = "group-ok"
EXIT_JOIN_TIMEOUT, EXIT_NODE_LOST, EXIT_RAY_FAILED, EXIT_SERVER_STOPPED = 1, 3, 4, 5
# Ray's GCS marks a node dead after failure_threshold consecutive failed health checks, one every period,
# each allowed `timeout`: Ray's own defaults (src/ray/common/ray_config_def.h: 3000 ms, 10000 ms, 5), written
# out so they are visible. A node is declared dead 15 s (process gone) to ~65 s (host silent) after it stops
# answering, so a network or GCS stall of a few seconds never recreates a whole multi-node group. A worker
# that really dies is noticed sooner by vLLM's own executor (~2 s on H200s, docs/benchmarks.md), whose exit
# ends the group through this launcher. The 1 s x 5 used before turned any 5 s stall into a group restart.
RAY_HEALTH_ENV = {"RAY_health_check_period_ms": "3000", "RAY_health_check_timeout_ms": "10000",
                  "RAY_health_check_failure_threshold": "5", "RAY_USAGE_STATS_ENABLED": "0"}


def log(role: str, message: str) -> None:
    print(f"[launcher {role}] {message}", flush=True)


def fail(role: str, code: int, message: str) -> int:
    print(f"[launcher {role}] ERROR: {message}", file=sys.stderr, flush=True)
    return code


def node_ip() -> str:
    return os.environ.get("POD_IP") or socket.gethostbyname(socket.gethostname())


def ray_cli() -> list[str]:
    return [sys.executable, "-m", "ray.scripts.scripts"]


def ray_env() -> dict[str, str]:
    return {**os.environ, **RAY_HEALTH_ENV}


def port_args(args: argparse.Namespace) -> list[str]:
    out = []
    for flag, value in (("--node-manager-port", args.node_manager_port),
                        ("--object-manager-port", args.object_manager_port)):
        if value:
            out += [flag, str(value)]
    return out


def stop_ray(role: str, timeout: float) -> None:
    if "ray" in sys.modules and sys.modules["ray"].is_initialized():
        sys.modules["ray"].shutdown()  # detach our driver first, or it reports the raylet's exit as a crash
    cmd = [*ray_cli(), "stop", "--force"]
    try:
        subprocess.run(cmd, env=ray_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
                       timeout=timeout)
        log(role, "ray stopped")
    except subprocess.TimeoutExpired:
        log(role, f"ray stop did not finish within {timeout:.0f} s; leaving the rest to the pod's end")


def cluster_state(address: str) -> tuple[int, float, list[str]]:
    """(alive nodes, alive GPUs, descriptions of dead nodes) as the head's GCS sees them."""
    import ray

    if not ray.is_initialized():
        handler = signal.getsignal(signal.SIGTERM)
        ray.init(address=address, logging_level="ERROR", log_to_driver=False, configure_logging=False)
        # Ray's core worker replaces the SIGTERM handler with one that aborts; drain needs ours back.
        signal.signal(signal.SIGTERM, handler)
    alive, gpus, dead = 0, 0.0, []
    for node in ray.nodes():
        if node.get("Alive"):
            alive += 1
            gpus += node.get("Resources", {}).get("GPU", 0.0)
        else:
            dead.append(node.get("NodeManagerAddress", "?"))
    return alive, gpus, dead


def write_heartbeat() -> None:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    (STATE_DIR / HEARTBEAT).write_text(str(time.time()))


def stop_child(role: str, child: subprocess.Popen, timeout: float) -> int:
    if child.poll() is None:
        os.killpg(child.pid, signal.SIGTERM)
        try:
            child.wait(timeout)
        except subprocess.TimeoutExpired:
            log(role, f"server did not stop within {timeout:.0f} s; killing it")
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    return child.returncode


def leader(args: argparse.Namespace) -> int:
    role = "leader"
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        return fail(role, 2, "no server command given after --")
    if args.compile_cache_store:
        restore_cache(role, args.compile_cache_store, args.compile_cache_key)
        start_publisher(role, args, f"http://127.0.0.1:{args.api_port}/health")
    if args.group_size == 1:
        log(role, "group of one node: starting the server without Ray")
        os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "fork")
        os.execvp(command[0], command)
    ip = args.node_ip or node_ip()
    address = f"{ip}:{args.ray_port}"
    start = [*ray_cli(), "start", "--head", f"--port={args.ray_port}", f"--node-ip-address={ip}",
             f"--num-gpus={args.gpus_per_node}", "--include-dashboard=false", "--disable-usage-stats",
             *port_args(args)]
    if args.temp_dir:
        start.append(f"--temp-dir={args.temp_dir}")
    result = subprocess.run(start, env=ray_env(), capture_output=True, text=True, check=False)
    if result.returncode:
        tail = (result.stderr.strip().splitlines() or ["no output"])[-1]
        return fail(role, EXIT_RAY_FAILED, f"ray start --head failed ({tail})")
    log(role, f"ray head up at {address}; waiting for {args.group_size} nodes / "
              f"{args.group_size * args.gpus_per_node} GPUs")
    os.environ["RAY_ADDRESS"] = address

    terminated = {"flag": False}
    signal.signal(signal.SIGTERM, lambda *_: terminated.update(flag=True))
    deadline = time.monotonic() + args.wait_timeout
    want_gpus = args.group_size * args.gpus_per_node
    alive, gpus = 0, 0.0
    while True:
        if terminated["flag"]:
            stop_ray(role, args.ray_stop_timeout)
            return 0
        try:
            alive, gpus, _ = cluster_state(address)
        except Exception as exc:  # the GCS may still be starting
            log(role, f"waiting for the Ray GCS ({type(exc).__name__})")
        if alive >= args.group_size and gpus >= want_gpus:
            break
        if time.monotonic() > deadline:
            stop_ray(role, args.ray_stop_timeout)
            return fail(role, EXIT_JOIN_TIMEOUT,
                        f"only {alive}/{args.group_size} Ray nodes joined after {args.wait_timeout:.0f} s "
                        f"(missing: {args.group_size - alive} node(s), {want_gpus - gpus:g} GPU(s))")
        time.sleep(1)
    log(role, f"group complete: {alive} nodes, {gpus:g} GPUs; starting the server")

    child = subprocess.Popen(command, start_new_session=True)
    write_heartbeat()
    while True:
        if terminated["flag"]:
            log(role, f"SIGTERM: draining the server (up to {args.drain_timeout:.0f} s)")
            code = stop_child(role, child, args.drain_timeout)
            stop_ray(role, args.ray_stop_timeout)
            log(role, f"server exited with {code} after drain")
            return 0
        code = child.poll()
        if code is not None:
            # Nobody asked it to stop, so this is a failure whatever the code: vLLM exits 0 when its Ray
            # executor loses a worker (seen with 0.25.1 on H200s, docs/benchmarks.md). A lost node is named.
            try:
                alive, gpus, dead = cluster_state(address)
            except Exception:
                alive, gpus, dead = 0, 0.0, []
            stop_ray(role, args.ray_stop_timeout)
            if alive < args.group_size or gpus < want_gpus:
                return fail(role, EXIT_NODE_LOST, f"server exited with {code} after a Ray node was lost "
                                                  f"({alive}/{args.group_size} nodes alive, dead: "
                                                  f"{', '.join(dead) or 'unknown'})")
            return fail(role, code or EXIT_SERVER_STOPPED, f"server exited with {code} without being asked to stop")
        try:
            alive, gpus, dead = cluster_state(address)
        except Exception as exc:
            alive, gpus, dead = 0, 0.0, [f"GCS unreachable: {type(exc).__name__}"]
        if alive < args.group_size or gpus < want_gpus:
            message = (f"Ray node lost ({alive}/{args.group_size} nodes alive, dead: {', '.join(dead) or 'unknown'}); "
                       "stopping the server so the group is recreated")
            log(role, message)
            stop_child(role, child, 10)
            stop_ray(role, args.ray_stop_timeout)
            return fail(role, EXIT_NODE_LOST, message)
        write_heartbeat()
        time.sleep(1)


def vllm_cache_root() -> Path:
    """Where vLLM keeps torch.compile, Inductor and Triton artifacts (vllm/envs.py: VLLM_CACHE_ROOT, else
    $XDG_CACHE_HOME/vllm, else ~/.cache/vllm)."""
    if os.environ.get("VLLM_CACHE_ROOT"):
        return Path(os.environ["VLLM_CACHE_ROOT"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vllm"


def cache_archive(store: str, key: str) -> Path:
    return Path(store) / key / f"pod-{os.environ.get('LWS_WORKER_INDEX', '0')}.tar"


def extract_plain_files(tar: Any, members: list[Any], into: Path) -> None:
    """Extract an archive of regular files and directories inside `into`, refusing any other member (links,
    devices) and any path that leaves `into`: what tarfile's "data" filter does, which Python before 3.11.4 lacks
    (Debian 12 has 3.11.2); there it raises TypeError on `filter=`."""
    import tarfile

    base = into.resolve()
    for member in members:
        target = (base / member.name).resolve()
        if not (member.isfile() or member.isdir()) or (target != base and base not in target.parents):
            raise tarfile.TarError(f"refused member {member.name!r}: only files and directories inside the cache")
    if hasattr(tarfile, "data_filter"):
        tar.extractall(into, members, filter="data")
    else:
        for member in members:  # no set-id bits or owners from the archive, as the data filter would drop them
            member.mode &= 0o755
            member.uid = member.gid = os.getuid()
        tar.extractall(into, members)


def carry_triton_cache() -> None:
    """Point Triton's cache into vLLM's cache root, so the archive carries it (Triton reads TRITON_CACHE_DIR, else
    ~/.triton/cache: triton/runtime/cache.py). Triton keys each kernel by its source, the GPU and its own version,
    so a restored kernel that does not match is compiled again, never misused. An explicit setting wins."""
    os.environ.setdefault("TRITON_CACHE_DIR", str(vllm_cache_root() / "triton"))


def restore_cache(role: str, store: str, key: str) -> None:
    """Fill vLLM's cache root from the store's archive for this layout and pod, when there is one."""
    import tarfile

    carry_triton_cache()

    archive, root = cache_archive(store, key), vllm_cache_root()
    if not archive.is_file():
        log(role, f"compile cache: no {archive} yet; vLLM compiles and this pod publishes its cache")
        return
    t0 = time.monotonic()
    staging = root.parent / f".{root.name}-restore-{os.getpid()}"
    try:
        with tarfile.open(archive) as tar:
            members = tar.getmembers()
            extract_plain_files(tar, members, staging)
        root.parent.mkdir(parents=True, exist_ok=True)
        for item in staging.iterdir():  # merged into the cache root (empty in a fresh pod)
            target = root / item.name
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                item.rename(target)
        size = sum(m.size for m in members)
        log(role, f"compile cache: restored {len(members)} entries, {size / 2**20:.1f} MiB from {archive} in "
                  f"{time.monotonic() - t0:.1f} s")
    except (OSError, tarfile.TarError) as exc:
        log(role, f"compile cache: {archive} not restored ({type(exc).__name__}: {exc}); vLLM compiles")
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def start_publisher(role: str, args: argparse.Namespace, health_url: str) -> None:
    """`publish-cache` in the background, watching this process: a one-node leader execs into the server with the
    same PID, so the publisher ends with the server (or the launcher) instead of polling a port that another
    server may answer later."""
    subprocess.Popen([sys.executable, os.path.abspath(__file__), "publish-cache", "--store", args.compile_cache_store,
                      "--key", args.compile_cache_key, "--health-url", health_url,
                      "--timeout", str(args.compile_cache_timeout), "--parent", str(os.getpid())],
                     start_new_session=True)
    log(role, f"compile cache: publishing after {health_url} answers")


def publish_cache(args: argparse.Namespace) -> int:
    """Wait for the group's API, then write this pod's vLLM cache to the store unless an archive is there."""
    import tarfile
    import urllib.request

    role = "publish"
    deadline = time.monotonic() + args.timeout
    while True:
        if args.parent and os.getppid() != args.parent:  # re-parented: the process it was started for is gone
            return fail(role, 1, f"compile cache: process {args.parent} (the server or its launcher) exited before "
                                 f"{args.health_url} answered; nothing published")
        try:
            with urllib.request.urlopen(args.health_url, timeout=5) as response:
                if response.status == 200:
                    break
        except Exception:  # not up yet
            pass
        if time.monotonic() > deadline:
            return fail(role, 1, f"compile cache: {args.health_url} did not answer within {args.timeout:.0f} s; "
                                 "nothing published")
        time.sleep(2)
    archive, root = cache_archive(args.store, args.key), vllm_cache_root()
    if archive.exists():
        log(role, f"compile cache: {archive} exists; not published again")
        return 0
    if not root.is_dir() or not any(root.iterdir()):
        return fail(role, 1, f"compile cache: {root} is empty; nothing to publish")
    t0 = time.monotonic()
    partial = archive.with_name(f".{archive.name}.{socket.gethostname()}-{os.getpid()}")
    try:
        archive.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(partial, "w") as tar:
            for item in sorted(root.iterdir()):
                tar.add(item, arcname=item.name)
        os.replace(partial, archive)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        return fail(role, 1, f"compile cache: writing {archive} failed ({exc})")
    log(role, f"compile cache: published {archive.stat().st_size / 2**20:.1f} MiB to {archive} in "
              f"{time.monotonic() - t0:.1f} s")
    return 0


def wait_for_port(host: str, port: int, deadline: float) -> bool:
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=2):
                return True
        except OSError:
            time.sleep(1)
    return False


def worker(args: argparse.Namespace) -> int:
    role = "worker"
    head = args.leader_address or os.environ.get("LWS_LEADER_ADDRESS")
    if not head:
        return fail(role, 2, "no --leader-address and LWS_LEADER_ADDRESS is unset")
    log(role, f"waiting for the Ray head at {head}:{args.ray_port}")
    if not wait_for_port(head, args.ray_port, time.monotonic() + args.wait_timeout):
        return fail(role, EXIT_JOIN_TIMEOUT,
                    f"Ray head {head}:{args.ray_port} did not answer within {args.wait_timeout:.0f} s")
    if args.compile_cache_store:
        restore_cache(role, args.compile_cache_store, args.compile_cache_key)
        start_publisher(role, args, f"http://{head}:{args.api_port}/health")
    ip = args.node_ip or node_ip()
    start = [*ray_cli(), "start", f"--address={head}:{args.ray_port}", f"--node-ip-address={ip}",
             f"--num-gpus={args.gpus_per_node}", "--disable-usage-stats", "--block", *port_args(args)]
    if args.temp_dir:
        start.append(f"--temp-dir={args.temp_dir}")
    log(role, f"joining {head}:{args.ray_port} with {args.gpus_per_node} GPUs")
    child = subprocess.Popen(start, env=ray_env(), start_new_session=True)
    signal.signal(signal.SIGTERM, lambda *_: os.killpg(child.pid, signal.SIGTERM))
    code = child.wait()
    if code:
        return fail(role, code, f"ray exited with {code}")
    log(role, "ray exited")
    return 0


def check(args: argparse.Namespace) -> int:
    """Liveness of a multi-node leader. Kubelet runs it only after the startup probe passed, i.e. once the
    server answered, so a missing heartbeat means the launcher is not supervising the group: a failure."""
    beat = STATE_DIR / HEARTBEAT
    if not beat.exists():
        return fail("check", 1, f"no group heartbeat at {beat}: the launcher is not watching the group")
    try:
        age = time.time() - float(beat.read_text() or 0)
    except ValueError:
        return fail("check", 1, f"unreadable group heartbeat at {beat}")
    if age > args.max_age:
        return fail("check", 1, f"group heartbeat is {age:.0f} s old (max {args.max_age:.0f} s)")
    if args.health_url:
        import urllib.request

        try:
            with urllib.request.urlopen(args.health_url, timeout=args.health_timeout) as response:
                status = response.status
        except Exception as exc:  # refused, timed out, HTTP error: the server is not healthy
            return fail("check", 1, f"{args.health_url} did not answer ({type(exc).__name__}: {exc})")
        if status != 200:
            return fail("check", 1, f"{args.health_url} answered {status}")
    return 0


def placeholder(args: argparse.Namespace) -> int:
    """A headroom pod: holds a serving-shaped slot (and the vLLM image on its node) until it is preempted. With
    --read, every file under DIR is read once first, so the node's page cache holds the weights for the replica
    that takes the slot. SIGTERM ends it at once with 0: preemption must not wait on a placeholder."""
    role = "placeholder"
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    if args.read:
        t0, total = time.monotonic(), 0
        for path in sorted(Path(args.read).rglob("*")):
            if stop["now"]:
                break
            if path.is_file() and not path.is_symlink():
                try:
                    with path.open("rb", buffering=0) as handle:
                        while not stop["now"] and (chunk := handle.read(16 << 20)):
                            total += len(chunk)
                except OSError as exc:
                    log(role, f"could not read {path} ({exc}); going on")
        log(role, f"read {total / 2**30:.2f} GiB under {args.read} in {time.monotonic() - t0:.1f} s")
    log(role, "holding the slot until SIGTERM")
    while not stop["now"]:
        time.sleep(0.2)
    log(role, "SIGTERM: giving the slot up")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="role", required=True)
    for name in ("leader", "worker"):
        p = sub.add_parser(name)
        p.add_argument("--gpus-per-node", type=int, required=True)
        p.add_argument("--ray-port", type=int, default=6379)
        p.add_argument("--wait-timeout", type=float, default=600)
        p.add_argument("--node-ip", default=None, help="this node's IP (default: POD_IP or the hostname's)")
        p.add_argument("--node-manager-port", type=int, default=0)
        p.add_argument("--object-manager-port", type=int, default=0)
        p.add_argument("--temp-dir", default=None)
        p.add_argument("--compile-cache-store", default=None, help="directory shared by the layout's pods")
        p.add_argument("--compile-cache-key", default=None, help="the layout's key (vLLM, GPU, TP/PP, length, dtype)")
        p.add_argument("--compile-cache-timeout", type=float, default=3600)
        p.add_argument("--api-port", type=int, default=8000, help="the leader's API port (publishing waits on it)")
    pub = sub.add_parser("publish-cache")
    pub.add_argument("--store", required=True)
    pub.add_argument("--key", required=True)
    pub.add_argument("--health-url", required=True)
    pub.add_argument("--timeout", type=float, default=3600)
    pub.add_argument("--parent", type=int, default=0,
                     help="stop waiting once this process (the one that started the publisher) is gone")
    lead = sub.choices["leader"]
    lead.add_argument("--group-size", type=int, required=True)
    lead.add_argument("--drain-timeout", type=float, default=60)
    lead.add_argument("--ray-stop-timeout", type=float, default=20)
    lead.add_argument("command", nargs=argparse.REMAINDER)
    sub.choices["worker"].add_argument("--leader-address", default=None)
    chk = sub.add_parser("check")
    chk.add_argument("--max-age", type=float, default=30)
    chk.add_argument("--health-url", default=None, help="also require HTTP 200 from this URL")
    chk.add_argument("--health-timeout", type=float, default=5)
    hold = sub.add_parser("placeholder")
    hold.add_argument("--read", default=None, help="read every file under this directory once before waiting")
    args = parser.parse_args(argv)
    if args.role in ("leader", "worker") and args.gpus_per_node < 0:
        parser.error("--gpus-per-node must be >= 0")
    if args.role == "leader" and args.group_size < 1:
        parser.error("--group-size must be >= 1")
    if args.role in ("leader", "worker") and bool(args.compile_cache_store) != bool(args.compile_cache_key):
        parser.error("--compile-cache-store and --compile-cache-key go together")
    if args.role in ("leader", "worker") and args.compile_cache_key and not all(
            c.isalnum() or c in "-_." for c in args.compile_cache_key):
        parser.error(f"--compile-cache-key {args.compile_cache_key!r}: letters, digits, '-', '_' and '.' only")
    return {"leader": leader, "worker": worker, "check": check, "publish-cache": publish_cache,
            "placeholder": placeholder}[args.role](args)


if __name__ == "__main__":
    sys.exit(main())
