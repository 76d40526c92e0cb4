"""Run a rendered Pod template on this machine as it declares itself, and nothing more permissive.

    with PodNetwork() as net:
        pod = Pod(template_spec, objects, namespace="vllm", name="leader", network=net, claims={...})
        pod.start(); pod.wait_started(); pod.probe("readinessProbe"); pod.stop()

What a pod gets, from its spec:
- its own network namespace with one interface named eth0 on a bridge (10.231.0.0/24): the pod IP that
  `fieldRef status.podIP` resolves to; pods of a group reach each other and the host reaches every pod;
- user and group from runAsUser/runAsGroup with no passwd entry, fsGroup as supplementary group, no new
  privileges, an empty capability set (setpriv), in its own PID, IPC and UTS namespaces;
- readOnlyRootFilesystem: this machine's root read-only (bubblewrap), the declared volumes mounted where the
  container says: emptyDir -> a fresh directory (group fsGroup, setgid, like kubelet), or a real tmpfs of
  sizeLimit when medium is Memory; persistentVolumeClaim -> a host directory given per claim, read-only when the
  volume or mount says so; csi -> a host directory given per volume (`csi=`, e.g. a bucket's stand-in);
  configMap -> the rendered ConfigMap's files with defaultMode, read-only;
- env exactly as rendered, `$(VAR)` expanded as Kubernetes does, `secretKeyRef` from the values given, plus the
  image's env (PATH, and what the image sets) and, for LeaderWorkerSet pods, what the LWS controller injects;
- probes run as the kubelet runs them (httpGet/tcpSocket against the pod IP, exec inside the same sandbox), with
  the rendered periods, thresholds and timeouts; stop = preStop, then SIGTERM to the container process, then
  SIGKILL at terminationGracePeriodSeconds.
Service account (`service_account=`): kubelet's token volume (token, ca.crt, namespace) at the usual path, for pods
that do not opt out; KUBERNETES_SERVICE_HOST/PORT come with `injected_env`.
GPUs (`gpus=`): only the device nodes of the GPUs handed to the pod, as the NVIDIA device plugin mounts them.
Resource requests and limits are not enforced here (scheduling is planner/cluster_rules.py's part).
Needs root, bubblewrap (`bwrap`), util-linux `setpriv` and iproute2 (`ip`); tests that use it are marked `root`
(tools/run_tests.sh runs them through sudo -n when make test runs as another user).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

SUBNET = "10.231.0"
HOST_IP = f"{SUBNET}.1"
"""This machine's address on the pods' bridge: where a pod reaches servers the test runs (an API server stand-in)."""
ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


class PodNetwork:
    """A bridge the pods' eth0 interfaces join; torn down with every pod namespace on exit."""

    def __init__(self) -> None:
        self.tag = str(os.getpid())  # interface names stay within 15 characters: "vgk" + 7 digits + "h" + n
        self.bridge = f"vgkb{self.tag}"
        self.next_host = 2
        self.namespaces: list[str] = []
        self.veths: list[str] = []

    def __enter__(self) -> PodNetwork:
        if os.geteuid() != 0:
            raise PermissionError("tools/pod_runner.py runs pods as root (bubblewrap, network namespaces, setpriv); "
                                  "as another user, `make test` runs the tests marked root through sudo -n")
        remove_stale_networks()
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{HOST_IP}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        return self

    def add(self) -> tuple[str, str]:
        """A new network namespace with eth0 on the bridge: (namespace name, pod IP)."""
        n = self.next_host
        self.next_host += 1
        ns, host, peer = f"vgk{self.tag}-{n}", f"vgk{self.tag}h{n}", f"vgk{self.tag}p{n}"
        _ip("netns", "add", ns)
        # Owned from here on: a step below that fails (seen once under memory pressure: `ip link add` exited 2)
        # must not leave the namespace or a veth behind for the next pod of this run, which reuses the names.
        self.namespaces.append(ns)
        self.veths.append(host)
        _ip("link", "add", host, "type", "veth", "peer", "name", peer)
        _ip("link", "set", peer, "netns", ns)
        _ip("link", "set", host, "master", self.bridge)
        _ip("link", "set", host, "up")
        for args in (("link", "set", peer, "name", "eth0"), ("addr", "add", f"{SUBNET}.{n}/24", "dev", "eth0"),
                     ("link", "set", "eth0", "up"), ("link", "set", "lo", "up")):
            _ip("netns", "exec", ns, "ip", *args)
        return ns, f"{SUBNET}.{n}"

    def __exit__(self, *_: Any) -> None:
        for ns in self.namespaces:
            _delete_namespace(ns)
        for host in self.veths:  # gone with its namespace once the peer moved there; a failed add may leave it
            subprocess.run(["ip", "link", "del", host], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)


