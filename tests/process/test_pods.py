"""Rendered pods run as they declare themselves (tools/pod_runner.py): UID 10001 without a passwd entry, read-only
root, only the declared mounts writable, env as rendered, probes as the kubelet runs them, preStop + SIGTERM + grace.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import API_KEY
from tests.helpers import full_config
from tools.mocks import run_program
from tools.pod_runner import Pod, PodNetwork, csi_stand_ins

pytestmark = [pytest.mark.slow, pytest.mark.root]
VENV_BIN = str(Path(sys.executable).parent)
IMAGE = (sys.prefix,)
"""The "image's" Python environment, bound read-only even when the checkout lies under /tmp (a pod's emptyDir)."""
CPU_IMAGE_ENV = {"PATH": f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin", "VLLM_CPU_KVCACHE_SPACE": "1",
                 "OMP_NUM_THREADS": "2", "TRANSFORMERS_OFFLINE": "1"}
"""What a CPU build of the vLLM image sets: its Python first on PATH, the CPU KV-cache size, thread count."""
SECRETS = {("vllm-api-key", "VLLM_API_KEY"): API_KEY}


def objects_for(model_dir: Path, stack: str = "dev", **sections) -> list[dict]:
    config = full_config(stack, model={"id": "test/tiny", "configFile": str(model_dir / "config.json"),
                                       "servedName": "tiny"}, vllm={"maxModelLen": 1024}, apiKey={"secure": "v1:k"},
                         **sections)
    return run_program(config).kubernetes_objects()


def find(objects: list[dict], kind: str, part: str = "") -> dict:
    return next(o for o in objects if o["kind"] == kind and part in o["metadata"]["name"])


def weights_claim(tmp_path: Path, tiny_model: Path) -> Path:
    """A read-only-many volume's content: the weights under model/, as the download Job leaves them."""
    disk = tmp_path / "disk"
    shutil.copytree(tiny_model, disk / "model")
    for path in [disk, *disk.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return disk


def serving_pod(objects: list[dict], net: PodNetwork, tmp_path: Path, tiny_model: Path) -> Pod:
    """The LeaderWorkerSet's leader as its own pod: the weights claim on a copy of the tiny model, the API key
    Secret, a CPU build's image env."""
    spec = find(objects, "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    claim = next(v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"] if "persistentVolumeClaim" in v)
    return Pod(spec, objects, "vllm", "leader", net, claims={claim: weights_claim(tmp_path, tiny_model)},
               secrets=SECRETS, image_env=CPU_IMAGE_ENV, image_paths=IMAGE, log=tmp_path / "leader.log",
               csi=csi_stand_ins(spec, tmp_path / "buckets"))


def chat(ip: str, key: str | None, max_tokens: int = 8) -> tuple[int, dict]:
    body = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "hello"}], "max_tokens": max_tokens,
                       "ignore_eos": True}).encode()
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    request = urllib.request.Request(f"http://{ip}:8000/v1/chat/completions", body, headers)
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, {}


def test_the_one_node_leader_pod_serves_as_declared_and_drains_on_stop(tiny_model, tmp_path):
    objects = objects_for(tiny_model)
    lws = find(objects, "LeaderWorkerSet")
    spec = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    with PodNetwork() as net:
        pod = serving_pod(objects, net, tmp_path, tiny_model)
        try:
            pod.start()
            started, seconds, results = pod.wait_started()
            assert started, f"{len(results)} failed probes: {(tmp_path / 'leader.log').read_text()[-3000:]}"
            print(f"leader pod: startup probe passed after {seconds:.1f} s ({len(results)} probes)")
            assert pod.probe("readinessProbe").ok

            # The container's own view: its UID, no passwd entry, and writes only where a writable mount is.
            who = pod.exec(["python3", "-c", "import os, getpass; print(os.getuid(), os.getgid(), getpass.getuser())"])
            assert who.stdout.split() == ["10001", "10001", "vllm-gke"], who.stderr
            assert pod.exec(["python3", "-c", "open('/opt/x', 'w')"]).returncode != 0, "the root must be read-only"
            assert pod.exec(["python3", "-c", "open('/models/model/x', 'w')"]).returncode != 0, "weights are read-only"
            assert pod.exec(["python3", "-c", "open('/tmp/x', 'w').write('1')"]).returncode == 0
            assert pod.exec(["python3", "-c", "open('/dev/shm/x', 'w').write('1')"]).returncode == 0
            bare = {k: v for k, v in pod.env.items() if k not in ("USER", "LOGNAME")}
            missing = pod.exec(["python3", "-c", "import getpass; getpass.getuser()"], env=bare)
            assert "KeyError" in missing.stderr, "without USER/LOGNAME an unmapped UID has no name (torch 2.11 dies)"

            assert chat(pod.ip, API_KEY)[0] == 200, "the key from the Secret opens the API on the declared port"
            assert chat(pod.ip, None)[0] == 401
            assert all(r.ok for r in pod.watch("livenessProbe", 3)), "liveness stays green while serving"

            answer: dict = {}
            request = threading.Thread(target=lambda: answer.update(
                zip(("status", "body"), chat(pod.ip, API_KEY, max_tokens=600), strict=True)))
            request.start()
            time.sleep(0.5)
            code, stop_seconds, killed = pod.stop()
            request.join(120)
            grace = spec["terminationGracePeriodSeconds"]
            assert answer.get("status") == 200 and answer["body"]["usage"]["completion_tokens"] == 600, \
                "the request in flight when the pod was told to stop is answered in full"
            assert not killed and stop_seconds < grace, f"stopped in {stop_seconds:.1f} s of {grace}"
            print(f"leader pod: stopped in {stop_seconds:.1f} s (grace {grace} s), exit code {code}")
        finally:
            pod.close()


def test_the_smoke_job_pod_passes_against_the_serving_pod(tiny_model, tmp_path):
    objects = objects_for(tiny_model)
    smoke = find(objects, "Job", "smoke")["spec"]["template"]["spec"]
    with PodNetwork() as net:
        server = serving_pod(objects, net, tmp_path, tiny_model)
        try:
            server.start()
            assert server.wait_started()[0], (tmp_path / "leader.log").read_text()[-3000:]
            # No cluster DNS here: the Service name in the Job's URL is replaced by the serving pod's IP.
            command = [a.replace("vllm-leader", server.ip) for a in smoke["containers"][0]["command"]]
            job = Pod(smoke, objects, "vllm", "smoke", net, secrets=SECRETS, image_env=CPU_IMAGE_ENV, image_paths=IMAGE,
                      command=command, log=tmp_path / "smoke.log")
            try:
                job.start()
                assert job.proc.wait(180) == 0, (tmp_path / "smoke.log").read_text()[-2000:]
            finally:
                job.close()
        finally:
            server.close()


def test_the_download_job_pod_writes_the_weights_onto_its_volume_only(tiny_model, tmp_path):
    objects = objects_for(tiny_model)
    job = find(objects, "Job", "download")["spec"]["template"]["spec"]
    claim = next(v["persistentVolumeClaim"]["claimName"] for v in job["volumes"] if "persistentVolumeClaim" in v)
    staging = tmp_path / "staging"
    staging.mkdir()
    staging.chmod(0o2775)  # a fresh ext4 disk is root's; with fsGroup the CSI driver hands it to the group
    os.chown(staging, 0, job["securityContext"]["fsGroup"])
    source = weights_claim(tmp_path, tiny_model) / "model"
    # Offline: the Hugging Face source is replaced by the same files from a local, read-only directory.
    command = job["containers"][0]["command"]
    rest = command[command.index("--dest"):]
    local = [*command[:command.index("--source")], "--source", "local", "--from", "/src", *rest]
    with PodNetwork() as net:
        pod = Pod(job, objects, "vllm", "download", net, claims={claim: staging}, image_env=CPU_IMAGE_ENV,
                  image_paths=IMAGE,
                  command=local, log=tmp_path / "download.log")
        pod.binds += ["--ro-bind", str(source), "/src"]
        try:
            pod.start()
            assert pod.proc.wait(300) == 0, (tmp_path / "download.log").read_text()[-2000:]
        finally:
            pod.close()
    written = {p.name for p in (staging / "model").iterdir()}
    assert "config.json" in written and any(n.endswith(".safetensors") for n in written)
    assert all(p.stat().st_uid == 10001 for p in (staging / "model").iterdir()), "written as the pod's UID"


STAND_IN = """
import http.server, signal, sys, threading
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404); self.end_headers()
    def log_message(self, *a): pass
server = http.server.ThreadingHTTPServer(("0.0.0.0", 8000), H)
signal.signal(signal.SIGTERM, lambda *_: (threading.Thread(target=server.shutdown).start()))
server.serve_forever()
"""