def csi_stand_ins(spec: dict[str, Any], root: Path) -> dict[str, Path]:
    """A directory under `root` for each CSI volume of a pod spec (what GCS FUSE would mount: the compile-cache
    bucket), owned as the volume's uid/gid mount options make the mount; shared by every pod given the same root."""
    found = {}
    for volume in spec.get("volumes") or []:
        if "csi" not in volume:
            continue
        options = dict(o.split("=", 1) for o in volume["csi"].get("volumeAttributes", {}).get(
            "mountOptions", "").split(",") if "=" in o)
        path = root / volume["name"]
        path.mkdir(parents=True, exist_ok=True)
        os.chown(path, int(options.get("uid", 0)), int(options.get("gid", 0)))
        found[volume["name"]] = path
    return found


def _resolved(path: str) -> str:
    """`path` with the links in its existing part resolved: /var/run is a link to /run on this machine's root, and
    a mount below it must be made where the link leads."""
    head, rest = path, []
    while not os.path.exists(head):
        head, tail = os.path.split(head)
        rest.insert(0, tail)
    return os.path.join(os.path.realpath(head), *rest)


def _delete_namespace(ns: str) -> None:
    """Kill what still runs in a pod's network namespace, then remove the namespace (and its veth pair)."""
    for pid in subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split():
        with _quiet():
            os.kill(int(pid), signal.SIGKILL)
    subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def remove_stale_networks() -> None:
    """Bridges and namespaces a killed run left behind. A second bridge on the same subnet makes every new pod
    unreachable (the kernel routes 10.231.0.0/24 through the older one): seen on the GPU host after a run was
    killed. A bridge whose owner is alive is another run's, and this one refuses to start beside it."""
    links = subprocess.run(["ip", "-o", "link", "show", "type", "bridge"], capture_output=True, text=True).stdout
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    for bridge, tag in re.findall(r"^\d+: (vgkb(\d+))[:@]", links, re.M):
        if psutil.pid_exists(int(tag)) and int(tag) != os.getpid():
            raise RuntimeError(f"pod network {bridge} of live process {tag} holds {SUBNET}.0/24; stop that run first")
        for ns in (n for n in namespaces if n.startswith(f"vgk{tag}-")):
            _delete_namespace(ns)
        subprocess.run(["ip", "link", "del", bridge], capture_output=True)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def _quiet() -> contextlib.suppress:
    """The process may be gone already."""
    return contextlib.suppress(ProcessLookupError, psutil.NoSuchProcess, OSError)


@dataclass
class ProbeResult:
    ok: bool
    detail: str
    at: float = field(default_factory=time.monotonic)