def test_a_two_pod_group_forms_over_ray_and_a_lost_worker_fails_the_leader(tiny_model, tmp_path):
    # prod's layout (two nodes per group) with the tiny model's config: every object as rendered for a group.
    objects = objects_for(tiny_model, "prod", parallelism={"tensor": 1, "pipeline": 2},
                          accelerator={"type": "nvidia-l4", "machineType": "g2-standard-8", "zones": ["us-central1-a"]},
                          weights={"diskType": "pd-ssd"})
    template = find(objects, "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2
    leader_spec, worker_spec = template["leaderTemplate"]["spec"], template["workerTemplate"]["spec"]
    claim = next(v["persistentVolumeClaim"]["claimName"] for v in leader_spec["volumes"]
                 if "persistentVolumeClaim" in v)
    disk = weights_claim(tmp_path, tiny_model)
    (tmp_path / "stand_in.py").write_text(STAND_IN)
    (tmp_path / "stand_in.py").chmod(0o644)
    # vLLM's CPU build cannot use Ray's executor, so the leader's server command (after `--`) is a stand-in that
    # answers /health; the launcher, Ray, the pods' users, mounts, env and probes are as rendered.
    command = leader_spec["containers"][0]["command"]
    stand_in = [*command[:command.index("--") + 1], "python3", "/stand-in/stand_in.py"]
    with PodNetwork() as net:
        leader = Pod(leader_spec, objects, "vllm", "leader", net, claims={claim: disk}, secrets=SECRETS,
                     image_env=CPU_IMAGE_ENV, image_paths=IMAGE, command=stand_in, log=tmp_path / "leader.log",
                     csi=csi_stand_ins(leader_spec, tmp_path / "buckets"))
        leader.binds += ["--ro-bind", str(tmp_path / "stand_in.py"), "/stand-in/stand_in.py"]
        lws_env = {"LWS_LEADER_ADDRESS": leader.ip, "LWS_GROUP_SIZE": "2"}  # the controller's injection (IP: no DNS)
        leader.env.update({**lws_env, "LWS_WORKER_INDEX": "0"})
        worker = Pod(worker_spec, objects, "vllm", "worker", net, claims={claim: disk}, secrets=SECRETS,
                     image_env=CPU_IMAGE_ENV, image_paths=IMAGE, injected_env={**lws_env, "LWS_WORKER_INDEX": "1"},
                     log=tmp_path / "worker.log", csi=csi_stand_ins(worker_spec, tmp_path / "buckets"))
        try:
            leader.start()
            worker.start()
            started, seconds, _ = leader.wait_started()
            assert started, (tmp_path / "leader.log").read_text()[-3000:]
            print(f"two-pod group: leader's startup probe passed after {seconds:.1f} s")
            assert "group complete: 2 nodes" in (tmp_path / "leader.log").read_text()
            assert worker.probe("readinessProbe").ok, "the worker's Ray node manager answers on its declared port"
            assert all(r.ok for r in leader.watch("livenessProbe", 2)), "heartbeat fresh and /health answering"
            who = worker.exec(["python3", "-c", "import os; print(os.getuid())"])
            assert who.stdout.strip() == "10001"

            worker.close()  # the worker's node is gone
            lost = time.monotonic()
            assert leader.proc.wait(120) == 3, (tmp_path / "leader.log").read_text()[-2000:]
            print(f"two-pod group: leader exited 3 {time.monotonic() - lost:.1f} s after the worker was killed")
            assert not leader.probe("livenessProbe").ok, "liveness fails once the group is broken"
        finally:
            worker.close()
            leader.close()


def test_a_killed_runs_bridge_and_namespaces_are_removed_before_a_new_pod_network():
    """Found on the GPU host: a bench run killed mid-way left its bridge on 10.231.0.0/24; the next run's pods were
    unreachable (routed through the stale bridge) and its startup probe timed out after 300 s."""
    import psutil

    dead = next(pid for pid in range(4_000_000, 3_000_000, -1) if not psutil.pid_exists(pid))
    bridge, ns = f"vgkb{dead}", f"vgk{dead}-2"
    for args in (["link", "add", bridge, "type", "bridge"], ["addr", "add", "10.231.0.1/24", "dev", bridge],
                 ["link", "set", bridge, "up"], ["netns", "add", ns]):
        subprocess.run(["ip", *args], check=True)
    try:
        with PodNetwork() as net:
            links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
            assert bridge not in links and ns not in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                                                   text=True).stdout
            _, ip = net.add()
            route = subprocess.run(["ip", "route", "get", ip], capture_output=True, text=True).stdout
            assert f"dev {net.bridge}" in route, route
    finally:
        subprocess.run(["ip", "link", "del", bridge], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def test_a_pod_network_that_fails_midway_leaves_nothing_for_the_next_pod(monkeypatch):
    """Seen in a full run: `ip link add` for a pod's veth exited 2 once, and the namespace it had just made stayed
    behind under the name the next pod of the same run takes, so six more pod tests failed at `ip netns add`."""
    import tools.pod_runner as runner

    real = runner._ip
    failed = []

    def veth_fails_once(*args):
        if args[:2] == ("link", "add") and "veth" in args and not failed:
            failed.append(args)
            raise subprocess.CalledProcessError(2, ["ip", *args])
        real(*args)

    monkeypatch.setattr(runner, "_ip", veth_fails_once)
    with PodNetwork() as net, pytest.raises(subprocess.CalledProcessError):
        net.add()
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"vgk{net.tag}-" not in listed and failed
    with PodNetwork() as again:  # the same run (same pid, same names) starts its next pod
        ns, _ = again.add()
        assert ns == f"vgk{again.tag}-2"


UI_VENV = Path(__file__).resolve().parents[2] / ".venv-ui"


@pytest.mark.skipif(not (UI_VENV / "bin" / "python").exists(), reason="make test creates .venv-ui (Gradio, Selenium)")
def test_the_chat_page_pod_answers_from_the_serving_pod_in_a_real_browser(tiny_model, tmp_path):
    """The chat page's Deployment as rendered (UID 10001, read-only root, the app from its ConfigMap, HOME on the
    /tmp emptyDir, probes on the named port) in front of the serving pod; Chromium on the host opens the page on the
    pod's IP and gets a streamed answer."""
    objects = objects_for(tiny_model, serving={"chatUi": True})
    page_spec = find(objects, "Deployment", "chat-ui")["spec"]["template"]["spec"]
    ui_env = {"PATH": f"{UI_VENV / 'bin'}:/usr/local/bin:/usr/bin:/bin"}  # the chat image: its Python first
    with PodNetwork() as net:
        server = serving_pod(objects, net, tmp_path, tiny_model)
        page = Pod(page_spec, objects, "vllm", "chat-ui", net, secrets=SECRETS, image_env=ui_env,
                   image_paths=(os.path.realpath(UI_VENV),),
                   log=tmp_path / "chat-ui.log")
        try:
            server.start()
            assert server.wait_started()[0], (tmp_path / "leader.log").read_text()[-3000:]
            # No cluster DNS here: the Service name in VLLM_URL is replaced by the serving pod's IP.
            assert page.env["VLLM_URL"] == "http://vllm-leader:8000", page.env["VLLM_URL"]
            page.env["VLLM_URL"] = f"http://{server.ip}:8000"
            page.start()
            started, seconds, _ = page.wait_started()
            assert started, (tmp_path / "chat-ui.log").read_text()[-3000:]
            print(f"chat page pod: startup probe passed after {seconds:.1f} s")
            assert page.probe("readinessProbe").ok and page.probe("livenessProbe").ok
            who = page.exec(["python3", "-c", "import os; print(os.getuid(), os.environ['HOME'])"])
            assert who.stdout.split() == ["10001", "/tmp"], who.stderr
            assert page.exec(["python3", "-c", "open('/opt/chat-ui/app.py', 'a')"]).returncode != 0
            port = page_spec["containers"][0]["ports"][0]["containerPort"]
            done = subprocess.run([str(UI_VENV / "bin" / "python"), str(Path(__file__).parents[1] / "browser" /
                                   "chat_page.py"), "--url", f"http://{page.ip}:{port}", "--message", "hello"],
                                  capture_output=True, text=True, timeout=300)
            seen = json.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else {}
            final = seen.get("final", "")
            assert final and "cannot be reached" not in final and "rejected" not in final, (seen, done.stderr[-2000:])
            assert len(seen["snapshots"]) >= 3, f"the answer did not stream: {len(seen['snapshots'])} texts"
        finally:
            page.close()
            server.close()


def test_the_detach_wait_job_pod_reads_volume_attachments_with_its_token_over_tls(tmp_path):
    """The detach-wait Job as rendered, against an HTTPS stand-in for the API server on this host: it finds the
    server from KUBERNETES_SERVICE_HOST/PORT, verifies it with the mounted ca.crt, sends the mounted token, and
    completes once the staging PV has had no VolumeAttachment for three polls."""
    import http.server
    import ssl

    from tools.pod_runner import HOST_IP

    objects = run_program(full_config(apiKey={"secure": "v1:k"})).kubernetes_objects()
    job = find(objects, "Job", "detached")["spec"]["template"]["spec"]
    command = job["containers"][0]["command"]
    pv = command[command.index("--pv") + 1]
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=api",
                    "-addext", f"subjectAltName=IP:{HOST_IP}", "-keyout", str(tmp_path / "key.pem"),
                    "-out", str(tmp_path / "cert.pem")], check=True, capture_output=True)
    token, seen = "t0k3n-for-the-detach-job", []
    attached = {"spec": {"nodeName": "node-a", "source": {"persistentVolumeName": pv}}}

    class Api(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append((self.path, self.headers.get("Authorization")))
            items = [attached] if len(seen) <= 2 else []  # detached after the second list
            self.send_response(200 if self.headers.get("Authorization") == f"Bearer {token}" else 401)
            self.end_headers()
            self.wfile.write(json.dumps({"kind": "VolumeAttachmentList", "items": items}).encode())

        def log_message(self, *_):
            pass

    with PodNetwork() as net:
        server = http.server.ThreadingHTTPServer((HOST_IP, 0), Api)
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
        server.socket = tls.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        # The rendered command with a short poll interval; the API address comes from kubelet's env, as in a pod.
        pod = Pod(job, objects, "vllm", "detach", net, image_env=CPU_IMAGE_ENV, image_paths=IMAGE,
                  command=[*command, "--interval", "0.2"], log=tmp_path / "detach.log",
                  injected_env={"KUBERNETES_SERVICE_HOST": HOST_IP,
                                "KUBERNETES_SERVICE_PORT": str(server.server_port)},
                  service_account={"token": token, "ca.crt": (tmp_path / "cert.pem").read_text()})
        try:
            pod.start()
            code = pod.proc.wait(60)
        finally:
            pod.close()
            server.shutdown()
    log = (tmp_path / "detach.log").read_text()
    assert code == 0, log[-2000:]
    assert f"{pv}: still attached to node-a" in log and "attached to no node" in log, log
    assert seen and all(auth == f"Bearer {token}" for _, auth in seen), seen
    assert len(seen) == 5 and seen[0][0] == "/apis/storage.k8s.io/v1/volumeattachments"


def test_a_second_leader_pod_starts_from_the_compile_cache_the_first_published(tiny_model, tmp_path):
    """vllm.compileCache as rendered: the bucket's CSI volume (here a directory owned as GCS FUSE's uid/gid options
    make it) at the launcher's store; the first pod publishes once it serves, the next one restores before vLLM
    starts."""
    objects = objects_for(tiny_model)
    spec = find(objects, "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    claim = next(v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"] if "persistentVolumeClaim" in v)
    buckets = csi_stand_ins(spec, tmp_path / "buckets")
    store = buckets["compile-cache"]
    disk = weights_claim(tmp_path, tiny_model)
    logs = []
    with PodNetwork() as net:
        for name in ("first", "second"):
            pod = Pod(spec, objects, "vllm", name, net, claims={claim: disk}, secrets=SECRETS, image_env=CPU_IMAGE_ENV,
                      image_paths=IMAGE, csi=buckets, log=tmp_path / f"{name}.log")
            try:
                pod.start()
                assert pod.wait_started()[0], (tmp_path / f"{name}.log").read_text()[-3000:]
                deadline = time.monotonic() + 60
                while "compile cache: published" not in pod.log.read_text() and name == "first" \
                        and time.monotonic() < deadline:
                    time.sleep(1)
                time.sleep(3)
            finally:
                pod.close()
            logs.append(pod.log.read_text())
    archives = list(store.rglob("pod-0.tar"))
    assert len(archives) == 1 and archives[0].stat().st_uid == 10001, archives
    assert "compile cache: published" in logs[0], logs[0][-3000:]
    assert "compile cache: restored" in logs[1] and "exists; not published again" in logs[1], logs[1][-3000:]


def test_the_headroom_placeholder_and_weights_cache_pods_run_as_declared_and_leave_at_once_on_sigterm(
        tiny_model, tmp_path):
    """autoscaling.headroom's pods (components/headroom.py): the placeholder holds its slot doing nothing; the
    weights cache reads every file of the read-only weights claim once. Both under UID 10001 with a read-only root,
    both exit 0 on SIGTERM well inside their grace period (preemption must not wait on them)."""
    objects = objects_for(tiny_model, autoscaling={"minReplicas": 1, "maxReplicas": 2, "headroom": 1})
    disk = weights_claim(tmp_path, tiny_model)
    size = sum(p.stat().st_size for p in disk.rglob("*") if p.is_file())
    with PodNetwork() as net:
        for kind, name in (("Deployment", "-headroom"), ("DaemonSet", "weights-cache")):
            spec = find(objects, kind, name)["spec"]["template"]["spec"]
            claims = {v["persistentVolumeClaim"]["claimName"]: disk for v in spec["volumes"]
                      if "persistentVolumeClaim" in v}
            log = tmp_path / f"{kind}.log"
            pod = Pod(spec, objects, "vllm", kind.lower(), net, claims=claims, image_env=CPU_IMAGE_ENV,
                      image_paths=IMAGE, log=log)
            try:
                pod.start()
                deadline = time.monotonic() + 60
                while "holding the slot" not in log.read_text() and time.monotonic() < deadline:
                    assert pod.alive(), log.read_text()[-2000:]
                    time.sleep(0.2)
                text = log.read_text()
                assert "holding the slot until SIGTERM" in text, text[-2000:]
                if claims:
                    assert f"read {size / 2**30:.2f} GiB under /models" in text, text
                who = pod.exec(["python3", "-c", "import os; print(os.getuid())"])
                assert who.stdout.strip() == "10001"
                assert pod.exec(["python3", "-c", "open('/opt/x', 'w')"]).returncode != 0, "read-only root"
                code, seconds, killed = pod.stop()
                grace = spec["terminationGracePeriodSeconds"]
                assert code == 0 and not killed and seconds < grace, (kind, code, seconds, killed)
                assert "SIGTERM: giving the slot up" in log.read_text()
            finally:
                pod.close()