class Pod:
    """One container of a rendered pod template, run under what the template declares."""

    def __init__(self, spec: dict[str, Any], objects: list[dict[str, Any]], namespace: str, name: str,
                 network: PodNetwork, claims: dict[str, Path] | None = None,
                 secrets: dict[tuple[str, str], str] | None = None, image_env: dict[str, str] | None = None,
                 injected_env: dict[str, str] | None = None, command: list[str] | None = None,
                 log: Path | None = None, image_paths: tuple[str, ...] = (), gpus: tuple[int, ...] = (),
                 service_account: dict[str, str] | None = None, csi: dict[str, Path] | None = None) -> None:
        if len(spec.get("containers") or []) != 1:
            raise ValueError("the runner runs pods of exactly one container")
        self.spec, self.container = spec, spec["containers"][0]
        self.objects, self.namespace, self.name = objects, namespace, name
        self.claims, self.secrets, self.csi = claims or {}, secrets or {}, csi or {}
        self.image_env, self.injected_env = image_env or {}, injected_env or {}
        self.command = command or self.container["command"]
        self.image_paths = image_paths
        self.gpus = gpus
        self.netns, self.ip = network.add()
        self.work = Path(tempfile.mkdtemp(prefix=f"pod-{name}-", dir="/tmp"))
        os.chmod(self.work, 0o755)
        self.log = log or self.work / "container.log"
        self.proc: subprocess.Popen | None = None
        self.started_at = 0.0
        self.mounted: list[Path] = []
        security = self.container.get("securityContext") or {}
        if not security.get("readOnlyRootFilesystem"):
            raise ValueError(f"{name}: the runner runs read-only roots only, as every vllm-gke pod declares")
        pod_security = spec.get("securityContext") or {}
        self.uid = int(security.get("runAsUser", pod_security.get("runAsUser", 0)))
        self.gid = int(security.get("runAsGroup", pod_security.get("runAsGroup", self.uid)))
        self.fs_group = pod_security.get("fsGroup")
        self.service_account = service_account
        self.binds = self._volumes() + self._account_token()
        self.env = self._env()

    # ------------------------------------------------------------------ volumes and env

    def _object(self, kind: str, name: str) -> dict[str, Any]:
        for obj in self.objects:
            meta = obj.get("metadata") or {}
            if obj.get("kind") == kind and meta.get("name") == name and meta.get("namespace") in (None, self.namespace):
                return obj
        raise KeyError(f"{kind} {name} is not among the rendered objects")

    def _volumes(self) -> list[str]:
        volumes = {v["name"]: v for v in self.spec.get("volumes") or []}
        binds: list[str] = []
        for mount in self.container.get("volumeMounts") or []:
            volume, target = volumes[mount["name"]], mount["mountPath"]
            host = self.work / "volumes" / mount["name"]
            read_only = bool(mount.get("readOnly"))
            if "emptyDir" in volume:
                host.mkdir(parents=True, exist_ok=True)
                medium = volume["emptyDir"].get("medium")
                if medium == "Memory":
                    size = volume["emptyDir"].get("sizeLimit", "64Mi")
                    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size.replace('i', '')}", "tmpfs", str(host)],
                                   check=True)
                    self.mounted.append(host)
                # kubelet: an emptyDir is world-writable, or group fsGroup with setgid when one is set
                if self.fs_group is not None:
                    os.chown(host, 0, int(self.fs_group))
                    os.chmod(host, 0o2775)
                else:
                    os.chmod(host, 0o1777)
            elif "persistentVolumeClaim" in volume:
                claim = volume["persistentVolumeClaim"]
                host = self.claims[claim["claimName"]]
                read_only = read_only or bool(claim.get("readOnly"))
            elif "configMap" in volume:
                data = self._object("ConfigMap", volume["configMap"]["name"]).get("data") or {}
                host.mkdir(parents=True, exist_ok=True)
                mode = int(volume["configMap"].get("defaultMode", 0o644))
                for key, text in data.items():
                    (host / key).write_text(text)
                    os.chmod(host / key, mode)
                os.chmod(host, 0o755)
                read_only = True  # kubelet mounts ConfigMaps read-only whatever the mount says
            elif "csi" in volume and mount["name"] in self.csi:
                host = self.csi[mount["name"]]  # what the CSI driver would mount there (a bucket through FUSE)
                read_only = read_only or bool(volume["csi"].get("readOnly"))
            else:
                raise ValueError(f"volume {mount['name']}: kind not supported by the runner")
            binds += ["--ro-bind" if read_only else "--bind", str(host), target]
        return binds

    def _account_token(self) -> list[str]:
        """kubelet's service-account volume: token, ca.crt and namespace under ACCOUNT_DIR, read-only, for pods that
        do not opt out (automountServiceAccountToken). `service_account` holds the files' text."""
        if self.service_account is None:
            return []
        if self.spec.get("automountServiceAccountToken") is False:
            raise ValueError(f"{self.name}: the pod opts out of its service-account token")
        host = self.work / "serviceaccount"
        host.mkdir()
        for key in ("token", "ca.crt", "namespace"):
            (host / key).write_text(self.service_account.get(key, self.namespace if key == "namespace" else ""))
            os.chmod(host / key, 0o644)
        os.chmod(host, 0o755)
        return ["--ro-bind", str(host), _resolved(ACCOUNT_DIR)]

    def _env(self) -> dict[str, str]:
        env = dict(self.image_env)
        for name, value in self.injected_env.items():
            env[name] = value
        for item in self.container.get("env") or []:
            if "value" in item:
                env[item["name"]] = re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                                           lambda m: env.get(m.group(1), m.group(0)), str(item["value"]))
                continue
            source = item.get("valueFrom") or {}
            if source.get("fieldRef", {}).get("fieldPath") == "status.podIP":
                env[item["name"]] = self.ip
            elif "secretKeyRef" in source:
                ref = source["secretKeyRef"]
                env[item["name"]] = self.secrets[(ref["name"], ref["key"])]
            else:
                raise ValueError(f"env {item['name']}: source not supported by the runner")
        return env

    # ------------------------------------------------------------------ running

    def _root(self) -> list[str]:
        """This machine's root as the container image, read-only. Mount points a pod needs that the host lacks
        (/models, /data, /opt/vllm-gke) must be created, so the root is built on bubblewrap's tmpfs: every host
        entry bound read-only, a directory that holds a new mount point bound entry by entry, and the root
        remounted read-only once the volumes are in place."""
        # The image's own paths count as mount points too: their parents are rebuilt 0755 as in an image, so a
        # checkout under a 0700 directory (`mktemp -d`) does not hide the image's Python from the pod's user.
        targets = {self.binds[i + 2] for i in range(0, len(self.binds), 3)} | set(self.image_paths)
        expand = {str(parent) for t in targets for parent in Path(t).parents
                  if str(parent) != "/" and os.path.isdir(parent)}
        argv: list[str] = []

        def add(directory: str) -> None:
            if directory != "/":  # bubblewrap would create it 0700, unreadable to the pod's user
                argv.extend(["--perms", "0755", "--dir", directory])
            for entry in sorted(os.listdir(directory)):
                path = os.path.join(directory, entry)
                if path in targets or path in ("/proc", "/dev", "/root"):
                    continue
                if os.path.islink(path):
                    argv.extend(["--symlink", os.readlink(path), path])
                elif path in expand:
                    add(path)
                else:
                    argv.extend(["--ro-bind", path, path])

        add("/")
        for target in sorted(targets):  # parents of mount points the host lacks, e.g. /stand-in for a file
            for parent in reversed(Path(target).parents):
                if str(parent) != "/" and not os.path.exists(parent):
                    argv.extend(["--perms", "0755", "--dir", str(parent)])
        # /root is 0700 here and the image's Python lives under it: only that is bound, in a readable /root.
        python_home = ["--ro-bind", "/root/.pyenv", "/root/.pyenv"] if os.path.isdir("/root/.pyenv") else []
        return [*argv, "--perms", "0755", "--dir", "/root", *python_home, "--dev", "/dev", *self._devices(),
                "--proc", "/proc"]

    def _devices(self) -> list[str]:
        """The device nodes of the GPUs given to this pod, as the NVIDIA device plugin hands them over: the
        control and UVM nodes plus /dev/nvidiaN per allocated GPU; the host's other GPUs are not there."""
        if not self.gpus:
            return []
        nodes = [f"/dev/nvidia{i}" for i in self.gpus] + [
            path for path in ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools") if os.path.exists(path)]
        return [arg for node in nodes for arg in ("--dev-bind", node, node)]

    def _image_binds(self) -> list[str]:
        """The image's own files (its Python environment), bound read-only even where a volume covers the host's
        path (a checkout under /tmp); directories made inside a volume for them are readable (bwrap uses 0700)."""
        targets = [self.binds[i + 2].rstrip("/") for i in range(0, len(self.binds), 3)]
        argv: list[str] = []
        for path in self.image_paths:
            for parent in reversed(Path(path).parents):
                if any(str(parent).startswith(t + "/") for t in targets):
                    argv += ["--perms", "0755", "--dir", str(parent)]
            argv += ["--ro-bind", path, path]
        return argv

    def sandbox(self, command: list[str], env: dict[str, str] | None = None) -> list[str]:
        """The argv that runs `command` in this pod: its netns, read-only root, mounts, user, env."""
        argv = ["ip", "netns", "exec", self.netns, "bwrap", *self._root(),
                # The container's command is PID 1 of its namespace, as in a pod: SIGTERM reaches it only if it
                # handles the signal.
                "--unshare-pid", "--as-pid-1", "--unshare-ipc", "--unshare-uts", "--hostname", self.name,
                "--chdir", "/", *self.binds, *self._image_binds(), "--remount-ro", "/", "--clearenv"]
        for key, value in (env if env is not None else self.env).items():
            argv += ["--setenv", key, value]
        groups = [str(self.fs_group)] if self.fs_group is not None else []
        argv += ["--", "setpriv", f"--reuid={self.uid}", f"--regid={self.gid}",
                 *([f"--groups={','.join(groups)}"] if groups else ["--clear-groups"]),
                 "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--", *command]
        return argv

    def start(self) -> None:
        self.proc = subprocess.Popen(self.sandbox(self.command), stdout=self.log.open("w"), stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.started_at = time.monotonic()

    def container_pid(self) -> int:
        """The container's own process (what kubelet signals), not bubblewrap's monitor above it."""
        assert self.proc is not None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with _quiet():
                top = psutil.Process(self.proc.pid)
                for child in top.children(recursive=True):
                    if child.name() != "bwrap" and child.uids().real == self.uid:
                        return child.pid
            time.sleep(0.1)
        raise RuntimeError(f"{self.name}: no container process under bubblewrap")

    def exec(self, command: list[str], timeout: float = 30, env: dict[str, str] | None = None,
             ) -> subprocess.CompletedProcess:
        return subprocess.run(self.sandbox(command, env), capture_output=True, text=True, timeout=timeout)

    def _port(self, port: Any) -> int:
        if isinstance(port, int) or str(port).isdigit():
            return int(port)
        return next(int(p["containerPort"]) for p in self.container.get("ports") or [] if p.get("name") == port)

    def probe(self, kind: str) -> ProbeResult:
        """One run of the container's startupProbe / readinessProbe / livenessProbe, as the kubelet runs it."""
        spec = self.container[kind]
        timeout = float(spec.get("timeoutSeconds", 1))
        if "httpGet" in spec:
            url = f"http://{self.ip}:{self._port(spec['httpGet']['port'])}{spec['httpGet'].get('path', '/')}"
            try:
                with urllib.request.urlopen(url, timeout=timeout) as response:
                    return ProbeResult(200 <= response.status < 400, f"HTTP {response.status}")
            except Exception as exc:  # refused, timed out, HTTP error status
                return ProbeResult(False, f"{type(exc).__name__}: {exc}")
        if "tcpSocket" in spec:
            try:
                with socket.create_connection((self.ip, self._port(spec["tcpSocket"]["port"])), timeout=timeout):
                    return ProbeResult(True, "connected")
            except OSError as exc:
                return ProbeResult(False, str(exc))
        try:
            done = self.exec(spec["exec"]["command"], timeout=timeout)
        except subprocess.TimeoutExpired:
            return ProbeResult(False, f"timed out after {timeout:g} s")
        return ProbeResult(done.returncode == 0, (done.stderr or done.stdout).strip()[-300:])

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_started(self) -> tuple[bool, float, list[ProbeResult]]:
        """The startup probe until it passes or fails failureThreshold times: (passed, seconds, results)."""
        spec = self.container.get("startupProbe") or self.container.get("readinessProbe")
        kind = "startupProbe" if "startupProbe" in self.container else "readinessProbe"
        time.sleep(float(spec.get("initialDelaySeconds", 0)))
        failures, results = 0, []
        while failures < int(spec.get("failureThreshold", 3)):
            result = self.probe(kind)
            results.append(result)
            if result.ok:
                return True, time.monotonic() - self.started_at, results
            failures += 1
            if not self.alive():
                break
            time.sleep(float(spec.get("periodSeconds", 10)))
        return False, time.monotonic() - self.started_at, results

    def watch(self, kind: str, times: int) -> list[ProbeResult]:
        """`times` runs of a probe at its period."""
        period = float(self.container[kind].get("periodSeconds", 10))
        results = []
        for i in range(times):
            if i:
                time.sleep(period)
            results.append(self.probe(kind))
        return results

    def stop(self) -> tuple[int, float, bool]:
        """preStop, SIGTERM to the container process, SIGKILL at the grace period: (exit code, seconds, killed)."""
        assert self.proc is not None
        grace = float(self.spec.get("terminationGracePeriodSeconds", 30))
        begin = time.monotonic()
        pre_stop = (self.container.get("lifecycle") or {}).get("preStop") or {}
        if "sleep" in pre_stop:
            time.sleep(float(pre_stop["sleep"]["seconds"]))
        elif "exec" in pre_stop:
            with _quiet():
                self.exec(pre_stop["exec"]["command"], timeout=grace)
        killed = False
        if self.alive():
            with _quiet():
                os.kill(self.container_pid(), signal.SIGTERM)
            try:
                self.proc.wait(max(0.0, grace - (time.monotonic() - begin)))
            except subprocess.TimeoutExpired:
                killed = True
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        return self.proc.returncode, time.monotonic() - begin, killed

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with _quiet():
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        for host in self.mounted:
            subprocess.run(["umount", "-l", str(host)], capture_output=True)
        shutil.rmtree(self.work, ignore_errors=True)