def test_a_data_parallel_leader_pod_runs_two_engines_behind_one_api_server_as_declared(tiny_model, tmp_path):
    """parallelism.data = 2 on a two-GPU node: the rendered leader starts vLLM's data-parallel engine in its one pod
    (own network namespace, UID, read-only root), one API server balances requests over both engines, and each engine
    reports its own series under the `engine` label that the HPA's selector reads. The expert-parallel flag is the
    GPU run's (docs/benchmarks.md "Layouts"): vLLM 0.32.0's CPU build cannot dispatch to experts across data-parallel
    ranks (its CPU communicator has no all_gatherv), so this CPU pod serves a dense model."""
    objects = objects_for(tiny_model, accelerator={"type": "nvidia-l4", "machineType": "g2-standard-24",
                                                   "zones": ["us-central1-a"]}, parallelism={"data": 2})
    lws = find(objects, "LeaderWorkerSet")
    spec = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    command = spec["containers"][0]["command"]
    assert command[command.index("--data-parallel-size") + 1] == "2"
    assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    hpa = find(objects, "HorizontalPodAutoscaler")["spec"]["metrics"][0]["pods"]["metric"]
    engine = hpa["selector"]["matchLabels"]["metric.labels.engine"]
    with PodNetwork() as net:
        pod = serving_pod(objects, net, tmp_path, tiny_model)
        try:
            pod.start()
            started, seconds, results = pod.wait_started()
            assert started, f"{len(results)} failed probes: {(tmp_path / 'leader.log').read_text()[-3000:]}"
            print(f"data-parallel leader pod: startup probe passed after {seconds:.1f} s")
            log = (tmp_path / "leader.log").read_text(errors="replace")
            assert "EngineCore_DP0" in log and "EngineCore_DP1" in log
            for _ in range(6):
                assert chat(pod.ip, API_KEY)[0] == 200
            request = urllib.request.Request(f"http://{pod.ip}:8000/metrics")
            with urllib.request.urlopen(request, timeout=30) as response:
                metrics = response.read().decode()
            generated = {line.split('engine="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
                         for line in metrics.splitlines() if line.startswith("vllm:generation_tokens_total{")}
            assert set(generated) == {"0", "1"} and all(v > 0 for v in generated.values()), generated
            waiting = [line for line in metrics.splitlines() if line.startswith("vllm:num_requests_waiting{")]
            assert any(f'engine="{engine}"' in line for line in waiting), "the series the HPA selects exists"
        finally:
            pod.close()
